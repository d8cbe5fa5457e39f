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

import ipaddress
import json
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_instances import proxy_instances
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.guest_program import (
    ANSWER_SNI_GIVEN,
    COUNT_DECISIONS,
    program_text,
)
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import fleet_groups, member_view
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_conf import (
    COUNTED_LOG,
    DECISIONS_PORT,
    EXPORTER_PORT,
    internal_networks,
)
from ansible_collections.egress_proxies.kvm.tests.integration.role_examples import FENCE, inventory_files
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import (
    COUNTER_PROGRAM,
    EGRESS_ADDRESSES,
    EGRESS_ADDRESSES_PROGRAM,
    REPO_ROOT,
    SNI_PROGRAM,
    SQUID_CONF,
    SQUID_DROP_IN,
    policy_files,
    role_set_args,
    role_variables,
    squid_parsed,
    user_data_document,
)
from ansible_collections.egress_proxies.kvm.tests.unit.roles.test_egress_proxy_policy import acl_networks

# kvm_proxy_set's proxies of each of NO_PROFILE_CASES as the role rendered them at commit 6f07a33, before profiles
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


CI = {"name": "ci", "users": ["alice"], "allowed_destinations": [".debian.org", "10.30.4.20"]}
BACKUP = {"name": "backup", "clients": ["198.51.100.64/26", "198.51.100.7"], "allowed_destinations": ["bucket.example"],
          "mode": "report"}
LAB = {"name": "lab", "users": ["bob@corp"], "clients": ["198.51.100.128/25"], "denied_destinations": [".example.org"],
       "deny_internal": False}


def squid_conf(entry=None, **overrides):
    """The squid.conf kvm_proxy_set gets for ``entry`` (ENTRY) with BASE, USERS and ``overrides``."""
    (proxy,) = role_set_args([dict(entry or ENTRY)], **dict(BASE, egress_proxy_users=USERS, **overrides))["proxies"]
    return policy_files(proxy)[SQUID_CONF]["content"]


def lines(parsed, *starts):
    """The directives of ``parsed`` (squid_parsed's) that start with one of ``starts``."""
    return [line for line in parsed if line.startswith(starts)]


# What every request passes before any profile, each rule annotating the request it decides (profile=-): the metrics
# port and the cache manager, the ports, the clients, the users (the annotation first: squid asks for credentials on a
# deny whose last acl is proxy_auth).
GATE_RULES = [
    "http_access allow egress_metrics egress_metrics_clients !manager decision_allow_metrics",
    "http_access deny egress_metrics decision_deny_metrics_clients",
    "http_access allow egress_manager manager localhost decision_allow_manager",
    "http_access deny egress_manager decision_deny_manager",
    "http_access deny manager decision_deny_manager",
    "http_access deny !safe_ports decision_deny_safe_ports",
    "http_access deny CONNECT !connect_ports decision_deny_connect_ports",
    "http_access deny !egress_clients decision_deny_allowed_clients",
    "http_access deny decision_deny_users !egress_users",
]
# The default policy of BASE (no allowlist, internal destinations refused), last.
DEFAULT_RULES = ["http_access deny internal_destinations decision_deny_deny_internal",
                 "http_access allow all decision_allow_no_allowlist"]
# (profiles, the role's other overrides, the http_access rules after GATE_RULES).
COMBINATIONS = {
    "one-user-profile": ([CI], {}, [
        "http_access deny !profile_chosen profile_ci_users profile_ci_select !all",
        "http_access deny !profile_chosen profile_default_select !all",
        "http_access deny profile_ci profile_ci_internal_destinations decision_deny_deny_internal",
        "http_access allow profile_ci profile_ci_allowed_domains decision_allow_allowed_destinations",
        "http_access allow profile_ci profile_ci_allowed_networks !profile_ci_unlisted_networks "
        "decision_allow_allowed_destinations",
        "http_access deny profile_ci decision_deny_not_allowed"] + DEFAULT_RULES),
    "clients-profile-in-report-mode": ([BACKUP], {}, [
        "http_access deny !profile_chosen profile_backup_clients profile_backup_select !all",
        "http_access deny !profile_chosen profile_default_select !all",
        "http_access deny profile_backup profile_backup_internal_destinations decision_deny_deny_internal",
        "http_access allow profile_backup profile_backup_allowed_domains decision_allow_allowed_destinations",
        "http_access allow profile_backup decision_would_deny_not_allowed"] + DEFAULT_RULES),
    "users-and-clients-denylist-no-internal": ([LAB], {}, [
        "http_access deny !profile_chosen profile_lab_users profile_lab_select !all",
        "http_access deny !profile_chosen profile_lab_clients profile_lab_select !all",
        "http_access deny !profile_chosen profile_default_select !all",
        "http_access deny profile_lab profile_lab_denied_domains decision_deny_denied_destinations",
        "http_access allow profile_lab decision_allow_no_allowlist"] + DEFAULT_RULES),
    "three-profiles-default-in-report-mode": ([CI, BACKUP, LAB], {
        "egress_proxy_mode": "report", "egress_proxy_allowed_destinations": ["www.example.com"],
        "egress_proxy_denied_destinations": ["198.18.20.9"]}, [
        "http_access deny !profile_chosen profile_ci_users profile_ci_select !all",
        "http_access deny !profile_chosen profile_backup_clients profile_backup_select !all",
        "http_access deny !profile_chosen profile_lab_users profile_lab_select !all",
        "http_access deny !profile_chosen profile_lab_clients profile_lab_select !all",
        "http_access deny !profile_chosen profile_default_select !all",
        "http_access deny profile_ci profile_ci_internal_destinations decision_deny_deny_internal",
        "http_access allow profile_ci profile_ci_allowed_domains decision_allow_allowed_destinations",
        "http_access allow profile_ci profile_ci_allowed_networks !profile_ci_unlisted_networks "
        "decision_allow_allowed_destinations",
        "http_access deny profile_ci decision_deny_not_allowed",
        "http_access deny profile_backup profile_backup_internal_destinations decision_deny_deny_internal",
        "http_access allow profile_backup profile_backup_allowed_domains decision_allow_allowed_destinations",
        "http_access allow profile_backup decision_would_deny_not_allowed",
        "http_access deny profile_lab profile_lab_denied_domains decision_deny_denied_destinations",
        "http_access allow profile_lab decision_allow_no_allowlist",
        "http_access allow denied_networks decision_would_deny_denied_destinations",
        "http_access deny internal_destinations decision_deny_deny_internal",
        "http_access allow allowed_domains decision_allow_allowed_destinations",
        "http_access allow all decision_would_deny_not_allowed"]),
    "no-profile-default-in-report-mode": ([], {"egress_proxy_mode": "report"}, [
        "http_access deny !profile_chosen profile_default_select !all",
        "http_access deny internal_destinations decision_deny_deny_internal",
        "http_access allow all decision_allow_no_allowlist"]),
}


@pytest.mark.parametrize("case", sorted(COMBINATIONS))
def test_each_combination_of_profiles_and_modes_renders_its_rules_in_order_and_squid_accepts_it(case, tmp_path):
    profiles, overrides, rules = COMBINATIONS[case]
    squid = squid_conf(egress_proxy_profiles=profiles, **overrides)
    parsed = squid_parsed(squid, tmp_path)
    assert [line for line in parsed if line.startswith("http_access")] == GATE_RULES + rules
    # Every rule that decides a request annotates it with an acl the file defines, and each profile's requests are
    # those annotated with its name.
    annotations = {line.split()[1]: line.split(None, 3)[3] for line in parsed if " annotate_transaction " in line}
    for profile in profiles:
        assert "acl profile_%s note profile %s" % (profile["name"], profile["name"]) in parsed
        assert annotations["profile_%s_select" % profile["name"]] == "profile=" + profile["name"]
    assert annotations["profile_default_select"] == "profile=default"
    used = {word for rule in GATE_RULES + rules for word in rule.split() if word.startswith("decision_")}
    assert used == {name for name in annotations if name.startswith("decision_")}
    for name in used:
        decision, rule = name[len("decision_"):].split("_", 1) if not name.startswith("decision_would_deny_") else (
            "would_deny", name[len("decision_would_deny_"):])
        assert annotations[name] == "decision=%s rule=%s" % (decision, rule)


def test_a_profiles_identity_is_its_users_and_its_client_networks_as_squid_matches_them(tmp_path):
    parsed = squid_parsed(squid_conf(egress_proxy_profiles=[LAB, dict(BACKUP, clients=["::ffff:198.51.100.64/122"])],
                                     egress_proxy_allowed_clients=["198.51.100.0/24", "2001:db8:10::/64"]), tmp_path)
    assert lines(parsed, "acl profile_lab_users", "acl profile_lab_clients", "acl profile_backup_clients") == [
        "acl profile_lab_users proxy_auth bob@corp", "acl profile_lab_clients src 198.51.100.128/25",
        # An IPv4-mapped network is the IPv4 clients it maps, as in allowed_clients.
        "acl profile_backup_clients src 198.51.100.64/26"]
    # The proxy_auth acls follow the auth_param that makes them mean the users' file.
    assert parsed.index("acl profile_lab_users proxy_auth bob@corp") > parsed.index("acl egress_users proxy_auth REQUIRED")


def test_each_profile_denies_internal_destinations_by_the_default_policys_own_networks():
    """The internal networks of a profile are the default policy's computation (internal_networks, the proxy's NICs'
    networks with them) less that profile's allowed networks, judged by a dst acl on every address a name resolves to."""
    outside = dict(ENTRY, outside={"bridge": "br1", "address": "192.0.43.5/28", "gateway": "192.0.43.1"})
    squid = squid_conf(outside, egress_proxy_profiles=[CI, dict(BACKUP, allowed_destinations=[])])
    found = {name: acl_networks(squid, name) for name in (
        "internal_destinations", "profile_ci_internal_destinations", "profile_backup_internal_destinations")}
    own = ipaddress.ip_network("192.0.43.0/28")
    assert own in found["internal_destinations"] and own in found["profile_ci_internal_destinations"]
    assert found["profile_backup_internal_destinations"] == found["internal_destinations"]
    assert found["internal_destinations"] == internal_networks([own, ipaddress.ip_network("198.51.100.0/24")])
    # The allowed internal mirror (and its NAT64 image) is the only way through, for that profile alone.
    assert not [network for network in found["profile_ci_internal_destinations"]
                if ipaddress.ip_address("10.30.4.20") in network or ipaddress.ip_address("64:ff9b::a1e:414") in network]
    assert [network for network in found["internal_destinations"] if ipaddress.ip_address("10.30.4.20") in network]


def test_the_access_lines_carry_the_decision_the_profile_and_the_rule(tmp_path):
    squid = squid_conf(egress_proxy_profiles=[CI], egress_proxy_syslog="198.51.100.7:514", egress_proxy_metrics=False)
    parsed = squid_parsed(squid, tmp_path)
    fields = "decision=%{decision}note profile=%{profile}note rule=%{rule}note"
    assert lines(parsed, "logformat", "access_log") == [
        # squid's own format, then the fields: a parser of squid's lines reads them as before.
        "logformat egress_access %ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %[un %Sh/%<a %mt " + fields,
        "logformat egress_syslog <134>1 %{%Y-%m-%dT%H:%M:%S}tg.%03tuZ egress-1 squid - access - client=%>a user=%#un "
        "method=%#rm dest=%#>rd:%>rP status=%>Hs bytes=%<st result=%Ss " + fields,
        "access_log daemon:/var/log/squid/access.log egress_access",
        "access_log udp://198.51.100.7:514 logformat=egress_syslog buffer-size=0KB on-error=drop !manager"]
    # Without syslog, the file alone.
    parsed = squid_parsed(squid_conf(egress_proxy_mode="report", egress_proxy_metrics=False), tmp_path)
    assert lines(parsed, "access_log") == ["access_log daemon:/var/log/squid/access.log egress_access"]


def test_with_the_metrics_the_decisions_are_counted_on_the_metrics_page(tmp_path):
    """squid runs the counter as the daemon of one more log, the decisions', and its metrics port reaches the counter's
    page (the exporter's, then the counts) instead of the exporter's; the counter is a file of the policy, changed in
    place with it. The metrics' scrapes and the exporter's reads of the cache manager are no decisions of the policy."""
    (proxy,) = role_set_args([dict(ENTRY)], **dict(BASE, egress_proxy_users=USERS, egress_proxy_mode="report"))["proxies"]
    files = policy_files(proxy)
    parsed = squid_parsed(files[SQUID_CONF]["content"], tmp_path)
    assert lines(parsed, "cache_peer ", "logfile_daemon", "logformat egress_decision", "access_log daemon:/run") == [
        "cache_peer 127.0.0.1 parent %d 0 no-query originserver name=egress_exporter" % DECISIONS_PORT,
        # Where the counter does not answer (squid started it and has not probed it since): the exporter's page.
        "cache_peer 127.0.0.1 parent %d 0 no-query originserver name=egress_exporter_itself" % EXPORTER_PORT,
        "logfile_daemon " + COUNTER_PROGRAM,
        "logformat egress_decision %{decision}note %{profile}note %{rule}note",
        "access_log daemon:%s egress_decision !egress_metrics !manager" % COUNTED_LOG]
    assert lines(parsed, "cache_peer_access egress_exporter_itself") == [
        "cache_peer_access egress_exporter_itself allow egress_metrics", "cache_peer_access egress_exporter_itself deny all"]
    assert files[COUNTER_PROGRAM]["mode"] == "0755"
    assert files[COUNTER_PROGRAM]["content"] == program_text(COUNT_DECISIONS, COUNTED_LOG, EXPORTER_PORT, DECISIONS_PORT)
    # Without the metrics there is no page to count on; without profiles or report mode, no decision to count.
    for overrides in ({"egress_proxy_metrics": False, "egress_proxy_mode": "report"}, {}):
        (proxy,) = role_set_args([dict(ENTRY)], **dict(BASE, **overrides))["proxies"]
        squid = policy_files(proxy)[SQUID_CONF]["content"]
        assert COUNTER_PROGRAM not in policy_files(proxy) and "logfile_daemon" not in squid
        assert "parent %d " % DECISIONS_PORT not in squid and "egress_exporter_itself" not in squid


def test_the_rendered_configuration_is_byte_stable_across_runs():
    """Each render is a Python of its own (role_set_args renders in a subprocess), so set and dict orders, hash seeds
    and the users' salts would show: the same input gives the same proxy, and so the same digests."""
    overrides = dict(BASE, egress_proxy_users=USERS, egress_proxy_profiles=[LAB, CI, BACKUP], egress_proxy_mode="report",
                     egress_proxy_allowed_destinations=["b.example", "a.example", "10.1.0.0/16", "10.0.0.0/16"])
    first, second = (role_set_args([dict(ENTRY)], **overrides)["proxies"] for _run in range(2))
    assert first == second


def test_a_proxy_takes_its_own_profiles_and_mode_over_the_role_wide_ones(tmp_path):
    entry = dict(ENTRY, profiles=[BACKUP], mode="report")
    squid = squid_conf(entry, egress_proxy_profiles=[CI])
    rules = lines(squid_parsed(squid, tmp_path), "http_access")
    assert "profile_ci" not in squid and "http_access allow profile_backup decision_would_deny_not_allowed" in rules
    assert rules[-1] == "http_access allow all decision_allow_no_allowlist"
    assert "http_access deny internal_destinations decision_deny_deny_internal" in rules


def test_a_profiles_deny_internal_is_read_as_the_roles_flags_are():
    """The inventory's "no" is a boolean as egress_proxy_deny_internal's is (proxy_instances reads it), not text."""
    squid = squid_conf(egress_proxy_profiles=[dict(CI, deny_internal="no")])
    assert "profile_ci_internal_destinations" not in squid


def test_a_tls_sni_check_is_read_as_the_roles_flags_are():
    """The inventory's "yes" turns the check on, for a profile and for the proxy alike."""
    squid = squid_conf(egress_proxy_profiles=[dict(CI, allowed_destinations=[".debian.org"], tls_sni_check="yes")])
    assert "ssl_bump terminate profile_ci decision_deny_tls_sni_not_allowed\n" in squid
    squid = squid_conf(dict(ENTRY, tls_sni_check="yes"), egress_proxy_profiles=[])
    assert "ssl_bump terminate !egress_sni_given decision_deny_tls_sni_missing\n" in squid


def refusal(**overrides):
    """The message proxy_instances (the role's check) refuses ENTRY with, given BASE, USERS and ``overrides``."""
    variables = role_variables(**dict(BASE, egress_proxy_users=USERS, **overrides))
    with pytest.raises(AnsibleFilterError) as refused:
        proxy_instances([dict(ENTRY)], variables)
    message = str(refused.value)
    assert "egress-1 on hv1" in message and "\n" not in message, message
    return message


@pytest.mark.parametrize("profiles, words", [
    ([CI, dict(BACKUP, name="ci")], "profiles[1].name 'ci' is the name of profiles[0] too"),
    ([dict(CI, name="default")], "profiles[0].name 'default' is not 1-32 lowercase letters"),
    ([dict(CI, name="CI")], "profiles[0].name 'CI' is not"),
    ([dict(CI, name="ci_runners")], "profiles[0].name 'ci_runners' is not"),
    ([dict(CI, name="c" * 33)], "profiles[0].name 'ccccccccc"),
    ([{"users": ["alice"]}], "profiles[0].name None is not"),
    ([dict(CI, egress="203.0.113.9")], "profiles[0] has the unknown keys 'egress' (a profile has name, users, clients"),
    ([dict(CI, allowed_destination=["x.example"])], "profiles[0] has the unknown keys 'allowed_destination'"),
    (["ci"], "profiles[0] 'ci' is not a mapping"),
    ([dict(CI, users=["carol"])], "profiles[0] (ci).users[0] 'carol' is not one of the proxy's users"),
    ([dict(CI, users="alice")], "profiles[0] (ci).users 'alice' is not a list of user names"),
    ([dict(BACKUP, clients=["10.9.0.0/16"])], "profiles[0] (backup).clients[0] '10.9.0.0/16' is not within allowed_clients"),
    ([dict(BACKUP, clients=["198.51.100.0/23"])], "profiles[0] (backup).clients[0] '198.51.100.0/23' is not within"),
    ([dict(BACKUP, clients=["198.51.100.7/24"])], "profiles[0] (backup).clients[0] '198.51.100.7/24' is not an IPv4"),
    ([{"name": "idle", "allowed_destinations": ["x.example"]}], "profiles[0] (idle) applies to nobody"),
    ([dict(CI, mode="audit")], "profiles[0] (ci).mode 'audit' is not one of enforce, report"),
    ([dict(CI, mode="Enforce")], "profiles[0] (ci).mode 'Enforce' is not one of enforce, report"),
    ([dict(CI, deny_internal="sometimes")], "profiles[0] (ci).deny_internal 'sometimes' is not a boolean"),
    ([dict(CI, allowed_destinations=["*.debian.org"])], "profiles[0] (ci).allowed_destinations[0] '*.debian.org': neither"),
    ([dict(CI, denied_destinations=["10.0.0.1/8"])], "profiles[0] (ci).denied_destinations[0] '10.0.0.1/8': neither"),
    ([dict(CI, tls_sni_check="sometimes")], "profiles[0] (ci).tls_sni_check 'sometimes' is not a boolean"),
    ([dict(CI, tls_sni_check=True, allowed_destinations=["10.30.4.20"])],
     "profiles[0] (ci).tls_sni_check: profiles[0] (ci).allowed_destinations allows addresses only, and the check lets a "
     "TLS connection through only for a server name (SNI) the policy allows by name; add the names, or set "
     "tls_sni_check false for this profile"),
], ids=lambda value: None if isinstance(value, list) else value[:40])
def test_a_bad_profile_is_refused_naming_the_entry_and_the_key(profiles, words):
    message = refusal(egress_proxy_profiles=profiles)
    assert words in message, message


def test_a_profile_of_users_on_a_proxy_without_users_is_refused():
    variables = role_variables(**dict(BASE, egress_proxy_profiles=[CI]))
    with pytest.raises(AnsibleFilterError, match=r"profiles\[0\] \(ci\).users\[0\] 'alice' is not one of the proxy's users"):
        proxy_instances([dict(ENTRY)], variables)


@pytest.mark.parametrize("mode", ["audit", "", "report\n", ["report"]])
def test_a_mode_that_is_neither_enforce_nor_report_is_refused(mode):
    assert "mode %r is not one of enforce, report" % (mode,) in refusal(egress_proxy_mode=mode)


def test_the_docs_example_renders_the_rules_the_docs_show(tmp_path):
    variables = inventory_files("Profiles and report mode")["inventory/group_vars/hypervisors.yml"]
    # The vaulted passwords as the play reads them once decrypted.
    variables["egress_proxy_users"] = [dict(user, password="secret of %s" % user["name"])
                                       for user in variables["egress_proxy_users"]]
    (proxy,) = role_set_args([{"name": "egress-1"}], **dict(variables, egress_proxy_bridge="br0", egress_proxy_image=IMAGE))[
        "proxies"]
    rules = lines(squid_parsed(policy_files(proxy)[SQUID_CONF]["content"], tmp_path), "http_access")
    with open(os.path.join(REPO_ROOT, "docs", "role-egress_proxy.md")) as handle:
        section = handle.read().split("### Profiles and report mode\n", 1)[1].split("\n## ", 1)[0]
    shown = [fence["body"] for fence in FENCE.finditer(section) if fence["body"].startswith("http_access")]
    assert len(shown) == 1
    assert rules[rules.index("http_access deny decision_deny_users !egress_users"):] == shown[0].splitlines()


# Profiles with egress addresses of their own (item 1): ci leaves from .11 (IPv4) and ::11 (IPv6), backup from .12; lab
# has none and leaves from the outside NIC's addresses, as the default policy does.
DUAL_STACK = dict(ENTRY, outside=dict(ENTRY["outside"], address6="2001:db8:20::5/64"))
EGRESS_PROFILES = [dict(CI, egress_address="203.0.113.11", egress_address6="2001:db8:20::11"),
                   dict(BACKUP, egress_address="203.0.113.12"), LAB]


def test_profiles_leave_from_their_own_egress_addresses_before_the_outside_ones_and_squid_accepts_it(tmp_path):
    overrides = dict(BASE, egress_proxy_users=USERS, egress_proxy_profiles=EGRESS_PROFILES)
    (proxy,) = role_set_args([dict(DUAL_STACK)], **overrides)["proxies"]
    files = policy_files(proxy)
    parsed = squid_parsed(files[SQUID_CONF]["content"], tmp_path)
    # squid takes the first line whose acls match (and whose family is the destination's): each profile's, then the
    # outside NIC's for everyone else; after the acls they name.
    assert lines(parsed, "tcp_outgoing_address") == [
        "tcp_outgoing_address 203.0.113.11 profile_ci", "tcp_outgoing_address 2001:db8:20::11 profile_ci",
        "tcp_outgoing_address 203.0.113.12 profile_backup",
        "tcp_outgoing_address 203.0.113.5", "tcp_outgoing_address 2001:db8:20::5"]
    assert parsed.index("acl profile_backup note profile backup") < parsed.index(
        "tcp_outgoing_address 203.0.113.11 profile_ci")
    # The guest puts them on the outside NIC (nic1) with its prefix lengths, at every start of squid and before each
    # reload; the first boot's user-data runs the program once.
    assert files[EGRESS_ADDRESSES]["content"] == \
        "203.0.113.11/24 nic1\n2001:db8:20::11/64 nic1\n203.0.113.12/24 nic1\n"
    assert files[EGRESS_ADDRESSES_PROGRAM]["mode"] == "0755"
    assert "ExecStartPre=-%s %s /run/egress-proxy/egress-addresses" % (EGRESS_ADDRESSES_PROGRAM, EGRESS_ADDRESSES) in \
        files[SQUID_DROP_IN]["content"]
    runcmd = user_data_document(proxy["user_data"])["runcmd"]
    program = [EGRESS_ADDRESSES_PROGRAM, EGRESS_ADDRESSES, "/run/egress-proxy/egress-addresses"]
    assert runcmd.index(["systemctl", "daemon-reload"]) < runcmd.index(program) < runcmd.index(
        ["systemctl", "reload-or-restart", "squid"])


def test_a_one_nic_proxys_profile_leaves_from_an_address_of_its_only_nic(tmp_path):
    overrides = {**BASE, "egress_proxy_outside": {},
                 "egress_proxy_profiles": [dict(BACKUP, egress_address="198.51.100.12")]}
    (proxy,) = role_set_args([{"name": "egress-1", "address": "198.51.100.5/24"}], **overrides)["proxies"]
    files = policy_files(proxy)
    assert lines(squid_parsed(files[SQUID_CONF]["content"], tmp_path), "tcp_outgoing_address") == [
        "tcp_outgoing_address 198.51.100.12 profile_backup"]
    assert files[EGRESS_ADDRESSES]["content"] == "198.51.100.12/24 nic0\n"


def test_profiles_without_egress_addresses_write_neither_the_addresses_nor_their_program():
    (proxy,) = role_set_args([dict(ENTRY)], **dict(BASE, egress_proxy_users=USERS, egress_proxy_profiles=[CI, LAB]))[
        "proxies"]
    files = policy_files(proxy)
    assert not {EGRESS_ADDRESSES, EGRESS_ADDRESSES_PROGRAM, SQUID_DROP_IN} & set(files)
    assert "egress-addresses" not in proxy["user_data"]
    assert "tcp_outgoing_address 203.0.113.5\n" in files[SQUID_CONF]["content"]


@pytest.mark.parametrize("profile, words", [
    (dict(CI, egress_address="203.0.113.11/24"), "profiles[0] (ci).egress_address '203.0.113.11/24' is not an IPv4 "
                                                 "address (without a prefix length"),
    (dict(CI, egress_address="2001:db8:20::11"), "profiles[0] (ci).egress_address '2001:db8:20::11' is not an IPv4"),
    (dict(CI, egress_address6="2001:db8:20::11"), "profiles[0] (ci).egress_address6 2001:db8:20::11: the egress NIC has "
                                                  "no static IPv6 address (outside.address6"),
    (dict(CI, egress_address="198.51.100.11"), "profiles[0] (ci).egress_address 198.51.100.11 is not a host address of "
                                               "203.0.113.0/24, the segment of outside.address"),
    (dict(CI, egress_address="203.0.113.255"), "203.0.113.255 is not a host address of 203.0.113.0/24"),
    (dict(CI, egress_address="203.0.113.0"), "203.0.113.0 is not a host address of 203.0.113.0/24"),
    (dict(CI, egress_address="203.0.113.5"), "profiles[0] (ci).egress_address 203.0.113.5 is an address of the proxy's "
                                             "own NICs"),
], ids=lambda value: None if isinstance(value, dict) else value[:40])
def test_a_profiles_egress_address_outside_the_egress_segment_or_taken_is_refused_naming_it(profile, words):
    message = refusal(egress_proxy_profiles=[profile])
    assert words in message, message


def test_two_profiles_with_one_egress_address_are_refused():
    message = refusal(egress_proxy_profiles=[dict(CI, egress_address="203.0.113.11"),
                                             dict(BACKUP, egress_address="203.0.113.11")])
    assert "profiles[1] (backup).egress_address 203.0.113.11 is the egress address of profiles[0] (ci) too" in message


def test_a_profiles_egress_address_from_the_outside_pool_is_refused():
    message = refusal(egress_proxy_outside={"gateway": "203.0.113.1", "prefix": "203.0.113.0/24",
                                            "pool": ["203.0.113.100-203.0.113.120"]},
                      egress_proxy_profiles=[dict(CI, egress_address="203.0.113.110")])
    assert "profiles[0] (ci).egress_address 203.0.113.110 is in egress_proxy_outside.pool" in message, message


@pytest.mark.parametrize("second_profile, words", [
    (dict(CI, egress_address="203.0.113.11"), "egress-1 profiles[0].egress_address 203.0.113.11, egress-2 "
                                              "profiles[0].egress_address 203.0.113.11"),
    (dict(CI, egress_address="203.0.113.5"), "egress-1 outside.address 203.0.113.5, egress-2 profiles[0].egress_address "
                                             "203.0.113.5"),
], ids=["two-proxies-profiles", "a-profile-and-another-proxys-nic"])
def test_an_egress_address_of_two_proxies_is_refused_naming_both(second_profile, words):
    variables = role_variables(**dict(BASE, egress_proxy_users=USERS))
    first = dict(ENTRY, profiles=[dict(CI, egress_address="203.0.113.11")])
    second = dict(ENTRY, name="egress-2", address="198.51.100.6/24", outside={"bridge": "br1", "address": "203.0.113.6/24"},
                  profiles=[second_profile])
    with pytest.raises(AnsibleFilterError) as refused:
        proxy_instances([first, second], variables)
    assert "Two proxies on hv1 have one static address: " in str(refused.value) and words in str(refused.value), refused.value


def test_a_proxy_wide_tls_name_check_refuses_a_default_policy_of_addresses_only():
    assert ("tls_sni_check: allowed_destinations allows addresses only" in refusal(
        egress_proxy_tls_sni_check=True, egress_proxy_allowed_destinations=["10.30.4.20"]))


# The TLS name check on the proxy (the default policy allows .example.com, denies bad.example.com), on for CI (its
# names; its address is no name), in report mode for BACKUP, off for LAB.
TLS_RULES = [
    "ssl_bump terminate egress_refused",
    "ssl_bump peek egress_tls_step1",
    "ssl_bump terminate profile_ci !egress_sni_given decision_deny_tls_sni_missing",
    "ssl_bump splice profile_ci profile_ci_allowed_sni egress_tls_mark_spliced",
    "ssl_bump terminate profile_ci decision_deny_tls_sni_not_allowed",
    "ssl_bump splice profile_backup !egress_sni_given decision_would_deny_tls_sni_missing",
    "ssl_bump splice profile_backup profile_backup_allowed_sni egress_tls_mark_spliced",
    "ssl_bump splice profile_backup decision_would_deny_tls_sni_not_allowed",
    "ssl_bump splice profile_lab egress_tls_mark_spliced",
    "ssl_bump terminate !egress_sni_given decision_deny_tls_sni_missing",
    "ssl_bump terminate denied_sni decision_deny_tls_sni_denied",
    "ssl_bump splice allowed_sni egress_tls_mark_spliced",
    "ssl_bump terminate all decision_deny_tls_sni_not_allowed",
]


def test_the_tls_name_check_peeks_then_splices_an_allowed_name_and_squid_accepts_it(tmp_path):
    (proxy,) = role_set_args([dict(ENTRY)], **dict(
        BASE, egress_proxy_users=USERS, egress_proxy_tls_sni_check=True, egress_proxy_syslog="198.51.100.7:514",
        egress_proxy_allowed_destinations=[".example.com"], egress_proxy_denied_destinations=["bad.example.com"],
        egress_proxy_profiles=[CI, BACKUP, dict(LAB, tls_sni_check=False)]))["proxies"]
    files = policy_files(proxy)
    parsed = squid_parsed(files[SQUID_CONF]["content"], tmp_path)
    assert lines(parsed, "ssl_bump") == TLS_RULES
    # The clients' port peeks; the metrics and the cache manager's do not.
    assert lines(parsed, "http_port") == ["http_port 198.51.100.5:3128 ssl-bump",
                                          "http_port 198.51.100.5:9301 accel defaultsite=metrics name=egress_metrics",
                                          "http_port 127.0.0.1:13128 name=egress_manager"]
    # The names of each policy that checks them (LAB's denied domain is no acl of names: LAB checks none).
    assert [line for line in parsed if " ssl::server_name " in line] == [
        "acl allowed_sni ssl::server_name --client-requested .example.com",
        "acl denied_sni ssl::server_name --client-requested bad.example.com",
        "acl profile_ci_allowed_sni ssl::server_name --client-requested .debian.org",
        "acl profile_backup_allowed_sni ssl::server_name --client-requested bucket.example"]
    assert lines(parsed, "external_acl_type") == [
        "external_acl_type egress_sni_given children-max=2 children-startup=1 %ssl::>sni " + SNI_PROGRAM]
    # Each refusal of a CONNECT lets the first pass through, annotated deny, for ssl_bump to close; never the tunnel's
    # pass, which the refusal right after it decides.
    access = lines(parsed, "http_access")
    let_through = [index for index, line in enumerate(access) if line.startswith("http_access allow CONNECT ")]
    assert len(let_through) == 10, access
    for index in let_through:
        acls = access[index].split()[4:]
        assert access[index].startswith("http_access allow CONNECT !egress_tls_peeked ") and acls[-1].startswith(
            "decision_deny_"), access[index]
        refusal = [acl for acl in access[index + 1].split()[2:] if acl != "CONNECT"]
        assert access[index + 1].split()[1] == "deny" and refusal == acls, access[index:index + 2]
    # A peeked CONNECT spliced on an allowed name writes no line of its own (its tunnel does), in every log.
    assert all(line.endswith(" !egress_tls_spliced") for line in lines(parsed, "access_log")), parsed
    assert files[SNI_PROGRAM]["content"] == program_text(ANSWER_SNI_GIVEN)
    assert "  - squid-openssl\n" in proxy["user_data"] and "  - squid\n" not in proxy["user_data"]


def test_without_the_tls_name_check_squid_peeks_at_nothing_and_the_image_keeps_plain_squid():
    (proxy,) = role_set_args([dict(ENTRY)], **dict(BASE, egress_proxy_users=USERS, egress_proxy_profiles=[CI]))["proxies"]
    files = policy_files(proxy)
    assert SNI_PROGRAM not in files
    assert not [line for line in files[SQUID_CONF]["content"].splitlines() if "ssl" in line or "sni" in line]
    assert "  - squid\n" in proxy["user_data"]
