# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The HA group a proxy is a member of (``policy.group``), and whether its guest holds the group's address.

The egress_proxy role puts two or more proxies behind one client address
(keepalived in the guests); each member's policy names its group. Being part
of the policy, the group is covered by its digest (a change is applied in
place) and recorded in the domain's metadata beside it (``haGroup``, as
canonical JSON), so kvm_proxy_info and the inventory plugin tell each
proxy's group without asking the guest.

Whether a member holds the address is the guest agent's word
(virDomainInterfaceAddresses from the agent): a guest's own text, so it is
read bounded, each address checked as text before it is parsed, and never
used as anything but a value to compare.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import re
from dataclasses import dataclass
from typing import Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.recorded import RecordedAsJson
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import ipv4_address, ipv6_address, quoted

# As the egress_proxy role's egress_proxy_ha_groups names a group: keepalived's instance name and a file_sd label.
GROUP_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,14}")
# An address as text before ipaddress reads it: ASCII digits (no other script's), dots, hex and colons; no blank, no
# line feed, no %scope (ipaddress takes one of any characters), no /prefix.
_ADDRESS_TEXT = {4: re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}"), 6: re.compile(r"[0-9A-Fa-f:.]{2,45}")}
_PARSE = {4: ipv4_address, 6: ipv6_address}
# What of a guest agent's answer is read: a guest has a few NICs of a few addresses; a longer answer is cut here.
MAX_GUEST_INTERFACES = 64
MAX_GUEST_ADDRESSES = 64
_KEYS = ("name", "address", "address6")


def address_text(value, version):
    """``value`` as an address of IP ``version`` when it is written as one (ASCII, no scope, no prefix), else None."""
    if not isinstance(value, str) or not _ADDRESS_TEXT[version].fullmatch(value):
        return None
    return _PARSE[version](value)


def _client_address(label, value, version):
    found = address_text(value, version)
    if found is None:
        raise ValidationError("%s %s is not an IPv%d address (ASCII digits%s, no prefix length, no %%scope, no blank "
                              "or control character)" % (label, quoted(value), version, "" if version == 4 else " and hex"))
    if found.is_unspecified or found.is_loopback or found.is_multicast or found.is_link_local:
        raise ValidationError("%s %s is not an address clients reach a group on (unspecified, loopback, multicast or "
                              "link-local)" % (label, found))
    return str(found)


@dataclass(frozen=True)
class HaGroup(RecordedAsJson):
    """An HA group as a member's policy names it: its name, its client IPv4 and (or None) IPv6, normalised, without
    prefix length."""

    name: str
    address: str
    address6: Optional[str] = None

    @classmethod
    def from_params(cls, params, label="policy.group"):
        """``params`` (the option's dict, or None: no group) checked; ValidationError names the option at fault."""
        if params is None:
            return None
        if not isinstance(params, dict):
            raise ValidationError("%s must be a dictionary with name, address and optionally address6" % label)
        unknown = sorted(str(key) for key in params if key not in _KEYS)
        if unknown:
            raise ValidationError("%s has unknown keys %s (known: %s)" % (
                label, ", ".join(quoted(key) for key in unknown), ", ".join(_KEYS)))
        name = params.get("name")
        if not isinstance(name, str) or not GROUP_NAME.fullmatch(name):
            raise ValidationError("%s.name %s is not 1-15 lowercase letters, digits and -, starting with a letter or "
                                  "digit" % (label, quoted(name)))
        address6 = params.get("address6")
        return cls(name, _client_address(label + ".address", params.get("address"), 4),
                   None if address6 is None else _client_address(label + ".address6", address6, 6))

    def as_dict(self):
        return {"name": self.name, "address": self.address, "address6": self.address6}

    def held_in(self, interfaces):
        """Whether ``interfaces`` (the guest agent's virDomainInterfaceAddresses answer) puts the group's address
        (or its address6) on one of the guest's NICs: True or False; None when the answer is not of that shape.

        The answer is read bounded (MAX_GUEST_INTERFACES NICs, MAX_GUEST_ADDRESSES each) and every address checked as
        text before it is parsed; the loopback device does not count.
        """
        if not isinstance(interfaces, dict):
            return None
        wanted = {(4, self.address)} | ({(6, self.address6)} if self.address6 else set())
        for ifname, interface in itertools.islice(interfaces.items(), MAX_GUEST_INTERFACES):
            if ifname == "lo" or not isinstance(interface, dict) or not isinstance(interface.get("addrs"), list):
                continue
            for entry in itertools.islice(interface["addrs"], MAX_GUEST_ADDRESSES):
                text = entry.get("addr") if isinstance(entry, dict) else None
                for version in (4, 6):
                    found = address_text(text, version)
                    if found is not None and (version, str(found)) in wanted:
                        return True
        return False
