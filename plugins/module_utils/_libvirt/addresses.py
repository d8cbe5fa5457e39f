# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The guest's addresses, from the host's ARP table first and the guest agent second, and the one wait for them.

A NIC's IPv4 is looked for, and its IPv6 where it has a static one (an
IPv6-only NIC: its IPv6 alone, which is then its address). The ARP table
knows IPv4 only; the agent knows both.

Both sources fail routinely while a guest boots: the ARP table has no entry
until the guest has sent traffic, and the agent is not connected until
qemu-guest-agent runs. Those answers mean "no IP yet", not "the lookup
failed", and are kept per source so a user waiting for an address can see
why there is none. Any other libvirt error (the domain vanished, the
connection died) propagates: it is not something a retry of the address
lookup alone would fix, and hiding it would report a healthy-looking
"no IP" for a broken hypervisor.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket
from collections import OrderedDict, namedtuple
from dataclasses import dataclass, replace
from typing import Any, Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import (
    VIR_ERR_AGENT_UNRESPONSIVE,
    VIR_ERR_AGENT_UNSYNCED,
    VIR_ERR_ARGUMENT_UNSUPPORTED,
    VIR_ERR_INTERNAL_ERROR,
    VIR_ERR_NO_SUPPORT,
    VIR_ERR_OPERATION_INVALID,
    KvmError,
    NotFoundError,
    PermanentError,
    TransientError,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.timing import polls
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import (
    ADDRESS_SOURCE_AGENT,
    ADDRESS_SOURCE_ARP,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import (
    VIR_DOMAIN_NOSTATE,
    first_routable_ipv4,
    first_routable_ipv6,
    is_active,
    libvirt_state_name,
)

SOURCE_ARP = "arp"
SOURCE_AGENT = "agent"

NO_ADDRESS_YET = "no address yet"
NO_ROUTABLE_ADDRESS_YET = "no routable %s yet"
DOMAIN_NOT_RUNNING = "domain not running"

AddressLookup = namedtuple("AddressLookup", ["ip", "sources", "ipv6"], defaults=(None,))
AddressLookup.__doc__ = """The outcome of domain_ipv4 (nic_addresses: one per NIC).

``ip`` is the first routable IPv4 found, or None; ``ipv6`` the first
routable IPv6, looked for only where it was wanted (None otherwise).
``sources`` maps each source asked, in the order asked (``arp``, then
``agent``), to what it said: the addresses themselves, or why it gave none.
A source that was not asked (ARP already answered, or the domain is not
running) is absent.
"""


@dataclass(frozen=True)
class Wanted:
    """Which addresses of a NIC a lookup looks for: its IPv4 (every NIC but an IPv6-only one), its IPv6 (a NIC with a
    static one)."""

    ipv4: bool = True
    ipv6: bool = False
    # The NIC's static addresses (normalised, without prefix length), which a lookup takes over other addresses of the
    # NIC; None for a NIC configured by DHCP or a domain without a recorded spec.
    static4: Optional[str] = None
    static6: Optional[str] = None

    @property
    def ipv6_only(self):
        return self.ipv6 and not self.ipv4

    def address(self, lookup):
        """The NIC's address in ``lookup`` (an AddressLookup): its IPv4, or its IPv6 when it is IPv6-only; or None."""
        return lookup.ipv6 if self.ipv6_only else lookup.ip

    @property
    def family(self):
        """The family of ``address`` as messages name it."""
        return "IPv6" if self.ipv6_only else "IPv4"


IPV4 = Wanted()

# Codes that mean "this source has no address for us (yet)", with the words
# the user sees. Only the unsupported codes carry libvirt's message too:
# they cover several situations (an old libvirt without the ARP source, a
# domain defined without a guest agent channel) that only the message tells apart.
_NO_ADDRESS_CODES = {
    VIR_ERR_AGENT_UNRESPONSIVE: ("guest agent not responding", "VIR_ERR_AGENT_UNRESPONSIVE", False),
    VIR_ERR_AGENT_UNSYNCED: ("guest agent not in sync yet", "VIR_ERR_AGENT_UNSYNCED", False),
    VIR_ERR_OPERATION_INVALID: (DOMAIN_NOT_RUNNING, None, False),
    VIR_ERR_NO_SUPPORT: ("not supported", "VIR_ERR_NO_SUPPORT", True),
    VIR_ERR_ARGUMENT_UNSUPPORTED: ("not available", "VIR_ERR_ARGUMENT_UNSUPPORTED", True),
}

# The ARP source reads the hypervisor's neighbour table over netlink, and libvirt
# 9.0 fails that read with VIR_ERR_INTERNAL_ERROR "wrong nlmsg len" for every
# domain on newer kernels (measured on 6.18; Debian 12's 6.1 reads it fine).
# That says nothing about the guest, and the agent can still answer, so from the
# ARP source this code is "no address", with libvirt's words.
_NO_ARP_ADDRESS_CODES = dict(_NO_ADDRESS_CODES)
_NO_ARP_ADDRESS_CODES[VIR_ERR_INTERNAL_ERROR] = ("host ARP table unreadable", "VIR_ERR_INTERNAL_ERROR", True)
# The agent's own error reply (a command disabled, or a compromised guest's answer) reaches us as libvirt's
# VIR_ERR_INTERNAL_ERROR: it is the guest's word, so "no address" from that guest, never a failure of the whole
# set, and its text (the guest's) is not repeated.
_NO_AGENT_ADDRESS_CODES = dict(_NO_ADDRESS_CODES)
_NO_AGENT_ADDRESS_CODES[VIR_ERR_INTERNAL_ERROR] = ("guest agent answered an error", "VIR_ERR_INTERNAL_ERROR", False)


def _describe(error, no_address_codes):
    words, code_name, with_message = no_address_codes[error.code]
    if code_name is None:
        return words
    if with_message and error.libvirt_message:
        return "%s (%s: %s)" % (words, code_name, error.libvirt_message)
    return "%s (%s)" % (words, code_name)


def ask_agent(hypervisor, dom):
    """The guest agent's answer, as nic_addresses' ``answered`` takes it: (interfaces, None), or (None, why) when it
    has no address for us."""
    return _ask(hypervisor, dom, ADDRESS_SOURCE_AGENT, _NO_AGENT_ADDRESS_CODES)


def _ask(hypervisor, dom, source, no_address_codes):
    """(interfaces, None) from one source, or (None, why) when it has no address for us."""
    try:
        return hypervisor.domain_addresses(dom, source), None
    except KvmError as error:
        if error.code not in no_address_codes:
            raise
        return None, _describe(error, no_address_codes)


def domain_ipv4(hypervisor, dom, mac=None):
    """Look up the first routable IPv4 of a domain: ARP first, then the guest agent.

    ``mac`` restricts the search to the NIC with that MAC address, so an
    address of another interface inside the guest (a container bridge, a
    VPN) is never taken for the proxy's. Costs one libvirt call when ARP
    knows the address or the domain is not running, two otherwise.
    Returns an AddressLookup; raises the typed error of any libvirt failure
    that is not one of the "no address from this source" answers.
    """
    return nic_addresses(hypervisor, dom, (mac,))[mac]


def nic_addresses(hypervisor, dom, macs, wanted=None, answered=None):
    """domain_ipv4 for several NICs at once, and their IPv6 where wanted: {mac: AddressLookup}, each source asked once
    for all of them.

    ``wanted`` maps a MAC to its Wanted (absent: IPv4 alone). A source is asked
    only while some NIC still lacks an address it wants (``None`` in ``macs``
    stands for any NIC), so one IPv4 NIC costs what domain_ipv4 always did.
    ``answered`` is the agent's answer when the caller asked it already
    (ask_agent's): it is used instead of asking again.
    """
    wanted = wanted or {}
    lookups = OrderedDict((mac, AddressLookup(ip=None, sources=OrderedDict())) for mac in macs)

    def missing(mac):
        want, lookup = wanted.get(mac, IPV4), lookups[mac]
        return [family for family, asked, found in (("IPv4", want.ipv4, lookup.ip), ("IPv6", want.ipv6, lookup.ipv6))
                if asked and found is None]

    for name, source, no_address_codes in ((SOURCE_ARP, ADDRESS_SOURCE_ARP, _NO_ARP_ADDRESS_CODES),
                                           (SOURCE_AGENT, ADDRESS_SOURCE_AGENT, _NO_AGENT_ADDRESS_CODES)):
        # libvirt's ARP source reads the IPv4 neighbours only: it is asked for the NICs still without their IPv4.
        families_asked = ("IPv4",) if source == ADDRESS_SOURCE_ARP else ("IPv4", "IPv6")
        pending = {mac: [family for family in missing(mac) if family in families_asked] for mac in lookups}
        pending = {mac: families for mac, families in pending.items() if families}
        if not pending:
            continue
        if source == ADDRESS_SOURCE_AGENT and answered is not None:
            interfaces, why = answered
        else:
            interfaces, why = _ask(hypervisor, dom, source, no_address_codes)
        for mac, families in pending.items():
            lookup = lookups[mac]
            want = wanted.get(mac, IPV4)
            found = {} if why is not None else {
                family: first(interfaces, hwaddr=mac, preferred=static)
                for family, first, static in (("IPv4", first_routable_ipv4, want.static4),
                                              ("IPv6", first_routable_ipv6, want.static6)) if family in families}
            said = why or ", ".join(address for address in found.values() if address) or (
                NO_ROUTABLE_ADDRESS_YET % " or ".join(families) if interfaces else NO_ADDRESS_YET)
            lookup.sources[name] = said
            lookups[mac] = AddressLookup(ip=found.get("IPv4") or lookup.ip, sources=lookup.sources,
                                         ipv6=found.get("IPv6") or lookup.ipv6)
        if why == DOMAIN_NOT_RUNNING:
            # Neither source answers for a domain that is not running
            # (the agent needs it running, ARP needs it active).
            break
    return lookups


# How often a wait asks libvirt again (address, shutdown): each ask is one or two cheap calls, and a wait
# ends at most this long after what it waits for.
POLL_INTERVAL = 1


@dataclass(frozen=True)
class Awaited:
    """A started proxy whose address is awaited: its name, its domain, its first NIC's MAC and where that NIC is,
    its deadline (wait_timeout), and the address awaited there (its IPv4; its IPv6 when the NIC is IPv6-only)."""

    name: str
    dom: Any
    mac: Optional[str]
    attached: str  # the first NIC's bridge or network as a message says it ("bridge br0")
    deadline: Any  # a _common.timing.Deadline, which earlier waits on the proxy may have started
    wanted: Wanted = IPV4


class _FirstPendingDeadline:
    """An address wait's deadline: passed once a proxy still without its address is past its own."""

    def __init__(self, pending):
        self.pending = pending

    def start(self):
        for one in self.pending.values():
            one.deadline.start()

    def passed(self):
        return any(one.deadline.passed() for one in self.pending.values())


def await_ipv4(hypervisor, awaited, timing, port=None):
    """Poll every Awaited together until each runs with a routable address (its IPv4, or its IPv6 when its first NIC
    is IPv6-only), answering on ``port`` if given.

    The one wait of kvm_proxy and kvm_proxy_set. A domain that stops (crashed, destroyed, powered off by its
    guest) or vanishes fails the wait at once, naming it and its state: no address comes from it any more.
    Once a proxy still without one is past its deadline, the wait fails naming every proxy still without one, with
    what each address source said. ``timing`` gives ``sleep`` (a _common.timing.Timing).
    """
    pending = OrderedDict((one.name, one) for one in awaited)
    said = {}  # name -> (libvirt state, its last AddressLookup or None, the address that did not answer on port)
    for _attempt in polls(_FirstPendingDeadline(pending), timing.sleep, POLL_INTERVAL):
        stopped = []
        for name, one in list(pending.items()):
            try:
                state = hypervisor.domain_state(one.dom)
            except NotFoundError as error:
                raise PermanentError("proxy '%s': its domain was undefined while its address was awaited" % name,
                                     error.code, error.libvirt_message) from error
            previous = said.get(name, (None, None, None))[1]
            if not (is_active(state) or state == VIR_DOMAIN_NOSTATE):
                said[name] = (state, previous, None)
                stopped.append(name)
                continue
            # nostate: libvirt could not tell; neither source answers for it, the next poll decides.
            # Only the address awaited is asked for: a dual-stack NIC's IPv4 from ARP ends its wait without the agent.
            primary = replace(one.wanted, ipv4=not one.wanted.ipv6_only, ipv6=one.wanted.ipv6_only)
            lookup = (nic_addresses(hypervisor, one.dom, (one.mac,), {one.mac: primary})[one.mac] if is_active(state)
                      else previous)
            address = primary.address(lookup) if lookup is not None else None
            silent = None
            if address is not None:
                if port is None or _answers(address, port):
                    del pending[name]
                    continue
                silent = address
            said[name] = (state, lookup, silent)
        if stopped:
            raise PermanentError(
                "%s stopped while %s address was awaited: %s. The console (virsh console <name>) or the QEMU log on "
                "the hypervisor tells why" % (", ".join(stopped), "its" if len(stopped) == 1 else "their",
                                              "; ".join(_what_was_said(name, pending[name], said[name], port)
                                                        for name in stopped)))
        if not pending:
            return
    families = {one.wanted.family for one in pending.values()}
    raise TransientError(
        "%s got no routable %s%s within wait_timeout (%d s): %s. A guest may still be booting (raise wait_timeout), or "
        "its first NIC gets no address where it is attached" % (
            ", ".join(pending), families.pop() if len(families) == 1 else "address",
            " answering on port %d" % port if port else "", next(iter(pending.values())).deadline.seconds,
            "; ".join(_what_was_said(name, one, said[name], port) for name, one in pending.items())))


def _what_was_said(name, one, said, port):
    """``name`` (state shutoff, bridge br0; arp: no address yet, agent: ...): one proxy's part of a wait's message."""
    state, lookup, silent = said
    if silent is not None:
        answers = "%s does not answer on port %d" % (silent, port)
    elif lookup is not None:
        answers = ", ".join("%s: %s" % item for item in lookup.sources.items())
    else:
        answers = "no address source asked (the domain was not running)"
    return "%s (state %s, %s; %s)" % (name, libvirt_state_name(state), one.attached, answers)


def _answers(ip, port):
    try:
        socket.create_connection((ip, port), timeout=POLL_INTERVAL).close()
    except OSError:
        return False
    return True
