# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Downloads for the image cache: HTTP with retries, SHA256SUMS files, an image's head and body.

Public API::

    with open_downloader(options, http=None) as downloader:   # options: an _image.options.DownloadOptions
        sha256 = downloader.sha256_of(spec)     # pinned, listed in its SHA256SUMS file, or None
        header = downloader.read_header(spec)   # check mode: a Range request for the first bytes
        answer = downloader.download(url, what, receive)   # receive(ImageBody) under retries

A retry is worth it for what a server or network does now and may not do
next time: a 5xx, a refused or dropped connection, a timeout, a body shorter
than its Content-Length. Everything else (a 4xx, no Content-Length, a TLS
failure, a redirect to another scheme) is a PermanentError at once. The
body of an image is read in chunks that are hashed and counted on the way,
and its first chunks, enough for the header (_image.header), are read
before anything else is done with it. The rest is received and hashed in a
thread of its own, a few chunks ahead of the caller sending them into
libvirt's stream (read_ahead), so the three overlap instead of taking turns.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import queue
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from urllib.parse import urljoin, urlsplit

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, TransientError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.imports import lazy_import
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import ascii_decimal, control_character, quoted
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.header import (
    MAX_HEADER_BYTES,
    NeedMoreBytes,
    parse_image_header,
)

requests, REQUESTS_REQUIREMENT = lazy_import(
    "requests", "requests", "python3-requests on Debian/Ubuntu/RHEL, requests from PyPI")

MAX_BACKOFF = 60.0

CHUNK_SIZE = 1024 * 1024
# Chunks received ahead of libvirt's stream (read_ahead): receiving and hashing
# overlap the send, and at most this many chunks wait in memory.
AHEAD_CHUNKS = 4
# A SHA256SUMS file lists a few dozen images; anything much larger is not one.
MAX_CHECKSUM_FILE_BYTES = 4 * 1024 * 1024
# Check mode's header read: small chunks, so only about what the header needs is read.
PROBE_CHUNK_SIZE = 64 * 1024
USER_AGENT = "egress_proxies.kvm kvm_base_image"

# What a server answers to "Range: bytes=0-N": the bytes sent and the image's length ("*" if unknown).
_CONTENT_RANGE = re.compile(r"bytes 0-[0-9]+/(?P<length>[0-9]+|\*)")
# "<hex>  <file>" (text mode) and "<hex> *<file>" (binary mode) of sha256sum,
# and the BSD form "SHA256 (<file>) = <hex>".
_GNU_SUM_LINE = re.compile(r"(?P<digest>[0-9a-fA-F]{64}) [ *](?P<file>.+)")
_BSD_SUM_LINE = re.compile(r"SHA256 \((?P<file>.+)\) = (?P<digest>[0-9a-fA-F]{64})")


def find_in_checksum_file(text, file_name):
    """The distinct sha256 digests listed for ``file_name`` in the text of a SHA256SUMS file, in their order."""
    digests = []
    for line in text.splitlines():
        line = line.strip()
        match = _GNU_SUM_LINE.fullmatch(line) or _BSD_SUM_LINE.fullmatch(line)
        if match is None:
            continue
        listed = match.group("file").strip()
        if listed.startswith("./"):
            listed = listed[2:]
        digest = match.group("digest").lower()
        if listed == file_name and digest not in digests:
            digests.append(digest)
    return digests


class Retryable(Exception):
    """An HTTP-side failure worth another attempt (5xx, network, short body)."""


def _read_errors():
    """What requests raises when a body stops arriving: worth another attempt."""
    return (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError, requests.exceptions.Timeout)


@contextmanager
def open_downloader(options, http=None):
    """A Downloader with ``options`` (an _image.options.DownloadOptions) over ``http`` (a requests.Session-like
    object), or over a Session of its own that is closed after."""
    # requests would raise a bare OSError at the first GET.
    options.require_ca_path()
    if http is not None:
        yield Downloader(http, options)
        return
    session = requests.Session()
    try:
        yield Downloader(session, options)
    finally:
        session.close()


class Downloader:
    """GETs with the task's timeout, certificate check and retries (sleeping ``backoff`` seconds, doubling)."""

    def __init__(self, session, options):
        self.session = session
        self.options = options

    @property
    def verify(self):
        """requests' ``verify``: False, the CA bundle to trust, or True for the system's."""
        if not self.options.validate_certs:
            return False
        return self.options.ca_path if self.options.ca_path is not None else True

    def retrying(self, attempt, what):
        """Call ``attempt()`` up to retries + 1 times while it raises Retryable, sleeping in between."""
        failures = []
        for number in range(self.options.retries + 1):
            if number:
                time.sleep(min(self.options.backoff * 2 ** (number - 1), MAX_BACKOFF))
            try:
                return attempt()
            except Retryable as exc:
                failures.append(str(exc))
        raise TransientError("%s failed after %d attempt(s); last error: %s" % (what, len(failures), failures[-1]))

    def sha256_of(self, spec):
        """The sha256 the image must have: pinned, looked up in its SHA256SUMS file, or None.

        Reading the SHA256SUMS file is a GET that changes nothing, so check mode
        does it too: the digest decides the volume name.
        """
        if spec.pinned_sha256 is not None or spec.checksum_url is None:
            return spec.pinned_sha256
        url = spec.checksum_url
        text = self.retrying(lambda: self._checksum_file(url), "fetching checksum file %s" % url)
        digests = find_in_checksum_file(text, spec.file_name)
        if not digests:
            raise PermanentError("checksum file %s has no sha256 entry for %s (the file name of %s); check url and "
                                 "checksum" % (url, quoted(spec.file_name), spec.url))
        # sha256sum -c checks every entry, so one file listed with two digests can never pass: refused, not guessed.
        if len(digests) > 1:
            raise PermanentError("checksum file %s lists %s with different sha256 digests (%s), so which one the "
                                 "image must have is ambiguous and it was not downloaded; fix the checksum file or "
                                 "pin the digest (checksum: sha256:<64 hex digits>)"
                                 % (url, quoted(spec.file_name), " and ".join(digests)))
        return digests[0]

    def read_header(self, spec):
        """The image's header (an ImageHeader), from a request for its first bytes only."""
        return self.retrying(lambda: self._probe(spec.url), "reading the header of image %s" % spec.url)

    def download(self, url, what, receive):
        """``receive(ImageBody)`` for a GET of ``url``, again while it fails in a way worth retrying; its answer.

        ``what`` says what is being done, for the error when retries run out.
        """
        def attempt():
            response = self._get(url)
            try:
                _check_status(response, url)
                return receive(ImageBody(response, url, _content_length(response, url)))
            finally:
                response.close()

        return self.retrying(attempt, what)

    def _get(self, url, first_bytes=None):
        """GET ``url`` (its ``first_bytes`` only, if given) as a stream; transport failures as Retryable or PermanentError."""
        # The body is hashed as it arrives: a transparently decompressed
        # body would neither match Content-Length nor the published digest.
        headers = {"Accept-Encoding": "identity", "User-Agent": USER_AGENT}
        if first_bytes is not None:
            headers["Range"] = "bytes=0-%d" % (first_bytes - 1)
        try:
            return self.session.get(url, stream=True, timeout=self.options.timeout, verify=self.verify, headers=headers,
                                    hooks={"response": [_refuse_non_http_redirect]})
        except requests.exceptions.SSLError as exc:
            raise PermanentError(self._tls_refused(url, exc)) from exc
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            raise Retryable("fetching %s failed: %s" % (url, exc)) from exc
        except requests.exceptions.RequestException as exc:
            raise PermanentError("fetching %s failed: %s" % (url, exc)) from exc

    def _tls_refused(self, url, exc):
        ca_path = self.options.ca_path
        trusted = "the system's CA certificates" if ca_path is None else "the CA bundle %s (ca_path)" % ca_path
        return ("TLS verification of %s failed against %s: %s; set ca_path to the CA certificate (PEM) that signed the "
                "server's certificate, on the host that runs the module, or set validate_certs to false to skip the "
                "check" % (url, trusted, exc))

    def _checksum_file(self, url):
        response = self._get(url)
        try:
            _check_status(response, url)
            body = bytearray()
            try:
                for chunk in response.iter_content(64 * 1024):
                    body += chunk
                    if len(body) > MAX_CHECKSUM_FILE_BYTES:
                        raise PermanentError("%s is larger than %d bytes; it is not a SHA256SUMS file"
                                             % (url, MAX_CHECKSUM_FILE_BYTES))
            except _read_errors() as exc:
                raise Retryable("reading %s failed: %s" % (url, exc)) from exc
            return bytes(body).decode("utf-8", "replace")
        finally:
            response.close()

    def _probe(self, url):
        """The header from a request for the first bytes (a server that sends it all is read no further)."""
        response = self._get(url, first_bytes=MAX_HEADER_BYTES)
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
                length = match.group("length")
                length = None if length == "*" else _number_header(length, "Content-Range", content_range, url)
            else:
                length = _content_length(response, url)

            def chunks():
                try:
                    for chunk in response.iter_content(PROBE_CHUNK_SIZE):
                        if chunk:
                            yield chunk
                except _read_errors() as exc:
                    raise Retryable("reading the header of %s failed: %s" % (url, exc)) from exc

            return read_header(chunks(), length, url)[0]
        finally:
            response.close()


class ImageBody:
    """An image's HTTP body as chunks for upload_volume, hashed and counted on the way; its header is read first."""

    def __init__(self, response, url, length):
        self.url = url
        self.length = length
        self.hash = hashlib.sha256()
        self.received = 0
        self.started = time.monotonic()
        self._received_chunks = self._receive(response)
        self._head = b""

    @property
    def seconds(self):
        return time.monotonic() - self.started

    def read_header(self):
        """The image's header, read off the start of the body; those bytes are the first chunk of ``chunks()``."""
        header, self._head = read_header(self._received_chunks, self.length, self.url)
        return header

    def chunks(self):
        """The whole body: the header's bytes, then the rest as it is received, hashed and counted ahead."""
        head, self._head = self._head, b""
        if head:
            yield head
        yield from read_ahead(self._received_chunks)

    def _receive(self, response):
        try:
            for chunk in response.iter_content(CHUNK_SIZE):
                if not chunk:
                    continue
                self.received += len(chunk)
                if self.received > self.length:
                    raise Retryable("%s sent more than its Content-Length of %d bytes" % (self.url, self.length))
                self.hash.update(chunk)
                yield chunk
        except _read_errors() as exc:
            raise Retryable("reading %s failed after %d of %d bytes: %s" % (self.url, self.received, self.length, exc)) from exc
        # urllib3 1.26 (Debian 12) does not enforce Content-Length: a connection
        # closed early just ends the body, so count.
        if self.received != self.length:
            raise Retryable("%s ended after %d of its %d bytes" % (self.url, self.received, self.length))


_END = object()


def read_ahead(chunks, depth=AHEAD_CHUNKS):
    """Yield what the iterator ``chunks`` yields, while a thread runs it up to ``depth`` items ahead.

    What ``chunks`` raises is raised here, after the items it yielded before.
    When the consumer stops early (it failed, or closed this generator), the
    thread stops at its next item and is joined before this returns, so
    nothing reads the response after the caller closes it.
    """
    ahead = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def hand_over(item):
        """Queue ``item`` unless the consumer stopped; False once it has."""
        while not stop.is_set():
            try:
                ahead.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for chunk in chunks:
                if not hand_over(chunk):
                    return
        finally:
            hand_over(_END)

    receiver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="image-receive")
    try:
        produced = receiver.submit(produce)
        chunk = ahead.get()
        while chunk is not _END:
            yield chunk
            chunk = ahead.get()
        produced.result()  # what ``chunks`` raised, if anything
    finally:
        stop.set()
        receiver.shutdown(wait=True)


def read_header(chunks, length, url):
    """Read ``chunks`` until the image's header is known: (ImageHeader, the bytes read)."""
    head = bytearray()
    header = parse_image_header(head, length, url)
    while isinstance(header, NeedMoreBytes):
        chunk = next(chunks, None)
        if chunk is None:
            raise Retryable("%s ended after %d bytes, inside the image's header" % (url, len(head)))
        head += chunk
        header = parse_image_header(head, length, url)
    return header, bytes(head)


def _refuse_non_http_redirect(response, *args, **kwargs):
    if response.is_redirect:
        target = urljoin(response.url, response.headers.get("location", ""))
        if urlsplit(target).scheme not in ("http", "https"):
            raise PermanentError("%s redirects to %s; only http and https redirects are followed"
                                 % (response.url, quoted(target)))
    return response


def _check_status(response, url):
    status = response.status_code
    if 200 <= status < 300:
        return
    # The reason phrase is the server's own text: quoted when it holds control characters (a terminal escape).
    phrase = response.reason or ""
    reason = "HTTP %d %s" % (status, quoted(phrase) if control_character(phrase) else phrase)
    if 400 <= status < 500:
        raise PermanentError("%s answered %s; check the URL" % (url, reason.strip()))
    raise Retryable("%s answered %s" % (url, reason.strip()))


def _number_header(text, header, value, url):
    """``text`` (part of the ``header`` sent as ``value``) as a number of bytes, in ASCII digits only; else a PermanentError.

    int() would read other scripts' digits ('٨٠' is 80) or fail on '²' with a
    message naming neither the header nor the server.
    """
    number = ascii_decimal(text.strip())
    if number is None:
        raise PermanentError("%s sent %s: %s, which is not a number of bytes in ASCII digits; serve the image from a "
                             "server that sends a valid %s" % (url, header, quoted(value), header))
    return number


def _content_length(response, url):
    """The body's length from Content-Length; the base volume is created with exactly that size."""
    value = response.headers.get("Content-Length")
    if value is None:
        raise PermanentError("%s sent no Content-Length; the base volume needs a known size, so serve the image "
                             "from a server that sends it" % url)
    length = _number_header(value, "Content-Length", value, url)
    if length == 0:
        raise PermanentError("%s is empty (Content-Length: 0)" % url)
    return length
