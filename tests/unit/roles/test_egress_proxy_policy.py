# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The egress policy (issue 26): which destinations a proxy lets through, and to whom, as squid.conf says it.

Each combination of the policy variables is filled in by the role's filter (proxy_instances, which hashes the
passwords), rendered through squid.conf.j2 as tasks/arguments.yml renders it, made the proxy's policy by proxy_set_args
and read by squid itself (squid -k parse): the rules come in the order squid needs, and squid accepts the file. Bad
entries are refused naming the variable and the entry; a password's clear text reaches neither the instance the role
keeps as a fact nor kvm_proxy_set's arguments, and the user-data holds neither squid.conf nor a hash.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import subprocess

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_instances import proxy_instances
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_conf import destination, internal_networks
from ansible_collections.egress_proxies.kvm.tests.integration.role_examples import inventory_files
from ansible_collections.egress_proxies.kvm.tests.unit.role_playbook import run_role_tasks
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import (
    SQUID_CONF,
    SQUID_USERS,
    converge_options,
    policy_files,
    render_each,
    role_defaults,
    role_set_args,
    role_variables,
    squid_parsed,
    user_data_document,
)

PASSWORD = "correct horse:battery staple"
ENTRY = {"name": "egress-1", "address": "198.51.100.5/24", "outside": {"bridge": "br1", "address": "203.0.113.5/24"}}
BASE = {"egress_proxy_bridge": "br0", "egress_proxy_allowed_clients": ["198.51.100.0/24"],
        "egress_proxy_outside": {"gateway": "203.0.113.1"},
        "egress_proxy_image": {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"}}
ALLOW = [".example.com", "api.example.com", "Mirror.Example.ORG", "198.18.20.0/24", "2001:DB8:1::7"]
DENY = ["secret.example.com", "198.18.20.9"]
USERS = [{"name": "alice", "password": PASSWORD}, {"name": "bob@corp", "password": "p"}]


def filled(**overrides):
    """The one instance proxy_instances fills in with the role's defaults, BASE and ``overrides``."""
    variables = role_variables(**dict(BASE, **overrides))
    (instance,) = proxy_instances([dict(ENTRY)], variables)
    return instance


def rendered(**overrides):
    """(kvm_proxy_set's proxy, its policy's files by path) for the instance of ``overrides``, as tasks/arguments.yml
    shapes them; its user-data holds no squid.conf and no hash."""
    (proxy,) = role_set_args([dict(ENTRY)], **dict(BASE, **overrides))["proxies"]
    user_data_document(proxy["user_data"])
    return proxy, policy_files(proxy)


def access_rules(squid):
    return [line for line in squid.splitlines() if line.startswith("http_access")]


def acl_networks(squid, name):
    """The networks of the dst acl ``name`` in ``squid`` (several to a line), as ip_network objects."""
    return [ipaddress.ip_network(value) for line in squid.splitlines() if line.startswith("acl %s dst " % name)
            for value in line.split()[3:]]


# The metrics port for its clients alone, the cache manager for the exporter alone (the role's default: metrics on).
COMMON_RULES = ["http_access allow egress_metrics egress_metrics_clients !manager", "http_access deny egress_metrics",
                "http_access allow egress_manager manager localhost", "http_access deny egress_manager",
                "http_access deny manager", "http_access deny !safe_ports", "http_access deny CONNECT !connect_ports",
                "http_access deny !egress_clients"]
# (overrides, the http_access rules after COMMON_RULES).
COMBINATIONS = [
    ({"egress_proxy_deny_internal": False}, ["http_access allow all"]),
    ({}, ["http_access deny internal_destinations", "http_access allow all"]),
    ({"egress_proxy_allowed_destinations": ALLOW},
     ["http_access deny internal_destinations", "http_access allow allowed_domains",
      "http_access allow allowed_networks !unlisted_networks", "http_access deny all"]),
    ({"egress_proxy_allowed_destinations": [".example.com"], "egress_proxy_denied_destinations": DENY},
     ["http_access deny denied_domains", "http_access deny denied_networks", "http_access deny internal_destinations",
      "http_access allow allowed_domains", "http_access deny all"]),
    ({"egress_proxy_denied_destinations": DENY, "egress_proxy_deny_internal": False},
     ["http_access deny denied_domains", "http_access deny denied_networks", "http_access allow all"]),
    ({"egress_proxy_users": USERS},
     ["http_access deny !egress_users", "http_access deny internal_destinations", "http_access allow all"]),
    # Every address allowed: nothing is internal or unlisted any more.
    ({"egress_proxy_allowed_destinations": ["0.0.0.0/0", "::/0"]}, ["http_access allow allowed_networks", "http_access deny all"]),
    ({"egress_proxy_users": USERS, "egress_proxy_allowed_destinations": ALLOW, "egress_proxy_denied_destinations": DENY},
     ["http_access deny !egress_users", "http_access deny denied_domains", "http_access deny denied_networks",
      "http_access deny internal_destinations", "http_access allow allowed_domains",
      "http_access allow allowed_networks !unlisted_networks", "http_access deny all"]),
]


@pytest.mark.parametrize("overrides, rules", COMBINATIONS, ids=[str(index) for index in range(len(COMBINATIONS))])
def test_each_combination_renders_its_rules_in_order_and_squid_accepts_it(overrides, rules, tmp_path):
    proxy, files = rendered(**overrides)
    squid = files[SQUID_CONF]["content"]
    assert access_rules(squid) == COMMON_RULES + rules
    parsed = squid_parsed(squid, tmp_path)
    assert [line for line in parsed if line.startswith("http_access")] == COMMON_RULES + rules
    assert (SQUID_USERS in files) == bool(overrides.get("egress_proxy_users"))
    assert PASSWORD not in str(proxy)


def test_destinations_are_written_in_squids_forms_without_an_entry_another_covers():
    _proxy, files = rendered(egress_proxy_allowed_destinations=ALLOW, egress_proxy_denied_destinations=DENY)
    squid = files[SQUID_CONF]["content"]
    acls = [line for line in squid.splitlines() if line.startswith(("acl allowed", "acl denied"))]
    # api.example.com is under .example.com, which squid refuses in one list; names lowercase; addresses as ipaddress
    # writes them, a single address without its prefix; an IPv4 network with its NAT64 image (the same destination).
    assert acls == ["acl allowed_domains dstdomain -n .example.com", "acl allowed_domains dstdomain -n mirror.example.org",
                    "acl allowed_networks dst 198.18.20.0/24", "acl allowed_networks dst 64:ff9b::c612:1400/120",
                    "acl allowed_networks dst 2001:db8:1::7",
                    "acl denied_domains dstdomain -n secret.example.com", "acl denied_networks dst 198.18.20.9",
                    "acl denied_networks dst 64:ff9b::c612:1409"]


def covering(networks, address):
    return [network for network in networks if ipaddress.ip_address(address) in network]


# squid keeps an IPv4 address as ::ffff:a.b.c.d: an IPv6 entry there would match IPv4 destinations.
IPV4_MAPPED = ipaddress.ip_network("::ffff:0:0/96")


def test_each_address_a_host_may_resolve_to_must_pass_every_rule_of_the_worked_example():
    """The worked example's allowlist: internal_destinations is the internal networks less the allowed address, and
    unlisted_networks every address but the allowed ones, in both families (issue 40 item 0)."""
    _proxy, files = rendered(egress_proxy_allowed_destinations=["mirror.example.org", ".debian.org", "10.30.4.20"])
    squid = files[SQUID_CONF]["content"]
    internal, unlisted = acl_networks(squid, "internal_destinations"), acl_networks(squid, "unlisted_networks")
    for address in ("10.30.4.20", "64:ff9b::a1e:414"):
        assert not covering(internal, address) and not covering(unlisted, address), address
    for address in ("10.30.4.21", "10.0.0.5", "169.254.169.254", "64:ff9b::a00:5", "fd00::1", "0.0.0.0",
                    "255.255.255.255", "ffff::1"):
        assert covering(internal, address) and covering(unlisted, address), address
    for address in ("8.8.4.4", "93.184.216.99", "64:ff9b::808:808", "2606:2800:220:1::68"):
        assert covering(unlisted, address) and not covering(internal, address), address
    # No IPv6 entry reaches into the IPv4-mapped range, and none is squid's "all" in disguise.
    assert not [network for network in internal + unlisted if network.version == 6 and network.overlaps(IPV4_MAPPED)]
    assert not [network for network in internal + unlisted if network.prefixlen == 0]


def test_ipv6_networks_mean_ipv6_destinations_and_ipv4_mapped_ones_their_ipv4_network():
    _proxy, files = rendered(egress_proxy_allowed_destinations=["::/0", "::ffff:10.30.4.0/120", "0.0.0.0/0"],
                             egress_proxy_denied_destinations=["::ffff:198.18.20.9"])
    squid = files[SQUID_CONF]["content"]
    allowed = acl_networks(squid, "allowed_networks")
    # 0.0.0.0/0 in halves: squid reads 0.0.0.0/0 as "all", IPv6 included.
    assert allowed[:2] == [ipaddress.ip_network("0.0.0.0/1"), ipaddress.ip_network("128.0.0.0/1")]
    assert not [network for network in allowed if network.version == 6 and network.overlaps(IPV4_MAPPED)]
    assert covering(allowed, "2606:2800:220:1::68") and covering(allowed, "::1")
    assert acl_networks(squid, "denied_networks") == [ipaddress.ip_network("198.18.20.9"),
                                                      ipaddress.ip_network("64:ff9b::c612:1409")]
    assert acl_networks(squid, "unlisted_networks") == acl_networks(squid, "internal_destinations") == []


def acl_values(parsed, name):
    """The values of the src acl ``name`` as squid read them (squid_parsed's directives), in their order."""
    return [value for line in parsed if line.startswith("acl %s src " % name) for value in line.split()[3:]]


# Client networks as squid's src acl matches exactly their addresses (issue 40): 0.0.0.0/0 is squid's "all" (IPv6
# clients too), an IPv6 network covering ::ffff:0:0/96 would admit every IPv4 client, an IPv4-mapped one is IPv4.
@pytest.mark.parametrize("clients, written", [
    (["0.0.0.0/0"], ["0.0.0.0/1", "128.0.0.0/1"]),
    (["::ffff:10.0.0.0/104"], ["10.0.0.0/8"]),
    (["::ffff:198.51.100.7"], ["198.51.100.7"]),
    (["2001:db8:10::/64", "198.51.100.0/24", "10.1.2.3"], ["2001:db8:10::/64", "198.51.100.0/24", "10.1.2.3"]),
], ids=["ipv4-everything", "ipv4-mapped-network", "ipv4-mapped-address", "order-kept"])
def test_client_networks_are_written_as_squid_matches_them(tmp_path, clients, written):
    _proxy, files = rendered(egress_proxy_allowed_clients=clients, egress_proxy_metrics_clients=clients)
    parsed = squid_parsed(files[SQUID_CONF]["content"], tmp_path)
    assert acl_values(parsed, "egress_clients") == acl_values(parsed, "egress_metrics_clients") == written


def test_an_ipv6_client_network_covering_the_ipv4_mapped_range_leaves_it_out(tmp_path):
    _proxy, files = rendered(egress_proxy_allowed_clients=["::/1"])
    parsed = squid_parsed(files[SQUID_CONF]["content"], tmp_path)
    written = [ipaddress.ip_network(value) for value in acl_values(parsed, "egress_clients")]
    assert len(written) == 95 and not [network for network in written if network.overlaps(IPV4_MAPPED)]
    assert covering(written, "::1") and covering(written, "::fffe:ffff:ffff") and covering(written, "::1:0:0:0")
    assert sum(network.num_addresses for network in written) == 2 ** 127 - 2 ** 32


def test_deny_internal_covers_the_special_ranges_and_the_proxys_own_networks():
    _proxy, files = rendered()
    squid = files[SQUID_CONF]["content"]
    internal = acl_networks(squid, "internal_destinations")
    for address in ("10.1.2.3", "169.254.169.254", "127.0.0.1", "100.64.0.1", "198.19.0.1", "172.31.0.1",
                    "192.168.1.1", "224.0.0.1", "255.255.255.255", "0.0.0.0", "fd00::1", "fe80::1", "::1", "ff02::1",
                    "::", "2001:db8::1",
                    # IPv6 that carries or reaches IPv4 (issue 40 item 4): NAT64 images of internal addresses, local-use
                    # NAT64, 6to4, Teredo, IPv4-compatible and -translated, site-local; the rest of the registry.
                    "64:ff9b::a00:5", "64:ff9b::a9fe:a9fe", "64:ff9b:1::a00:5", "2002:a00:5::1", "2001:0:a00:5::1",
                    "::a00:5", "::ffff:0:a00:5", "fec0::5", "2001:2::1", "3fff::1", "5f00::1"):
        assert covering(internal, address), address
    for address in ("192.0.43.10", "8.8.8.8", "2001:4860::8888", "172.32.0.1", "100.128.0.1", "64:ff9b::808:808"):
        assert not covering(internal, address), address
    assert not [network for network in internal if network.version == 6 and network.overlaps(IPV4_MAPPED)]
    # The inside and outside NICs' networks are documentation ranges, so covered already.
    assert internal == internal_networks()


def test_an_outside_network_that_is_public_is_added_to_the_internal_ones():
    outside = {"bridge": "br1", "address": "192.0.43.5/28"}
    variables = role_variables(**BASE)
    (instance,) = proxy_instances([dict(ENTRY, outside=outside)], variables)
    variables = dict(role_defaults(), inventory_hostname="hv1", **BASE)
    variables["egress_proxy_instance"] = instance
    (result,) = render_each([("squid.conf.j2", variables)])
    assert {ipaddress.ip_network("192.0.43.0/28"), ipaddress.ip_network("64:ff9b::c000:2b00/124")} <= set(
        acl_networks(result["text"], "internal_destinations"))


def test_users_are_written_as_hashes_squids_helper_reads_and_the_fact_holds_no_password():
    instance = filled(egress_proxy_users=USERS)
    assert PASSWORD not in str(instance)
    assert [user["name"] for user in instance["users"]] == ["alice", "bob@corp"]
    proxy, files = rendered(egress_proxy_users=USERS)
    users = files[SQUID_USERS]
    # Owned by root, readable by squid's group only; a secret, which kvm_proxy_set shows by its digest alone.
    assert users == {"path": SQUID_USERS, "group": "proxy", "mode": "0640", "secret_content": users["secret_content"]}
    lines = users["secret_content"].splitlines()
    assert [line.split(":", 1)[0] for line in lines] == ["alice", "bob@corp"]
    assert all(line.split(":", 1)[1].startswith("$6$rounds=") for line in lines)
    squid = files[SQUID_CONF]["content"]
    assert "auth_param basic program /usr/lib/squid/basic_ncsa_auth /etc/squid/egress-users\n" in squid
    # The same input hashes the same on every run: the policy stays as it was, and the proxy gets no change.
    assert rendered(egress_proxy_users=USERS)[0] == proxy
    assert PASSWORD not in str(proxy)


def test_squids_own_helper_accepts_the_written_hash(tmp_path):
    _proxy, files = rendered(egress_proxy_users=USERS)
    path = tmp_path / "egress-users"
    path.write_text(files[SQUID_USERS]["secret_content"])
    # The helper reads "user password" lines, each URL-escaped as squid sends them.
    answers = subprocess.run(["/usr/lib/squid/basic_ncsa_auth", str(path)], capture_output=True, text=True, timeout=60,
                             input="alice correct%20horse%3Abattery%20staple\nalice wrong\nbob%40corp p\n", check=True)
    assert [line.split()[0] for line in answers.stdout.splitlines()] == ["OK", "ERR", "OK"], answers.stdout


@pytest.mark.parametrize("entry", ["*.example.com", "exa mple.com", "10.0.0.0/33", "10.0.0.1/8", "300.1.1.1",
                                   "example.com.", "a\nhttp_access allow all", "fe80::1%eth0", ".", "", "-a.example",
                                   "ex_ample.com", "http://example.com/", "\u00e9xample.com"])
@pytest.mark.parametrize("variable", ["allowed_destinations", "denied_destinations"])
def test_a_bad_destination_is_refused_naming_the_variable_and_the_entry(variable, entry):
    assert destination(entry) is None
    with pytest.raises(AnsibleFilterError) as refused:
        filled(**{"egress_proxy_" + variable: ["api.example.com", entry]})
    message = str(refused.value)
    assert "%s[1] %r" % (variable, entry) in message and "egress-1" in message, message
    assert "\n" not in message


@pytest.mark.parametrize("users, words", [
    ([{"name": "al ice", "password": "x"}], "users[0].name 'al ice' is not 1-64 letters"),
    ([{"name": "al:ice", "password": "x"}], "users[0].name 'al:ice' is not"),
    ([{"name": "alice", "password": ""}], 'users[0] ("alice") of egress-1 on hv1: the password is empty'),
    ([{"name": "alice", "password": "a\nb"}], "has a control character"),
    ([{"name": "alice", "password": "x"}, {"name": "alice", "password": "y"}], "users[0].name 'alice' appears more than once"),
])
def test_bad_users_are_refused_naming_the_entry_never_the_password(users, words):
    with pytest.raises(AnsibleFilterError) as refused:
        filled(egress_proxy_users=users)
    message = str(refused.value)
    assert words in message, message
    assert all(user["password"] not in message for user in users if len(user["password"]) > 1), message


def test_no_password_reaches_the_roles_output_at_vvv_only_its_hash_reaches_the_modules_policy(tmp_path):
    # Role-wide users, and a fleet entry with its own: the fleet's check loops over the entries.
    variables = dict(BASE, egress_proxy__set_options=converge_options(), egress_proxy_users=USERS,
                     egress_proxy_instances=[ENTRY], egress_proxy_fleet=[
        dict(ENTRY, name="egress-2", address="198.51.100.6/24", outside={"bridge": "br1", "address": "203.0.113.6/24"}, hypervisor="localhost",
             users=[{"name": "carol", "password": "fleet-entry-secret"}])])
    show = [{"name": "Show the " + key, "ansible.builtin.debug": {
        "msg": "{{ egress_proxy__proxies | map(attribute='%s') | list }}" % key}} for key in ("user_data", "policy")]
    out = run_role_tasks(tmp_path, "egress_proxy", "arguments", variables, check=True, after=show, options=["-vvv"])
    assert PASSWORD not in out.replace("\\n", "\n") and "fleet-entry-secret" not in out
    # Each hash once, in the policy's users' file (the user-data, shown first, holds none).
    policies = out.index("TASK [Show the policy]")
    assert out.count("alice:$6$rounds=100000$") == 1 and out.count("carol:$6$rounds=100000$") == 1, out[-3000:]
    assert out.index("alice:$6$rounds=100000$") > policies and out.index("carol:$6$rounds=100000$") > policies


def test_the_worked_example_of_the_docs_renders_and_squid_accepts_it(tmp_path):
    files = inventory_files("Policy")
    vaulted = files["group_vars/hypervisors/vault.yml"]
    policy = dict(files["group_vars/hypervisors/policy.yml"])
    # The vaulted passwords as the play reads them once decrypted.
    policy["egress_proxy_users"] = [dict(user, password=vaulted[user["password"].strip("{} ")])
                                    for user in policy["egress_proxy_users"]]
    _proxy, written = rendered(**policy)
    squid = written[SQUID_CONF]["content"]
    assert "acl allowed_networks dst 10.30.4.20\n" in squid and "acl allowed_domains dstdomain -n deb.debian.org\n" in squid
    assert [line.split(":")[0] for line in written[SQUID_USERS]["secret_content"].splitlines()] == ["ci", "build"]
    squid_parsed(squid, tmp_path)


def test_the_static_nics_dns_servers_are_squids_own_resolvers(tmp_path):
    # An image without resolvconf never applies a static NIC's servers: squid is given them itself.
    _proxy, files = rendered(egress_proxy_dns=["198.51.100.53", "2001:DB8::53"],
                             egress_proxy_outside={"gateway": "203.0.113.1", "dns": ["203.0.113.53", "198.51.100.53"]})
    squid = files[SQUID_CONF]["content"]
    assert "dns_nameservers 203.0.113.53 198.51.100.53 2001:db8::53\n" in squid
    assert "dns_nameservers 203.0.113.53 198.51.100.53 2001:db8::53" in squid_parsed(squid, tmp_path)
    # DHCP: squid reads the resolver the lease wrote.
    assert "dns_nameservers" not in rendered()[1][SQUID_CONF]["content"]


def test_each_proxy_to_run_gets_its_own_squid_conf_and_users_as_its_policy_and_a_removed_one_none():
    """Per proxy, the policy's files are exactly the squid.conf.j2 render of that proxy and, with users, its users; its
    user-data exactly the user-data.yml.j2 render, as each template renders alone (so a proxy the role rendered one
    template at a time keeps its user-data, and is not replaced)."""
    second = dict(ENTRY, name="egress-2", address="198.51.100.6/24", outside={"bridge": "br1", "address": "203.0.113.6/24"},
                  users=[{"name": "carol", "password": "pw-carol"}], allowed_destinations=[".example.org"])
    desired = [dict(ENTRY), second, {"name": "egress-3", "state": "absent"}]
    arguments = role_set_args(desired, **BASE)
    first, other, removed = arguments["proxies"]
    assert removed == {"name": "egress-3", "state": "absent"}
    variables = role_variables(**BASE)
    renders = render_each([(template, dict(role_defaults(), inventory_hostname="hv1", **BASE, egress_proxy_instance=instance))
                           for instance in proxy_instances(desired[:2], variables)
                           for template in ("squid.conf.j2", "user-data.yml.j2")])
    for proxy, squid_conf, user_data in zip((first, other), renders[::2], renders[1::2]):
        files = policy_files(proxy)
        assert files[SQUID_CONF] == {"path": SQUID_CONF, "content": squid_conf["text"].rstrip("\n") + "\n"}
        assert proxy["user_data"] == user_data["text"]
        assert "# squid of the egress proxy %s," % proxy["name"] in files[SQUID_CONF]["content"]
        assert "for %s.\n" % proxy["name"] in proxy["user_data"] and user_data_document(proxy["user_data"])
    assert SQUID_USERS not in policy_files(first)
    assert [line.split(":", 1)[0] for line in policy_files(other)[SQUID_USERS]["secret_content"].splitlines()] == ["carol"]
    assert "acl allowed_domains dstdomain -n .example.org\n" in policy_files(other)[SQUID_CONF]["content"]
    assert "allowed_domains" not in policy_files(first)[SQUID_CONF]["content"]
    assert "pw-carol" not in str(arguments)


def test_a_user_data_of_ones_own_replaces_the_roles_and_the_proxy_gets_no_policy():
    """egress_proxy_user_data sets squid up itself: the role renders nothing, and kvm_proxy_set writes no file of ours."""
    own = "#cloud-config\npackages: [squid]\n"
    (proxy,) = role_set_args([dict(ENTRY)], **dict(BASE, egress_proxy_user_data=own, egress_proxy_users=USERS))["proxies"]
    assert proxy["user_data"] == own and "policy" not in proxy
    assert PASSWORD not in str(proxy) and "$6$" not in str(proxy)


def test_a_dual_stack_proxy_listens_inside_on_both_families_and_leaves_from_the_outside_address_of_each(tmp_path):
    _proxy, files = rendered(egress_proxy_address6="2001:DB8:10::5/64",
                             egress_proxy_outside={"gateway": "203.0.113.1", "address6": "2001:db8:20::5/64",
                                                   "gateway6": "fe80::1"})
    squid = files[SQUID_CONF]["content"]
    parsed = squid_parsed(squid, tmp_path)
    assert [line for line in parsed if line.startswith(("http_port", "tcp_outgoing_address"))] == [
        "http_port 198.51.100.5:3128", "http_port [2001:db8:10::5]:3128",
        # squid tests each line's family against the destination's: IPv4 destinations leave from the first.
        "tcp_outgoing_address 203.0.113.5", "tcp_outgoing_address 2001:db8:20::5",
        "http_port 198.51.100.5:9301 accel defaultsite=metrics name=egress_metrics",
        "http_port 127.0.0.1:13128 name=egress_manager"]


def test_an_ipv6_only_proxy_listens_and_serves_its_metrics_on_its_ipv6_inside_address(tmp_path):
    entry = {"name": "egress-1", "address6": "2001:db8:10::5/64",
             "outside": {"bridge": "br1", "address6": "2001:db8:20::5/64", "gateway6": "2001:db8:20::1"}}
    variables = dict(BASE)
    variables.update(egress_proxy_outside={}, egress_proxy_allowed_clients=["2001:db8:10::/64"])
    (proxy,) = role_set_args([entry], **variables)["proxies"]
    assert [(nic.get("address"), nic.get("address6")) for nic in proxy["interfaces"]] == [
        (None, "2001:db8:10::5/64"), (None, "2001:db8:20::5/64")]
    parsed = squid_parsed(policy_files(proxy)[SQUID_CONF]["content"], tmp_path)
    assert [line for line in parsed if line.startswith(("http_port [", "tcp_outgoing_address", "acl egress_clients"))] == [
        "http_port [2001:db8:10::5]:3128", "tcp_outgoing_address 2001:db8:20::5",
        "http_port [2001:db8:10::5]:9301 accel defaultsite=metrics name=egress_metrics",
        "acl egress_clients src 2001:db8:10::/64"]


def test_deny_internal_covers_a_public_ipv6_prefix_of_the_proxys_own_nics():
    _proxy, files = rendered(egress_proxy_outside={"gateway": "203.0.113.1", "address6": "2001:4860:20::5/64"})
    assert ipaddress.ip_network("2001:4860:20::/64") in acl_networks(files[SQUID_CONF]["content"], "internal_destinations")


@pytest.mark.parametrize("entry, words", [
    (dict(ENTRY, address="", address6=""), "address: the inside NIC needs a static address or address6"),
    (dict(ENTRY, outside={"bridge": "br1"}), "outside.address: the outside NIC needs a static address or address6"),
    (dict(ENTRY, gateway6="2001:db8:10::1"), 'gateway6 "2001:db8:10::1": the default route leaves through the outside '
                                             "NIC; give outside.gateway6 instead"),
])
def test_a_two_nic_proxy_without_its_addresses_or_with_an_inside_gateway6_is_refused_naming_it(entry, words):
    with pytest.raises(AnsibleFilterError, match=words):
        proxy_instances([entry], role_variables(**BASE))


def test_two_proxies_with_one_ipv6_address_written_differently_are_refused():
    second = dict(ENTRY, name="egress-2", address="198.51.100.6/24",
                  outside={"bridge": "br1", "address": "203.0.113.6/24", "address6": "2001:DB8:20:0::5/64"})
    first = dict(ENTRY, outside=dict(ENTRY["outside"], address6="2001:db8:20::5/64"))
    with pytest.raises(AnsibleFilterError, match="egress-1 outside.address6 2001:db8:20::5, egress-2 outside.address6"):
        proxy_instances([first, second], role_variables(**BASE))


@pytest.mark.parametrize("overrides, ports", [
    ({}, [3128, 9301, 13128]),
    ({"egress_proxy_metrics": False, "egress_proxy_port": 8080}, [8080]),
    ({"egress_proxy_metrics_port": 9400}, [3128, 9400, 13128]),
])
def test_the_reload_holds_new_connections_to_every_port_squid_listens_on_and_is_no_part_of_the_digest(overrides, ports):
    """squid's reload is squid_reload_argv's of its ports; the policy's digest (what a proxy records as held) is over
    the files alone, so a proxy that held its policy with the reload of before holds it still: the upgrade touches
    no proxy."""
    from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.policy import Policy
    from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_reload import squid_reload_argv

    proxy, _files = rendered(**overrides)
    assert proxy["policy"]["reload"] == squid_reload_argv(ports)
    before = dict(proxy["policy"], reload=["/bin/systemctl", "reload-or-restart", "squid"])
    assert Policy.from_params(proxy["policy"]).digest() == Policy.from_params(before).digest()
