# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # The input of the squid settings filters: the role's check (squid_settings_errors) and what its template
    # writes (squid_settings) take one proxy and the same port lists.
    DOCUMENTATION = r"""
options:
  _input:
    description:
      - One proxy of the role, with its C(name), C(port), C(allowed_clients), C(address) and C(outside), and its policy
        as P(egress_proxies.kvm.proxy_instances#filter) fills it in, C(allowed_destinations), C(denied_destinations),
        C(deny_internal) (default true), C(mode) (C(enforce), the default, or C(report)), C(profiles) (each with its
        C(name), C(users), C(clients), C(allowed_destinations), C(denied_destinations), C(deny_internal) and C(mode))
        and C(users), each user with its C(name) and C(hash).
    type: dict
    required: true
  safe_ports:
    description: Destination ports or ranges squid forwards to.
    type: list
    elements: str
    required: true
  connect_ports:
    description: Destination ports or ranges CONNECT may tunnel to.
    type: list
    elements: str
    required: true
"""
