# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_conf import squid_settings as checked_squid_settings

DOCUMENTATION = r"""
name: squid_settings
short_description: The values of one egress proxy's squid.conf, checked and normalised
version_added: 0.1.0
description:
  - The values the egress_proxy role's C(squid.conf) template writes, in their normalised form (C(allowed_clients)
    as C(ipaddress) writes them, the port an integer, ports in ASCII digits), so the file holds only what was checked.
  - Fails, naming each value, where P(egress_proxies.kvm.squid_settings_errors#filter) reports a problem (the role
    runs that check first, with the proxy's and the hypervisor's names in its message).
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
extends_documentation_fragment:
  - egress_proxies.kvm.squid_settings
positional: _input, safe_ports, connect_ports, forwarded_for
options:
  forwarded_for:
    description: squid's C(forwarded_for) setting.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Write the client networks squid admits
  ansible.builtin.copy:
    content: "acl egress_clients src {{ settings.allowed_clients | join(' ') }}\n"
    dest: /etc/squid/conf.d/clients.conf
    mode: "0644"
  vars:
    settings: "{{ {'name': 'egress-1', 'port': 3128, 'allowed_clients': ['2001:DB8::/32']}
                  | egress_proxies.kvm.squid_settings(['443'], ['443'], 'delete') }}"
"""

RETURN = r"""
_value:
  description:
    - C(name), C(port) (an integer), C(allowed_clients), C(safe_ports) and C(connect_ports) (lists of strings) and
      C(forwarded_for) as squid.conf gets them; C(listen_addresses) (the inside addresses as C(http_port) writes them,
      an IPv6 one in brackets) and C(outgoing_addresses) (the outside ones), IPv4 first, for a proxy with an outside
      NIC, else empty lists.
    - The policy, C(allowed_domains), C(allowed_networks), C(denied_domains), C(denied_networks) (names lowercase, a
      name under a dotted domain of its list left out, networks collapsed, each IPv4 network with its NAT64 image
      under C(64:ff9b::/96), IPv6 networks without squid's IPv4-mapped range), C(internal_networks) (what
      C(deny_internal) refuses, the proxy's own NICs' networks included, less the allowed networks; empty without
      it), C(unlisted_networks) (every address outside the allowed networks; empty without them), C(mode),
      C(acl_prefix) (empty, the default policy's acls keep their names), C(users) (C(name) and C(hash) each, and
      C(previous_hash) while a password is rotated), C(rotating_users) (those with a C(previous_hash)) and
      C(auth_program) (squid's Basic helper and its arguments, a list).
    - C(profiles), each with the default policy's destination keys, C(mode) and C(acl_prefix) (its acls' names start
      with it), and C(name), C(acl) (the note acl of its requests), C(users) and C(clients) (acl src values).
    - C(http_access), the rules in order (C(rule), what follows C(http_access), and C(comment), a line above it or
      null); C(decisions), whether the rules annotate each request with its decision, profile and rule (with profiles,
      or a policy in report mode), and the annotations they use, C(profile_selects) (C(acl), C(profile)) and
      C(decision_marks) (C(acl), C(decision), C(rule)).
    - C(decisions_counted), whether squid hands the decisions to the counter for the metrics page (with decisions and
      the metrics on), C(page_port), the loopback port the metrics port reaches (the counter's, else the exporter's),
      and C(counter) (C(program), the counter's path in the guest, and C(log), the log squid hands it).
    - C(tls_sni_check) of the default policy and of each profile, whether it checks its CONNECTs' TLS server names;
      C(tls_sni_checked), whether any does; C(ssl_bump), the rules in order (what follows C(ssl_bump)), empty without
      the check; C(squid_package), the package the user-data installs (C(squid-openssl) with the check, else C(squid));
      C(sni_program), the path of the external acl that tells whether a ClientHello named a server.
  type: dict
"""


def squid_settings(proxy, safe_ports, connect_ports, forwarded_for):
    """The values squid.conf gets for ``proxy`` and the role's settings, normalised; fails on any problem."""
    settings, problems = checked_squid_settings(proxy, safe_ports, connect_ports, forwarded_for)
    if problems:
        raise AnsibleFilterError("squid.conf of %s cannot be written: %s" % (settings["name"] or "a proxy", "; ".join(problems)))
    return settings


class FilterModule:
    def filters(self):
        return {"squid_settings": squid_settings}
