# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A proxy's NICs: the ``interfaces`` list (or the single bridge/network/mac options), their roles, and the egress one.

The first interface is the VM's boot and default NIC. A role is a name the
user gives (``inside`` for the clients' side, ``outside`` towards the
destinations); the egress interface, whose address destinations see, is the
one named ``outside``, or the first when none is.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from dataclasses import dataclass
from typing import Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._domain_xml import normalize_mac
from ansible_collections.egress_proxies.kvm.plugins.module_utils._errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._names import validate_bridge_name, validate_network_name

ROLE_INSIDE = "inside"
ROLE_OUTSIDE = "outside"
EGRESS_ROLE = ROLE_OUTSIDE
SINGLE_NIC_OPTIONS = ("bridge", "network", "mac")
INTERFACE_OPTIONS = ("bridge", "network", "mac", "role")

_ROLE = re.compile(r"[a-z][a-z0-9_-]{0,31}")


@dataclass(frozen=True)
class Interface:
    """One NIC as asked for: on a host bridge or a libvirt network, with an optional fixed MAC and role."""

    bridge: Optional[str] = None
    network: Optional[str] = None
    mac: Optional[str] = None
    role: Optional[str] = None

    @property
    def source(self):
        """How messages name where the NIC sits: ``bridge br0`` or ``network default``."""
        return "bridge %s" % self.bridge if self.bridge is not None else "network %s" % self.network

    def as_spec(self):
        return {"bridge": self.bridge, "network": self.network, "mac": self.mac, "role": self.role}


def interfaces_from_params(params):
    """The NICs a task asks for, as a tuple of Interface: its ``interfaces`` list, or one from bridge/network/mac.

    ``params`` holds the options as given (None: not given). An empty tuple
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
    interfaces = tuple(_interface("interfaces[%d]" % index, entry) for index, entry in enumerate(entries))
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
    except ValidationError as error:
        raise ValidationError("%s: %s" % (label, error.message)) from error
    return Interface(**given)


def _require_distinct(interfaces):
    for what in ("mac", "role"):
        seen = {}
        for index, interface in enumerate(interfaces):
            value = getattr(interface, what)
            if value is None:
                continue
            if value in seen:
                raise ValidationError("interfaces[%d] and interfaces[%d] have the same %s %r: each NIC needs its "
                                      "own" % (seen[value], index, what, value))
            seen[value] = index


def egress_index(roles):
    """The index of the egress NIC among ``roles`` (each NIC's role or None, in device order): ``outside``, else 0."""
    roles = list(roles)
    return roles.index(EGRESS_ROLE) if EGRESS_ROLE in roles else 0


def interfaces_spec(interfaces):
    """The spec's entry for the NIC list, or None for one NIC without a role.

    None keeps the spec, and so the digest, of a single-NIC VM exactly what
    it was before the list existed: upgrading never counts such a VM as drifted.
    """
    if len(interfaces) == 1 and interfaces[0].role is None:
        return None
    return [interface.as_spec() for interface in interfaces]


def recorded_roles(spec, count):
    """Each NIC's role as a recorded spec (a dict or None) gives it, for ``count`` NICs in device order."""
    recorded = (spec or {}).get("interfaces")
    roles = [entry.get("role") if isinstance(entry, dict) else None
             for entry in (recorded if isinstance(recorded, list) else [])]
    return (roles + [None] * count)[:count]


def describe_interfaces(nics, roles, lookups):
    """The result's ``interfaces``: each NIC (_domain_xml.NicInfo) with its role, its IPv4 and whether it is the egress one.

    ``lookups`` maps a MAC to its _addresses.AddressLookup (absent: not asked, the domain is not running).
    """
    egress = egress_index(roles)
    described = []
    for index, (nic, role) in enumerate(zip(nics, roles)):
        lookup = lookups.get(nic.mac)
        described.append({
            "mac": nic.mac, "bridge": nic.bridge, "network": nic.network, "role": role,
            "ipv4": lookup.ip if lookup is not None else None, "egress": index == egress,
        })
    return described
