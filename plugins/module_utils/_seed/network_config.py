# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""cloud-init network-config (version 2) for NICs with static addresses, each matched by its MAC.

Matching by MAC keeps the configuration independent of the names the guest
gives its NICs; ``set-name`` then names each one (nic0, nic1... in device
order), so renderers that configure by name (ifupdown's, on Debian) find it.
Once a network-config exists cloud-init configures only what it lists, so
every NIC is listed: the static ones with their addresses (IPv4, IPv6 or
both), gateways and DNS, the others with DHCP (IPv4). A static NIC asks for
no lease: one with an IPv6 address alone is IPv6-only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def static_network_config(interfaces):
    """The network-config dictionary for ``interfaces`` (_proxy.interfaces.Interface), or None when none is static."""
    if not any(interface.static for interface in interfaces):
        return None
    ethernets = {}
    for index, interface in enumerate(interfaces):
        name = "nic%d" % index
        ethernet = {"match": {"macaddress": interface.mac}, "set-name": name}
        if not interface.static:
            ethernet["dhcp4"] = True
        else:
            ethernet["addresses"] = [address for address in (interface.address, interface.address6) if address is not None]
            for key, gateway in (("gateway4", interface.gateway), ("gateway6", interface.gateway6)):
                if gateway is not None:
                    ethernet[key] = gateway
            if interface.nameservers or interface.search:
                ethernet["nameservers"] = {"addresses": list(interface.nameservers), "search": list(interface.search)}
        ethernets[name] = ethernet
    return {"version": 2, "ethernets": ethernets}
