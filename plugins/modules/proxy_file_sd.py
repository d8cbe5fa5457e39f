#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: proxy_file_sd
short_description: Write the Prometheus file_sd file of a fleet of egress proxies, joined with what it holds
version_added: 0.1.0
description:
  - Replaces, in the file_sd file O(path), the target groups of the hypervisors in O(targets) (each hypervisor's from
    P(egress_proxies.kvm.metrics_targets#filter)) and keeps the groups the file has for every other hypervisor, so
    runs that each converge some hypervisors (C(--limit), AWX job slicing) together keep the whole fleet in it.
  - The read, the join and the write hold an exclusive C(flock) of a lock file beside O(path) (C(.NAME.lock), created
    when missing and left in place), so two runs that write the file at once each keep the other's groups; a run
    waits up to O(lock_timeout) seconds for the lock. The kernel drops the lock of a run that dies.
  - The file is written beside O(path) and renamed into place, so Prometheus never reads half of it. Sorted by
    hypervisor and proxy, so an unchanged fleet writes the same bytes and reports no change.
  - A file that is not a file_sd file of egress proxies (a list of target groups, each with a C(hypervisor) label),
    is not UTF-8 or is larger than 16 MiB fails the task, naming it; it is not touched.
  - Runs on the host that holds the file (C(delegate_to)), with the rights to write its directory.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
options:
  path:
    description: The file_sd file. Its directory must exist.
    type: path
    required: true
  targets:
    description:
      - The target groups of each hypervisor listed this run, by its inventory name; each group C(targets) and
        C(labels) (C(hypervisor), C(proxy), C(owner)), as P(egress_proxies.kvm.metrics_targets#filter) gives them.
      - A hypervisor given with no groups has none in the file afterwards.
    type: dict
    required: true
  inventory_hosts:
    description:
      - Every hypervisor of the inventory (C(groups.all)). The groups of a hypervisor that is neither in O(targets) nor
        here are dropped from the file (a hypervisor taken out of the inventory).
      - Leave it out to keep the groups of every hypervisor not in O(targets), as a sliced AWX job must, whose
        inventory holds its own slice only.
    type: list
    elements: str
  mode:
    description: The permissions of the file.
    type: raw
    default: "0644"
  lock_timeout:
    description: Seconds to wait for another run that holds the file's lock before failing; nothing is written then.
    type: int
    default: 300
attributes:
  check_mode:
    description: Can run in C(check_mode) and return the changed status it predicts without modifying the file.
    support: full
  diff_mode:
    description: Returns the file before and after when run in diff mode.
    support: full
  idempotent:
    description: When run twice in a row with the same arguments, the second run reports no change.
    support: full
seealso:
  - plugin: egress_proxies.kvm.metrics_targets
    plugin_type: filter
    description: The target groups of one hypervisor.
"""

EXAMPLES = r"""
- name: Write the scrape targets of the hypervisors of this play
  egress_proxies.kvm.proxy_file_sd:
    path: /etc/prometheus/egress-proxies.json
    targets: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, ['scrape', 'groups']))) }}"
    inventory_hosts: "{{ groups.all }}"
  run_once: true
  delegate_to: prometheus.example.org
  become: true
"""

RETURN = r"""
groups:
  description: The target groups the file holds afterwards (in check mode, would hold).
  returned: success
  type: list
  elements: dict
  sample: [{"targets": ["198.18.11.50:9301"], "labels": {"hypervisor": "hv1", "proxy": "egress-a", "owner": "fleet"}}]
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._targets.file_sd import write_file_sd

ARGUMENT_SPEC = {
    "path": {"type": "path", "required": True},
    "targets": {"type": "dict", "required": True},
    "inventory_hosts": {"type": "list", "elements": "str"},
    "mode": {"type": "raw", "default": "0644"},
    "lock_timeout": {"type": "int", "default": 300},
}


def _mode(module, value):
    """The permissions as an int from an octal text (0644) or an int; the task fails naming the option otherwise."""
    if isinstance(value, int):
        return value
    text = str(value)
    if not text or any(character not in "01234567" for character in text) or len(text) > 4:
        module.fail_json(msg="mode: %s is not octal permissions such as 0644" % json.dumps(text))
    return int(text, 8)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    mode = _mode(module, params["mode"])
    if params["lock_timeout"] < 0:
        module.fail_json(msg="lock_timeout: %d is negative; give the seconds to wait for the lock" % params["lock_timeout"])
    try:
        changed, before, after = write_file_sd(params["path"], params["targets"], params["inventory_hosts"], mode,
                                               module.check_mode, params["lock_timeout"])
    except KvmError as error:
        module.fail_json(msg=error.message)
    result = {"changed": changed, "groups": json.loads(after)}
    if module._diff:
        result["diff"] = {"before": before or "", "after": after, "before_header": params["path"],
                          "after_header": params["path"]}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
