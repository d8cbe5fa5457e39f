# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_pool import pool_view

DOCUMENTATION = r"""
name: egress_pool_view
short_description: What the egress address allocation needs of one hypervisor's variables
version_added: 0.1.0
description:
  - The egress_proxy role keeps it as a fact on each hypervisor, where the allocation of the whole play
    (P(egress_proxies.kvm.egress_addresses#filter)) reads it through C(hostvars), which holds no role defaults
    or play variables but does hold facts.
  - The pool, prefix and prefix6 of C(egress_proxy_outside), C(egress_proxy_state), each instance's C(name),
    C(state), C(outside.address), C(outside.address6) and own C(profiles) in their order, and C(egress_proxy_profiles);
    of a profile only its C(name), C(egress_address) and C(egress_address6). Nothing else of an instance, so its users
    and their passwords stay out of the fact.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, outside, state, profiles
options:
  _input:
    description: C(egress_proxy_instances).
    type: list
    elements: dict
    required: true
  outside:
    description: C(egress_proxy_outside).
    type: dict
    required: true
  state:
    description: C(egress_proxy_state).
    type: str
    required: true
  profiles:
    description: C(egress_proxy_profiles), the profiles of an instance that gives none of its own.
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: Keep what the allocation needs of this hypervisor
  ansible.builtin.set_fact:
    egress_proxy__pool_view: >-
      {{ egress_proxy_instances | egress_proxies.kvm.egress_pool_view(egress_proxy_outside, egress_proxy_state,
                                                                      egress_proxy_profiles) }}
"""

RETURN = r"""
_value:
  description:
    - C(outside) (C(pool), C(prefix), C(prefix6)), C(state), C(instances) (each C(name), C(state), C(outside.address),
      C(outside.address6), and C(profiles) when it gives its own) and C(profiles), each profile as C(name),
      C(egress_address) and C(egress_address6).
  type: dict
"""


def egress_pool_view(instances, outside, state, profiles=None):
    return pool_view(instances, outside, state, profiles)


class FilterModule:
    def filters(self):
        return {"egress_pool_view": egress_pool_view}
