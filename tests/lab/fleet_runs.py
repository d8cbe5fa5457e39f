"""Ansible runs on the lab's hypervisors, and what those hold: shared by the fleet tests and the benchmarks.

A Fleet writes inventories whose connection part is inventories/lab/hosts.yml as users run it (ansible_connection
ssh, the lab's key and known_hosts, host keys checked), with the caller's role variables. Ansible runs with forks 5
and host key checking on; json_results gives the run as JSON (a FleetRun) and fleet_timeline when each task ran on
each hypervisor (both in callback_plugins/ here). tests/integration/fleet_fixtures.py makes pytest fixtures of it.
"""

import json
import os
import shutil
import subprocess
import time

import yaml

from tests.lab import config, hypervisors

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.join(REPO_ROOT, ".venv", "bin")
COLLECTIONS_DIR = os.path.join(REPO_ROOT, "build", "collections")
CALLBACKS = os.path.join(REPO_ROOT, "tests", "lab", "callback_plugins")
LAB_HOSTS = os.path.join(REPO_ROOT, "inventories", "lab", "hosts.yml")
PLAYBOOKS = os.path.join(REPO_ROOT, "playbooks")
FORKS = 5

# Every domain and volume of these tests starts with the prefix, every base image with the image name.
PREFIX = "eptest-fleet-"
IMAGE_NAME = "tiny-fleet"


def tiny_proxy_vars(image_name):
    """The egress_proxy role's settings for non-booting proxies on a lab hypervisor: each hypervisor's own mirror of
    the tiny image, cached as ``image_name``, the lab's pool, bridge and clients."""
    mirror = "http://127.0.0.1:8642/"  # each hypervisor's own image mirror
    return {
        "egress_proxy_uri": config.LIBVIRT_URI,
        "egress_proxy_pool": config.HV_POOL_NAME,
        "egress_proxy_bridge": config.HV_BRIDGE,
        "egress_proxy_image": {"name": image_name, "url": mirror + config.TINY_QCOW2,
                               "checksum": "sha256:" + mirror + config.SHA256SUMS},
        "egress_proxy_virt_type": config.VIRT_TYPE,
        "egress_proxy_cpu_mode": config.CPU_MODE,
        "egress_proxy_disk_size_gb": 1,
        "egress_proxy_install_packages": False,
        "egress_proxy_vendor_data": "",
        "egress_proxy_allowed_clients": ["198.18.0.0/15"],
        # The small image never boots: no address to wait for, no guest to act on an ACPI shutdown.
        "egress_proxy_wait_for_ip": False,
        "egress_proxy_shutdown_timeout": config.TINY_SHUTDOWN_TIMEOUT,
    }


class FleetRun:
    """One ansible-playbook run: rc, output, the json_results document, the timeline, the wall time."""

    def __init__(self, completed, timeline, seconds):
        self.rc = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr
        self.seconds = seconds
        self.result = json.loads(completed.stdout) if completed.stdout.strip() else {"plays": [], "stats": {}}
        self.timeline = timeline

    def results(self, task_suffix, host):
        """The results on host of every task whose name ends with task_suffix, in play order."""
        return [task["hosts"][host] for play in self.result["plays"] for task in play["tasks"]
                if task["task"]["name"].endswith(task_suffix) and host in task["hosts"]]

    def items(self, task_suffix, host):
        """{proxy name: its entry} of the one kvm_proxy_set task whose name ends with task_suffix."""
        (task,) = self.results(task_suffix, host)
        return {entry["name"]: entry for entry in task.get("proxies", [])}

    def ran(self, task_suffix):
        """The hosts on which a task whose name ends with task_suffix ran (not skipped)."""
        return sorted({host for play in self.result["plays"] for task in play["tasks"]
                       if task["task"]["name"].endswith(task_suffix)
                       for host, result in task["hosts"].items() if not result.get("skipped")})

    def stats(self, host):
        return self.result["stats"].get(host, {})

    def failures(self, host=None):
        """(host, task name, msg) of every failed task and loop item."""
        found = []
        for play in self.result["plays"]:
            for task in play["tasks"]:
                for name, result in task["hosts"].items():
                    if host not in (None, name):
                        continue
                    for failed in [result] + [item for item in result.get("results", []) if isinstance(item, dict)]:
                        if failed.get("failed") or failed.get("unreachable"):
                            found.append((name, task["task"]["name"], failed.get("msg")))
        return found

    def spans(self, task_suffix):
        """{host: (start, end)} of the task whose name ends with task_suffix."""
        return {record["host"]: (record["start"], record["end"]) for record in self.timeline
                if record["task"].endswith(task_suffix)}

    def __repr__(self):
        failed = "".join("\n- %s: %s: %s" % failure for failure in self.failures())
        return "FleetRun(rc=%d, %.0f s)%s\n--- stdout\n%s\n--- stderr\n%s" % (
            self.rc, self.seconds, failed, self.stdout[-6000:], self.stderr[-3000:])


def overlap(first, second):
    """Seconds two (start, end) spans have in common (0 when they do not meet)."""
    return max(0.0, min(first[1], second[1]) - max(first[0], second[0]))


class Fleet:
    """The lab's hypervisors for a test: specs, inventories, runs, and checks through each sshd."""

    def __init__(self, specs, tmp_path):
        self.specs = specs
        self.hv1, self.hv2 = specs[0], specs[1]
        self.tmp_path = tmp_path
        self._runs = 0

    # --- inventories ---------------------------------------------------------------------------------

    def role_vars(self, **overrides):
        # The lab is 198.18.0.0/15, internal addresses the role's egress_proxy_deny_internal refuses: a proxy that
        # boots reaches the origins on the hypervisors' LAN and outside segments (and the tests' servers there).
        variables = dict(tiny_proxy_vars(IMAGE_NAME), egress_proxy_memory_mib=128, egress_proxy_uid="eptest-fleet",
                         egress_proxy_allowed_destinations=config.origin_cidrs(self.specs))
        variables.update(overrides)
        return variables

    def inventory(self, group_vars=None, host_vars=None):
        """An inventory directory: inventories/lab/hosts.yml, group_vars/hypervisors.yml, host_vars/<host>.yml."""
        self._runs += 1
        path = self.tmp_path / ("inventory-%d" % self._runs)
        (path / "group_vars").mkdir(parents=True)
        (path / "host_vars").mkdir()
        shutil.copyfile(LAB_HOSTS, path / "hosts.yml")
        (path / "group_vars" / "hypervisors.yml").write_text(yaml.safe_dump(group_vars or self.role_vars()))
        for host, variables in (host_vars or {}).items():
            (path / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump(variables))
        return str(path)

    # --- running Ansible -----------------------------------------------------------------------------

    def _env(self, timeline):
        env = dict(os.environ)
        env.update({
            "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS_DIR,
            "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
            "ANSIBLE_LOCAL_TEMP": str(self.tmp_path / "ansible-local"),
            # The inventory's known_hosts file decides: a hypervisor whose key is not there is refused.
            "ANSIBLE_HOST_KEY_CHECKING": "true",
            # Each test its own SSH control masters: none outlives the test into another one.
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(self.tmp_path / "cp"),
            "ANSIBLE_FORKS": str(FORKS),
            "ANSIBLE_RETRY_FILES_ENABLED": "false",
            "ANSIBLE_NOCOLOR": "true",
            "ANSIBLE_FORCE_COLOR": "false",
            "ANSIBLE_CALLBACK_PLUGINS": CALLBACKS,
            "ANSIBLE_CALLBACKS_ENABLED": "fleet_timeline",
            "EGRESS_FLEET_TIMELINE": timeline,
            # With -v and more, Ansible's own lines go to stderr: stdout stays the json_results document.
            "ANSIBLE_VERBOSE_TO_STDERR": "true",
        })
        return env

    def playbook(self, playbook, inventory, extra_vars=None, timeout=1200, ansible=None, options=()):
        """ansible-playbook PLAYBOOK (a name in playbooks/, or a path) on the inventory -> FleetRun.

        ``ansible``: the bin directory of another Ansible installation (the benchmarks' peer), which then
        also finds the collections installed beside it. ``options``: more of ansible-playbook's options, such as
        ``("-vvv", "--diff")`` (the verbose lines are in the run's stderr, the results with what -vvv adds in stdout).
        """
        path = playbook if os.path.isabs(playbook) else os.path.join(PLAYBOOKS, playbook)
        timeline = str(self.tmp_path / ("timeline-%d.jsonl" % time.monotonic_ns()))
        argv = [os.path.join(ansible or VENV_BIN, "ansible-playbook"), "-i", inventory, path] + list(options)
        if extra_vars:
            argv += ["-e", json.dumps(extra_vars)]
        env = dict(self._env(timeline), ANSIBLE_STDOUT_CALLBACK="json_results")
        if ansible:
            env["ANSIBLE_COLLECTIONS_SCAN_SYS_PATH"] = "true"
        started = time.monotonic()
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, env=env, cwd=REPO_ROOT)
        seconds = time.monotonic() - started
        records = []
        if os.path.exists(timeline):
            with open(timeline) as handle:
                records = [json.loads(line) for line in handle]
        return FleetRun(completed, records, seconds)

    def command(self, directory, argv, timeout=1200):
        """A user's command line ``ansible-playbook ARGS`` run in ``directory`` (no timeline kept) -> FleetRun."""
        env = dict(self._env(os.devnull), ANSIBLE_STDOUT_CALLBACK="json_results")
        started = time.monotonic()
        completed = subprocess.run([os.path.join(VENV_BIN, argv[0])] + list(argv[1:]), capture_output=True, text=True,
                                   timeout=timeout, check=False, env=env, cwd=str(directory))
        return FleetRun(completed, [], time.monotonic() - started)

    def adhoc(self, inventory, module, args="", pattern="hypervisors", timeout=600):
        """ad-hoc `ansible PATTERN -m MODULE -a ARGS -o` -> CompletedProcess."""
        argv = [os.path.join(VENV_BIN, "ansible"), pattern, "-i", inventory, "-m", module, "-o"]
        if args:
            argv += ["-a", args]
        env = self._env(str(self.tmp_path / "timeline-adhoc.jsonl"))
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, env=env, cwd=REPO_ROOT)

    # --- looking at the hypervisors ------------------------------------------------------------------

    def ssh(self, spec, *argv):
        """A command on the hypervisor through its own sshd (tests/lab/lab-ssh.sh: host key checked)."""
        return subprocess.run([config.LAB_SSH, spec.name] + list(argv), capture_output=True, text=True,
                              timeout=120, check=False)

    def domains_over_ssh(self, spec):
        """{name: state} of this test's domains, from virsh on the hypervisor, over its sshd."""
        completed = self.ssh(spec, "virsh", "-q", "-c", config.LIBVIRT_URI, "list", "--all")
        assert completed.returncode == 0, completed.stderr
        return _states(completed.stdout)

    def domains_local(self, spec):
        """{name: state} of this test's domains, entering the hypervisor's namespaces (no SSH needed)."""
        return _states(hypervisors.virsh(spec, "list", "--all").stdout)

    @staticmethod
    def others_local(spec):
        """Every domain on the hypervisor that no test made (no eptest- prefix), such as scripts/demo's egress-demo-N."""
        listed = hypervisors.virsh(spec, "list", "--all", "--name").stdout.split()
        return sorted(name for name in listed if not name.startswith(config.TEST_DOMAIN_PREFIX))

    def volumes_local(self, spec):
        hypervisors.virsh(spec, "pool-refresh", config.HV_POOL_NAME)
        listed = hypervisors.virsh(spec, "vol-list", config.HV_POOL_NAME).stdout.split()[0::2]
        return sorted(name for name in listed if name.startswith((PREFIX, "base-" + IMAGE_NAME)))

    def clean(self):
        """No domain or volume of these tests on any lab hypervisor; every sshd up, no libvirtd frozen."""
        for spec in self.specs:
            hypervisors.thaw(spec)
            hypervisors.start_sshd(spec)
            for name in self.domains_local(spec):
                if hypervisors.virsh(spec, "domstate", name).stdout.strip() != "shut off":
                    hypervisors.virsh(spec, "destroy", name, check=False)
                hypervisors.virsh(spec, "undefine", name, "--managed-save", "--snapshots-metadata", "--nvram")
            for volume in self.volumes_local(spec):
                hypervisors.virsh(spec, "vol-delete", volume, "--pool", config.HV_POOL_NAME)


def _states(virsh_list):
    """{name: state} of the eptest-fleet- lines of `virsh -q list --all` (" Id  Name  State...")."""
    states = {}
    for line in virsh_list.splitlines():
        fields = line.split(None, 2)
        if len(fields) == 3 and fields[1].startswith(PREFIX):
            states[fields[1]] = fields[2].strip()
    return states
