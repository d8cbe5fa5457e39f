# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import member_view

DOCUMENTATION = r"""
name: ha_member_view
short_description: What the HA groups need of one hypervisor's proxies
version_added: 0.1.0
description:
  - The egress_proxy role keeps it as a fact on each hypervisor, where every hypervisor's check of the HA groups
    (P(egress_proxies.kvm.ha_groups#filter)) reads it through C(hostvars), which holds no role defaults or play
    variables but does hold facts. For a hypervisor outside the play, the role calls it with the settings its
    inventory gives.
  - Each proxy named in a group's C(members), with its C(name), C(hypervisor), C(state), C(port), C(address),
    C(address6), C(outside_address) and C(outside_address6) (a pool's too), the hypervisor's settings where the
    entry gives none, and C(metrics_port) (the hypervisor's C(egress_proxy_metrics_port) with C(egress_proxy_metrics)
    on, else none). Nothing else of a proxy, so its users and their passwords stay out of the fact.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, groups, settings, hypervisor
options:
  _input:
    description: The hypervisor's C(egress_proxy_instances), then the C(egress_proxy_fleet) entries naming it.
    type: list
    elements: dict
    required: true
  groups:
    description: C(egress_proxy_ha_groups).
    type: list
    elements: dict
    required: true
  settings:
    description:
      - The hypervisor's C(egress_proxy_state), C(egress_proxy_address), C(egress_proxy_address6),
        C(egress_proxy_port), C(egress_proxy_outside), C(egress_proxy__pool_addresses), C(egress_proxy_metrics) and
        C(egress_proxy_metrics_port), those it has.
    type: dict
    required: true
  hypervisor:
    description: The hypervisor's inventory name.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Keep what the HA groups need of this hypervisor's proxies
  ansible.builtin.set_fact:
    egress_proxy__ha_view: >-
      {{ egress_proxy__desired | egress_proxies.kvm.ha_member_view(egress_proxy_ha_groups,
         {'egress_proxy_state': egress_proxy_state, 'egress_proxy_address': egress_proxy_address,
          'egress_proxy_address6': egress_proxy_address6, 'egress_proxy_port': egress_proxy_port,
          'egress_proxy_outside': egress_proxy_outside}, inventory_hostname) }}
"""

RETURN = r"""
_value:
  description: One entry per proxy of a group, as the description says.
  type: list
  elements: dict
"""


def ha_member_view(entries, groups, settings, hypervisor):
    return member_view(entries, groups, settings, hypervisor)


class FilterModule:
    def filters(self):
        return {"ha_member_view": ha_member_view}
