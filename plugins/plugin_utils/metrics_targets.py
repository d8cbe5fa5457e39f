# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The Prometheus scrape targets of the egress proxies: a file_sd file of every metrics endpoint the fleet should have.

Each hypervisor's targets come from the role's instances (what the inventory wants running) and what libvirt lists
(their addresses now); the file joins every hypervisor's. A hypervisor that was not listed this run keeps the targets
the file had for it: an unreachable hypervisor's proxies must go on being scraped (and alerted on), not vanish.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_PRESENT

LABELS = ("hypervisor", "proxy", "owner")


class TargetsError(Exception):
    """A file_sd file the targets cannot be joined with."""


def _endpoint(address, port):
    host = address.split("/")[0]
    return "[%s]:%d" % (host, port) if ipaddress.ip_address(host).version == 6 else "%s:%d" % (host, port)


def hypervisor_targets(hypervisor, owner, instances, listed):
    """The target groups of one hypervisor: every instance it should run (state present) with metrics on, at the address
    libvirt lists for it, else its static inside address. ``instances`` are the role's (proxy_instances), ``listed``
    the proxies kvm_proxy_info or kvm_proxy_set returned. Returns ``(groups, unaddressed)``: the file_sd groups, and
    the names of the proxies with no address known yet (DHCP, not running), which cannot be targets."""
    addresses = {proxy["name"]: proxy.get("ip") for proxy in listed or []}
    groups, unaddressed = [], []
    for instance in instances:
        if instance["state"] != STATE_PRESENT or not instance.get("metrics"):
            continue
        address = addresses.get(instance["name"]) or instance.get("address")
        if not address:
            unaddressed.append(instance["name"])
            continue
        groups.append({"targets": [_endpoint(address, int(instance["metrics_port"]))],
                       "labels": {"hypervisor": hypervisor, "proxy": instance["name"], "owner": owner}})
    return groups, unaddressed


def _previous_groups(text):
    """The groups of the file as it is (its text; None when there is none), checked to be a file of ours."""
    if text is None:
        return []
    try:
        previous = json.loads(text)
    except ValueError as error:
        raise TargetsError("it is not JSON (%s)" % error) from None
    if not isinstance(previous, list) or not all(
            isinstance(group, dict) and isinstance(group.get("labels"), dict) and "hypervisor" in group["labels"]
            for group in previous):
        raise TargetsError("it is not a file_sd file of egress proxies (a list of target groups, each with a "
                           "hypervisor label)")
    return previous


def file_sd(fresh, previous, inventory_hosts):
    """The file_sd groups to write: ``fresh`` ({hypervisor: its groups}) for the hypervisors listed this run, the
    groups ``previous`` (the file's current text, None when there is none) has for the other hypervisors of ``inventory_hosts``; a hypervisor
    gone from the inventory is gone from the file. Sorted by hypervisor and proxy, so an unchanged fleet writes the
    same bytes."""
    kept = [group for group in _previous_groups(previous)
            if group["labels"]["hypervisor"] not in fresh and group["labels"]["hypervisor"] in inventory_hosts]
    groups = kept + [group for groups in fresh.values() for group in groups]
    return sorted(groups, key=lambda group: tuple(str(group["labels"].get(label, "")) for label in LABELS))

