# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Hostile values through every egress_proxy variable the role renders into a file (issue 31 items 1 and 4).

Each value is either refused, by the role's check and by the template itself, with a message naming the
variable, or rendered inert: the proxy's user-data still parses to exactly the value, and its squid.conf (the
render of squid.conf.j2 beside it, which becomes the proxy's policy) has exactly the directives the template
writes, none of a value's own.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.filter.cloud_init_data_errors import cloud_init_data_errors
from ansible_collections.egress_proxies.kvm.plugins.filter.egress_addresses import egress_addresses
from ansible_collections.egress_proxies.kvm.plugins.filter.egress_pool_view import egress_pool_view
from ansible_collections.egress_proxies.kvm.plugins.filter.kvm_proxy_set_errors import kvm_proxy_set_errors
from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_instances import proxy_instances
from ansible_collections.egress_proxies.kvm.plugins.filter.squid_settings_errors import squid_settings_errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import control_character
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import (
    build_instance_element,
    instance_metadata_from_domain_element,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.xml import etree
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_proxy import NIC_VARIABLES
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.password_hash import squid_user_hash
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_conf import internal_networks
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import (
    SQUID_USERS,
    policy_files,
    render_each,
    render_proxies,
    role_defaults,
    role_set_args,
    user_data_document,
)
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import role_variables as role_filter_variables

# Line breaks for squid, YAML or a shell; a comment; quotes; blanks; digits int() takes or refuses that are not
# ASCII (superscript two, Arabic-Indic 80, fullwidth 80); an IPv6 scope; a value far longer than any real one.
HOSTILE = ["\n", "\r", "\x00", "\u2028", "\u0085", "%1", "#", '"', "'", " ", "\t", "\u00b2", "\u0668\u0660",
           "\uff18\uff10", "9" * 5000]
INJECTED = "http_access allow all"

# (variable, how a hostile text becomes its value): a valid value with the text inside it, where it can hide.
SQUID_VALUES = [
    ("allowed_clients", lambda text: {"egress_proxy_allowed_clients": ["10.0.0.0/8", "::1%1" + text + INJECTED]}),
    ("allowed_clients", lambda text: {"egress_proxy_allowed_clients": ["10.0.0.0/8" + text]}),
    ("allowed_clients", lambda text: {"instance": {"allowed_clients": ["2001:db8::/32" + text + INJECTED]}}),
    ("port", lambda text: {"instance": {"port": "3128" + text}}),
    ("port", lambda text: {"instance": {"port": text + "3128"}}),
    ("egress_proxy_safe_ports", lambda text: {"egress_proxy_safe_ports": ["80", "443" + text + INJECTED]}),
    ("egress_proxy_safe_ports", lambda text: {"egress_proxy_safe_ports": [text]}),
    ("egress_proxy_connect_ports", lambda text: {"egress_proxy_connect_ports": ["1025-" + text]}),
    ("egress_proxy_forwarded_for", lambda text: {"egress_proxy_forwarded_for": "delete" + text + INJECTED}),
    ("address", lambda text: {"instance": {"address": "198.18.0.5/24" + text, "outside": OUTSIDE}}),
    ("outside.address", lambda text: {"instance": {"address": "198.18.0.5/24",
                                                   "outside": dict(OUTSIDE, address="198.19.0.5/24" + text)}}),
    ("address6", lambda text: {"instance": {"address": "198.18.0.5/24", "address6": "2001:db8:10::5/64" + text,
                                            "outside": OUTSIDE}}),
    ("address6", lambda text: {"instance": {"address6": "2001:db8:10::5%" + text + "/64"}}),
    ("outside.address6", lambda text: {"instance": {"address": "198.18.0.5/24",
                                                    "outside": dict(OUTSIDE, address6="2001:db8:20::5/64" + text)}}),
    ("name", lambda text: {"instance": {"name": "egress-1" + text}}),
    ("dns", lambda text: {"instance": {"dns": ["198.18.0.53" + text + INJECTED]}}),
    ("outside.dns", lambda text: {"instance": {"address": "198.18.0.5/24", "outside": dict(OUTSIDE, dns=[text])}}),
    ("allowed_destinations", lambda text: {"egress_proxy_allowed_destinations": ["api.example.com" + text + INJECTED]}),
    ("allowed_destinations", lambda text: {"instance": {"allowed_destinations": [".example.com", "10.0.0.0/8" + text]}}),
    ("denied_destinations", lambda text: {"egress_proxy_denied_destinations": [text + "example.com"]}),
    ("users", lambda text: {"instance": {"users": [{"name": "alice" + text, "hash": squid_user_hash("o", "alice", "x")}]}}),
    ("egress_proxy_metrics_port", lambda text: {"egress_proxy_metrics_port": "9301" + text}),
    ("egress_proxy_metrics_port", lambda text: {"egress_proxy_metrics_port": text + "9301"}),
    ("egress_proxy_metrics_clients", lambda text: {"egress_proxy_metrics_clients": ["10.0.0.0/8" + text + INJECTED]}),
    ("egress_proxy_syslog", lambda text: {"egress_proxy_syslog": "198.51.100.7:514" + text}),
    ("egress_proxy_syslog", lambda text: {"egress_proxy_syslog": "[2001:db8::7" + text + "]:514"}),
    ("egress_proxy_syslog_protocol", lambda text: {"egress_proxy_syslog": "198.51.100.7:514",
                                                   "egress_proxy_syslog_protocol": "udp" + text}),
    ("mode", lambda text: {"instance": {"mode": "report" + text}}),
    ("tls_sni_check", lambda text: {"instance": {"tls_sni_check": "yes" + text}}),
    ("profiles[0].name", lambda text: {"instance": {"profiles": [dict(PROFILE, name="ci" + text)]}}),
    ("profiles[0] (ci).users[0]", lambda text: {"instance": {"users": [ALICE], "profiles": [
        {"name": "ci", "users": ["alice" + text]}]}}),
    ("profiles[0] (ci).clients[0]", lambda text: {"instance": {"profiles": [dict(PROFILE, clients=["10.1.0.0/16" + text])]}}),
    ("profiles[0] (ci).clients[0]", lambda text: {"instance": {"profiles": [dict(PROFILE, clients=["::1%1" + text + INJECTED])]}}),
    ("profiles[0] (ci).allowed_destinations[0]", lambda text: {"instance": {"profiles": [
        dict(PROFILE, allowed_destinations=["api.example.com" + text + INJECTED])]}}),
    ("profiles[0] (ci).denied_destinations[1]", lambda text: {"instance": {"profiles": [
        dict(PROFILE, denied_destinations=[".example.com", "10.0.0.0/8" + text])]}}),
    ("profiles[0] (ci).deny_internal", lambda text: {"instance": {"profiles": [dict(PROFILE, deny_internal="true" + text)]}}),
    ("profiles[0] (ci).mode", lambda text: {"instance": {"profiles": [dict(PROFILE, mode="report" + text)]}}),
    ("profiles[0] (ci).tls_sni_check", lambda text: {"instance": {"profiles": [dict(PROFILE, tls_sni_check="true" + text)]}}),
    ("profiles[0] (ci).egress_address", lambda text: {"instance": {"address": "198.18.0.5/24", "profiles": [
        dict(PROFILE, egress_address="198.18.0.9" + text + INJECTED)]}}),
    ("profiles[0] (ci).egress_address6", lambda text: {"instance": {"address6": "2001:db8:10::5/64", "profiles": [
        dict(PROFILE, egress_address6="2001:db8:10::9%" + text)]}}),
]
# A profile of the proxy below (its clients are 10.0.0.0/8), and a user of it.
PROFILE = {"name": "ci", "clients": ["10.1.0.0/16"]}
ALICE = {"name": "alice", "hash": squid_user_hash("o", "alice", "x")}
OUTSIDE = {"bridge": "br1", "address": "198.19.0.5/24", "gateway": "198.19.0.1"}
# The directives squid.conf.j2 writes, by their first word, for the proxy below: its clients, ports and CONNECT, the
# internal destinations (deny_internal's default, eight to a line), five rules; the metrics (the role's default): their two ports, the
# exporter behind one, its three acls and five rules.
DIRECTIVES = (["http_port"] * 3 + ["cache_peer"] + ["acl"] * 3 + ["cache_peer_access"] * 2
              + ["acl"] * (4 + -(-len(internal_networks()) // 8)) + ["http_access"] * 10
              + ["forwarded_for", "via", "cache", "reply_header_add", "coredump_dir", "shutdown_lifetime"])


def instance(**overrides):
    """One instance as the filter proxy_instances fills it in."""
    entry = {"name": "egress-1", "state": "present", "vcpus": 1, "memory_mib": 1024, "disk_size_gb": 10, "mac": "",
             "autostart": True, "port": 3128, "allowed_clients": ["10.0.0.0/8"], "address": "", "gateway": "",
             "address6": "", "gateway6": "", "dns": [], "search": [], "outside": {}, "metrics": True, "metrics_port": 9301, "metrics_clients": [],
             "syslog": "", "syslog_protocol": "udp"}
    entry.update(overrides)
    return entry


def role_variables(overrides):
    variables = dict(role_defaults(), inventory_hostname="hv1", egress_proxy_bridge="br0",
                     egress_proxy_allowed_clients=["10.0.0.0/8"],
                     egress_proxy_image={"name": "debian-12", "url": "https://images.example/debian-12.qcow2"})
    entry = instance(**overrides.get("instance", {}))
    variables.update((key, value) for key, value in overrides.items() if key != "instance")
    # The role's variables an instance carries (proxy_instances fills them in): the role-wide squid settings too.
    for key in ("allowed_clients", "allowed_destinations", "denied_destinations", "metrics_port", "metrics_clients",
                "syslog", "syslog_protocol"):
        if "egress_proxy_" + key in overrides:
            entry[key] = overrides["egress_proxy_" + key]
    entry["outside"] = dict(variables["egress_proxy_outside"], **entry["outside"])
    variables["egress_proxy_instance"] = entry
    return variables, entry


def filter_variables(variables):
    """The role's variables as vars/main.yml hands them to the filters."""
    return role_filter_variables(**{key: value for key, value in variables.items()
                                    if key.startswith("egress_proxy_") and key not in ("egress_proxy_instance", "egress_proxy_host")})


def squid_conf(rendered):
    """The files of one proxy rendered as tasks/arguments.yml renders it (render_proxies): its user-data parsed, which
    writes no squid file, then its squid.conf."""
    return user_data_document(rendered["user_data"]), rendered["squid_conf"]


def directives(squid):
    return [line.split()[0] for line in squid.splitlines() if line.strip() and not line.startswith("#")]


# (variable, hostile value's overrides) of every case, one render each.
CASES = [(variable, make(text)) for variable, make in SQUID_VALUES for text in HOSTILE]


@pytest.fixture(scope="module")
def rendered_cases():
    """Every case rendered as the role renders a proxy (user-data.yml.j2 and squid.conf.j2), in one go."""
    return render_proxies([role_variables(overrides)[0] for _variable, overrides in CASES])


def test_the_template_writes_exactly_its_own_directives_for_a_usable_proxy():
    variables, _entry = role_variables({"egress_proxy_allowed_clients": ["10.0.0.0/8", "2001:DB8::/32", "10.1.2.3/32"],
                                        "egress_proxy_safe_ports": ["80", "0443", "1025-65535"]})
    (rendered,) = render_proxies([variables])
    _user_data, squid = squid_conf(rendered)
    assert directives(squid) == DIRECTIVES
    # Written in their normalised form: what was checked is what squid reads.
    assert "acl egress_clients src 10.0.0.0/8 2001:db8::/32 10.1.2.3\n" in squid
    assert "acl safe_ports port 80 443 1025-65535\n" in squid


@pytest.mark.parametrize("index", range(len(CASES)), ids=["%s-%d" % (case[0], index) for index, case in enumerate(CASES)])
def test_a_hostile_squid_value_is_refused_by_the_check_and_the_template_naming_it(rendered_cases, index):
    variable, overrides = CASES[index]
    variables, entry = role_variables(overrides)
    if variable == "name":
        # proxy_instances refuses the name first, by the modules' own rule.
        with pytest.raises(AnsibleFilterError, match="is not a valid VM name"):
            proxy_instances([entry], filter_variables(variables))
    problems = squid_settings_errors(entry, variables["egress_proxy_safe_ports"], variables["egress_proxy_connect_ports"],
                                     variables["egress_proxy_forwarded_for"])
    assert len(problems) == 1 and variable in problems[0], problems
    assert len(problems[0]) < 400, problems[0]
    rendered = rendered_cases[index]
    assert "error" in rendered, squid_conf(rendered)[1]
    assert variable in rendered["error"]


# cloud-init writes each key as one line of authorized_keys: these would write a line of their own there.
LINE_BREAKING = {"\n", "\r", "\x00", "\u2028", "\u0085", "\t"}


def test_hostile_ssh_keys_are_written_as_yaml_strings_that_read_back_whole():
    keys = ["ssh-ed25519 AAAAC3Nza key%d" % index + text for index, text in enumerate(HOSTILE) if text not in LINE_BREAKING]
    variables, entry = role_variables({"egress_proxy_ssh_authorized_keys": keys})
    assert squid_settings_errors(entry, variables["egress_proxy_safe_ports"], variables["egress_proxy_connect_ports"],
                                 variables["egress_proxy_forwarded_for"], keys) == []
    (rendered,) = render_proxies([variables])
    user_data, squid = squid_conf(rendered)
    assert user_data["ssh_authorized_keys"] == keys
    assert directives(squid) == DIRECTIVES


@pytest.mark.parametrize("text", sorted(LINE_BREAKING))
def test_an_ssh_key_that_would_write_a_line_of_its_own_is_refused_naming_it(text):
    keys = ["ssh-ed25519 AAAAC3Nza key0", "ssh-ed25519 AAAAC3Nza key1" + text + 'command="sh" ssh-ed25519 AAAAC3Nza evil']
    variables, entry = role_variables({"egress_proxy_ssh_authorized_keys": keys})
    (problem,) = squid_settings_errors(entry, variables["egress_proxy_safe_ports"], variables["egress_proxy_connect_ports"],
                                       variables["egress_proxy_forwarded_for"], keys)
    assert problem.startswith("egress_proxy_ssh_authorized_keys[1] ")
    assert "U+%04X at offset 26" % ord(text) in problem and text not in problem


def test_the_roles_check_refuses_such_a_key_naming_it_and_the_proxy():
    """The check proxy_instances runs on each proxy gets the role's keys."""
    keys = ["ssh-ed25519 AAAAC3Nza key0\nssh-ed25519 AAAAC3Nza evil"]
    variables, entry = role_variables({"egress_proxy_ssh_authorized_keys": keys})
    with pytest.raises(AnsibleFilterError) as raised:
        proxy_instances([dict(entry, outside={})], filter_variables(variables))
    message = raised.value.message
    assert "SSH keys of egress-1 on hv1 are not usable: egress_proxy_ssh_authorized_keys[0] " in message
    assert "U+000A at offset 26" in message


STATIC_NIC = {"bridge": "br0", "address": "198.18.0.5/24", "gateway": "198.18.0.1", "address6": "2001:db8::5/64",
              "gateway6": "fe80::1", "nameservers": ["198.18.0.1"], "search": ["example.com"]}


@pytest.mark.parametrize("option, value", [
    ("nameservers", ["fe80::1%1\nup touch /tmp/injected"]),
    ("nameservers", ["198.18.0.1 198.18.0.2"]),
    ("nameservers", ["\u0661\u0669\u0668.18.0.1"]),
    ("search", ["example.com\nexample.org"]),
    ("address", "198.18.0.5/24\n"),
    ("address", "198.18.0.5/\u0662\u0664"),
    ("gateway", "198.18.0.1\n"),
    ("address6", "2001:db8::5/64\n"),
    ("address6", "2001:db8::5%1\nup touch /tmp/injected/64"),
    ("gateway6", "fe80::1%nic0\n"),
    ("bridge", "br0\n"),
    ("mac", "52:54:00:00:00:01\n"),
])
def test_a_hostile_nic_value_is_refused_by_the_modules_check_naming_it(option, value):
    arguments = {"uid": "egress-eu", "image": {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"},
                 "proxies": [{"name": "egress-eu-1", "interfaces": [dict(STATIC_NIC, **{option: value})]}]}
    (error,) = kvm_proxy_set_errors(arguments)
    assert "interfaces[0]: %s" % option in error or "interfaces[0]: MAC" in error, error
    assert "\n" not in error


def test_vendor_data_with_a_control_character_is_refused_without_quoting_it():
    (error,) = cloud_init_data_errors("#cloud-config\nbootcmd: [echo token-1234\x00]\n", "egress_proxy_vendor_data")
    assert error.startswith("egress_proxy_vendor_data holds binary data") and "token-1234" not in error


# The values the modules write (domain XML, its metadata, volume names, the seed's meta-data and network-config), each
# through the role's real path on the controller: proxy_instances, then proxy_set_args with kvm_proxy_set's own
# validation. (what the message names, how a hostile text becomes (the role's variables, the instance's own keys)).
IMAGE = {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"}
STATIC = {"address": "198.18.0.5/24"}
TWO_NICS = dict(STATIC, outside=OUTSIDE)
MODULE_VALUES = [
    ("pool", lambda text: ({"egress_proxy_pool": "default" + text}, {})),
    ("bridge", lambda text: ({"egress_proxy_bridge": "br0" + text}, {})),
    ("network", lambda text: ({"egress_proxy_bridge": "", "egress_proxy_network": text + "default"}, {})),
    ("host", lambda text: ({"egress_proxy_host": "hv1" + text}, {})),
    ("image name", lambda text: ({"egress_proxy_image": dict(IMAGE, name="debian-12" + text)}, {})),
    ("checksum", lambda text: ({"egress_proxy_image": dict(IMAGE, checksum="sha256:" + "a" * 64 + text)}, {})),
    ("format", lambda text: ({"egress_proxy_image": dict(IMAGE, format="qcow2" + text)}, {})),
    ("MAC address", lambda text: ({}, {"mac": "52:54:00:00:00:01" + text})),
    ("interfaces[0]: gateway", lambda text: ({}, dict(STATIC, gateway="198.18.0.1" + text))),
    ("interfaces[0]: search", lambda text: ({}, dict(STATIC, search=["example.com" + text]))),
    ("interfaces[0]: gateway6", lambda text: ({}, dict(STATIC, address6="2001:db8:10::5/64", gateway6="fe80::1" + text))),
    ("interfaces[0]: gateway6", lambda text: ({}, dict(STATIC, address6="2001:db8:10::5/64",
                                                       gateway6="fe80::1%" + text))),
    ("interfaces[1]: bridge", lambda text: ({}, dict(TWO_NICS, outside=dict(OUTSIDE, bridge="br1" + text)))),
    ("interfaces[1]: network", lambda text: ({"egress_proxy_outside": {"network": "outside" + text}},
                                             dict(TWO_NICS, outside={"address": "198.19.0.5/24"}))),
    ("interfaces[1]: MAC address", lambda text: ({}, dict(TWO_NICS, outside=dict(OUTSIDE, mac="52:54:00:00:00:02" + text)))),
    ("interfaces[1]: gateway", lambda text: ({}, dict(TWO_NICS, outside=dict(OUTSIDE, gateway="198.19.0.1" + text)))),
    ("interfaces[1]: gateway6", lambda text: ({"egress_proxy_outside": {"gateway6": "2001:db8:20::1" + text}},
                                              dict(TWO_NICS, outside=dict(OUTSIDE, address6="2001:db8:20::5/64")))),
    ("interfaces[1]: search", lambda text: ({}, dict(TWO_NICS, outside=dict(OUTSIDE, search=["example.com" + text])))),
    ("machine", lambda text: ({"egress_proxy_machine": "q35" + text}, {})),
    ("cpu_mode", lambda text: ({"egress_proxy_cpu_mode": "host-model" + text}, {})),
    ("virt_type", lambda text: ({"egress_proxy_virt_type": "kvm" + text}, {})),
]
# Their messages are ansible-core's (ArgumentSpecValidator's choices), which quote a value whole; in a play the role's
# argument spec, with the same choices, refuses such a value first.
CHOICE_MESSAGES = ("format", "cpu_mode", "virt_type")


def set_args(variables, entry, render=False):
    """kvm_proxy_set's arguments for one proxy ``egress-1`` (and ``entry``) as tasks/arguments.yml shapes them; with
    ``render``, from the render of its templates, so with its policy (role_set_args)."""
    return role_set_args([dict(entry, name="egress-1")], render=render, **dict(
        {"egress_proxy_bridge": "br0", "egress_proxy_allowed_clients": ["10.0.0.0/8"], "egress_proxy_image": IMAGE},
        **variables))


@pytest.mark.parametrize("text", HOSTILE, ids=[repr(text)[:12] for text in HOSTILE])
@pytest.mark.parametrize("option, make", MODULE_VALUES, ids=[option for option, _make in MODULE_VALUES])
def test_a_hostile_value_the_modules_write_is_refused_before_anything_naming_it(option, make, text):
    with pytest.raises(AnsibleFilterError) as refused:
        set_args(*make(text))
    message = refused.value.message
    assert message.startswith("The proxies of hv1 are not usable: ") and option in message, message
    if option.startswith("interfaces["):
        # The module's names for the NICs, said in the role's variables.
        assert message.endswith(" " + NIC_VARIABLES) and "dns (nameservers)" in NIC_VARIABLES
        message = message[:-len(NIC_VARIABLES)]
    if option not in CHOICE_MESSAGES:
        assert "proxies[0] (egress-1): " in message and len(message) < 400, message
        assert all(character not in message for character in "\n\r\x00\u2028\u0085\t"), message


def metadata_uid(uid):
    """``uid`` written into a domain's metadata element and read back from the XML text, with the element's children."""
    domain = etree.fromstring("<domain><metadata/></domain>")
    domain.find("metadata").append(build_instance_element(uid, datetime.datetime.now(datetime.timezone.utc)))
    read = etree.fromstring(etree.tostring(domain))
    return instance_metadata_from_domain_element(read).uid, [etree.QName(child).localname for child in read.find("metadata")[0]]


@pytest.mark.parametrize("text", HOSTILE, ids=[repr(text)[:12] for text in HOSTILE])
def test_a_hostile_owner_is_refused_naming_it_or_recorded_whole_as_one_element(text):
    """egress_proxy_uid is the text of <uid> in each proxy's metadata; egress_proxy_adopt_uids are only compared with it."""
    uid = "deploy" + text + "eu"
    try:
        arguments = set_args({"egress_proxy_uid": uid, "egress_proxy_adopt_uids": ["old" + text + "eu"]}, {})
    except AnsibleFilterError as refused:
        assert "owner uid " in refused.message and len(refused.message) < 400, refused.message
        assert "\n" not in refused.message
        return
    assert (arguments["uid"], arguments["adopt_uids"]) == (uid, ["old" + text + "eu"])
    assert metadata_uid(uid) == (uid, ["managed", "uid", "createdAt"])


def test_an_owner_with_a_nul_is_refused_naming_egress_proxy_uid_before_a_password_is_hashed_with_it():
    with pytest.raises(AnsibleFilterError) as refused:
        set_args({"egress_proxy_uid": "deploy\x00eu", "egress_proxy_users": [{"name": "alice", "password": "pw-1234"}]}, {})
    assert refused.value.message.startswith("The proxies of hv1: egress_proxy_uid: owner uid 'deploy\\x00eu' is not valid")
    assert "pw-1234" not in refused.value.message


@pytest.mark.parametrize("text", HOSTILE, ids=[repr(text)[:12] for text in HOSTILE])
def test_a_hostile_user_name_is_refused_naming_the_entry_never_the_password(text):
    users = [{"name": "alice", "password": "pw-1234"}, {"name": "bo" + text + "b", "password": "pw-5678"}]
    for variables, entry in (({"egress_proxy_users": users}, {}), ({}, {"users": users})):
        with pytest.raises(AnsibleFilterError) as refused:
            set_args(variables, entry)
        message = refused.value.message
        assert "users[1].name " in message and "egress-1 on hv1" in message, message
        assert "pw-" not in message and "\n" not in message and len(message) < 400, message


@pytest.mark.parametrize("text", HOSTILE, ids=[repr(text)[:12] for text in HOSTILE])
def test_a_hostile_password_is_hashed_never_shown_and_the_users_file_keeps_one_line_each(text):
    users = [{"name": "alice", "password": "pw-" + text + "-1234"}, {"name": "bob", "password": "pw-5678"}]
    try:
        arguments = set_args({"egress_proxy_users": users}, {}, render=True)
    except AnsibleFilterError as refused:
        assert "users[0] (\"alice\") of egress-1 on hv1: the password" in refused.message
        assert "1234" not in refused.message
        return
    assert "1234" not in str(arguments)
    (proxy,) = arguments["proxies"]
    user_data_document(proxy["user_data"])
    written = policy_files(proxy)[SQUID_USERS]["secret_content"]
    assert [line.split(":")[0] for line in written.splitlines()] == ["alice", "bob"]


@pytest.mark.parametrize("variables, entry", [({"egress_proxy_deny_internal": "sometimes"}, {}),
                                              ({}, {"deny_internal": "true\x00"}), ({}, {"deny_internal": "yes'"}),
                                              ({}, {"deny_internal": "9" * 5000})])
def test_a_deny_internal_that_is_no_boolean_is_refused_not_read_as_false(variables, entry):
    with pytest.raises(AnsibleFilterError) as refused:
        set_args(variables, entry)
    assert "egress-1 on hv1 are not usable: deny_internal " in refused.value.message
    assert "is not a boolean" in refused.value.message and len(refused.value.message) < 400


@pytest.mark.parametrize("value, written", [("yes", True), ("off", False), (" true\n", True), (0, False)])
def test_deny_internal_given_as_text_of_a_boolean_is_read_as_that_boolean(value, written):
    variables = role_filter_variables(egress_proxy_bridge="br0", egress_proxy_allowed_clients=["10.0.0.0/8"],
                                      egress_proxy_image=IMAGE, egress_proxy_deny_internal=value)
    (filled,) = proxy_instances([{"name": "egress-1"}], variables)
    assert filled["deny_internal"] is written


@pytest.mark.parametrize("variables, entry, option", [({"egress_proxy_vcpus": "9" * 5000}, {}, "vcpus"),
                                                      ({}, {"memory_mib": "9" * 5000}, "memory_mib"),
                                                      ({}, {"disk_size_gb": "9" * 5000}, "disk_size_gb")])
def test_a_number_of_thousands_of_digits_is_refused_naming_it(variables, entry, option):
    """An argument spec makes "9" * 5000 an int, which Python refuses to write back in a message (over 4300 digits)."""
    with pytest.raises(AnsibleFilterError) as refused:
        set_args(variables, entry)
    assert "proxies[0] (egress-1): %s must be a whole number" % option in refused.value.message
    assert refused.value.message.endswith("got a number of more than 20 digits.")


def test_hostile_ssh_host_key_types_and_via_are_written_inert():
    """The argument spec's choices refuse these in a play; written anyway, they stay one YAML string each and on/off."""
    types = ["ed25519" + text for text in HOSTILE]
    variables, _entry = role_variables({"egress_proxy_ssh_host_key_types": types})
    (rendered,) = render_proxies([variables])
    user_data, squid = squid_conf(rendered)
    assert user_data["ssh_genkeytypes"] == types
    assert directives(squid) == DIRECTIVES
    renders = [("squid.conf.j2", role_variables({"egress_proxy_via": "true" + text})[0]) for text in HOSTILE]
    for rendered in render_each(renders):
        assert directives(rendered["text"]) == DIRECTIVES
        assert [line for line in rendered["text"].splitlines() if line.startswith("via")] in (["via on"], ["via off"])


# egress_proxy_outside's pool and segments, as tasks/pool.yml hands them to the allocation: a hostile text in any entry
# is refused naming the variable and the hypervisor, before an address from it could reach a proxy's network-config.
POOL_VALUES = [
    ("egress_proxy_outside.pool[1] of hv1", lambda text: {"pool": ["198.19.0.10", "198.19.0.20" + text]}),
    ("egress_proxy_outside.pool[0] of hv1", lambda text: {"pool": ["198.19.0.10-" + text + "198.19.0.20"]}),
    ("egress_proxy_outside.pool[0] of hv1", lambda text: {"pool": ["2001:db8:19::" + text + "/64"]}),
    ("egress_proxy_outside.prefix of hv1", lambda text: {"pool": ["198.19.0.10"], "prefix": "198.19.0.0/24" + text}),
    ("egress_proxy_outside.prefix6 of hv1", lambda text: {"pool": ["2001:db8:19::/64"], "prefix6": text + "2001:db8:19::/64"}),
]


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize("case", range(len(POOL_VALUES)), ids=[variable for variable, _make in POOL_VALUES])
def test_a_hostile_pool_value_is_refused_naming_it(case, text):
    variable, make = POOL_VALUES[case]
    outside = dict(OUTSIDE, **make(text))
    hostvars = {"hv1": {"egress_proxy__pool_view": egress_pool_view([{"name": "egress-1"}], outside, "present"),
                        "egress_proxy__pool_listing": {"proxies": []}, "egress_proxy_outside": outside}}
    with pytest.raises(AnsibleFilterError) as raised:
        egress_addresses(["hv1"], hostvars, [], ["hv1"])
    message = raised.value.message
    assert message.startswith(variable + ": "), message
    assert len(message) < 400 and control_character(message) is None, message
