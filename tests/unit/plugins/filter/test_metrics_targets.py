# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The scrape targets of an HA group (issue 42 item 4): each member's target labelled with its group, one target per
group at its client address, written by the hypervisor of its first listed member wanted running, and joined into the
file once; a fleet without groups gets the bytes it got before."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.filter.metrics_targets import metrics_targets
from ansible_collections.egress_proxies.kvm.plugins.module_utils._targets.file_sd import file_sd, render
from ansible_collections.egress_proxies.kvm.tests.unit.role_playbook import run_role_tasks

GROUP = {"name": "office", "address": "198.18.40.10", "members": ["egress-a", "egress-b"]}


def instance(name, address, state="present", metrics=True, port=9301):
    return {"name": name, "state": state, "address": address, "metrics": metrics, "metrics_port": port}


HV1 = [instance("egress-a", "198.18.40.11/24"), instance("lonely", "198.18.11.5/24")]
HV2 = [instance("egress-b", "198.18.40.12/24")]
PLAY = {"hv1": HV1, "hv2": HV2}


def proxy(name, address, hypervisor, group=None):
    labels = {"hypervisor": hypervisor, "proxy": name, "owner": "deploy-a"}
    if group:
        labels["group"] = group
    return {"targets": [address], "labels": labels}


def group_target(address, hypervisor, group="office"):
    labels = {"hypervisor": hypervisor, "group": group, "owner": "deploy-a", "target": "group-address"}
    return {"targets": [address], "labels": labels}


def test_members_carry_their_group_and_the_first_members_hypervisor_writes_the_groups_target():
    assert metrics_targets([], HV1, "hv1", "deploy-a", [GROUP], PLAY) == {"groups": [
        proxy("egress-a", "198.18.40.11:9301", "hv1", "office"), proxy("lonely", "198.18.11.5:9301", "hv1"),
        group_target("198.18.40.10:9301", "hv1")], "unaddressed": []}
    assert metrics_targets([], HV2, "hv2", "deploy-a", [GROUP], PLAY) == {"groups": [
        proxy("egress-b", "198.18.40.12:9301", "hv2", "office")], "unaddressed": []}


@pytest.mark.parametrize("first", [
    instance("egress-a", "198.18.40.11/24", state="stopped"),
    instance("egress-a", "198.18.40.11/24", state="absent"),
    instance("egress-a", "198.18.40.11/24", metrics=False),
], ids=["stopped", "absent", "metrics off"])
def test_the_next_member_writes_it_when_the_first_is_not_wanted_running_with_metrics(first):
    play = {"hv1": [first], "hv2": [instance("egress-b", "198.18.40.12/24", port=9400)]}
    assert group_target("198.18.40.10:9400", "hv2") in metrics_targets([], play["hv2"], "hv2", "deploy-a", [GROUP], play)["groups"]
    assert all("group" not in target["labels"] or target["labels"].get("proxy")
               for target in metrics_targets([], play["hv1"], "hv1", "deploy-a", [GROUP], play)["groups"])


def test_a_hypervisor_outside_the_run_leaves_the_groups_target_to_the_next_members():
    # hv1 was not listed this run (unreachable, --limit): hv2 writes the target, and the file keeps one.
    written = metrics_targets([], HV2, "hv2", "deploy-a", [GROUP], {"hv2": HV2})["groups"]
    assert group_target("198.18.40.10:9301", "hv2") in written
    # Sorted as the file is: a group's target (no proxy label) first of its hypervisor's.
    before = json.dumps([group_target("198.18.40.10:9301", "hv1"), proxy("egress-a", "198.18.40.11:9301", "hv1", "office")])
    assert file_sd({"hv2": written}, before, ["hv1", "hv2"]) == [
        proxy("egress-a", "198.18.40.11:9301", "hv1", "office"), group_target("198.18.40.10:9301", "hv2"),
        proxy("egress-b", "198.18.40.12:9301", "hv2", "office")]
    # Nobody writes it this run: the file's stays, under the hypervisor that wrote it.
    assert file_sd({"hv2": []}, before, ["hv1", "hv2"]) == json.loads(before)


def test_without_play_a_hypervisor_reads_its_own_instances_and_without_groups_nothing_changes():
    assert metrics_targets([], HV1, "hv1", "deploy-a", [GROUP]) == metrics_targets([], HV1, "hv1", "deploy-a", [GROUP], PLAY)
    # The play's instances are read through hostvars, which lack a fact the destroy keeps as a task's variable.
    assert metrics_targets([], HV1, "hv1", "deploy-a", [GROUP], {"hv1": [], "hv2": HV2}) == metrics_targets(
        [], HV1, "hv1", "deploy-a", [GROUP], PLAY)
    plain = metrics_targets([{"name": "egress-a", "ip": "198.18.40.50"}], HV1, "hv1", "deploy-a")
    for groups in (None, []):
        assert metrics_targets([{"name": "egress-a", "ip": "198.18.40.50"}], HV1, "hv1", "deploy-a", groups, PLAY) == plain
    # The bytes of a fleet without groups, as they were before groups existed.
    assert render(file_sd({"hv1": plain["groups"]}, None, ["hv1"])) == (
        '[\n    {\n        "labels": {\n            "hypervisor": "hv1",\n            "owner": "deploy-a",\n'
        '            "proxy": "egress-a"\n        },\n        "targets": [\n            "198.18.40.50:9301"\n        ]\n'
        '    },\n    {\n        "labels": {\n            "hypervisor": "hv1",\n            "owner": "deploy-a",\n'
        '            "proxy": "lonely"\n        },\n        "targets": [\n            "198.18.11.5:9301"\n        ]\n    }\n]\n')


@pytest.mark.parametrize("groups, named", [
    ({"name": "office"}, "egress_proxy_ha_groups must be a list"),
    ([dict(GROUP, name="Office\n")], "egress_proxy_ha_groups[0].name"),
    ([dict(GROUP, address="198.18.40.10\nhttp_port 1")], "egress_proxy_ha_groups[0].address"),
    ([dict(GROUP, address="198.18.40.\u0661\u0660")], "egress_proxy_ha_groups[0].address"),
    ([dict(GROUP, members=["egress-a"])], "egress_proxy_ha_groups[0].members"),
    ([dict(GROUP, members=["egress-a", "Egress B"])], "egress_proxy_ha_groups[0].members"),
    ([GROUP, dict(GROUP, name="lab", address="198.18.40.20", members=["egress-c", "egress-a"])],
     "egress_proxy_ha_groups[1].members: egress-a is a member of egress_proxy_ha_groups[0] too"),
    (["office"], "egress_proxy_ha_groups[0] must be a dictionary"),
])
def test_a_bad_group_fails_naming_its_entry(groups, named):
    with pytest.raises(AnsibleFilterError) as raised:
        metrics_targets([], HV1, "hv1", "deploy-a", groups, PLAY)
    assert named in str(raised.value), str(raised.value)


def test_play_must_be_a_mapping():
    with pytest.raises(AnsibleFilterError, match="play must be a mapping"):
        metrics_targets([], HV1, "hv1", "deploy-a", [GROUP], ["hv1"])


def test_the_roles_task_writes_the_groups_labels_and_target(tmp_path):
    """tasks/write_targets.yml passes egress_proxy_ha_groups and the play's instances to the filter."""
    path = tmp_path / "egress-proxies.json"
    run_role_tasks(tmp_path, "egress_proxy", "write_targets", {
        "egress_proxy__listed": [{"name": "egress-a", "ip": "198.18.40.11"}],
        "egress_proxy__instances": [instance("egress-a", "198.18.40.11/24"), instance("egress-b", "198.18.40.12/24")],
        "egress_proxy_uid": "deploy-a", "egress_proxy_metrics_file_sd": str(path), "egress_proxy_ha_groups": [GROUP]})
    assert json.loads(path.read_text()) == [
        group_target("198.18.40.10:9301", "localhost"),
        proxy("egress-a", "198.18.40.11:9301", "localhost", "office"),
        proxy("egress-b", "198.18.40.12:9301", "localhost", "office")]
