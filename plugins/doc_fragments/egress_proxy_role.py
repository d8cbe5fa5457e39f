# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # The option the egress_proxy role's data filters share: proxy_instances and proxy_set_args read the role's
    # variables from one mapping (egress_proxy__variables in the role's vars/main.yml).
    DOCUMENTATION = r"""
options:
  variables:
    description:
      - The role's variables by their names (C(egress_proxy_state), C(egress_proxy_bridge), ...), and
        C(inventory_hostname), the hypervisor the messages name.
    type: dict
    required: true
"""
