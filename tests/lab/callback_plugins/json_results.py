# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stdout callback for the integration tests: the whole run as one JSON document.

ansible-core 2.19 ships no json callback (ansible.posix has one, and no collection server is
reachable here), so tests/integration/conftest.py selects this one to read task results.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = """
name: json_results
type: stdout
short_description: the run as one JSON document, for the collection's integration tests
description:
  - Prints one JSON object with C(plays) (each with C(play.name) and C(tasks), each task with
    C(task.name) and C(hosts) mapping host name to result) and C(stats) (per-host summary).
"""

import json

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "json_results"

    def __init__(self):
        super().__init__()
        self.plays = []

    def v2_playbook_on_play_start(self, play):
        self.plays.append({"play": {"name": play.get_name()}, "tasks": []})

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.plays[-1]["tasks"].append({"task": {"name": task.get_name()}, "hosts": {}})

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def _record(self, result, **status):
        host_result = dict(self._convert_result(result))
        host_result.update(status)
        self.plays[-1]["tasks"][-1]["hosts"][result._host.get_name()] = host_result

    def _convert_result(self, result):
        # Results may hold ansible's tagged string and native types; a JSON round trip through
        # ansible's encoder makes them plain.
        return json.loads(self._dump_results(result._result, indent=None))

    def v2_runner_on_ok(self, result):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, failed=True)

    def v2_runner_on_unreachable(self, result):
        self._record(result, unreachable=True)

    def v2_runner_on_skipped(self, result):
        self._record(result, skipped=True)

    def v2_playbook_on_stats(self, stats):
        summary = {host: stats.summarize(host) for host in sorted(stats.processed)}
        self._display.display(json.dumps({"plays": self.plays, "stats": summary}, indent=2, sort_keys=True))
