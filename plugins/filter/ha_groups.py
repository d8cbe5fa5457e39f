# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import fleet_groups, fleet_listings

DOCUMENTATION = r"""
name: ha_groups
short_description: The egress_proxy role's HA groups checked across the fleet, with their members found
version_added: 0.1.0
description:
  - Checks C(egress_proxy_ha_groups) as text first (control characters, line feeds, blanks, scope ids and digits of
    other scripts are refused in every field), then finds each member wherever it is listed. On each hypervisor of the
    play that is the fact C(egress_proxy__ha_view) it keeps (P(egress_proxies.kvm.ha_member_view#filter)); on one
    outside the play (C(--limit)) its C(egress_proxy_instances), the C(egress_proxy_fleet) entries naming it and the
    settings its inventory gives.
  - Refuses, naming the entry and its field, an address outside the members' segment or equal to a proxy's or another
    group's, members on different segments, a group of one, a member in two groups on one segment, an unknown member,
    one listed on two hypervisors, one without a static inside address, members on different ports or metrics ports, a C(password) (VRRP version 3
    has none), and two groups on one segment with one VRRP id.
  - Derives each group's VRRP id, unless given, from the owner, the segment and the group's name, and each member's
    priority, unless given, from its place in C(members) (200, 190, ...).
  - Never fails itself. The role's check of the proxies
    (P(egress_proxies.kvm.proxy_instances#filter)) fails with the problems.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, hostvars, play_hosts, inventory_hosts, fleet, uid
options:
  _input:
    description: C(egress_proxy_ha_groups).
    type: list
    elements: dict
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  play_hosts:
    description: The play's hypervisors (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  inventory_hosts:
    description: The inventory's hosts (C(groups['all'])).
    type: list
    elements: str
    required: true
  fleet:
    description: C(egress_proxy_fleet).
    type: list
    elements: dict
    required: true
  uid:
    description: C(egress_proxy_uid), which the derived VRRP ids depend on.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Check the HA groups
  ansible.builtin.set_fact:
    groups_checked: >-
      {{ egress_proxy_ha_groups | egress_proxies.kvm.ha_groups(hostvars, ansible_play_hosts_all, groups['all'],
         egress_proxy_fleet, egress_proxy_uid) }}
"""

RETURN = r"""
_value:
  description:
    - C(groups), each group with its C(name), C(index), C(vrrp_id), C(segment), C(port), C(address) and C(address6)
      with the segment's prefix length, C(egress_address) and C(egress_address6), and C(members) (C(name),
      C(hypervisor), C(address), C(priority)); empty when there are C(problems), the sentences the role fails with.
    - C(spans_hypervisors), whether a group's members run on more than one hypervisor (the role's converge then runs
      one hypervisor at a time).
  type: dict
"""


def ha_groups(groups, hostvars, play_hosts, inventory_hosts, fleet, uid):
    return fleet_groups(groups, fleet_listings(groups, hostvars, play_hosts, inventory_hosts, fleet), uid)


class FilterModule:
    def filters(self):
        return {"ha_groups": ha_groups}
