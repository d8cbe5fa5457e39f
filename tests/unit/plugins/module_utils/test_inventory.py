# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The reference's Get and ListByTag cases, over the fake seam."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.ha_group import HaGroup
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import overlay_volume_name, seed_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import DomainParams, NicInfo, build_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import ADDRESS_SOURCE_AGENT, ADDRESS_SOURCE_ARP
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import (
    METADATA_URI,
    build_instance_element,
    parse_rfc3339,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.interfaces import Interface
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.inventory import (
    get_proxy,
    inspect_domain,
    list_proxies,
    resolve_host,
)
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import (
    BLOCKED,
    CRASHED,
    NOSTATE,
    PAUSED,
    PMSUSPENDED,
    RUNNING,
    SHUTDOWN,
    SHUTOFF,
    FakeHypervisor,
)

CREATED = datetime.datetime(2026, 9, 4, 14, 4, 0, tzinfo=datetime.timezone.utc)
DIGEST = "ab" * 32


def ipv4(addr, prefix=24):
    return {"type": 0, "addr": addr, "prefix": prefix}


def mac_of(name):
    return "52:54:00:00:00:%02x" % (sum(name.encode()) % 256)


def managed_domain(hypervisor, name, uid, state=SHUTOFF, arp=None, agent=None, created=CREATED, ha_group_json=None,
                   pooled_addresses_json=None):
    policy_digest = None if ha_group_json is None and pooled_addresses_json is None else DIGEST
    xml = build_domain_xml(DomainParams(
        name=name,
        metadata=build_instance_element(uid, created, DIGEST, policy_digest=policy_digest, ha_group_json=ha_group_json,
                                        pooled_addresses_json=pooled_addresses_json),
        vcpus=2,
        memory_mib=512,
        pool="default",
        overlay_volume=overlay_volume_name(name),
        seed_volume=seed_volume_name(name),
        interfaces=(NicInfo(mac=mac_of(name), bridge="br0", network=None),),
        virt_type="qemu",
        cpu_mode="none",
    ))
    dom = hypervisor.add_domain(name, xml, state=state)
    if arp is not None:
        dom.addresses[ADDRESS_SOURCE_ARP] = {"vnet0": {"hwaddr": mac_of(name), "addrs": [ipv4(arp)]}}
    if agent is not None:
        dom.addresses[ADDRESS_SOURCE_AGENT] = {"eth0": {"hwaddr": mac_of(name), "addrs": [ipv4(agent)]}}
    return dom


INSIDE_MAC, OUTSIDE_MAC = "52:54:00:aa:00:01", "52:54:00:aa:00:02"
TWO_NICS = (Interface(bridge="br0", mac=INSIDE_MAC, role="inside", address="198.18.11.70/24"),
            Interface(bridge="br1", mac=OUTSIDE_MAC, role="outside", address="198.18.21.70/24", gateway="198.18.21.1"))


def two_nic_domain(hypervisor, name, state=RUNNING, arp=None, agent=None):
    """A proxy with an inside and an outside NIC, their roles in its recorded spec; arp/agent: {mac: address}."""
    spec = {"interfaces": [nic.as_spec() for nic in TWO_NICS]}
    xml = build_domain_xml(DomainParams(
        name=name, metadata=build_instance_element("uid-1", CREATED, DIGEST, json.dumps(spec)), vcpus=1,
        memory_mib=512, pool="default", overlay_volume=overlay_volume_name(name), seed_volume=seed_volume_name(name),
        interfaces=TWO_NICS, virt_type="qemu", cpu_mode="none"))
    dom = hypervisor.add_domain(name, xml, state=state)
    for source, found in ((ADDRESS_SOURCE_ARP, arp), (ADDRESS_SOURCE_AGENT, agent)):
        if found:
            dom.addresses[source] = {"nic%d" % index: {"hwaddr": mac, "addrs": [ipv4(address)]}
                                     for index, (mac, address) in enumerate(sorted(found.items()))}
    return dom


def hand_made_domain(hypervisor, name, state=RUNNING, metadata=""):
    xml = (
        "<domain type='kvm'><name>%s</name><metadata>%s</metadata><memory unit='KiB'>1048576</memory><vcpu>1</vcpu>"
        "<devices><disk type='file' device='disk'><source file='/srv/%s.img'/><target dev='vda' bus='virtio'/></disk>"
        "</devices></domain>" % (name, metadata, name)
    )
    return hypervisor.add_domain(name, xml, state=state)


@pytest.fixture
def hv1():
    return FakeHypervisor(hostname="hv1.example.net")


# --- Get ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("state, arp, agent, want_state, want_ip", [
    (RUNNING, "198.18.0.150", None, "Running", "198.18.0.150"),
    (RUNNING, None, "198.18.0.151", "Running", "198.18.0.151"),
    (RUNNING, None, None, "Provisioning", None),
    (RUNNING, None, "169.254.10.10", "Provisioning", None),
    (SHUTOFF, "198.18.0.150", None, "Stopped", None),
])
def test_get_maps_state_and_address(hv1, state, arp, agent, want_state, want_ip):
    managed_domain(hv1, "proxy-one", "uid-1", state=state, arp=arp, agent=agent)
    entry = get_proxy(hv1, "nas1", "proxy-one")
    assert entry == {
        "id": "hosts/nas1/domains/proxy-one",
        "name": "proxy-one",
        "host": "nas1",
        "state": want_state,
        "libvirt_state": "running" if state == RUNNING else "shutoff",
        "ip": want_ip,
        "ipv6": None,
        "ip_sources": entry["ip_sources"],
        "managed": True,
        "uid": "uid-1",
        "created_at": "2026-09-04T14:04:00Z",
        "spec_digest": DIGEST,
        "policy_digest": None,
        "ha_group": None,
        "ha_holder": None,
        "vcpus": 2,
        "memory_mib": 512,
        "disks": [
            {"device": "disk", "target": "vda", "pool": "default", "volume": "proxy-one.qcow2", "path": None},
            {"device": "cdrom", "target": "sda", "pool": "default", "volume": "proxy-one-seed.iso", "path": None},
        ],
        "macs": [mac_of("proxy-one")],
        "interfaces": [{"mac": mac_of("proxy-one"), "bridge": "br0", "network": None, "role": None, "ipv4": want_ip,
                        "ipv6": None, "egress": True}],
        "egress_ip": want_ip,
        "egress_ipv6": None,
        "egress_address": None,
        "egress_address6": None,
        "pooled_addresses": {},
        "autostart": False,
    }
    if state == RUNNING:
        assert list(entry["ip_sources"]) == (["arp"] if arp else ["arp", "agent"])
    else:
        assert entry["ip_sources"] == {}


def test_get_costs_a_constant_number_of_calls_and_never_reads_metadata_separately(hv1):
    managed_domain(hv1, "proxy-one", "uid-1", state=RUNNING, agent="198.18.0.151")
    get_proxy(hv1, "nas1", "proxy-one")
    assert hv1.calls == ["lookup_domain", "domain_xml", "domain_state", "domain_autostart", "domain_addresses", "domain_addresses"]


# --- HA groups: the recorded group, and whether the guest holds its address ------------------------

GROUP = HaGroup("demo", "198.18.40.10", "2001:db8:40::10")


def ipv6(addr, prefix=64):
    return {"type": 1, "addr": addr, "prefix": prefix}


def sources_asked(hv):
    """The address sources ``hv`` is asked, in order, from now on."""
    asked, original = [], hv.domain_addresses

    def spy(dom, source):
        asked.append(source)
        return original(dom, source)

    hv.domain_addresses = spy
    return asked


def member(hv, agent_addrs, state=RUNNING, arp="198.18.40.11", group=GROUP):
    """A member of ``group`` whose guest agent reports ``agent_addrs`` on eth0 (None: the agent gives no answer)."""
    dom = managed_domain(hv, "egress-demo-1", "uid-1", state=state, arp=arp,
                         ha_group_json=group.recorded() if isinstance(group, HaGroup) else group)
    if agent_addrs is not None:
        dom.addresses[ADDRESS_SOURCE_AGENT] = {
            "lo": {"hwaddr": "00:00:00:00:00:00", "addrs": [ipv4("127.0.0.1", 8)]},
            "eth0": {"hwaddr": mac_of("egress-demo-1"), "addrs": agent_addrs}}
    return dom


@pytest.mark.parametrize("agent_addrs, holds", [
    ([ipv4("198.18.40.11"), ipv4("198.18.40.10")], True),
    ([ipv4("198.18.40.11"), ipv6("2001:db8:40::10")], True),
    ([ipv4("198.18.40.11")], False),
    ([], False),
])
def test_a_member_reports_its_group_and_whether_its_guest_holds_the_address(hv1, agent_addrs, holds):
    member(hv1, agent_addrs)
    asked = sources_asked(hv1)
    entry = get_proxy(hv1, "nas1", "egress-demo-1")
    assert entry["ha_group"] == {"name": "demo", "address": "198.18.40.10", "address6": "2001:db8:40::10"}
    assert entry["ha_holder"] is holds
    # One agent call, first; ARP still gives the address, and the lookup asks the agent no more.
    assert asked == [ADDRESS_SOURCE_AGENT, ADDRESS_SOURCE_ARP]
    assert entry["ip"] == "198.18.40.11" and list(entry["ip_sources"]) == ["arp"]


def test_a_members_agent_answer_is_the_address_lookups_too(hv1):
    member(hv1, [ipv4("198.18.40.11"), ipv4("198.18.40.10")], arp=None)
    entry = get_proxy(hv1, "nas1", "egress-demo-1")
    assert entry["ha_holder"] is True
    assert entry["ip"] == "198.18.40.11" and entry["ip_sources"] == {"arp": "no address yet", "agent": "198.18.40.11"}
    assert hv1.calls.count("domain_addresses") == 2


def test_a_member_whose_agent_does_not_answer_holds_it_unknown(hv1):
    dom = member(hv1, None)
    dom.agent_error = errors.VIR_ERR_AGENT_UNRESPONSIVE
    entry = get_proxy(hv1, "nas1", "egress-demo-1")
    assert entry["ha_group"]["name"] == "demo" and entry["ha_holder"] is None
    assert entry["ip"] == "198.18.40.11"
    assert hv1.calls.count("domain_addresses") == 2


def test_a_stopped_member_holds_it_unknown_without_asking(hv1):
    member(hv1, [ipv4("198.18.40.10")], state=SHUTOFF)
    entry = get_proxy(hv1, "nas1", "egress-demo-1")
    assert (entry["ha_group"]["name"], entry["ha_holder"]) == ("demo", None)
    assert "domain_addresses" not in hv1.calls


@pytest.mark.parametrize("recorded, reported", [
    ('{"backup":{"egress_address":"203.0.113.12"}}', {"backup": {"egress_address": "203.0.113.12"}}),
    ('{"backup":{"egress_address":"203.0.113.12\\n"}}', {}),  # edited by hand: holds none
    (None, {}),
])
def test_the_profiles_pooled_addresses_are_reported_as_recorded(hv1, recorded, reported):
    managed_domain(hv1, "egress-1", "uid-1", pooled_addresses_json=recorded)
    assert get_proxy(hv1, "nas1", "egress-1")["pooled_addresses"] == reported


def test_a_proxy_in_no_group_costs_no_agent_call(hv1):
    managed_domain(hv1, "proxy-one", "uid-1", state=RUNNING, arp="198.18.0.150")
    asked = sources_asked(hv1)
    entry = get_proxy(hv1, "nas1", "proxy-one")
    assert (entry["ha_group"], entry["ha_holder"]) == (None, None)
    assert asked == [ADDRESS_SOURCE_ARP]


@pytest.mark.parametrize("hostile", [
    "198.18.40.10\n", " 198.18.40.10", "\uff11\uff19\uff18.18.40.10", "2001:db8:40::10%eth0", "198.18.40.10/24",
    "2001:db8:40::10%eth0\n198.18.40.10", 3232245770, None,
])
def test_the_guests_word_is_parsed_as_text_first_never_taken_as_it_is(hv1, hostile):
    member(hv1, [ipv4("198.18.40.11"), {"type": 0, "addr": hostile, "prefix": 24}])
    assert get_proxy(hv1, "nas1", "egress-demo-1")["ha_holder"] is False


@pytest.mark.parametrize("answer, holds", [
    ({"lo": {"hwaddr": "00:00:00:00:00:00", "addrs": [ipv4("198.18.40.10")]}}, False),
    ({"eth0": "198.18.40.10", "eth1": {"addrs": "198.18.40.10"}, "eth2": {"addrs": ["198.18.40.10", None]}}, False),
    # The group's address past the first 64 NICs, and past a NIC's first 64 addresses: not read.
    (dict({"nic%03d" % index: {"addrs": [ipv4("198.18.99.1")]} for index in range(64)},
          nic999={"addrs": [ipv4("198.18.40.10")]}), False),
    ({"eth0": {"addrs": [ipv4("198.18.99.1")] * 64 + [ipv4("198.18.40.10")]}}, False),
    ({"eth0": {"addrs": [ipv4("198.18.99.1")] * 63 + [ipv4("198.18.40.10")]}}, True),
    ([ipv4("198.18.40.10")], None),
])
def test_a_guest_answer_of_another_shape_or_too_long_is_read_bounded(hv1, answer, holds):
    dom = member(hv1, [])
    dom.addresses[ADDRESS_SOURCE_AGENT] = answer
    assert get_proxy(hv1, "nas1", "egress-demo-1")["ha_holder"] is holds


@pytest.mark.parametrize("recorded", ['{"name":"demo"}', "not json", '{"name":"Demo!","address":"198.18.40.10"}',
                                      '{"address":"198.18.40.10\\n","name":"demo"}', "[]"])
def test_a_recorded_group_this_collection_would_not_write_reads_as_none(hv1, recorded):
    member(hv1, [ipv4("198.18.40.10")], group=recorded)
    asked = sources_asked(hv1)
    entry = get_proxy(hv1, "nas1", "egress-demo-1")
    assert (entry["ha_group"], entry["ha_holder"]) == (None, None)
    assert asked == [ADDRESS_SOURCE_ARP]


def test_get_unmanaged_domain_has_no_uid(hv1):
    hand_made_domain(hv1, "hand-made")
    entry = get_proxy(hv1, "nas1", "hand-made")
    assert entry["managed"] is False
    assert entry["uid"] is None
    assert entry["created_at"] is None
    assert entry["spec_digest"] is None
    assert entry["disks"] == [{"device": "disk", "target": "vda", "pool": None, "volume": None, "path": "/srv/hand-made.img"}]
    assert entry["memory_mib"] == 1024


def test_get_missing_domain_is_none(hv1):
    assert get_proxy(hv1, "nas1", "proxy-one") is None


def test_get_domain_deleted_between_lookup_and_reads_is_none(hv1):
    managed_domain(hv1, "proxy-one", "uid-1")
    hv1.fail("domain_state", errors.VIR_ERR_NO_DOMAIN, "Domain not found")
    assert get_proxy(hv1, "nas1", "proxy-one") is None


def test_get_with_another_owner_is_none(hv1):
    managed_domain(hv1, "proxy-one", "uid-1")
    assert get_proxy(hv1, "nas1", "proxy-one", uid="uid-2") is None
    assert hv1.calls == ["lookup_domain", "domain_xml"]
    assert get_proxy(hv1, "nas1", "proxy-one", uid="uid-1")["name"] == "proxy-one"


def test_get_state_read_failure_raises(hv1):
    managed_domain(hv1, "proxy-one", "uid-1", state=RUNNING)
    hv1.fail("domain_state", errors.VIR_ERR_INTERNAL_ERROR, "boom")
    with pytest.raises(errors.TransientError, match="boom"):
        get_proxy(hv1, "nas1", "proxy-one")


def test_get_unreadable_definition_raises(hv1):
    hv1.add_domain("proxy-one", "<domain><name>proxy-one</name><vcpu>many</vcpu></domain>")
    with pytest.raises(errors.PermanentError, match="vcpu"):
        get_proxy(hv1, "nas1", "proxy-one")


def test_malformed_created_at_reads_as_the_oldest_time(hv1):
    metadata = "<instance xmlns='%s'><managed>true</managed><uid>u</uid><createdAt>yesterday</createdAt></instance>" % METADATA_URI
    hand_made_domain(hv1, "proxy-one", metadata=metadata)
    assert get_proxy(hv1, "nas1", "proxy-one")["created_at"] == "0001-01-01T00:00:00Z"


def test_a_created_at_in_the_future_never_gives_a_negative_age(hv1):
    now = datetime.datetime.now(datetime.timezone.utc)
    managed_domain(hv1, "proxy-ahead", "u", created=now + datetime.timedelta(seconds=60))
    managed_domain(hv1, "proxy-far", "u", created=now + datetime.timedelta(days=365))
    ahead = parse_rfc3339(get_proxy(hv1, "nas1", "proxy-ahead")["created_at"])
    # A minute ahead is clock skew and reads as now; a year ahead is corrupt and reads as the oldest time.
    assert now - datetime.timedelta(seconds=5) <= ahead <= datetime.datetime.now(datetime.timezone.utc)
    assert get_proxy(hv1, "nas1", "proxy-far")["created_at"] == "0001-01-01T00:00:00Z"


def test_prefixed_metadata_in_the_domain_xml_is_recognised(hv1):
    metadata = "<ep:instance xmlns:ep='%s'><ep:managed>true</ep:managed><ep:uid>u-7</ep:uid></ep:instance>" % METADATA_URI
    hand_made_domain(hv1, "proxy-one", metadata=metadata)
    entry = get_proxy(hv1, "nas1", "proxy-one")
    assert (entry["managed"], entry["uid"]) == (True, "u-7")


@pytest.mark.parametrize("state, ip, want", [
    (RUNNING, "10.0.0.1", "Running"),
    (RUNNING, None, "Provisioning"),
    (BLOCKED, "10.0.0.1", "Running"),
    (PAUSED, None, "Stopped"),
    (SHUTDOWN, None, "Stopped"),
    (SHUTOFF, None, "Stopped"),
    (CRASHED, None, "Stopped"),
    (PMSUSPENDED, None, "Stopped"),
    (NOSTATE, None, "Provisioning"),
])
def test_mapping_table(hv1, state, ip, want):
    dom = managed_domain(hv1, "proxy-one", "uid-1", state=state, arp=ip)
    entry = inspect_domain(hv1, dom, "nas1")
    assert (entry["state"], entry["ip"]) == (want, ip)


def test_addresses_are_only_asked_of_active_domains(hv1):
    dom = managed_domain(hv1, "proxy-one", "uid-1", state=NOSTATE)
    inspect_domain(hv1, dom, "nas1")
    assert "domain_addresses" not in hv1.calls


def test_domain_names_the_collection_would_not_create_get_no_id(hv1):
    hand_made_domain(hv1, "Windows_10")
    entry = get_proxy(hv1, "nas1", "Windows_10")
    assert entry["id"] is None
    assert entry["name"] == "Windows_10"


def test_every_nic_is_reported_with_its_role_address_and_the_egress_one(hv1):
    # The inside NIC is in the ARP table; only the guest agent knows the outside one.
    two_nic_domain(hv1, "proxy-two-nic", arp={INSIDE_MAC: "198.18.11.70"},
                   agent={INSIDE_MAC: "198.18.11.70", OUTSIDE_MAC: "198.18.21.70"})
    entry = get_proxy(hv1, "nas1", "proxy-two-nic")
    assert entry["interfaces"] == [
        {"mac": INSIDE_MAC, "bridge": "br0", "network": None, "role": "inside", "ipv4": "198.18.11.70", "ipv6": None, "egress": False},
        {"mac": OUTSIDE_MAC, "bridge": "br1", "network": None, "role": "outside", "ipv4": "198.18.21.70", "ipv6": None, "egress": True},
    ]
    assert (entry["ip"], entry["egress_ip"], entry["state"]) == ("198.18.11.70", "198.18.21.70", "Running")
    assert entry["ip_sources"] == {"arp": "198.18.11.70"}
    # Each source asked once for both NICs: no more calls than one NIC costs.
    assert hv1.calls.count("domain_addresses") == 2


def test_an_egress_nic_without_an_address_yet_has_none(hv1):
    two_nic_domain(hv1, "proxy-two-nic", arp={INSIDE_MAC: "198.18.11.70"})
    entry = get_proxy(hv1, "nas1", "proxy-two-nic")
    assert [nic["ipv4"] for nic in entry["interfaces"]] == ["198.18.11.70", None]
    assert (entry["ip"], entry["egress_ip"]) == ("198.18.11.70", None)


def test_a_stopped_proxy_lists_its_nics_without_addresses_or_lookups(hv1):
    two_nic_domain(hv1, "proxy-two-nic", state=SHUTOFF)
    entry = get_proxy(hv1, "nas1", "proxy-two-nic")
    assert [(nic["role"], nic["bridge"], nic["ipv4"], nic["egress"]) for nic in entry["interfaces"]] == [
        ("inside", "br0", None, False), ("outside", "br1", None, True)]
    assert entry["egress_ip"] is None
    assert "domain_addresses" not in hv1.calls
    # The static egress address its spec records is known without a lookup: the one an address pool keeps.
    assert entry["egress_address"] == "198.18.21.70"


def test_a_hand_made_domain_has_nics_without_roles(hv1):
    xml = ("<domain type='kvm'><name>hand-made</name><memory unit='KiB'>1048576</memory><vcpu>1</vcpu><devices>"
           "<interface type='network'><mac address='52:54:00:bb:00:01'/><source network='default'/></interface>"
           "</devices></domain>")
    dom = hv1.add_domain("hand-made", xml, state=RUNNING)
    dom.addresses[ADDRESS_SOURCE_ARP] = {"vnet0": {"hwaddr": "52:54:00:bb:00:01", "addrs": [ipv4("192.168.122.5")]}}
    entry = get_proxy(hv1, "nas1", "hand-made")
    assert entry["interfaces"] == [{"mac": "52:54:00:bb:00:01", "bridge": None, "network": "default", "role": None,
                                    "ipv4": "192.168.122.5", "ipv6": None, "egress": True}]
    assert entry["egress_ip"] == entry["ip"] == "192.168.122.5"


# --- ListByTag ------------------------------------------------------------------------------------


def test_list_across_hosts():
    nas1, nas2 = FakeHypervisor("nas1"), FakeHypervisor("nas2")
    managed_domain(nas1, "proxy-one", "uid-1", state=RUNNING, arp="192.168.1.10")
    hand_made_domain(nas1, "hand-made")
    managed_domain(nas2, "proxy-two", "uid-2")
    hand_made_domain(nas2, "foreign", metadata="<instance xmlns='%s'><managed>false</managed></instance>" % METADATA_URI)

    listed = []
    for hypervisor in (nas1, nas2):
        entries, warnings = list_proxies(hypervisor, resolve_host(hypervisor))
        assert warnings == []
        listed.extend(entries)
    assert [(e["id"], e["state"], e["ip"], e["uid"], e["created_at"]) for e in listed] == [
        ("hosts/nas1/domains/proxy-one", "Running", "192.168.1.10", "uid-1", "2026-09-04T14:04:00Z"),
        ("hosts/nas2/domains/proxy-two", "Stopped", None, "uid-2", "2026-09-04T14:04:00Z"),
    ]


def test_list_is_sorted_by_name(hv1):
    for name in ("proxy-c", "proxy-a", "proxy-b"):
        managed_domain(hv1, name, "uid-1")
    entries = list_proxies(hv1, "nas1")[0]
    assert [e["name"] for e in entries] == ["proxy-a", "proxy-b", "proxy-c"]


def test_list_includes_unmanaged_on_request(hv1):
    managed_domain(hv1, "proxy-one", "uid-1")
    hand_made_domain(hv1, "hand-made", state=SHUTOFF)
    entries = list_proxies(hv1, "nas1", include_unmanaged=True)[0]
    assert [(e["name"], e["managed"], e["uid"]) for e in entries] == [("hand-made", False, None), ("proxy-one", True, "uid-1")]


def test_list_filters_by_owner_on_the_xml_alone(hv1):
    managed_domain(hv1, "proxy-one", "uid-1", state=RUNNING)
    managed_domain(hv1, "proxy-two", "uid-2")
    hand_made_domain(hv1, "hand-made")
    entries = list_proxies(hv1, "nas1", uid="uid-2", include_unmanaged=True)[0]
    assert [e["name"] for e in entries] == ["proxy-two"]
    assert hv1.calls == ["list_domains", "domain_xml", "domain_xml", "domain_state", "domain_autostart", "domain_xml"]


def test_list_on_an_empty_hypervisor(hv1):
    assert list_proxies(hv1, "nas1") == ([], [])


def test_list_call_counts_per_domain(hv1):
    managed_domain(hv1, "proxy-run", "uid-1", state=RUNNING, arp="198.18.0.150")
    managed_domain(hv1, "proxy-off", "uid-1", state=SHUTOFF)
    hand_made_domain(hv1, "hand-made")
    list_proxies(hv1, "nas1")
    # One listing; the unmanaged domain costs its XML read only; metadata comes from that XML.
    assert hv1.calls == [
        "list_domains",
        "domain_xml", "domain_state", "domain_autostart", "domain_addresses",
        "domain_xml", "domain_state", "domain_autostart",
        "domain_xml",
    ]


def test_list_of_a_hundred_domains_costs_the_same_per_domain(hv1):
    for index in range(100):
        managed_domain(hv1, "proxy-%03d" % index, "uid-1", state=RUNNING, arp="198.18.1.%d" % index)
    entries = list_proxies(hv1, "nas1")[0]
    assert len(entries) == 100
    assert len(hv1.calls) == 1 + 100 * 4
    assert hv1.calls.count("domain_xml") == 100


def _only(name):
    return lambda dom, *_args: dom.name == name


@pytest.mark.parametrize("method, code", [
    ("domain_xml", errors.VIR_ERR_NO_DOMAIN),
    ("domain_state", errors.VIR_ERR_NO_DOMAIN),
    ("domain_autostart", errors.VIR_ERR_NO_DOMAIN),
    ("domain_addresses", errors.VIR_ERR_NO_DOMAIN),
])
def test_list_skips_a_domain_deleted_mid_listing(hv1, method, code):
    managed_domain(hv1, "proxy-one", "uid-1", state=RUNNING)
    managed_domain(hv1, "proxy-two", "uid-2", state=RUNNING, arp="198.18.0.150")
    hv1.fail(method, code, "Domain not found: no domain with matching name 'proxy-one'", when=_only("proxy-one"))
    entries, warnings = list_proxies(hv1, "nas1")
    assert [e["name"] for e in entries] == ["proxy-two"]
    assert len(warnings) == 1
    assert "'proxy-one'" in warnings[0] and "disappeared" in warnings[0] and "nas1" in warnings[0]
    assert "hostname" not in hv1.calls


def test_list_skips_a_domain_undefined_after_the_listing(hv1):
    managed_domain(hv1, "proxy-one", "uid-1")
    managed_domain(hv1, "proxy-two", "uid-2")
    listed = list(hv1.domains.values())
    del hv1.domains["proxy-one"]
    hv1.list_domains = lambda: listed
    entries, warnings = list_proxies(hv1, "nas1")
    assert [e["name"] for e in entries] == ["proxy-two"]
    assert "disappeared" in warnings[0]


@pytest.mark.parametrize("setup, words", [
    (lambda hv: hv.fail("domain_state", errors.VIR_ERR_INTERNAL_ERROR, "boom", when=_only("proxy-one")), "boom"),
    (lambda hv: hv.fail("domain_xml", errors.VIR_ERR_OPERATION_TIMEOUT, "cannot acquire state change lock", when=_only("proxy-one")),
     "state change lock"),
    (lambda hv: hv.fail("domain_addresses", errors.VIR_ERR_OPERATION_TIMEOUT, "agent timed out", when=_only("proxy-one")),
     "agent timed out"),
    (lambda hv: hv.add_domain("proxy-one", "<domain><name>proxy-one</name>"), "not well-formed"),
    (lambda hv: hv.add_domain("proxy-one", "<domain><name>proxy-one</name><memory unit='parsecs'>1</memory></domain>"), "unreadable size"),
])
def test_list_skips_an_unreadable_domain_with_a_warning(hv1, setup, words):
    managed_domain(hv1, "proxy-one", "uid-1", state=RUNNING)
    setup(hv1)
    managed_domain(hv1, "proxy-two", "uid-2")
    entries, warnings = list_proxies(hv1, "nas1")
    assert [(e["name"], e["uid"]) for e in entries] == [("proxy-two", "uid-2")]
    assert len(warnings) == 1
    assert "'proxy-one'" in warnings[0] and "could not be read" in warnings[0] and words in warnings[0]
    # The hypervisor was checked to still answer after the failure.
    assert hv1.calls.count("hostname") == 1


def test_list_fails_when_the_connection_dies_mid_listing(hv1):
    managed_domain(hv1, "proxy-one", "uid-1")
    managed_domain(hv1, "proxy-two", "uid-2")
    hv1.fail("domain_state", errors.VIR_ERR_RPC, "Cannot recv data: Connection reset by peer")
    hv1.fail("hostname", errors.VIR_ERR_INTERNAL_ERROR, "client socket is closed")
    with pytest.raises(errors.TransientError) as caught:
        list_proxies(hv1, "nas1")
    message = caught.value.message
    assert "hypervisor nas1 stopped answering" in message
    assert "Connection reset by peer" in message and "client socket is closed" in message


def test_list_fails_when_the_hypervisor_cannot_be_listed(hv1):
    managed_domain(hv1, "proxy-one", "uid-1")
    hv1.fail("list_domains", errors.VIR_ERR_RPC, "End of file while reading data")
    with pytest.raises(errors.TransientError, match="End of file"):
        list_proxies(hv1, "nas1")


# --- host -----------------------------------------------------------------------------------------


def test_host_defaults_to_libvirts_host_name(hv1):
    assert resolve_host(hv1) == "hv1.example.net"
    assert resolve_host(hv1, "nas1") == "nas1"


def test_bad_host_is_refused(hv1):
    with pytest.raises(errors.ValidationError, match="not a valid host name"):
        resolve_host(hv1, "nas1/../x")
