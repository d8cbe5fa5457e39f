# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import (
    STATUS_PROVISIONING,
    STATUS_RUNNING,
    STATUS_STOPPED,
    VIR_DOMAIN_BLOCKED,
    VIR_DOMAIN_CRASHED,
    VIR_DOMAIN_NOSTATE,
    VIR_DOMAIN_PAUSED,
    VIR_DOMAIN_PMSUSPENDED,
    VIR_DOMAIN_RUNNING,
    VIR_DOMAIN_SHUTDOWN,
    VIR_DOMAIN_SHUTOFF,
    VIR_IP_ADDR_TYPE_IPV4,
    first_routable_ipv4,
    is_active,
    libvirt_state_name,
    map_state,
)
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import IP_ADDR_TYPE_IPV6


def test_constants_match_libvirt_abi():
    states = [VIR_DOMAIN_NOSTATE, VIR_DOMAIN_RUNNING, VIR_DOMAIN_BLOCKED, VIR_DOMAIN_PAUSED, VIR_DOMAIN_SHUTDOWN,
              VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_CRASHED, VIR_DOMAIN_PMSUSPENDED]
    assert states == list(range(8))
    address_types = (VIR_IP_ADDR_TYPE_IPV4, IP_ADDR_TYPE_IPV6)
    assert address_types == (0, 1)


@pytest.mark.parametrize("state, ip, expected", [
    (VIR_DOMAIN_RUNNING, "10.0.0.1", STATUS_RUNNING),
    (VIR_DOMAIN_RUNNING, None, STATUS_PROVISIONING),
    (VIR_DOMAIN_RUNNING, "", STATUS_PROVISIONING),
    (VIR_DOMAIN_BLOCKED, "10.0.0.1", STATUS_RUNNING),
    (VIR_DOMAIN_BLOCKED, None, STATUS_PROVISIONING),
    (VIR_DOMAIN_NOSTATE, None, STATUS_PROVISIONING),
    (VIR_DOMAIN_NOSTATE, "10.0.0.1", STATUS_PROVISIONING),
    (VIR_DOMAIN_PAUSED, "10.0.0.1", STATUS_STOPPED),
    (VIR_DOMAIN_SHUTDOWN, "10.0.0.1", STATUS_STOPPED),
    (VIR_DOMAIN_SHUTOFF, None, STATUS_STOPPED),
    (VIR_DOMAIN_CRASHED, None, STATUS_STOPPED),
    (VIR_DOMAIN_PMSUSPENDED, None, STATUS_STOPPED),
    (42, "10.0.0.1", STATUS_STOPPED),
])
def test_map_state(state, ip, expected):
    assert map_state(state, ip) == expected


def test_is_active():
    assert [state for state in range(9) if is_active(state)] == [VIR_DOMAIN_RUNNING, VIR_DOMAIN_BLOCKED]


def test_libvirt_state_names():
    assert [libvirt_state_name(state) for state in range(8)] == [
        "nostate", "running", "blocked", "paused", "shutdown", "shutoff", "crashed", "pmsuspended"]
    assert libvirt_state_name(9) == "unknown(9)"


def iface(hwaddr, *addrs):
    return {"hwaddr": hwaddr, "addrs": [{"type": kind, "addr": addr, "prefix": 24} for kind, addr in addrs]}


V4, V6 = VIR_IP_ADDR_TYPE_IPV4, IP_ADDR_TYPE_IPV6


def test_agent_shape_skips_lo_and_unroutable():
    interfaces = {
        "lo": iface("00:00:00:00:00:00", (V4, "127.0.0.1"), (V6, "::1")),
        "eth0": iface("52:54:00:00:00:01", (V6, "fe80::1"), (V4, "169.254.3.4"), (V4, "0.0.0.0"), (V4, "198.18.0.150")),
        "eth1": iface("52:54:00:00:00:02", (V4, "10.0.0.5")),
    }
    assert first_routable_ipv4(interfaces) == "198.18.0.150"


def test_libvirt_order_is_kept():
    interfaces = {"vnet9": iface("52:54:00:00:00:09", (V4, "10.9.9.9")), "vnet1": iface("52:54:00:00:00:01", (V4, "10.1.1.1"))}
    assert first_routable_ipv4(interfaces) == "10.9.9.9"


def test_hwaddr_selects_the_interface():
    interfaces = {
        "docker0": iface("02:42:ac:11:00:01", (V4, "172.17.0.1")),
        "eth0": iface("52:54:00:AA:00:01", (V4, "198.18.0.101")),
    }
    assert first_routable_ipv4(interfaces, hwaddr="52:54:00:aa:00:01") == "198.18.0.101"
    assert first_routable_ipv4(interfaces, hwaddr="52:54:00:ff:ff:ff") is None


def test_loopback_address_on_another_interface_is_skipped():
    assert first_routable_ipv4({"eth0": iface("m", (V4, "127.0.0.53"))}) is None


@pytest.mark.parametrize("interfaces", [
    None,
    {},
    {"eth0": None},
    {"eth0": {"hwaddr": "m", "addrs": None}},
    {"eth0": iface("m", (V6, "2001:db8::1"))},
    {"eth0": iface("m", (V4, "not-an-ip"), (V4, "10.0.0.256"), (V4, None))},
    {"eth0": {"hwaddr": "m", "addrs": [{"type": V4, "addr": 167772161, "prefix": 8}]}},
])
def test_no_routable_ipv4(interfaces):
    assert first_routable_ipv4(interfaces) is None


@given(st.lists(st.ip_addresses(v=4).map(str), max_size=5))
def test_result_is_always_one_of_the_routable_addresses(addresses):
    interfaces = {"eth0": iface("m", *[(V4, a) for a in addresses])}
    result = first_routable_ipv4(interfaces)
    routable = [a for a in addresses if not (a.startswith(("127.", "169.254.")) or a == "0.0.0.0")]
    assert result == (routable[0] if routable else None)
