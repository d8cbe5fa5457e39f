# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Egress address pools: parsed, checked and allocated once for the whole fleet, on the controller.

A pool (``egress_proxy_outside.pool``) is a list of single addresses, ranges (``203.0.113.10-203.0.113.40``) and
prefixes (``203.0.113.64/26``, ``2001:db8:0:7::/64``), IPv4 or IPv6. Every proxy of the play without an
``outside.address`` of its own gets one address from its hypervisor's pool:

- stable: a proxy whose domain records an egress address of the pool keeps it (a replacement records the same);
- unique: every address recorded on a domain of any hypervisor of the play is held, and each address is given once,
  in one pass over the whole play, so hypervisors converging at once never get the same one;
- freed: an address is free again once no domain records it (its proxy removed by ``state: absent`` or garbage
  collection, in an earlier run: until its domain is gone it stays held, so the old and the new owner never both
  have it);
- deterministic: new addresses go to the proxies in the order of the play's hypervisors, then of their names, each
  the lowest free address of its pool (inside the outside NIC's prefix when it has one).

A profile whose ``egress_address`` (``egress_address6``) is ``pool`` gets one more address of its proxy's pool, inside
the segment of the proxy's outside address of that family, by the same rules: a domain records its profiles' pooled
addresses (``pooled_addresses``) as it records its own, so a profile keeps its address, and every address a domain
records for a profile is held until that domain records it no longer (gone, or its policy applied without it). The
profiles are served after the proxies, in the same order, then in the order of their list.

Ranges and prefixes are counted and walked, never listed: one address per proxy from a /64 costs what it costs from
a /24. Every refusal names the variable (``egress_proxy_outside.pool[3] of lab-hv1``,
``egress_proxy_instances[2].outside.address``) before anything is touched. Standard library only, no Ansible: the
unit tests run on any Python the collection supports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
from dataclasses import dataclass
from typing import Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.pooled_addresses import EGRESS_FIELDS, PooledAddresses
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import (
    ascii_decimal,
    ip_address,
    ip_network,
    ipv4_interface,
    ipv6_interface,
    quoted,
)

POOL_VARIABLE = "egress_proxy_outside.pool"
# By address family: the outside NIC's address option a pool address becomes, and the option of its segment.
ADDRESS_FIELDS = {4: "address", 6: "address6"}
PREFIX_KEYS = {4: "prefix", 6: "prefix6"}
PREFIX_VARIABLES = {version: "egress_proxy_outside." + key for version, key in PREFIX_KEYS.items()}
PREFIX_EXAMPLES = {4: "203.0.113.0/24", 6: "2001:db8:0:7::/64"}
STATE_ABSENT = "absent"
# A profile's egress_address (egress_address6) that asks for one more address of its proxy's pool.
POOLED = "pool"
# How an outside address is read by family: with its prefix length, which gives the egress NIC's segment.
_INTERFACES = {4: ipv4_interface, 6: ipv6_interface}


class PoolError(Exception):
    """A pool, a prefix or an address the allocation refuses, as the sentence the role fails with."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class PoolEntry:
    """One entry of a pool: the addresses ``first`` to ``last`` (inclusive) it gives, and where it is written."""

    label: str  # egress_proxy_outside.pool[3] of lab-hv1
    text: str
    first: object  # IPv4Address or IPv6Address
    last: object
    prefix_length: Optional[int]  # a prefix entry's own length, given to its addresses when the NIC has no prefix

    @property
    def version(self):
        return self.first.version

    @property
    def size(self):
        return int(self.last) - int(self.first) + 1

    def overlaps(self, other):
        return self.version == other.version and self.first <= other.last and other.first <= self.last


def _entry(label, text):
    """The PoolEntry ``text`` writes: an address, ``first-last`` or a prefix; PoolError naming ``label`` otherwise."""
    if not isinstance(text, str):
        raise PoolError("%s: %s is not text: give an address, a range first-last or a prefix such as 203.0.113.0/26"
                        % (label, quoted(text)))
    # ip_address and ip_network take plain ASCII address characters only: no blank, control character or %scope.
    first_text, dash, last_text = text.partition("-")
    if dash:
        first, last = ip_address(first_text), ip_address(last_text)
        if first is None or last is None or first.version != last.version:
            raise PoolError("%s: %s is not a range of two IPv4 or two IPv6 addresses, first-last (no blanks, no "
                            "%%scope)" % (label, quoted(text)))
        if last < first:
            raise PoolError("%s: the range %s runs backwards; write it lowest first: %s-%s" % (
                label, quoted(text), last, first))
        return PoolEntry(label, text, first, last, None)
    if "/" in text:
        network = ip_network(text)
        if network is None:
            host_bits = _network_with_host_bits(text)
            raise PoolError("%s: %s is not a prefix%s" % (
                label, quoted(text), " (host bits set: did you mean %s?)" % host_bits if host_bits else
                ": write an IPv4 or IPv6 network such as 203.0.113.0/26 (no blanks, no %scope)"))
        first, last = host_addresses(network)
        return PoolEntry(label, text, first, last, network.prefixlen)
    address = ip_address(text)
    if address is None:
        raise PoolError("%s: %s is not an IPv4 or IPv6 address, a range first-last or a prefix (no blanks, no "
                        "%%scope)" % (label, quoted(text)))
    return PoolEntry(label, text, address, address, None)


def host_addresses(network):
    """The first and the last address of ``network`` (an ip network) a host may have."""
    first, last = network.network_address, network.broadcast_address
    if network.version == 4 and network.prefixlen < 31:
        # An IPv4 host cannot use its network's network and broadcast addresses (RFC 3021 takes /31 whole).
        return first + 1, last - 1
    if network.version == 6 and network.prefixlen < 127:
        # The subnet-router anycast address (RFC 4291 2.6.1) belongs to the routers; /127 is taken whole (RFC 6164).
        return first + 1, last
    return first, last


def _network_with_host_bits(text):
    """The network ``text`` means when only its host bits are wrong (203.0.113.5/24 -> 203.0.113.0/24), else None."""
    address, _slash, length = text.partition("/")
    if ip_address(address) is None or ascii_decimal(length) is None:
        return None
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def parse_pool(entries, owner):
    """The PoolEntry tuple of a pool given as ``entries`` (a list of text), sorted by address; ``owner`` names whose
    pool it is in messages (``lab-hv1``). PoolError names the entry at fault, and both entries that overlap."""
    if not isinstance(entries, (list, tuple)) or not entries:
        raise PoolError("%s of %s must be a non-empty list of addresses, ranges first-last and prefixes, got %s"
                        % (POOL_VARIABLE, owner, quoted(entries)))
    parsed = [_entry("%s[%d] of %s" % (POOL_VARIABLE, index, owner), text) for index, text in enumerate(entries)]
    ordered = sorted(parsed, key=lambda entry: (entry.version, entry.first))
    for before, after in zip(ordered, ordered[1:]):
        if before.overlaps(after):
            raise PoolError("%s (%s) and %s (%s) overlap; give each address of the pool once" % (
                before.label, before.text, after.label, after.text))
    return tuple(ordered)


def parse_prefix(text, owner, version):
    """The outside NIC's segment of one family (``egress_proxy_outside.prefix``, IPv4, or ``.prefix6``, IPv6) as an
    ip network, or None when not given."""
    if text is None or text == "":
        return None
    network = ip_network(text)
    if network is None or network.version != version:
        raise PoolError("%s of %s: %s is not an IPv%d network such as %s (no host bits, no blanks, no %%scope)" % (
            PREFIX_VARIABLES[version], owner, quoted(text), version, PREFIX_EXAMPLES[version]))
    return network


@dataclass(frozen=True)
class ProfileWant:
    """A profile's egress address of one family to give from its proxy's pool (``egress_address: pool``)."""

    proxy: str
    profile: str
    field: str  # egress_address (IPv4) or egress_address6 (IPv6)
    version: int
    label: str  # egress_proxy_instances[0].profiles[1] (backup).egress_address


@dataclass(frozen=True)
class Hypervisor:
    """One hypervisor of the play as the allocation sees it."""

    name: str
    pool: tuple  # PoolEntry, sorted; () without a pool
    prefixes: dict  # {4: IPv4Network or None, 6: IPv6Network or None}, the outside NIC's segments
    wanted: tuple  # (proxy name, family) of each address to give from the pool, in name order
    given: tuple  # (address text, variable, proxy name) of every hand-given outside address of a kept proxy
    recorded: tuple  # (domain name, recorded egress address text) of every address a listed domain records
    profiles_wanted: tuple = ()  # ProfileWant, by proxy name, then in the order of the profiles
    # (domain name, profile, field, address text) of every address a listed domain records for a profile
    recorded_profiles: tuple = ()

    def candidates(self, version):
        """The pool's entries of one family clipped to the NIC's segment: (first, last, prefix length) it may give."""
        prefix = self.prefixes[version]
        clipped = []
        for entry in self.pool:
            if entry.version != version:
                continue
            first, last = entry.first, entry.last
            if prefix is not None:
                first = max(first, prefix.network_address)
                last = min(last, prefix.broadcast_address)
                if first > last:
                    continue
            clipped.append((first, last, prefix.prefixlen if prefix is not None else entry.prefix_length))
        return clipped


def _where(source, index):
    return "%s[%d]" % (source, index)


def _hypervisor(name, outside, default_state, entries, recorded, profiles=None, recorded_profiles=()):
    """Hypervisor from one hypervisor's variables: ``outside`` its egress_proxy_outside, ``entries`` (variable, entry)
    of its instances, ``recorded`` [(domain name, recorded egress address)] of its listing; ``profiles`` its
    egress_proxy_profiles, the profiles of an entry that gives none, ``recorded_profiles`` [(domain name, profile,
    field, address)] of its listing."""
    outside = outside or {}
    pool_text = outside.get("pool")
    pool = parse_pool(pool_text, name) if pool_text not in (None, []) else ()
    prefixes = {version: parse_prefix(outside.get(key), name, version) for version, key in PREFIX_KEYS.items()}
    bare = [entry for entry in pool if entry.prefix_length is None and prefixes[entry.version] is None]
    if bare:
        raise PoolError("%s: %s gives its addresses no prefix length; give %s of %s (the outside segment, such as %s), "
                        "or write the pool as prefixes" % (bare[0].label, bare[0].text, PREFIX_VARIABLES[bare[0].version],
                                                           name, PREFIX_EXAMPLES[bare[0].version]))
    families = {entry.version for entry in pool}
    for version in sorted(families):
        hypervisor = Hypervisor(name, pool, prefixes, (), (), ())
        if not hypervisor.candidates(version):
            raise PoolError("%s of %s has no IPv%d address inside %s %s: the outside NIC could use none of them"
                            % (POOL_VARIABLE, name, version, PREFIX_VARIABLES[version], prefixes[version]))
    wanted, given, profiles_wanted = [], [], []
    for variable, entry in entries:
        if not isinstance(entry, dict):
            continue  # the role's argument spec refuses it, naming it
        state = entry.get("state") or default_state
        own = entry.get("outside") if isinstance(entry.get("outside"), dict) else {}
        if state == STATE_ABSENT:
            continue
        for version, field in ADDRESS_FIELDS.items():
            if own.get(field):
                given.append((own[field], "%s.outside.%s" % (variable, field), entry.get("name")))
            elif version in families:
                wanted.append((entry.get("name"), version))
        if "profiles" in entry:
            profiles_wanted += _profiles_wanted(name, entry.get("name"), variable + ".profiles", entry["profiles"], families)
        else:
            profiles_wanted += _profiles_wanted(name, entry.get("name"), "egress_proxy_profiles", profiles, families)
    return Hypervisor(name, pool, prefixes, tuple(sorted(wanted, key=lambda item: (str(item[0]), item[1]))),
                      tuple(given), tuple(recorded),
                      tuple(sorted(profiles_wanted, key=lambda want: str(want.proxy))), tuple(recorded_profiles))


def _profiles_wanted(hypervisor, proxy, variable, profiles, families):
    """The ProfileWant of each profile of ``profiles`` (the proxy's list, named ``variable`` in messages) whose
    egress_address or egress_address6 is ``pool``; PoolError when the pool has no address of that family. A profile
    that is not a mapping with a name of text is the profiles' own check's to refuse, naming it."""
    found = []
    for index, profile in enumerate(profiles if isinstance(profiles, list) else []):
        if not isinstance(profile, dict) or not isinstance(profile.get("name"), str) or not isinstance(proxy, str):
            continue
        for field, version in EGRESS_FIELDS:
            if profile.get(field) != POOLED:
                continue
            label = "%s[%d] (%s).%s" % (variable, index, profile["name"], field)
            if version not in families:
                raise PoolError("%s of %s on %s is %s, but %s of %s has no IPv%d address: add IPv%d addresses to the "
                                "pool, or give the profile an address of its own" % (
                                    label, proxy, hypervisor, POOLED, POOL_VARIABLE, hypervisor, version, version))
            found.append(ProfileWant(proxy, profile["name"], field, version, label))
    return found


def _check_pools(hypervisors):
    """Two hypervisors' pools are the same list (one pool, shared) or have no address in common."""
    pooled = [hypervisor for hypervisor in hypervisors if hypervisor.pool]
    for index, one in enumerate(pooled):
        for other in pooled[index + 1:]:
            if _same_pool(one.pool, other.pool):
                continue
            for mine in one.pool:
                clash = next((theirs for theirs in other.pool if mine.overlaps(theirs)), None)
                if clash is not None:
                    raise PoolError("%s (%s) and %s (%s) overlap, and the two pools differ: give hypervisors that "
                                    "share addresses the same pool, or pools with no address in common"
                                    % (mine.label, mine.text, clash.label, clash.text))


def _same_pool(one, other):
    return [(entry.first, entry.last, entry.prefix_length) for entry in one] == \
        [(entry.first, entry.last, entry.prefix_length) for entry in other]


def _containing(hypervisors, address):
    """The first pool entry of any hypervisor holding ``address``, or None."""
    for hypervisor in hypervisors:
        for entry in hypervisor.pool:
            if entry.version == address.version and entry.first <= address <= entry.last:
                return entry
    return None


def _check_given(hypervisors):
    """A hand-given outside address is no pool's, and lies inside its hypervisor's outside segment of its family."""
    for hypervisor in hypervisors:
        for text, variable, proxy in hypervisor.given:
            address = _address_of(text)
            if address is None:
                continue  # not an address with its prefix: kvm_proxy_set's own check names it
            entry = _containing(hypervisors, address)
            if entry is not None:
                raise PoolError("%s of %s on %s: %s is in %s (%s); the pool gives its addresses itself, so take it out "
                                "of the pool or leave the proxy's own address out" % (
                                    variable, _json(proxy), hypervisor.name, address, entry.label, entry.text))
            prefix = hypervisor.prefixes[address.version]
            if prefix is not None and address not in prefix:
                raise PoolError("%s of %s on %s: %s is outside %s %s, the outside NIC's segment" % (
                    variable, _json(proxy), hypervisor.name, address, PREFIX_VARIABLES[address.version], prefix))


def _address_of(text):
    """The address of ``text``: an address, or one with its prefix length (198.18.21.5/24); None otherwise."""
    if not isinstance(text, str):
        return None
    return ip_address(text.partition("/")[0]) if text.count("/") <= 1 else None


def _json(value):
    return json.dumps(value)


def _usable(hypervisor, address):
    """The prefix length ``address`` gets on ``hypervisor`` when its pool may give it there, else None."""
    for first, last, length in hypervisor.candidates(address.version):
        if first <= address <= last:
            return length
    return None


def _free_addresses(hypervisor, version, taken, within=None):
    """The addresses of one family of the hypervisor's candidates not in ``taken`` (a set, read as each is asked for),
    lowest first, each with its prefix length; with ``within`` (an ip network), only its host addresses. Walked once,
    never listed: a run's cost is its proxies and the addresses already taken, not the size of the pool (a /64 costs
    what a /24 does)."""
    lowest, highest = host_addresses(within) if within is not None else (None, None)
    for first, last, length in hypervisor.candidates(version):
        if within is not None:
            first, last = max(first, lowest), min(last, highest)
            if first > last:
                continue
        address = first
        while True:
            if address not in taken:
                yield address, length
            if address == last:
                break
            address += 1


# How many proxies a message names before it only counts the rest.
NAMED = 10


def _some(names):
    """``names`` for a message: the first NAMED, then how many more."""
    shown = ", ".join(str(name) for name in names[:NAMED])
    return shown if len(names) <= NAMED else "%s and %d more" % (shown, len(names) - NAMED)


def allocate(hypervisors):
    """{hypervisor name: {proxy name: {"address": IPv4/length, "address6": IPv6/length, "profiles": {profile:
    {"egress_address": IPv4, "egress_address6": IPv6}}}}} for every address a proxy of ``hypervisors`` (Hypervisor, in
    the play's order) takes from its pool (one of each family the pool has, and one for each of its profiles that asks
    for one), after the checks; PoolError when a pool is too small, naming how many addresses are missing, or when a
    pool, a hand-given address or a profile's ``pool`` is refused."""
    _check_pools(hypervisors)
    _check_given(hypervisors)
    taken = set()  # every address recorded on a domain, given by hand, or handed out in this run
    for hypervisor in hypervisors:
        for text in [recorded for _domain, recorded in hypervisor.recorded] + [given[0] for given in hypervisor.given] \
                + [recorded[3] for recorded in hypervisor.recorded_profiles]:
            address = _address_of(text)
            if address is not None:
                taken.add(address)
    allocation = {hypervisor.name: {} for hypervisor in hypervisors}

    def give(hypervisor, proxy, address, length):
        allocation[hypervisor.name].setdefault(proxy, {})[ADDRESS_FIELDS[address.version]] = "%s/%d" % (address, length)

    # Kept first, for every hypervisor: a recorded address is its proxy's before any new proxy is served.
    kept = set()
    for hypervisor in hypervisors:
        records = {}
        for domain, recorded in hypervisor.recorded:
            records.setdefault(domain, []).append(recorded)
        for proxy, version in hypervisor.wanted:
            for recorded in records.get(proxy, []):
                address = _address_of(recorded)
                length = _usable(hypervisor, address) if address is not None and address.version == version else None
                if length is not None and address not in kept:
                    kept.add(address)
                    give(hypervisor, proxy, address, length)
                    break
    missing = []
    for hypervisor in hypervisors:
        for version in sorted({version for _proxy, version in hypervisor.wanted}):
            field = ADDRESS_FIELDS[version]
            waiting = [proxy for proxy, family in hypervisor.wanted
                       if family == version and field not in allocation[hypervisor.name].get(proxy, {})]
            free = _free_addresses(hypervisor, version, taken)
            for position, proxy in enumerate(waiting):
                found = next(free, None)
                if found is None:
                    missing.append((hypervisor, version, waiting[position:], position))
                    break
                taken.add(found[0])
                give(hypervisor, proxy, *found)
    if missing:
        total = sum(len(left) for _hypervisor_, _version, left, _served in missing)
        shortages = ["%s of %s%s has %d free IPv%d address%s for %d new proxies: %d missing (none for %s)" % (
            POOL_VARIABLE, hypervisor.name,
            " inside %s" % hypervisor.prefixes[version] if hypervisor.prefixes[version] is not None else "",
            served, version, "" if served == 1 else "es", served + len(left), len(left), _some(left))
            for hypervisor, version, left, served in missing]
        raise PoolError("The egress address pools are too small, %d address%s missing: %s. Add addresses to the pool, "
                        "or give fewer proxies an address from it; nothing was changed."
                        % (total, "" if total == 1 else "es", "; ".join(shortages)))
    _allocate_profiles(hypervisors, allocation, taken, kept)
    return allocation


def _segment(hypervisor, allocation, proxy, version):
    """The egress NIC's segment of one family (an ip network) of ``proxy``: its hand-given outside address's, else the
    one the pool gave it; None when it has neither."""
    parse = _INTERFACES[version]
    for text, _variable, owner in hypervisor.given:
        interface = parse(text) if owner == proxy and isinstance(text, str) else None
        if interface is not None:
            return interface.network
    pooled = allocation[hypervisor.name].get(proxy, {}).get(ADDRESS_FIELDS[version])
    return parse(pooled).network if pooled is not None else None


def _allocate_profiles(hypervisors, allocation, taken, kept):
    """Give each ProfileWant of ``hypervisors`` an address inside its proxy's egress segment, in ``allocation`` (the
    proxies' addresses given): the one its domain records for the profile when the pool still holds it, else the lowest
    free one; ``taken`` and ``kept`` as allocate leaves them. PoolError when a proxy has no segment of the family, or a
    pool has too few free addresses in a segment, naming how many are missing."""
    segments = {}
    for hypervisor in hypervisors:
        records = {(domain, profile, field): text for domain, profile, field, text in hypervisor.recorded_profiles}
        for want in hypervisor.profiles_wanted:
            segment = _segment(hypervisor, allocation, want.proxy, want.version)
            if segment is None:
                raise PoolError("%s of %s on %s is %s, but the outside NIC has no IPv%d address with its prefix length "
                                "(outside.%s, or one from %s) whose segment the address joins" % (
                                    want.label, want.proxy, hypervisor.name, POOLED, want.version,
                                    ADDRESS_FIELDS[want.version], POOL_VARIABLE))
            segments[want] = segment
            address = ip_address(records.get((want.proxy, want.profile, want.field)))
            lowest, highest = host_addresses(segment)
            if address is not None and address.version == want.version and lowest <= address <= highest \
                    and _usable(hypervisor, address) is not None and address not in kept:
                kept.add(address)
                _give_profile(allocation, hypervisor, want, address)
    shortages = {}  # (hypervisor, segment): [served, labels missing]
    free = {}
    for hypervisor in hypervisors:
        for want in hypervisor.profiles_wanted:
            if want.field in allocation[hypervisor.name].get(want.proxy, {}).get("profiles", {}).get(want.profile, {}):
                continue
            key = (hypervisor.name, segments[want])
            if key not in free:
                free[key] = _free_addresses(hypervisor, want.version, taken, segments[want])
            shortage = shortages.setdefault(key, [0, []])
            found = next(free[key], None)
            if found is None:
                shortage[1].append("%s of %s" % (want.label, want.proxy))
                continue
            taken.add(found[0])
            shortage[0] += 1
            _give_profile(allocation, hypervisor, want, found[0])
    short = [(key, served, left) for key, (served, left) in shortages.items() if left]
    if short:
        total = sum(len(left) for _key, _served, left in short)
        raise PoolError("The egress address pools are too small for the profiles that ask for an address of them, %d "
                        "address%s missing: %s. Add addresses to the pool, or give fewer profiles an address from it; "
                        "nothing was changed." % (total, "" if total == 1 else "es", "; ".join(
                            "%s of %s has %d free address%s in %s, the egress NIC's segment, for %d profiles: %d missing "
                            "(none for %s)" % (POOL_VARIABLE, name, served, "" if served == 1 else "es", segment,
                                               served + len(left), len(left), _some(left))
                            for (name, segment), served, left in short)))


def _give_profile(allocation, hypervisor, want, address):
    profiles = allocation[hypervisor.name].setdefault(want.proxy, {}).setdefault("profiles", {})
    profiles.setdefault(want.profile, {})[want.field] = str(address)


def fleet_allocation(hypervisors, fleet=None, unlisted=()):
    """The allocation of the play (allocate) from each hypervisor's variables and listing.

    ``hypervisors``: in the play's order, each a dict with ``name`` (the inventory host), ``outside``
    (egress_proxy_outside), ``state`` (egress_proxy_state), ``instances`` (egress_proxy_instances), ``profiles``
    (egress_proxy_profiles) and ``proxies`` (kvm_proxy_info's listing of the hypervisor: each domain's ``name``, its
    recorded ``egress_address`` and ``egress_address6``, and its profiles' ``pooled_addresses``).
    ``fleet``: egress_proxy_fleet, whose entries run on the hypervisor they name. ``unlisted``: (name, pool) of the
    inventory's other hypervisors with a pool, whose domains were not listed (not in the play, --limit, or their
    listing failed): the addresses they hold are unknown, so a pool that shares an address with theirs is refused.
    """
    fleet = fleet or []
    built = []
    for given in hypervisors:
        name = given["name"]
        entries = [(_where("egress_proxy_instances", index), entry)
                   for index, entry in enumerate(given.get("instances") or [])]
        entries += [(_where("egress_proxy_fleet", index), entry) for index, entry in enumerate(fleet)
                    if isinstance(entry, dict) and entry.get("hypervisor") == name]
        listed = [proxy for proxy in given.get("proxies") or [] if isinstance(proxy, dict)]
        recorded = [(proxy.get("name"), proxy.get(key)) for proxy in listed
                    for key in ("egress_address", "egress_address6") if proxy.get(key)]
        built.append(_hypervisor(name, given.get("outside"), given.get("state"), entries, recorded, given.get("profiles"),
                                 _recorded_profiles(listed)))
    _check_unlisted(built, unlisted)
    return allocate(built)


def _recorded_profiles(listed):
    """(domain name, profile, field, address) of every address the ``listed`` domains (kvm_proxy_info's entries)
    record for a profile; a record that is not what the collection writes holds none."""
    found = []
    for proxy in listed:
        try:
            pooled = PooledAddresses.from_params(proxy.get("pooled_addresses"))
        except ValidationError:
            continue
        for profile, fields in pooled.entries if pooled is not None else ():
            found += [(proxy.get("name"), profile, field, address) for field, address in fields]
    return found


def _check_unlisted(hypervisors, unlisted):
    for name, pool_text in unlisted:
        try:
            pool = parse_pool(pool_text, name)
        except PoolError:
            continue  # that hypervisor's own run refuses it
        for hypervisor in hypervisors:
            if not any(mine.overlaps(theirs) for mine in hypervisor.pool for theirs in pool):
                continue
            raise PoolError("%s of %s shares addresses with %s of %s, whose proxies were not listed in this run (not "
                            "in the play: --limit, a sliced AWX job or a play on other hosts; or its listing failed), "
                            "so the addresses they hold are unknown: run the hypervisors that share a pool together, "
                            "without --limit or job slicing, or give each hypervisor a pool of its own. Nothing was "
                            "changed." % (
                                POOL_VARIABLE, hypervisor.name, POOL_VARIABLE, name))


# The group every host is in: sharing it says nothing about which hosts a play of hypervisors targets.
ALL_HOSTS = "all"


@dataclass(frozen=True)
class PlayPool:
    """A hypervisor of the play with a pool: its inventory groups, and whether the inventory shows it that pool (the
    same list in its ``hostvars``; a pool from the play's ``vars:`` is not there)."""

    name: str
    groups: tuple
    in_inventory: bool


@dataclass(frozen=True)
class OutsideHost:
    """An inventory host outside the play: its groups, and the pool its inventory variables give it (None: none shown,
    which with a pool from the play's ``vars:`` or ``include_vars`` does not mean it has none)."""

    name: str
    groups: tuple
    pool: object


def check_hidden_pools(play_pools, outside_hosts):
    """PoolError when a pool of the play cannot be proven unique: a hypervisor not listed (outside the play: --limit, a
    sliced AWX job, a play on other hosts; or one of the play that failed before its listing) shares an inventory group
    with a pooled hypervisor of the play, and either the play's pool is not an inventory variable (``vars:`` of the
    play: the same play would give it to that hypervisor, whose domains this run does not list) or the inventory shows
    that hypervisor no pool (``include_vars`` loads the pool for the hosts that run it only). A pool the inventory shows
    for both is judged by the overlap rule (fleet_allocation's ``unlisted``)."""
    for mine in play_pools:
        for other in outside_hosts:
            shared = sorted(set(mine.groups) & set(other.groups) - {ALL_HOSTS})
            if not shared or (mine.in_inventory and other.pool is not None):
                continue
            if not mine.in_inventory:
                why = ("%s of %s is not an inventory variable (set in the play's vars:), so the same play would give "
                       "it to %s too" % (POOL_VARIABLE, mine.name, other.name))
            else:
                why = ("the inventory shows %s no %s, so this run cannot tell whether it takes addresses from the same "
                       "pool (one loaded by include_vars is seen for the hosts that ran it only)" % (other.name, POOL_VARIABLE))
            raise PoolError(
                "%s of %s cannot be proven unique: %s, in group %s with %s, was not listed in this run (outside the "
                "play: --limit, a sliced AWX job or a play on other hosts; or unreachable, or failed before its "
                "listing), and %s, so the addresses its proxies hold are unknown. Put the pool in the inventory "
                "(group_vars of the hypervisors that share it, or each hypervisor's own pool in its host_vars) or run "
                "every hypervisor of group %s in one play, without --limit or job slicing. Nothing was changed." % (
                    POOL_VARIABLE, mine.name, other.name, shared[0], mine.name, why, shared[0]))


def with_allocation(name, outside, profiles, allocated):
    """What the allocation gave the proxy ``name`` (``allocated``: the allocation's of its hypervisor, by proxy name),
    as ``(outside, profiles, pooled)``: ``outside`` (its outside NIC's options) with each address of the pool it gives
    none of its own, ``profiles`` (its list) with each ``pool`` replaced by the profile's address, and the profiles'
    pooled addresses {profile: {field: address}} ({} when none). From here on, the checks see the addresses as given
    by hand."""
    mine = (allocated.get(name) or {}) if isinstance(name, str) else {}
    outside = dict(outside)
    for field in ADDRESS_FIELDS.values():
        if mine.get(field) and not outside.get(field):
            outside[field] = mine[field]
    given = mine.get("profiles") or {}
    pooled = {}
    if given and isinstance(profiles, list):
        substituted = []
        for profile in profiles:
            if isinstance(profile, dict) and isinstance(profile.get("name"), str):
                addresses = {field: address for field, address in given.get(profile["name"], {}).items()
                             if profile.get(field) == POOLED}
                if addresses:
                    profile = dict(profile, **addresses)
                    pooled.setdefault(profile["name"], {}).update(addresses)
            substituted.append(profile)
        profiles = substituted
    return outside, profiles, pooled


def pool_view(instances, outside, state, profiles=None):
    """What the allocation needs of one hypervisor's variables, for the fact every other hypervisor's run reads:
    its egress_proxy_outside's pool, prefix and prefix6, egress_proxy_state, each of its egress_proxy_instances'
    name, state, own outside.address and address6 and own profiles, in their order (so a message can name the entry),
    and its egress_proxy_profiles (``profiles``), each profile's name, egress_address and egress_address6 alone. No
    other key: an instance's users and their passwords, and a profile's identities, stay out of the fact."""
    outside = outside if isinstance(outside, dict) else {}
    kept = []
    for entry in instances or []:
        entry = entry if isinstance(entry, dict) else {}
        own = entry.get("outside") if isinstance(entry.get("outside"), dict) else {}
        view = {"name": entry.get("name"), "state": entry.get("state"),
                "outside": {field: own.get(field) for field in ADDRESS_FIELDS.values()}}
        if "profiles" in entry:
            view["profiles"] = _profiles_view(entry["profiles"])
        kept.append(view)
    return {"outside": {key: outside.get(key) for key in ("pool",) + tuple(PREFIX_KEYS.values())}, "state": state,
            "instances": kept, "profiles": _profiles_view(profiles)}


def _profiles_view(profiles):
    """Of each profile of ``profiles``, what the allocation reads: its name, egress_address and egress_address6."""
    keys = ("name",) + tuple(field for field, _version in EGRESS_FIELDS)
    # Anything else stays in its place as None, so a message counts the entries as the list does.
    return [{key: profile.get(key) for key in keys} if isinstance(profile, dict) else None
            for profile in (profiles if isinstance(profiles, list) else [])]
