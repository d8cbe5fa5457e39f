# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The network-config of static NICs (IPv4, IPv6, dual-stack) as the lab guest image's own cloud-init renders it for
ifupdown: each NIC named by its MAC, its addresses, gateways and DNS servers where ifupdown reads them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

import pytest

from ansible_collections.egress_proxies.kvm.tests.unit.guest_cloud_init import extract_guest_packages, net_convert
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import request

ENI = "etc/network/interfaces.d/50-cloud-init"
UDEV = "etc/udev/rules.d/70-persistent-net.rules"
INSIDE_MAC = "52:54:00:00:16:01"
OUTSIDE_MAC = "52:54:00:00:16:02"


@pytest.fixture(scope="module")
def guest_packages(tmp_path_factory):
    return extract_guest_packages(str(tmp_path_factory.mktemp("guest")))


def rendered(guest_packages, tmp_path, *interfaces):
    network_config = request(bridge=None, interfaces=list(interfaces)).seed_files()["network-config"]
    return net_convert(guest_packages, network_config, str(tmp_path))


def stanzas(eni):
    """ifupdown's stanzas: {(interface, family, method): [option lines]}."""
    found, current = {}, None
    for line in eni.splitlines():
        head = re.fullmatch(r"iface (\S+) (inet6?) (\S+)", line)
        if head:
            current = found.setdefault(head.groups(), [])
        elif line.startswith("    ") and current is not None:
            current.append(line.strip())
        elif not line.startswith("    "):
            current = None
    return found


def test_a_dual_stack_inside_and_an_ipv6_only_outside(guest_packages, tmp_path):
    written = rendered(
        guest_packages, tmp_path,
        dict(bridge="br0", mac=INSIDE_MAC, role="inside", address="198.18.11.50/24", address6="2001:db8:11::50/64",
             nameservers=["2001:db8:11::53", "198.18.11.53"]),
        dict(bridge="br1", mac=OUTSIDE_MAC, role="outside", address6="2001:db8:21::50/64", gateway6="2001:db8:21::1"))
    assert written[UDEV].splitlines() == [
        'SUBSYSTEM=="net", ACTION=="add", DRIVERS=="?*", ATTR{address}=="%s", NAME="nic%d"' % (mac, index)
        for index, mac in enumerate((INSIDE_MAC, OUTSIDE_MAC))]
    found = stanzas(written[ENI])
    assert set(found) == {("lo", "inet", "loopback"), ("nic0", "inet", "static"), ("nic0", "inet6", "static"),
                          ("nic1", "inet6", "static")}
    assert "address 198.18.11.50/24" in found["nic0", "inet", "static"]
    assert "dns-nameservers 2001:db8:11::53 198.18.11.53" in found["nic0", "inet", "static"]
    assert found["nic0", "inet6", "static"] == ["address 2001:db8:11::50/64"]
    # IPv6-only: no DHCP, no IPv4 at all; the default route is the outside IPv6 gateway.
    assert found["nic1", "inet6", "static"] == ["address 2001:db8:21::50/64", "gateway 2001:db8:21::1"]
    assert "auto nic1" in written[ENI].splitlines()


def test_a_dual_stack_outside_with_both_gateways_beside_a_dhcp_nic(guest_packages, tmp_path):
    found = stanzas(rendered(
        guest_packages, tmp_path, dict(bridge="br0", mac=INSIDE_MAC),
        dict(bridge="br1", mac=OUTSIDE_MAC, role="outside", address="198.18.21.50/24", gateway="198.18.21.1",
             address6="2001:db8:21::50/64", gateway6="fe80::1"))[ENI])
    assert found["nic0", "inet", "dhcp"] == []
    assert found["nic1", "inet", "static"] == ["address 198.18.21.50/24", "gateway 198.18.21.1"]
    assert found["nic1", "inet6", "static"] == ["address 2001:db8:21::50/64", "gateway fe80::1"]
