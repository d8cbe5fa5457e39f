# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Notification callback for the fleet tests: when each task started and ended on each host.

tests/lab/fleet_runs.py enables it next to json_results and reads the file, to tell
whether two hypervisors ran a task at the same time and how long a failing one took.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = """
name: fleet_timeline
type: notification
short_description: per host and task start and end times, for the collection's fleet tests
description:
  - Writes one JSON object per finished task and host to the file named by the environment variable
    C(EGRESS_FLEET_TIMELINE), with C(host), C(task), C(status), C(start) and C(end) (seconds since the epoch).
requirements:
  - enabled in callbacks_enabled
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "fleet_timeline"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.path = os.environ.get("EGRESS_FLEET_TIMELINE")
        self.started = {}

    def v2_runner_on_start(self, host, task):
        self.started[(host.get_name(), task._uuid)] = time.time()

    def _finish(self, result, status):
        key = (result._host.get_name(), result._task._uuid)
        if not self.path or key not in self.started:
            return
        record = {"host": key[0], "task": result._task.get_name(), "status": status,
                  "start": self.started.pop(key), "end": time.time()}
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def v2_runner_on_ok(self, result):
        self._finish(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._finish(result, "failed")

    def v2_runner_on_unreachable(self, result):
        self._finish(result, "unreachable")

    def v2_runner_on_skipped(self, result):
        self._finish(result, "skipped")
