# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""HA groups (egress_proxy_ha_groups): proxies on one client segment that share a client address through VRRP.

keepalived runs in each member's guest, its VRRP unicast between the members' own inside addresses. The groups are
fleet-wide (members may run on other hypervisors), so each hypervisor's run finds every member wherever it is listed
(member_view on each hypervisor of the play, the inventory's entries for the others: find_members), checks every
group as text first, then as addresses (resolve_groups), and gives each member instance the groups it is in
(instance_groups). A member's guest gets its keepalived.conf, the health check and the hand-over script as policy
files, and the hand-over as its policy's release (member_policy): a change of membership, priority or address is
applied in place, no VM replaced.

VRRP version 3, whose advertisements every half second let a backup take the address about 1.6 s after the holder
falls silent (version 2 counts in whole seconds: 3.3 s in a guest). Version 3 has no authentication: the members accept
advertisements from their unicast peers' addresses alone (check_unicast_src), on a segment the operator trusts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re
import shlex

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.ha_group import GROUP_NAME, address_text
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import validate_vm_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import (
    ascii_decimal,
    ip_address,
    ipv4_interface,
    ipv6_interface,
    quoted,
)
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_pool import with_allocation
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_reload import (
    RELOADING_FILE,
    RELOADING_SECONDS,
    composed_argv,
    held_argv,
)

VARIABLE = "egress_proxy_ha_groups"
GROUP_KEYS = ("name", "address", "address6", "members", "priorities", "vrrp_id", "egress_follows", "egress_address",
              "egress_address6")
_BOOLEAN_TEXT = re.compile(r"[A-Za-z01]{1,5}")
FIRST_PRIORITY = 200
PRIORITY_STEP = 10
MIN_PRIORITY, MAX_PRIORITY = 1, 254
MIN_VRRP_ID, MAX_VRRP_ID = 1, 255

# The guest's NICs as the seed's network-config names them (_seed/network_config.py): a member has a static inside
# NIC, so the names are set.
INSIDE_NIC = "nic0"
OUTSIDE_NIC = "nic1"
# squid answers keepalived's check on this loopback port alone (squid_conf.py writes it); no proxy or metrics port.
HEALTH_PORT = 13129
KEEPALIVED = "/usr/sbin/keepalived"
KEEPALIVED_CONF_PATH = "/etc/keepalived/keepalived.conf"
SCRIPTS_DIR = "/usr/local/lib/egress-proxy"
HEALTH_SCRIPT_PATH = SCRIPTS_DIR + "/squid-answers"
HAND_OVER_PATH = SCRIPTS_DIR + "/hand-over"
# A member with an outside NIC has squid listen on the inside addresses and the group's, held or not.
SYSCTL_PATH = "/etc/sysctl.d/60-egress-proxy-ha.conf"
SYSCTL_LOAD = ["/usr/sbin/sysctl", "--quiet", "--load=%s" % SYSCTL_PATH]
KEEPALIVED_VALIDATE = [KEEPALIVED, "--config-test", "--all-config", "--use-file=%s" % KEEPALIVED_CONF_PATH]
KEEPALIVED_RELOAD = ["/bin/systemctl", "reload-or-restart", "keepalived"]
# keepalived's check of squid (the health script): its interval, how long squid has to answer it, how many answers in
# a row make a member serve (from its start too: init_fail), how many failures make it give the address up. A squid
# slow under load is not taken for a hung one: moving the address to a member as loaded only cuts connections.
CHECK_INTERVAL = 2
CHECK_ANSWER_SECONDS = 2
CHECK_RISE = 2
CHECK_FALL = 3
# How long the hand-over waits for a peer to serve (one replaced just before may be in its first boot), then for its
# keepalived to count squid as answering; how long it lets the connections in flight finish, new ones held; and
# how long it waits for another member to answer on the address once keepalived stopped.
PEER_SECONDS = 300
# Before a reload, a peer serves already or the member reloads keeping the address (new connections held).
RELOAD_PEER_SECONDS = 10
# The settle covers the peer's rise and one late check more: a guest short of CPU runs its checks late.
SETTLE_SECONDS = CHECK_INTERVAL * (CHECK_RISE + 2)
# The queued connections are drained before (held_argv); those in flight get a few seconds only: a client whose SYN the
# hold dropped sends it again 1, 3, 7, 15 s later, and a move done within 7 s lands its third try on the new holder,
# while a long download is cut by the move whatever the wait.
DRAIN_SECONDS = 3
HAND_OVER_SECONDS = 10
# VRRP's advertisement interval (version 3 counts in centiseconds): a backup takes the address after 3 missed ones
# and its skew time, about 1.6 s after the holder falls silent.
ADVERT_INTERVAL = "0.5"


class HaGroupError(Exception):
    """What the groups' checks refuse: ``problems``, one sentence each."""

    def __init__(self, problems):
        super().__init__(" ".join(problems))
        self.problems = problems


def _json(value):
    return json.dumps(value)


def _label(index, field=None):
    return "%s[%d]%s" % (VARIABLE, index, "." + field if field else "")


def _integer(value):
    """``value`` as an int: an int (not a bool) or text of ASCII digits; else None."""
    if isinstance(value, bool):
        return None
    return value if isinstance(value, int) else ascii_decimal(value)


def _parse_address(entry, index, field, version, problems, required=False):
    value = entry.get(field)
    if value is None or value == "":
        if required:
            problems.append("%s is required: the group's client address (IPv4, without prefix length)"
                            % _label(index, field))
        return None
    found = address_text(value, version)
    if found is None:
        problems.append("%s %s is not an IPv%d address (ASCII digits%s, no prefix length, no %%scope, no blank)"
                        % (_label(index, field), quoted(value), version, "" if version == 4 else " and hex"))
    return found


def parse_groups(groups):
    """``groups`` (egress_proxy_ha_groups) checked as text and parsed: a list of dicts (index, name, address,
    address6, members, priorities, vrrp_id, egress_follows, egress_address, egress_address6), the addresses as
    ipaddress objects. Raises HaGroupError naming each entry and field."""
    if groups is None or groups == []:
        return []
    if not isinstance(groups, list):
        raise HaGroupError(["%s must be a list of groups, got %s." % (VARIABLE, type(groups).__name__)])
    problems, parsed = [], []
    for index, entry in enumerate(groups):
        if not isinstance(entry, dict):
            problems.append("%s must be a dictionary (name, address, members...)." % _label(index))
            continue
        found = []
        if "password" in entry:
            # Its value is not shown: it was a secret.
            found.append("%s: groups take no password any more (VRRP version 3 has no authentication; the members "
                         "accept advertisements from each other's addresses alone): remove the key" % _label(index, "password"))
        unknown = sorted(str(key) for key in entry if key not in GROUP_KEYS and key != "password")
        if unknown:
            found.append("%s has unknown keys %s (known: %s)" % (_label(index), ", ".join(quoted(key) for key in unknown),
                                                                 ", ".join(GROUP_KEYS)))
        group = {"index": index, "name": entry.get("name")}
        if not isinstance(group["name"], str) or not GROUP_NAME.fullmatch(group["name"]):
            found.append("%s %s is not 1-15 lowercase letters, digits and -, starting with a letter or digit"
                         % (_label(index, "name"), quoted(group["name"])))
        group["address"] = _parse_address(entry, index, "address", 4, found, required=True)
        group["address6"] = _parse_address(entry, index, "address6", 6, found)
        group["members"] = _members(entry, index, found)
        group["priorities"] = _priorities(entry, index, group["members"], found)
        group["vrrp_id"] = None
        if entry.get("vrrp_id") is not None:
            group["vrrp_id"] = _integer(entry["vrrp_id"])
            if group["vrrp_id"] is None or not MIN_VRRP_ID <= group["vrrp_id"] <= MAX_VRRP_ID:
                found.append("%s %s is not a VRRP id (%d-%d in ASCII digits)"
                             % (_label(index, "vrrp_id"), quoted(entry["vrrp_id"]), MIN_VRRP_ID, MAX_VRRP_ID))
        group.update(_egress(entry, index, found))
        problems.extend("%s." % problem for problem in found)
        parsed.append(group)
    names = [group["name"] for group in parsed]
    problems.extend("%s %s is the name of %s too; give each group its own name." % (
        _label(group["index"], "name"), _json(group["name"]), _label(parsed[names.index(group["name"])]["index"]))
        for position, group in enumerate(parsed) if isinstance(group["name"], str) and names.index(group["name"]) < position)
    if problems:
        raise HaGroupError(problems)
    return parsed


def _members(entry, index, problems):
    members = entry.get("members")
    if not isinstance(members, list):
        problems.append("%s must be a list of at least two proxy names" % _label(index, "members"))
        return []
    bad = []
    for member in members:
        try:
            validate_vm_name(member)
        except ValidationError:
            bad.append(quoted(member))
    if bad:
        problems.append("%s %s: not proxy names (1-63 lowercase letters, digits and -)"
                        % (_label(index, "members"), ", ".join(bad)))
        return []
    twice = sorted({member for member in members if members.count(member) > 1})
    if twice:
        problems.append("%s lists %s more than once" % (_label(index, "members"), ", ".join(twice)))
    elif len(members) < 2:
        problems.append("%s lists %d proxy: a group needs at least two members (one alone has no one to hand its "
                        "address to)" % (_label(index, "members"), len(members)))
    return list(members)


def _priorities(entry, index, members, problems):
    """Each member's VRRP priority: the given ones, the others by their place in members (200, 190, ...)."""
    given = entry.get("priorities")
    if given is None:
        given = {}
    if not isinstance(given, dict):
        problems.append("%s must be a mapping of member names to priorities" % _label(index, "priorities"))
        return {}
    priorities = {}
    for name, value in given.items():
        number = _integer(value)
        if name not in members:
            problems.append("%s names %s, which is not in members" % (_label(index, "priorities"), quoted(name)))
        elif number is None or not MIN_PRIORITY <= number <= MAX_PRIORITY:
            problems.append("%s.%s %s is not a priority (%d-%d in ASCII digits)"
                            % (_label(index, "priorities"), name, quoted(value), MIN_PRIORITY, MAX_PRIORITY))
        else:
            priorities[name] = number
    for position, name in enumerate(members):
        priorities.setdefault(name, max(MIN_PRIORITY, FIRST_PRIORITY - PRIORITY_STEP * position))
    return priorities


def _egress(entry, index, problems):
    follows = entry.get("egress_follows", False)
    try:
        # As text first: boolean() strips blanks and line feeds.
        if isinstance(follows, str) and not _BOOLEAN_TEXT.fullmatch(follows):
            raise TypeError(follows)
        follows = boolean(follows, strict=True) if follows is not None else False
    except TypeError:
        problems.append("%s %s is not a boolean" % (_label(index, "egress_follows"), quoted(follows)))
        follows = False
    egress = {"egress_follows": follows,
              "egress_address": _parse_address(entry, index, "egress_address", 4, problems),
              "egress_address6": _parse_address(entry, index, "egress_address6", 6, problems)}
    given = [field for field in ("egress_address", "egress_address6") if entry.get(field) not in (None, "")]
    if follows and not given:
        problems.append("%s is true but neither egress_address nor egress_address6 is given: the egress address that "
                        "moves with the client address" % _label(index, "egress_follows"))
    elif given and not follows:
        problems.append("%s is given without egress_follows: true (each member egresses from its own address "
                        "otherwise)" % _label(index, given[0]))
    return egress


def member_view(entries, groups, settings, hypervisor):
    """What the groups need of the members among ``entries`` (one hypervisor's egress_proxy_instances and the
    egress_proxy_fleet entries naming it): each member's name, hypervisor, state, port and static addresses, with
    the hypervisor's ``settings`` (egress_proxy_state, _address, _address6, _port, _outside, and
    egress_proxy__pool_addresses, those it has) where the entry gives none, and the hypervisor's metrics port
    (egress_proxy_metrics_port when egress_proxy_metrics is on; None when off or not known). No user."""
    names = {member for group in groups or [] if isinstance(group, dict) and isinstance(group.get("members"), list)
             for member in group["members"] if isinstance(member, str)}
    pooled = settings.get("egress_proxy__pool_addresses") or {}
    metrics_port = None
    if settings.get("egress_proxy_metrics") is not None and boolean(settings["egress_proxy_metrics"], strict=False):
        metrics_port = settings.get("egress_proxy_metrics_port")
    view = []
    for entry in entries or []:
        if not isinstance(entry, dict) or entry.get("name") not in names:
            continue
        filled = {key: entry.get(key, settings.get("egress_proxy_" + key)) for key in ("state", "address", "address6", "port")}
        outside, profiles, _pooled = with_allocation(
            entry["name"], dict(settings.get("egress_proxy_outside") or {}, **(entry.get("outside") or {})),
            entry["profiles"] if "profiles" in entry else settings.get("egress_proxy_profiles"), pooled)
        view.append(dict(filled, name=entry["name"], hypervisor=hypervisor, outside_address=outside.get("address") or "",
                         outside_address6=outside.get("address6") or "", metrics_port=metrics_port,
                         profile_addresses=_profile_addresses(profiles)))
    return view


def _profile_addresses(profiles):
    """The egress addresses of a member's profiles (egress_address, egress_address6), normalised; the role's check of
    the profiles (squid_conf) refuses any other value, naming it."""
    found = []
    for profile in profiles if isinstance(profiles, list) else []:
        for field in ("egress_address", "egress_address6"):
            address = ip_address(profile.get(field)) if isinstance(profile, dict) else None
            if address is not None:
                found.append(str(address))
    return found


# A hypervisor's role-wide settings a member falls back to (member_view's ``settings``), as hostvars show them.
HOST_SETTINGS = ("egress_proxy_state", "egress_proxy_address", "egress_proxy_address6", "egress_proxy_port",
                 "egress_proxy_outside", "egress_proxy_metrics", "egress_proxy_metrics_port", "egress_proxy_profiles")


def fleet_listings(groups, hostvars, play_hosts, inventory_hosts, fleet):
    """Each inventory host's member_view: a hypervisor of the play keeps it as the fact egress_proxy__ha_view (made
    with its role defaults and play variables); for one outside the play (--limit), hostvars show its inventory's
    variables alone, so its members are seen with the settings its entries and inventory give."""
    listings = []
    for host in inventory_hosts:
        seen = hostvars[host]
        if host in play_hosts and "egress_proxy__ha_view" in seen:
            listings.append(seen["egress_proxy__ha_view"])
            continue
        settings = {name: seen[name] for name in HOST_SETTINGS if name in seen}
        entries = list(seen["egress_proxy_instances"] or []) if "egress_proxy_instances" in seen else []
        entries += [entry for entry in fleet or [] if isinstance(entry, dict) and entry.get("hypervisor") == host]
        listings.append(member_view(entries, groups, settings, host))
    return listings


def find_members(listings):
    """{name: view} of every proxy listed in ``listings`` (member_view's, each hypervisor's), where it is to exist;
    a name listed to exist on two hypervisors maps to the list of them (refused by resolve_groups when a member)."""
    found = {}
    for listing in listings:
        for view in listing:
            if view.get("state") == STATE_ABSENT:
                continue
            found.setdefault(view["name"], []).append(view)
    return found


def vrrp_id(uid, segment, name):
    """The derived VRRP id (1-255) of the group ``name`` on ``segment`` (the members' inside network, as text),
    for the owner ``uid``: stable across runs, and different owners' groups of one name on one segment most likely
    apart."""
    digest = hashlib.sha256("\0".join((str(uid), segment, name)).encode("utf-8")).hexdigest()
    return 1 + int(digest, 16) % 255


def resolve_groups(groups, members, uid):
    """The groups (``groups`` egress_proxy_ha_groups, ``members`` find_members') checked against their members:
    a list of dicts (index, name, vrrp_id, port, address and address6 with the segment's prefix length,
    egress_address(6) with the outside one, members [{name, hypervisor, address, address6, outside, priority}]).
    Raises HaGroupError naming each entry; nothing is touched before."""
    parsed = parse_groups(groups)
    # Every static address of every member, and every egress address of its profiles, which no group's address may be:
    # {address: what it is}.
    taken = {}
    for listed in members.values():
        for view in listed:
            for field in ("address", "address6", "outside_address", "outside_address6"):
                if isinstance(view.get(field), str) and view[field]:
                    taken.setdefault(view[field].split("/")[0], "a static address of the proxy %s" % view["name"])
            for address in view.get("profile_addresses") or []:
                taken.setdefault(address, "the egress address of a profile of the proxy %s" % view["name"])
    problems, resolved = [], []
    for group in parsed:
        found = []
        views = _group_members(group, members, found)
        if not found:
            resolved.append(_resolved(group, views, uid, taken, found))
        problems.extend("%s." % problem for problem in found)
    if problems:
        raise HaGroupError(problems)
    problems = _across_groups(resolved)
    if problems:
        raise HaGroupError(problems)
    return resolved


def _group_members(group, members, problems):
    views = []
    for name in group["members"]:
        listed = members.get(name) or []
        if not listed:
            problems.append("%s: %s is not a proxy listed to exist in egress_proxy_fleet or any host's "
                            "egress_proxy_instances" % (_label(group["index"], "members"), name))
        elif len(listed) > 1:
            problems.append("%s: %s is listed to exist on %s; a member is one proxy" % (
                _label(group["index"], "members"), name, " and ".join(view["hypervisor"] for view in listed)))
        else:
            views.append(listed[0])
    return views


def _interface(text, parse):
    return parse(text) if isinstance(text, str) and text else None


def _resolved(group, views, uid, taken, problems):
    label = _label(group["index"])
    inside = {view["name"]: _interface(view.get("address"), ipv4_interface) for view in views}
    inside6 = {view["name"]: _interface(view.get("address6"), ipv6_interface) for view in views}
    missing = [view["name"] for view in views if inside[view["name"]] is None]
    if missing:
        problems.append("%s.members: %s %s no static inside address (address, IPv4 with its prefix length): VRRP "
                        "speaks unicast between the members' own addresses" % (
                            label, ", ".join(missing), "has" if len(missing) == 1 else "have"))
        return None
    segment = _one_segment(label, "address", inside, problems)
    segment6 = None
    if group["address6"] is not None:
        missing6 = [name for name, interface in inside6.items() if interface is None]
        if missing6:
            problems.append("%s.address6: %s %s no static inside address6, so cannot hold the group's IPv6 address" % (
                label, ", ".join(missing6), "has" if len(missing6) == 1 else "have"))
        else:
            segment6 = _one_segment(label, "address6", inside6, problems)
    for field, network in (("address", segment), ("address6", segment6)):
        _in_segment(label, field, group[field], network, taken, "the members' segment", problems)
    ports = {view["name"]: _integer(view.get("port")) for view in views if view.get("port") is not None}
    if len(set(ports.values())) > 1:
        problems.append("%s.members: the members listen on different ports (%s); clients reach the group's address "
                        "on one port, so give them one port" % (
                            label, ", ".join("%s %s" % (name, quoted(port)) for name, port in sorted(ports.items()))))
    metrics_ports = {view["name"]: _integer(view.get("metrics_port")) for view in views
                     if view.get("metrics_port") is not None}
    if len(set(metrics_ports.values())) > 1:
        problems.append("%s.members: the members serve their metrics on different ports (egress_proxy_metrics_port: %s); "
                        "the group's metrics target scrapes the group's address on one port, so give their hypervisors "
                        "one egress_proxy_metrics_port" % (label, ", ".join(
                            "%s %s" % (name, quoted(port)) for name, port in sorted(metrics_ports.items()))))
    egress = _egress_addresses(group, views, label, taken, problems)
    if problems:
        return None
    return {
        "index": group["index"], "name": group["name"],
        "vrrp_id": group["vrrp_id"] or vrrp_id(uid, str(segment), group["name"]),
        "segment": str(segment),
        "port": next(iter(ports.values()), None),
        "address": "%s/%d" % (group["address"], segment.prefixlen),
        "address6": "%s/%d" % (group["address6"], segment6.prefixlen) if segment6 else None,
        "egress_address": egress.get("egress_address"), "egress_address6": egress.get("egress_address6"),
        "members": [{"name": view["name"], "hypervisor": view["hypervisor"], "address": str(inside[view["name"]].ip),
                     "priority": group["priorities"][view["name"]]} for view in views],
    }


def _one_segment(label, field, interfaces, problems):
    networks = {name: interface.network for name, interface in interfaces.items()}
    if len(set(networks.values())) > 1:
        problems.append("%s.members: the members are on different segments (%s): a group's members share one client "
                        "network" % (label, ", ".join("%s %s %s" % (name, field, network)
                                                      for name, network in sorted(networks.items()))))
        return None
    return next(iter(networks.values()))


def _in_segment(label, field, address, network, taken, where, problems):
    if address is None or network is None:
        return
    if address not in network or address in (network.network_address, network.broadcast_address):
        problems.append("%s.%s %s is not a host address of %s %s" % (label, field, address, where, network))
    elif str(address) in taken:
        problems.append("%s.%s %s is %s; give the group an address of its own" % (
            label, field, address, taken[str(address)]))


def _egress_addresses(group, views, label, taken, problems):
    """The egress addresses that move with the client address, with the outside NICs' prefix length."""
    found = {}
    for field, version, parse in (("egress_address", 4, ipv4_interface), ("egress_address6", 6, ipv6_interface)):
        if group[field] is None:
            continue
        key = "outside_address" if version == 4 else "outside_address6"
        outside = {view["name"]: _interface(view.get(key), parse) for view in views}
        missing = [name for name, interface in outside.items() if interface is None]
        if missing:
            problems.append("%s.%s: %s %s no outside NIC with a static %s (outside.%s or a pool's), where the egress "
                            "address goes" % (label, field, ", ".join(missing), "has" if len(missing) == 1 else "have",
                                              key[len("outside_"):], key[len("outside_"):]))
            continue
        network = _one_segment(label, "outside." + key[len("outside_"):], outside, problems)
        _in_segment(label, field, group[field], network, taken, "the members' outside network", problems)
        if network is not None:
            found[field] = "%s/%d" % (group[field], network.prefixlen)
    return found


def _across_groups(resolved):
    """What no group shows alone: one address in two groups, a member in two groups on one segment, two groups on
    one segment with one VRRP id."""
    problems = []
    seen = {}
    for group in resolved:
        for field in ("address", "address6", "egress_address", "egress_address6"):
            if group[field]:
                address = group[field].split("/")[0]
                if address in seen:
                    problems.append("%s %s is %s too; give each group addresses of its own." % (
                        _label(group["index"], field), address, seen[address]))
                else:
                    seen[address] = _label(group["index"], field)
    for position, group in enumerate(resolved):
        for other in resolved[:position]:
            if other["segment"] != group["segment"]:
                continue
            both = sorted({member["name"] for member in group["members"]} & {member["name"] for member in other["members"]})
            if both:
                problems.append("%s.members: %s %s in %s too, on one segment (%s); a proxy is in one group per "
                                "segment." % (_label(group["index"]), ", ".join(both), "is" if len(both) == 1 else "are",
                                              _label(other["index"]), group["segment"]))
            if other["vrrp_id"] == group["vrrp_id"]:
                problems.append("%s (%s) and %s (%s) are on one segment (%s) with one VRRP id, %d: set vrrp_id on one "
                                "of them to another id (1-255) no group on the segment has." % (
                                    _label(other["index"]), other["name"], _label(group["index"]), group["name"],
                                    group["segment"], group["vrrp_id"]))
    return problems


def fleet_groups(groups, listings, uid):
    """The role's view of ``groups`` (egress_proxy_ha_groups) across the fleet (``listings``, fleet_listings'):
    {"groups": resolve_groups', "problems": the sentences it refused with, "spans_hypervisors": whether
    a group's members run on more than one hypervisor}. The role raises the problems where it checks the proxies to
    run (the destroy entry point needs no group)."""
    try:
        resolved = resolve_groups(groups, find_members(listings), uid)
    except HaGroupError as error:
        return {"groups": [], "problems": error.problems, "spans_hypervisors": False}
    spans = any(len({member["hypervisor"] for member in group["members"]}) > 1 for group in resolved)
    return {"groups": resolved, "problems": [], "spans_hypervisors": spans}


def instance_groups(resolved, name):
    """The groups the proxy ``name`` is in, as its instance carries them: each group's name, index,
    VRRP id, port, addresses, this member's priority and its peers' inside addresses."""
    groups = []
    for group in resolved:
        own = [member for member in group["members"] if member["name"] == name]
        if own:
            groups.append({"index": group["index"], "name": group["name"], "vrrp_id": group["vrrp_id"],
                           "port": group["port"], "address": group["address"], "address6": group["address6"],
                           "egress_address": group["egress_address"], "egress_address6": group["egress_address6"],
                           "priority": own[0]["priority"], "source": own[0]["address"],
                           "peers": [member["address"] for member in group["members"] if member["name"] != name]})
    return groups


def keepalived_conf(name, groups):
    """The keepalived.conf of the member ``name`` in ``groups`` (instance_groups'): one vrrp_instance per group, VRRP
    version 3. Every value was checked as text and parsed before."""
    lines = [
        "# keepalived of the egress proxy %s, written by the egress_proxies.kvm.egress_proxy role from" % name,
        "# egress_proxy_ha_groups. Change the role's variables rather than this file: the next run writes it again.",
        "global_defs {",
        "    router_id %s" % name,
        # No authentication in version 3: check_unicast_src keeps to the peers' advertisements.
        "    vrrp_version 3",
        "    script_user root",
        "    enable_script_security",
        "}",
        "",
        "# squid itself answers (an HTTP status line from its loopback health port), not just its process.",
        "vrrp_script egress_squid {",
        '    script "%s %d"' % (HEALTH_SCRIPT_PATH, HEALTH_PORT),
        "    interval %d" % CHECK_INTERVAL,
        "    timeout %d" % (CHECK_ANSWER_SECONDS + 1),
        "    fall %d" % CHECK_FALL,
        "    rise %d" % CHECK_RISE,
        # A member starting (a first boot, a restart) takes no address before squid has answered.
        "    init_fail",
        "}",
    ]
    for group in groups:
        # IPv4 VRRP between the inside addresses (keepalived takes one family per instance); the IPv6 addresses move
        # with the instance, excluded from its advertisements.
        virtual = ["%s dev %s" % (group["address"], INSIDE_NIC)]
        if group["egress_address"]:
            virtual.append("%s dev %s" % (group["egress_address"], OUTSIDE_NIC))
        excluded = ["%s dev %s" % (address, nic) for address, nic in (
            (group["address6"], INSIDE_NIC), (group["egress_address6"], OUTSIDE_NIC)) if address]
        lines += [
            "",
            "vrrp_instance %s {" % group["name"],
            "    state BACKUP",
            "    nopreempt",
            "    interface %s" % INSIDE_NIC,
            "    unicast_src_ip %s" % group["source"],
            "    unicast_peer {",
        ] + ["        %s" % peer for peer in group["peers"]] + [
            "    }",
            "    check_unicast_src",
            "    virtual_router_id %d" % group["vrrp_id"],
            "    priority %d" % group["priority"],
            "    advert_int %s" % ADVERT_INTERVAL,
            "    track_script {",
            "        egress_squid",
            "    }",
            "    virtual_ipaddress {",
        ] + ["        %s" % address for address in virtual] + ["    }"]
        if excluded:
            lines += ["    virtual_ipaddress_excluded {"] + ["        %s" % address for address in excluded] + ["    }"]
        lines.append("}")
    return "\n".join(lines) + "\n"


# keepalived runs it every CHECK_INTERVAL seconds with squid's health port; bash's /dev/tcp, so no tool beyond bash is
# needed.
HEALTH_SCRIPT = r"""#!/bin/bash
# Whether squid answers: keepalived's vrrp_script egress_squid runs this every %(interval)d s with squid's loopback
# health port. Success is an HTTP status line coming back (squid's 403 for the health port): squid's worker answered, not
# just a process that listens. Written by the egress_proxies.kvm.egress_proxy role.
case $1 in '' | *[!0-9]*) exit 2 ;; esac
# squid reloading, new connections held (squid_reload): answering, for at most %(reloading_seconds)d s.
if read -r since < %(reloading_file)s 2>/dev/null; then
  read -r up _ < /proc/uptime
  case $since in '' | *[!0-9]*) ;; *) [ $(( ${up%%.*} - since )) -lt %(reloading_seconds)d ] && exit 0 ;; esac
fi
exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
printf 'GET http://127.0.0.1/ HTTP/1.0\r\n\r\n' >&3
IFS= read -r -t %(answer_seconds)d status <&3 || exit 1
case $status in "HTTP/1."[01]" "[1-5][0-9][0-9]*) exit 0 ;; esac
exit 1
""" % {"reloading_file": RELOADING_FILE, "reloading_seconds": RELOADING_SECONDS, "interval": CHECK_INTERVAL,
       "answer_seconds": CHECK_ANSWER_SECONDS}

# The run hands a group's address over before it stops or replaces the member that holds it.
HAND_OVER_SCRIPT = r"""#!/bin/bash
# hand-over [--within SECONDS] VIP PEER...: before the proxy %(name)s is stopped, replaced or reloaded, hands its
# group's client address VIP over to another member (PEER...: the other members' own addresses). Nothing to do when
# this guest does not hold VIP. Else:
# 1. A peer serves: its squid answers on its own address as another proxy (an HTTP status line and its X-Egress-Proxy
#    header), asked for at most SECONDS (%(peer_seconds)d: a member replaced just before may be in its first boot), then
#    %(settle)d s more for its keepalived to count squid as answering. None does: VIP stays here, exit 1.
# 2. New connections to squid's port %(port)d held (a client sends a dropped SYN again, to the new holder), those in
#    flight let finish for at most %(drain)d s, then keepalived stopped: its last advertisement, priority 0, makes a
#    backup take VIP at once. VIP asked until another member answers, for at most %(seconds)d s; none does: keepalived
#    starts again (VIP is not left without a holder), exit 1.
# Exit 0 when handed over or not held, with one line saying which. Written by the egress_proxies.kvm.egress_proxy role.
self=%(name)s port=%(port)d peer_seconds=%(peer_seconds)d
if [ "$1" = --within ]; then
  case $2 in '' | *[!0-9]*) echo "hand-over: --within $2 is not a number of seconds"; exit 2 ;; esac
  peer_seconds=$2
  shift 2
fi
address() { case $1 in '' | *[!0-9A-Fa-f:.]*) echo "hand-over: $1 is not an IP address"; exit 2 ;; esac; }
# The proxy that answers on $1:port (squid refuses its cache manager's menu to every client: squid's own answer, no
# DNS, no origin), if one does.
answered_by() {
  timeout 1 bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1
    printf "GET http://127.0.0.1/squid-internal-mgr/menu HTTP/1.0\r\n\r\n" >&3
    head -c 8192 <&3' "$1" "$port" 2>/dev/null | tr -d '\r' |
    sed -n -e '1{/^HTTP\/1\.[01] [1-5][0-9][0-9]/!q;}' -e 's/^[Xx]-[Ee]gress-[Pp]roxy: *"\{0,1\}\([a-z0-9-]*\)"\{0,1\} *$/\1/p' |
    head -n 1
}
if [ "$1" = --move ]; then
  vip=$2
  address "$vip"
  deadline=$((SECONDS + %(drain)d))
  while [ -n "$(ss -Htn state established "( sport = :$port )" 2>/dev/null)" ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.1
  done
  if ! systemctl stop keepalived; then
    echo "hand-over: keepalived of $self did not stop; $vip stays here"
    exit 1
  fi
  deadline=$((SECONDS + %(seconds)d))
  while [ "$SECONDS" -lt "$deadline" ]; do
    holder=$(answered_by "$vip")
    if [ -n "$holder" ] && [ "$holder" != "$self" ]; then
      echo "hand-over: $self handed $vip over to $holder"
      exit 0
    fi
    sleep 0.2
  done
  systemctl start keepalived
  echo "hand-over: no other member answered on $vip port $port within %(seconds)d s; keepalived of $self started again"
  exit 1
fi
vip=$1
shift
address "$vip"
[ "$#" -ge 1 ] || { echo "hand-over: no peer's address after $vip"; exit 2; }
for peer in "$@"; do address "$peer"; done
if [ -z "$(ip -o address show to "$vip")" ]; then
  echo "hand-over: $self does not hold $vip"
  exit 0
fi
deadline=$((SECONDS + peer_seconds))
until [ -n "${ready-}" ]; do
  for peer in "$@"; do
    holder=$(answered_by "$peer")
    if [ -n "$holder" ] && [ "$holder" != "$self" ]; then ready=$holder; break; fi
  done
  if [ -z "${ready-}" ]; then
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "hand-over: no other member serves (asked $* on port $port for $peer_seconds s); $vip stays on $self"
      exit 1
    fi
    sleep 1
  fi
done
sleep %(settle)d
exec %(held)s "$0" --move "$vip"
"""


def hand_over_script(name, port):
    """The hand-over script of the member ``name`` (a checked VM name) whose squid listens on ``port``:
    ``hand-over VIP PEER...``; its move runs with new connections to ``port`` held (held_argv)."""
    held = " ".join(shlex.quote(argument) for argument in held_argv([port], ["/bin/bash"]))
    return HAND_OVER_SCRIPT % {"name": name, "port": port, "peer_seconds": PEER_SECONDS, "settle": SETTLE_SECONDS,
                               "drain": DRAIN_SECONDS, "seconds": HAND_OVER_SECONDS, "held": held}


SYSCTL_CONF = ("# An HA group's member: squid listens on the group's addresses before keepalived gives them to it.\n"
               "net.ipv4.ip_nonlocal_bind = 1\n"
               "net.ipv6.ip_nonlocal_bind = 1\n")


def listens_nonlocal(instance):
    """Whether a member's squid listens on addresses it may not hold: with an outside NIC, squid listens on named
    addresses (the inside ones and the group's) instead of every address."""
    return bool(instance.get("outside"))


# policy.release: the hand-over of each group's address (the arguments after the script: per group, the address and
# its peers' addresses joined by commas), when the guest has the script; a guest that is not a member yet has none,
# holds no group's address, and releases nothing.
RELEASE_SCRIPT = ('[ -x "$1" ] || { echo "no hand-over script at $1: this proxy holds no group address"; exit 0; }; '
                  'script=$1; shift; while [ "$#" -ge 2 ]; do vip=$1 peers=$2; shift 2; '
                  'IFS=,; set -f; "$script" "$vip" $peers || exit; unset IFS; set +f; done')


# Before a member's reload: the hand-over of each group's address (the arguments up to "--", as RELEASE_SCRIPT's), to a
# peer that serves now (within RELOAD_PEER_SECONDS); when none does, or none takes the address, the member keeps it and
# reloads with new connections held. keepalived's reload after squid's starts it again where the hand-over stopped it.
RELOAD_HAND_OVERS = ('script=$1; shift; while [ "$1" != -- ]; do vip=$1 peers=$2; shift 2; IFS=,; set -f; '
                     '"$script" --within %d "$vip" $peers || true; unset IFS; set +f; done; shift;' % RELOAD_PEER_SECONDS)


def _hand_over_arguments(groups):
    """The hand-over script, then each of ``groups``' (instance_groups') client address and its peers' addresses
    joined by commas."""
    argv = [HAND_OVER_PATH]
    for group in groups:
        argv += [group["address"].split("/")[0], ",".join(peer.split("/")[0] for peer in group["peers"])]
    return argv


def release_argv(groups):
    """The member's policy.release: the hand-over of each of ``groups``' (instance_groups') client address to its
    peers, by a fixed /bin/sh wrapper that succeeds where the guest has no hand-over script."""
    return ["/bin/sh", "-c", RELEASE_SCRIPT, "sh"] + _hand_over_arguments(groups)


def policy_group(groups):
    """The member's policy.group (the module records it, kvm_proxy_info reports it): its group's name and client
    addresses without prefix length. A member is in one group: a group's segment is its members' inside network, a
    member has one inside address, and resolve_groups refuses a proxy in two groups on one segment."""
    if len(groups) != 1:
        raise HaGroupError(["%s puts a proxy in %d groups (%s); a proxy is in one group." % (
            VARIABLE, len(groups), ", ".join(group["name"] for group in groups))])
    group = groups[0]
    return {"name": group["name"], "address": group["address"].split("/")[0],
            "address6": group["address6"].split("/")[0] if group["address6"] else None}


def member_policy(instance, policy):
    """``policy`` (kvm_proxy_set's policy of the member ``instance``: squid's files, validate, reload) with the
    member's keepalived.conf, the health check and the hand-over script, and the sysctl file where squid listens on
    the group's address; validated by squid and keepalived's own config test, reloaded by squid's reload then
    keepalived's; released by the hand-over of its group's address; naming its group (policy_group). A proxy in no
    group does not come here: its policy has no group, and so keeps its digest."""
    groups = instance["ha"]
    files = list(policy["files"]) + [
        {"path": KEEPALIVED_CONF_PATH, "content": keepalived_conf(instance["name"], groups)},
        {"path": HEALTH_SCRIPT_PATH, "mode": "0755", "content": HEALTH_SCRIPT},
        {"path": HAND_OVER_PATH, "mode": "0755", "content": hand_over_script(instance["name"], instance["port"])},
    ]
    reload_script = '%s "$@"; %s' % (RELOAD_HAND_OVERS, " ".join(KEEPALIVED_RELOAD))
    if listens_nonlocal(instance):
        files.append({"path": SYSCTL_PATH, "content": SYSCTL_CONF})
        reload_script = "%s; %s" % (" ".join(SYSCTL_LOAD), reload_script)
    # What else the policy holds (the profiles' pooled addresses) goes with it.
    return dict(policy, files=files,
                validate=composed_argv('"$@"; %s' % " ".join(KEEPALIVED_VALIDATE), policy["validate"]),
                reload=composed_argv(reload_script, _hand_over_arguments(groups) + ["--"] + list(policy["reload"])),
                release=release_argv(groups), group=policy_group(groups))
