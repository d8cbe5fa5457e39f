# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Which role variable replaces a proxy and which is applied in place, as docs/role-egress_proxy.md's table says.

Each variable is changed alone on one rendered proxy (tasks/arguments.yml's path: proxy_instances, the templates,
proxy_set_args), and the arguments are read as kvm_proxy_set reads them (its argument spec, SetRequest): a changed
spec digest replaces the VM (the module compares it with the one recorded in the domain), a changed policy digest
alone is written in place through the guest agent, a changed state or autostart is set on the domain, and anything
else changes nothing in the proxy.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.argspec import common_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.argspec import (
    KVM_PROXY_SET_MUTUALLY_EXCLUSIVE,
    KVM_PROXY_SET_REQUIRED_IF,
    kvm_proxy_set_argument_spec,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import SetRequest, spec_digest
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import fleet_groups, member_view
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import (
    OMIT,
    REPO_ROOT,
    render_texts,
    role_defaults,
    role_variables,
    set_options,
)

DOC = os.path.join(REPO_ROOT, "docs", "role-egress_proxy.md")
HEADING = "## What a change replaces"

ENTRY = {"name": "egress-1"}
# A static dual-stack proxy with users, metrics (the default) and syslog, so that each variable below has an effect.
BASE = {"egress_proxy_bridge": "br0", "egress_proxy_allowed_clients": ["198.51.100.0/24"],
        "egress_proxy_address": "198.51.100.5/24", "egress_proxy_gateway": "198.51.100.1",
        "egress_proxy_address6": "2001:db8:10::5/64", "egress_proxy_gateway6": "2001:db8:10::1",
        "egress_proxy_dns": ["198.51.100.53"], "egress_proxy_search": ["example.net"],
        "egress_proxy_users": [{"name": "alice", "password": "correct horse"}],
        "egress_proxy_syslog": "198.51.100.9:514",
        "egress_proxy_image": {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"}}
# The proxy joins a group with a proxy of another hypervisor: egress_proxy__ha is what vars/main.yml finds across the
# fleet.
HA_GROUPS = [{"name": "office", "address": "198.51.100.10", "members": ["egress-1", "egress-2"]}]
HA_FOUND = fleet_groups(HA_GROUPS, [member_view([ENTRY], HA_GROUPS, {"egress_proxy_address": "198.51.100.5/24"}, "hv1"),
                                    member_view([{"name": "egress-2", "address": "198.51.100.7/24"}], HA_GROUPS, {}, "hv2")],
                        "egress_proxies.kvm.egress_proxy")
# Each variable's change: the overrides that make it (a variable that needs others changed with it says so).
CHANGES = {
    "egress_proxy_state": {"egress_proxy_state": "stopped"},
    "egress_proxy_ha_groups": {"egress_proxy_ha_groups": HA_GROUPS, "egress_proxy__ha": HA_FOUND},
    "egress_proxy_autostart": {"egress_proxy_autostart": False},
    "egress_proxy_image": {"egress_proxy_image": {"name": "debian-13", "url": "https://images.example/debian-13.qcow2"}},
    "egress_proxy_pool": {"egress_proxy_pool": "proxies"},
    "egress_proxy_bridge": {"egress_proxy_bridge": "br2"},
    "egress_proxy_network": {"egress_proxy_bridge": "", "egress_proxy_network": "lan"},
    "egress_proxy_address": {"egress_proxy_address": "198.51.100.6/24"},
    "egress_proxy_gateway": {"egress_proxy_gateway": "198.51.100.2"},
    "egress_proxy_address6": {"egress_proxy_address6": "2001:db8:10::6/64"},
    "egress_proxy_gateway6": {"egress_proxy_gateway6": "fe80::1"},
    "egress_proxy_dns": {"egress_proxy_dns": ["198.51.100.54"]},
    "egress_proxy_search": {"egress_proxy_search": ["example.org"]},
    "egress_proxy_outside": {"egress_proxy_outside": {"bridge": "br1", "address": "203.0.113.5/24",
                                                      "gateway": "203.0.113.1"},
                             "egress_proxy_gateway": "", "egress_proxy_gateway6": ""},
    "egress_proxy_vcpus": {"egress_proxy_vcpus": 2},
    "egress_proxy_memory_mib": {"egress_proxy_memory_mib": 2048},
    "egress_proxy_disk_size_gb": {"egress_proxy_disk_size_gb": 20},
    "egress_proxy_virt_type": {"egress_proxy_virt_type": "qemu"},
    "egress_proxy_cpu_mode": {"egress_proxy_cpu_mode": "host-model"},
    "egress_proxy_machine": {"egress_proxy_machine": "pc"},
    "egress_proxy_guest_agent_rpcs": {"egress_proxy_guest_agent_rpcs": []},
    "egress_proxy_metrics": {"egress_proxy_metrics": False},
    "egress_proxy_install_packages": {"egress_proxy_install_packages": False},
    "egress_proxy_ssh_authorized_keys": {"egress_proxy_ssh_authorized_keys": ["ssh-ed25519 AAAAC3Nza admin"]},
    "egress_proxy_ssh_host_key_types": {"egress_proxy_ssh_host_key_types": ["ed25519"]},
    "egress_proxy_vendor_data": {"egress_proxy_vendor_data": ""},
    "egress_proxy_user_data": {"egress_proxy_user_data": "#cloud-config\npackages: [squid]\n"},
    "egress_proxy_port": {"egress_proxy_port": 3129},
    "egress_proxy_allowed_clients": {"egress_proxy_allowed_clients": ["198.51.100.0/25"]},
    "egress_proxy_safe_ports": {"egress_proxy_safe_ports": ["80", "443"]},
    "egress_proxy_connect_ports": {"egress_proxy_connect_ports": ["443", "8443"]},
    "egress_proxy_allowed_destinations": {"egress_proxy_allowed_destinations": [".example.com"]},
    "egress_proxy_denied_destinations": {"egress_proxy_denied_destinations": ["secret.example.com"]},
    "egress_proxy_deny_internal": {"egress_proxy_deny_internal": False},
    "egress_proxy_mode": {"egress_proxy_mode": "report"},
    "egress_proxy_tls_sni_check": {"egress_proxy_tls_sni_check": True},
    "egress_proxy_profiles": {"egress_proxy_profiles": [{"name": "ci", "users": ["alice"], "allowed_destinations": [".debian.org"]}]},
    "egress_proxy_users": {"egress_proxy_users": [{"name": "alice", "password": "battery staple"}]},
    "egress_proxy_forwarded_for": {"egress_proxy_forwarded_for": "on"},
    "egress_proxy_via": {"egress_proxy_via": True},
    "egress_proxy_metrics_port": {"egress_proxy_metrics_port": 9302},
    "egress_proxy_metrics_clients": {"egress_proxy_metrics_clients": ["198.51.100.10"]},
    "egress_proxy_syslog": {"egress_proxy_syslog": "198.51.100.9:1514"},
    "egress_proxy_syslog_protocol": {"egress_proxy_syslog_protocol": "tcp"},
    "egress_proxy_on_drift": {"egress_proxy_on_drift": "ignore"},
    "egress_proxy_on_unreachable_agent": {"egress_proxy_on_unreachable_agent": "replace"},
    "egress_proxy_shutdown_timeout": {"egress_proxy_shutdown_timeout": 30},
    "egress_proxy_gc": {"egress_proxy_gc": False},
    "egress_proxy_gc_grace_period": {"egress_proxy_gc_grace_period": 60},
    "egress_proxy_max_unavailable": {"egress_proxy_max_unavailable": 2},
    "egress_proxy_wait_for_port": {"egress_proxy_wait_for_port": True},
    "egress_proxy_wait_for_ip": {"egress_proxy_wait_for_ip": False},
    "egress_proxy_wait_timeout": {"egress_proxy_wait_timeout": 600},
    "egress_proxy_connect_timeout": {"egress_proxy_connect_timeout": 60},
    "egress_proxy_image_prune": {"egress_proxy_image_prune": True},
    "egress_proxy_no_log": {"egress_proxy_no_log": True},
    "egress_proxy_metrics_file_sd": {"egress_proxy_metrics_file_sd": "/etc/prometheus/egress.json"},
    "egress_proxy_metrics_file_sd_host": {"egress_proxy_metrics_file_sd_host": "prometheus.example.net"},
    "egress_proxy_metrics_file_sd_prune": {"egress_proxy_metrics_file_sd_prune": False},
}
# The variables the table leaves out, and why: the list of proxies itself, who owns them, which hypervisor, destroy.
NOT_IN_TABLE = {"egress_proxy_instances", "egress_proxy_fleet", "egress_proxy_uid", "egress_proxy_adopt_uids",
                "egress_proxy_uri", "egress_proxy_host", "egress_proxy_remove_image"}

REPLACES, POLICY, IN_PLACE, NOTHING = "replaces", "policy", "in place", "nothing"
# How a row of the table starts, for each effect.
SAID = ((REPLACES, "replaces"), (POLICY, "policy"), (IN_PLACE, "in place"), (NOTHING, "nothing"))


def read_by_the_module(cases):
    """For each of ``cases`` (overrides of BASE), the proxy as kvm_proxy_set reads tasks/arguments.yml's arguments:
    (spec digest, policy digest, state, autostart). The templates of every case are rendered in one go."""
    from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_instances import proxy_instances
    from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_set_args import proxy_set_args

    variables = [role_variables(**dict(BASE, **overrides)) for overrides in cases]
    instances = [proxy_instances([dict(ENTRY)], each) for each in variables]
    renders = render_texts([dict(role_defaults(), inventory_hostname="hv1", egress_proxy__instances=listed,
                                 **dict(BASE, **overrides)) for listed, overrides in zip(instances, cases)])
    spec = common_argument_spec()
    spec.update(kvm_proxy_set_argument_spec())
    validator = ArgumentSpecValidator(spec, mutually_exclusive=KVM_PROXY_SET_MUTUALLY_EXCLUSIVE,
                                      required_if=KVM_PROXY_SET_REQUIRED_IF)
    read = []
    for listed, each, rendered in zip(instances, variables, renders):
        assert "error" not in rendered, rendered["error"]
        checked = validator.validate(proxy_set_args(listed, each, options=set_options(each), omitted=OMIT,
                                                    texts=rendered["texts"]))
        assert not checked.error_messages, checked.error_messages
        (proxy,) = SetRequest.from_params(checked.validated_parameters).proxies
        read.append((spec_digest(proxy.spec()), proxy.policy_digest, proxy.state, proxy.autostart))
    return read


@pytest.fixture(scope="module")
def effects():
    """{variable: what its change in CHANGES does to the proxy}."""
    variables = sorted(CHANGES)
    before, *afters = read_by_the_module([{}] + [CHANGES[variable] for variable in variables])
    found = {}
    for variable, after in zip(variables, afters):
        if before[0] != after[0]:
            found[variable] = REPLACES
        elif before[1] != after[1]:
            found[variable] = POLICY
        elif before[2:] != after[2:]:
            found[variable] = IN_PLACE
        else:
            found[variable] = NOTHING
    return found


def documented():
    """{variable: effect} as the table under HEADING says it: each row names its variables in backquotes, and its
    second cell starts with what a change does."""
    with open(DOC) as handle:
        text = handle.read()
    section = text.split(HEADING + "\n", 1)[1].split("\n## ", 1)[0]
    table = {}
    for row in section.splitlines():
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if not row.startswith("| `") or len(cells) < 2:
            continue
        said = cells[1].lower()
        kind = next(kind for kind, words in SAID if said.startswith(words))
        for variable in re.findall(r"`(egress_proxy_[a-z0-9_]+)`", cells[0]):
            assert variable not in table, "%s twice in the table" % variable
            table[variable] = kind
    return table


def test_the_table_names_every_variable_but_the_list_owners_hypervisor_and_destroy():
    assert set(documented()) == set(role_defaults()) - NOT_IN_TABLE
    assert set(CHANGES) == set(documented())


@pytest.mark.parametrize("variable", sorted(CHANGES))
def test_a_change_does_what_the_table_says(variable, effects):
    assert effects[variable] == documented()[variable]
