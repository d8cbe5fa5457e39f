# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.module_utils._targets.file_sd import TargetsError, file_sd

DOCUMENTATION = r"""
name: metrics_file_sd
short_description: The Prometheus file_sd file of a fleet of egress proxies
version_added: 0.1.0
description:
  - Every hypervisor's target groups (P(egress_proxies.kvm.metrics_targets#filter)) in one list, sorted by hypervisor
    and proxy, so that an unchanged fleet gives the same file.
  - A hypervisor of the inventory that gave no groups this run (unreachable, failed, left out by C(--limit)) keeps
    the groups the file had for it, so its proxies go on being scraped and alerted on; a hypervisor that is no longer
    in O(inventory_hosts) is left out. With O(inventory_hosts=null) every other hypervisor keeps its groups.
  - The join of M(egress_proxies.kvm.proxy_file_sd), which the egress_proxy role writes the file with; that module
    reads, joins and writes under a lock on the file's host, so runs at once keep each other's groups. Use this filter
    where one run alone writes the file.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, previous, inventory_hosts
options:
  _input:
    description: The target groups of each hypervisor listed this run, by its inventory name.
    type: dict
    required: true
  previous:
    description: The file's current text; V(null) when there is none.
    type: str
  inventory_hosts:
    description: Every host of the inventory (C(groups.all)); V(null) keeps the groups of every hypervisor not in O(_input).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Write the scrape targets
  ansible.builtin.copy:
    content: "{{ fresh | egress_proxies.kvm.metrics_file_sd(previous, groups.all) | to_nice_json }}\n"
    dest: /etc/prometheus/egress-proxies.json
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The target groups, each C(targets) and C(labels) (C(hypervisor), C(proxy), C(owner)).
  type: list
  elements: dict
"""


def metrics_file_sd(fresh, previous, inventory_hosts):
    """The file_sd groups of the fleet."""
    try:
        return file_sd(fresh, previous, inventory_hosts)
    except TargetsError as error:
        raise AnsibleFilterError("The scrape targets cannot be joined with the file as it is: %s." % error) from None


class FilterModule:
    def filters(self):
        return {"metrics_file_sd": metrics_file_sd}
