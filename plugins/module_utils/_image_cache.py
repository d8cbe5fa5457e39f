# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The base image cache: distro cloud images streamed from HTTP into a libvirt pool.

Public API (used by kvm_base_image and kvm_proxy)::

    spec = ImageSpec(name="debian-13", url="https://.../debian-13-generic-amd64.qcow2",
                     checksum="sha256:<64 hex>" | "sha256:https://.../SHA256SUMS" | None,
                     format="qcow2" | "raw")
    result = ensure_image(hypervisor, pool_name, spec, check_mode=False, http=None,
                          timeout=60, retries=3, validate_certs=True, lock_timeout=3600,
                          max_virtual_size=None)
    result.volume, result.path, result.format, result.sha256, result.size,
    result.downloaded, result.changed, result.bytes, result.seconds, result.throughput,
    result.actions, result.diff(), result.as_dict()

    removal = remove_image(hypervisor, pool_name, spec, check_mode=False, ...)   # state=absent
    removal = prune_images(hypervisor, pool_name, image_name, keep=(volume,), check_mode=False)
    removal.removed, removal.kept, removal.changed, removal.actions, removal.diff(), removal.as_dict()

    with volume_lock(uri, pool_name, volume_name, timeout): ...   # hold a base while using it

How the cache lives in the pool (the pool is the only state):

- A base volume per image content. With a checksum it is content-addressed,
  ``base-<image>-<first 16 hex of sha256>.<fmt>``, so a new upstream release
  lands next to the old base instead of replacing a file that overlays still
  back onto. Without a checksum it is ``base-<image>.<fmt>`` and, once cached,
  is never fetched again.
- A marker volume ``<base>.sha256`` holding the 64 hex digits of the verified
  upload, written last. Base + well-formed marker (+ the expected digest when
  a checksum is given) is what "ready" means; anything else is the leftover
  of an interrupted attempt and is removed before fetching again.
- No operation here deletes a base volume that another volume of the pool
  uses as its backing store (found by reading every volume's XML): removing
  such a base fails and names the volumes that use it.
- A base is self-contained: an image whose header names a backing file or
  an external data file would let every VM on it read that file of the
  hypervisor, so it is refused from its first bytes (_image_header), and a
  base that libvirt reports with a backing store after the refresh is
  deleted before its marker is written.

The download is streamed: the HTTP body is read in chunks that are hashed on
the way and sent straight into libvirt's upload stream, so memory stays flat
and nothing touches the local disk. Its head (the qcow2 header, within the
first cluster) is read before the volume is created, so an image refused
for its header, format or virtual size writes nothing; check mode reads the
same head with a Range request, which is how it knows the virtual size.
The base is created as a raw volume of exactly Content-Length bytes because
libvirt's upload overwrites a file without truncating it: a qcow2 volume
pre-created by libvirt can be larger than the image and would keep a tail
of its own metadata (measured on libvirt 9.0). The pool refresh afterwards
lets libvirt probe the real format and virtual size.

Concurrent runs on the same machine (parallel playbooks, async tasks, several
controllers running the module on the hypervisor) serialise on an flock per
(uri, pool, volume) under /run/lock, so the image is downloaded once: the
second run waits, then finds it ready.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import hashlib
import os
import re
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import unquote, urljoin, urlsplit

try:
    import requests

    REQUESTS_IMPORT_ERROR = None
except ImportError:
    requests = None
    REQUESTS_IMPORT_ERROR = traceback.format_exc()

from ansible_collections.egress_proxies.kvm.plugins.module_utils._errors import (
    KvmError,
    NotFoundError,
    PermanentError,
    TransientError,
    ValidationError,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image_header import (
    MAX_HEADER_BYTES,
    NeedMoreBytes,
    parse_image_header,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._names import (
    MARKER_SUFFIX,
    base_volume_name,
    marker_volume_name,
    parse_base_volume_name,
    validate_disk_format,
    validate_image_name,
    validate_pool_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._volume_xml import (
    VolumeSpec,
    build_volume_element,
    parse_volume_xml,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._xml import etree, to_string

REQUESTS_REQUIREMENT = ("requests", "python3-requests on Debian/Ubuntu/RHEL, requests from PyPI", REQUESTS_IMPORT_ERROR)

DEFAULT_TIMEOUT = 60
DEFAULT_RETRIES = 3
DEFAULT_LOCK_TIMEOUT = 3600
DEFAULT_BACKOFF = 2.0
MAX_BACKOFF = 60.0

CHUNK_SIZE = 1024 * 1024

# A SHA256SUMS file lists a few dozen images; anything much larger is not one.
MAX_CHECKSUM_FILE_BYTES = 4 * 1024 * 1024
# Check mode's header read: small chunks, so only about what the header needs is read.
PROBE_CHUNK_SIZE = 64 * 1024
GIB = 1024 ** 3
LOCK_DIR_NAME = "egress_proxies_kvm-locks"
USER_AGENT = "egress_proxies.kvm kvm_base_image"

_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
# What a server answers to "Range: bytes=0-N": the bytes sent and the image's length ("*" if unknown).
_CONTENT_RANGE = re.compile(r"bytes 0-[0-9]+/(?P<length>[0-9]+|\*)")
# "<hex>  <file>" (text mode) and "<hex> *<file>" (binary mode) of sha256sum,
# and the BSD form "SHA256 (<file>) = <hex>".
_GNU_SUM_LINE = re.compile(r"(?P<digest>[0-9a-fA-F]{64}) [ *](?P<file>.+)")
_BSD_SUM_LINE = re.compile(r"SHA256 \((?P<file>.+)\) = (?P<digest>[0-9a-fA-F]{64})")

STATE_PRESENT = "present"
STATE_ABSENT = "absent"
# A base without a valid marker, or a marker without its base: what a killed run leaves.
STATE_INCOMPLETE = "incomplete"


# --- download options ------------------------------------------------------------------------

def download_argument_spec():
    """The download options of every module that caches images (docs: the image_download doc fragment)."""
    return dict(
        validate_certs=dict(type="bool", default=True),
        timeout=dict(type="int", default=DEFAULT_TIMEOUT),
        retries=dict(type="int", default=DEFAULT_RETRIES),
        lock_timeout=dict(type="int", default=DEFAULT_LOCK_TIMEOUT),
    )


def validate_download_options(timeout, retries, lock_timeout):
    """Refuse download options that could never work, before anything is fetched."""
    for option, value in (("timeout", timeout), ("lock_timeout", lock_timeout)):
        if value <= 0:
            raise ValidationError("%s must be a positive number of seconds, got %d" % (option, value))
    if retries < 0:
        raise ValidationError("retries must be 0 or more, got %d" % retries)


# --- the image ---------------------------------------------------------------------------------

def _check_http_url(url, what):
    if not isinstance(url, str):
        raise ValidationError("%s %r is not an http(s) URL" % (what, url))
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError("%s %r is not an http(s) URL: only http:// and https:// are supported" % (what, url))
    return url


@dataclass(frozen=True)
class ImageSpec:
    """One cloud image: its cache name, where it comes from, how to verify it, its disk format.

    ``checksum`` is ``sha256:<64 hex>`` (pinned) or ``sha256:<http(s) URL of a
    SHA256SUMS file>`` (the entry for the image URL's file name is used), or
    None. ``url`` may be None only for removal.
    """

    name: str
    url: Optional[str] = None
    checksum: Optional[str] = None
    format: str = "qcow2"

    def __post_init__(self):
        validate_image_name(self.name)
        validate_disk_format(self.format)
        if self.url is not None:
            _check_http_url(self.url, "url")
        if self.checksum is not None:
            algorithm, _sep, value = self.checksum.partition(":") if isinstance(self.checksum, str) else ("", "", "")
            if algorithm.lower() != "sha256" or not value:
                raise ValidationError(
                    "checksum %r is not supported: use sha256:<64 hex digits> or sha256:<http(s) URL of a "
                    "SHA256SUMS file>" % (self.checksum,))
            if not _SHA256_HEX.fullmatch(value):
                _check_http_url(value, "checksum file URL")
                if self.url is None:
                    raise ValidationError("checksum %r names a SHA256SUMS file; url is needed to find the image's "
                                          "entry in it" % (self.checksum,))

    @property
    def pinned_sha256(self):
        """The digest given inline (lowercase), or None."""
        value = self._checksum_value()
        return value.lower() if value is not None and _SHA256_HEX.fullmatch(value) else None

    @property
    def checksum_url(self):
        """The URL of the SHA256SUMS file the digest comes from, or None."""
        value = self._checksum_value()
        return value if value is not None and not _SHA256_HEX.fullmatch(value) else None

    @property
    def file_name(self):
        """The image's file name as it appears in a SHA256SUMS file."""
        return unquote(urlsplit(self.url).path.rsplit("/", 1)[-1])

    def _checksum_value(self):
        return None if self.checksum is None else self.checksum.partition(":")[2]

    def require_url(self):
        if self.url is None:
            raise ValidationError("image %r needs a url to be cached" % (self.name,))


def find_in_checksum_file(text, file_name):
    """The sha256 listed for ``file_name`` in the text of a SHA256SUMS file, or None."""
    for line in text.splitlines():
        line = line.strip()
        match = _GNU_SUM_LINE.fullmatch(line) or _BSD_SUM_LINE.fullmatch(line)
        if match is None:
            continue
        listed = match.group("file").strip()
        if listed.startswith("./"):
            listed = listed[2:]
        if listed == file_name:
            return match.group("digest").lower()
    return None


# --- results -----------------------------------------------------------------------------------


@dataclass
class ImageResult:
    """What ensure_image found or did.

    ``path`` is None when check mode predicts a download; ``size`` (the
    virtual size in bytes) then comes from the image's header, or is the
    length of a raw image (None if the server did not say it).
    """

    volume: str
    path: Optional[str]
    format: str
    sha256: Optional[str]
    size: Optional[int]
    downloaded: bool
    changed: bool
    bytes: int = 0
    seconds: float = 0.0
    actions: list = field(default_factory=list)
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)

    @property
    def throughput(self):
        """Download speed in bytes per second (0 when nothing was downloaded)."""
        return int(self.bytes / self.seconds) if self.seconds > 0 else 0

    def diff(self):
        return {"before": dict(self.before), "after": dict(self.after)}

    def as_dict(self):
        """The module result. The path is ``volume_path``: AnsibleModule.exit_json treats a ``path``
        key as a local file and overwrites ``size`` with its stat, which would make results differ
        between a module on the hypervisor and one reaching it over qemu+ssh."""
        return {
            "changed": self.changed,
            "volume": self.volume,
            "volume_path": self.path,
            "format": self.format,
            "sha256": self.sha256,
            "size": self.size,
            "downloaded": self.downloaded,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "throughput": self.throughput,
            "actions": list(self.actions),
        }


@dataclass
class RemovalResult:
    """What remove_image or prune_images removed, and the bases kept because volumes use them.

    ``kept`` lists ``{"volume": base, "used_by": [volume, ...]}``.
    ``bases_before``/``bases_after`` are the image's base volumes in the pool.
    """

    removed: list = field(default_factory=list)
    kept: list = field(default_factory=list)
    actions: list = field(default_factory=list)
    bases_before: list = field(default_factory=list)
    bases_after: list = field(default_factory=list)

    @property
    def changed(self):
        return bool(self.removed)

    def diff(self):
        return {"before": {"bases": list(self.bases_before)}, "after": {"bases": list(self.bases_after)}}

    def as_dict(self):
        return {"changed": self.changed, "removed": list(self.removed), "kept": [dict(k) for k in self.kept],
                "actions": list(self.actions)}


# --- the inter-process lock ----------------------------------------------------------------------


def default_lock_dir():
    """Where lock files live: /run/lock (tmpfs, shared by every user) or the temp dir."""
    base = "/run/lock" if os.path.isdir("/run/lock") and os.access("/run/lock", os.W_OK | os.X_OK) else tempfile.gettempdir()
    return os.path.join(base, LOCK_DIR_NAME)


def lock_path(uri, pool_name, volume_name, lock_dir=None):
    key = "\n".join((uri, pool_name, volume_name))
    return os.path.join(lock_dir or default_lock_dir(), hashlib.sha256(key.encode("utf-8")).hexdigest() + ".lock")


def _open_lock_file(path):
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        try:
            os.makedirs(directory)
            # Shared by every user that runs the module here (sticky, like /tmp).
            os.chmod(directory, 0o1777)
        except FileExistsError:
            pass
    # Open an existing file without O_CREAT: with fs.protected_regular, O_CREAT
    # on another user's file in a sticky directory fails even when it exists.
    # flock needs no write access, so read-only is enough.
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        pass
    try:
        return os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return os.open(path, os.O_RDONLY)


@contextmanager
def volume_lock(uri, pool_name, volume_name, timeout=DEFAULT_LOCK_TIMEOUT, lock_dir=None):
    """Hold the machine-wide lock of one volume of one pool of one hypervisor.

    Waits up to ``timeout`` seconds for another run holding it, then raises
    TransientError. Lock files are never deleted: removing one while another
    process waits on it would let a third process lock a new file beside it.
    The kernel drops the lock when the process dies, however it dies.
    """
    path = lock_path(uri, pool_name, volume_name, lock_dir)
    try:
        fd = _open_lock_file(path)
    except OSError as exc:
        raise PermanentError("cannot open lock file %s for volume '%s': %s" % (path, volume_name, exc.strerror)) from exc
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise PermanentError("cannot lock %s for volume '%s': %s" % (path, volume_name, exc.strerror)) from exc
            if time.monotonic() >= deadline:
                raise TransientError(
                    "timed out after %ss waiting for another run that holds the lock of volume '%s' in pool '%s' "
                    "(lock file %s); it is probably still downloading the image, retry later"
                    % (timeout, volume_name, pool_name, path))
            time.sleep(0.2)
        yield path
    finally:
        os.close(fd)


# --- HTTP ----------------------------------------------------------------------------------------


class _Retryable(Exception):
    """An HTTP-side failure worth another attempt (5xx, network, short body)."""


def _refuse_non_http_redirect(response, *args, **kwargs):
    if response.is_redirect:
        target = urljoin(response.url, response.headers.get("location", ""))
        if urlsplit(target).scheme not in ("http", "https"):
            raise PermanentError("%s redirects to %s; only http and https redirects are followed" % (response.url, target))
    return response


def _get(session, url, timeout, validate_certs, first_bytes=None):
    """GET ``url`` (its ``first_bytes`` only, if given) as a stream; map transport failures onto _Retryable or PermanentError."""
    # The body is hashed as it arrives: a transparently decompressed
    # body would neither match Content-Length nor the published digest.
    headers = {"Accept-Encoding": "identity", "User-Agent": USER_AGENT}
    if first_bytes is not None:
        headers["Range"] = "bytes=0-%d" % (first_bytes - 1)
    try:
        return session.get(
            url,
            stream=True,
            timeout=timeout,
            verify=validate_certs,
            headers=headers,
            hooks={"response": [_refuse_non_http_redirect]},
        )
    except requests.exceptions.SSLError as exc:
        raise PermanentError("TLS verification of %s failed: %s; install the CA certificate on the host that runs "
                             "the module, or set validate_certs to false" % (url, exc)) from exc
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        raise _Retryable("fetching %s failed: %s" % (url, exc)) from exc
    except requests.exceptions.RequestException as exc:
        raise PermanentError("fetching %s failed: %s" % (url, exc)) from exc


def _check_status(response, url):
    status = response.status_code
    if 200 <= status < 300:
        return
    reason = "HTTP %d %s" % (status, response.reason or "")
    if 400 <= status < 500:
        raise PermanentError("%s answered %s; check the URL" % (url, reason.strip()))
    raise _Retryable("%s answered %s" % (url, reason.strip()))


def _content_length(response, url):
    """The body's length from Content-Length; the base volume is created with exactly that size."""
    length = response.headers.get("Content-Length")
    if length is None or not length.isdigit():
        raise PermanentError("%s sent no Content-Length; the base volume needs a known size, so serve the image "
                             "from a server that sends it" % url)
    if int(length) == 0:
        raise PermanentError("%s is empty (Content-Length: 0)" % url)
    return int(length)


def _with_retries(attempt, retries, backoff, what):
    """Call ``attempt()`` up to retries + 1 times while it raises _Retryable, sleeping in between."""
    failures = []
    for number in range(retries + 1):
        if number:
            time.sleep(min(backoff * 2 ** (number - 1), MAX_BACKOFF))
        try:
            return attempt()
        except _Retryable as exc:
            failures.append(str(exc))
    raise TransientError("%s failed after %d attempt(s); last error: %s" % (what, len(failures), failures[-1]))


def resolve_sha256(spec, session, timeout=DEFAULT_TIMEOUT, retries=DEFAULT_RETRIES, validate_certs=True,
                   backoff=DEFAULT_BACKOFF):
    """The sha256 the image must have: pinned, looked up in its SHA256SUMS file, or None.

    Reading the SHA256SUMS file is a GET that changes nothing, so check mode
    does it too: the digest decides the volume name.
    """
    if spec.pinned_sha256 is not None or spec.checksum_url is None:
        return spec.pinned_sha256
    url = spec.checksum_url

    def fetch():
        response = _get(session, url, timeout, validate_certs)
        try:
            _check_status(response, url)
            body = bytearray()
            try:
                for chunk in response.iter_content(64 * 1024):
                    body += chunk
                    if len(body) > MAX_CHECKSUM_FILE_BYTES:
                        raise PermanentError("%s is larger than %d bytes; it is not a SHA256SUMS file"
                                             % (url, MAX_CHECKSUM_FILE_BYTES))
            except (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError,
                    requests.exceptions.Timeout) as exc:
                raise _Retryable("reading %s failed: %s" % (url, exc)) from exc
            return bytes(body).decode("utf-8", "replace")
        finally:
            response.close()

    text = _with_retries(fetch, retries, backoff, "fetching checksum file %s" % url)
    digest = find_in_checksum_file(text, spec.file_name)
    if digest is None:
        raise PermanentError("checksum file %s has no sha256 entry for %r (the file name of %s); check url and checksum"
                             % (url, spec.file_name, spec.url))
    return digest


# --- reading the pool ----------------------------------------------------------------------------


@dataclass
class _Cached:
    """What the pool holds for one base volume name."""

    base: object = None
    marker: object = None
    marker_digest: Optional[str] = None

    def ready(self, sha256):
        return (self.base is not None and self.marker_digest is not None
                and (sha256 is None or self.marker_digest == sha256))

    @property
    def state(self):
        if self.base is None and self.marker is None:
            return STATE_ABSENT
        return STATE_PRESENT if self.base is not None and self.marker_digest is not None else STATE_INCOMPLETE


def _lookup_pool(hypervisor, pool_name):
    try:
        return hypervisor.lookup_pool(pool_name)
    except NotFoundError as exc:
        raise PermanentError("storage pool '%s' does not exist on the hypervisor; create it (virsh pool-define-as) "
                             "or set pool to an existing one" % pool_name, exc.code, exc.libvirt_message) from exc


def _lookup_volume(hypervisor, pool, name):
    try:
        return hypervisor.lookup_volume(pool, name)
    except NotFoundError:
        return None


def _read_marker(hypervisor, marker):
    """The digest a marker records, or None when it is truncated or garbage (a run died writing it)."""
    content = b"".join(hypervisor.download_volume(marker, limit=128)).strip()
    try:
        text = content.decode("ascii")
    except UnicodeDecodeError:
        return None
    return text.lower() if _SHA256_HEX.fullmatch(text) else None


def _inspect(hypervisor, pool, volume, marker_name):
    cached = _Cached(base=_lookup_volume(hypervisor, pool, volume), marker=_lookup_volume(hypervisor, pool, marker_name))
    if cached.marker is not None:
        try:
            cached.marker_digest = _read_marker(hypervisor, cached.marker)
        except NotFoundError:
            cached.marker = None
    return cached


def _volume_info(hypervisor, vol):
    return parse_volume_xml(hypervisor.volume_xml(vol))


def find_users(hypervisor, pool, base_path):
    """Names of the pool's volumes whose backing store is ``base_path``, sorted."""
    users = []
    for vol in hypervisor.list_volumes(pool):
        try:
            info = _volume_info(hypervisor, vol)
        except NotFoundError:
            continue  # deleted while we were listing: it uses nothing any more
        if info.backing_path is not None and info.backing_path == base_path:
            users.append(info.name)
    return sorted(users)


def _in_use_error(volume, pool_name, users, what):
    return PermanentError(
        "%s: base volume '%s' in pool '%s' is the backing store of %s; delete the VMs whose disks use it first "
        "(a base volume is never removed while an overlay backs onto it)"
        % (what, volume, pool_name, ", ".join("'%s'" % u for u in users)))


def _delete(hypervisor, vol):
    try:
        hypervisor.delete_volume(vol)
    except NotFoundError:
        pass  # already gone: that is what we wanted


def _remove_leftovers(hypervisor, pool, pool_name, cached, volume, marker_name, check_mode, actions):
    """Remove what an interrupted attempt left, unless a volume backs onto the base."""
    if cached.base is not None:
        users = find_users(hypervisor, pool, _volume_info(hypervisor, cached.base).path)
        if users:
            raise _in_use_error(
                volume, pool_name, users,
                "cannot refetch image into '%s' (its marker '%s' is missing or does not match)" % (volume, marker_name))
    if cached.marker is not None:
        actions.append("delete leftover marker volume %s" % marker_name)
        if not check_mode:
            _delete(hypervisor, cached.marker)
    if cached.base is not None:
        actions.append("delete leftover base volume %s" % volume)
        if not check_mode:
            _delete(hypervisor, cached.base)


# --- fetching ----------------------------------------------------------------------------------


def _raw_volume_xml(name, capacity):
    element = build_volume_element(VolumeSpec(name=name, capacity_bytes=capacity, disk_format="raw"))
    # Sparse: the upload writes every byte anyway, preallocating would write the size twice.
    allocation = etree.Element("allocation", unit="bytes")
    allocation.text = "0"
    element.find("capacity").addnext(allocation)
    return to_string(element)


class _Body:
    """The HTTP body as chunks for upload_volume, hashed and counted on the way; its header is read first."""

    def __init__(self, response, url, length):
        self._url = url
        self.length = length
        self.hash = hashlib.sha256()
        self.received = 0
        self._received_chunks = self._receive(response)
        self._head = b""

    def read_header(self):
        """The image's header, read off the start of the body; those bytes are the first chunk uploaded."""
        header, self._head = _read_header(self._received_chunks, self.length, self._url)
        return header

    def chunks(self):
        head, self._head = self._head, b""
        if head:
            yield head
        yield from self._received_chunks

    def _receive(self, response):
        try:
            for chunk in response.iter_content(CHUNK_SIZE):
                if not chunk:
                    continue
                self.received += len(chunk)
                if self.received > self.length:
                    raise _Retryable("%s sent more than its Content-Length of %d bytes" % (self._url, self.length))
                self.hash.update(chunk)
                yield chunk
        except (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError,
                requests.exceptions.Timeout) as exc:
            raise _Retryable("reading %s failed after %d of %d bytes: %s" % (self._url, self.received, self.length, exc)) from exc
        # urllib3 1.26 (Debian 12) does not enforce Content-Length: a connection
        # closed early just ends the body, so count.
        if self.received != self.length:
            raise _Retryable("%s ended after %d of its %d bytes" % (self._url, self.received, self.length))


def _read_header(chunks, length, url):
    """Read ``chunks`` until the image's header is known: (ImageHeader, the bytes read)."""
    head = bytearray()
    header = parse_image_header(head, length, url)
    while isinstance(header, NeedMoreBytes):
        chunk = next(chunks, None)
        if chunk is None:
            raise _Retryable("%s ended after %d bytes, inside the image's header" % (url, len(head)))
        head += chunk
        header = parse_image_header(head, length, url)
    return header, bytes(head)


def _gib(size):
    return ("%.2f" % (size / GIB)).rstrip("0").rstrip(".")


def _check_virtual_size(size, url, max_virtual_size):
    if max_virtual_size is not None and size is not None and size > max_virtual_size:
        raise ValidationError("image %s has a virtual size of %d bytes (%s GiB), more than the maximum of %d bytes "
                              "(%s GiB)" % (url, size, _gib(size), max_virtual_size, _gib(max_virtual_size)))


def _not_self_contained(url, what_it_needs, outcome):
    return ("image %s %s: a base image must be self-contained, or every VM on it could read that file of the "
            "hypervisor; %s. Use an image without backing or data files (qemu-img convert -O qcow2 makes one)"
            % (url, what_it_needs, outcome))


def _check_header(header, spec, max_virtual_size):
    """Refuse an image whose header makes it unfit to be this base, before anything is written."""
    if spec.format == "qcow2" and header.format != "qcow2":
        raise PermanentError("%s is not a qcow2 image (no qcow2 header); set format to raw if it is a raw disk image"
                             % spec.url)
    if spec.format == "raw" and header.format == "qcow2":
        raise PermanentError("%s is a qcow2 image but format is raw; set format to qcow2" % spec.url)
    if not header.self_contained:
        raise PermanentError(_not_self_contained(
            spec.url, "names %s in its qcow2 header" % " and ".join(header.external_files()), "nothing was cached"))
    _check_virtual_size(header.virtual_size, spec.url, max_virtual_size)


def _probe_once(session, spec, timeout, validate_certs):
    """The image's header, from a request for its first bytes (a server that sends it all is read no further)."""
    url = spec.url
    response = _get(session, url, timeout, validate_certs, first_bytes=MAX_HEADER_BYTES)
    try:
        # 416 Range Not Satisfiable: not even byte 0 exists.
        if response.status_code == 416:
            raise PermanentError("%s is empty" % url)
        _check_status(response, url)
        if response.status_code == 206:
            content_range = response.headers.get("Content-Range", "")
            match = _CONTENT_RANGE.fullmatch(content_range.strip())
            if match is None:
                raise PermanentError("%s answered a request for its first bytes with Content-Range %r"
                                     % (url, content_range))
            length = None if match.group("length") == "*" else int(match.group("length"))
        else:
            length = _content_length(response, url)

        def chunks():
            try:
                for chunk in response.iter_content(PROBE_CHUNK_SIZE):
                    if chunk:
                        yield chunk
            except (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError,
                    requests.exceptions.Timeout) as exc:
                raise _Retryable("reading the header of %s failed: %s" % (url, exc)) from exc

        return _read_header(chunks(), length, url)[0]
    finally:
        response.close()


@dataclass
class _Fetched:
    sha256: str
    bytes: int
    seconds: float


def _fetch_once(hypervisor, pool, volume, spec, sha256, session, timeout, validate_certs, max_virtual_size):
    response = _get(session, spec.url, timeout, validate_certs)
    try:
        _check_status(response, spec.url)
        length = _content_length(response, spec.url)
        started = time.monotonic()
        body = _Body(response, spec.url, length)
        # Checked before the volume exists, so a refused image writes nothing.
        _check_header(body.read_header(), spec, max_virtual_size)
        vol = hypervisor.create_volume(pool, _raw_volume_xml(volume, length))
        try:
            hypervisor.upload_volume(vol, body.chunks())
            digest = body.hash.hexdigest()
            if sha256 is not None and digest != sha256:
                raise PermanentError("%s has sha256 %s but the checksum says %s; the download was discarded. Check the "
                                     "checksum, or whether the mirror serves a different release" % (spec.url, digest, sha256))
        except BaseException:
            _discard(hypervisor, vol)
            raise
        return _Fetched(sha256=digest, bytes=length, seconds=time.monotonic() - started)
    finally:
        response.close()


def _discard(hypervisor, vol):
    # The marker does not exist yet, so if this delete fails too (the
    # connection is gone) the next run sees a base without marker and removes it.
    try:
        hypervisor.delete_volume(vol)
    except KvmError:
        pass


def _refreshed_base(hypervisor, pool, pool_name, volume, spec):
    """The new base as libvirt reads it after the refresh; deleted if libvirt finds it backs onto another file."""
    vol = hypervisor.lookup_volume(pool, volume)
    info = _volume_info(hypervisor, vol)
    if info.backing_path is not None:
        _discard(hypervisor, vol)
        raise PermanentError(_not_self_contained(
            spec.url, "has the backing store %r as libvirt reads it in pool '%s'" % (info.backing_path, pool_name),
            "base volume '%s' was deleted" % volume))
    return info


def _write_marker(hypervisor, pool, marker_name, digest):
    marker = hypervisor.create_volume(pool, _raw_volume_xml(marker_name, len(digest)))
    try:
        hypervisor.upload_volume(marker, [digest.encode("ascii")])
    except BaseException:
        _discard(hypervisor, marker)
        raise


# --- the public flows ----------------------------------------------------------------------------


@contextmanager
def _session(http):
    if http is not None:
        yield http
        return
    session = requests.Session()
    try:
        yield session
    finally:
        session.close()


def ensure_image(hypervisor, pool_name, spec, check_mode=False, http=None, timeout=DEFAULT_TIMEOUT,
                 retries=DEFAULT_RETRIES, validate_certs=True, lock_timeout=DEFAULT_LOCK_TIMEOUT,
                 backoff=DEFAULT_BACKOFF, lock_dir=None, max_virtual_size=None):
    """Make the image ready in the pool and describe its base volume (an ImageResult).

    ``http`` is a requests.Session-like object (a new Session when None).
    In check mode an image that is not cached is not downloaded, but its
    header is read (a Range request for its first bytes), so the result
    has its virtual size and an image that would be refused is refused.
    With ``max_virtual_size`` (bytes), an image with a larger virtual size
    raises ValidationError before anything is written.
    Raises PermanentError for what a retry cannot fix (4xx, no
    Content-Length, checksum mismatch, wrong format, a header naming a
    backing or data file, base in use while its marker is broken) and
    TransientError when retries ran out.
    """
    spec.require_url()
    validate_pool_name(pool_name)
    if max_virtual_size is not None and (isinstance(max_virtual_size, bool) or not isinstance(max_virtual_size, int)
                                         or max_virtual_size <= 0):
        raise ValidationError("max_virtual_size must be a positive number of bytes, got %r" % (max_virtual_size,))
    with _session(http) as session:
        sha256 = resolve_sha256(spec, session, timeout, retries, validate_certs, backoff)
        volume = base_volume_name(spec.name, spec.format, sha256)
        marker_name = marker_volume_name(volume)
        pool = _lookup_pool(hypervisor, pool_name)
        cached = _inspect(hypervisor, pool, volume, marker_name)
        before = {"volume": volume, "sha256": cached.marker_digest, "state": cached.state}
        if cached.ready(sha256):
            return _ready_result(hypervisor, cached, pool_name, volume, spec, before, max_virtual_size)
        actions = []
        if check_mode:
            _remove_leftovers(hypervisor, pool, pool_name, cached, volume, marker_name, True, actions)
            header = _with_retries(lambda: _probe_once(session, spec, timeout, validate_certs), retries, backoff,
                                   "reading the header of image %s" % spec.url)
            _check_header(header, spec, max_virtual_size)
            actions += ["download %s into volume %s" % (spec.url, volume), "write marker volume %s" % marker_name]
            return ImageResult(volume=volume, path=None, format=spec.format, sha256=sha256, size=header.virtual_size,
                               downloaded=True, changed=True, actions=actions, before=before,
                               after={"volume": volume, "sha256": sha256, "state": STATE_PRESENT})
        with volume_lock(hypervisor.uri, pool_name, volume, lock_timeout, lock_dir):
            # Another run may have finished the download while this one waited.
            cached = _inspect(hypervisor, pool, volume, marker_name)
            before = {"volume": volume, "sha256": cached.marker_digest, "state": cached.state}
            if cached.ready(sha256):
                return _ready_result(hypervisor, cached, pool_name, volume, spec, before, max_virtual_size)
            _remove_leftovers(hypervisor, pool, pool_name, cached, volume, marker_name, False, actions)
            fetched = _with_retries(
                lambda: _fetch_once(hypervisor, pool, volume, spec, sha256, session, timeout, validate_certs,
                                    max_virtual_size),
                retries, backoff, "downloading image %s into volume '%s' of pool '%s'" % (spec.url, volume, pool_name))
            actions.append("download %s into volume %s" % (spec.url, volume))
            # The volume was sized from Content-Length as raw bytes; the refresh
            # makes libvirt probe the qcow2 header for the real virtual size.
            hypervisor.refresh_pool(pool)
            # Without a marker the base is never used, so it is checked before the marker is written.
            info = _refreshed_base(hypervisor, pool, pool_name, volume, spec)
            _write_marker(hypervisor, pool, marker_name, fetched.sha256)
            actions.append("write marker volume %s" % marker_name)
    return ImageResult(volume=volume, path=info.path, format=spec.format, sha256=fetched.sha256, size=info.capacity_bytes,
                       downloaded=True, changed=True, bytes=fetched.bytes, seconds=fetched.seconds, actions=actions,
                       before=before, after={"volume": volume, "sha256": fetched.sha256, "state": STATE_PRESENT})


def _ready_result(hypervisor, cached, pool_name, volume, spec, before, max_virtual_size):
    info = _volume_info(hypervisor, cached.base)
    # Cached before images had to be self-contained: refused, not deleted, since VMs may run on it.
    if info.backing_path is not None:
        raise PermanentError(
            "base volume '%s' in pool '%s' has the backing store %r: it was cached from an image that is not "
            "self-contained, and every VM on it can read that file of the hypervisor. Delete those VMs, remove the "
            "image (kvm_base_image state=absent) and cache a self-contained one" % (volume, pool_name, info.backing_path))
    _check_virtual_size(info.capacity_bytes, spec.url, max_virtual_size)
    return ImageResult(volume=volume, path=info.path, format=spec.format, sha256=cached.marker_digest,
                       size=info.capacity_bytes, downloaded=False, changed=False, before=before,
                       after={"volume": volume, "sha256": cached.marker_digest, "state": STATE_PRESENT})


def _image_volumes(hypervisor, pool, image):
    """{base volume name: (base handle or None, marker handle or None)} of every cached copy of ``image``."""
    found = {}
    for vol in hypervisor.list_volumes(pool):
        parsed = parse_base_volume_name(image, hypervisor.volume_name(vol))
        if parsed is None:
            continue
        base_name = parsed.volume[:-len(MARKER_SUFFIX)] if parsed.is_marker else parsed.volume
        base, marker = found.get(base_name, (None, None))
        found[base_name] = (base, vol) if parsed.is_marker else (vol, marker)
    return found


def _remove_bases(hypervisor, pool, pool_name, targets, check_mode, lock_timeout, lock_dir, strict, result):
    """Remove each target base and its marker; ``strict`` fails on any base in use before removing anything."""
    in_use = {}
    for base_name, (base, _marker) in sorted(targets.items()):
        if base is not None:
            users = find_users(hypervisor, pool, _volume_info(hypervisor, base).path)
            if users:
                in_use[base_name] = users
    if strict and in_use:
        base_name = sorted(in_use)[0]
        raise _in_use_error(base_name, pool_name, in_use[base_name], "cannot remove image")
    for base_name in sorted(in_use):
        result.kept.append({"volume": base_name, "used_by": in_use[base_name]})
    removable = sorted(name for name in targets if name not in in_use)
    if check_mode:
        for base_name in removable:
            _note_removal(targets[base_name], base_name, result)
        return
    for base_name in removable:
        with volume_lock(hypervisor.uri, pool_name, base_name, lock_timeout, lock_dir):
            # Re-read under the lock: a run may have finished this download or
            # created an overlay on it while we were looking at other volumes.
            current = _inspect(hypervisor, pool, base_name, marker_volume_name(base_name))
            if current.base is not None:
                users = find_users(hypervisor, pool, _volume_info(hypervisor, current.base).path)
                if users:
                    if strict:
                        raise _in_use_error(base_name, pool_name, users, "cannot remove image")
                    result.kept.append({"volume": base_name, "used_by": users})
                    continue
            if _note_removal((current.base, current.marker), base_name, result):
                # The marker goes first: a base without marker is never used as ready.
                if current.marker is not None:
                    _delete(hypervisor, current.marker)
                if current.base is not None:
                    _delete(hypervisor, current.base)


def _note_removal(handles, base_name, result):
    base, marker = handles
    if base is None and marker is None:
        return False
    if marker is not None:
        result.actions.append("delete marker volume %s" % marker_volume_name(base_name))
    if base is not None:
        result.actions.append("delete base volume %s" % base_name)
    result.removed.append(base_name)
    return True


def remove_image(hypervisor, pool_name, spec, check_mode=False, http=None, timeout=DEFAULT_TIMEOUT,
                 retries=DEFAULT_RETRIES, validate_certs=True, lock_timeout=DEFAULT_LOCK_TIMEOUT,
                 backoff=DEFAULT_BACKOFF, lock_dir=None):
    """Remove cached copies of an image (a RemovalResult); fail without removing anything if one is in use.

    With a checksum only that content's base is removed (in ``spec.format``);
    without one, every cached base of the image name, whatever its checksum
    or format.
    """
    validate_pool_name(pool_name)
    with _session(http) as session:
        sha256 = resolve_sha256(spec, session, timeout, retries, validate_certs, backoff)
    pool = _lookup_pool(hypervisor, pool_name)
    found = _image_volumes(hypervisor, pool, spec.name)
    result = RemovalResult(bases_before=sorted(found))
    if sha256 is not None:
        target = base_volume_name(spec.name, spec.format, sha256)
        targets = {target: found[target]} if target in found else {}
    else:
        targets = found
    _remove_bases(hypervisor, pool, pool_name, targets, check_mode, lock_timeout, lock_dir, True, result)
    result.bases_after = sorted(name for name in found if name not in result.removed)
    return result


def prune_images(hypervisor, pool_name, image, keep=(), check_mode=False, lock_timeout=DEFAULT_LOCK_TIMEOUT,
                 lock_dir=None):
    """Remove the cached copies of ``image`` that no volume uses, except the base volumes in ``keep``.

    Bases in use are kept and reported in ``kept`` with their users.
    """
    validate_image_name(image)
    validate_pool_name(pool_name)
    pool = _lookup_pool(hypervisor, pool_name)
    found = _image_volumes(hypervisor, pool, image)
    result = RemovalResult(bases_before=sorted(found))
    targets = {name: handles for name, handles in found.items() if name not in keep}
    _remove_bases(hypervisor, pool, pool_name, targets, check_mode, lock_timeout, lock_dir, False, result)
    result.bases_after = sorted(name for name in found if name not in result.removed)
    return result
