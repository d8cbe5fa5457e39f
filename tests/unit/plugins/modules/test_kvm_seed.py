# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_seed's main() over the fake seam: check mode, real, idempotent; diff; secrets kept out of the result."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import build_iso, read_iso
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.nocloud import seed_files
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.seed import content_diff
from ansible_collections.egress_proxies.kvm.plugins.modules import kvm_seed
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import FakeHypervisor

SECRET = "hunter2-0f9a8b7c"
USER_DATA = "#cloud-config\nchpasswd:\n  users:\n    - {name: debian, password: %s}\npackages: [squid]\n" % SECRET
VOLUME = "proxy-1-seed.iso"


@pytest.fixture
def hypervisor():
    hv = FakeHypervisor(hostname="hv1")
    hv.add_pool("default")
    hv.add_pool("fast", path="/srv/fast")
    return hv


class Runner:
    """run(args, check_mode=False, diff=False) -> the module's result dict; ``run.output`` is the raw stdout."""

    def __init__(self, run_main, hypervisor):
        self.run_main, self.hypervisor = run_main, hypervisor
        self.output = None

    def __call__(self, args, check_mode=False, diff=False):
        result, self.output, _opened = self.run_main(kvm_seed.main, self.hypervisor, args, check_mode=check_mode, diff=diff)
        return result


@pytest.fixture
def run(run_main, hypervisor):
    return Runner(run_main, hypervisor)


def volume_files(hypervisor, pool="default"):
    return read_iso(bytes(hypervisor.volume(pool, VOLUME).content))


def sha(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_check_real_idempotent_check_idempotent_real(run, hypervisor):
    args = dict(name="proxy-1", user_data=USER_DATA)

    result = run(args, check_mode=True, diff=True)
    assert result["changed"] and result["volume_path"] is None
    assert result["diff"]["before"] == {"volume": VOLUME, "state": "absent"}
    assert result["diff"]["after"]["files"]["user-data"] == {"sha256": sha(USER_DATA), "size": len(USER_DATA)}
    assert hypervisor.volume("default", VOLUME) is None

    result = run(args, diff=True)
    assert result["changed"] and result["volume"] == VOLUME
    assert result["volume_path"] == "/var/lib/libvirt/images/default/" + VOLUME
    # Ansible stats the local file at a result's "path"; the result has none for it to stat.
    assert not {"path", "mode", "owner", "uid"} & set(result)
    assert result["previous_state"] == "absent"
    assert result["changed_files"] == ["meta-data", "user-data", "vendor-data"]
    assert [f["name"] for f in result["files"]] == ["user-data", "meta-data", "vendor-data"]
    assert result["reason"] == "volume %s does not exist" % VOLUME
    assert volume_files(hypervisor) == dict(seed_files("proxy-1", USER_DATA))

    for check_mode in (True, False):
        result = run(args, check_mode=check_mode, diff=True)
        assert not result["changed"] and result["actions"] == [] and result["reason"] is None
        assert result["diff"]["before"] == result["diff"]["after"]
        assert result["size"] == hypervisor.volume("default", VOLUME).capacity


def test_one_changed_file_is_named_in_result_and_diff(run, hypervisor):
    run(dict(name="proxy-1", user_data=USER_DATA))
    changed_user_data = USER_DATA + "runcmd: [[systemctl, restart, squid]]\n"
    result = run(dict(name="proxy-1", user_data=changed_user_data), check_mode=True, diff=True)
    assert result["changed"] and result["changed_files"] == ["user-data"]
    assert result["actions"] == ["delete volume " + VOLUME, "create volume %s (%d bytes)" % (VOLUME, result["size"]),
                                 "upload seed to volume " + VOLUME]
    before, after = result["diff"]["before"]["files"], result["diff"]["after"]["files"]
    assert before["user-data"]["sha256"] == sha(USER_DATA) and after["user-data"]["sha256"] == sha(changed_user_data)
    assert before["meta-data"] == after["meta-data"] and before["vendor-data"] == after["vendor-data"]
    assert "prepared" not in result["diff"]
    assert volume_files(hypervisor)["user-data"] == USER_DATA.encode()

    result = run(dict(name="proxy-1", user_data=changed_user_data))
    assert result["changed"] and volume_files(hypervisor)["user-data"] == changed_user_data.encode()


def test_user_data_never_appears_in_the_output(run):
    # The old content is read back from the volume: without diff_content it must not show either.
    run(dict(name="proxy-1", user_data=USER_DATA))
    for check_mode in (True, False):
        run(dict(name="proxy-1", user_data=USER_DATA.replace(SECRET, "new-" + SECRET)), check_mode=check_mode, diff=True)
        assert SECRET not in run.output and "chpasswd" not in run.output


def test_diff_content_shows_the_changed_lines(run):
    run(dict(name="proxy-1", user_data=USER_DATA, meta_data={"role": "egress"}))
    new_user_data = USER_DATA.replace("squid", "squid, curl")
    result = run(dict(name="proxy-1", user_data=new_user_data, meta_data={"role": "proxy"}, diff_content=True),
                 check_mode=True, diff=True)
    prepared = result["diff"]["prepared"]
    assert "--- %s (before)/user-data\n+++ %s (after)/user-data\n" % (VOLUME, VOLUME) in prepared
    assert "-packages: [squid]\n+packages: [squid, curl]\n" in prepared
    assert '-  "role": "egress"\n+  "role": "proxy"\n' in prepared
    assert "vendor-data" not in prepared


def test_diff_content_of_a_new_file_and_of_binary_content(run):
    run(dict(name="proxy-1", user_data=USER_DATA))
    result = run(dict(name="proxy-1", user_data=USER_DATA, network_config={"version": 2}, diff_content=True), diff=True)
    assert result["diff"]["prepared"].startswith("--- /dev/null\n+++ %s (after)/network-config\n" % VOLUME)


def test_content_diff_shows_binary_files_by_name_only():
    diff = content_diff(VOLUME, {"user-data": b"\xff\xfe secret"}, {"user-data": b"#cloud-config\n"})
    assert diff == "Binary file user-data differs\n"


def test_a_cloud_config_dictionary_is_masked_whole_not_value_by_value(run):
    # Ansible masks every value of a no_log dictionary wherever it appears:
    # "proxy-1", "default" and 1 would have masked the volume, the pool and sizes.
    user_data = {"hostname": "proxy-1", "users": ["default"], "chpasswd": {"users": [{"name": "debian", "password": SECRET}]},
                 "bootcmd": [["sleep", 1]]}
    result = run(dict(name="proxy-1", user_data=user_data), diff=True)
    assert result["volume"] == VOLUME and result["volume_path"] == "/var/lib/libvirt/images/default/" + VOLUME
    assert isinstance(result["size"], int) and "*" not in "".join(entry["sha256"] for entry in result["files"])
    assert result["invocation"]["module_args"]["user_data"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert SECRET not in run.output and "chpasswd" not in run.output


def test_meta_data_vendor_data_and_network_config_land_on_the_volume(run, hypervisor):
    network = {"version": 2, "ethernets": {"primary": {"match": {"name": "en*"}, "dhcp4": True}}}
    args = dict(name="proxy-1", pool="fast", meta_data={"local-hostname": "proxy-1.example.net"},
                vendor_data="", network_config=network)
    result = run(args)
    assert result["changed"] and result["volume_path"] == "/srv/fast/" + VOLUME
    files = volume_files(hypervisor, "fast")
    assert files["user-data"] == b"" and files["vendor-data"] == b""
    assert yaml.safe_load(files["meta-data"]) == {"instance-id": "proxy-1", "local-hostname": "proxy-1.example.net"}
    assert yaml.safe_load(files["network-config"]) == network
    assert not run(args)["changed"]


def test_network_config_string_is_written_verbatim(run, hypervisor):
    text = "version: 2\nethernets:\n  eth0: {dhcp4: true}\n"
    run(dict(name="proxy-1", network_config=text))
    assert volume_files(hypervisor)["network-config"] == text.encode()


def test_truncated_volume_is_repaired(run, hypervisor):
    files = seed_files("proxy-1", USER_DATA)
    image = build_iso(files)
    # As libvirt leaves an upload cut off at 40 KiB: the volume keeps its size, the rest is zeros.
    # The directories survive, the files' contents do not.
    hypervisor.add_volume("default", VOLUME, image[:40960] + bytes(len(image) - 40960))
    result = run(dict(name="proxy-1", user_data=USER_DATA), check_mode=True, diff=True)
    assert result["changed"] and result["changed_files"] == ["meta-data", "user-data", "vendor-data"]
    result = run(dict(name="proxy-1", user_data=USER_DATA))
    assert result["changed"] and volume_files(hypervisor) == dict(files)
    assert not run(dict(name="proxy-1", user_data=USER_DATA))["changed"]


def test_unreadable_volume_is_reported_and_replaced(run, hypervisor):
    hypervisor.add_volume("default", VOLUME, b"not a seed" * 100)
    result = run(dict(name="proxy-1"), check_mode=True, diff=True)
    assert result["changed"] and result["diff"]["before"] == {"volume": VOLUME, "state": "unreadable"}
    assert result["reason"].startswith("volume %s is not a readable seed: " % VOLUME)
    # Nothing is known of the old files: every file written is listed, and the result says why.
    assert result["previous_state"] == "unreadable"
    assert result["changed_files"] == ["meta-data", "user-data", "vendor-data"]


def test_a_large_existing_seed_is_compared_file_by_file(run, hypervisor):
    old = seed_files("proxy-1", USER_DATA, network_config={"version": 2})
    old["padding"] = bytes(5 * 1024 * 1024)
    hypervisor.add_volume("default", VOLUME, build_iso(old))
    result = run(dict(name="proxy-1", user_data=USER_DATA), check_mode=True, diff=True)
    assert result["changed"] and result["previous_state"] == "present"
    assert result["changed_files"] == ["network-config", "padding"]
    before, after = result["diff"]["before"], result["diff"]["after"]
    assert before["state"] == "present" and before["files"]["vendor-data"] == after["files"]["vendor-data"]


def test_cloud_config_dictionaries_are_written_as_cloud_config(run, hypervisor):
    user_data = {"packages": ["squid"], "runcmd": [["systemctl", "restart", "squid"]], "hostname": "proxy-1"}
    vendor_data = {"packages": ["qemu-guest-agent"], "package_update": False}
    result = run(dict(name="proxy-1", user_data=user_data, vendor_data=vendor_data))
    assert result["changed"]
    files = volume_files(hypervisor)
    for name, expected in (("user-data", user_data), ("vendor-data", vendor_data)):
        assert files[name].startswith(b"#cloud-config\n") and yaml.safe_load(files[name]) == expected
    # The same dictionaries in another key order are the same files: nothing to do.
    reordered = dict(name="proxy-1", vendor_data=dict(reversed(list(vendor_data.items()))),
                     user_data=dict(reversed(list(user_data.items()))))
    assert not run(reordered)["changed"]
    assert volume_files(hypervisor) == files


def test_absent_check_real_idempotent(run, hypervisor):
    run(dict(name="proxy-1", user_data=USER_DATA))
    result = run(dict(name="proxy-1", state="absent"), check_mode=True, diff=True)
    assert result["changed"] and result["actions"] == ["delete volume " + VOLUME]
    assert result["diff"] == {"before": {"volume": VOLUME, "state": "present"}, "after": {"volume": VOLUME, "state": "absent"}}
    assert hypervisor.volume("default", VOLUME) is not None
    result = run(dict(name="proxy-1", state="absent"))
    assert result["changed"] and hypervisor.volume("default", VOLUME) is None
    for check_mode in (True, False):
        result = run(dict(name="proxy-1", state="absent"), check_mode=check_mode, diff=True)
        assert not result["changed"] and result["actions"] == []
        assert result["diff"]["before"] == result["diff"]["after"]
    assert not run(dict(name="proxy-1", state="absent", pool="no-such-pool"))["changed"]


def test_absent_refuses_the_seed_of_a_defined_domain_in_check_mode_too(run, hypervisor):
    run(dict(name="proxy-1", user_data=USER_DATA))
    hypervisor.add_domain("proxy-1", "<domain type='kvm'><name>proxy-1</name><devices><disk type='volume' "
                                     "device='cdrom'><source pool='default' volume='%s'/></disk></devices></domain>" % VOLUME)
    for check_mode in (True, False):
        result = run(dict(name="proxy-1", state="absent"), check_mode=check_mode)
        assert result["failed"] and result["error_kind"] == "permanent"
        assert "seed volume '%s' in pool 'default': it is a disk of domain 'proxy-1'" % VOLUME in result["msg"]
    assert hypervisor.volume("default", VOLUME) is not None and "proxy-1" in hypervisor.domains


@pytest.mark.parametrize("args, message", [
    (dict(name="Proxy_1"), "not a valid VM name"),
    (dict(name="proxy-1", pool="../etc"), "not a valid storage pool name"),
    (dict(name="proxy-1", network_config=[1, 2]), "network_config must be a YAML string or a dictionary"),
    (dict(name="proxy-1", meta_data={"x": float("inf")}), "meta_data cannot be written"),
    (dict(name="proxy-1", user_data=["packages", "squid"]), "user_data must be a string or a dictionary"),
    (dict(name="proxy-1", user_data=42), "user_data must be a string or a dictionary"),
    (dict(name="proxy-1", vendor_data=["packages"]), "vendor_data must be a string or a dictionary"),
    (dict(name="proxy-1", vendor_data=42), "vendor_data must be a string or a dictionary"),
])
def test_bad_input_fails_before_connecting(run, hypervisor, args, message):
    result = run(args)
    assert result["failed"] and message in result["msg"]
    assert hypervisor.calls == []


def test_missing_pool_fails_with_a_clear_message(run):
    result = run(dict(name="proxy-1", pool="nope"))
    assert result["failed"] and "'nope'" in result["msg"] and "qemu:///system" in result["msg"]
    assert result["error_kind"] == "not_found"


def test_diff_content_of_a_one_line_user_data_stays_masked(run):
    # Ansible masks text identical to the whole no_log value; a one-line user-data is one diff line.
    run(dict(name="proxy-1", user_data="#!/bin/sh\necho old\n"))
    result = run(dict(name="proxy-1", user_data="#include https://config.example.net/" + SECRET, diff_content=True),
                 check_mode=True, diff=True)
    assert "-#!/bin/sh\n-echo old\n" in result["diff"]["prepared"]
    assert SECRET not in run.output and "+********" in result["diff"]["prepared"]
