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
  - The pool, prefix and prefix6 of C(egress_proxy_outside), C(egress_proxy_state), and each instance's C(name),
    C(state), C(outside.address) and C(outside.address6) in their order. Nothing else of an instance, so its users and their passwords stay out of the fact.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, outside, state
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
"""

EXAMPLES = r"""
- name: Keep what the allocation needs of this hypervisor
  ansible.builtin.set_fact:
    egress_proxy__pool_view: "{{ egress_proxy_instances | egress_proxies.kvm.egress_pool_view(egress_proxy_outside, egress_proxy_state) }}"
"""

RETURN = r"""
_value:
  description:
    - C(outside) (C(pool), C(prefix), C(prefix6)), C(state) and C(instances) (each C(name), C(state), C(outside.address),
      C(outside.address6)).
  type: dict
"""


def egress_pool_view(instances, outside, state):
    return pool_view(instances, outside, state)


class FilterModule:
    def filters(self):
        return {"egress_pool_view": egress_pool_view}
