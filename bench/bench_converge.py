"""Converging one hypervisor's set (issue 14): the role's one kvm_proxy_set call against a per-proxy kvm_proxy loop.

On lab-hv1, over SSH as users run it (inventories/lab/hosts.yml), with the lab's small non-booting
image, in one run: an ansible.builtin.ping task opens every playbook, so each figure has the trivial
task of the same run beside it; then a no-op converge of 1, 10 and 40 proxies, and the create and
the destroy of 40, each through the role (one kvm_proxy_set task) and through a loop of kvm_proxy
tasks, as the role did before. Task times come from the fleet_timeline callback (start to end of
the task on the host); the playbook's wall time is kept too. Every figure is the median of the runs.
Last, the libvirt calls of a no-op set of 40 are counted through a wrapper around the seam (the set's
flow run in this process over qemu+ssh, on a set of its own made and removed here).

Usage (as root, lab up, under the integration lock; bench/run runs it as part of B2):
  flock /tmp/egress-integration.lock env PYTHONPATH=build/collections .venv/bin/python -m bench.bench_converge [--runs 3]
Writes bench/results/converge.json. Every domain and volume made here is removed afterwards.
"""

import argparse
import collections
import json
import os
import pathlib
import sys
import tempfile
import time

from ansible_collections.egress_proxies.kvm.plugins.module_utils._argspec import (
    kvm_proxy_set_argument_spec,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt import Hypervisor
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy_set import SetManager, SetRequest
from bench._common import REPO_ROOT, figure
from tests.integration.fleet_fixtures import Fleet
from tests.lab import config, hypervisors

HOST = "lab-hv1"
RESULT = os.path.join(REPO_ROOT, "bench", "results", "converge.json")
SIZES = (1, 10, 40)
BIG = 40
PING_TASK = "Ping the hypervisor"
ROLE_TASKS = {"deploy": "Converge the proxies of this hypervisor", "destroy": "Remove the proxies and their disks"}
LOOP_TASK = "Converge each proxy"

ROLE_PLAYBOOK = """
- hosts: %(host)s
  gather_facts: false
  tasks:
    - name: %(ping)s
      ansible.builtin.ping:
    - name: Run the role
      ansible.builtin.include_role:
        name: egress_proxies.kvm.egress_proxy
        tasks_from: "{{ bench_entry }}"
"""

# The per-proxy loop the role ran before kvm_proxy_set, with the same settings.
LOOP_PLAYBOOK = """
- hosts: %(host)s
  gather_facts: false
  module_defaults:
    group/egress_proxies.kvm.kvm:
      uri: "{{ egress_proxy_uri }}"
  tasks:
    - name: %(ping)s
      ansible.builtin.ping:
    - name: %(loop)s
      egress_proxies.kvm.kvm_proxy:
        name: "{{ item }}"
        state: "{{ bench_state }}"
        uid: "{{ egress_proxy_uid }}"
        pool: "{{ egress_proxy_pool }}"
        bridge: "{{ egress_proxy_bridge }}"
        image: "{{ egress_proxy_image if bench_state != 'absent' else omit }}"
        vcpus: 1
        memory_mib: "{{ egress_proxy_memory_mib }}"
        disk_size_gb: "{{ egress_proxy_disk_size_gb }}"
        virt_type: "{{ egress_proxy_virt_type }}"
        cpu_mode: "{{ egress_proxy_cpu_mode }}"
        user_data: "#cloud-config\\n{}\\n"
        vendor_data: ""
      loop: "{{ bench_names }}"
"""


class Bench:
    def __init__(self, fleet, workdir):
        self.fleet = fleet
        self.workdir = workdir
        self.inventory = fleet.inventory(fleet.role_vars())
        self.playbooks = {}
        for way, text in (("set", ROLE_PLAYBOOK), ("loop", LOOP_PLAYBOOK)):
            path = os.path.join(workdir, "%s.yml" % way)
            with open(path, "w") as handle:
                handle.write(text % {"host": HOST, "ping": PING_TASK, "loop": LOOP_TASK})
            self.playbooks[way] = path

    def names(self, way, count):
        return ["%sbench-%s-%02d" % (config.TEST_DOMAIN_PREFIX, way, index) for index in range(count)]

    def run(self, way, action, count):
        """{ping, task, playbook} seconds of one playbook run that deploys (or destroys) ``count`` proxies."""
        names = self.names(way, count)
        if way == "set":
            extra = {"bench_entry": "main" if action == "deploy" else "destroy", "egress_proxy_uid": "eptest-bench-set",
                     "egress_proxy_instances": [{"name": proxy} for proxy in names]}
            task = ROLE_TASKS[action]
        else:
            extra = {"bench_state": "present" if action == "deploy" else "absent", "bench_names": names,
                     "egress_proxy_uid": "eptest-bench-loop"}
            task = LOOP_TASK
        run = self.fleet.playbook(self.playbooks[way], self.inventory, extra, timeout=1800)
        if run.rc != 0:
            raise RuntimeError(repr(run))
        spans = {"ping": run.spans(PING_TASK)[HOST], "task": run.spans(task)[HOST]}
        result = {key: end - start for key, (start, end) in spans.items()}
        result["playbook"] = run.seconds
        return result, run

    def measure(self, runs, ways=("set", "loop")):
        figures = {"noop": {}, "create_%d" % BIG: {}, "destroy_%d" % BIG: {}}
        pings = []
        for way in ways:
            for count in SIZES:
                self.run(way, "deploy", count)
                samples = []
                for _run in range(runs):
                    timing, run = self.run(way, "deploy", count)
                    assert run.stats(HOST)["changed"] == 0, "the no-op converge changed something: %r" % run
                    samples.append(timing)
                    pings.append(timing["ping"])
                figures["noop"].setdefault(way, {})[str(count)] = summary(samples)
                self.run(way, "destroy", count)
            creates, destroys = [], []
            for _run in range(runs):
                creates.append(self.run(way, "deploy", BIG)[0])
                timing = self.run(way, "destroy", BIG)[0]
                destroys.append(timing)
                pings.extend([creates[-1]["ping"], timing["ping"]])
            figures["create_%d" % BIG][way] = summary(creates)
            figures["destroy_%d" % BIG][way] = summary(destroys)
        figures["ping"] = figure(pings)
        return figures

    def clean(self, ways=("set", "loop")):
        for way in ways:
            self.run(way, "destroy", BIG)


class Counting:
    """Stands in for the Hypervisor: every public method call is counted, by method."""

    def __init__(self, target):
        self._target = target
        self.calls = collections.Counter()

    def __getattr__(self, name):
        attr = getattr(self._target, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def counted(*args, **kwargs):
            self.calls[name] += 1
            return attr(*args, **kwargs)
        return counted


def count_noop_calls(spec, role_vars, count):
    """{calls, per_proxy, by_method, seconds} of one no-op kvm_proxy_set run over ``count`` proxies it creates first."""
    names = ["%sbench-count-%02d" % (config.TEST_DOMAIN_PREFIX, index) for index in range(count)]
    params = {option: option_spec.get("default") for option, option_spec in kvm_proxy_set_argument_spec().items()}
    params.update(uri=spec.uri, pool=role_vars["egress_proxy_pool"], bridge=role_vars["egress_proxy_bridge"],
                  uid="eptest-bench-count", gc=False, image=role_vars["egress_proxy_image"], vcpus=1,
                  virt_type=role_vars["egress_proxy_virt_type"], cpu_mode=role_vars["egress_proxy_cpu_mode"],
                  memory_mib=role_vars["egress_proxy_memory_mib"], disk_size_gb=role_vars["egress_proxy_disk_size_gb"],
                  user_data="#cloud-config\n{}\n", vendor_data="", proxies=[{"name": name} for name in names])
    with Hypervisor.open(spec.uri) as hypervisor:
        SetManager(hypervisor, SetRequest.from_params(params)).run()
        try:
            counting = Counting(hypervisor)
            started = time.perf_counter()
            result = SetManager(counting, SetRequest.from_params(params)).run()
            seconds = time.perf_counter() - started
            assert not result["changed"], result
        finally:
            SetManager(hypervisor, SetRequest.from_params(dict(params, state="absent"))).run()
    total = sum(counting.calls.values())
    return {"proxies": count, "calls": total, "per_proxy": round(total / count, 2), "by_method": dict(counting.calls),
            "seconds": round(seconds, 3)}


def summary(samples):
    return {key: figure([sample[key] for sample in samples]) for key in ("ping", "task", "playbook")}


def ratios(figures):
    """The issue's targets: no-op task / ping at every N, and the loop's create and destroy over the set's."""
    noop = {count: round(figures["noop"]["set"][count]["task"]["median"] / figures["noop"]["set"][count]["ping"]["median"], 2)
            for count in figures["noop"]["set"]}
    faster = {action: round(figures[action]["loop"]["task"]["median"] / figures[action]["set"]["task"]["median"], 2)
              for action in ("create_%d" % BIG, "destroy_%d" % BIG)}
    return {"noop_task_over_ping": noop, "loop_over_set": faster}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls-only", action="store_true", help="only count the no-op's libvirt calls; keep the figures")
    parser.add_argument("--reuse-loop", action="store_true",
                        help="measure the set only; keep the kvm_proxy loop's figures of the last run (it takes ~8 min)")
    args = parser.parse_args()
    specs = [spec for spec in hypervisors.present_specs() if spec.name == HOST and hypervisors.holder(spec)]
    if not specs:
        sys.exit("%s is not up: scripts/lab up" % HOST)
    with tempfile.TemporaryDirectory(prefix="bench-converge-") as workdir:
        # Fleet wants two hypervisors; only the first one is used here.
        fleet = Fleet(specs * 2, pathlib.Path(workdir))
        if args.calls_only:
            with open(RESULT) as handle:
                document = json.load(handle)
        else:
            bench = Bench(fleet, workdir)
            ways = ("set",) if args.reuse_loop else ("set", "loop")
            try:
                figures = bench.measure(args.runs, ways)
            finally:
                bench.clean(ways)
            if args.reuse_loop:
                with open(RESULT) as handle:
                    previous = json.load(handle)["figures"]
                for key in ("noop", "create_%d" % BIG, "destroy_%d" % BIG):
                    figures[key]["loop"] = previous[key]["loop"]
            document = {"host": HOST, "runs": args.runs, "figures": figures, "ratios": ratios(figures),
                        "loop_figures": "reused from the previous run" if args.reuse_loop else "this run"}
        document["noop_calls"] = count_noop_calls(specs[0], fleet.role_vars(), BIG)
    os.makedirs(os.path.dirname(RESULT), exist_ok=True)
    with open(RESULT, "w") as handle:
        json.dump(document, handle, indent=2, sort_keys=True)
        handle.write("\n")
    print(json.dumps(document["ratios"], indent=2))


if __name__ == "__main__":
    main()
