# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The Prometheus alert rules the egress_proxy role ships are valid, and fire when they should (issue 30).

Checked by the real promtool (Debian's prometheus package, which scripts/bootstrap installs): `promtool check
rules` parses the rules file, `promtool test rules` runs tests/unit/prometheus/egress-proxy-alerts.test.yml, whose
series make every rule fire and not fire. Without promtool these tests fail, they are not skipped.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess

import yaml

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(REPO_ROOT, "roles", "egress_proxy", "files", "prometheus", "egress-proxy-alerts.yml")
RULE_TESTS = os.path.join(REPO_ROOT, "tests", "unit", "prometheus", "egress-proxy-alerts.test.yml")


def promtool(*args):
    """Run promtool; (exit status, its stdout and stderr together)."""
    assert shutil.which("promtool"), "promtool not found: run scripts/bootstrap (Debian package prometheus)"
    result = subprocess.run(["promtool"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, check=False)
    return result.returncode, result.stdout


def test_rules_file_is_valid():
    status, output = promtool("check", "rules", RULES)
    assert status == 0, "promtool check rules %s failed:\n%s" % (RULES, output)
    assert "SUCCESS" in output, output


def test_rules_fire_and_stay_quiet_as_the_unit_tests_expect():
    status, output = promtool("test", "rules", RULE_TESTS)
    assert status == 0, "promtool test rules %s failed:\n%s" % (RULE_TESTS, output)
    assert "SUCCESS" in output, output


def test_every_alert_is_tested_firing_and_quiet():
    with open(RULES) as handle:
        alerts = [rule["alert"] for group in yaml.safe_load(handle)["groups"] for rule in group["rules"] if "alert" in rule]
    with open(RULE_TESTS) as handle:
        cases = [case for test in yaml.safe_load(handle)["tests"] for case in test.get("alert_rule_test", [])]
    assert alerts
    for alert in alerts:
        expected = [case.get("exp_alerts") or [] for case in cases if case["alertname"] == alert]
        assert any(expected), "%s: no test case where it fires" % alert
        assert not all(expected), "%s: no test case where it stays quiet" % alert
