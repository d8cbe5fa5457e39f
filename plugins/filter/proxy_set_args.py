# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_proxy import RoleInputError, set_arguments

DOCUMENTATION = r"""
name: proxy_set_args
short_description: The arguments of kvm_proxy_set for one hypervisor of the egress_proxy role, validated by the module
version_added: 0.1.0
description:
  - Turns the instances of one hypervisor (from P(egress_proxies.kvm.proxy_instances#filter)) and the role's variables
    into the O(egress_proxies.kvm.kvm_proxy_set#module:proxies) of M(egress_proxies.kvm.kvm_proxy_set), each instance
    one entry, beside the set-wide O(options) the role's converge task writes.
  - Then runs the module's own validation on them (its argument spec, then its checks of every proxy and of the set's
    options, as P(egress_proxies.kvm.kvm_proxy_set_errors#filter) does), without connecting anywhere, and fails with
    the module's message and the hypervisor's name; so the role refuses whatever the module would, before its first
    task that talks to libvirt.
  - An option equal to O(omitted) is left out, in an option's mapping too, as Ansible leaves it out of a task's
    arguments, so the module's default applies.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, variables
extends_documentation_fragment:
  - egress_proxies.kvm.egress_proxy_role
options:
  _input:
    description: The hypervisor's instances, as P(egress_proxies.kvm.proxy_instances#filter) returns them.
    type: list
    elements: dict
    required: true
  options:
    description:
      - The set-wide options of M(egress_proxies.kvm.kvm_proxy_set) (all but O(egress_proxies.kvm.kvm_proxy_set#module:proxies)),
        as the converge task passes them.
    type: dict
    default: {}
  omitted:
    description: The play's C(omit), which marks the options the task leaves out.
    type: raw
  texts:
    description:
      - The role's user-data and squid.conf of each instance to run, by the instance's name, as the role's template
        C(proxy_texts.j2) renders them for the whole set at once; each instance's C(user_data) and C(squid_conf).
        The squid.conf and the users' file become the proxy's
        O(egress_proxies.kvm.kvm_proxy_set#module:proxies[].policy). Unused with C(egress_proxy_user_data), which every
        proxy gets instead, without a policy.
    type: dict
"""

EXAMPLES = r"""
- name: Converge the proxies of this hypervisor
  vars:
    options: &options
      uid: "{{ egress_proxy_uid }}"
      image: "{{ egress_proxy_image }}"
      cpu_mode: "{{ egress_proxy_cpu_mode | default(omit, true) }}"
    set_args: "{{ instances | egress_proxies.kvm.proxy_set_args(egress_proxy__variables, options=options, omitted=omit, texts=texts) }}"
  egress_proxies.kvm.kvm_proxy_set:
    <<: *options
    proxies: "{{ set_args.proxies }}"
"""

RETURN = r"""
_value:
  description: The arguments of M(egress_proxies.kvm.kvm_proxy_set), by option name.
  type: dict
"""


def proxy_set_args(instances, variables, options=None, omitted=None, texts=None):
    """kvm_proxy_set's arguments for one hypervisor, checked by the module's validation; fails on what it refuses."""
    try:
        return set_arguments(instances, variables, options, omitted, texts)
    except RoleInputError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"proxy_set_args": proxy_set_args}
