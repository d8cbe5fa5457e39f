# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_proxy import report

DOCUMENTATION = r"""
name: proxy_report
short_description: What the egress_proxy role shows of a kvm_proxy_set result
version_added: 0.1.0
description:
  - One line per proxy of the result's C(proxies) (its id, state and address, and its static egress addresses where
    they are others, as with an outside NIC; in check mode what the run would do
    to it, in a real run what was done to one that is gone), and the garbage collection's summary (the proxies it
    removed, those it kept with the module's reason, those of other owners).
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, check_mode, hypervisor
options:
  _input:
    description: The registered result of a M(egress_proxies.kvm.kvm_proxy_set) task.
    type: dict
    required: true
  check_mode:
    description:
      - Whether the task ran in check mode (C(ansible_check_mode)); the lines then say what the run would do.
    type: bool
    default: false
  hypervisor:
    description:
      - The inventory host the result is of; given, the value has C(results) too.
    type: str
"""

EXAMPLES = r"""
- name: Show the proxies of this hypervisor
  vars:
    shown: "{{ converged | egress_proxies.kvm.proxy_report(ansible_check_mode) }}"
  ansible.builtin.debug:
    msg: "{{ shown.proxies }}"

- name: Show what the garbage collection removed and kept
  ansible.builtin.debug:
    msg: "{{ (converged | egress_proxies.kvm.proxy_report(ansible_check_mode)).gc }}"
  when: converged.removed or converged.spared

- name: Publish what was done to each proxy in the job's stats, one list across the hypervisors
  ansible.builtin.set_stats:
    data:
      egress_proxy_results: "{{ (converged | egress_proxies.kvm.proxy_report(ansible_check_mode, inventory_hostname)).results }}"
    per_host: false
    aggregate: true
"""

RETURN = r"""
_value:
  description:
    - C(proxies), the lines (list of strings), and C(gc), the garbage collection's summary (a string).
    - With O(hypervisor), C(results) too, one entry per proxy of the result's C(proxies) and C(removed)
      with its C(hypervisor), C(name), C(action) (its C(outcome)), C(state) and C(ip).
  type: dict
"""


def proxy_report(converged, check_mode=False, hypervisor=None):
    """The lines the role shows for kvm_proxy_set's result ``converged`` (and, for ``hypervisor``, what it publishes)."""
    return report(converged, check_mode, hypervisor)


class FilterModule:
    def filters(self):
        return {"proxy_report": proxy_report}
