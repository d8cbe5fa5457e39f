# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""How a libvirt domain state and the guest's addresses map onto the collection's VM states."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

# virDomainState (libvirt-domain.h), stable ABI; spelled out so nothing here imports libvirt.
VIR_DOMAIN_NOSTATE = 0
VIR_DOMAIN_RUNNING = 1
VIR_DOMAIN_BLOCKED = 2
VIR_DOMAIN_PAUSED = 3
VIR_DOMAIN_SHUTDOWN = 4
VIR_DOMAIN_SHUTOFF = 5
VIR_DOMAIN_CRASHED = 6
VIR_DOMAIN_PMSUSPENDED = 7

# virIPAddrType, the ``type`` of each address virDomain.interfaceAddresses() reports.
VIR_IP_ADDR_TYPE_IPV4 = 0
VIR_IP_ADDR_TYPE_IPV6 = 1

# A VM's state as results report it (the reference's words, capitalised); a task asks for
# _common.states.STATE_PRESENT/STATE_ABSENT or _proxy.request.STATE_STOPPED.
STATUS_RUNNING = "Running"
STATUS_PROVISIONING = "Provisioning"
STATUS_STOPPED = "Stopped"

_LIBVIRT_STATE_NAMES = {
    VIR_DOMAIN_NOSTATE: "nostate",
    VIR_DOMAIN_RUNNING: "running",
    VIR_DOMAIN_BLOCKED: "blocked",
    VIR_DOMAIN_PAUSED: "paused",
    VIR_DOMAIN_SHUTDOWN: "shutdown",
    VIR_DOMAIN_SHUTOFF: "shutoff",
    VIR_DOMAIN_CRASHED: "crashed",
    VIR_DOMAIN_PMSUSPENDED: "pmsuspended",
}


def libvirt_state_name(state):
    """libvirt's name for a virDomainState value (as virsh shows it, without spaces); ``unknown(<n>)`` otherwise."""
    return _LIBVIRT_STATE_NAMES.get(state, "unknown(%s)" % (state,))


def is_active(state):
    """True when the guest is executing; blocked (waiting on the hypervisor) still counts as up."""
    return state in (VIR_DOMAIN_RUNNING, VIR_DOMAIN_BLOCKED)


def map_state(state, ipv4):
    """Collapse a libvirt state plus the guest's routable address (its IPv4, or its IPv6 when its NIC is IPv6-only; or
    None) into Running, Provisioning or Stopped.

    An active guest without an address is Provisioning: a VM must never be
    reported Running before it can be reached. nostate is Provisioning too:
    callers answer Stopped with a restart or rebuild, too drastic for a
    state libvirt could not determine; the next poll decides. Everything
    else (paused, shutdown, shutoff, crashed, pmsuspended, unknown) is Stopped.
    """
    if state == VIR_DOMAIN_NOSTATE:
        return STATUS_PROVISIONING
    if not is_active(state):
        return STATUS_STOPPED
    return STATUS_RUNNING if ipv4 else STATUS_PROVISIONING


def _routable(text, version):
    """Whether ``text`` is an address of IP ``version`` that can reach the guest from outside it: not loopback,
    link-local or unspecified (nor, an IPv6 one, multicast)."""
    if not isinstance(text, str):
        return False
    try:
        address = ipaddress.IPv4Address(text) if version == 4 else ipaddress.IPv6Address(text)
    except ipaddress.AddressValueError:
        return False
    return not (address.is_loopback or address.is_link_local or address.is_unspecified
                or (version == 6 and address.is_multicast))


def first_routable_ipv4(interfaces, hwaddr=None, preferred=None):
    """The first routable IPv4 in the result of virDomain.interfaceAddresses(), or None.

    ``interfaces`` maps interface name to ``{'hwaddr': ..., 'addrs': [{'type',
    'addr', 'prefix'}]}``. Interfaces are taken in libvirt's order (the
    guest's or the ARP table's), skipping ``lo``; loopback, link-local and
    unspecified addresses are skipped because the guest agent reports those
    too. With ``hwaddr`` only the interface with that MAC counts, so a
    container bridge inside the guest cannot win. ``preferred`` (the NIC's
    static address, normalised text) wins where the NIC has it: a NIC may carry
    more addresses (a profile's egress addresses), which the guest may list first.
    """
    return _first_routable(interfaces, hwaddr, VIR_IP_ADDR_TYPE_IPV4, 4, preferred)


def first_routable_ipv6(interfaces, hwaddr=None, preferred=None):
    """first_routable_ipv4 for IPv6: the first global or unique local IPv6 (never the link-local one every NIC has)."""
    return _first_routable(interfaces, hwaddr, VIR_IP_ADDR_TYPE_IPV6, 6, preferred)


def _first_routable(interfaces, hwaddr, address_type, version, preferred):
    wanted = hwaddr.lower() if hwaddr else None
    first = None
    for ifname, interface in (interfaces or {}).items():
        if ifname == "lo" or not interface:
            continue
        if wanted is not None and (interface.get("hwaddr") or "").lower() != wanted:
            continue
        for address in interface.get("addrs") or ():
            if address.get("type") == address_type and _routable(address.get("addr"), version):
                # Normalised: the agent reports what the guest wrote, which a result compares with the spec's.
                found = str(ipaddress.ip_address(address["addr"]))
                if found == preferred:
                    return found
                first = first or found
    return first
