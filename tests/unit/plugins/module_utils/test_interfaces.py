# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Several NICs: the interfaces option, its validation, the domain XML, the digest, the NIC checks and the results."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest
from lxml import etree

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.timing import Timing
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.addresses import nic_addresses
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import build_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import ADDRESS_SOURCE_AGENT, ADDRESS_SOURCE_ARP
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import build_instance_element
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy import request as proxy_request
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.flow import run_proxy, run_set
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.interfaces import (
    Interface,
    interfaces_from_params,
    recorded_egress_address,
)
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import RUNNING
from ansible_collections.egress_proxies.kvm.tests.unit.libvirt_schema import virt_xml_validate
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import (
    CREATE,
    MUTATING,
    NAME,
    NOW,
    FakeTime,
    domain_of,
    ready_host,
    request,
)
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy_set import set_request

INSIDE_MAC = "52:54:00:00:15:01"
OUTSIDE_MAC = "52:54:00:00:15:02"
TWO_NICS = [dict(bridge="br0", mac=INSIDE_MAC, role="inside"), dict(bridge="br1", mac=OUTSIDE_MAC, role="outside")]


@pytest.fixture
def run(tmp_path):
    """run(hv, request or set request, check_mode=False) -> the result; check mode must mutate nothing."""

    def run_flow(hv, req, check_mode=False):
        time = FakeTime()
        flow = run_set if hasattr(req, "proxies") else run_proxy
        before = len(hv.calls)
        result = flow(hv, req, check_mode, timing=Timing(clock=lambda: NOW, sleep=time.sleep, monotonic=time.monotonic),
                      lock_dir=str(tmp_path / "locks")).module_result(diff_mode=True)
        assert not (check_mode and MUTATING.intersection(hv.calls[before:]))
        return result

    return run_flow


def two_nics(**changes):
    return request(bridge=None, interfaces=TWO_NICS, **changes)


def agent_reports(dom, *pairs):
    """The guest agent's interfaceAddresses() for (mac, ipv4) pairs, eth0, eth1, ..."""
    dom.addresses[ADDRESS_SOURCE_AGENT] = {
        "eth%d" % index: {"hwaddr": mac, "addrs": [{"type": 0, "addr": ip, "prefix": 24}]}
        for index, (mac, ip) in enumerate(pairs)}


# --- the option ---------------------------------------------------------------------------------------


def test_the_single_options_are_a_one_element_list():
    assert interfaces_from_params({"network": "default", "mac": "52:54:00:AA:00:01"}) == (
        Interface(network="default", mac="52:54:00:aa:00:01"),)
    assert interfaces_from_params({}) == ()


def test_a_list_keeps_its_order_and_roles():
    assert two_nics().interfaces == (Interface(bridge="br0", mac=INSIDE_MAC, role="inside"),
                                     Interface(bridge="br1", mac=OUTSIDE_MAC, role="outside"))


@pytest.mark.parametrize("changes, message", [
    (dict(interfaces=TWO_NICS), r"interfaces and bridge are mutually exclusive: give the first NIC as interfaces\[0\]"),
    (dict(bridge=None, mac=INSIDE_MAC, interfaces=TWO_NICS), "interfaces and mac are mutually exclusive"),
    (dict(bridge=None, interfaces=[]), "non-empty list"),
    (dict(bridge=None, interfaces=[dict(bridge="br0"), dict(mac=OUTSIDE_MAC)]), r"interfaces\[1\] needs exactly one of"),
    (dict(bridge=None, interfaces=[dict(bridge="br0", network="default")]), r"interfaces\[0\] needs exactly one of"),
    (dict(bridge=None, interfaces=[dict(bridge="br0", mac="01:00:5e:00:00:01")]), r"interfaces\[0\]: .*multicast"),
    (dict(bridge=None, interfaces=[dict(bridge="br0", role="Out side")]), r"interfaces\[0\]: role 'Out side'"),
    (dict(bridge=None, interfaces=[dict(bridge="br0", speed=10)]), r"interfaces\[0\]: unknown option speed"),
    (dict(bridge=None, interfaces=[dict(bridge="br0", mac=INSIDE_MAC), dict(bridge="br1", mac=INSIDE_MAC)]),
     r"interfaces\[0\] and interfaces\[1\] have the same mac"),
    (dict(bridge=None, interfaces=[dict(bridge="br0", role="inside"), dict(bridge="br1", role="inside")]),
     r"interfaces\[0\] and interfaces\[1\] have the same role 'inside'"),
])
def test_bad_lists_are_refused_naming_the_entry(changes, message):
    with pytest.raises(errors.ValidationError, match=message):
        request(**changes)


# --- the domain and its digest ------------------------------------------------------------------------


def test_every_nic_reaches_the_domain_in_order(tmp_path):
    req = two_nics()
    xml = build_domain_xml(req.domain_params(build_instance_element("owner", NOW)))
    validated = virt_xml_validate(tmp_path, xml, "domain")
    assert validated.returncode == 0, validated.stdout + validated.stderr
    interfaces = etree.fromstring(xml).findall("devices/interface")
    assert [(i.get("type"), i.find("source").get("bridge"), i.find("mac").get("address"), i.find("model").get("type"))
            for i in interfaces] == [("bridge", "br0", INSIDE_MAC, "virtio"), ("bridge", "br1", OUTSIDE_MAC, "virtio")]


def test_a_single_nic_keeps_the_spec_it_always_had():
    spec = request(mac=INSIDE_MAC).spec()
    assert "interfaces" not in spec
    assert (spec["bridge"], spec["network"], spec["mac"]) == ("br0", None, INSIDE_MAC)
    as_list = request(bridge=None, interfaces=[dict(bridge="br0", mac=INSIDE_MAC)]).spec()
    assert proxy_request.spec_digest(as_list) == proxy_request.spec_digest(spec)


@pytest.mark.parametrize("interfaces", [
    TWO_NICS[:1],
    list(reversed(TWO_NICS)),
    [TWO_NICS[0], dict(TWO_NICS[1], bridge="br0")],
    [TWO_NICS[0], dict(TWO_NICS[1], mac=None)],
    [TWO_NICS[0], dict(TWO_NICS[1], role="uplink")],
    TWO_NICS + [dict(network="default")],
])
def test_a_changed_list_is_drift(interfaces):
    changed = request(bridge=None, interfaces=interfaces).spec()
    assert proxy_request.spec_digest(changed) != proxy_request.spec_digest(two_nics().spec())


def test_a_changed_list_replaces_the_vm(run):
    hv = ready_host()
    run(hv, two_nics())
    changed = request(bridge=None, interfaces=TWO_NICS + [dict(network="default")])
    predicted = run(hv, changed, check_mode=True)
    result = run(hv, changed)
    assert result["drifted"] is True and result["actions"] == predicted["actions"]
    assert "define domain" in result["actions"]
    assert [nic.network for nic in domain_of(hv).nics] == [None, None, "default"]


# --- every NIC checked before anything is touched -------------------------------------------------------


def test_a_missing_bridge_of_any_nic_fails_naming_it_before_anything(run):
    hv = ready_host()
    req = request(bridge=None, interfaces=[dict(bridge="br0"), dict(bridge="uplink0"), dict(network="lan")])
    with pytest.raises(errors.PermanentError) as raised:
        run(hv, req)
    message = str(raised.value)
    assert "bridge 'uplink0' (option interfaces[1])" in message
    assert "libvirt network 'lan' (option interfaces[2])" in message
    assert "Nothing was changed" in message
    assert not MUTATING.intersection(hv.calls)


def test_the_single_option_keeps_its_name_in_the_message(run):
    hv = ready_host()
    with pytest.raises(errors.PermanentError, match=r"bridge 'uplink0' \(option bridge\)"):
        run(hv, request(bridge="uplink0"))


# --- addresses -----------------------------------------------------------------------------------------


def test_each_source_is_asked_once_for_all_nics():
    hv = ready_host()
    hv.add_domain("guest", state=RUNNING)
    dom = hv.domains["guest"]
    dom.addresses[ADDRESS_SOURCE_ARP] = {"vnet0": {"hwaddr": INSIDE_MAC, "addrs": [{"type": 0, "addr": "198.18.11.5"}]}}
    agent_reports(dom, (INSIDE_MAC, "198.18.11.5"), (OUTSIDE_MAC, "198.19.0.5"))
    before = len(hv.calls)
    lookups = nic_addresses(hv, dom, [INSIDE_MAC, OUTSIDE_MAC])
    assert hv.calls[before:].count("domain_addresses") == 2
    assert lookups[INSIDE_MAC].ip == "198.18.11.5" and dict(lookups[INSIDE_MAC].sources) == {"arp": "198.18.11.5"}
    assert lookups[OUTSIDE_MAC].ip == "198.19.0.5"
    assert dict(lookups[OUTSIDE_MAC].sources) == {"arp": "no routable IPv4 yet", "agent": "198.19.0.5"}


def test_results_list_every_nic_and_the_egress_one(run):
    hv = ready_host()
    predicted = run(hv, two_nics(), check_mode=True)
    assert [(nic["mac"], nic["role"], nic["egress"]) for nic in predicted["interfaces"]] == [
        (INSIDE_MAC, "inside", False), (OUTSIDE_MAC, "outside", True)]
    run(hv, two_nics())
    agent_reports(hv.domains[NAME], (INSIDE_MAC, "198.18.11.5"), (OUTSIDE_MAC, "198.19.0.5"))
    result = run(hv, two_nics())
    assert result["changed"] is False
    assert result["ip"] == "198.18.11.5" and result["mac"] == INSIDE_MAC  # the first NIC, as before
    assert result["egress_ip"] == "198.19.0.5"
    assert result["interfaces"] == [
        {"mac": INSIDE_MAC, "bridge": "br0", "network": None, "role": "inside", "ipv4": "198.18.11.5", "ipv6": None, "egress": False},
        {"mac": OUTSIDE_MAC, "bridge": "br1", "network": None, "role": "outside", "ipv4": "198.19.0.5", "ipv6": None, "egress": True},
    ]


def test_the_static_egress_address_is_predicted_then_read_back_from_the_metadata(run):
    hv = ready_host()
    predicted = run(hv, static(STATIC_INSIDE, STATIC_OUTSIDE), check_mode=True)
    assert predicted["egress_address"] == "198.18.21.50"
    # Recorded in the domain's spec: read back while the VM has no address on any NIC yet.
    assert run(hv, static(STATIC_INSIDE, STATIC_OUTSIDE))["egress_address"] == "198.18.21.50"
    assert run(hv, static(STATIC_INSIDE))["egress_address"] == "198.18.11.50"  # one NIC: its own
    assert run(hv, two_nics())["egress_address"] is None  # DHCP
    dual = run(hv, static(STATIC_INSIDE, dict(STATIC_OUTSIDE, address6="2001:db8:21::50/64")))
    assert (dual["egress_address"], dual["egress_address6"]) == ("198.18.21.50", "2001:db8:21::50")


@pytest.mark.parametrize("recorded", [
    None, {}, {"interfaces": "198.18.21.5/24"}, {"interfaces": []}, {"interfaces": [None]},
    {"interfaces": [{"role": "outside", "address": "198.18.21.5\nsquid"}]},
    {"interfaces": [{"role": "outside", "address": "fe80::1%eth0/64"}]},
    {"interfaces": [{"role": "outside", "address": ["198.18.21.5/24"]}]},
    {"interfaces": [{"role": "inside", "address": "198.18.11.5/24"}, {"role": "outside"}]},
])
def test_a_recorded_egress_address_that_is_not_one_reads_as_none(recorded):
    assert recorded_egress_address(recorded) is None


def test_the_recorded_egress_address_is_the_outside_nics():
    spec = {"interfaces": [{"role": "inside", "address": "198.18.11.5/24"},
                           {"role": "outside", "address": "198.18.21.5/24", "address6": "2001:db8:21::5/64"}]}
    assert (recorded_egress_address(spec), recorded_egress_address(spec, "address6")) == ("198.18.21.5", "2001:db8:21::5")
    # Each option holds its own family: an edited metadata's IPv6 in address is none.
    assert recorded_egress_address({"interfaces": [{"address": "2001:db8:21::5/64"}]}) is None


def test_one_nic_is_its_own_egress(run):
    result = run(ready_host(), request(mac=INSIDE_MAC))
    assert [(nic["mac"], nic["role"], nic["egress"]) for nic in result["interfaces"]] == [(INSIDE_MAC, None, True)]


def test_the_set_passes_every_proxys_interfaces_through(run):
    hv = ready_host()
    req = set_request([{"name": "proxy-a", "interfaces": TWO_NICS}, {"name": "proxy-b", "bridge": "br0"}], bridge=None)
    result = run(hv, req)
    assert [p["actions"] for p in result["proxies"]] == [CREATE, CREATE]
    assert [nic.mac for nic in domain_of(hv, "proxy-a").nics] == [INSIDE_MAC, OUTSIDE_MAC]
    assert [nic.bridge for nic in domain_of(hv, "proxy-b").nics] == ["br0"]


# --- static addresses ----------------------------------------------------------------------------------

STATIC_INSIDE = dict(bridge="br0", role="inside", address="198.18.11.50/24", nameservers=["198.18.11.1"], search=["lab"])
STATIC_OUTSIDE = dict(bridge="br1", role="outside", address="198.18.21.50/24", gateway="198.18.21.1")


def static(*interfaces, **changes):
    return request(bridge=None, interfaces=list(interfaces), **changes)


def test_static_nics_bring_a_network_config_matched_by_mac():
    req = static(STATIC_INSIDE, dict(bridge="br1", mac=OUTSIDE_MAC))
    inside_mac = req.interfaces[0].mac
    assert inside_mac.startswith("52:54:00:") and inside_mac == static(STATIC_INSIDE).interfaces[0].mac
    assert inside_mac != request(name="proxy-other", bridge=None, interfaces=[STATIC_INSIDE]).interfaces[0].mac
    assert json.loads(req.seed_files()["network-config"]) == {"version": 2, "ethernets": {
        "nic0": {"match": {"macaddress": inside_mac}, "set-name": "nic0", "addresses": ["198.18.11.50/24"],
                 "nameservers": {"addresses": ["198.18.11.1"], "search": ["lab"]}},
        "nic1": {"match": {"macaddress": OUTSIDE_MAC}, "set-name": "nic1", "dhcp4": True},
    }}
    outside = static(STATIC_INSIDE, STATIC_OUTSIDE).seed_files()["network-config"]
    assert json.loads(outside)["ethernets"]["nic1"]["gateway4"] == "198.18.21.1"


def test_dhcp_nics_leave_the_network_config_out():
    assert "network-config" not in two_nics().seed_files()


def test_a_changed_static_address_is_drift():
    moved = static(dict(STATIC_INSIDE, address="198.18.11.51/24"))
    assert proxy_request.spec_digest(moved.spec()) != proxy_request.spec_digest(static(STATIC_INSIDE).spec())
    assert static(STATIC_INSIDE).spec()["interfaces"][0]["address"] == "198.18.11.50/24"


@pytest.mark.parametrize("interfaces, message", [
    ([dict(bridge="br0", address="198.18.11.300/24")], r"interfaces\[0\]: address '198.18.11.300/24' is not an IPv4"),
    ([dict(bridge="br0", address="198.18.11.50")], "with its prefix length"),
    ([dict(bridge="br0", address="198.18.11.0/24")], "network address of 198.18.11.0/24"),
    ([dict(bridge="br0", address="198.18.11.255/24")], "broadcast address"),
    ([dict(bridge="br0", address="198.18.11.50/24", gateway="198.18.12.1")], "gateway 198.18.12.1 is outside the prefix"),
    ([dict(bridge="br0", address="198.18.11.50/24", gateway="198.18.11.50")], "the NIC's own address"),
    ([dict(bridge="br0", address="198.18.11.50/24", gateway="router")], "gateway 'router' is not an IPv4"),
    ([dict(bridge="br0", gateway="198.18.11.1")], "gateway needs address"),
    ([dict(bridge="br0", address="198.18.11.50/24", nameservers=["dns"])], "nameservers: 'dns'"),
    ([dict(bridge="br0", address="198.18.11.50/24", search=["bad domain"])], "search: 'bad domain'"),
    ([dict(bridge="br0", address="198.18.11.50/24"), dict(bridge="br1", address="198.18.11.50/16")],
     r"interfaces\[0\] and interfaces\[1\] have the same address '198.18.11.50'"),
])
def test_bad_static_settings_are_refused_naming_the_entry_and_field(interfaces, message):
    with pytest.raises(errors.ValidationError, match=message):
        static(*interfaces)


def test_static_addresses_and_network_config_are_exclusive():
    with pytest.raises(errors.ValidationError, match="network_config and static interface addresses"):
        static(STATIC_INSIDE, network_config={"version": 2})


# --- IPv6 -------------------------------------------------------------------------------------------------

DUAL_STACK_OUTSIDE = dict(STATIC_OUTSIDE, address6="2001:db8:21::50/64", gateway6="2001:db8:21::1")
IPV6_ONLY_OUTSIDE = dict(bridge="br1", role="outside", address6="2001:db8:21:0::0050/64", gateway6="fe80::1",
                         nameservers=["2001:DB8::53"])


def test_dual_stack_and_ipv6_only_nics_in_the_network_config():
    ethernets = json.loads(static(STATIC_INSIDE, DUAL_STACK_OUTSIDE).seed_files()["network-config"])["ethernets"]
    assert {key: value for key, value in ethernets["nic1"].items() if key not in ("match", "set-name")} == {
        "addresses": ["198.18.21.50/24", "2001:db8:21::50/64"], "gateway4": "198.18.21.1", "gateway6": "2001:db8:21::1"}
    ethernets = json.loads(static(STATIC_INSIDE, IPV6_ONLY_OUTSIDE).seed_files()["network-config"])["ethernets"]
    # Written in the normalised form; an IPv6-only NIC asks for no IPv4 lease.
    assert {key: value for key, value in ethernets["nic1"].items() if key not in ("match", "set-name")} == {
        "addresses": ["2001:db8:21::50/64"], "gateway6": "fe80::1",
        "nameservers": {"addresses": ["2001:db8::53"], "search": []}}


def test_an_ipv6_address_alone_makes_a_nic_static_with_a_derived_mac():
    req = static(dict(bridge="br0", address6="2001:db8:11::50/64"))
    assert req.interfaces[0].mac.startswith("52:54:00:")
    assert json.loads(req.seed_files()["network-config"])["ethernets"]["nic0"]["addresses"] == ["2001:db8:11::50/64"]
    assert req.spec()["interfaces"][0]["address6"] == "2001:db8:11::50/64"


def test_a_nic_without_ipv6_keeps_the_spec_it_had():
    assert "address6" not in static(STATIC_INSIDE).spec()["interfaces"][0]
    moved = static(dict(DUAL_STACK_OUTSIDE, address6="2001:db8:21::51/64"))
    assert proxy_request.spec_digest(moved.spec()) != proxy_request.spec_digest(static(DUAL_STACK_OUTSIDE).spec())


@pytest.mark.parametrize("changes, message", [
    (dict(address6="2001:db8:21::50"), r"interfaces\[0\]: address6 '2001:db8:21::50' is not an IPv6 address with its "
                                       "prefix length"),
    (dict(address6="198.18.21.50/24"), "address6 '198.18.21.50/24' is not an IPv6"),
    (dict(address6="2001:db8:21::50%eth0/64"), "address6 '2001:db8:21::50%eth0/64' is not an IPv6"),
    (dict(address6="2001:db8:21::50%\nnic0/64"), r"address6 '2001:db8:21::50%\\nnic0/64' is not an IPv6"),
    (dict(address6="2001:db8:21::50/64\n"), r"address6 '2001:db8:21::50/64\\n' is not an IPv6"),
    (dict(address6="2001:db8:21::50/64\x85"), r"address6 '2001:db8:21::50/64\\x85' is not an IPv6"),
    (dict(address6=" 2001:db8:21::50/64"), "address6 ' 2001:db8:21::50/64' is not an IPv6"),
    (dict(address6="２００１:db8:21::50/64"), "is not an IPv6"),
    (dict(address6="2001:db8:21::/64"), "subnet-router anycast address of 2001:db8:21::/64"),
    (dict(address6="fe80::50/64"), "fe80::50/64 is a link-local address"),
    (dict(address6="ff02::50/64"), "is a multicast address"),
    (dict(address6="::1/128"), "is a loopback address"),
    (dict(address6="::ffff:198.18.21.50/120"), "is an IPv4-mapped address"),
    (dict(gateway6="2001:db8:22::1"), "gateway6 2001:db8:22::1 is outside the prefix; it must be another address "
                                      "inside 2001:db8:21::/64"),
    (dict(gateway6="2001:db8:21::50"), "gateway6 2001:db8:21::50 is the NIC's own address"),
    (dict(gateway6="fe80::1%nic1"), "gateway6 'fe80::1%nic1' is not an IPv6 address"),
    (dict(gateway6="fe80::1%\nnic1"), r"gateway6 'fe80::1%\\nnic1' is not an IPv6 address"),
    (dict(gateway6="198.18.21.1"), "gateway6 '198.18.21.1' is not an IPv6 address"),
    (dict(address6=None), r"interfaces\[0\]: gateway6 needs address6"),
    (dict(address=None, gateway=None, address6=None, gateway6=None), "nameservers needs address or address6"),
    (dict(nameservers=["2001:db8::53%nic1"]), "nameservers: '2001:db8::53%nic1' is not an IP address"),
])
def test_bad_ipv6_settings_are_refused_naming_the_option(changes, message):
    with pytest.raises(errors.ValidationError, match=message):
        static(dict(DUAL_STACK_OUTSIDE, **dict({"nameservers": ["2001:db8::53"]}, **changes)))


def test_two_nics_cannot_share_an_ipv6_address():
    with pytest.raises(errors.ValidationError,
                       match=r"interfaces\[0\] and interfaces\[1\] have the same address6 '2001:db8:21::50'"):
        static(dict(bridge="br0", address6="2001:db8:21::50/64"), dict(bridge="br1", address6="2001:db8:21::50/48"))


# --- IPv6 addresses in the wait and the results ------------------------------------------------------------


def report_addresses(dom, source, *nics):
    """What ``source`` (ARP or the agent) reports: each NIC as (mac, address...), eth0, eth1...; the link-local IPv6
    every NIC has comes first, as the agent lists it."""
    dom.addresses[source] = {
        "eth%d" % index: {"hwaddr": mac, "addrs": [{"type": 1, "addr": "fe80::5054:ff:fe00:%d" % index, "prefix": 64}] + [
            {"type": 1 if ":" in address else 0, "addr": address, "prefix": 64 if ":" in address else 24}
            for address in addresses]}
        for index, (mac, *addresses) in enumerate(nics)}


IPV6_ONLY_INSIDE = dict(bridge="br0", mac=INSIDE_MAC, role="inside", address6="2001:db8:11::5/64")
DUAL_STACK_EGRESS = dict(bridge="br1", mac=OUTSIDE_MAC, role="outside", address="198.19.0.5/24",
                         address6="2001:db8:21::5/64")


def test_the_wait_takes_an_ipv6_only_proxys_ipv6_from_the_agent_and_never_asks_arp(tmp_path):
    hv = ready_host()
    req = static(IPV6_ONLY_INSIDE, DUAL_STACK_EGRESS, wait_for_ip=True, wait_timeout=10)

    def boot(poll):
        if poll == 2:
            report_addresses(hv.domains[NAME], ADDRESS_SOURCE_AGENT, (INSIDE_MAC, "2001:DB8:11::5"),
                             (OUTSIDE_MAC, "198.19.0.5", "2001:db8:21::5"))

    before = len(hv.calls)
    result = run_proxy(hv, req, False, timing=_timing(boot), lock_dir=str(tmp_path)).module_result(diff_mode=True)
    assert (result["state"], result["ip"], result["ipv6"]) == ("Running", "2001:db8:11::5", "2001:db8:11::5")
    assert (result["egress_ip"], result["egress_ipv6"]) == ("198.19.0.5", "2001:db8:21::5")
    assert [(nic["ipv4"], nic["ipv6"]) for nic in result["interfaces"]] == [
        (None, "2001:db8:11::5"), ("198.19.0.5", "2001:db8:21::5")]
    # The wait asks the agent alone (the ARP table holds IPv4 neighbours only): one call per poll.
    waited = hv.calls[before:]
    assert waited.count("domain_addresses") >= 3 and result["ip_sources"] == {"agent": "2001:db8:11::5"}


def test_an_ipv6_only_proxy_without_its_ipv6_fails_the_wait_naming_the_family(tmp_path):
    hv = ready_host()
    req = static(IPV6_ONLY_INSIDE, wait_for_ip=True, wait_timeout=5)

    def boot(poll):
        report_addresses(hv.domains[NAME], ADDRESS_SOURCE_AGENT, (INSIDE_MAC,))

    with pytest.raises(errors.TransientError) as raised:
        run_proxy(hv, req, False, timing=_timing(boot), lock_dir=str(tmp_path))
    assert raised.value.message.startswith(
        "%s got no routable IPv6 within wait_timeout (5 s): %s (state running, bridge br0; agent: no routable IPv6 yet)"
        % (NAME, NAME)), raised.value.message


def test_a_dual_stack_nics_ipv4_from_arp_ends_the_wait_and_its_ipv6_comes_from_the_agent():
    hv = ready_host()
    hv.add_domain("guest", state=RUNNING)
    dom = hv.domains["guest"]
    report_addresses(dom, ADDRESS_SOURCE_ARP, (OUTSIDE_MAC, "198.19.0.5"))
    report_addresses(dom, ADDRESS_SOURCE_AGENT, (INSIDE_MAC, "198.18.11.5"), (OUTSIDE_MAC, "198.19.0.5", "2001:db8:21::5"))
    lookups = nic_addresses(hv, dom, [INSIDE_MAC, OUTSIDE_MAC], {OUTSIDE_MAC: Interface(**DUAL_STACK_EGRESS).wanted})
    assert (lookups[OUTSIDE_MAC].ip, lookups[OUTSIDE_MAC].ipv6) == ("198.19.0.5", "2001:db8:21::5")
    assert dict(lookups[OUTSIDE_MAC].sources) == {"arp": "198.19.0.5", "agent": "2001:db8:21::5"}
    # A NIC without a static IPv6 is not looked up for one.
    assert (lookups[INSIDE_MAC].ip, lookups[INSIDE_MAC].ipv6) == ("198.18.11.5", None)


def test_a_nic_with_more_addresses_than_its_static_ones_is_reported_by_its_static_ones():
    """A profile's egress addresses sit on the egress NIC beside its own, and the guest may list them first."""
    hv = ready_host()
    hv.add_domain("guest", state=RUNNING)
    dom = hv.domains["guest"]
    report_addresses(dom, ADDRESS_SOURCE_ARP, (OUTSIDE_MAC, "198.19.0.11"), (OUTSIDE_MAC, "198.19.0.5"))
    report_addresses(dom, ADDRESS_SOURCE_AGENT,
                     (OUTSIDE_MAC, "198.19.0.11", "2001:db8:21::11", "198.19.0.5", "2001:db8:21::5"))
    lookups = nic_addresses(hv, dom, [OUTSIDE_MAC], {OUTSIDE_MAC: Interface(**DUAL_STACK_EGRESS).wanted})
    assert (lookups[OUTSIDE_MAC].ip, lookups[OUTSIDE_MAC].ipv6) == ("198.19.0.5", "2001:db8:21::5")
    # A NIC configured by DHCP has no static address: its first routable one, as before.
    dhcp = nic_addresses(hv, dom, [OUTSIDE_MAC], {OUTSIDE_MAC: Interface(bridge="br1", mac=OUTSIDE_MAC).wanted})
    assert dhcp[OUTSIDE_MAC].ip == "198.19.0.11"


def _timing(on_sleep):
    time = FakeTime()
    time.on_sleep = on_sleep
    return Timing(clock=lambda: NOW, sleep=time.sleep, monotonic=time.monotonic)
