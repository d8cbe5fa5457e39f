# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_proxy import kvm_proxy_set_errors as module_errors

DOCUMENTATION = r"""
name: kvm_proxy_set_errors
short_description: What kvm_proxy_set would refuse in a set of arguments, checked on the controller
version_added: 0.1.0
description:
  - Runs the validation of M(egress_proxies.kvm.kvm_proxy_set) (its argument spec, then its own checks of every proxy
    and of the set's options) on a dictionary of the module's arguments, without connecting anywhere.
  - Needs neither lxml nor any other library the module needs on the hypervisor; ansible-core alone runs it.
  - The egress_proxy role runs the same validation on the arguments it is about to pass
    (P(egress_proxies.kvm.proxy_set_args#filter)), so bad input fails before the role's first task that talks to
    libvirt, with the module's own message, and the role cannot check less than the module.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input
options:
  _input:
    description: The arguments of a M(egress_proxies.kvm.kvm_proxy_set) task, as the task would pass them.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse the set before touching the hypervisor
  ansible.builtin.assert:
    that: set_errors | length == 0
    fail_msg: "{{ set_errors | join('; ') }}"
  vars:
    set_errors: "{{ {'uid': 'egress-eu', 'bridge': 'br0', 'proxies': [{'name': 'egress-eu-1', 'memory_mib': 64}]}
                    | egress_proxies.kvm.kvm_proxy_set_errors }}"
"""

RETURN = r"""
_value:
  description: The module's error messages; empty when the module would accept the arguments.
  type: list
  elements: str
"""


def kvm_proxy_set_errors(arguments):
    """The messages kvm_proxy_set would fail with for ``arguments``, before connecting: [] when it accepts them."""
    return module_errors(arguments)


class FilterModule:
    def filters(self):
        return {"kvm_proxy_set_errors": kvm_proxy_set_errors}
