# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_conf import authorized_keys_problems, squid_settings

DOCUMENTATION = r"""
name: squid_settings_errors
short_description: What is wrong with one egress proxy's squid settings and SSH keys
version_added: 0.1.0
description:
  - Checks the values the egress_proxy role writes into a proxy's C(squid.conf) as squid reads them, on the controller
    and before anything is touched. squid would otherwise refuse the file in the guest, long after the VM was built.
  - Each value is checked as text before it is parsed, so that none can write a line or a word of its own into the
    file (a line feed, a blank, an IPv6 C(%scope), digits of another script, such as superscript or Arabic-Indic ones).
  - C(name) must be a VM name; C(port) a TCP port from 1 to 65535; C(allowed_clients) IPv4 or IPv6 addresses or
    networks (an address with host bits after the prefix is refused too); C(address) and C(outside.address), when
    given, IPv4 addresses with their prefix length; the safe and CONNECT ports ports or ranges C(low-high) of them,
    in ASCII digits; O(forwarded_for) one of squid's C(forwarded_for) values; each of C(allowed_destinations) and
    C(denied_destinations) a host name, a domain with its leading dot, or an IPv4 or IPv6 address or network; each user
    a name of letters, digits and C(. _ @ + -) given once, with the hash the role wrote; C(mode) C(enforce) or
    C(report); each of C(profiles) a mapping of its known keys, named once (1-32 lowercase letters, digits and
    hyphens, not C(default)), applying to users of the proxy or clients within C(allowed_clients), its destinations,
    C(deny_internal) and C(mode) checked as the default policy's; C(tls_sni_check), the proxy's and each profile's, a
    boolean, and not on for a policy whose allowlist has addresses but no names.
  - Each of O(ssh_authorized_keys) must be one line. cloud-init writes a key as a line of C(authorized_keys), where a
    line feed (or a carriage return, NUL, U+2028 or another control character) inside it would write a line, another
    key or one with options such as C(command=), of its own.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
extends_documentation_fragment:
  - egress_proxies.kvm.squid_settings
positional: _input, safe_ports, connect_ports, forwarded_for, ssh_authorized_keys
options:
  forwarded_for:
    description: squid's C(forwarded_for) setting; not checked when not given.
    type: str
  ssh_authorized_keys:
    description: The public SSH keys the role's user-data gives the image's default user (C(egress_proxy_ssh_authorized_keys)).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Fail on a client that is not an address
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join('; ') }}"
  vars:
    problems: "{{ {'name': 'egress-1', 'port': 3128, 'allowed_clients': ['300.1.1.1/99']} | egress_proxies.kvm.squid_settings_errors(['443'], ['443']) }}"
"""

RETURN = r"""
_value:
  description: One sentence per problem; empty when squid would accept the settings.
  type: list
  elements: str
"""


def squid_settings_errors(proxy, safe_ports, connect_ports, forwarded_for=None, ssh_authorized_keys=()):
    """The problems of the values ``proxy`` and the role's settings write into squid.conf and the user-data, as
    sentences ([] when none)."""
    return squid_settings(proxy, safe_ports, connect_ports, forwarded_for)[1] + authorized_keys_problems(ssh_authorized_keys)


class FilterModule:
    def filters(self):
        return {"squid_settings_errors": squid_settings_errors}
