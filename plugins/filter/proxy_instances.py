# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_proxy import RoleInputError, role_instances

DOCUMENTATION = r"""
name: proxy_instances
short_description: The egress_proxy role's instances of one hypervisor, filled in and checked
version_added: 0.1.0
description:
  - Fills in the role-wide settings of each instance of one hypervisor (C(egress_proxy_state), C(egress_proxy_vcpus),
    and so on, for every key an instance does not give), the way the egress_proxy role reads its variables.
  - Then makes the checks only the role can make on its own variables, before anything is rendered or touched, and
    fails with a sentence naming the hypervisor, the proxy and the variable. Each instance's name and the owner;
    each user's password (not empty, no control character, at most 511 bytes in UTF-8; never quoted);
    for the instances to run, the image and exactly one of bridge and network, the values the role's C(squid.conf)
    and user-data write (the check of P(egress_proxies.kvm.squid_settings_errors#filter)), the outside NIC, static
    addresses no two NICs share, the port C(egress_proxy_wait_for_port) waits for; the role's own user-data and
    vendor-data (the check of P(egress_proxies.kvm.cloud_init_data_errors#filter)).
  - P(egress_proxies.kvm.proxy_set_args#filter) then turns the instances into the arguments of
    M(egress_proxies.kvm.kvm_proxy_set), with the module's own validation.
  - With O(removing) (the destroy entry point) every instance is removed, and only the names and the owner are
    checked.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
extends_documentation_fragment:
  - egress_proxies.kvm.egress_proxy_role
positional: _input, variables
options:
  _input:
    description: The hypervisor's C(egress_proxy_instances), then the C(egress_proxy_fleet) entries naming it.
    type: list
    elements: dict
    required: true
  removing:
    description: For the destroy entry point, where every instance is removed.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Fill in and check the proxies of this hypervisor
  ansible.builtin.set_fact:
    instances: "{{ egress_proxy_instances | egress_proxies.kvm.proxy_instances(egress_proxy__variables) }}"
"""

RETURN = r"""
_value:
  description:
    - Each instance with every key of C(egress_proxy_instances) set (C(mac) empty and C(outside) the instance's own
      NIC settings when it gives none).
    - C(users) holds each user's C(name) and C(hash) (SHA-512-crypt, as squid's C(basic_ncsa_auth) reads it), never
      the password. The hash is a secret too, as a guessed password can be tested against it; the role keeps the
      instances as a fact with C(no_log).
  type: list
  elements: dict
"""


def proxy_instances(desired, variables, removing=False):
    """The instances of one hypervisor with the role-wide settings filled in; fails on what the role refuses."""
    try:
        return role_instances(desired, variables, removing)
    except RoleInputError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"proxy_instances": proxy_instances}
