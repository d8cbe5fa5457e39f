# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The base image cache: distro cloud images streamed from HTTP into a libvirt pool, verified, self-contained.

Public API (used by kvm_base_image and kvm_proxy)::

    spec = ImageSpec(name="debian-13", url="https://.../debian-13-generic-amd64.qcow2",
                     checksum="sha256:<64 hex>" | "sha256:https://.../SHA256SUMS" | None,
                     format="qcow2" | "raw")
    result = ensure_image(hypervisor, pool_name, spec, DownloadOptions(timeout=60, retries=3, ...),
                          check_mode=False, http=None, max_virtual_size=None, size_limit_name=None)

    # the same, step by step (_common.plan): observe, plan, then apply unless in check mode
    with open_downloader(options, http) as downloader:
        cache = ImageCache(hypervisor, downloader, options.lock_timeout)
        request = cache.resolve(ImageRequest(pool_name, spec, max_virtual_size=None))
        plan = plan_image(request, cache.observe(request, read_header=check_mode))
        result = plan.result if check_mode else cache.apply(request, plan)

    result.volume, .path, .format, .sha256, .size, .downloaded, .changed, .bytes, .seconds,
    .throughput, .actions, .diff(), .as_dict()

Removal and prune are in _image.removal, the pool's volumes in _image.pool,
HTTP in _image.download (its options in _image.options), the lock in
_common.locks. A base is self-contained: an image whose header names a
backing file or an external data file would let every VM on it read that
file of the hypervisor, so it is refused from its first bytes
(_image.header), and a base that libvirt reports with a backing store after
the refresh is deleted before its marker is written.

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

Concurrent runs on one machine serialise on the volume's lock (_common.locks), so
the image is downloaded once: the second run waits, then finds it ready.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError, PermanentError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.locks import DEFAULT_LOCK_TIMEOUT, volume_lock
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import (
    base_volume_name,
    marker_volume_name,
    validate_pool_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.plan import Plan, Result, Step, execute
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT, STATE_PRESENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.download import open_downloader
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.options import DEFAULT_DOWNLOAD_OPTIONS
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.pool import (
    in_use_error,
    observe_base,
    raw_volume_xml,
    with_users,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.storage import require_pool, volume_deleter, volume_info

GIB = 1024 ** 3

# The operations of plan_image's steps.
DELETE = "delete"
FETCH = "fetch"
WRITE_MARKER = "write marker"
VERIFY = "verify"


@dataclass(frozen=True)
class ImageRequest:
    """An image to have in pool ``pool``, and the largest virtual size (bytes) it may have (None: any).

    ``sha256`` is the digest it must have; ImageCache.resolve sets it from
    the spec's checksum (None: whatever was cached first is kept).
    ``size_limit_name`` is the option that set ``max_virtual_size``, for the refusal.
    """

    pool: str
    spec: Any
    sha256: Optional[str] = None
    max_virtual_size: Optional[int] = None
    size_limit_name: Optional[str] = None

    def __post_init__(self):
        self.spec.require_url()
        validate_pool_name(self.pool)
        size = self.max_virtual_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
            raise ValidationError("max_virtual_size must be a positive number of bytes, got %r" % (size,))

    @property
    def volume(self):
        return base_volume_name(self.spec.name, self.spec.format, self.sha256)


@dataclass(frozen=True)
class ImageObservation:
    """The pool's handle, what it holds under the request's base volume name, and the image's header.

    ``header`` (an _image.header.ImageHeader) is read in check mode only,
    for an image that would be downloaded: a real run reads it off the
    download itself.
    """

    pool: Any
    cached: Any
    header: Any = None


@dataclass(frozen=True)
class ImageResult(Result):
    """What ensure_image found or did.

    ``path`` is None when check mode predicts a download; ``size`` (the
    virtual size in bytes) then comes from the image's header, or is the
    length of a raw image (None if the server did not say it). ``pruned``
    is the _image.removal.RemovalResult of a prune that followed (kvm_base_image's prune).
    """

    volume: str
    path: Optional[str]
    format: str
    sha256: Optional[str]
    size: Optional[int]
    bytes: int = 0
    seconds: float = 0.0
    actions: list = field(default_factory=list)
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    pruned: Any = None

    def ready(self):
        """The image as check mode finds it once this result's steps are done: nothing left to do."""
        return replace(self, actions=[], bytes=0, seconds=0.0, before=dict(self.after), pruned=None)

    @property
    def downloaded(self):
        """Whether the image was (in check mode, would be) downloaded."""
        return any(action.startswith("download ") for action in self.actions)

    @property
    def throughput(self):
        """Download speed in bytes per second (0 when nothing was downloaded)."""
        return int(self.bytes / self.seconds) if self.seconds > 0 else 0

    def diff(self):
        before, after = dict(self.before), dict(self.after)
        if self.pruned is not None:
            # Pruning looks at the pool after the download: a base it finds that
            # ensure_image saw absent is the one just downloaded.
            before["bases"] = [name for name in self.pruned.bases_before
                               if name != self.volume or self.before["state"] != STATE_ABSENT]
            after["bases"] = sorted(set(self.pruned.bases_after) | {self.volume})
        return {"before": before, "after": after}

    def as_dict(self):
        """The module result. The path is ``volume_path``: AnsibleModule.exit_json treats a ``path``
        key as a local file and overwrites ``size`` with its stat, which would make results differ
        between a module on the hypervisor and one reaching it over qemu+ssh."""
        result = {
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
        if self.pruned is not None:
            pruned = self.pruned.as_dict()
            result.update(changed=self.changed or pruned["changed"], actions=result["actions"] + pruned["actions"],
                          removed=pruned["removed"], kept=pruned["kept"])
        return result


def plan_image(request, observation):
    """What makes the image ready: nothing when it is, else removing leftovers, the download and the marker.

    A base in use whose marker is missing or wrong cannot be fetched again:
    it is verified where it lies against the checksum. Raises PermanentError
    for one that has no checksum to be verified against, for a cached base that backs onto another
    file, and for a header that makes the image unfit; ValidationError for
    an image larger than ``request.max_virtual_size``.
    """
    cached, spec = observation.cached, request.spec
    before = {"volume": cached.volume, "sha256": cached.marker_digest, "state": cached.state}
    if cached.ready(request.sha256):
        info = _cached_fit(request, cached)
        return Plan((), ImageResult(cached.volume, info.path, spec.format, cached.marker_digest, info.capacity_bytes,
                                    before=before, after=dict(before)))
    if cached.users:
        if request.sha256 is None:
            raise in_use_error(cached.volume, request.pool, cached.users, "cannot refetch image into '%s' (its marker "
                               "'%s' is missing or unreadable)" % (cached.volume, cached.marker_name))
        return _reverify(request, observation, before)
    header = observation.header
    if header is not None:
        check_header(header, request)
    steps = []
    if cached.marker is not None:
        steps.append(Step(DELETE, "delete leftover marker volume %s" % cached.marker_name, cached.marker))
    if cached.base is not None:
        steps.append(Step(DELETE, "delete leftover base volume %s" % cached.volume, cached.base))
    steps.append(Step(FETCH, "download %s into volume %s" % (spec.url, cached.volume), observation.pool))
    steps.append(Step(WRITE_MARKER, "write marker volume %s" % cached.marker_name, observation.pool))
    return Plan.of(steps, ImageResult(
        cached.volume, None, spec.format, request.sha256, header.virtual_size if header is not None else None,
        before=before, after={"volume": cached.volume, "sha256": request.sha256, "state": STATE_PRESENT}))


def _cached_fit(request, cached):
    """The cached base's VolumeInfo, once it is known fit to back a VM of ``request``."""
    info = cached.info
    # Cached before images had to be self-contained: refused, not deleted, since VMs may run on it.
    if info.backing_path is not None:
        raise PermanentError(
            "base volume '%s' in pool '%s' has the backing store %r: it was cached from an image that is not "
            "self-contained, and every VM on it can read that file of the hypervisor. Delete those VMs, remove the "
            "image (kvm_base_image state=absent) and cache a self-contained one"
            % (cached.volume, request.pool, info.backing_path))
    check_virtual_size(info.capacity_bytes, request)
    return info


def _reverify(request, observation, before):
    """A base in use whose marker is missing or wrong: hashed where it lies and, when it matches, marked again.

    Its overlays rule out fetching it again; hashing what the pool holds tells
    a marker damaged by hand from a base whose content changed (which is refused).
    """
    cached = observation.cached
    info = _cached_fit(request, cached)
    steps = [Step(VERIFY, "verify base volume %s against sha256 %s (its marker is missing or does not match)"
                  % (cached.volume, request.sha256), cached)]
    if cached.marker is not None:
        steps.append(Step(DELETE, "delete marker volume %s" % cached.marker_name, cached.marker))
    steps.append(Step(WRITE_MARKER, "write marker volume %s" % cached.marker_name, observation.pool))
    return Plan.of(steps, ImageResult(
        cached.volume, info.path, request.spec.format, request.sha256, info.capacity_bytes, before=before,
        after={"volume": cached.volume, "sha256": request.sha256, "state": STATE_PRESENT}))


class ImageCache:
    """The base images of a hypervisor's pools: what plan_image is asked and told, and its plans carried out."""

    def __init__(self, hypervisor, downloader, lock_timeout=DEFAULT_LOCK_TIMEOUT, lock_dir=None):
        self.hv = hypervisor
        self.downloader = downloader
        self.lock_timeout = lock_timeout
        self.lock_dir = lock_dir
        self._pools = {}  # pool handles by name, looked up once

    def resolve(self, request):
        """The request with the digest its checksum gives (a SHA256SUMS file is fetched: the digest names the volume)."""
        return replace(request, sha256=self.downloader.sha256_of(request.spec))

    def observe(self, request, read_header=False):
        """The ImageObservation for ``request``; ``read_header`` (check mode) asks the image's first bytes when needed."""
        pool = self._pool(request.pool)
        cached = observe_base(self.hv, pool, request.volume)
        if cached.ready(request.sha256):
            return ImageObservation(pool, cached)
        cached = with_users(self.hv, pool, request.pool, cached)
        # A base in use fails the plan whatever the header says, so then the image is not asked for.
        header = self.downloader.read_header(request.spec) if read_header and not cached.users else None
        return ImageObservation(pool, cached, header)

    def apply(self, request, plan):
        """Carry out plan_image's plan: under the base volume's lock, planned again on what the pool holds then."""
        if not plan.steps:
            return plan.result
        with volume_lock(self.hv.uri, request.pool, request.volume, self.lock_timeout, self.lock_dir):
            # Another run may have finished the download while this one waited.
            plan = plan_image(request, self.observe(request))
            return execute(plan, {DELETE: volume_deleter(self.hv), WRITE_MARKER: self._write_marker,
                                  FETCH: lambda pool, result: self._fetch(request, pool, result),
                                  VERIFY: lambda cached, result: self._verify(request, cached, result)})

    def _pool(self, name):
        if name not in self._pools:
            self._pools[name] = require_pool(self.hv, name)
        return self._pools[name]

    def _fetch(self, request, pool, result):
        spec = request.spec
        digest, length, seconds = self.downloader.download(
            spec.url, "downloading image %s into volume '%s' of pool '%s'" % (spec.url, request.volume, request.pool),
            lambda body: self._upload(request, pool, body))
        # The volume was sized from Content-Length as raw bytes; the refresh
        # makes libvirt probe the qcow2 header for the real virtual size.
        self.hv.refresh_pool(pool)
        # Without a marker the base is never used, so it is checked before the marker is written.
        vol = self.hv.lookup_volume(pool, request.volume)
        info = volume_info(self.hv, vol)
        if info.backing_path is not None:
            self._discard(vol)
            raise PermanentError(not_self_contained(
                spec.url, "has the backing store %r as libvirt reads it in pool '%s'" % (info.backing_path, request.pool),
                "base volume '%s' was deleted" % request.volume))
        return replace(result, path=info.path, sha256=digest, size=info.capacity_bytes, bytes=length, seconds=seconds,
                       after=dict(result.after, sha256=digest))

    def _upload(self, request, pool, body):
        """Stream ``body`` (a _image.download.ImageBody) into a new base volume: (sha256, bytes, seconds)."""
        # Checked before the volume exists, so a refused image writes nothing.
        check_header(body.read_header(), request)
        vol = self.hv.create_volume(pool, raw_volume_xml(request.volume, body.length))

        def verify():
            digest = body.hash.hexdigest()
            if request.sha256 is not None and digest != request.sha256:
                raise PermanentError("%s has sha256 %s but the checksum says %s; the download was discarded. Check the "
                                     "checksum, or whether the mirror serves a different release"
                                     % (request.spec.url, digest, request.sha256))

        self._fill(vol, body.chunks(), verify)
        return body.hash.hexdigest(), body.length, body.seconds

    def _verify(self, request, cached, result):
        digest = hashlib.sha256()
        for chunk in self.hv.download_volume(cached.base):
            digest.update(chunk)
        if digest.hexdigest() != request.sha256:
            raise in_use_error(cached.volume, request.pool, cached.users, (
                "base volume '%s' has sha256 %s, not the %s it was cached with: its content changed behind this "
                "collection's back, so its marker is not written again and nothing was changed"
                % (cached.volume, digest.hexdigest(), request.sha256)))
        return result

    def _write_marker(self, pool, result):
        digest = result.sha256
        marker = self.hv.create_volume(pool, raw_volume_xml(marker_volume_name(result.volume), len(digest)))
        self._fill(marker, [digest.encode("ascii")])
        return result

    def _fill(self, vol, chunks, verify=None):
        """Upload ``chunks`` into the new volume ``vol``; it is deleted when that, or ``verify()``, fails."""
        try:
            self.hv.upload_volume(vol, chunks)
            if verify is not None:
                verify()
        except BaseException:
            self._discard(vol)
            raise

    def _discard(self, vol):
        # The marker does not exist yet, so if this delete fails too (the
        # connection is gone) the next run sees a base without marker and removes it.
        try:
            self.hv.delete_volume(vol)
        except KvmError:
            pass


def ensure_image(hypervisor, pool_name, spec, options=DEFAULT_DOWNLOAD_OPTIONS, check_mode=False, http=None,
                 lock_dir=None, max_virtual_size=None, size_limit_name=None):
    """Make the image ready in the pool and describe its base volume (an ImageResult).

    ``options`` (an _image.options.DownloadOptions) say how to download and
    how long to wait for the volume's lock; ``http`` is a
    requests.Session-like object (a new Session when None).
    In check mode an image that is not cached is not downloaded, but its
    header is read (a Range request for its first bytes), so the result
    has its virtual size and an image that would be refused is refused.
    With ``max_virtual_size`` (bytes), an image with a larger virtual size
    raises ValidationError, naming the option ``size_limit_name``, from its
    header: before its body is downloaded and anything is written.
    Raises PermanentError for what a retry cannot fix (4xx, no
    Content-Length, checksum mismatch, wrong format, a header naming a
    backing or data file, base in use while its marker is broken) and
    TransientError when retries ran out.
    """
    request = ImageRequest(pool_name, spec, max_virtual_size=max_virtual_size, size_limit_name=size_limit_name)
    with open_downloader(options, http) as downloader:
        cache = ImageCache(hypervisor, downloader, options.lock_timeout, lock_dir)
        request = cache.resolve(request)
        plan = plan_image(request, cache.observe(request, read_header=check_mode))
        return plan.result if check_mode else cache.apply(request, plan)


# --- what makes an image fit to be a base ----------------------------------------------------------


def _gib(size):
    return ("%.2f" % (size / GIB)).rstrip("0").rstrip(".")


def check_virtual_size(size, request):
    """Refuse a virtual size (bytes; None: unknown) above ``request.max_virtual_size``."""
    limit = request.max_virtual_size
    if limit is not None and size is not None and size > limit:
        named = " (%s)" % request.size_limit_name if request.size_limit_name else ""
        raise ValidationError("image %s has a virtual size of %d bytes (%s GiB), more than the maximum of %d bytes (%s GiB)%s "
                              "that a VM's disk may have here; nothing was cached" % (
                                  request.spec.url, size, _gib(size), limit, _gib(limit), named))


def not_self_contained(url, what_it_needs, outcome):
    return ("image %s %s: a base image must be self-contained, or every VM on it could read that file of the "
            "hypervisor; %s. Use an image without backing or data files (qemu-img convert -O qcow2 makes one)"
            % (url, what_it_needs, outcome))


def check_header(header, request):
    """Refuse an image whose header makes it unfit to be the base ``request`` asks for, before anything is written."""
    spec = request.spec
    if spec.format == "qcow2" and header.format != "qcow2":
        raise PermanentError("%s is not a qcow2 image (no qcow2 header); set format to raw if it is a raw disk image"
                             % spec.url)
    if spec.format == "raw" and header.format == "qcow2":
        raise PermanentError("%s is a qcow2 image but format is raw; set format to qcow2" % spec.url)
    if not header.self_contained:
        raise PermanentError(not_self_contained(
            spec.url, "names %s in its qcow2 header" % " and ".join(header.external_files()), "nothing was cached"))
    check_virtual_size(header.virtual_size, request)
