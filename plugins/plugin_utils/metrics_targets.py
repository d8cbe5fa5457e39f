# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The Prometheus scrape targets of the egress proxies: a file_sd file of every metrics endpoint the fleet should have.

Each hypervisor's targets come from the role's instances (what the inventory wants running) and what libvirt lists
(their addresses now); the file joins every hypervisor's. A hypervisor that was not listed this run keeps the targets
the file had for it: an unreachable hypervisor's proxies must go on being scraped (and alerted on), not vanish.

An HA group (egress_proxy_ha_groups) adds a ``group`` label to each member's target, and one target of its own: the
group's client address at the members' metrics port, which the squid of whichever member holds the address answers.
That target has the labels ``hypervisor`` (the one that wrote it), ``group``, ``owner`` and ``target="group-address"``,
and no ``proxy`` label: it is no proxy's. One hypervisor writes it, that of the group's first listed member the play
wants running with metrics on; the file keeps one such target per group (_targets/file_sd.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_PRESENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._targets.file_sd import GROUP_ADDRESS, GROUP_TARGET_LABEL
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import HaGroupError, parse_groups


def _endpoint(address, port):
    host = address.split("/")[0]
    return "[%s]:%d" % (host, port) if ipaddress.ip_address(host).version == 6 else "%s:%d" % (host, port)


def _scraped(instance):
    """Whether the inventory wants ``instance`` running with its metrics page."""
    return isinstance(instance, dict) and instance.get("state") == STATE_PRESENT and bool(instance.get("metrics"))


def checked_groups(groups):
    """``groups`` (egress_proxy_ha_groups) checked as the role checks them (ha_groups.parse_groups): the parsed groups,
    each with its ``index``, ``name``, ``address`` and ``members``. Raises HaGroupError naming each bad entry, also for a
    proxy listed in two groups, whose target carries one ``group`` label."""
    parsed = parse_groups(groups)
    member_of = {}
    problems = []
    for group in parsed:
        for member in group["members"]:
            if member in member_of:
                problems.append("egress_proxy_ha_groups[%d].members: %s is a member of egress_proxy_ha_groups[%d] too; "
                                "a proxy is in one group." % (group["index"], member, member_of[member]["index"]))
            else:
                member_of[member] = group
    if problems:
        raise HaGroupError(problems)
    return parsed


def group_writer(group, play):
    """(hypervisor, instance) of the group's first listed member that ``play`` ({hypervisor: its instances}, the
    hypervisors whose targets this run writes) wants running with metrics on; None when there is none. Hypervisors
    are looked at in name order, so a proxy listed on two (moved: absent on one) gives one answer."""
    for member in group["members"]:
        for hypervisor in sorted(play):
            for instance in play[hypervisor] or []:
                if _scraped(instance) and instance.get("name") == member:
                    return hypervisor, instance
    return None


def hypervisor_targets(hypervisor, owner, instances, listed, groups=(), play=None):
    """The target groups of one hypervisor: every instance it should run (state present) with metrics on, at the address
    libvirt lists for it, else its static inside address. ``instances`` are the role's (proxy_instances), ``listed``
    the proxies kvm_proxy_info or kvm_proxy_set returned. ``groups`` are the HA groups (checked_groups'): each
    member's target gets its group's name as the label ``group``, and the hypervisor that group_writer names among
    ``play`` ({hypervisor: its instances}, with this hypervisor's ``instances``) writes the group's target. Returns
    ``(groups, unaddressed)``: the file_sd groups, and the names of the proxies with no address known yet (DHCP, not
    running), which cannot be targets."""
    addresses = {proxy["name"]: proxy.get("ip") for proxy in listed or []}
    group_of = {member: group["name"] for group in groups for member in group["members"]}
    targets, unaddressed = [], []
    for instance in instances:
        if not _scraped(instance):
            continue
        address = addresses.get(instance["name"]) or instance.get("address")
        if not address:
            unaddressed.append(instance["name"])
            continue
        labels = {"hypervisor": hypervisor, "proxy": instance["name"], "owner": owner}
        if instance["name"] in group_of:
            labels["group"] = group_of[instance["name"]]
        targets.append({"targets": [_endpoint(address, int(instance["metrics_port"]))], "labels": labels})
    # This hypervisor's instances as given, also where the play's (read through hostvars) lack them.
    play = dict(play or {})
    play[hypervisor] = instances
    for group in groups:
        writer = group_writer(group, play)
        if writer is not None and writer[0] == hypervisor:
            targets.append({"targets": [_endpoint(str(group["address"]), int(writer[1]["metrics_port"]))],
                            "labels": {"hypervisor": hypervisor, "group": group["name"], "owner": owner,
                                       GROUP_TARGET_LABEL: GROUP_ADDRESS}})
    return targets, unaddressed
