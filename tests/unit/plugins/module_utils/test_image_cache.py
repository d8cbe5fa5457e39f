# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The image cache over the fake seam and a real local HTTP server.

Every case of the reference's image_test.go, plus what this port adds:
content-addressed bases, in-use protection, prune/remove, SHA256SUMS
files, redirects, short bodies, format sniffing, self-contained images,
the virtual size known before the download, check mode and the
inter-process lock.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest
import requests

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import locks
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import (
    PermanentError,
    TransientError,
    ValidationError,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image import cache, download
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image import pool as image_pool
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image import removal as image_removal
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.header import MAX_HEADER_BYTES, ImageHeader
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.options import DownloadOptions
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.spec import ImageSpec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.storage import VolumeUsers, find_users, volume_info
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import VolumeInfo, VolumeSpec, build_volume_xml
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import FakeHypervisor
from ansible_collections.egress_proxies.kvm.tests.unit.image_server import ImageServer
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_image_header import qcow2_header

VIRTUAL_SIZE = 2 * 1024 ** 3
MUTATING = {"refresh_pool", "create_volume", "delete_volume", "upload_volume"}


def qcow2_image(payload, virtual_size=VIRTUAL_SIZE, **header):
    """A body that starts with a valid qcow2 header (options of qcow2_header), then ``payload``."""
    return qcow2_header(virtual_size, **header) + payload


IMAGE = qcow2_image(b"fake qcow2 payload " * 60000)  # ~1.1 MiB: more than one chunk
IMAGE_SHA = hashlib.sha256(IMAGE).hexdigest()
NEWER_IMAGE = qcow2_image(b"the next release " * 50000)
NEWER_SHA = hashlib.sha256(NEWER_IMAGE).hexdigest()
RAW_IMAGE = b"\0" * 512 * 300
# What a VM on these would read: files of the hypervisor.
EVIL_IMAGE = qcow2_image(b"evil payload " * 1000, backing_file="/etc/hostname")
EVIL_SHA = hashlib.sha256(EVIL_IMAGE).hexdigest()
DATA_FILE_IMAGE = qcow2_image(b"data file payload " * 1000, data_file="/dev/vda")
DATA_FILE_SHA = hashlib.sha256(DATA_FILE_IMAGE).hexdigest()
PROBE_RANGE = "bytes=0-%d" % (MAX_HEADER_BYTES - 1)
RAW_SHA = hashlib.sha256(RAW_IMAGE).hexdigest()


@pytest.fixture
def server():
    srv = ImageServer()
    yield srv
    srv.close()


@pytest.fixture
def hv():
    hypervisor = FakeHypervisor()
    hypervisor.add_pool("default")
    return hypervisor


@pytest.fixture
def ensure(hv, tmp_path):
    """ensure(spec, **kwargs) on the default pool, with test-friendly timings and a private lock dir."""

    def run(spec, hypervisor=None, check_mode=False, http=None, max_virtual_size=None, **options):
        options = DownloadOptions(**dict(dict(timeout=5, retries=2, backoff=0), **options))
        return cache.ensure_image(hypervisor or hv, "default", spec, options, check_mode=check_mode, http=http,
                                  lock_dir=str(tmp_path / "locks"), max_virtual_size=max_virtual_size)

    return run


def debian(url, checksum=None, fmt="qcow2"):
    return ImageSpec(name="debian-13", url=url, checksum=checksum, format=fmt)


def volume_names(hv, pool="default"):
    return sorted(hv.pools[pool].volumes)


def content(hv, name):
    return bytes(hv.volume("default", name).content)


def base_name(sha):
    return "base-debian-13-%s.qcow2" % sha[:16]


def add_overlay(hv, name, backing_volume):
    """A VM disk backing onto a base, as kvm_proxy creates it."""
    base = hv.volume("default", backing_volume)
    hv.add_volume("default", name, fmt="qcow2", capacity=VIRTUAL_SIZE, backing_path=base.path, backing_format="qcow2")


def cache_by_hand(hv, volume, body, digest):
    hv.add_volume("default", volume, content=body, fmt="qcow2", capacity=VIRTUAL_SIZE)
    hv.add_volume("default", volume + ".sha256", content=digest.encode("ascii"))


# --- ImageSpec ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    (dict(url="file:///tmp/x.qcow2"), "not an http(s) URL"),
    (dict(url="ftp://mirror/x.qcow2"), "not an http(s) URL"),
    (dict(url="https:///no-host.qcow2"), "not an http(s) URL"),
    (dict(url="https://x/y.qcow2", checksum="abc"), "is not supported"),
    (dict(url="https://x/y.qcow2", checksum="sha512:" + "a" * 128), "is not supported: it is sha512, and only sha256 is"),
    (dict(url="https://x/y.qcow2", checksum="md5:" + "a" * 32), "is not supported: it is md5, and only sha256 is"),
    (dict(url="https://x/y.qcow2", checksum="sha256:" + "a" * 63), "the sha256 digest has 63 of 64 hex digits; use"),
    (dict(url="https://x/y.qcow2", checksum="sha256:" + "a" * 65), "the sha256 digest has 65 of 64 hex digits; use"),
    (dict(url="https://x/y.qcow2", checksum="sha256:" + "a" * 128),
     "the sha256 digest has 128 of 64 hex digits (as many as a sha512 digest)"),
    (dict(url="https://x/y.qcow2", checksum="sha256:" + "a" * 40 + "g" + "a" * 23),
     "the sha256 digest has 'g' at offset 40, which is not a hex digit"),
    (dict(url="https://x/y.qcow2", checksum="sha256:" + "\u0661" * 64), "the sha256 digest has '\u0661' at offset 0"),
    (dict(url="https://x/y.qcow2", checksum="sha256: " + "a" * 64), "the sha256 digest has ' ' at offset 0"),
    (dict(url="https://x/y.qcow2", checksum="sha256:file:///etc/SHA256SUMS"), "not an http(s) URL"),
    (dict(url="https://x/y.qcow2", checksum="sha256:https://x/SHA256SUMS\nhttp_access allow all"),
     "checksum file URL 'https://x/SHA256SUMS\\nhttp_access allow all' has U+000A at offset 20"),
    (dict(url="https://x/y.qcow2\r\nX-Injected: 1"), "url 'https://x/y.qcow2\\r\\nX-Injected: 1' has U+000D at offset 17"),
    (dict(url="https://x/a b.qcow2"), "has a blank at offset 11; write it percent-encoded"),
    (dict(url="https://[x/y.qcow2"), "is not a URL: Invalid IPv6 URL"),
    (dict(url="https://x:\u00b2/y.qcow2"), "is not a URL: Port could not be cast to integer"),
    (dict(url=None, checksum="sha256:https://x/SHA256SUMS"), "url is needed"),
    (dict(url="https://x/y.vmdk", format="vmdk"), "disk format 'vmdk' is not supported"),
    (dict(name="Debian", url="https://x/y.qcow2"), "image name 'Debian' is not valid"),
    (dict(name="../etc", url="https://x/y.qcow2"), "image name '../etc' is not valid"),
    (dict(name="deb-0123456789abcdef", url="https://x/y.qcow2"), "must not end in '-' followed by 16 hex"),
])
def test_image_spec_rejects_bad_input(kwargs, message):
    args = dict(name="debian-13")
    args.update(kwargs)
    with pytest.raises(ValidationError, match=re.escape(message)):
        ImageSpec(**args)


def test_a_url_port_in_other_digits_is_refused():
    """int() reads Arabic-Indic digits; Python 3.9's urlsplit gives port 80 for them, later ones refuse them."""
    with pytest.raises(ValidationError, match="port that is not written in ASCII digits|Port could not be cast"):
        ImageSpec("debian-13", "https://x:\u0668\u0660/y.qcow2")


def test_image_spec_reads_both_checksum_forms():
    pinned = ImageSpec("debian-13", "https://x/d.qcow2", "SHA256:" + IMAGE_SHA.upper())
    assert (pinned.pinned_sha256, pinned.checksum_url) == (IMAGE_SHA, None)
    listed = ImageSpec("ubuntu-24.04", "https://x/noble/current/noble-server-cloudimg-amd64.img",
                       "sha256:https://x/noble/current/SHA256SUMS")
    assert (listed.pinned_sha256, listed.checksum_url) == (None, "https://x/noble/current/SHA256SUMS")
    assert listed.file_name == "noble-server-cloudimg-amd64.img"
    assert ImageSpec("a", "https://x/dir/a%20b.img?sig=1").file_name == "a b.img"


def test_ensure_needs_a_url(hv, ensure):
    with pytest.raises(ValidationError, match="needs a url"):
        ensure(ImageSpec("debian-13"))
    assert hv.calls == []


@pytest.mark.parametrize("text", [
    "%s  other.img\n%s  debian-13-generic-amd64.qcow2\n" % ("0" * 64, IMAGE_SHA),
    "%s *debian-13-generic-amd64.qcow2\n" % IMAGE_SHA.upper(),
    "# comment\n\n%s  ./debian-13-generic-amd64.qcow2\r\n" % IMAGE_SHA,
    "SHA256 (debian-13-generic-amd64.qcow2) = %s\n" % IMAGE_SHA,
    # The same digest twice (in both cases, both formats) is one entry.
    "%s  debian-13-generic-amd64.qcow2\nSHA256 (debian-13-generic-amd64.qcow2) = %s\n" % (IMAGE_SHA, IMAGE_SHA.upper()),
])
def test_find_in_checksum_file_reads_the_common_formats(text):
    assert download.find_in_checksum_file(text, "debian-13-generic-amd64.qcow2") == [IMAGE_SHA]


def test_find_in_checksum_file_matches_whole_names_only():
    text = "%s  debian-13-generic-amd64.qcow2.tar\n%s  xdebian-13-generic-amd64.qcow2\n" % (IMAGE_SHA, IMAGE_SHA)
    assert download.find_in_checksum_file(text, "debian-13-generic-amd64.qcow2") == []


def test_a_file_listed_twice_with_different_digests_is_refused_before_the_image_is_asked_for(hv, server, ensure):
    url = server.add("/debian-13-generic-amd64.qcow2", IMAGE)
    sums = server.add("/SHA256SUMS", ("%s  debian-13-generic-amd64.qcow2\n%s  other.img\n%s *debian-13-generic-amd64.qcow2\n"
                                      % (IMAGE_SHA, NEWER_SHA, NEWER_SHA)).encode("ascii"))
    for check_mode in (True, False):
        with pytest.raises(PermanentError) as refused:
            ensure(debian(url, "sha256:" + sums), check_mode=check_mode)
        assert refused.value.message.startswith(
            "checksum file %s lists 'debian-13-generic-amd64.qcow2' with different sha256 digests (%s and %s), so which "
            "one the image must have is ambiguous and it was not downloaded" % (sums, IMAGE_SHA, NEWER_SHA))
    assert server.hit_count("/debian-13-generic-amd64.qcow2") == 0 and hv.calls == []


def test_a_file_listed_twice_with_the_same_digest_is_cached(hv, server, ensure):
    url = server.add("/debian-13-generic-amd64.qcow2", IMAGE)
    sums = server.add("/SHA256SUMS", ("%s  debian-13-generic-amd64.qcow2\n%s  ./debian-13-generic-amd64.qcow2\n"
                                      % (IMAGE_SHA, IMAGE_SHA.upper())).encode("ascii"))
    assert ensure(debian(url, "sha256:" + sums)).sha256 == IMAGE_SHA


# --- ensure_image: the reference's cases ------------------------------------------------------------


def test_fresh_fetch_streams_verifies_refreshes_and_writes_the_marker_last(hv, server, ensure):
    url = server.add("/debian.qcow2", IMAGE)
    result = ensure(debian(url, "sha256:" + IMAGE_SHA))

    volume = base_name(IMAGE_SHA)
    assert result.volume == volume
    assert result.path == "/var/lib/libvirt/images/default/" + volume
    assert (result.format, result.sha256, result.size) == ("qcow2", IMAGE_SHA, VIRTUAL_SIZE)
    assert (result.changed, result.downloaded, result.bytes) == (True, True, len(IMAGE))
    assert result.seconds > 0 and result.throughput > 0
    assert volume_names(hv) == [volume, volume + ".sha256"]
    assert content(hv, volume) == IMAGE
    # libvirt probed the uploaded qcow2 header on refresh.
    assert hv.volume("default", volume).format == "qcow2"
    assert content(hv, volume + ".sha256") == IMAGE_SHA.encode("ascii")
    assert server.hit_count("/debian.qcow2") == 1
    # Created raw at exactly Content-Length, refreshed after the upload, marker last.
    mutations = [c for c in hv.calls if c in MUTATING]
    assert mutations == ["create_volume", "upload_volume", "refresh_pool", "create_volume", "upload_volume"]
    assert result.actions == ["download %s into volume %s" % (url, volume), "write marker volume %s.sha256" % volume]
    assert result.diff() == {
        "before": {"volume": volume, "sha256": None, "state": "absent"},
        "after": {"volume": volume, "sha256": IMAGE_SHA, "state": "present"},
    }


def test_base_is_created_raw_and_exactly_content_length_bytes(hv, server, ensure, monkeypatch):
    created = []
    original = hv.create_volume

    def spy(pool, xml):
        created.append(xml)
        return original(pool, xml)

    monkeypatch.setattr(hv, "create_volume", spy)
    ensure(debian(server.add("/debian.qcow2", IMAGE), "sha256:" + IMAGE_SHA))
    assert '<capacity unit="bytes">%d</capacity><allocation unit="bytes">0</allocation>' % len(IMAGE) in created[0]
    assert '<format type="raw"/>' in created[0]


def test_request_asks_for_the_body_unencoded(server, ensure):
    ensure(debian(server.add("/debian.qcow2", IMAGE)))
    assert server.headers[0]["Accept-Encoding"] == "identity"


def test_no_checksum_still_records_the_digest_and_is_kept_forever(hv, server, ensure):
    url = server.add("/debian.qcow2", IMAGE)
    first = ensure(debian(url))
    assert first.volume == "base-debian-13.qcow2"
    assert first.sha256 == IMAGE_SHA
    assert content(hv, "base-debian-13.qcow2.sha256") == IMAGE_SHA.encode("ascii")

    server.routes["/debian.qcow2"].body = NEWER_IMAGE
    second = ensure(debian(url))
    assert (second.changed, second.downloaded, second.sha256) == (False, False, IMAGE_SHA)
    assert server.hit_count("/debian.qcow2") == 1


def test_already_cached_touches_nothing_and_fetches_nothing(hv, server, ensure):
    url = server.add("/debian.qcow2", IMAGE)
    cache_by_hand(hv, base_name(IMAGE_SHA), IMAGE, IMAGE_SHA)
    hv.calls.clear()

    result = ensure(debian(url, "sha256:" + IMAGE_SHA))
    assert (result.changed, result.downloaded, result.bytes, result.throughput) == (False, False, 0, 0)
    assert result.path == "/var/lib/libvirt/images/default/" + base_name(IMAGE_SHA)
    assert result.actions == []
    assert result.diff()["before"] == result.diff()["after"]
    assert server.hit_count("/debian.qcow2") == 0
    assert not MUTATING.intersection(hv.calls)
    # pool, base, marker, marker content, base XML: five round trips.
    assert hv.calls == ["lookup_pool", "lookup_volume", "lookup_volume", "download_volume", "volume_xml"]


def test_marker_missing_means_a_partial_upload_and_is_redone(hv, server, ensure):
    volume = base_name(IMAGE_SHA)
    hv.add_volume("default", volume, content=b"half an image")
    result = ensure(debian(server.add("/debian.qcow2", IMAGE), "sha256:" + IMAGE_SHA))
    assert server.hit_count("/debian.qcow2") == 1
    assert content(hv, volume) == IMAGE
    assert result.actions[0] == "delete leftover base volume %s" % volume
    assert result.diff()["before"]["state"] == "incomplete"


def test_marker_without_base_is_removed_and_the_image_fetched(hv, server, ensure):
    volume = base_name(IMAGE_SHA)
    hv.add_volume("default", volume + ".sha256", content=IMAGE_SHA.encode("ascii"))
    result = ensure(debian(server.add("/debian.qcow2", IMAGE), "sha256:" + IMAGE_SHA))
    assert result.actions[0] == "delete leftover marker volume %s.sha256" % volume
    assert volume_names(hv) == [volume, volume + ".sha256"]
    assert content(hv, volume) == IMAGE


@pytest.mark.parametrize("marker", [b"", IMAGE_SHA[:20].encode("ascii"), b"\xff" * 64, b"0" * 64])
def test_truncated_or_wrong_marker_is_repaired(hv, server, ensure, marker):
    volume = base_name(IMAGE_SHA)
    hv.add_volume("default", volume, content=IMAGE)
    hv.add_volume("default", volume + ".sha256", content=marker)
    result = ensure(debian(server.add("/debian.qcow2", IMAGE), "sha256:" + IMAGE_SHA))
    assert result.downloaded is True
    assert content(hv, volume + ".sha256") == IMAGE_SHA.encode("ascii")


def test_checksum_change_creates_a_new_base_and_keeps_the_old_one(hv, server, ensure):
    url = server.add("/debian.qcow2", IMAGE)
    old = ensure(debian(url, "sha256:" + IMAGE_SHA))
    add_overlay(hv, "proxy-1.qcow2", old.volume)

    server.routes["/debian.qcow2"].body = NEWER_IMAGE
    new = ensure(debian(url, "sha256:" + NEWER_SHA))

    assert new.volume == base_name(NEWER_SHA) != old.volume
    assert new.downloaded is True
    assert content(hv, old.volume) == IMAGE
    assert content(hv, new.volume) == NEWER_IMAGE
    assert volume_names(hv) == sorted([old.volume, old.volume + ".sha256", new.volume, new.volume + ".sha256",
                                       "proxy-1.qcow2"])
    assert new.diff()["before"] == {"volume": new.volume, "sha256": None, "state": "absent"}


def test_checksum_mismatch_is_permanent_and_leaves_nothing(hv, server, ensure):
    url = server.add("/debian.qcow2", IMAGE)
    with pytest.raises(PermanentError) as raised:
        ensure(debian(url, "sha256:" + "a" * 64))
    assert IMAGE_SHA in raised.value.message and "a" * 64 in raised.value.message
    assert volume_names(hv) == []
    assert server.hit_count("/debian.qcow2") == 1  # a mismatch is not retried


@pytest.mark.parametrize("status", [404, 403, 410])
def test_http_4xx_is_permanent_and_not_retried(hv, server, ensure, status):
    url = server.add("/debian.qcow2", IMAGE, status=status)
    with pytest.raises(PermanentError, match="answered HTTP %d" % status):
        ensure(debian(url))
    assert server.hit_count("/debian.qcow2") == 1
    assert volume_names(hv) == []


@pytest.mark.parametrize("status", [500, 502, 503])
def test_http_5xx_is_retried_then_transient(hv, server, ensure, status):
    url = server.add("/debian.qcow2", IMAGE, status=status)
    with pytest.raises(TransientError) as raised:
        ensure(debian(url), retries=2)
    assert "failed after 3 attempt(s)" in raised.value.message
    assert "HTTP %d" % status in raised.value.message
    assert server.hit_count("/debian.qcow2") == 3
    assert volume_names(hv) == []


def test_http_5xx_then_success_downloads(hv, server, ensure):
    url = server.add("/debian.qcow2", IMAGE, failures=[503, 500])
    result = ensure(debian(url, "sha256:" + IMAGE_SHA), retries=2)
    assert result.downloaded is True
    assert server.hit_count("/debian.qcow2") == 3


def test_backoff_doubles_between_attempts(server, ensure, monkeypatch):
    sleeps = []
    monkeypatch.setattr(download.time, "sleep", sleeps.append)
    url = server.add("/debian.qcow2", IMAGE, status=503)
    with pytest.raises(TransientError):
        ensure(debian(url), retries=3, backoff=2.0)
    # The server thread's sleep(0) lands here too.
    assert [s for s in sleeps if s] == [2.0, 4.0, 8.0]


def test_connection_refused_is_retried_then_transient(hv, ensure):
    with pytest.raises(TransientError, match="failed after 2 attempt"):
        ensure(debian("http://127.0.0.1:9/debian.qcow2"), retries=1)
    assert volume_names(hv) == []


def test_missing_content_length_is_permanent(hv, server, ensure):
    url = server.add("/debian.qcow2", IMAGE, content_length=False)
    with pytest.raises(PermanentError, match="sent no Content-Length"):
        ensure(debian(url))
    assert volume_names(hv) == []


def test_body_cut_short_is_retried_and_the_partial_volume_removed(hv, server, ensure):
    url = server.add("/debian.qcow2", IMAGE, cut_after=100000)
    with pytest.raises(TransientError, match="100000 of|connection|IncompleteRead|Connection"):
        ensure(debian(url, "sha256:" + IMAGE_SHA), retries=1)
    assert server.hit_count("/debian.qcow2") == 2
    assert volume_names(hv) == []

    server.routes["/debian.qcow2"].cut_after = None
    assert ensure(debian(url, "sha256:" + IMAGE_SHA)).downloaded is True


def test_upload_failure_cleans_up_and_the_next_attempt_succeeds(hv, server, ensure):
    url = server.add("/debian.qcow2", IMAGE)
    hv.cut_upload_after(base_name(IMAGE_SHA), 100)
    with pytest.raises(TransientError, match="stream aborted"):
        ensure(debian(url, "sha256:" + IMAGE_SHA))
    assert volume_names(hv) == []
    assert ensure(debian(url, "sha256:" + IMAGE_SHA)).downloaded is True


def test_failed_cleanup_is_repaired_by_the_next_run(hv, server, ensure):
    url = server.add("/debian.qcow2", IMAGE)
    volume = base_name(IMAGE_SHA)
    hv.cut_upload_after(volume, 100)
    hv.fail("delete_volume", times=1)  # the connection died with the upload
    with pytest.raises(TransientError):
        ensure(debian(url, "sha256:" + IMAGE_SHA))
    assert volume_names(hv) == [volume]  # a base without marker: a leftover, not a cached image

    result = ensure(debian(url, "sha256:" + IMAGE_SHA))
    assert result.actions[0] == "delete leftover base volume %s" % volume
    assert content(hv, volume) == IMAGE


def test_interrupt_during_upload_removes_the_partial_volume(hv, server, ensure, monkeypatch):
    url = server.add("/debian.qcow2", IMAGE)
    original = hv.upload_volume

    def interrupted(vol, chunks):
        for _chunk in chunks:
            raise KeyboardInterrupt
        return original(vol, chunks)

    monkeypatch.setattr(hv, "upload_volume", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ensure(debian(url))
    assert volume_names(hv) == []


def test_missing_pool_is_permanent_and_says_what_to_do(hv, server, ensure):
    with pytest.raises(PermanentError, match="storage pool 'nope' does not exist") as raised:
        cache.ensure_image(hv, "nope", debian(server.add("/debian.qcow2", IMAGE)))
    assert raised.value.code == 49
    assert server.hit_count("/debian.qcow2") == 0


def test_concurrent_callers_download_once(hv, server, ensure):
    url = server.add("/debian.qcow2", IMAGE, delay=0.3)
    results, errors = [None] * 4, []

    def call(index):
        try:
            results[index] = ensure(debian(url, "sha256:" + IMAGE_SHA))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert server.hit_count("/debian.qcow2") == 1
    assert sorted(r.downloaded for r in results) == [False, False, False, True]
    assert {r.path for r in results} == {"/var/lib/libvirt/images/default/" + base_name(IMAGE_SHA)}
    # The waiters found it ready after the lock: unchanged, and their diff says so.
    for waiter in (r for r in results if not r.downloaded):
        assert waiter.changed is False
        assert waiter.diff()["before"]["state"] == "present"


def test_different_hypervisors_fetch_independently(server, ensure):
    url = server.add("/debian.qcow2", IMAGE)
    for uri in ("qemu+ssh://root@nas1/system", "qemu+ssh://root@lab2/system"):
        hypervisor = FakeHypervisor(uri=uri)
        hypervisor.add_pool("default")
        assert ensure(debian(url), hypervisor=hypervisor).downloaded is True
    assert server.hit_count("/debian.qcow2") == 2


# --- what the port adds ---------------------------------------------------------------------------


def test_checksum_from_a_sha256sums_file(hv, server, ensure):
    url = server.add("/cloud/trixie/debian-13-generic-amd64.qcow2", IMAGE)
    sums = server.add("/cloud/trixie/SHA256SUMS", ("%s  other.qcow2\n%s  debian-13-generic-amd64.qcow2\n"
                                                   % ("1" * 64, IMAGE_SHA)).encode())
    result = ensure(debian(url, "sha256:" + sums))
    assert (result.volume, result.sha256) == (base_name(IMAGE_SHA), IMAGE_SHA)


def test_sha256sums_file_without_the_image_is_permanent(hv, server, ensure):
    url = server.add("/debian-13-generic-amd64.qcow2", IMAGE)
    sums = server.add("/SHA256SUMS", ("%s  other.qcow2\n" % ("1" * 64)).encode())
    with pytest.raises(PermanentError, match="has no sha256 entry for 'debian-13-generic-amd64.qcow2'"):
        ensure(debian(url, "sha256:" + sums))
    assert server.hit_count("/debian-13-generic-amd64.qcow2") == 0
    assert hv.calls == []


def test_sha256sums_file_errors_follow_the_http_rules(server, ensure):
    url = server.add("/debian-13-generic-amd64.qcow2", IMAGE)
    with pytest.raises(PermanentError, match="answered HTTP 404"):
        ensure(debian(url, "sha256:" + server.url("/missing/SHA256SUMS")))
    sums = server.add("/SHA256SUMS", ("%s  debian-13-generic-amd64.qcow2\n" % IMAGE_SHA).encode(), failures=[503])
    assert ensure(debian(url, "sha256:" + sums)).sha256 == IMAGE_SHA


def test_oversized_checksum_file_is_refused(server, ensure, monkeypatch):
    monkeypatch.setattr(download, "MAX_CHECKSUM_FILE_BYTES", 1000)
    url = server.add("/debian-13-generic-amd64.qcow2", IMAGE)
    sums = server.add("/SHA256SUMS", b"x" * 5000)
    with pytest.raises(PermanentError, match="not a SHA256SUMS file"):
        ensure(debian(url, "sha256:" + sums))


def test_redirect_to_http_is_followed(server, ensure):
    url = server.add("/latest/debian.qcow2", location="/20250814/debian.qcow2")
    server.add("/20250814/debian.qcow2", IMAGE)
    assert ensure(debian(url, "sha256:" + IMAGE_SHA)).sha256 == IMAGE_SHA


@pytest.mark.parametrize("location", ["file:///etc/shadow", "ftp://mirror/debian.qcow2", "gopher://x/"])
def test_redirect_to_another_scheme_is_refused(hv, server, ensure, location):
    url = server.add("/debian.qcow2", location=location)
    with pytest.raises(PermanentError, match="only http and https redirects are followed"):
        ensure(debian(url))
    assert volume_names(hv) == []


def test_qcow2_format_but_raw_body_is_refused_early(hv, server, ensure, monkeypatch):
    sent = []
    original = hv.upload_volume

    def counting(vol, chunks):
        def tee():
            for chunk in chunks:
                sent.append(len(chunk))
                yield chunk
        return original(vol, tee())

    monkeypatch.setattr(hv, "upload_volume", counting)
    url = server.add("/disk.img", RAW_IMAGE * 10)
    with pytest.raises(PermanentError, match="not a qcow2 image"):
        ensure(debian(url))
    assert sent == []  # stopped at the first chunk, before anything reached libvirt
    assert volume_names(hv) == []


def test_raw_format_but_qcow2_body_is_refused(hv, server, ensure):
    with pytest.raises(PermanentError, match="is a qcow2 image but format is raw"):
        ensure(debian(server.add("/debian.qcow2", IMAGE), fmt="raw"))
    assert volume_names(hv) == []


def test_raw_image(hv, server, ensure):
    result = ensure(debian(server.add("/disk.raw", RAW_IMAGE), "sha256:" + RAW_SHA, fmt="raw"))
    assert result.volume == "base-debian-13-%s.raw" % RAW_SHA[:16]
    assert (result.format, result.size) == ("raw", len(RAW_IMAGE))
    assert hv.volume("default", result.volume).format == "raw"


def test_empty_body_is_permanent(server, ensure):
    with pytest.raises(PermanentError, match="is empty"):
        ensure(debian(server.add("/debian.qcow2", b"")))


def test_tls_failure_is_permanent_and_names_validate_certs(ensure, monkeypatch):
    class FailingSession:
        def get(self, url, **kwargs):
            assert kwargs["verify"] is True
            raise requests.exceptions.SSLError("certificate verify failed")

    with pytest.raises(PermanentError, match="validate_certs"):
        ensure(debian("https://mirror.example/debian.qcow2"), http=FailingSession())


@pytest.mark.parametrize("marker", [None, b"0" * 64, b"\xff" * 64])
def test_a_base_in_use_with_a_missing_or_wrong_marker_is_hashed_in_place_and_marked_again(hv, server, ensure, marker):
    volume = base_name(IMAGE_SHA)
    hv.add_volume("default", volume, content=IMAGE, fmt="qcow2", capacity=VIRTUAL_SIZE)
    if marker is not None:
        hv.add_volume("default", volume + ".sha256", content=marker)
    add_overlay(hv, "proxy-1.qcow2", volume)
    url = server.add("/debian.qcow2", IMAGE)

    predicted = ensure(debian(url, "sha256:" + IMAGE_SHA), check_mode=True)
    assert predicted.actions[0].startswith("verify base volume %s against sha256 %s" % (volume, IMAGE_SHA))
    assert (predicted.changed, predicted.downloaded, predicted.path) == (True, False, hv.volume("default", volume).path)
    assert "delete_volume" not in hv.calls
    result = ensure(debian(url, "sha256:" + IMAGE_SHA))
    assert result.actions == predicted.actions and not result.downloaded
    assert content(hv, volume + ".sha256") == IMAGE_SHA.encode("ascii") and content(hv, volume) == IMAGE
    assert server.hit_count("/debian.qcow2") == 0
    assert ensure(debian(url, "sha256:" + IMAGE_SHA)).changed is False


def test_a_base_in_use_whose_content_changed_is_refused_and_nothing_is_deleted(hv, server, ensure):
    volume = base_name(IMAGE_SHA)
    hv.add_volume("default", volume, content=b"not the image", fmt="qcow2", capacity=VIRTUAL_SIZE)
    add_overlay(hv, "proxy-1.qcow2", volume)
    add_overlay(hv, "proxy-2.qcow2", volume)
    url = server.add("/debian.qcow2", IMAGE)

    assert ensure(debian(url, "sha256:" + IMAGE_SHA), check_mode=True).changed
    with pytest.raises(PermanentError) as raised:
        ensure(debian(url, "sha256:" + IMAGE_SHA))
    assert "content changed" in raised.value.message and "nothing was changed" in raised.value.message
    assert "'proxy-1.qcow2', 'proxy-2.qcow2'" in raised.value.message and volume in raised.value.message
    assert "delete_volume" not in hv.calls and volume + ".sha256" not in volume_names(hv)
    assert server.hit_count("/debian.qcow2") == 0


def test_a_base_in_use_without_marker_or_checksum_is_never_deleted(hv, server, ensure):
    volume = "base-debian-13.qcow2"
    hv.add_volume("default", volume, content=IMAGE)
    add_overlay(hv, "proxy-1.qcow2", volume)
    url = server.add("/debian.qcow2", IMAGE)

    for check_mode in (True, False):
        with pytest.raises(PermanentError, match="cannot refetch image .* missing or unreadable.* 'proxy-1.qcow2'"):
            ensure(debian(url), check_mode=check_mode)
    assert "delete_volume" not in hv.calls
    assert server.hit_count("/debian.qcow2") == 0


# --- check mode -------------------------------------------------------------------------------------


def test_check_mode_predicts_a_download_and_touches_nothing(hv, server, ensure, tmp_path):
    volume = base_name(IMAGE_SHA)
    hv.add_volume("default", volume, content=b"partial")
    url = server.add("/debian.qcow2", IMAGE)
    result = ensure(debian(url, "sha256:" + IMAGE_SHA), check_mode=True)
    assert (result.changed, result.downloaded, result.path, result.size) == (True, True, None, VIRTUAL_SIZE)
    assert result.sha256 == IMAGE_SHA
    assert result.actions == ["delete leftover base volume %s" % volume, "download %s into volume %s" % (url, volume),
                              "write marker volume %s.sha256" % volume]
    assert result.diff() == {"before": {"volume": volume, "sha256": None, "state": "incomplete"},
                             "after": {"volume": volume, "sha256": IMAGE_SHA, "state": "present"}}
    assert not MUTATING.intersection(hv.calls)
    assert server.ranges_asked("/debian.qcow2") == [PROBE_RANGE]  # the header only
    assert not (tmp_path / "locks").exists()


def test_check_mode_predicts_no_change_when_cached(hv, server, ensure):
    cache_by_hand(hv, base_name(IMAGE_SHA), IMAGE, IMAGE_SHA)
    result = ensure(debian(server.add("/debian.qcow2", IMAGE), "sha256:" + IMAGE_SHA), check_mode=True)
    assert (result.changed, result.downloaded) == (False, False)
    assert result.path is not None


def test_check_mode_reads_the_sha256sums_file_and_only_the_image_header(hv, server, ensure):
    url = server.add("/debian-13-generic-amd64.qcow2", IMAGE)
    sums = server.add("/SHA256SUMS", ("%s  debian-13-generic-amd64.qcow2\n" % IMAGE_SHA).encode())
    result = ensure(debian(url, "sha256:" + sums), check_mode=True)
    assert result.volume == base_name(IMAGE_SHA)
    assert server.ranges_asked("/SHA256SUMS") == [None]
    assert server.ranges_asked("/debian-13-generic-amd64.qcow2") == [PROBE_RANGE]


def test_check_mode_without_checksum_cannot_know_the_digest(server, ensure):
    result = ensure(debian(server.add("/debian.qcow2", IMAGE)), check_mode=True)
    assert (result.volume, result.sha256, result.diff()["after"]["sha256"]) == ("base-debian-13.qcow2", None, None)


# --- self-contained images, and the virtual size known before the download -------------------------


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("body, sha, names", [
    (EVIL_IMAGE, EVIL_SHA, "names the backing file '/etc/hostname' in its qcow2 header"),
    (DATA_FILE_IMAGE, DATA_FILE_SHA, "names the external data file '/dev/vda' in its qcow2 header"),
])
def test_an_image_that_needs_another_file_is_refused_and_nothing_is_written(
        hv, server, ensure, check_mode, body, sha, names):
    url = server.add("/evil.qcow2", body)
    with pytest.raises(PermanentError) as raised:
        ensure(debian(url, "sha256:" + sha), check_mode=check_mode)
    assert raised.type is PermanentError  # exactly: not retried, and not a TransientError after retries
    assert raised.value.message.startswith("image %s %s: a base image must be self-contained" % (url, names))
    assert "nothing was cached" in raised.value.message
    assert volume_names(hv) == []  # no base, no marker
    assert "create_volume" not in hv.calls
    assert server.hit_count("/evil.qcow2") == 1


def test_an_image_without_checksum_that_needs_another_file_is_refused(hv, server, ensure):
    with pytest.raises(PermanentError, match="names the backing file '/etc/hostname'"):
        ensure(debian(server.add("/evil.qcow2", EVIL_IMAGE)))
    assert volume_names(hv) == []


def test_an_invalid_qcow2_header_is_refused_before_the_volume_exists(hv, server, ensure):
    url = server.add("/debian.qcow2", qcow2_image(b"x" * 1000, cluster_bits=30))
    for check_mode in (True, False):
        with pytest.raises(PermanentError, match="has an invalid qcow2 header .cluster_bits 30 is outside 9-21."):
            ensure(debian(url), check_mode=check_mode)
    assert "create_volume" not in hv.calls


def test_a_base_libvirt_finds_a_backing_store_in_is_deleted_before_its_marker(hv, server, ensure, monkeypatch):
    """The header check passed, but libvirt's own probe after the refresh reads a backing store."""
    url = server.add("/debian.qcow2", IMAGE)
    volume = base_name(IMAGE_SHA)
    original = hv.refresh_pool

    def refresh_finding_a_backing_store(pool):
        original(pool)
        hv.volume("default", volume).backing_path = "/etc/shadow"

    monkeypatch.setattr(hv, "refresh_pool", refresh_finding_a_backing_store)
    with pytest.raises(PermanentError) as raised:
        ensure(debian(url, "sha256:" + IMAGE_SHA))
    assert raised.value.message.startswith(
        "image %s has the backing store '/etc/shadow' as libvirt reads it in pool 'default': "
        "a base image must be self-contained" % url)
    assert "base volume '%s' was deleted" % volume in raised.value.message
    assert volume_names(hv) == []
    assert [c for c in hv.calls if c in MUTATING] == ["create_volume", "upload_volume", "refresh_pool", "delete_volume"]


def test_a_cached_base_with_a_backing_store_is_refused_but_kept(hv, server, ensure):
    """Cached before images had to be self-contained: VMs may use it, so it is not deleted."""
    volume = base_name(IMAGE_SHA)
    cache_by_hand(hv, volume, IMAGE, IMAGE_SHA)
    hv.volume("default", volume).backing_path = "/etc/hostname"
    for check_mode in (True, False):
        with pytest.raises(PermanentError) as raised:
            ensure(debian(server.add("/debian.qcow2", IMAGE), "sha256:" + IMAGE_SHA), check_mode=check_mode)
        assert "base volume '%s' in pool 'default' has the backing store '/etc/hostname'" % volume in raised.value.message
        assert "kvm_base_image state=absent" in raised.value.message
    assert volume_names(hv) == [volume, volume + ".sha256"]
    assert not MUTATING.intersection(hv.calls)


@pytest.mark.parametrize("route", [dict(), dict(ranges=False), dict(range_length="*")])
def test_check_mode_reports_the_virtual_size_from_the_header(hv, server, ensure, route):
    """Whether the server answers the Range request with a 206 (with or without the length) or sends it all."""
    url = server.add("/debian.qcow2", qcow2_image(b"payload " * 300000, virtual_size=3 * 1024 ** 3), **route)
    result = ensure(debian(url), check_mode=True)
    assert (result.changed, result.downloaded, result.size) == (True, True, 3 * 1024 ** 3)
    assert server.ranges_asked("/debian.qcow2") == [PROBE_RANGE]
    assert not MUTATING.intersection(hv.calls)


@pytest.mark.parametrize("route", [dict(), dict(ranges=False)])
def test_check_mode_reports_a_raw_image_s_length_as_its_size(hv, server, ensure, route):
    url = server.add("/disk.raw", RAW_IMAGE, **route)
    result = ensure(debian(url, fmt="raw"), check_mode=True)
    assert result.size == len(RAW_IMAGE)
    assert result.size == ensure(debian(url, fmt="raw")).size


def test_check_mode_refuses_the_wrong_format(server, ensure):
    with pytest.raises(PermanentError, match="is a qcow2 image but format is raw"):
        ensure(debian(server.add("/debian.qcow2", IMAGE), fmt="raw"), check_mode=True)
    with pytest.raises(PermanentError, match="not a qcow2 image"):
        ensure(debian(server.add("/disk.raw", RAW_IMAGE)), check_mode=True)


def test_check_mode_header_read_is_retried_like_the_download(server, ensure):
    url = server.add("/debian.qcow2", IMAGE, failures=[503, 500])
    assert ensure(debian(url), check_mode=True, retries=2).size == VIRTUAL_SIZE
    assert server.hit_count("/debian.qcow2") == 3
    server.routes["/debian.qcow2"].failures = [503] * 3
    with pytest.raises(TransientError, match="reading the header of image %s failed after 3 attempt" % url):
        ensure(debian(url), check_mode=True, retries=2)


@pytest.mark.parametrize("range_length", ["\u00b2", "1\u00b3"])
def test_a_content_range_length_not_in_ascii_digits_is_refused_naming_it(server, ensure, range_length):
    url = server.add("/debian.qcow2", IMAGE, range_length=range_length)
    with pytest.raises(PermanentError, match="answered a request for its first bytes with Content-Range 'bytes 0-"):
        ensure(debian(url), check_mode=True)


def test_check_mode_on_an_empty_or_missing_image_fails_like_the_download(server, ensure):
    with pytest.raises(PermanentError, match="is empty"):
        ensure(debian(server.add("/empty.qcow2", b"")), check_mode=True)
    with pytest.raises(PermanentError, match="answered HTTP 404"):
        ensure(debian(server.url("/missing.qcow2")), check_mode=True)
    with pytest.raises(PermanentError, match="sent no Content-Length"):
        ensure(debian(server.add("/debian.qcow2", IMAGE, ranges=False, content_length=False)), check_mode=True)


class _EndlessResponse:
    """A 200 for a huge image that ignores Range: counts what is read and whether it was closed."""

    status_code = 200
    reason = "OK"
    is_redirect = False

    def __init__(self, head):
        self.headers = {"Content-Length": str(100 * 1024 ** 3)}
        self.head = head
        self.read = 0
        self.closed = False

    def iter_content(self, chunk_size):
        data = self.head + b"\0" * (chunk_size - len(self.head) % chunk_size)
        while True:
            for start in range(0, len(data), chunk_size):
                self.read += chunk_size
                yield data[start:start + chunk_size]
            data = b"\0" * chunk_size

    def close(self):
        self.closed = True


@pytest.mark.parametrize("head", [qcow2_header(VIRTUAL_SIZE), qcow2_header(VIRTUAL_SIZE, cluster_bits=21)])
def test_check_mode_reads_no_more_than_the_header_asked_for_and_closes(ensure, head):
    class Session:
        def __init__(self):
            self.responses = []

        def get(self, url, **kwargs):
            assert kwargs["headers"]["Range"] == PROBE_RANGE and kwargs["stream"] is True
            self.responses.append(_EndlessResponse(head))
            return self.responses[-1]

    session = Session()
    assert ensure(debian("http://mirror.example/debian.qcow2"), check_mode=True, http=session).size == VIRTUAL_SIZE
    (response,) = session.responses
    assert response.closed and response.read <= MAX_HEADER_BYTES


def test_an_image_too_large_is_refused_after_its_first_chunk_and_the_download_closed(hv, ensure):
    """The header decides before the body is downloaded: of an endless body, one chunk is read."""
    responses = []

    class Session:
        def get(self, url, **kwargs):
            assert "Range" not in kwargs["headers"]
            responses.append(_EndlessResponse(qcow2_header(1024 ** 5)))
            return responses[-1]

    with pytest.raises(ValidationError, match="virtual size of 1125899906842624 bytes"):
        ensure(debian("http://mirror.example/debian.qcow2"), http=Session(), max_virtual_size=1024 ** 4)
    (response,) = responses
    assert response.closed and response.read == download.CHUNK_SIZE
    assert "create_volume" not in hv.calls


@pytest.mark.parametrize("check_mode", [False, True])
def test_max_virtual_size_refuses_a_larger_image_before_anything_is_written(hv, server, ensure, check_mode):
    url = server.add("/debian.qcow2", IMAGE)
    with pytest.raises(ValidationError) as raised:
        ensure(debian(url, "sha256:" + IMAGE_SHA), check_mode=check_mode, max_virtual_size=1024 ** 3)
    assert raised.value.message == (
        "image %s has a virtual size of 2147483648 bytes (2 GiB), more than the maximum of 1073741824 bytes (1 GiB) "
        "that a VM's disk may have here; nothing was cached" % url)
    assert "create_volume" not in hv.calls and volume_names(hv) == []
    assert ensure(debian(url, "sha256:" + IMAGE_SHA), check_mode=check_mode, max_virtual_size=VIRTUAL_SIZE).size \
        == VIRTUAL_SIZE


def test_max_virtual_size_of_a_raw_image_is_its_length(hv, server, ensure):
    url = server.add("/disk.raw", RAW_IMAGE)
    with pytest.raises(ValidationError, match="virtual size of %d bytes" % len(RAW_IMAGE)):
        ensure(debian(url, fmt="raw"), max_virtual_size=len(RAW_IMAGE) - 1)
    assert "create_volume" not in hv.calls


def test_max_virtual_size_applies_to_a_cached_image_too(hv, server, ensure):
    cache_by_hand(hv, base_name(IMAGE_SHA), IMAGE, IMAGE_SHA)
    with pytest.raises(ValidationError, match="virtual size of 2147483648 bytes"):
        ensure(debian(server.add("/debian.qcow2", IMAGE), "sha256:" + IMAGE_SHA), max_virtual_size=VIRTUAL_SIZE - 1)
    assert server.hit_count("/debian.qcow2") == 0


def test_max_virtual_size_raised_between_plan_and_fetch_is_still_refused(hv, server, ensure):
    """The image changes upstream after check mode saw it: the real run reads the new header and refuses it."""
    url = server.add("/debian.qcow2", IMAGE)
    assert ensure(debian(url), check_mode=True, max_virtual_size=VIRTUAL_SIZE).size == VIRTUAL_SIZE
    server.routes["/debian.qcow2"].body = qcow2_image(b"bigger", virtual_size=2 * VIRTUAL_SIZE)
    with pytest.raises(ValidationError, match="virtual size of 4294967296 bytes .4 GiB."):
        ensure(debian(url), max_virtual_size=VIRTUAL_SIZE)
    assert "create_volume" not in hv.calls


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "1G"])
def test_max_virtual_size_must_be_a_positive_number_of_bytes(hv, ensure, value):
    with pytest.raises(ValidationError, match="max_virtual_size must be a positive number of bytes"):
        ensure(debian("http://mirror.example/debian.qcow2"), max_virtual_size=value)
    assert hv.calls == []


def test_the_header_read_first_is_uploaded_first_and_hashed_once(hv, server, ensure, monkeypatch):
    uploaded = []
    original = hv.upload_volume

    def recording(vol, chunks):
        def tee():
            for chunk in chunks:
                uploaded.append(chunk)
                yield chunk
        return original(vol, tee())

    monkeypatch.setattr(hv, "upload_volume", recording)
    result = ensure(debian(server.add("/debian.qcow2", IMAGE), "sha256:" + IMAGE_SHA))
    assert result.sha256 == IMAGE_SHA and b"".join(uploaded[:-1]) == IMAGE
    assert uploaded[0] == IMAGE[:len(uploaded[0])]
    assert server.ranges_asked("/debian.qcow2") == [None]  # the real run reads the header off the download


# --- the planners: pure functions of the request and the observation -------------------------------


def planned_request(**kwargs):
    spec = debian("https://mirror.example/debian.qcow2", "sha256:" + IMAGE_SHA)
    return cache.ImageRequest("default", spec, sha256=IMAGE_SHA, **kwargs)


def base_info(backing_path=None):
    volume = base_name(IMAGE_SHA)
    return VolumeInfo(volume, "/pool/" + volume, "qcow2", VIRTUAL_SIZE, backing_path)


def observed(header=None, **cached):
    return cache.ImageObservation("pool handle", image_pool.CachedBase(base_name(IMAGE_SHA), **cached), header)


def test_plan_of_a_ready_image_has_no_steps_and_describes_the_base():
    plan = cache.plan_image(planned_request(), observed(base="base", marker="marker", marker_digest=IMAGE_SHA,
                                                        info=base_info()))
    assert plan.steps == () and plan.result.changed is False
    assert (plan.result.path, plan.result.size, plan.result.sha256) == ("/pool/" + base_name(IMAGE_SHA), VIRTUAL_SIZE,
                                                                        IMAGE_SHA)


def test_plan_deletes_leftovers_marker_first_then_downloads_and_writes_the_marker():
    plan = cache.plan_image(planned_request(), observed(base="base", marker="marker", info=base_info()))
    assert [(step.operation, step.target) for step in plan.steps] == [
        (cache.DELETE, "marker"), (cache.DELETE, "base"), (cache.FETCH, "pool handle"), (cache.WRITE_MARKER, "pool handle")]
    assert plan.result.actions == plan.actions and plan.result.path is None
    assert plan.result.diff()["before"]["state"] == "incomplete"


def test_plan_takes_the_virtual_size_from_the_header_and_refuses_what_the_download_would():
    header = ImageHeader("qcow2", 3 * 1024 ** 3)
    assert cache.plan_image(planned_request(), observed(header)).result.size == 3 * 1024 ** 3
    with pytest.raises(ValidationError, match="more than the maximum"):
        cache.plan_image(planned_request(max_virtual_size=1024 ** 3), observed(header))
    with pytest.raises(PermanentError, match="names the backing file '/etc/hostname'"):
        cache.plan_image(planned_request(), observed(ImageHeader("qcow2", 1, backing_file="/etc/hostname")))


def test_plan_refuses_to_refetch_a_base_in_use_and_a_ready_base_that_backs_onto_a_file():
    with pytest.raises(PermanentError, match="cannot refetch image .* backing store of 'proxy-1.qcow2'"):
        cache.plan_image(replace(planned_request(), sha256=None),
                         observed(base="base", info=base_info(), users=VolumeUsers(("proxy-1.qcow2",))))
    with pytest.raises(PermanentError, match="has the backing store '/etc/shadow'"):
        cache.plan_image(planned_request(), observed(base="base", marker="marker", marker_digest=IMAGE_SHA,
                                                     info=base_info("/etc/shadow")))


def test_removal_plan_keeps_bases_in_use_when_pruning_and_refuses_them_when_removing():
    bases = {"base-debian-13.raw": image_pool.CachedBase("base-debian-13.raw", base="raw", users=VolumeUsers(("vm.qcow2",))),
             "base-debian-13.qcow2": image_pool.CachedBase("base-debian-13.qcow2", base="qcow2", marker="marker")}
    observation = image_removal.RemovalObservation("pool handle", bases)
    pruned = image_removal.plan_removal(image_removal.RemovalRequest("default", "debian-13"), observation)
    assert [step.target for step in pruned.steps] == ["marker", "qcow2"]
    assert pruned.result.kept == [{"volume": "base-debian-13.raw", "used_by": ["vm.qcow2"], "used_by_domains": []}]
    assert pruned.result.bases_after == ["base-debian-13.raw"]
    with pytest.raises(PermanentError, match="cannot remove image: base volume 'base-debian-13.raw'"):
        image_removal.plan_removal(image_removal.RemovalRequest("default", "debian-13", strict=True), observation)


# --- remove_image and prune_images ------------------------------------------------------------------


@pytest.fixture
def three_releases(hv):
    """Two checksummed bases of debian-13 (the older used by a VM), an unchecksummed raw one, a leftover."""
    old, new = base_name(IMAGE_SHA), base_name(NEWER_SHA)
    cache_by_hand(hv, old, IMAGE, IMAGE_SHA)
    cache_by_hand(hv, new, NEWER_IMAGE, NEWER_SHA)
    hv.add_volume("default", "base-debian-13.raw", content=RAW_IMAGE)
    hv.add_volume("default", "base-debian-13.raw.sha256", content=RAW_SHA.encode())
    hv.add_volume("default", "base-debian-13-00000000000000ff.qcow2", content=b"partial")  # no marker
    add_overlay(hv, "proxy-1.qcow2", old)
    # Volumes of other images and of VMs are never candidates.
    hv.add_volume("default", "base-debian-12.qcow2", content=IMAGE)
    hv.add_volume("default", "proxy-1-seed.iso", content=b"seed")
    return old, new


def test_remove_with_checksum_removes_only_that_base(hv, three_releases):
    old, new = three_releases
    removal = image_removal.remove_image(hv, "default", ImageSpec("debian-13", checksum="sha256:" + NEWER_SHA))
    assert removal.removed == [new]
    assert removal.actions == ["delete marker volume %s.sha256" % new, "delete base volume %s" % new]
    assert new not in volume_names(hv) and new + ".sha256" not in volume_names(hv)
    assert old in volume_names(hv)
    assert removal.changed is True


def test_remove_is_idempotent(hv, three_releases):
    spec = ImageSpec("debian-13", checksum="sha256:" + NEWER_SHA)
    image_removal.remove_image(hv, "default", spec)
    again = image_removal.remove_image(hv, "default", spec)
    assert (again.changed, again.removed, again.actions) == (False, [], [])


def test_remove_of_a_base_in_use_fails_naming_the_users_and_removes_nothing(hv, three_releases):
    old, _new = three_releases
    before = volume_names(hv)
    for spec in (ImageSpec("debian-13", checksum="sha256:" + IMAGE_SHA), ImageSpec("debian-13")):
        with pytest.raises(PermanentError) as raised:
            image_removal.remove_image(hv, "default", spec)
        assert "cannot remove image: base volume '%s' in pool 'default' is the backing store of 'proxy-1.qcow2'" % old \
            in raised.value.message
    assert volume_names(hv) == before


def test_check_mode_predicts_the_removal_of_a_base_whose_users_the_same_run_removes_first(hv, three_releases):
    """destroy.yml --check with egress_proxy_remove_image: the proxies are not removed yet, but will be."""
    old, _new = three_releases
    spec = ImageSpec("debian-13", checksum="sha256:" + IMAGE_SHA)
    removal = image_removal.remove_image(hv, "default", spec, check_mode=True, departing=["proxy-1.qcow2"])
    assert (removal.changed, removal.removed) == (True, [old])
    # A real run counts what the pool holds: the user is still there, so nothing is removed.
    before = volume_names(hv)
    with pytest.raises(PermanentError, match="is the backing store of 'proxy-1.qcow2'"):
        image_removal.remove_image(hv, "default", spec, departing=["proxy-1.qcow2"])
    assert volume_names(hv) == before
    hv.delete_volume(hv.volume("default", "proxy-1.qcow2"))
    assert image_removal.remove_image(hv, "default", spec, departing=["proxy-1.qcow2"]).removed == [old]


def test_remove_without_checksum_removes_every_copy_of_the_image(hv, three_releases):
    old, new = three_releases
    hv.delete_volume(hv.volume("default", "proxy-1.qcow2"))
    removal = image_removal.remove_image(hv, "default", ImageSpec("debian-13"))
    assert removal.removed == sorted([old, new, "base-debian-13.raw", "base-debian-13-00000000000000ff.qcow2"])
    assert volume_names(hv) == ["base-debian-12.qcow2", "proxy-1-seed.iso"]
    assert removal.diff() == {"before": {"bases": removal.removed}, "after": {"bases": []}}


def test_remove_in_check_mode_predicts_and_touches_nothing(hv, three_releases):
    _old, new = three_releases
    hv.calls.clear()
    removal = image_removal.remove_image(hv, "default", ImageSpec("debian-13", checksum="sha256:" + NEWER_SHA),
                                         check_mode=True)
    assert (removal.changed, removal.removed) == (True, [new])
    assert not MUTATING.intersection(hv.calls)


def test_prune_removes_unused_copies_and_keeps_those_in_use(hv, three_releases, tmp_path):
    old, new = three_releases
    pruned = image_removal.prune_images(hv, "default", "debian-13", keep=(new,), lock_dir=str(tmp_path))
    assert pruned.removed == ["base-debian-13-00000000000000ff.qcow2", "base-debian-13.raw"]
    assert pruned.kept == [{"volume": old, "used_by": ["proxy-1.qcow2"], "used_by_domains": []}]
    assert volume_names(hv) == sorted(["base-debian-12.qcow2", "proxy-1-seed.iso", "proxy-1.qcow2",
                                       old, old + ".sha256", new, new + ".sha256"])
    assert pruned.bases_after == sorted([old, new])

    again = image_removal.prune_images(hv, "default", "debian-13", keep=(new,), lock_dir=str(tmp_path))
    assert (again.changed, again.removed, again.kept) == (False, [], pruned.kept)


def test_prune_removes_an_orphaned_marker(hv, tmp_path):
    hv.add_volume("default", "base-debian-13-00000000000000aa.qcow2.sha256", content=b"0" * 64)
    pruned = image_removal.prune_images(hv, "default", "debian-13", lock_dir=str(tmp_path))
    assert pruned.removed == ["base-debian-13-00000000000000aa.qcow2"]
    assert pruned.actions == ["delete marker volume base-debian-13-00000000000000aa.qcow2.sha256"]
    assert volume_names(hv) == []


def test_prune_in_check_mode_touches_nothing(hv, three_releases, tmp_path):
    _old, new = three_releases
    before = volume_names(hv)
    hv.calls.clear()
    pruned = image_removal.prune_images(hv, "default", "debian-13", keep=(new,), check_mode=True, lock_dir=str(tmp_path))
    assert pruned.removed == ["base-debian-13-00000000000000ff.qcow2", "base-debian-13.raw"]
    assert volume_names(hv) == before
    assert not MUTATING.intersection(hv.calls)


def test_prune_rechecks_users_under_the_lock(hv, three_releases, tmp_path, monkeypatch):
    """An overlay created on a base between the first look and the lock keeps the base."""
    raw = "base-debian-13.raw"
    original = image_removal.volume_lock

    def lock_then_overlay(uri, pool, volume, *args):
        if volume == raw:
            hv.add_volume("default", "late.qcow2", fmt="qcow2", capacity=1,
                          backing_path=hv.volume("default", raw).path, backing_format="raw")
        return original(uri, pool, volume, *args)

    monkeypatch.setattr(image_removal, "volume_lock", lock_then_overlay)
    pruned = image_removal.prune_images(hv, "default", "debian-13", keep=(three_releases[1],), lock_dir=str(tmp_path))
    assert raw not in pruned.removed
    assert {"volume": raw, "used_by": ["late.qcow2"], "used_by_domains": []} in pruned.kept
    assert raw in volume_names(hv)


def test_users_are_found_by_backing_path_only_in_the_pool(hv):
    hv.add_volume("default", "base-debian-13.qcow2", content=IMAGE)
    add_overlay(hv, "b.qcow2", "base-debian-13.qcow2")
    add_overlay(hv, "a.qcow2", "base-debian-13.qcow2")
    hv.add_volume("default", "c.qcow2", fmt="qcow2", capacity=1, backing_path="/elsewhere/base-debian-13.qcow2",
                  backing_format="qcow2")
    pool = hv.pools["default"]
    users = find_users(hv, pool, "default", volume_info(hv, hv.volume("default", "base-debian-13.qcow2")))
    assert users == VolumeUsers(("a.qcow2", "b.qcow2"))


def test_users_are_read_from_the_real_volume_xml(hv):
    """The overlay XML the volume builder makes is what find_users reads back."""
    pool = hv.pools["default"]
    base = hv.add_volume("default", "base-debian-13.qcow2", content=IMAGE)
    hv.create_volume(pool, build_volume_xml(VolumeSpec("vm.qcow2", VIRTUAL_SIZE, "qcow2", base.path, "qcow2")))
    assert find_users(hv, pool, "default", volume_info(hv, base)) == VolumeUsers(("vm.qcow2",))


def test_a_base_a_domain_has_as_a_disk_is_not_removed_and_the_refusal_names_the_domain(hv):
    """A base attached to a VM directly (by path, as virt-install does) is in use like one an overlay backs onto."""
    hv.add_volume("default", "base-debian-13.qcow2", content=IMAGE)
    hv.add_volume("default", "base-debian-13.qcow2.sha256", content=IMAGE_SHA.encode("ascii"))
    hv.add_domain("direct", "<domain type='kvm'><name>direct</name><devices><disk type='file' device='disk'>"
                            "<source file='%s'/></disk></devices></domain>" % hv.volume("default", "base-debian-13.qcow2").path)
    for check_mode in (True, False):
        with pytest.raises(PermanentError, match="base volume 'base-debian-13.qcow2' in pool 'default' is a disk of "
                                                 "domain 'direct'"):
            image_removal.remove_image(hv, "default", ImageSpec("debian-13"), check_mode=check_mode)
    pruned = image_removal.prune_images(hv, "default", "debian-13")
    assert pruned.kept == [{"volume": "base-debian-13.qcow2", "used_by": [], "used_by_domains": ["direct"]}]
    assert "base-debian-13.qcow2" in volume_names(hv)


# --- the lock ------------------------------------------------------------------------------------------


def test_lock_path_is_per_uri_pool_and_volume(tmp_path):
    paths = {locks.lock_path(uri, pool, vol, str(tmp_path))
             for uri in ("qemu:///system", "qemu+ssh://h/system") for pool in ("a", "b") for vol in ("x", "y")}
    assert len(paths) == 8
    assert all(os.path.dirname(p) == str(tmp_path) and p.endswith(".lock") for p in paths)


def test_default_lock_dir_is_shared_and_under_a_runtime_dir():
    assert os.path.basename(locks.default_lock_dir()) == locks.LOCK_DIR_NAME


def test_lock_dir_is_created_sticky_and_world_writable(tmp_path):
    lock_dir = tmp_path / "locks"
    with locks.volume_lock("qemu:///system", "default", "x", lock_dir=str(lock_dir)):
        pass
    assert oct(lock_dir.stat().st_mode & 0o7777) == oct(0o1777)


HOLD_LOCK = r"""
import sys, time
sys.path[:0] = %r
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import locks
with locks.volume_lock("qemu:///system", "default", sys.argv[1], lock_dir=sys.argv[2]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def other_process(tmp_path):
    """A second process holding the lock of a volume until released."""
    processes = []

    def hold(volume):
        process = subprocess.Popen([sys.executable, "-c", HOLD_LOCK % (sys.path,), volume, str(tmp_path / "locks")],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline() == "locked\n"
        processes.append(process)
        return process

    yield hold
    for process in processes:
        process.kill()
        process.wait()


def test_lock_is_held_across_processes_and_times_out_clearly(other_process, tmp_path):
    other_process("base-debian-13.qcow2")
    started = time.monotonic()
    with pytest.raises(TransientError, match="waiting for another run that holds the lock"), \
            locks.volume_lock("qemu:///system", "default", "base-debian-13.qcow2", timeout=0.5,
                              lock_dir=str(tmp_path / "locks")):
        pass
    assert time.monotonic() - started >= 0.5
    # Another volume is not blocked.
    with locks.volume_lock("qemu:///system", "default", "base-debian-12.qcow2", timeout=0.5,
                           lock_dir=str(tmp_path / "locks")):
        pass


def test_ensure_waits_for_another_process_then_finds_the_image_ready(hv, server, ensure, other_process):
    url = server.add("/debian.qcow2", IMAGE)
    holder = other_process(base_name(IMAGE_SHA))

    def other_run_finishes():
        time.sleep(0.5)
        cache_by_hand(hv, base_name(IMAGE_SHA), IMAGE, IMAGE_SHA)
        holder.stdin.write("\n")
        holder.stdin.flush()

    finisher = threading.Thread(target=other_run_finishes)
    finisher.start()
    result = ensure(debian(url, "sha256:" + IMAGE_SHA))
    finisher.join()
    assert (result.changed, result.downloaded) == (False, False)
    assert server.hit_count("/debian.qcow2") == 0


def test_lock_released_when_the_holder_is_killed(other_process, tmp_path):
    holder = other_process("base-debian-13.qcow2")
    holder.kill()
    holder.wait()
    with locks.volume_lock("qemu:///system", "default", "base-debian-13.qcow2", timeout=1,
                           lock_dir=str(tmp_path / "locks")):
        pass


def test_a_reason_phrase_with_a_terminal_escape_is_quoted_in_the_message():
    class Response:
        status_code, reason = 404, "Not Found\x1b[2J"

    with pytest.raises(PermanentError) as refused:
        download._check_status(Response(), "http://mirror.example/debian.qcow2")
    assert refused.value.message == ("http://mirror.example/debian.qcow2 answered HTTP 404 'Not Found\\x1b[2J'; "
                                     "check the URL")
