# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.metrics_targets import hypervisor_targets

DOCUMENTATION = r"""
name: metrics_targets
short_description: The Prometheus scrape targets of one hypervisor's egress proxies
version_added: 0.1.0
description:
  - One C(file_sd) target group per proxy the hypervisor should run (state V(present)) with metrics on. Its target is
    the metrics endpoint at the address libvirt lists for it, or else its static inside address; its labels are
    C(hypervisor), C(proxy) and C(owner).
  - The egress_proxy role writes every hypervisor's groups into one file with
    P(egress_proxies.kvm.metrics_file_sd#filter).
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, instances, hypervisor, owner
options:
  _input:
    description: The proxies M(egress_proxies.kvm.kvm_proxy_info) or M(egress_proxies.kvm.kvm_proxy_set) returned.
    type: list
    elements: dict
    required: true
  instances:
    description:
      - The role's instances (P(egress_proxies.kvm.proxy_instances#filter)), each with C(name), C(state), C(address),
        C(metrics) and C(metrics_port).
    type: list
    elements: dict
    required: true
  hypervisor:
    description: The inventory name of the hypervisor, the C(hypervisor) label.
    type: str
    required: true
  owner:
    description: The deployment's owner (C(egress_proxy_uid)), the C(owner) label.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Keep this hypervisor's scrape targets
  ansible.builtin.set_fact:
    targets: "{{ listing.proxies | egress_proxies.kvm.metrics_targets(instances, inventory_hostname, 'my-deployment') }}"
"""

RETURN = r"""
_value:
  description:
    - C(groups), the target groups (each C(targets), one C(address:port), and C(labels)), and C(unaddressed), the names
      of the proxies without a known address (DHCP, not running yet), which cannot be scraped.
  type: dict
"""


def metrics_targets(listed, instances, hypervisor, owner):
    """The target groups of ``hypervisor`` and the proxies without an address."""
    groups, unaddressed = hypervisor_targets(hypervisor, owner, instances, listed)
    return {"groups": groups, "unaddressed": unaddressed}


class FilterModule:
    def filters(self):
        return {"metrics_targets": metrics_targets}
