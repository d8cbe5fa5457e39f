# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The kvm_proxies inventory plugin over the fake seam (Hypervisor.open is replaced by a URI -> fake map)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import os
import sys

import pytest
from ansible import template as ansible_template
from ansible.errors import AnsibleParserError
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import inventory_loader
from ansible.template import Templar

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.ha_group import HaGroup
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt import hypervisor as _libvirt
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import ADDRESS_SOURCE_AGENT
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import RUNNING, SHUTOFF, FakeHypervisor
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_inventory import (
    INSIDE_MAC,
    OUTSIDE_MAC,
    hand_made_domain,
    ipv4,
    mac_of,
    managed_domain,
    two_nic_domain,
)

PLUGIN_DIR = os.path.join(os.path.dirname(_libvirt.__file__), os.pardir, os.pardir, "inventory")
NAS1 = "qemu+ssh://root@nas1/system"
NAS2 = "qemu+ssh://root@nas2/system"


Parsed = collections.namedtuple("Parsed", ["inventory", "warnings", "plugin"])


class Warnings:
    """Stands in for the plugin's Display; keeps the warnings."""

    def __init__(self):
        self.messages = []

    def warning(self, message, *args, **kwargs):
        self.messages.append(message)

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


@pytest.fixture
def hypervisors():
    nas1 = FakeHypervisor(hostname="nas1.example.net", uri=NAS1)
    managed_domain(nas1, "proxy-one", "uid-1", state=RUNNING, arp="198.18.0.150")
    managed_domain(nas1, "proxy-two", "uid-2", state=RUNNING)
    hand_made_domain(nas1, "hand-made")
    nas2 = FakeHypervisor(hostname="nas2.example.net", uri=NAS2)
    managed_domain(nas2, "proxy-three", "uid-1", state=SHUTOFF)
    return {NAS1: nas1, NAS2: nas2}


@pytest.fixture
def opened(monkeypatch, hypervisors):
    """The URIs the plugin opened, in order; an unknown URI is an unreachable hypervisor."""
    uris = []

    def fake_open(uri):
        uris.append(uri)
        if uri not in hypervisors:
            raise errors.classify(errors.VIR_ERR_SYSTEM_ERROR, "Cannot recv data: ssh: connect to host port 22: No route to host",
                                  "connecting to hypervisor %s" % uri)
        return hypervisors[uri]

    monkeypatch.setattr(_libvirt.Hypervisor, "open", fake_open)
    return uris


def load_plugin():
    """The plugin through Ansible's plugin loader, which reads its option definitions from DOCUMENTATION.

    Plain pytest runs without Ansible's collection loader, so the plugin is
    loaded from its directory, under its short name. Configuration files
    name it by FQCN (``plugin: egress_proxies.kvm.kvm_proxies``), which the
    loader would have recorded when resolving the FQCN; the integration test
    resolves it for real through ansible-inventory.
    """
    inventory_loader.add_directory(PLUGIN_DIR)
    plugin = inventory_loader.get("kvm_proxies")
    plugin._redirected_names = [plugin.NAME]
    return plugin


@pytest.fixture
def parse(monkeypatch, tmp_path, opened):
    """parse(config_yaml, cache=True, libvirt_import_error=None) -> Parsed(inventory, warning messages, plugin)."""
    def run(config, cache=True, file_name="fleet.kvm_proxies.yml", libvirt_import_error=None):
        plugin = load_plugin()
        # The fake stands in for libvirt, so the bindings need not be installed where unit tests run.
        monkeypatch.setattr(sys.modules[type(plugin).__module__], "LIBVIRT_REQUIREMENT",
                            ("libvirt-python", "python3-libvirt", libvirt_import_error))
        warnings = Warnings()
        plugin.display = warnings
        path = tmp_path / file_name
        path.write_text("plugin: egress_proxies.kvm.kvm_proxies\n" + config)
        assert plugin.verify_file(str(path))
        inventory = InventoryData()
        plugin.parse(inventory, DataLoader(), str(path), cache=cache)
        return Parsed(inventory, warnings.messages, plugin)

    return run


TWO_HYPERVISORS = """
hypervisors:
  - {name: nas1, uri: "%s"}
  - {name: nas2, uri: "%s"}
""" % (NAS1, NAS2)


def members(inventory, group):
    return sorted(host.name for host in inventory.groups[group].get_hosts())


def test_one_host_per_managed_proxy_grouped_by_hypervisor_state_and_owner(parse):
    inventory, warnings = parse(TWO_HYPERVISORS)[:2]
    assert warnings == []
    assert members(inventory, "kvm_proxies") == ["proxy-one", "proxy-three", "proxy-two"]
    assert "hand-made" not in inventory.hosts
    assert members(inventory, "kvm_hypervisor_nas1") == ["proxy-one", "proxy-two"]
    assert members(inventory, "kvm_hypervisor_nas2") == ["proxy-three"]
    assert members(inventory, "kvm_state_running") == ["proxy-one"]
    assert members(inventory, "kvm_state_provisioning") == ["proxy-two"]
    assert members(inventory, "kvm_state_stopped") == ["proxy-three"]
    assert members(inventory, "kvm_owner_uid_1") == ["proxy-one", "proxy-three"]
    assert members(inventory, "kvm_owner_uid_2") == ["proxy-two"]


def test_host_vars(parse):
    inventory = parse(TWO_HYPERVISORS).inventory
    one = inventory.get_host("proxy-one").get_vars()
    assert one["ansible_host"] == "198.18.0.150"
    assert one["kvm_proxy_id"] == "hosts/nas1/domains/proxy-one"
    assert one["kvm_proxy_hypervisor"] == "nas1"
    assert one["kvm_proxy_uri"] == NAS1
    assert one["kvm_proxy_state"] == "Running"
    assert one["kvm_proxy_libvirt_state"] == "running"
    assert one["kvm_proxy_ip"] == "198.18.0.150"
    assert one["kvm_proxy_uid"] == "uid-1"
    assert one["kvm_proxy_created_at"] == "2026-09-04T14:04:00Z"
    assert one["kvm_proxy_vcpus"] == 2
    assert one["kvm_proxy_memory_mib"] == 512
    assert [disk["volume"] for disk in one["kvm_proxy_disks"]] == ["proxy-one.qcow2", "proxy-one-seed.iso"]
    # No address yet: the host is listed without ansible_host; the state says why.
    two = inventory.get_host("proxy-two").get_vars()
    assert "ansible_host" not in two
    assert two["kvm_proxy_state"] == "Provisioning"
    assert two["kvm_proxy_ip"] is None


def test_host_vars_carry_every_nic_and_the_egress_address(parse, hypervisors):
    two_nic_domain(hypervisors[NAS2], "proxy-egress", arp={INSIDE_MAC: "198.18.11.70"},
                   agent={OUTSIDE_MAC: "198.18.21.70"})
    inventory = parse(TWO_HYPERVISORS).inventory
    egress = inventory.get_host("proxy-egress").get_vars()
    assert [(nic["role"], nic["bridge"], nic["ipv4"], nic["egress"]) for nic in egress["kvm_proxy_interfaces"]] == [
        ("inside", "br0", "198.18.11.70", False), ("outside", "br1", "198.18.21.70", True)]
    assert egress["kvm_proxy_egress_ip"] == "198.18.21.70"
    # The static egress address the domain's metadata records, whether or not the NIC reports one.
    assert egress["kvm_proxy_egress_address"] == "198.18.21.70"
    # The controller reaches a proxy on its first (inside) NIC.
    assert egress["ansible_host"] == "198.18.11.70"
    one = inventory.get_host("proxy-one").get_vars()
    assert one["kvm_proxy_egress_ip"] == one["kvm_proxy_ip"] == "198.18.0.150"
    assert one["kvm_proxy_egress_address"] is one["kvm_proxy_egress_address6"] is None  # on DHCP


def test_hypervisor_name_defaults_to_libvirts_host_name(parse, opened):
    inventory = parse('hypervisors:\n  - uri: "%s"\n' % NAS1).inventory
    assert opened == [NAS1]
    assert members(inventory, "kvm_hypervisor_nas1_example_net") == ["proxy-one", "proxy-two"]
    assert inventory.get_host("proxy-one").get_vars()["kvm_proxy_id"] == "hosts/nas1.example.net/domains/proxy-one"


def test_default_is_the_local_system_hypervisor(parse, opened, hypervisors):
    hypervisors["qemu:///system"] = hypervisors.pop(NAS1)
    inventory = parse("").inventory
    assert opened == ["qemu:///system"]
    assert members(inventory, "kvm_proxies") == ["proxy-one", "proxy-two"]


def test_uid_filter(parse):
    inventory = parse(TWO_HYPERVISORS + "uid: uid-1\n").inventory
    assert members(inventory, "kvm_proxies") == ["proxy-one", "proxy-three"]


def test_unreachable_hypervisor_is_a_warning_naming_it_by_default(parse):
    config = TWO_HYPERVISORS + '  - {name: nas3, uri: "qemu+ssh://root@nas3/system"}\n'
    inventory, warnings = parse(config)[:2]
    assert members(inventory, "kvm_proxies") == ["proxy-one", "proxy-three", "proxy-two"]
    assert len(warnings) == 1
    assert "could not read hypervisor nas3" in warnings[0]
    assert "No route to host" in warnings[0]


def test_unreachable_hypervisor_fails_with_strict(parse):
    config = TWO_HYPERVISORS + '  - {uri: "qemu+ssh://root@nas3/system"}\nstrict: true\n'
    with pytest.raises(AnsibleParserError) as caught:
        parse(config)
    assert "could not read hypervisor qemu+ssh://root@nas3/system" in str(caught.value)
    assert "No route to host" in str(caught.value)


def test_hypervisor_failing_mid_listing_is_unreadable(parse, hypervisors):
    hypervisors[NAS2].fail("list_domains", errors.VIR_ERR_RPC, "End of file while reading data")
    with pytest.raises(AnsibleParserError, match="could not read hypervisor nas2.*End of file"):
        parse(TWO_HYPERVISORS + "strict: true\n")


def test_unreadable_domain_is_skipped_with_a_warning(parse, hypervisors):
    hypervisors[NAS1].fail("domain_state", errors.VIR_ERR_INTERNAL_ERROR, "cannot read state", when=lambda dom: dom.name == "proxy-two")
    inventory, warnings = parse(TWO_HYPERVISORS + "strict: true\n")[:2]
    assert members(inventory, "kvm_proxies") == ["proxy-one", "proxy-three"]
    assert len(warnings) == 1
    assert "proxy-two" in warnings[0] and "cannot read state" in warnings[0]


def test_compose_groups_and_keyed_groups(parse):
    config = TWO_HYPERVISORS + """
compose:
  ansible_user: "'debian'"
  proxy_url: "'http://' ~ kvm_proxy_ip ~ ':3128'"
groups:
  reachable: kvm_proxy_ip is not none
keyed_groups:
  - key: kvm_proxy_libvirt_state
    prefix: libvirt
"""
    inventory = parse(config).inventory
    one = inventory.get_host("proxy-one").get_vars()
    assert one["ansible_user"] == "debian"
    assert one["proxy_url"] == "http://198.18.0.150:3128"
    assert members(inventory, "reachable") == ["proxy-one"]
    assert members(inventory, "libvirt_running") == ["proxy-one", "proxy-two"]
    assert members(inventory, "libvirt_shutoff") == ["proxy-three"]


def ha_members(hypervisors):
    """egress-demo-1 (nas1, its guest holding the group's address) and egress-demo-2 (nas2, not holding it)."""
    group = HaGroup("demo", "198.18.40.10").recorded()
    for uri, name, addrs in ((NAS1, "egress-demo-1", [ipv4("198.18.40.11"), ipv4("198.18.40.10")]),
                             (NAS2, "egress-demo-2", [ipv4("198.18.40.12")])):
        dom = managed_domain(hypervisors[uri], name, "uid-1", state=RUNNING, ha_group_json=group)
        dom.addresses[ADDRESS_SOURCE_AGENT] = {"eth0": {"hwaddr": mac_of(name), "addrs": addrs}}


def test_ha_group_and_holder_are_host_vars_and_each_group_is_an_inventory_group(parse, hypervisors):
    ha_members(hypervisors)
    inventory, warnings = parse(TWO_HYPERVISORS + """
strict: true
groups:
  ha_holders: kvm_proxy_ha_holder is true
keyed_groups:
  - key: "[kvm_proxy_ha_group.name] if kvm_proxy_ha_group else []"
    prefix: ha
compose:
  ha_address: kvm_proxy_ha_group.address if kvm_proxy_ha_group else none
""")[:2]
    assert warnings == []
    one, two = (inventory.get_host(name).get_vars() for name in ("egress-demo-1", "egress-demo-2"))
    assert one["kvm_proxy_ha_group"] == two["kvm_proxy_ha_group"] == {
        "name": "demo", "address": "198.18.40.10", "address6": None}
    assert (one["kvm_proxy_ha_holder"], two["kvm_proxy_ha_holder"]) == (True, False)
    assert members(inventory, "kvm_ha_group_demo") == members(inventory, "ha_demo") == ["egress-demo-1", "egress-demo-2"]
    assert members(inventory, "ha_holders") == ["egress-demo-1"]
    assert one["ha_address"] == "198.18.40.10"
    # A proxy in no group: null host vars, no HA group.
    lone = inventory.get_host("proxy-one").get_vars()
    assert (lone["kvm_proxy_ha_group"], lone["kvm_proxy_ha_holder"], lone["ha_address"]) == (None, None, None)
    assert [group.name for group in inventory.get_host("proxy-one").get_groups() if "ha" in group.name] == []


def test_same_name_on_two_hypervisors(parse, hypervisors):
    managed_domain(hypervisors[NAS2], "proxy-one", "uid-9", state=SHUTOFF)
    inventory, warnings = parse(TWO_HYPERVISORS)[:2]
    assert inventory.get_host("proxy-one").get_vars()["kvm_proxy_id"] == "hosts/nas1/domains/proxy-one"
    assert len(warnings) == 1
    assert "hosts/nas2/domains/proxy-one is left out" in warnings[0]
    assert "qualify_hostnames" in warnings[0]

    with pytest.raises(AnsibleParserError, match="qualify_hostnames"):
        parse(TWO_HYPERVISORS + "strict: true\n")

    inventory, warnings = parse(TWO_HYPERVISORS + "qualify_hostnames: true\n")[:2]
    assert warnings == []
    assert members(inventory, "kvm_proxies") == ["proxy-one.nas1", "proxy-one.nas2", "proxy-three.nas2", "proxy-two.nas1"]


def test_cache_serves_the_second_run_and_a_refresh_asks_again(parse, opened, hypervisors, tmp_path):
    cache = "cache: true\ncache_plugin: jsonfile\ncache_connection: %s\n" % (tmp_path / "cache")
    plugin = parse(TWO_HYPERVISORS + cache).plugin
    plugin.update_cache_if_changed()
    assert sorted(opened) == [NAS1, NAS2]  # read concurrently: in any order

    hypervisors.clear()  # every hypervisor unreachable now: only the cache can answer
    inventory, warnings = parse(TWO_HYPERVISORS + cache)[:2]
    assert sorted(opened) == [NAS1, NAS2]  # read concurrently: in any order
    assert warnings == []
    assert members(inventory, "kvm_proxies") == ["proxy-one", "proxy-three", "proxy-two"]
    assert inventory.get_host("proxy-one").get_vars()["ansible_host"] == "198.18.0.150"

    # cache=False is a refresh (--flush-cache, meta: refresh_inventory): the hypervisors are asked again.
    inventory, warnings = parse(TWO_HYPERVISORS + cache, cache=False)[:2]
    assert sorted(opened) == [NAS1, NAS1, NAS2, NAS2]
    assert len(warnings) == 2


def test_a_partial_view_is_not_cached(parse, opened, hypervisors, tmp_path):
    cache = "cache: true\ncache_plugin: jsonfile\ncache_connection: %s\n" % (tmp_path / "cache")
    nas2 = hypervisors.pop(NAS2)
    warnings, plugin = parse(TWO_HYPERVISORS + cache)[1:]
    plugin.update_cache_if_changed()
    assert "could not read hypervisor nas2" in warnings[0]

    hypervisors[NAS2] = nas2
    inventory, warnings = parse(TWO_HYPERVISORS + cache)[:2]
    assert sorted(opened) == [NAS1, NAS1, NAS2, NAS2]
    assert members(inventory, "kvm_proxies") == ["proxy-one", "proxy-three", "proxy-two"]


def test_missing_libvirt_on_the_controller_is_explained(parse, opened):
    with pytest.raises(AnsibleParserError) as caught:
        parse(TWO_HYPERVISORS, libvirt_import_error="ModuleNotFoundError: No module named 'libvirt'")
    assert "libvirt-python on the controller" in str(caught.value)
    assert "python3-libvirt" in str(caught.value)
    assert opened == []


@pytest.mark.parametrize("config, words", [
    ("hypervisors: []\n", "hypervisors is empty"),
    ("hypervisors:\n  - {name: nas1}\n", "hypervisors[0] needs a uri"),
    ("hypervisors:\n  - {uri: 'qemu:///system', url: x}\n", "unknown keys url"),
    ("hypervisors:\n  - {uri: 'qemu:///system', name: 'nas1/../x'}\n", "not a valid host name"),
])
def test_bad_configuration_fails_before_connecting(parse, opened, config, words):
    with pytest.raises(AnsibleParserError) as caught:
        parse(config)
    assert words in str(caught.value)
    assert opened == []


@pytest.mark.parametrize("file_name, accepted", [
    ("fleet.kvm_proxies.yml", True),
    ("fleet.kvm_proxies.yaml", True),
    ("fleet.yml", False),
    ("kvm_proxies.yml.bak", False),
])
def test_config_file_names(tmp_path, file_name, accepted):
    path = tmp_path / file_name
    path.write_text("plugin: egress_proxies.kvm.kvm_proxies\n")
    assert load_plugin().verify_file(str(path)) is accepted


def test_a_keyed_group_whose_key_is_a_number_is_skipped_without_strict(parse):
    config = TWO_HYPERVISORS + """
keyed_groups:
  - key: kvm_proxy_vcpus
    prefix: vcpus
  - key: kvm_proxy_libvirt_state
    prefix: libvirt
"""
    inventory, warnings = parse(config)[:2]
    assert members(inventory, "libvirt_running") == ["proxy-one", "proxy-two"]
    assert warnings and all("keyed_groups entry 'kvm_proxy_vcpus' skipped" in warning for warning in warnings)
    assert "| string" in warnings[0]
    with pytest.raises(AnsibleParserError, match="Invalid group name format"):
        parse(config + "strict: true\n")
    inventory = parse(config.replace("key: kvm_proxy_vcpus", "key: kvm_proxy_vcpus | string")).inventory
    assert sorted(name for name in inventory.groups if name.startswith("vcpus_")), "no vcpus_<n> group"


def test_what_a_hypervisor_reports_is_never_rendered_as_a_template(parse, hypervisors):
    """A domain's metadata is written by whoever can define domains on the hypervisor: a host variable
    holding template text must come out as that text, on every ansible-core (2.19 and later trust no
    plugin data; older releases get it marked unsafe)."""
    managed_domain(hypervisors[NAS1], "proxy-odd", "{{ 6 * 7 }}")
    host = parse(TWO_HYPERVISORS).inventory.get_host("proxy-odd")
    templar = Templar(loader=DataLoader(), variables=host.get_vars())
    # The expression is the playbook's own, trusted (2.19 and later template only trusted text).
    expression = "{{ kvm_proxy_uid }}"
    if hasattr(ansible_template, "trust_as_template"):
        expression = ansible_template.trust_as_template(expression)
    assert templar.template(expression) == "{{ 6 * 7 }}"
