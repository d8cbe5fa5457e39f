"""AWX-style jobs: ansible-runner on a private data directory laid out as AWX lays it out.

The project installs the collection from the artifact built from this checkout through its
collections/requirements.yml, as an AWX project update does; the jobs reach the lab's two
hypervisors over SSH with the machine credential in env/ssh_key (ansible-runner loads it into an
ssh-agent) and host keys checked. The proxies use the lab's small image, which never boots.
"""

import glob
import json
import os
import shutil
import subprocess

import pytest
import yaml

from tests.integration import collection_artifact
from tests.integration.hypervisor_inventory import hypervisor_inventory, running_specs
from tests.lab import config, hypervisors
from tests.lab import lab as lab_control

pytestmark = [pytest.mark.integration, pytest.mark.hypervisors]

VENV_BIN = os.path.join(collection_artifact.REPO_ROOT, ".venv", "bin")
PREFIX = "eptest-awx-"
IMAGE_NAME = "tiny-awx"
UID = "eptest-awx"
HV1, HV2 = "lab-hv1", "lab-hv2"
FLEET = [{"name": PREFIX + "a", "hypervisor": HV1}, {"name": PREFIX + "b", "hypervisor": HV2}]
# The project's playbooks, as a user's project would have them: the collection's own, by FQCN.
PROJECT_PLAYBOOKS = {"deploy.yml": "egress_proxies.kvm.deploy", "status.yml": "egress_proxies.kvm.status",
                     "destroy.yml": "egress_proxies.kvm.destroy"}


# What a job template's extra variables and its survey's answers send.
EXTRAVARS = {"egress_proxy_fleet": FLEET, "egress_proxy_uid": UID, "egress_proxy_memory_mib": 128}


@pytest.fixture(scope="module")
def awx_lab():
    if os.geteuid() != 0:
        pytest.fail("the AWX jobs drive the lab's hypervisors; run them as root")
    lab_control.up()
    specs = running_specs()
    if len(specs) < 2:
        pytest.fail("the lab brought up %d hypervisor(s); the AWX jobs need two (%s)" % (
            len(specs), config.HYPERVISORS_ENV))
    return specs[:2]


def _ours(name):
    return name.startswith((PREFIX, "base-" + IMAGE_NAME))


def _listing(spec):
    """What this test may have changed on a hypervisor: virsh's domains (with states) and pool volumes."""
    domains = hypervisors.virsh(spec, "list", "--all", "--name").stdout.split()
    states = {name: hypervisors.virsh(spec, "domstate", name).stdout.strip() for name in domains if _ours(name)}
    hypervisors.virsh(spec, "pool-refresh", config.HV_POOL_NAME)
    volumes = hypervisors.virsh(spec, "vol-list", config.HV_POOL_NAME).stdout.split()[0::2]
    return {"domains": states, "volumes": sorted(name for name in volumes if _ours(name))}


def _clean(specs):
    for spec in specs:
        listing = _listing(spec)
        for name, state in listing["domains"].items():
            if state != "shut off":
                hypervisors.virsh(spec, "destroy", name, check=False)
            hypervisors.virsh(spec, "undefine", name, "--managed-save", "--snapshots-metadata", "--nvram")
        for volume in _listing(spec)["volumes"]:
            hypervisors.virsh(spec, "vol-delete", volume, "--pool", config.HV_POOL_NAME)


def _runner_env(collections):
    """The environment of a job: the project's collections only, never the checkout's."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update({"PATH": VENV_BIN + os.pathsep + env.get("PATH", ""), "ANSIBLE_COLLECTIONS_PATH": collections,
                "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false", "ANSIBLE_NOCOLOR": "true",
                "ANSIBLE_HOST_KEY_CHECKING": "true", "ANSIBLE_RETRY_FILES_ENABLED": "false"})
    return env


class PrivateDataDir:
    """A job's private data directory: project/, inventory/, env/; the collections the project update installed."""

    def __init__(self, root):
        self.root = root
        self.project = root / "project"
        self.collections = str(root / "requirements_collections")
        self.control_path_dir = str(root / "cp")
        self._jobs = 0

    def lay_out(self):
        (self.project / "collections").mkdir(parents=True)
        for name, fqcn in PROJECT_PLAYBOOKS.items():
            (self.project / name).write_text("---\n- name: Run %s\n  ansible.builtin.import_playbook: %s\n" % (fqcn, fqcn))
        (self.project / "collections" / "requirements.yml").write_text(yaml.safe_dump(
            {"collections": [{"name": collection_artifact.TARBALL, "type": "file"}]}))
        (self.root / "inventory").mkdir()
        (self.root / "inventory" / "hosts.yml").write_text(yaml.safe_dump(hypervisor_inventory(IMAGE_NAME)))
        (self.root / "env").mkdir()
        (self.root / "env" / "extravars").write_text(yaml.safe_dump(EXTRAVARS))
        # As AWX isolates its jobs: SSH master connections of this directory's jobs only, so a job never
        # reuses a connection whose host key another job's known_hosts accepted.
        (self.root / "env" / "envvars").write_text(yaml.safe_dump({"ANSIBLE_SSH_CONTROL_PATH_DIR": self.control_path_dir}))
        key = self.root / "env" / "ssh_key"
        shutil.copyfile(os.path.join(config.SSH_DIR, "id_ed25519"), key)
        key.chmod(0o600)

    def project_update(self):
        """What AWX's project update does with collections/requirements.yml."""
        return subprocess.run(
            [os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "install", "-r",
             str(self.project / "collections" / "requirements.yml"), "-p", self.collections],
            capture_output=True, text=True, env=_runner_env(self.collections), check=False, timeout=300)

    def jobs_at_once(self, playbook, limits):
        """ansible-runner runs of a playbook of the project started together, one per limit (``--limit``, the hosts of
        one slice, as the jobs of a sliced AWX job template run) -> their Jobs once all ended."""
        (self.root / "env" / "cmdline").write_text("")
        started = []
        for limit in limits:
            self._jobs += 1
            ident = "%d-%s-%s" % (self._jobs, playbook.split(".")[0], limit)
            argv = [os.path.join(VENV_BIN, "ansible-runner"), "run", str(self.root), "-p", playbook, "--ident", ident,
                    "--limit", limit]
            started.append((ident, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                                    env=_runner_env(self.collections))))
        jobs = []
        for ident, process in started:
            stdout, stderr = process.communicate(timeout=900)
            completed = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
            jobs.append(Job(self.root / "artifacts" / ident, completed))
        return jobs

    def close_connections(self):
        """End the SSH master connections the jobs left persisting."""
        for socket in glob.glob(os.path.join(self.control_path_dir, "*")):
            subprocess.run(["ssh", "-o", "ControlPath=" + socket, "-O", "exit", "master"],
                           capture_output=True, check=False, timeout=30)

    def job(self, playbook, cmdline=""):
        """ansible-runner run of a playbook of the project -> Job; cmdline as the job type adds it (--check).

        env/cmdline is written for every job: ansible-runner's own --cmdline would leave the file behind
        for the next job of the directory.
        """
        self._jobs += 1
        ident = "%d-%s" % (self._jobs, playbook.split(".")[0])
        (self.root / "env" / "cmdline").write_text(cmdline)
        argv = [os.path.join(VENV_BIN, "ansible-runner"), "run", str(self.root), "-p", playbook, "--ident", ident]
        completed = subprocess.run(argv, capture_output=True, text=True, env=_runner_env(self.collections),
                                   check=False, timeout=900)
        return Job(self.root / "artifacts" / ident, completed)


class Job:
    """A finished runner job: its status and rc files, its events."""

    def __init__(self, artifacts, completed):
        assert (artifacts / "status").exists(), "ansible-runner wrote no status (rc %d):\n%s%s" % (
            completed.returncode, completed.stdout[-3000:], completed.stderr[-3000:])
        self.status = (artifacts / "status").read_text().strip()
        self.rc = int((artifacts / "rc").read_text())
        self.events = []
        for path in glob.glob(str(artifacts / "job_events" / "*.json")):
            with open(path) as handle:
                self.events.append(json.load(handle))
        self.events.sort(key=lambda event: event["counter"])
        self.output = completed.stdout

    def results(self, event="runner_on_ok"):
        """{host: [res, ...]} of the events of that kind, in order."""
        found = {}
        for item in self.events:
            if item["event"] == event:
                found.setdefault(item["event_data"].get("host"), []).append(item["event_data"].get("res", {}))
        return found

    def artifacts(self, name):
        """What the job's set_stats published under name: the playbook_on_stats event's artifact_data."""
        (stats,) = [item["event_data"] for item in self.events if item["event"] == "playbook_on_stats"]
        return stats["artifact_data"][name]

    def __repr__(self):
        failed = [(item["event_data"].get("host"), item["event_data"].get("task"), item["event_data"].get("res", {}).get("msg"))
                  for item in self.events if item["event"] in ("runner_on_failed", "runner_on_unreachable")]
        return "Job(status=%s, rc=%d, failed=%r)\n%s" % (self.status, self.rc, failed, self.output[-4000:])


@pytest.fixture
def private_data_dir(awx_lab, tmp_path):
    _clean(awx_lab)
    data_dir = PrivateDataDir(tmp_path / "awx")
    data_dir.lay_out()
    update = data_dir.project_update()
    assert update.returncode == 0, update.stdout + update.stderr
    try:
        yield data_dir
    finally:
        data_dir.close_connections()
        _clean(awx_lab)


def _results(job):
    """(hypervisor, name, action, state) of each proxy in the job's egress_proxy_results, sorted."""
    return sorted((row["hypervisor"], row["name"], row["action"], row["state"])
                  for row in job.artifacts("egress_proxy_results"))


def test_deploy_check_status_inventory_and_destroy_jobs_end_right_and_carry_the_proxies(awx_lab, private_data_dir):
    before = {spec.name: _listing(spec) for spec in awx_lab}
    check = private_data_dir.job("deploy.yml", "--check")
    assert (check.status, check.rc) == ("successful", 0), check
    # A check job changes nothing on any hypervisor, and says what a run would do.
    assert {spec.name: _listing(spec) for spec in awx_lab} == before
    assert _results(check) == [(HV1, PREFIX + "a", "created", None), (HV2, PREFIX + "b", "created", None)]

    deploy = private_data_dir.job("deploy.yml")
    assert (deploy.status, deploy.rc) == ("successful", 0), deploy
    # Started, and never booting: running without an address.
    assert _results(deploy) == [(HV1, PREFIX + "a", "created", "Provisioning"),
                                (HV2, PREFIX + "b", "created", "Provisioning")]
    for spec, name in zip(awx_lab, (PREFIX + "a", PREFIX + "b")):
        assert _listing(spec)["domains"] == {name: "running"}

    status = private_data_dir.job("status.yml")
    assert (status.status, status.rc) == ("successful", 0), status
    ours = sorted((row["hypervisor"], row["name"], row["state"], row["desired"])
                  for row in status.artifacts("egress_proxy_status_rows") if (row["name"] or "").startswith(PREFIX))
    assert ours == [(HV1, PREFIX + "a", "Provisioning", "yes"), (HV2, PREFIX + "b", "Provisioning", "yes")]

    # The inventory source, while the proxies are up: over qemu+ssh, host keys checked.
    listing = _inventory_source(private_data_dir, awx_lab)
    for host, name in ((HV1, PREFIX + "a"), (HV2, PREFIX + "b")):
        assert listing["kvm_hypervisor_" + host.replace("-", "_")]["hosts"] == [name]
        assert _unsafe(listing["_meta"]["hostvars"][name]["kvm_proxy_id"]) == "hosts/%s/domains/%s" % (host, name)

    destroy = private_data_dir.job("destroy.yml")
    assert (destroy.status, destroy.rc) == ("successful", 0), destroy
    assert _results(destroy) == [(HV1, PREFIX + "a", "removed", None), (HV2, PREFIX + "b", "removed", None)]
    assert all(_listing(spec)["domains"] == {} for spec in awx_lab)


def test_a_job_whose_hypervisor_key_is_unknown_fails(awx_lab, private_data_dir):
    """Host keys are checked: with an empty known_hosts file the job fails, unreachable, and changes nothing."""
    empty = private_data_dir.root / "known_hosts"
    empty.write_text("")
    hosts = private_data_dir.root / "inventory" / "hosts.yml"
    hosts.write_text(hosts.read_text().replace(config.SSH_KNOWN_HOSTS, str(empty)))
    job = private_data_dir.job("deploy.yml")
    assert (job.status, job.rc) == ("failed", 4), job
    assert sorted(job.results("runner_on_unreachable")) == [HV1, HV2]
    assert all(_listing(spec)["domains"] == {} for spec in awx_lab)


# The project's bin/hypervisor-ssh of docs/awx.md, which libvirt's qemu+ssh runs in place of ssh (the URI's
# command=): host keys checked against the project's bin/known_hosts (libvirt passes the command no variables
# of its own environment but PATH, HOME and a few others). libvirt's ssh
# transport takes no known_hosts option, and its libssh transport hangs or crashes (SIGSEGV) on replies
# larger than a few kilobytes with libvirt 9.0 and libssh 0.10 (Debian 12), so the source does not use it.
HYPERVISOR_SSH = """#!/bin/sh
exec ssh -o UserKnownHostsFile="$(dirname "$0")/known_hosts" \\
    -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes "$@"
"""


def _inventory_source(data_dir, specs):
    """An inventory update: ansible-inventory --list --export on the project's kvm_proxies source -> the listing."""
    ssh = data_dir.project / "bin" / "hypervisor-ssh"
    ssh.parent.mkdir()
    ssh.write_text(HYPERVISOR_SSH)
    ssh.chmod(0o755)
    shutil.copyfile(config.SSH_KNOWN_HOSTS, ssh.parent / "known_hosts")
    source = data_dir.project / "inventory" / "hypervisors.kvm_proxies.yml"
    source.parent.mkdir()
    uri = "qemu+ssh://root@%s/system?keyfile=" + str(data_dir.root / "env" / "ssh_key") + "&command=" + str(ssh)
    source.write_text(yaml.safe_dump({"plugin": "egress_proxies.kvm.kvm_proxies", "uid": UID, "strict": True,
                                      "hypervisors": [{"uri": uri % spec.address} for spec in specs]}))
    completed = subprocess.run(
        [os.path.join(VENV_BIN, "ansible-inventory"), "-i", str(source), "--list", "--export"],
        capture_output=True, text=True, env=dict(_runner_env(data_dir.collections),
                                                 ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="true"),
        cwd=str(data_dir.project), check=False, timeout=300)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def _unsafe(value):
    """A --list string without ansible-core 2.19's marking of untrusted strings."""
    return value["__ansible_unsafe"] if isinstance(value, dict) else value


def _slices_inventory(data_dir, specs, pools):
    """The job's inventory with two-NIC proxies (static inside addresses, so each is a scrape target without booting)
    and ``pools``: {host: its egress_proxy_outside.pool}, in host_vars, or {"hypervisors": pool} in group_vars."""
    inventory = hypervisor_inventory(IMAGE_NAME)
    group = inventory["all"]["children"]["hypervisors"]
    for spec in specs:
        outside = {"bridge": config.HV_OUTSIDE_BRIDGE, "gateway": spec.outside_address, "prefix": spec.outside_cidr}
        group["hosts"][spec.name].update(egress_proxy_outside=dict(outside, pool=pools[spec.name]) if spec.name in pools
                                         else outside)
    if "hypervisors" in pools:
        group["vars"]["egress_proxy_outside"] = {"bridge": config.HV_OUTSIDE_BRIDGE, "gateway": specs[0].outside_address,
                                                 "prefix": specs[0].outside_cidr, "pool": pools["hypervisors"]}
        for spec in specs:
            del group["hosts"][spec.name]["egress_proxy_outside"]
    (data_dir.root / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory))


def _egress_addresses(job):
    """{proxy: the egress address its domain records} of the job's converge results."""
    return {proxy["name"]: proxy["egress_address"] for item in job.events if item["event"] == "runner_on_ok"
            and item["event_data"].get("task") == "Converge the proxies of this hypervisor"
            for proxy in item["event_data"]["res"].get("proxies", [])}


def test_two_slices_at_once_keep_every_proxy_in_the_file_sd_file_and_a_shared_pool_is_refused(
        awx_lab, private_data_dir, tmp_path):
    """Issue 40 item 14: the jobs of a sliced job template run the playbook at once, one per slice of the hypervisors.
    Each rewrote the whole file_sd file from what it read before the other wrote, so one slice's proxies went missing;
    the file's lock keeps both. A pool per hypervisor (host_vars) gives unique addresses; one pool shared by the slices
    is refused by both, naming --limit and slicing, before anything is touched."""
    file_sd = tmp_path / "targets.json"
    # A hypervisor outside this inventory (another slice's, as a sliced job's inventory holds its own slice only): kept.
    elsewhere = {"labels": {"hypervisor": "lab-hv9", "owner": UID, "proxy": PREFIX + "x"}, "targets": ["198.18.99.5:9301"]}
    file_sd.write_text(json.dumps([elsewhere]))
    fleet = [{"name": "%s%s-%d" % (PREFIX, spec.name[-3:], number), "hypervisor": spec.name,
              "address": "%s.%d/24" % (spec.lan_prefix, 210 + number)} for spec in awx_lab for number in (1, 2)]
    (private_data_dir.root / "env" / "extravars").write_text(yaml.safe_dump(dict(
        EXTRAVARS, egress_proxy_fleet=fleet, egress_proxy_metrics_file_sd=str(file_sd),
        egress_proxy_metrics_file_sd_prune=False)))

    shared = awx_lab[0].outside_prefix + ".100-" + awx_lab[0].outside_prefix + ".103"
    _slices_inventory(private_data_dir, awx_lab, {"hypervisors": [shared]})
    refused = private_data_dir.jobs_at_once("deploy.yml", [HV1, HV2])
    for job, (mine, other) in zip(refused, ((HV1, HV2), (HV2, HV1))):
        assert (job.status, job.rc) == ("failed", 2), job
        messages = " | ".join(str(item["event_data"].get("res", {}).get("msg")) for item in job.events
                              if item["event"] == "runner_on_failed")
        assert ("egress_proxy_outside.pool of %s shares addresses with egress_proxy_outside.pool of %s, whose proxies "
                "were not listed in this run (not in the play: --limit, a sliced AWX job" % (mine, other)) in messages, job
    assert all(_listing(spec)["domains"] == {} for spec in awx_lab)
    assert json.loads(file_sd.read_text()) == [elsewhere]

    # The job template settings docs/awx.md gives for slicing: a pool per hypervisor, and the file not pruned.
    _slices_inventory(private_data_dir, awx_lab, {spec.name: ["%s.100-%s.103" % (spec.outside_prefix, spec.outside_prefix)]
                                                  for spec in awx_lab})
    expected = sorted([("lab-hv9", PREFIX + "x")] + [(entry["hypervisor"], entry["name"]) for entry in fleet])
    first = None
    for _run in range(2):  # again: the file stays whole, the addresses stay
        jobs = private_data_dir.jobs_at_once("deploy.yml", [HV1, HV2])
        for job in jobs:
            assert (job.status, job.rc) == ("successful", 0), job
        written = json.loads(file_sd.read_text())
        assert sorted((entry["labels"]["hypervisor"], entry["labels"]["proxy"]) for entry in written) == expected, written
        addresses = dict(_egress_addresses(jobs[0]), **_egress_addresses(jobs[1]))
        assert sorted(addresses) == sorted(entry["name"] for entry in fleet), addresses
        assert len(set(addresses.values())) == len(fleet), addresses
        assert first in (None, addresses), (first, addresses)
        first = addresses
