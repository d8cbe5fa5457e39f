# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_base_image's main() over the fake seam and a local HTTP server."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import locks as _locks
from ansible_collections.egress_proxies.kvm.plugins.modules import kvm_base_image
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import FakeHypervisor
from ansible_collections.egress_proxies.kvm.tests.unit.image_server import ImageServer
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_image_cache import (
    DATA_FILE_IMAGE,
    DATA_FILE_SHA,
    EVIL_IMAGE,
    EVIL_SHA,
    IMAGE,
    IMAGE_SHA,
    MUTATING,
    NEWER_IMAGE,
    NEWER_SHA,
    PROBE_RANGE,
    VIRTUAL_SIZE,
    add_overlay,
    base_name,
)
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_image_header import qcow2_header


@pytest.fixture
def server():
    srv = ImageServer()
    yield srv
    srv.close()


@pytest.fixture
def hypervisor():
    hv = FakeHypervisor(hostname="nas1.example.net")
    hv.add_pool("default")
    hv.add_pool("fast", path="/srv/fast")
    return hv


@pytest.fixture
def opened():
    """The URIs the module opened, in order."""
    return []


@pytest.fixture
def run(monkeypatch, run_main, hypervisor, tmp_path, opened):
    """run(args, check_mode=False, diff=False) -> the module's result dict."""
    monkeypatch.setattr(_locks, "default_lock_dir", lambda: str(tmp_path / "locks"))

    def run_module(args, check_mode=False, diff=False):
        result, _out, uris = run_main(kvm_base_image.main, hypervisor, args, check_mode=check_mode, diff=diff)
        opened.extend(uris)
        return result

    return run_module


def image_args(server, body=IMAGE, sha=IMAGE_SHA, **extra):
    args = dict(name="debian-13", url=server.add("/debian-13-generic-amd64.qcow2", body), checksum="sha256:" + sha)
    args.update(extra)
    return args


def test_check_real_check_real(run, server, hypervisor, opened):
    """The integration rhythm: check mode, real, idempotent check mode, idempotent real."""
    args = image_args(server)
    volume = base_name(IMAGE_SHA)
    absent = {"volume": volume, "sha256": None, "state": "absent"}
    present = {"volume": volume, "sha256": IMAGE_SHA, "state": "present"}

    predicted = run(args, check_mode=True, diff=True)
    assert (predicted["changed"], predicted["downloaded"], predicted["volume"]) == (True, True, volume)
    # The virtual size comes from the image's header, read without downloading the image.
    assert (predicted["size"], predicted["volume_path"]) == (VIRTUAL_SIZE, None)
    assert predicted["diff"] == {"before": absent, "after": present}
    assert hypervisor.pools["default"].volumes == {}

    done = run(args, diff=True)
    assert opened == ["qemu:///system"] * 2
    assert (done["changed"], done["downloaded"], done["bytes"]) == (True, True, len(IMAGE))
    assert done["volume_path"] == "/var/lib/libvirt/images/default/" + volume
    assert (done["format"], done["sha256"], done["size"]) == ("qcow2", IMAGE_SHA, VIRTUAL_SIZE)
    assert done["throughput"] > 0 and done["seconds"] > 0
    assert done["diff"] == {"before": absent, "after": present}
    assert done["actions"] == predicted["actions"]

    again_check = run(args, check_mode=True, diff=True)
    again = run(args, diff=True)
    for result in (again_check, again):
        assert (result["changed"], result["downloaded"], result["bytes"], result["throughput"]) == (False, False, 0, 0)
        assert result["diff"] == {"before": present, "after": present}
        assert result["volume_path"] == done["volume_path"]
    # One header read (check mode), one download, nothing once cached.
    assert server.ranges_asked("/debian-13-generic-amd64.qcow2") == [PROBE_RANGE, None]


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("body, sha, named", [
    (EVIL_IMAGE, EVIL_SHA, "the backing file '/etc/hostname'"),
    (DATA_FILE_IMAGE, DATA_FILE_SHA, "the external data file '/dev/vda'"),
])
def test_an_image_that_is_not_self_contained_fails_and_leaves_nothing(run, server, hypervisor, check_mode, body, sha,
                                                                      named):
    result = run(image_args(server, body=body, sha=sha), check_mode=check_mode)
    assert result["failed"] is True
    assert result["error_kind"] == "permanent"
    assert "names %s in its qcow2 header: a base image must be self-contained" % named in result["msg"]
    assert hypervisor.pools["default"].volumes == {}
    assert "create_volume" not in hypervisor.calls


def test_no_diff_key_without_diff_mode(run, server):
    result = run(image_args(server))
    assert "diff" not in result
    assert "removed" not in result and "kept" not in result


def test_pool_and_uri_are_used(run, server, hypervisor, opened):
    result = run(image_args(server, pool="fast", uri="qemu+ssh://root@nas1/system"))
    assert opened == ["qemu+ssh://root@nas1/system"]
    assert result["volume_path"] == "/srv/fast/" + base_name(IMAGE_SHA)
    assert sorted(hypervisor.pools["fast"].volumes) == [base_name(IMAGE_SHA), base_name(IMAGE_SHA) + ".sha256"]


@pytest.mark.parametrize("args, message", [
    (dict(name="debian-13", url="file:///srv/debian.qcow2"), "url 'file:///srv/debian.qcow2' is not an http(s) URL"),
    (dict(name="debian-13", url="https://x/d.qcow2", checksum="md5:abc"), "checksum 'md5:abc' is not supported: it is md5, and only sha256 is"),
    (dict(name="Debian 13", url="https://x/d.qcow2"), "image name 'Debian 13' is not valid"),
    (dict(name="debian-13", url="https://x/d.qcow2", pool="../etc"), "pool '../etc' is not a valid storage pool name"),
    (dict(name="debian-13", url="https://x/d.qcow2", timeout=0), "timeout must be a positive number"),
    (dict(name="debian-13", url="https://x/d.qcow2", retries=-1), "retries must be 0 or more"),
    (dict(name="debian-13", state="absent", prune=True), "prune applies to state=present"),
    (dict(name="debian-13", url="https://x/d.qcow2", departing_volumes=["proxy-1.qcow2"]),
     "departing_volumes applies to state=absent"),
    (dict(name="debian-13", url="https://x/d.qcow2", ca_path="/nonexistent/ca.pem"),
     "ca_path /nonexistent/ca.pem does not exist on the host that runs the module"),
    (dict(name="debian-13", url="https://x/d.qcow2", checksum="sha256:" + "a" * 63),
     "the sha256 digest has 63 of 64 hex digits"),
    (dict(name="debian-13", url="https://x/d.qcow2", max_virtual_size_gb=0), "max_virtual_size_gb must be from 1 to 65536"),
    (dict(name="debian-13", url="https://x/d.qcow2", max_virtual_size_gb=65537), "max_virtual_size_gb must be from 1 to 65536"),
])
def test_bad_input_fails_before_connecting(run, args, message, opened):
    result = run(args)
    assert result["failed"] is True
    assert message in result["msg"]
    assert result["error_kind"] == "invalid_input"
    assert opened == []


def test_url_is_required_for_present(run, opened):
    result = run(dict(name="debian-13"))
    assert result["failed"] is True
    assert "state is present but all of the following are missing: url" in result["msg"]
    assert opened == []


def test_http_404_fails_with_a_clear_message(run, server, hypervisor):
    args = image_args(server)
    server.routes["/debian-13-generic-amd64.qcow2"].status = 404
    result = run(args)
    assert result["failed"] is True
    assert result["error_kind"] == "permanent"
    assert "answered HTTP 404" in result["msg"] and "check the URL" in result["msg"]
    assert "(hypervisor qemu:///system)" in result["msg"]
    assert hypervisor.pools["default"].volumes == {}


def test_checksum_mismatch_fails_and_leaves_nothing(run, server, hypervisor):
    result = run(image_args(server, sha="b" * 64))
    assert result["failed"] is True
    assert "has sha256 %s but the checksum says %s" % (IMAGE_SHA, "b" * 64) in result["msg"]
    assert hypervisor.pools["default"].volumes == {}


def test_new_checksum_with_prune_keeps_the_base_in_use(run, server, hypervisor):
    old_args = image_args(server)
    run(old_args)
    old = base_name(IMAGE_SHA)
    add_overlay(hypervisor, "proxy-1.qcow2", old)
    new = base_name(NEWER_SHA)

    new_args = image_args(server, body=NEWER_IMAGE, sha=NEWER_SHA, prune=True)
    predicted = run(new_args, check_mode=True, diff=True)
    done = run(new_args, diff=True)
    for result in (predicted, done):
        assert (result["changed"], result["volume"], result["removed"]) == (True, new, [])
        assert result["kept"] == [{"volume": old, "used_by": ["proxy-1.qcow2"], "used_by_domains": []}]
        assert result["diff"]["before"]["bases"] == [old]
        assert result["diff"]["after"]["bases"] == sorted([old, new])
    assert old in hypervisor.pools["default"].volumes

    # Once the VM is gone, prune removes the older base.
    hypervisor.delete_volume(hypervisor.volume("default", "proxy-1.qcow2"))
    pruned = run(new_args, diff=True)
    assert (pruned["changed"], pruned["downloaded"], pruned["removed"], pruned["kept"]) == (True, False, [old], [])
    assert pruned["actions"] == ["delete marker volume %s.sha256" % old, "delete base volume %s" % old]
    assert pruned["diff"]["after"]["bases"] == [new]
    assert sorted(hypervisor.pools["default"].volumes) == [new, new + ".sha256"]
    again = run(new_args)
    assert again["changed"] is False


def test_absent_check_real_check_real(run, server, hypervisor):
    run(image_args(server))
    volume = base_name(IMAGE_SHA)
    args = dict(name="debian-13", checksum="sha256:" + IMAGE_SHA, state="absent")

    predicted = run(args, check_mode=True, diff=True)
    assert (predicted["changed"], predicted["removed"]) == (True, [volume])
    assert predicted["diff"] == {"before": {"bases": [volume]}, "after": {"bases": []}}
    assert volume in hypervisor.pools["default"].volumes

    done = run(args, diff=True)
    assert (done["changed"], done["removed"]) == (True, [volume])
    assert "kept" not in done
    assert hypervisor.pools["default"].volumes == {}

    for check_mode in (True, False):
        again = run(args, check_mode=check_mode, diff=True)
        assert (again["changed"], again["removed"]) == (False, [])
        assert again["diff"] == {"before": {"bases": []}, "after": {"bases": []}}


def test_absent_on_a_base_in_use_fails_naming_the_users(run, server, hypervisor):
    run(image_args(server))
    volume = base_name(IMAGE_SHA)
    add_overlay(hypervisor, "proxy-1.qcow2", volume)
    add_overlay(hypervisor, "proxy-2.qcow2", volume)
    calls_before = len(hypervisor.calls)

    result = run(dict(name="debian-13", state="absent"))
    assert result["failed"] is True
    assert result["error_kind"] == "permanent"
    assert "'%s'" % volume in result["msg"] and "'proxy-1.qcow2', 'proxy-2.qcow2'" in result["msg"]
    assert "delete the VMs whose disks use it first" in result["msg"]
    assert "delete_volume" not in hypervisor.calls[calls_before:]
    assert volume in hypervisor.pools["default"].volumes


def test_absent_in_check_mode_does_not_count_the_departing_volumes_as_users(run, server, hypervisor):
    run(image_args(server))
    volume = base_name(IMAGE_SHA)
    add_overlay(hypervisor, "proxy-1.qcow2", volume)
    args = dict(name="debian-13", state="absent", departing_volumes=["proxy-1.qcow2"])

    predicted = run(args, check_mode=True)
    assert (predicted["changed"], predicted["removed"]) == (True, [volume])
    # The real run counts what the pool holds: the overlay is still there, so the base stays.
    refused = run(args)
    assert refused["failed"] is True and "'proxy-1.qcow2'" in refused["msg"]
    assert volume in hypervisor.pools["default"].volumes

    hypervisor.delete_volume(hypervisor.volume("default", "proxy-1.qcow2"))
    done = run(args)
    assert (done["changed"], done["removed"]) == (True, [volume])


def test_check_mode_never_mutates(run, server, hypervisor):
    run(image_args(server, prune=True), check_mode=True)
    run(dict(name="debian-13", state="absent"), check_mode=True)
    assert not MUTATING.intersection(hypervisor.calls)
    assert server.ranges_asked("/debian-13-generic-amd64.qcow2") == [PROBE_RANGE]  # the header only


PIB = 1024 ** 5


@pytest.mark.parametrize("check_mode", [True, False])
def test_an_image_larger_than_any_vm_disk_is_refused_from_its_header_naming_both_sizes(run, server, hypervisor, check_mode):
    huge = qcow2_header(PIB) + b"\0" * (3 * 1024 * 1024)
    result = run(dict(name="debian-13", url=server.add("/huge.qcow2", huge)), check_mode=check_mode)
    assert result["failed"] and result["error_kind"] == "invalid_input"
    assert "has a virtual size of %d bytes (1048576 GiB), more than the maximum of %d bytes (65536 GiB) " \
           "(max_virtual_size_gb)" % (PIB, 65536 * 1024 ** 3) in result["msg"]
    assert "create_volume" not in hypervisor.calls


def test_max_virtual_size_gb_refuses_what_is_larger_than_the_vms_it_is_for(run, server, hypervisor):
    result = run(image_args(server, max_virtual_size_gb=1))
    assert result["failed"] and "more than the maximum of 1073741824 bytes (1 GiB) (max_virtual_size_gb)" in result["msg"]
    assert run(image_args(server, max_virtual_size_gb=VIRTUAL_SIZE // 1024 ** 3))["size"] == VIRTUAL_SIZE


@pytest.mark.parametrize("content_length", ["\u00b2", "\u00b9\u00b2", "-1", "1e3", "12345678901234567890123"])
def test_a_content_length_not_in_ascii_digits_fails_naming_the_header_and_the_url(run, server, hypervisor, content_length):
    url = server.add("/debian-13-generic-amd64.qcow2", IMAGE, content_length=content_length, ranges=False)
    for check_mode in (True, False):
        result = run(dict(name="debian-13", url=url), check_mode=check_mode)
        assert result["failed"] and result["error_kind"] == "permanent", result
        assert "%s sent Content-Length: %r, which is not a number of bytes in ASCII digits" % (url, content_length) \
            in result["msg"]
    assert "create_volume" not in hypervisor.calls
