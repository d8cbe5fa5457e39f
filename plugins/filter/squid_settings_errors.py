# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

DOCUMENTATION = r"""
name: squid_settings_errors
short_description: What is wrong with one egress proxy's squid settings
version_added: 0.2.0
description:
  - Checks the values the egress_proxy role writes into a proxy's C(squid.conf) as squid reads them, on the controller
    and before anything is touched. squid would otherwise refuse the file in the guest, long after the VM was built.
  - C(port) must be a TCP port from 1 to 65535; C(allowed_clients) IPv4 or IPv6 addresses or networks (an address
    with host bits after the prefix is refused too); the safe and CONNECT ports ports or ranges C(low-high) of them.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, safe_ports, connect_ports
options:
  _input:
    description: One proxy of the role, with its C(port) and C(allowed_clients).
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

EXAMPLES = r"""
- name: Fail on a client that is not an address
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join('; ') }}"
  vars:
    problems: "{{ {'port': 3128, 'allowed_clients': ['300.1.1.1/99']} | egress_proxies.kvm.squid_settings_errors(['443'], ['443']) }}"
"""

RETURN = r"""
_value:
  description: One sentence per problem; empty when squid would accept the settings.
  type: list
  elements: str
"""

MAX_PORT = 65535


def _port(text):
    return text.isdigit() and 1 <= int(text) <= MAX_PORT


def _port_or_range(value):
    low, separator, high = str(value).partition("-")
    if not separator:
        return _port(low)
    return _port(low) and _port(high) and int(low) <= int(high)


def _network(value):
    try:
        ipaddress.ip_network(str(value), strict=True)
    except ValueError:
        return False
    return True


def squid_settings_errors(proxy, safe_ports, connect_ports):
    """The problems of ``proxy``'s port and allowed_clients and of the port lists, as sentences ([] when none)."""
    problems = []
    port = proxy.get("port")
    if not _port(str(port)):
        problems.append("port %s is not between 1 and %d" % (port, MAX_PORT))
    clients = proxy.get("allowed_clients") or []
    if not clients:
        problems.append("allowed_clients is empty (set egress_proxy_allowed_clients, or allowed_clients on the instance)")
    bad_clients = [client for client in clients if not _network(client)]
    if bad_clients:
        problems.append("allowed_clients %s are not IPv4 or IPv6 addresses or networks (address/prefix, no host bits)"
                        % ", ".join(repr(str(client)) for client in bad_clients))
    for variable, ports in (("egress_proxy_safe_ports", safe_ports), ("egress_proxy_connect_ports", connect_ports)):
        if not ports:
            problems.append("%s is empty" % variable)
        bad_ports = [port for port in ports if not _port_or_range(port)]
        if bad_ports:
            problems.append("%s %s are not ports (1-%d) or ranges such as 1025-65535" % (
                variable, ", ".join(repr(str(port)) for port in bad_ports), MAX_PORT))
    return problems


class FilterModule:
    def filters(self):
        return {"squid_settings_errors": squid_settings_errors}
