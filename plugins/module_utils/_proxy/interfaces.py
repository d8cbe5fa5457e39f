# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A proxy's NICs: the ``interfaces`` list (or the single bridge/network/mac options), their roles, and the egress one.

The first interface is the VM's boot and default NIC. A role is a name the
user gives (``inside`` for the clients' side, ``outside`` towards the
destinations); the egress interface, whose address destinations see, is the
one named ``outside``, or the first when none is. A NIC with ``address``
(IPv4) or ``address6`` (IPv6) or both is configured statically
(_network_config renders it for cloud-init); the others use DHCP. A NIC with
``address6`` alone is IPv6-only: it asks for no IPv4 lease.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import re
from dataclasses import dataclass, replace
from typing import Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import is_dns_name, validate_bridge_name, validate_network_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import (
    ip_address,
    ipv4_address,
    ipv4_interface,
    ipv6_address,
    ipv6_interface,
    normalize_mac,
    quoted,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.addresses import IPV4, Wanted

ROLE_INSIDE = "inside"
ROLE_OUTSIDE = "outside"
EGRESS_ROLE = ROLE_OUTSIDE
SINGLE_NIC_OPTIONS = ("bridge", "network", "mac")
STATIC_OPTIONS = ("address", "address6", "gateway", "gateway6", "nameservers", "search")
ADDRESS_OPTIONS = ("address", "address6")
INTERFACE_OPTIONS = ("bridge", "network", "mac", "role") + STATIC_OPTIONS
LIST_OPTIONS = ("nameservers", "search")

_ROLE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# QEMU's prefix: a MAC derived here is locally administered and never a real vendor's.
_DERIVED_MAC_PREFIX = "52:54:00"


@dataclass(frozen=True)
class Interface:
    """One NIC as asked for: on a host bridge or a libvirt network, with an optional fixed MAC and role."""

    bridge: Optional[str] = None
    network: Optional[str] = None
    mac: Optional[str] = None
    role: Optional[str] = None
    address: Optional[str] = None  # IPv4 with prefix, 198.18.11.50/24; None (and no address6): DHCP
    gateway: Optional[str] = None
    nameservers: tuple = ()
    search: tuple = ()
    address6: Optional[str] = None  # IPv6 with prefix, 2001:db8:11::50/64
    gateway6: Optional[str] = None

    @property
    def static(self):
        """Whether the NIC is configured statically (an IPv4 or an IPv6 address given), not by DHCP."""
        return self.address is not None or self.address6 is not None

    @property
    def ip(self):
        """The static IPv4 without its prefix, or None."""
        return None if self.address is None else self.address.partition("/")[0]

    @property
    def ip6(self):
        """The static IPv6 without its prefix, or None."""
        return None if self.address6 is None else self.address6.partition("/")[0]

    @property
    def wanted(self):
        """The addresses the guest's NIC is looked up for (_addresses.Wanted): IPv4 unless IPv6-only, IPv6 if static."""
        return _wanted(self.address, self.address6)

    @property
    def source(self):
        """How messages name where the NIC sits: ``bridge br0`` or ``network default``."""
        return "bridge %s" % self.bridge if self.bridge is not None else "network %s" % self.network

    def as_spec(self):
        spec = {"bridge": self.bridge, "network": self.network, "mac": self.mac, "role": self.role}
        if self.static:
            spec.update(address=self.address, gateway=self.gateway, nameservers=list(self.nameservers),
                        search=list(self.search))
        # Only when given: the spec, and so the digest, of a NIC without IPv6 stays what it was before address6.
        if self.address6 is not None:
            spec.update(address6=self.address6, gateway6=self.gateway6)
        return spec


def interfaces_from_params(params):
    """The NICs a task asks for, as a tuple of Interface: its ``interfaces`` list, or one from bridge/network/mac.

    ``params`` holds the options as given (None: not given), the VM's name
    among them (static NICs without a MAC get one derived from it). An empty tuple
    means no NIC was given at all (fine for state=absent). Raises
    ValidationError naming the option or the list entry at fault.
    """
    entries = params.get("interfaces")
    single = [option for option in SINGLE_NIC_OPTIONS if params.get(option) is not None]
    if entries is None:
        if params.get("bridge") is not None and params.get("network") is not None:
            raise ValidationError("bridge and network are mutually exclusive: one NIC sits on a host bridge or on a "
                                  "libvirt network (several NICs: interfaces)")
        if params.get("bridge") is None and params.get("network") is None:
            return ()
        return (_interface("bridge/network/mac", {option: params.get(option) for option in SINGLE_NIC_OPTIONS}),)

    if single:
        raise ValidationError(
            "interfaces and %s are mutually exclusive: give the first NIC as interfaces[0] instead" % ", ".join(single))
    if not isinstance(entries, (list, tuple)) or not entries:
        raise ValidationError("interfaces must be a non-empty list of NICs (each with bridge or network)")
    given = [_interface("interfaces[%d]" % index, entry) for index, entry in enumerate(entries)]
    interfaces = with_derived_macs(params.get("name"), given)
    _require_distinct(interfaces)
    return interfaces


def _interface(label, entry):
    if not isinstance(entry, dict):
        raise ValidationError("%s must be a dictionary with bridge or network, got %r" % (label, entry))
    unknown = sorted(set(entry) - set(INTERFACE_OPTIONS))
    if unknown:
        raise ValidationError("%s: unknown option %s; an interface takes %s" % (
            label, ", ".join(unknown), ", ".join(INTERFACE_OPTIONS)))
    given = {key: value for key, value in entry.items() if value is not None}
    if ("bridge" in given) == ("network" in given):
        raise ValidationError("%s needs exactly one of bridge (a host bridge such as br0) or network (a libvirt "
                              "network)" % label)
    try:
        if "bridge" in given:
            validate_bridge_name(given["bridge"])
        else:
            validate_network_name(given["network"])
        if "mac" in given:
            given["mac"] = normalize_mac(given["mac"])
        if "role" in given and (not isinstance(given["role"], str) or not _ROLE.fullmatch(given["role"])):
            raise ValidationError("role %r is not a valid role name, e.g. %s or %s" % (
                given["role"], ROLE_INSIDE, ROLE_OUTSIDE))
        _validate_static(given)
    except ValidationError as error:
        raise ValidationError("%s: %s" % (label, error.message)) from error
    return Interface(**given)


def _validate_static(given):
    """Check and normalise address, address6, gateway, gateway6, nameservers and search in ``given`` (an interface's
    options)."""
    for option in LIST_OPTIONS:
        if option in given:
            if not isinstance(given[option], (list, tuple)) or not all(isinstance(item, str) for item in given[option]):
                raise ValidationError("%s must be a list of strings, got %r" % (option, given[option]))
            given[option] = tuple(given[option])
    for address, gateway in (("address", "gateway"), ("address6", "gateway6")):
        if given.get(gateway) and address not in given:
            raise ValidationError("%s needs %s: a gateway lies inside the prefix of the NIC's own address" % (
                gateway, address))
    static = [option for option in ("nameservers", "search") if given.get(option)]
    if not any(option in given for option in ADDRESS_OPTIONS):
        if static:
            raise ValidationError("%s needs address or address6: without one the NIC uses DHCP, which gives them"
                                  % ", ".join(static))
        return
    if "address" in given:
        _validate_ipv4(given)
    if "address6" in given:
        _validate_ipv6(given)
    servers = []
    for server in given.get("nameservers", ()):
        parsed = ip_address(server)
        if parsed is None:
            # A scope id (fe80::1%eth0) is refused too: its text after '%' reaches resolv.conf and ifupdown as is.
            raise ValidationError("nameservers: %s is not an IP address (without a %%scope)" % quoted(server))
        servers.append(str(parsed))
    if "nameservers" in given:
        given["nameservers"] = tuple(servers)
    for domain in given.get("search", ()):
        if not is_dns_name(domain):
            raise ValidationError("search: %s is not a domain name" % quoted(domain))


def _validate_ipv4(given):
    interface = ipv4_interface(given["address"])
    if interface is None:
        raise ValidationError("address %s is not an IPv4 address with its prefix length, e.g. 198.18.11.50/24" % (
            quoted(given["address"]),))
    network = interface.network
    if network.prefixlen < 31 and interface.ip in (network.network_address, network.broadcast_address):
        raise ValidationError("address %s is the %s address of %s; give a host address" % (
            interface, "network" if interface.ip == network.network_address else "broadcast", network))
    given["address"] = str(interface)
    if "gateway" in given:
        gateway = ipv4_address(given["gateway"])
        if gateway is None:
            raise ValidationError("gateway %s is not an IPv4 address" % quoted(given["gateway"]))
        if gateway not in network or gateway == interface.ip:
            raise ValidationError("gateway %s is %s; it must be another address inside %s" % (
                gateway, "the NIC's own address" if gateway == interface.ip else "outside the prefix", network))
        given["gateway"] = str(gateway)


def _validate_ipv6(given):
    # The text is checked before it is parsed (ipv6_interface): ipaddress takes a scope id of any characters
    # (2001:db8::5%eth0\n...), which would reach the network-config and the spec as given.
    interface = ipv6_interface(given["address6"])
    if interface is None:
        raise ValidationError("address6 %s is not an IPv6 address with its prefix length (no %%scope), e.g. "
                              "2001:db8:11::50/64" % quoted(given["address6"]))
    network, ip = interface.network, interface.ip
    if ip.is_link_local or ip.is_multicast or ip.is_loopback or ip.is_unspecified or ip.ipv4_mapped is not None:
        raise ValidationError("address6 %s is %s address; give a global or unique local one, e.g. "
                              "2001:db8:11::50/64" % (interface, _ipv6_kind(ip)))
    if network.prefixlen < 127 and ip == network.network_address:
        raise ValidationError("address6 %s is the subnet-router anycast address of %s; give a host address" % (
            interface, network))
    given["address6"] = str(interface)
    if "gateway6" in given:
        gateway = ipv6_address(given["gateway6"])
        if gateway is None:
            raise ValidationError("gateway6 %s is not an IPv6 address (without a %%scope)" % quoted(given["gateway6"]))
        # A router's link-local address (fe80::1) is the usual IPv6 gateway; the NIC it is reached on is this one.
        if gateway == ip or not (gateway in network or gateway.is_link_local):
            raise ValidationError("gateway6 %s is %s; it must be another address inside %s, or a link-local one "
                                  "(fe80::1)" % (gateway, "the NIC's own address" if gateway == ip
                                                 else "outside the prefix", network))
        given["gateway6"] = str(gateway)


def _ipv6_kind(ip):
    """What kind of address, not for a NIC, ``ip`` is: ``a link-local``..."""
    for kind in ("link_local", "multicast", "loopback", "unspecified"):
        if getattr(ip, "is_" + kind):
            return "a " + kind.replace("_", "-")
    return "an IPv4-mapped"


def _require_distinct(interfaces):
    for what, option in (("mac", "mac"), ("role", "role"), ("ip", "address"), ("ip6", "address6")):
        seen = {}
        for index, interface in enumerate(interfaces):
            value = getattr(interface, what)
            if value is None:
                continue
            if value in seen:
                raise ValidationError("interfaces[%d] and interfaces[%d] have the same %s %r: each NIC needs its "
                                      "own" % (seen[value], index, option, value))
            seen[value] = index


def with_derived_macs(name, interfaces):
    """``interfaces`` with a MAC for every static NIC that has none, derived from the VM's name and the NIC's index.

    cloud-init matches a static configuration by MAC, and the seed is written
    before libvirt would pick one; derived from the name, the MAC (and with it
    the spec) stays the same on every run.
    """
    derived = []
    for index, interface in enumerate(interfaces):
        if interface.static and interface.mac is None:
            digest = hashlib.sha256(("%s/%d" % (name, index)).encode("utf-8")).hexdigest()
            mac = "%s:%s:%s:%s" % (_DERIVED_MAC_PREFIX, digest[0:2], digest[2:4], digest[4:6])
            interface = replace(interface, mac=mac)
        derived.append(interface)
    return tuple(derived)


def egress_index(roles):
    """The index of the egress NIC among ``roles`` (each NIC's role or None, in device order): ``outside``, else 0."""
    roles = list(roles)
    return roles.index(EGRESS_ROLE) if EGRESS_ROLE in roles else 0


def interfaces_spec(interfaces):
    """The spec's entry for the NIC list, or None for one NIC without a role.

    None keeps the spec, and so the digest, of a single-NIC VM exactly what
    it was before the list existed: upgrading never counts such a VM as drifted.
    """
    if len(interfaces) == 1 and interfaces[0].role is None and not interfaces[0].static:
        return None
    return [interface.as_spec() for interface in interfaces]


def recorded_roles(spec, count):
    """Each NIC's role as a recorded spec (a dict or None) gives it, for ``count`` NICs in device order."""
    recorded = (spec or {}).get("interfaces")
    roles = [entry.get("role") if isinstance(entry, dict) else None
             for entry in (recorded if isinstance(recorded, list) else [])]
    return (roles + [None] * count)[:count]


def _wanted(address, address6):
    static4, static6 = ipv4_interface(address), ipv6_interface(address6)
    return Wanted(ipv4=bool(address) or not address6, ipv6=bool(address6),
                  static4=str(static4.ip) if static4 else None, static6=str(static6.ip) if static6 else None)


def recorded_wanted(spec, count):
    """The addresses each NIC is looked up for (_addresses.Wanted), as a recorded spec (a dict or None) gives its static
    addresses, for ``count`` NICs in device order: IPv4 alone for a NIC the spec gives no IPv6."""
    recorded = (spec or {}).get("interfaces")
    wanted = [_wanted(entry.get("address"), entry.get("address6")) if isinstance(entry, dict) else IPV4
              for entry in (recorded if isinstance(recorded, list) else [])]
    return (wanted + [IPV4] * count)[:count]


def describe_interfaces(nics, roles, lookups):
    """The result's ``interfaces``: each NIC (_domain_xml.NicInfo) with its role, its IPv4 and IPv6 and whether it is
    the egress one.

    ``lookups`` maps a MAC to its _addresses.AddressLookup (absent: not asked, the domain is not running). A NIC's
    IPv6 is None unless it has a static one (the only IPv6 looked up).
    """
    egress = egress_index(roles)
    described = []
    for index, (nic, role) in enumerate(zip(nics, roles)):
        lookup = lookups.get(nic.mac)
        described.append({
            "mac": nic.mac, "bridge": nic.bridge, "network": nic.network, "role": role,
            "ipv4": lookup.ip if lookup is not None else None, "ipv6": lookup.ipv6 if lookup is not None else None,
            "egress": index == egress,
        })
    return described


def recorded_egress_address(spec, field="address"):
    """The static address (``field``: ``address``, IPv4, or ``address6``) the egress NIC was created with, without its
    prefix, as a recorded spec (a dict or None) gives it; None for a NIC without one. The metadata is the domain's,
    which anyone with libvirt access can edit: the address is read as text and parsed, and anything else reads as none."""
    recorded = (spec or {}).get("interfaces")
    if not isinstance(recorded, list) or not recorded:
        return None
    nic = recorded[egress_index(entry.get("role") if isinstance(entry, dict) else None for entry in recorded)]
    address = nic.get(field) if isinstance(nic, dict) else None
    if not isinstance(address, str):
        return None
    # With its prefix length as recorded (198.18.21.5/24), the length checked too: "198.18.21.5/24/8" reads as none.
    if "/" in address:
        interface = (ipv6_interface if field == "address6" else ipv4_interface)(address)
        parsed = interface.ip if interface is not None else None
    else:
        parsed = ip_address(address)
    return None if parsed is None or parsed.version != (6 if field == "address6" else 4) else str(parsed)


def egress_address(described, family="ipv4"):
    """The egress NIC's address of ``family`` (``ipv4`` or ``ipv6``) among ``described`` (describe_interfaces' list);
    for ``ipv4``, its IPv6 when it has no IPv4 (an IPv6-only NIC); None when it has none (yet)."""
    nic = next((nic for nic in described if nic["egress"]), None)
    if nic is None:
        return None
    return nic[family] or (nic["ipv6"] if family == "ipv4" else None)
