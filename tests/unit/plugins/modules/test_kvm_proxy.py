# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_proxy's main() over the fake seam: argument handling, check and diff mode, failures as the user sees them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


import time

import pytest
from ansible.module_utils.basic import AnsibleModule

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.options import DownloadOptions
from ansible_collections.egress_proxies.kvm.plugins.modules import kvm_proxy
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import RUNNING, SHUTOFF
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import (
    BASE,
    IMAGE_SHA,
    MARKER,
    MUTATING,
    NAME,
    UID,
    ready_host,
)

SECRET = "root:s3cr3t-do-not-print"
ARGS = dict(
    name=NAME,
    uid=UID,
    bridge="br0",
    image=dict(name="debian-13", url="https://images.example/debian-13.qcow2", checksum="sha256:" + IMAGE_SHA),
    user_data="#cloud-config\nchpasswd: {list: '%s'}\n" % SECRET,
)


def without(key, **changes):
    args = dict(ARGS, **changes)
    del args[key]
    return args


CREATE = ["create overlay", "write seed", "define domain", "start domain", "enable autostart"]


@pytest.fixture
def hypervisor():
    return ready_host("nas1")


@pytest.fixture
def run(run_main, hypervisor):
    """run(args, check_mode=False, diff=False, open_error=None) -> (result dict, raw output, the URIs opened)."""

    def run_module(args, check_mode=False, diff=False, open_error=None):
        return run_main(kvm_proxy.main, hypervisor, args, check_mode=check_mode, diff=diff, open_error=open_error)

    return run_module


def test_present_in_check_mode_then_for_real_then_idempotent(run, hypervisor):
    predicted, _out, opened = run(ARGS, check_mode=True, diff=True)
    assert opened == ["qemu:///system"]
    assert predicted["changed"] is True and predicted["actions"] == CREATE
    assert predicted["diff"]["before"] == {"state": "absent"}
    assert not MUTATING.intersection(hypervisor.calls)

    result, _out, _opened = run(ARGS, diff=True)
    assert result["changed"] is True and result["actions"] == CREATE
    assert result["id"] == "hosts/nas1/domains/" + NAME
    assert result["state"] == "Provisioning" and result["uid"] == UID
    assert result["diff"]["after"]["spec"]["vcpus"] == 1
    assert hypervisor.domains[NAME].state == RUNNING
    assert hypervisor.calls[-1] == "close"

    again, _out, _opened = run(ARGS, check_mode=True, diff=True)
    assert again["changed"] is False and again["actions"] == []
    again, _out, _opened = run(ARGS, diff=True)
    assert again["changed"] is False and again["diff"]["before"] == again["diff"]["after"]


def powers_off_when_asked_for_an_address(hypervisor, name):
    """Make the guest ``name`` power off as the address wait first asks for its address."""
    ask = hypervisor.domain_addresses

    def addresses(dom, source):
        if dom.name == name:
            dom.state = SHUTOFF
        return ask(dom, source)

    hypervisor.domain_addresses = addresses


def test_a_proxy_that_stops_while_awaited_fails_in_seconds_naming_it(run, hypervisor):
    powers_off_when_asked_for_an_address(hypervisor, NAME)
    started = time.monotonic()
    result, _out, _opened = run(dict(ARGS, wait_for_ip=True, wait_timeout=300))
    assert time.monotonic() - started < 10  # one poll interval, not wait_timeout
    assert result["failed"] is True and result["changed"] is True and result["actions"] == CREATE
    assert result["msg"].startswith("%s stopped while its address was awaited: %s (state shutoff, bridge br0; arp: "
                                    "domain not running)" % (NAME, NAME)), result["msg"]


def test_diff_is_returned_only_in_diff_mode(run):
    result, _out, _opened = run(ARGS)
    assert "diff" not in result


def test_user_data_is_never_printed(run):
    for args in (ARGS, dict(ARGS, vcpus=2), dict(ARGS, state="absent")):
        for check_mode in (True, False):
            _result, out, _opened = run(args, check_mode=check_mode, diff=True)
            assert SECRET not in out


def test_absent_removes_the_vm_and_keeps_the_image(run, hypervisor):
    run(ARGS)
    result, _out, _opened = run(dict(name=NAME, uid=UID, state="absent"), diff=True)
    assert result["actions"] == ["shutdown domain", "delete overlay", "delete seed", "undefine domain"]
    assert result["diff"]["after"] == {"state": "absent"}
    assert not hypervisor.domains
    assert sorted(hypervisor.pools["default"].volumes) == sorted([BASE, MARKER])


@pytest.mark.parametrize("args, message", [
    (without("image"), "state is present but any of the following are missing: image, base_volume"),
    (without("bridge"), "state=present needs bridge (a host bridge such as br0) or network (a libvirt network)"),
    (without("bridge", state="stopped"), "state=stopped needs bridge (a host bridge such as br0) or network"),
    (dict(ARGS, interfaces=[{"bridge": "br1"}]), "interfaces"),
    (dict(ARGS, network="default"), "parameters are mutually exclusive: bridge|network"),
    (dict(ARGS, base_volume=BASE), "parameters are mutually exclusive: image|base_volume"),
    (dict(ARGS, image=dict(name="debian-13")), "missing required arguments: url found in image"),
    (dict(ARGS, name="Bad_Name"), "name 'Bad_Name' is not a valid VM name"),
    (dict(ARGS, virt_type="qemu", cpu_mode="host-passthrough"), "cpu_mode host-passthrough needs virt_type kvm"),
    (dict(ARGS, memory_mib=1), "memory_mib must be a whole number from 128"),
    (dict(ARGS, timeout=0), "timeout must be a positive number of seconds, got 0"),
    (dict(ARGS, lock_timeout=-5), "lock_timeout must be a positive number of seconds, got -5"),
    (dict(ARGS, policy=dict(files=[dict(path="/etc/x", content="x")], group=dict(name="demo"))),
     "missing required arguments: address found in policy -> group"),
    (dict(ARGS, policy=dict(files=[dict(path="/etc/x", content="x")], group=dict(name="demo", address="198.18.40.10\n"))),
     "policy.group.address '198.18.40.10\\n' is not an IPv4 address"),
])
def test_bad_arguments_fail_before_connecting(run, args, message):
    result, _out, opened = run(args)
    assert result["failed"] is True
    assert message in result["msg"]
    assert opened == []


def test_interfaces_alone_give_the_vm_its_nics(run, hypervisor):
    result, _out, _opened = run(without("bridge", interfaces=[{"bridge": "br0", "role": "inside"}]))
    assert result["changed"] is True, result
    assert [nic["bridge"] for nic in result["interfaces"]] == ["br0"]


def test_an_unreachable_hypervisor_fails_with_its_uri(run):
    result, _out, _opened = run(ARGS, open_error=errors.TransientError("connecting to hypervisor qemu:///system: no socket"))
    assert result["failed"] is True
    assert result["msg"] == "connecting to hypervisor qemu:///system: no socket (hypervisor qemu:///system)"
    assert result["error_kind"] == "transient"


def test_an_unmanaged_domain_fails_the_task_with_how_to_override(run, hypervisor):
    hypervisor.add_domain(NAME, state=RUNNING)
    result, _out, _opened = run(dict(name=NAME, state="absent"))
    assert result["failed"] is True
    assert "was not created by egress_proxies.kvm" in result["msg"] and "force=true" in result["msg"]
    assert result["error_kind"] == "permanent"
    assert NAME in hypervisor.domains


def test_a_hard_stop_becomes_a_warning(run, hypervisor, monkeypatch):
    # Where a warning ends up depends on process-wide state of ansible (controller or target side),
    # so the test records what the module hands to AnsibleModule.warn.
    warned = []
    monkeypatch.setattr(AnsibleModule, "warn", lambda _module, warning: warned.append(warning))
    run(ARGS)
    hypervisor.domains[NAME].honours_acpi = False
    result, _out, _opened = run(dict(ARGS, state="stopped", shutdown_timeout=0))
    assert result["actions"] == ["shutdown domain"]
    assert "warnings" not in result
    assert len(warned) == 1 and "was stopped hard" in warned[0]


def test_libvirt_errors_carry_code_and_message(run, hypervisor):
    hypervisor.fail("define_domain", errors.VIR_ERR_CONFIG_UNSUPPORTED, "unsupported configuration: no q35 here")
    result, _out, _opened = run(ARGS)
    assert result["failed"] is True
    assert (result["libvirt_code"], result["libvirt_message"]) == (67, "unsupported configuration: no q35 here")


def test_the_download_options_reach_the_request_as_one_value():
    class Params:
        params = dict({key: spec.get("default") for key, spec in kvm_proxy.ARGUMENT_SPEC.items()}, **ARGS,
                      timeout=7, retries=0)

    task = kvm_proxy.ProxyTask(Params)
    task.validate()
    assert task.request.download == DownloadOptions(timeout=7, retries=0)


def test_a_failed_task_reports_changed_and_the_steps_it_completed(run, hypervisor):
    hypervisor.fail("start_domain", errors.VIR_ERR_INTERNAL_ERROR, "qemu died")
    result, _out, _opened = run(ARGS)
    assert result["failed"] is True and result["changed"] is True
    assert result["actions"] == ["create overlay", "write seed", "define domain"]
    assert result["msg"].startswith("start domain failed after create overlay, write seed, define domain: ")


def test_a_failure_before_any_step_reports_no_change(run, hypervisor):
    result, _out, _opened = run(dict(ARGS, bridge="br9"))
    assert result["failed"] is True and result["changed"] is False and result["actions"] == []
    assert "bridge 'br9' (option bridge) is not an interface of the hypervisor" in result["msg"]
    assert result["error_kind"] == "permanent"


def test_a_cloud_config_dictionary_is_masked_whole_not_value_by_value(run, hypervisor):
    # Values such as the pool name or a size inside the dictionary must not mask the same words in the result.
    user_data = {"chpasswd": {"list": SECRET}, "packages": ["squid"], "default": "default", "size": 1}
    result, out, _opened = run(dict(ARGS, user_data=user_data))
    assert SECRET not in out
    assert result["volumes"]["pool"] == "default" and result["name"] == NAME
