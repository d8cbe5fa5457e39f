# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_proxy_info's main() over the fake seam."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


import pytest
from ansible.module_utils.basic import AnsibleModule

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import module as _module
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.ha_group import HaGroup
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import ADDRESS_SOURCE_AGENT
from ansible_collections.egress_proxies.kvm.plugins.modules import kvm_proxy_info
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import RUNNING, SHUTOFF, FakeHypervisor
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_inventory import (
    INSIDE_MAC,
    OUTSIDE_MAC,
    hand_made_domain,
    ipv4,
    mac_of,
    managed_domain,
    two_nic_domain,
)

# Every seam method that changes the hypervisor; an info module calls none of them.
MUTATING = FakeHypervisor.MUTATING_METHODS


@pytest.fixture
def hypervisor():
    hv = FakeHypervisor(hostname="nas1.example.net")
    managed_domain(hv, "proxy-one", "uid-1", state=RUNNING, arp="198.18.0.150")
    managed_domain(hv, "proxy-two", "uid-2", state=SHUTOFF)
    hand_made_domain(hv, "hand-made")
    return hv


@pytest.fixture
def opened():
    """The URIs the module opened."""
    return []


@pytest.fixture
def run(run_main, hypervisor, opened):
    """run(args, check_mode=False, open_error=None) -> the module's result dict."""

    def run_module(args, check_mode=False, open_error=None):
        result, _out, uris = run_main(kvm_proxy_info.main, hypervisor, args, check_mode=check_mode, open_error=open_error)
        opened.extend(uris)
        return result

    return run_module


@pytest.mark.parametrize("check_mode", [False, True])
def test_lists_the_managed_proxies_and_changes_nothing(run, opened, hypervisor, check_mode):
    result = run({}, check_mode=check_mode)
    assert opened == ["qemu:///system"]
    assert result["changed"] is False
    assert result["found"] is True
    assert result["host"] == "nas1.example.net"
    assert [(p["id"], p["state"], p["ip"], p["uid"]) for p in result["proxies"]] == [
        ("hosts/nas1.example.net/domains/proxy-one", "Running", "198.18.0.150", "uid-1"),
        ("hosts/nas1.example.net/domains/proxy-two", "Stopped", None, "uid-2"),
    ]
    assert "warnings" not in result
    assert not MUTATING.intersection(hypervisor.calls)
    assert hypervisor.calls[-1] == "close"


def test_host_and_uri_are_used(run, opened):
    result = run({"host": "nas1", "uri": "qemu+ssh://root@nas1/system"})
    assert opened == ["qemu+ssh://root@nas1/system"]
    assert result["host"] == "nas1"
    assert result["proxies"][0]["id"] == "hosts/nas1/domains/proxy-one"


def test_uid_filter(run):
    result = run({"uid": "uid-2"})
    assert [p["name"] for p in result["proxies"]] == ["proxy-two"]


def test_uid_without_proxies_is_not_found(run):
    result = run({"uid": "nobody"})
    assert (result["found"], result["proxies"]) == (False, [])


def test_include_unmanaged(run):
    result = run({"include_unmanaged": True})
    assert [(p["name"], p["managed"]) for p in result["proxies"]] == [("hand-made", False), ("proxy-one", True), ("proxy-two", True)]


def test_by_name(run, hypervisor):
    result = run({"name": "proxy-one"})
    assert result["found"] is True
    assert [p["name"] for p in result["proxies"]] == ["proxy-one"]
    assert "list_domains" not in hypervisor.calls


def test_a_two_nic_proxy_is_reported_with_its_interfaces_and_egress_address(run, hypervisor):
    two_nic_domain(hypervisor, "proxy-egress", agent={INSIDE_MAC: "198.18.11.70", OUTSIDE_MAC: "198.18.21.70"})
    (proxy,) = run({"name": "proxy-egress"})["proxies"]
    assert proxy["interfaces"] == [
        {"mac": INSIDE_MAC, "bridge": "br0", "network": None, "role": "inside", "ipv4": "198.18.11.70", "ipv6": None, "egress": False},
        {"mac": OUTSIDE_MAC, "bridge": "br1", "network": None, "role": "outside", "ipv4": "198.18.21.70", "ipv6": None, "egress": True},
    ]
    assert (proxy["ip"], proxy["egress_ip"]) == ("198.18.11.70", "198.18.21.70")


def test_each_proxy_says_its_ha_group_and_whether_it_holds_the_address(run, hypervisor):
    group = HaGroup("demo", "198.18.40.10", "2001:db8:40::10").recorded()
    for name, addrs, state in (("egress-demo-1", ["198.18.40.11", "198.18.40.10"], RUNNING),
                               ("egress-demo-2", ["198.18.40.12"], RUNNING), ("egress-demo-3", [], SHUTOFF)):
        dom = managed_domain(hypervisor, name, "uid-1", state=state, ha_group_json=group)
        dom.addresses[ADDRESS_SOURCE_AGENT] = {"eth0": {"hwaddr": mac_of(name), "addrs": [ipv4(addr) for addr in addrs]}}
    proxies = {proxy["name"]: proxy for proxy in run({})["proxies"]}
    assert [(name, proxies[name]["ha_holder"]) for name in sorted(proxies)] == [
        ("egress-demo-1", True), ("egress-demo-2", False), ("egress-demo-3", None), ("proxy-one", None),
        ("proxy-two", None)]
    assert proxies["egress-demo-3"]["ha_group"] == {
        "name": "demo", "address": "198.18.40.10", "address6": "2001:db8:40::10"}
    assert proxies["proxy-one"]["ha_group"] is None


def test_by_name_absent_is_found_false_not_a_failure(run):
    result = run({"name": "proxy-nine"})
    assert result.get("failed") is not True
    assert (result["changed"], result["found"], result["proxies"]) == (False, False, [])


def test_by_name_reports_an_unmanaged_domain_as_such(run):
    result = run({"name": "hand-made"})
    assert result["found"] is True
    assert (result["proxies"][0]["managed"], result["proxies"][0]["uid"]) == (False, None)


def test_unreadable_domain_is_a_warning_not_a_failure(run, hypervisor, monkeypatch):
    # Recorded at AnsibleModule.warn: once controller code is imported into the test process
    # (the inventory plugin's tests do), ansible sends module warnings to the display instead of the result.
    warned = []
    real_warn = AnsibleModule.warn
    monkeypatch.setattr(AnsibleModule, "warn", lambda self, warning, *args, **kwargs: (warned.append(warning), real_warn(self, warning, *args, **kwargs)))
    hypervisor.fail("domain_state", errors.VIR_ERR_INTERNAL_ERROR, "cannot read state", when=lambda dom: dom.name == "proxy-two")
    result = run({})
    assert result.get("failed") is not True
    assert [p["name"] for p in result["proxies"]] == ["proxy-one"]
    assert len(warned) == 1
    assert "proxy-two" in warned[0] and "cannot read state" in warned[0]


def test_unreachable_hypervisor_fails_and_names_it(run):
    error = errors.classify(errors.VIR_ERR_SYSTEM_ERROR, "Cannot recv data: ssh: connect to host nas1 port 22: Connection refused",
                            "connecting to hypervisor qemu+ssh://root@nas1/system")
    result = run({"uri": "qemu+ssh://root@nas1/system"}, open_error=error)
    assert result["failed"] is True
    assert "qemu+ssh://root@nas1/system" in result["msg"]
    assert "Connection refused" in result["msg"]
    assert result["libvirt_code"] == errors.VIR_ERR_SYSTEM_ERROR


def test_listing_failure_fails_the_task(run, hypervisor):
    hypervisor.fail("list_domains", errors.VIR_ERR_RPC, "End of file while reading data")
    result = run({})
    assert result["failed"] is True
    assert "End of file while reading data" in result["msg"]
    assert "proxies" not in result


def test_connection_dying_mid_listing_fails_the_task(run, hypervisor):
    hypervisor.fail("domain_autostart", errors.VIR_ERR_RPC, "Connection reset by peer")
    hypervisor.fail("hostname", errors.VIR_ERR_INTERNAL_ERROR, "client socket is closed", when=lambda: "domain_autostart" in hypervisor.calls)
    result = run({})
    assert result["failed"] is True
    assert "stopped answering" in result["msg"]


@pytest.mark.parametrize("args, words", [
    ({"host": "nas1/../../x"}, "not a valid host name"),
    ({"name": ""}, "name must not be empty"),
])
def test_bad_input_fails_before_connecting(run, opened, args, words):
    result = run(args)
    assert result["failed"] is True
    assert words in result["msg"]
    assert opened == []


def test_missing_libvirt_bindings_fail_naming_the_package(run, monkeypatch, opened):
    missing = ("libvirt-python", "python3-libvirt on Debian/Ubuntu/RHEL, libvirt-python from PyPI", "ImportError: libvirt")
    monkeypatch.setattr(_module, "BASE_REQUIREMENTS", (missing,) + _module.BASE_REQUIREMENTS[1:])
    result = run({})
    assert result["failed"] is True
    assert "Failed to import the required Python library (libvirt-python)" in result["msg"]
    assert "python3-libvirt" in result["msg"]
    assert opened == []
