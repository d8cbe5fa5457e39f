# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Policy profiles and report mode (issue 43 items 1 and 2), as the role renders them into a proxy's policy.

Each case runs the role's path (proxy_instances, the templates, proxy_set_args) and reads the squid.conf it gives
kvm_proxy_set with squid itself (squid -k parse). A proxy of a user who sets no profile gets exactly what it got
before profiles existed: NO_PROFILE_PROXIES holds kvm_proxy_set's proxies as the role rendered them then.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import fleet_groups, member_view
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import role_set_args

# kvm_proxy_set's proxies of each of NO_PROFILE_CASES as the role rendered them at commit 01cc1a7, before profiles
# existed (the user-data, the policy's files and reload, the NICs): the upgrade must give such a proxy the same ones,
# so that neither its spec digest nor its policy digest changes and no proxy is replaced or rewritten.
NO_PROFILE_PROXIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "no_profile_proxies.json")

IMAGE = {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"}
ENTRY = {"name": "egress-1", "address": "198.51.100.5/24", "outside": {"bridge": "br1", "address": "203.0.113.5/24"}}
BASE = {"egress_proxy_bridge": "br0", "egress_proxy_allowed_clients": ["198.51.100.0/24"],
        "egress_proxy_outside": {"gateway": "203.0.113.1"}, "egress_proxy_image": IMAGE}
USERS = [{"name": "alice", "password": "correct horse"}, {"name": "bob@corp", "password": "battery staple"}]
HA_GROUPS = [{"name": "office", "address": "198.51.100.10", "members": ["egress-1", "egress-2"], "egress_follows": True,
              "egress_address": "203.0.113.10"}]
HA_FOUND = fleet_groups(HA_GROUPS, [
    member_view([ENTRY], HA_GROUPS, {"egress_proxy_outside": BASE["egress_proxy_outside"]}, "hv1"),
    member_view([dict(ENTRY, name="egress-2", address="198.51.100.6/24",
                      outside={"bridge": "br1", "address": "203.0.113.6/24"})],
                HA_GROUPS, {"egress_proxy_outside": BASE["egress_proxy_outside"]}, "hv2")],
    "egress_proxies.kvm.egress_proxy")
# (the entry, the role's variables) of proxies that set no profile, as many of the policy's and the log's shapes as
# squid.conf.j2 writes.
NO_PROFILE_CASES = {
    "dhcp-defaults": ({"name": "egress-1"}, {"egress_proxy_bridge": "br0", "egress_proxy_allowed_clients": ["10.20.0.0/16"],
                                             "egress_proxy_image": IMAGE}),
    "allowlist-users-syslog": (ENTRY, dict(BASE, egress_proxy_users=USERS, egress_proxy_syslog="198.51.100.7:514",
                                           egress_proxy_allowed_destinations=[".example.com", "10.30.4.20", "2001:db8:1::/48"],
                                           egress_proxy_denied_destinations=["secret.example.com", "198.18.20.9"],
                                           egress_proxy_metrics_clients=["198.51.100.9"])),
    "denylist-no-internal-no-metrics": (ENTRY, dict(BASE, egress_proxy_deny_internal=False, egress_proxy_metrics=False,
                                                    egress_proxy_denied_destinations=[".example.org"],
                                                    egress_proxy_safe_ports=["80", "443"])),
    "dual-stack-ha-member-tcp-syslog": (dict(ENTRY, address6="2001:db8:10::5/64"),
                                        dict(BASE, egress_proxy_ha_groups=HA_GROUPS, egress_proxy__ha=HA_FOUND,
                                             egress_proxy_syslog="[2001:db8::7]:6514", egress_proxy_syslog_protocol="tcp",
                                             egress_proxy_allowed_destinations=["0.0.0.0/0", "::/0"],
                                             egress_proxy_dns=["198.51.100.53"])),
}


def no_profile_proxies():
    """{case: kvm_proxy_set's proxy} of NO_PROFILE_CASES, as the role renders them now."""
    return {case: role_set_args([dict(entry)], **overrides)["proxies"][0]
            for case, (entry, overrides) in NO_PROFILE_CASES.items()}


@pytest.fixture(scope="module")
def rendered_without_profiles():
    return no_profile_proxies()


@pytest.mark.parametrize("case", sorted(NO_PROFILE_CASES))
def test_a_proxy_without_profiles_gets_byte_for_byte_what_it_got_before_profiles(case, rendered_without_profiles):
    with open(NO_PROFILE_PROXIES) as handle:
        before = json.load(handle)[case]
    assert rendered_without_profiles[case] == before
