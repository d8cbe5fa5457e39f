# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_pool import OutsideHost, PlayPool, PoolError, check_hidden_pools, fleet_allocation

DOCUMENTATION = r"""
name: egress_addresses
short_description: The egress addresses of the whole play's proxies, allocated once from their pools
version_added: 0.1.0
description:
  - Gives every proxy of the play that has no C(outside.address) (C(outside.address6)) of its own an address from its hypervisor's
    C(egress_proxy_outside.pool), once for the whole play, so no two proxies of the fleet get the same one, even on
    hypervisors that converge at once.
  - Stable. A proxy whose domain records an address of the pool (RV(egress_proxies.kvm.kvm_proxy_info#module:proxies[].egress_address))
    keeps it, across replacements. An address recorded on any listed domain is not given to another proxy; it is free
    again once no domain records it (its proxy removed, by C(state=absent) or garbage collection, in an earlier run).
  - New addresses go to the proxies in the play's order of the hypervisors, then by name, each the lowest free
    address of its pool, inside C(egress_proxy_outside.prefix) (C(prefix6) for IPv6) when given. A pool of both families
    gives each proxy an IPv4 C(outside.address) and an IPv6 C(outside.address6), each unless it has its own.
  - A profile whose C(egress_address) (C(egress_address6)) is V(pool) gets one more address of its proxy's pool, inside
    the segment of the proxy's outside address of that family, by the same rules, after the proxies' own addresses. It
    keeps the one its domain records for it
    (RV(egress_proxies.kvm.kvm_proxy_info#module:proxies[].pooled_addresses)), and an address a domain records for a
    profile is given to no other proxy or profile until that domain records it no longer (the domain gone, or its
    policy applied without that profile's pooled address, in an earlier run).
  - Fails before anything is touched, naming the variable, on an entry that is not an address, a range or a prefix (its
    text checked, so a control character, a blank or a scope id is refused), a range that runs backwards, overlapping entries, two
    hypervisors' pools that differ but share addresses, a pool address some proxy has as its own
    C(outside.address), an own address outside the NIC's prefix, a pool that shares addresses with a hypervisor whose
    proxies were not listed, a pool that cannot be proven unique, a profile's V(pool) where the pool has no address
    of that family or the proxy no outside address of it, and a pool too small, naming how many addresses are
    missing.
  - A pool cannot be proven unique when a hypervisor outside the play (C(--limit), a sliced AWX job) shares an inventory
    group other than C(all) with a pooled one, and either the pool is not an inventory variable of the pooled one (the
    play's C(vars:)) or the inventory shows the other no pool (C(include_vars) loads it for the hosts that ran it only).
    C(hostvars) hold neither, so the addresses the other's proxies hold are unknown.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, hostvars, fleet, inventory_hosts
options:
  _input:
    description:
      - The play's hypervisors (C(ansible_play_hosts_all)), each with the fact C(egress_proxy__pool_view)
        (P(egress_proxies.kvm.egress_pool_view#filter)) and the registered C(egress_proxy__pool_listing), the
        result of M(egress_proxies.kvm.kvm_proxy_info) on it.
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  fleet:
    description: C(egress_proxy_fleet), whose entries run on the hypervisor they name.
    type: list
    elements: dict
  inventory_hosts:
    description:
      - The inventory's hosts (C(groups['all'])). One outside the play whose C(egress_proxy_outside.pool) shares
        addresses with a pool of the play makes it fail, since the addresses its proxies hold are unknown.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Allocate the egress addresses of the play's proxies from their pools
  ansible.builtin.set_fact:
    allocated: "{{ ansible_play_hosts_all | egress_proxies.kvm.egress_addresses(hostvars, egress_proxy_fleet, groups['all']) }}"
  run_once: true
"""

RETURN = r"""
_value:
  description:
    - For each hypervisor of the play, by proxy name, the addresses with their prefix lengths it takes from its pool,
      C(address) (IPv4) and C(address6) (IPv6), each where the pool has that family and the proxy none of its own;
      and C(profiles), by profile name, the C(egress_address) and C(egress_address6) (without prefix length) of each
      profile that asks the pool for one.
  type: dict
  sample: {"hv1": {"egress-a": {"address": "203.0.113.10/24", "profiles": {"backup": {"egress_address": "203.0.113.11"}}}}}
"""

VIEW = "egress_proxy__pool_view"
LISTING = "egress_proxy__pool_listing"


def egress_addresses(play_hosts, hostvars, fleet=None, inventory_hosts=None):
    """{hypervisor: {proxy: address/prefix length}} for the play; fails on what the allocation refuses."""
    hypervisors, unlisted, seen, play_pools = [], [], set(), []
    for host in play_hosts:
        variables = hostvars[host]
        view = variables.get(VIEW)
        if view is None:
            continue  # failed before its view was kept: judged by its inventory's pool below
        seen.add(host)
        if view["outside"]["pool"]:
            play_pools.append(PlayPool(host, tuple(variables.get("group_names") or ()),
                                       _inventory_pool(variables) == view["outside"]["pool"]))
        listing = variables.get(LISTING) or {}
        if view["outside"]["pool"] and "proxies" not in listing:
            unlisted.append((host, view["outside"]["pool"]))
            continue
        hypervisors.append({"name": host, "outside": view["outside"], "state": view["state"],
                            "instances": view["instances"], "profiles": view["profiles"],
                            "proxies": listing.get("proxies") or []})
    outside_hosts = []
    for host in inventory_hosts or []:
        if host not in seen:
            # Outside the play, or in it but failed before its view was kept (unreachable): its proxies were not listed.
            outside_hosts.append(OutsideHost(host, tuple(hostvars[host].get("group_names") or ()),
                                             _inventory_pool(hostvars[host])))
        if host not in seen:
            pool = _inventory_pool(hostvars[host])
            if pool:
                unlisted.append((host, pool))
    try:
        check_hidden_pools(play_pools, outside_hosts)
        return fleet_allocation(hypervisors, fleet, unlisted)
    except PoolError as error:
        raise AnsibleFilterError(error.message) from None


def _inventory_pool(variables):
    """The pool a host's ``hostvars`` show (its inventory variables, facts, include_vars), None when they show none."""
    outside = variables.get("egress_proxy_outside")
    return outside.get("pool") if isinstance(outside, dict) else None


class FilterModule:
    def filters(self):
        return {"egress_addresses": egress_addresses}
