# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import HaGroupError
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.metrics_targets import checked_groups, hypervisor_targets

DOCUMENTATION = r"""
name: metrics_targets
short_description: The Prometheus scrape targets of one hypervisor's egress proxies
version_added: 0.1.0
description:
  - One C(file_sd) target group per proxy the hypervisor should run (state V(present)) with metrics on. Its target is
    the metrics endpoint at the address libvirt lists for it, or else its static inside address; its labels are
    C(hypervisor), C(proxy) and C(owner), and C(group) for a member of an HA group (O(ha_groups)).
  - One more target group per HA group, written by one hypervisor, the group's client address at its members' metrics
    port (whichever member holds the address answers there), labelled C(hypervisor), C(group), C(owner) and
    C(target=group-address), without a C(proxy) label. The hypervisor that writes it is the one (of O(play)) that runs
    the group's first listed member with state V(present) and metrics on; its metrics port is that member's.
  - The egress_proxy role writes every hypervisor's groups into one file with
    P(egress_proxies.kvm.metrics_file_sd#filter).
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, instances, hypervisor, owner, ha_groups, play
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
  ha_groups:
    description:
      - The HA groups, C(egress_proxy_ha_groups) of the egress_proxy role, checked as the role checks them; a bad entry
        fails, naming it (C(egress_proxy_ha_groups[1].name ...)). A proxy in two groups is refused too.
      - Empty or V(null), no group label and no group target, as for a fleet without groups.
    type: list
    elements: dict
  play:
    description:
      - The instances of every hypervisor whose targets this run writes, by its inventory name, to find the
        hypervisor of each group's first listed member. This hypervisor's are O(instances), whatever this gives for it;
        V(null), those alone.
    type: dict
"""

EXAMPLES = r"""
- name: Keep this hypervisor's scrape targets
  ansible.builtin.set_fact:
    targets: "{{ listing.proxies | egress_proxies.kvm.metrics_targets(instances, inventory_hostname, 'my-deployment') }}"

- name: Keep this hypervisor's scrape targets, with the HA groups' labels and targets
  ansible.builtin.set_fact:
    targets: >-
      {{ listing.proxies | egress_proxies.kvm.metrics_targets(instances, inventory_hostname, 'my-deployment',
           ha_groups=egress_proxy_ha_groups, play=dict(ansible_play_hosts | zip(ansible_play_hosts
             | map('extract', hostvars) | map(attribute='instances', default=[])))) }}
"""

RETURN = r"""
_value:
  description:
    - C(groups), the target groups (each C(targets), one C(address:port), and C(labels)), and C(unaddressed), the names
      of the proxies without a known address (DHCP, not running yet), which cannot be scraped.
  type: dict
"""


def metrics_targets(listed, instances, hypervisor, owner, ha_groups=None, play=None):
    """The target groups of ``hypervisor`` and the proxies without an address."""
    try:
        groups = checked_groups(ha_groups)
    except HaGroupError as error:
        raise AnsibleFilterError("metrics_targets: %s" % error) from None
    if play is not None and not isinstance(play, dict):
        raise AnsibleFilterError("metrics_targets: play must be a mapping of hypervisors to their instances, got %s"
                                 % type(play).__name__)
    targets, unaddressed = hypervisor_targets(hypervisor, owner, instances, listed, groups, play)
    return {"groups": targets, "unaddressed": unaddressed}


class FilterModule:
    def filters(self):
        return {"metrics_targets": metrics_targets}
