# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""docs/role-egress_proxy.md's examples, read and adapted to the lab without the lab.

Every block of the page is an inventory, a playbook or a command the lab test runs, or listed with its reason; the
examples use only the role's documented variables; the rule changes only what its table says.
tests/integration/test_role_examples.py runs them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.tests.integration import role_examples
from ansible_collections.egress_proxies.kvm.tests.lab import config

RUN = (role_examples.QUICK_START, role_examples.FLEET, role_examples.SERIAL, role_examples.DESTROY, role_examples.FACT,
       role_examples.ROLLOUT)
# The lab hypervisor the examples' proxies run on.
LAB_HV1 = config.HypervisorSpec(1)
ROLE = "egress_proxies.kvm.egress_proxy"
ROLE_DIR = os.path.join(role_examples.REPO_ROOT, "roles", "egress_proxy")


def argument_specs():
    with open(os.path.join(ROLE_DIR, "meta", "argument_specs.yml")) as handle:
        return yaml.safe_load(handle)["argument_specs"]


def role_options():
    return argument_specs()["main"]["options"]


def test_every_block_of_the_page_is_run_or_listed_with_its_reason():
    listed = set()
    for block in role_examples.blocks():
        if block.section in role_examples.NOT_RUN:
            continue
        assert block.section in RUN, "%r: run it in test_role_examples.py or list it in NOT_RUN" % (block,)
        key = (block.section, block.body.splitlines()[0])
        if key in role_examples.NOT_RUN_BLOCKS:
            listed.add(key)
            continue
        assert block.files() or block.plays() or block.commands(), block
    sections = {block.section for block in role_examples.blocks()}
    assert set(RUN) | set(role_examples.NOT_RUN) <= sections
    assert listed == set(role_examples.NOT_RUN_BLOCKS)


def test_the_roll_out_deploys_reads_the_status_and_runs_on_the_quick_starts_inventory_with_the_profiles():
    assert [argv for block in role_examples.section_blocks(role_examples.ROLLOUT) for argv in block.commands()] == [
        ["ansible-playbook", "-i", "inventory", "egress_proxies.kvm.deploy"],
        ["ansible-playbook", "-i", "inventory", "egress_proxies.kvm.status"]]
    profiles = role_examples.inventory_files(role_examples.PROFILES)
    assert list(profiles) == ["inventory/group_vars/hypervisors.yml"]
    variables = profiles["inventory/group_vars/hypervisors.yml"]
    assert set(variables) <= set(role_options())
    assert [(profile["name"], profile.get("mode", "enforce")) for profile in variables["egress_proxy_profiles"]] == [
        ("ci", "enforce"), ("backup", "report")]


def test_a_block_is_split_into_its_files_under_the_heading_it_follows():
    text = ("## One\n\n```yaml\n# inventory/hosts.yml\nhypervisors: {}\n\n# inventory/host_vars/h.yml\na: 1\n```\n"
            "### Two\n\n```yaml\n- hosts: all\n  tasks: []\n```\n\n```sh\nansible-playbook -i inventory p.yml  # run\n```\n")
    one, two, three = role_examples.blocks(text)
    assert (one.section, one.files(), one.plays()) == (
        "One", {"inventory/hosts.yml": {"hypervisors": {}}, "inventory/host_vars/h.yml": {"a": 1}}, None)
    assert (two.section, two.files(), two.plays()) == ("Two", None, [{"hosts": "all", "tasks": []}])
    assert three.commands() == [["ansible-playbook", "-i", "inventory", "p.yml"]]


def test_a_block_in_a_list_item_is_read_without_its_indent():
    text = "### Steps\n\n1. Run:\n\n   ```sh\n   ansible-playbook -i inventory p.yml\n\n   # again\n   ```\n"
    (block,) = role_examples.blocks(text)
    assert (block.section, block.body) == ("Steps", "ansible-playbook -i inventory p.yml\n\n# again\n")
    assert block.commands() == [["ansible-playbook", "-i", "inventory", "p.yml"]]


def test_the_quick_start_command_runs_a_playbook_of_the_collection_on_its_inventory():
    (command,) = [argv for block in role_examples.section_blocks(role_examples.QUICK_START) for argv in block.commands()]
    assert command[:3] == ["ansible-playbook", "-i", "inventory"] and len(command) == 4, command
    namespace, collection, playbook = command[3].split(".")
    assert (namespace, collection) == ("egress_proxies", "kvm")
    assert os.path.exists(os.path.join(role_examples.REPO_ROOT, "playbooks", playbook + ".yml"))
    assert sorted(role_examples.inventory_files(role_examples.QUICK_START)) == [
        "inventory/group_vars/hypervisors.yml", "inventory/host_vars/hv1.example.net.yml", "inventory/hosts.yml"]


@pytest.mark.parametrize("section", [role_examples.QUICK_START, role_examples.FLEET])
def test_the_inventories_use_only_the_roles_documented_variables(section):
    options = role_options()
    for path, variables in role_examples.inventory_files(section).items():
        if path == "inventory/hosts.yml":
            continue
        assert set(variables) <= set(options), path
        for key in ("egress_proxy_instances", "egress_proxy_fleet"):
            for entry in variables.get(key, []):
                assert set(entry) <= set(options[key]["options"]), (path, entry)


def test_the_plays_run_the_role_or_one_of_its_entry_points():
    for section in (role_examples.SERIAL, role_examples.DESTROY):
        (play,) = role_examples.section_plays(section)
        assert play["hosts"] == "hypervisors"
        roles = [role["role"] for role in play.get("roles", [])]
        included = [task["ansible.builtin.include_role"] for task in play.get("tasks", [])]
        assert roles + [role["name"] for role in included] == [ROLE], play
        for role in included:
            assert os.path.exists(os.path.join(ROLE_DIR, "tasks", role["tasks_from"] + ".yml"))
            assert role["tasks_from"] in argument_specs()
    (fact_play,) = role_examples.section_plays(role_examples.FACT)
    assert "egress_proxy_proxies" in yaml.safe_dump(fact_play)


def adapted(section):
    """The section's inventory files as read, the rule, and the adapted inventory (the files left as read)."""
    rule = role_examples.LabRule(LAB_HV1)
    files = role_examples.inventory_files(role_examples.QUICK_START)
    if section == role_examples.FLEET:
        files = role_examples.fleet_files(files, role_examples.inventory_files(role_examples.FLEET))
    elif section == role_examples.ROLLOUT:
        files = role_examples.profile_files(files, role_examples.inventory_files(role_examples.PROFILES))
    read = copy.deepcopy(files)
    inventory = rule.inventory(files, role_examples.fleet_hosts(files))
    assert files == read
    return files, rule, inventory


@pytest.mark.parametrize("section", [role_examples.QUICK_START, role_examples.FLEET])
def test_the_rule_puts_every_proxy_on_a_lab_host_under_a_test_name(section):
    _files, rule, inventory = adapted(section)
    hosts = inventory["hosts.yml"]["hypervisors"]["hosts"]
    assert set(hosts) <= set(role_examples.HOSTS.values())
    assert all(hosts[host] == rule.host_vars[host] for host in hosts)
    assert inventory["hosts.yml"]["hypervisors"]["vars"] == rule.connection
    names = []
    for path, variables in inventory.items():
        if path.startswith("host_vars/"):
            assert path[len("host_vars/"):-len(".yml")] in hosts, path
        for entry in variables.get("egress_proxy_fleet", []):
            assert entry["hypervisor"] in hosts, entry
        names += [entry["name"] for key in ("egress_proxy_instances", "egress_proxy_fleet")
                  for entry in variables.get(key, [])]
    assert names and all(name.startswith(role_examples.NAME_PREFIX) for name in names), names


@pytest.mark.parametrize("section", [role_examples.QUICK_START, role_examples.FLEET, role_examples.ROLLOUT])
def test_the_rule_changes_only_the_lab_settings_the_names_and_the_tabulated_values(section):
    files, rule, inventory = adapted(section)
    example = files["inventory/group_vars/hypervisors.yml"]
    group = inventory["group_vars/hypervisors.yml"]
    assert {key: group[key] for key in role_examples.LAB_SETTINGS} == rule.settings
    assert {key: group[key] for key in rule.client} == rule.client
    unnamed = {key: value for key, value in group.items() if key not in role_examples.LAB_SETTINGS + tuple(rule.client)}
    for entry in unnamed.get("egress_proxy_fleet", []):
        entry["name"] = entry["name"][len(role_examples.NAME_PREFIX):]
    # The lab's values back to the page's.
    pages = {lab: page for page, lab in rule.values.items()}
    assert len(pages) == len(rule.values)
    expected = {key: value for key, value in example.items() if key not in role_examples.LAB_SETTINGS}
    for entry in expected.get("egress_proxy_fleet", []):
        entry["hypervisor"] = role_examples.HOSTS[entry["hypervisor"]]
    assert role_examples._replaced(unnamed, pages) == expected
    assert rule.values["10.20.0.0/16"] in group["egress_proxy_allowed_clients"]


def test_the_rules_values_are_the_lab_hypervisors_lan_its_client_and_origin():
    values = role_examples.lab_values(LAB_HV1)
    assert values == {"10.20.0.0/16": "198.18.11.0/24", "10.20.0.2/32": "198.18.11.1/32",
                      "10.20.7.0/24": "198.18.11.0/28", "backup.example-bucket.net": "198.18.11.1"}


def test_the_vaulted_passwords_the_roll_out_names_are_this_runs_in_group_vars_all():
    _files, rule, inventory = adapted(role_examples.ROLLOUT)
    assert sorted(inventory["group_vars/all.yml"]) == ["vault_egress_proxy_backup_password", "vault_egress_proxy_ci_password"]
    assert inventory["group_vars/all.yml"] == rule.secrets and len(set(rule.secrets.values())) == 2


def test_the_lab_settings_are_the_role_variables_the_lab_inventory_sets():
    assert set(role_examples.LAB_SETTINGS) <= set(role_options())
    assert sorted(role_examples.LabRule(LAB_HV1).settings) == sorted(role_examples.LAB_SETTINGS)
