# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""proxy_file_sd's main(): check mode predicts, diff shows the file before and after, a rerun changes nothing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.egress_proxies.kvm.plugins.modules import proxy_file_sd

GROUP = {"targets": ["198.18.11.50:9301"], "labels": {"hypervisor": "hv1", "proxy": "egress-a", "owner": "fleet"}}
OTHER = {"targets": ["198.18.12.50:9301"], "labels": {"hypervisor": "hv2", "proxy": "egress-b", "owner": "fleet"}}


def run(capsys, args, check_mode=False, diff=False):
    module_args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
    with patch_module_args(module_args), pytest.raises(SystemExit):
        proxy_file_sd.main()
    return json.loads(capsys.readouterr().out)


def test_check_mode_predicts_then_the_file_is_joined_and_a_rerun_changes_nothing(tmp_path, capsys):
    path = tmp_path / "targets.json"
    path.write_text(json.dumps([OTHER]))
    args = {"path": str(path), "targets": {"hv1": [GROUP]}, "inventory_hosts": ["hv1", "hv2"]}
    predicted = run(capsys, args, check_mode=True, diff=True)
    assert predicted["changed"] and predicted["groups"] == [GROUP, OTHER]
    assert json.loads(path.read_text()) == [OTHER]
    applied = run(capsys, args, diff=True)
    assert applied["changed"] and applied["diff"]["before"] == json.dumps([OTHER])
    assert json.loads(applied["diff"]["after"]) == [GROUP, OTHER] == json.loads(path.read_text())
    assert applied["diff"] == predicted["diff"]
    assert not run(capsys, args)["changed"]
    # Out of the inventory: dropped; with inventory_hosts left out (a sliced job), kept.
    assert run(capsys, dict(args, inventory_hosts=None, targets={"hv1": []}))["groups"] == [OTHER]
    assert run(capsys, dict(args, inventory_hosts=["hv1"], targets={"hv1": []}))["groups"] == []


@pytest.mark.parametrize("changes, message", [
    ({"mode": "0644\nx"}, 'mode: "0644\\nx" is not octal permissions such as 0644'),
    ({"mode": "rw-r--r--"}, 'mode: "rw-r--r--" is not octal permissions such as 0644'),
    ({"lock_timeout": -1}, "lock_timeout: -1 is negative; give the seconds to wait for the lock"),
], ids=["control character", "symbolic", "negative lock_timeout"])
def test_bad_options_are_refused_naming_them_before_the_file_is_touched(tmp_path, capsys, changes, message):
    path = tmp_path / "targets.json"
    result = run(capsys, dict({"path": str(path), "targets": {"hv1": [GROUP]}}, **changes))
    assert result["failed"] and result["msg"] == message
    assert not path.exists() and list(tmp_path.iterdir()) == []
