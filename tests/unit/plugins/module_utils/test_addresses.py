# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.addresses import domain_ipv4
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import ADDRESS_SOURCE_AGENT, ADDRESS_SOURCE_ARP
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import VIR_IP_ADDR_TYPE_IPV4
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import IP_ADDR_TYPE_IPV6, RUNNING, SHUTOFF, FakeHypervisor

MAC = "52:54:00:aa:bb:01"


def ipv4(addr, prefix=24):
    return {"type": VIR_IP_ADDR_TYPE_IPV4, "addr": addr, "prefix": prefix}


def ipv6(addr, prefix=64):
    return {"type": IP_ADDR_TYPE_IPV6, "addr": addr, "prefix": prefix}


def nic(hwaddr, *addrs):
    return {"hwaddr": hwaddr, "addrs": list(addrs)}


@pytest.fixture
def hypervisor():
    return FakeHypervisor()


def running(hypervisor, arp=None, agent=None, agent_error=None, state=RUNNING):
    dom = hypervisor.add_domain("proxy-1", state=state)
    if arp is not None:
        dom.addresses[ADDRESS_SOURCE_ARP] = arp
    if agent is not None:
        dom.addresses[ADDRESS_SOURCE_AGENT] = agent
    dom.agent_error = agent_error
    return dom


def test_arp_answer_wins_and_the_agent_is_not_asked(hypervisor):
    dom = running(hypervisor, arp={"vnet0": nic(MAC, ipv4("198.18.0.123"))}, agent={"eth0": nic(MAC, ipv4("198.18.0.200"))})
    lookup = domain_ipv4(hypervisor, dom)
    assert lookup.ip == "198.18.0.123"
    assert list(lookup.sources.items()) == [("arp", "198.18.0.123")]
    assert hypervisor.calls == ["domain_addresses"]


def test_agent_answers_when_arp_is_empty_skipping_loopback_link_local_and_ipv6(hypervisor):
    agent = {
        "lo": nic("00:00:00:00:00:00", ipv4("127.0.0.1", 8), ipv6("::1", 128)),
        "eth0": nic(MAC, ipv6("fe80::1"), ipv4("169.254.3.4", 16), ipv4("198.18.0.124")),
    }
    dom = running(hypervisor, arp={}, agent=agent)
    lookup = domain_ipv4(hypervisor, dom)
    assert lookup.ip == "198.18.0.124"
    assert list(lookup.sources.items()) == [("arp", "no address yet"), ("agent", "198.18.0.124")]
    assert hypervisor.calls == ["domain_addresses", "domain_addresses"]


def test_agent_not_up_yet_is_no_ip_not_an_error(hypervisor):
    dom = running(hypervisor, arp={}, agent_error=errors.VIR_ERR_AGENT_UNRESPONSIVE)
    lookup = domain_ipv4(hypervisor, dom)
    assert lookup.ip is None
    assert dict(lookup.sources) == {
        "arp": "no address yet",
        "agent": "guest agent not responding (VIR_ERR_AGENT_UNRESPONSIVE)",
    }


def test_unsynced_agent_is_no_ip(hypervisor):
    dom = running(hypervisor, arp={}, agent_error=errors.VIR_ERR_AGENT_UNSYNCED)
    assert domain_ipv4(hypervisor, dom).sources["agent"] == "guest agent not in sync yet (VIR_ERR_AGENT_UNSYNCED)"


@pytest.mark.parametrize("code, code_name", [
    (errors.VIR_ERR_NO_SUPPORT, "VIR_ERR_NO_SUPPORT"),
    (errors.VIR_ERR_ARGUMENT_UNSUPPORTED, "VIR_ERR_ARGUMENT_UNSUPPORTED"),
])
def test_unsupported_source_is_no_ip_and_keeps_libvirts_words(hypervisor, code, code_name):
    dom = running(hypervisor, agent={"eth0": nic(MAC, ipv4("198.18.0.125"))})
    hypervisor.fail("domain_addresses", code, "QEMU guest agent is not configured", when=lambda _dom, source: source == ADDRESS_SOURCE_ARP)
    lookup = domain_ipv4(hypervisor, dom)
    assert lookup.ip == "198.18.0.125"
    assert lookup.sources["arp"].startswith("not ")
    assert code_name in lookup.sources["arp"]
    assert "QEMU guest agent is not configured" in lookup.sources["arp"]


def test_unreadable_arp_table_is_no_arp_address_and_the_agent_answers(hypervisor):
    # libvirt 9.0 on kernel 6.18: every ARP lookup fails while the agent works.
    dom = running(hypervisor, agent={"eth0": nic(MAC, ipv4("198.18.0.127"))})
    hypervisor.fail("domain_addresses", errors.VIR_ERR_INTERNAL_ERROR, "internal error: wrong nlmsg len",
                    when=lambda _dom, source: source == ADDRESS_SOURCE_ARP)
    lookup = domain_ipv4(hypervisor, dom)
    assert lookup.ip == "198.18.0.127"
    assert dict(lookup.sources) == {
        "arp": "host ARP table unreadable (VIR_ERR_INTERNAL_ERROR: internal error: wrong nlmsg len)",
        "agent": "198.18.0.127",
    }


def test_other_errors_from_the_agent_after_an_empty_arp_answer_propagate(hypervisor):
    dom = running(hypervisor, arp={})
    hypervisor.fail("domain_addresses", errors.VIR_ERR_RPC, "connection reset",
                    when=lambda _dom, source: source == ADDRESS_SOURCE_AGENT)
    with pytest.raises(errors.TransientError):
        domain_ipv4(hypervisor, dom)


def test_an_error_the_guest_agent_answers_is_no_address_without_the_guests_words(hypervisor):
    # A compromised guest (or an agent with the command disabled) answers an error: libvirt's INTERNAL_ERROR.
    dom = running(hypervisor, arp={})
    hypervisor.fail("domain_addresses", errors.VIR_ERR_INTERNAL_ERROR, "unable to execute QEMU agent command "
                    "'guest-network-get-interfaces': \x1b[2J" + "x" * 100000,
                    when=lambda _dom, source: source == ADDRESS_SOURCE_AGENT)
    lookup = domain_ipv4(hypervisor, dom)
    assert lookup.ip is None and lookup.sources["agent"] == "guest agent answered an error (VIR_ERR_INTERNAL_ERROR)"


def test_only_link_local_is_no_routable_ip(hypervisor):
    dom = running(hypervisor, arp={}, agent={"eth0": nic(MAC, ipv4("169.254.10.10", 16))})
    lookup = domain_ipv4(hypervisor, dom)
    assert lookup.ip is None
    assert lookup.sources["agent"] == "no routable IPv4 yet"


def test_stopped_domain_asks_one_source_only(hypervisor):
    dom = running(hypervisor, state=SHUTOFF, arp={"vnet0": nic(MAC, ipv4("198.18.0.123"))})
    lookup = domain_ipv4(hypervisor, dom)
    assert lookup.ip is None
    assert list(lookup.sources.items()) == [("arp", "domain not running")]
    assert hypervisor.calls == ["domain_addresses"]


def test_mac_filter_ignores_other_interfaces_of_the_guest(hypervisor):
    agent = {
        "docker0": nic("02:42:ac:11:00:01", ipv4("172.17.0.1", 16)),
        "eth0": nic(MAC.upper(), ipv4("198.18.0.126")),
    }
    dom = running(hypervisor, arp={}, agent=agent)
    assert domain_ipv4(hypervisor, dom).ip == "172.17.0.1"
    assert domain_ipv4(hypervisor, dom, mac=MAC).ip == "198.18.0.126"


@pytest.mark.parametrize("code, error_class", [
    (errors.VIR_ERR_NO_DOMAIN, errors.NotFoundError),
    (errors.VIR_ERR_RPC, errors.TransientError),
    (errors.VIR_ERR_ACCESS_DENIED, errors.PermanentError),
])
def test_other_libvirt_errors_propagate(hypervisor, code, error_class):
    dom = running(hypervisor, arp={})
    hypervisor.fail("domain_addresses", code, "boom")
    with pytest.raises(error_class) as caught:
        domain_ipv4(hypervisor, dom)
    assert caught.value.code == code


def test_domain_that_vanished_is_not_found(hypervisor):
    dom = running(hypervisor, arp={})
    del hypervisor.domains["proxy-1"]
    with pytest.raises(errors.NotFoundError):
        domain_ipv4(hypervisor, dom)
