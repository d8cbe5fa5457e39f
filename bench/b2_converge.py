"""Converging one hypervisor's set (B2): the role's one kvm_proxy_set call, a per-proxy kvm_proxy loop, community.libvirt.

On lab-hv1, over SSH as users run it (inventories/lab/hosts.yml), with the lab's small non-booting
image, in one run: an ansible.builtin.ping task opens every playbook, so each figure has the trivial
task of the same run beside it; then a no-op converge of 1, 10 and 40 proxies, and the create and
the destroy of 40, each through the role (one kvm_proxy_set task), through a loop of kvm_proxy
tasks (as the role did before), and through the same desired state written with community.libvirt's
modules (PEER_PLAYBOOK, run by the pinned `ansible` package's ansible-playbook in its own virtualenv).
Task times come from the fleet_timeline callback (start to end of the task on the host; the peer's
from its first task's start to its last one's end); the playbook's wall time is kept too, and (B2w)
beside the no-ops of each size a playbook of the one ping task is timed as often (its wall time, as
a user waits for it). Every figure is the median of the runs.
Last, the libvirt calls of a no-op set of 40 are counted: kvm_proxy_set's main() runs in a process on
/usr/bin/python3 over qemu+ssh (as AnsiballZ runs it, without Ansible's transport) with every
libvirt-python method wrapped, on a set of its own made and removed there.

Usage (as root, lab up, under the integration lock; bench/run runs it as part of B2):
  flock /tmp/egress-integration.lock env PYTHONPATH=build/collections .venv/bin/python -m bench.b2_converge [--runs 3] [--ways set,loop,peer]
Writes bench/results/converge.json. Every domain and volume made here is removed afterwards.
"""

import argparse
import collections
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from bench._common import (
    BUILD_COLLECTIONS,
    COUNT_LIBVIRT,
    HYPERVISOR_PYTHON,
    REPO_ROOT,
    RUN_MODULE,
    figure,
    machine,
    peer_venv,
    peer_version,
    utc_now_text,
)
from tests.lab import config, hypervisors
from tests.lab.fleet_runs import Fleet

HOST = "lab-hv1"
RESULT = os.path.join(REPO_ROOT, "bench", "results", "converge.json")
SIZES = (1, 10, 40)
BIG = 40
PING_TASK = "Ping the hypervisor"
ROLE_TASKS = {"deploy": "Converge the proxies of this hypervisor", "destroy": "Remove the proxies and their disks"}
LOOP_TASK = "Converge each proxy"
PEER_BASE = config.TEST_DOMAIN_PREFIX + "bench-peer-base.qcow2"
WAYS = ("set", "loop", "peer")

PING_PLAYBOOK = """
- hosts: %(host)s
  gather_facts: false
  tasks:
    - name: %(ping)s
      ansible.builtin.ping:
"""

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
        # The role's own (Fleet.role_vars): the small image never boots, so no guest acts on an ACPI
        # shutdown, and at kvm_proxy's default each removal waited 120 s before its hard stop.
        shutdown_timeout: "{{ egress_proxy_shutdown_timeout }}"
      loop: "{{ bench_names }}"
"""

# The peer: the same desired state written with community.libvirt 2.0.0's modules, as a user of it would.
# It has no image cache and no set: get_url caches the base (checksum-verified) into the pool's directory,
# then one task per step loops over the proxies: an overlay backed on the base (virt_volume), a cloud-init
# seed (virt_volume create_cidata_cdrom), the domain's definition (virt define; the fuzzy MAC flag keeps the
# NIC's MAC on a redefine, so a second run redefines the same domain) and the domain running. Two playbooks,
# as a user would write them; the removal lists the domains first (virt's destroy and undefine fail on a
# domain that does not exist).
PEER_HEAD = """
- hosts: %(host)s
  gather_facts: false
  # community.libvirt has no action group: each module's own defaults.
  module_defaults:
    community.libvirt.virt: {uri: "{{ egress_proxy_uri }}"}
    community.libvirt.virt_pool: {uri: "{{ egress_proxy_uri }}"}
    community.libvirt.virt_volume: {uri: "{{ egress_proxy_uri }}"}
  vars:
    base: "{{ bench_pool_dir }}/%(base)s"
  tasks:
    - name: %(ping)s
      ansible.builtin.ping:
"""
PEER_DEPLOY = PEER_HEAD + """
    - name: Cache the base image in the pool's directory
      ansible.builtin.get_url:
        url: "{{ egress_proxy_image.url }}"
        checksum: "{{ egress_proxy_image.checksum }}"
        dest: "{{ base }}"
        mode: "0644"
      register: cached
    - name: Refresh the pool
      community.libvirt.virt_pool:
        name: "{{ egress_proxy_pool }}"
        command: refresh
      when: cached is changed
    - name: Make each overlay
      community.libvirt.virt_volume:
        pool: "{{ egress_proxy_pool }}"
        state: present
        xml: |
          <volume type='file'>
            <name>{{ item }}.qcow2</name>
            <capacity unit='G'>{{ egress_proxy_disk_size_gb }}</capacity>
            <target><format type='qcow2'/></target>
            <backingStore><path>{{ base }}</path><format type='qcow2'/></backingStore>
          </volume>
      loop: "{{ bench_names }}"
    - name: Make each seed
      community.libvirt.virt_volume:
        pool: "{{ egress_proxy_pool }}"
        command: create_cidata_cdrom
        name: "{{ item }}-seed.iso"
        cloudinit_config:
          METADATA: {instance-id: "{{ item }}", local-hostname: "{{ item }}"}
          USERDATA: {}
      loop: "{{ bench_names }}"
    - name: Define each domain
      community.libvirt.virt:
        command: define
        mutate_flags: [ADD_UUID, ADD_MAC_ADDRESSES_FUZZY]
        xml: |
          <domain type='{{ egress_proxy_virt_type }}'>
            <name>{{ item }}</name>
            <memory unit='MiB'>{{ egress_proxy_memory_mib }}</memory>
            <vcpu>1</vcpu>
            <os><type arch='x86_64'>hvm</type><boot dev='hd'/></os>
            <features><acpi/></features>
            <devices>
              <disk type='volume' device='disk'>
                <driver name='qemu' type='qcow2'/>
                <source pool='{{ egress_proxy_pool }}' volume='{{ item }}.qcow2'/>
                <target dev='vda' bus='virtio'/>
              </disk>
              <controller type='scsi' model='virtio-scsi'/>
              <disk type='volume' device='cdrom'>
                <driver name='qemu' type='raw'/>
                <source pool='{{ egress_proxy_pool }}' volume='{{ item }}-seed.iso'/>
                <target dev='sda' bus='scsi'/>
                <readonly/>
              </disk>
              <interface type='bridge'><source bridge='{{ egress_proxy_bridge }}'/><model type='virtio'/></interface>
              <channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
              <serial type='pty'/>
            </devices>
          </domain>
      loop: "{{ bench_names }}"
    - name: Start each domain
      community.libvirt.virt:
        name: "{{ item }}"
        state: running
      loop: "{{ bench_names }}"
"""
PEER_DESTROY = PEER_HEAD + """
    - name: List the domains
      community.libvirt.virt:
        command: list_vms
      register: listed
    - name: Stop each domain
      community.libvirt.virt:
        name: "{{ item }}"
        state: destroyed
      loop: "{{ bench_names | intersect(listed.list_vms) }}"
    - name: Undefine each domain
      community.libvirt.virt:
        name: "{{ item }}"
        command: undefine
      loop: "{{ bench_names | intersect(listed.list_vms) }}"
    - name: Remove each overlay and seed
      community.libvirt.virt_volume:
        pool: "{{ egress_proxy_pool }}"
        name: "{{ item }}"
        state: absent
      loop: "{{ bench_names | product(['.qcow2', '-seed.iso']) | map('join') | list }}"
"""


class Bench:
    def __init__(self, fleet, workdir, peer=None):
        self.fleet = fleet
        self.workdir = workdir
        self.peer = peer
        self.inventory = fleet.inventory(fleet.role_vars())
        self.playbooks = {}
        for way, text in (("ping", PING_PLAYBOOK), ("set", ROLE_PLAYBOOK), ("loop", LOOP_PLAYBOOK),
                          ("peer-deploy", PEER_DEPLOY), ("peer-destroy", PEER_DESTROY)):
            path = os.path.join(workdir, "%s.yml" % way)
            with open(path, "w") as handle:
                handle.write(text % {"host": HOST, "ping": PING_TASK, "loop": LOOP_TASK, "base": PEER_BASE})
            self.playbooks[way] = path

    def names(self, way, count):
        return ["%sbench-%s-%02d" % (config.TEST_DOMAIN_PREFIX, way, index) for index in range(count)]

    def run(self, way, action, count):
        """{ping, task, playbook} seconds of one playbook run that deploys (or destroys) ``count`` proxies."""
        names = self.names(way, count)
        ansible = None
        if way == "set":
            extra = {"bench_entry": "main" if action == "deploy" else "destroy", "egress_proxy_uid": "eptest-bench-set",
                     "egress_proxy_instances": [{"name": proxy} for proxy in names]}
        else:
            extra = {"bench_state": "present" if action == "deploy" else "absent", "bench_names": names,
                     "egress_proxy_uid": "eptest-bench-loop"}
        if way == "peer":
            extra["bench_pool_dir"] = self.fleet.hv1.pool_dir
            ansible = os.path.join(self.peer, "bin")
        playbook = self.playbooks["%s-%s" % (way, action) if way == "peer" else way]
        run = self.fleet.playbook(playbook, self.inventory, extra, timeout=1800, ansible=ansible)
        if run.rc != 0:
            raise RuntimeError(repr(run))
        ping = run.spans(PING_TASK)[HOST]
        if way == "peer":
            # Its work is several tasks: from the first one's start to the last one's end.
            records = [record for record in run.timeline if record["host"] == HOST and record["task"] != PING_TASK]
            task = (min(record["start"] for record in records), max(record["end"] for record in records))
        else:
            task = run.spans(ROLE_TASKS[action] if way == "set" else LOOP_TASK)[HOST]
        result = {"ping": ping[1] - ping[0], "task": task[1] - task[0], "playbook": run.seconds}
        return result, run

    def ping_playbook(self):
        """Wall seconds of a playbook of the one ping task, as the role's playbook is run (B2w's yardstick)."""
        run = self.fleet.playbook(self.playbooks["ping"], self.inventory, {}, timeout=600)
        if run.rc != 0:
            raise RuntimeError(repr(run))
        return run.seconds

    def measure(self, runs, ways=WAYS):
        """Per way and size, ``runs`` times: a create, a no-op and a destroy (timed at BIG; untimed below it, where
        one create before the no-ops and one destroy after them do)."""
        figures = {"noop": {}, "noop_changed": {}, "create_%d" % BIG: {}, "destroy_%d" % BIG: {}, "ping_playbook": {}}
        pings, ping_playbooks = [], {}
        for way in ways:
            for count in SIZES:
                creates, noops, destroys, changed = [], [], [], []
                for run_index in range(runs):
                    if count == BIG or run_index == 0:
                        creates.append(self.run(way, "deploy", count)[0])
                    timing, run = self.run(way, "deploy", count)
                    changed.append(run.stats(HOST)["changed"])
                    # The peer's seed task reports a change at every run (create_cidata_cdrom does): kept, not refused.
                    assert way == "peer" or changed[-1] == 0, "the no-op converge changed something: %r" % run
                    noops.append(timing)
                    if way == "set":
                        ping_playbooks.setdefault(str(count), []).append(self.ping_playbook())
                    if count == BIG or run_index == runs - 1:
                        destroys.append(self.run(way, "destroy", count)[0])
                figures["noop"].setdefault(way, {})[str(count)] = summary(noops)
                figures["noop_changed"].setdefault(way, {})[str(count)] = changed
                pings.extend(sample["ping"] for sample in creates + noops + destroys)
                if count == BIG:
                    figures["create_%d" % BIG][way] = summary(creates)
                    figures["destroy_%d" % BIG][way] = summary(destroys)
        figures["ping"] = figure(pings)
        figures["ping_playbook"] = {count: figure(seconds) for count, seconds in ping_playbooks.items()}
        return figures

    def clean(self, ways=WAYS):
        for way in ways:
            self.run(way, "destroy", BIG)
        if "peer" in ways:
            hypervisors.virsh(self.fleet.hv1, "vol-delete", PEER_BASE, "--pool", config.HV_POOL_NAME, check=False)


# Runs in a process of its own: kvm_proxy_set's main() makes the set, runs it again (a no-op) with libvirt's
# calls counted, and removes it, also when the no-op fails.
COUNT_NOOP = RUN_MODULE + COUNT_LIBVIRT + r"""
import time

args = json.loads(sys.argv[2])
run_module("kvm_proxy_set", args)
try:
    count_libvirt_calls()
    started = time.perf_counter()
    result = run_module("kvm_proxy_set", args)
    seconds = time.perf_counter() - started
    calls = list(libvirt_calls)
    assert not result["changed"], result
finally:
    run_module("kvm_proxy_set", dict(args, state="absent"))
print(json.dumps({"calls": [call for call, _domain, _seconds in calls], "client_side": sorted(CLIENT_SIDE),
                  "seconds": seconds}))
"""


def count_noop_calls(spec, role_vars, count):
    """{calls, per_proxy, by_method, seconds} of one no-op kvm_proxy_set run over ``count`` proxies it creates first.

    calls are libvirt round trips: a domain's name, which libvirt-python answers itself, is counted apart.
    """
    names = ["%sbench-count-%02d" % (config.TEST_DOMAIN_PREFIX, index) for index in range(count)]
    args = dict(uri=spec.uri, pool=role_vars["egress_proxy_pool"], bridge=role_vars["egress_proxy_bridge"],
                uid="eptest-bench-count", gc=False, image=role_vars["egress_proxy_image"], vcpus=1,
                virt_type=role_vars["egress_proxy_virt_type"], cpu_mode=role_vars["egress_proxy_cpu_mode"],
                memory_mib=role_vars["egress_proxy_memory_mib"], disk_size_gb=role_vars["egress_proxy_disk_size_gb"],
                user_data="#cloud-config\n{}\n", vendor_data="", proxies=[{"name": name} for name in names],
                # The small image never boots: its removal would wait the default 120 s for each ACPI shutdown.
                shutdown_timeout=role_vars["egress_proxy_shutdown_timeout"])
    completed = subprocess.run([HYPERVISOR_PYTHON, "-c", COUNT_NOOP, BUILD_COLLECTIONS, json.dumps(args)],
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError("counting a no-op kvm_proxy_set failed:\n%s" % completed.stderr[-3000:])
    measured = json.loads(completed.stdout)
    by_method = collections.Counter(call for call in measured["calls"] if call not in measured["client_side"])
    total = sum(by_method.values())
    return {"counted": "libvirt-python", "proxies": count, "calls": total, "per_proxy": round(total / count, 2),
            "by_method": dict(by_method), "client_side_calls": len(measured["calls"]) - total,
            "seconds": round(measured["seconds"], 3)}


def summary(samples):
    return {key: figure([sample[key] for sample in samples]) for key in ("ping", "task", "playbook")}


def ratios(figures):
    """The issue's targets: no-op task / ping at every N; the loop's and the peer's time over the set's (task and playbook)."""
    def task(way, key, count=None):
        entry = figures[key][way] if count is None else figures[key][way][count]
        return entry["task"]["median"]

    result = {"noop_task_over_ping": {count: round(task("set", "noop", count) / figures["noop"]["set"][count]["ping"]["median"], 2)
                                      for count in figures["noop"]["set"]},
              # B2w: the whole no-op playbook over the ping playbook of the same run.
              "noop_playbook_over_ping_playbook": {
                  count: round(figures["noop"]["set"][count]["playbook"]["median"] / seconds["median"], 2)
                  for count, seconds in figures["ping_playbook"].items()}}
    for way in ("loop", "peer"):
        if way in figures["noop"]:
            result["%s_over_set" % way] = dict(
                {"noop_%s" % count: round(task(way, "noop", count) / task("set", "noop", count), 2) for count in figures["noop"][way]},
                **{action: round(task(way, action) / task("set", action), 2) for action in ("create_%d" % BIG, "destroy_%d" % BIG)})
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ways", default=",".join(WAYS), help="which of %s to measure (all: the report needs all)" % ", ".join(WAYS))
    args = parser.parse_args()
    ways = tuple(way for way in WAYS if way in args.ways.split(","))
    specs = [spec for spec in hypervisors.present_specs() if spec.name == HOST and hypervisors.holder(spec)]
    if not specs:
        sys.exit("%s is not up: scripts/lab up" % HOST)
    peer = peer_venv() if "peer" in ways else None
    # The run this file's figures come from, for the page's sections when a later bench/run leaves B2 out.
    started = utc_now_text()
    measured_on = machine()
    with tempfile.TemporaryDirectory(prefix="bench-converge-") as workdir:
        # Fleet wants two hypervisors; only the first one is used here.
        fleet = Fleet(specs * 2, pathlib.Path(workdir))
        bench = Bench(fleet, workdir, peer)
        try:
            figures = bench.measure(args.runs, ways)
        finally:
            bench.clean(ways)
        document = {"host": HOST, "runs": args.runs, "started": started, "machine": measured_on,
                    "figures": figures, "ratios": ratios(figures),
                    "peer_version": peer_version(peer) if peer else None,
                    "noop_calls": count_noop_calls(specs[0], fleet.role_vars(), BIG)}
    os.makedirs(os.path.dirname(RESULT), exist_ok=True)
    with open(RESULT, "w") as handle:
        json.dump(document, handle, indent=2, sort_keys=True)
        handle.write("\n")
    print(json.dumps(document["ratios"], indent=2))


if __name__ == "__main__":
    main()
