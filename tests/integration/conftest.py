"""Fixtures for integration tests on the real local lab (see docs/dev/lab.md)."""

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.path.join(REPO_ROOT, "build")
# pytest puts this directory, not the repository root, on sys.path; tests.* live at the root.
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from tests.integration import collection_artifact  # noqa: E402 - needs the sys.path entry above

# ansible, and the tests' own imports of ansible_collections.egress_proxies.kvm, use the collection
# as built and installed from its tarball (tests/integration/collection_artifact.py), not the
# checkout: build/collections (the unit tests' symlink to the checkout) leaves sys.path so nothing
# is imported from it.
ARTIFACT = collection_artifact.install()
COLLECTIONS_DIR = collection_artifact.COLLECTIONS_DIR
_CHECKOUT_LINK = os.path.realpath(os.path.join(BUILD_DIR, "collections"))
sys.path[:] = [path for path in sys.path if os.path.realpath(path) != _CHECKOUT_LINK]
sys.path.insert(0, COLLECTIONS_DIR)

from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import Hypervisor  # noqa: E402 - as above
from tests.integration import lab_objects  # noqa: E402 - as above
from tests.lab import config as lab_config  # noqa: E402 - as above
from tests.lab import lab as lab_control  # noqa: E402 - needs the sys.path entries above
from tests.lab.fleet_runs import CALLBACKS  # noqa: E402 - as above

VENV_BIN = os.path.join(REPO_ROOT, ".venv", "bin")
# Modules run on the distro Python with Debian's python3-libvirt, lxml, pycdlib and requests,
# exactly as on a real hypervisor.
HYPERVISOR_PYTHON = "/usr/bin/python3"


# scripts/test runs the integration tests in two lanes at once, two pytest sessions: `-m hypervisors`, the
# tests of the lab's own hypervisors (lab-hv1, lab-hv2: their own libvirtd, sshd and LANs), and
# `-m "not hypervisors"`, the others: those of the machine's libvirtd (qemu:///system, the test sshd, the lab netns),
# and of the bare host (lab-bare, a host of its own that its test brings up), which would otherwise lengthen the
# longer lane.
# Tests of one lane run one after another, as each one cleans, freezes or lists its lane's hypervisors as a
# whole. A test that uses fleet_fixtures' lab is in the hypervisors lane without being marked; tryfirst, so
# the mark is there when `-m` selects.
#
# scripts/test starts both lanes as soon as the lab is up, beside its checks and unit tests. The lanes share the boot
# lock (one_boot_at_a_time), so each runs in file order but for its boot tests: the machine's lane boots first and
# the hypervisors lane last. The machine's boots then run while the hypervisors
# lane runs its tests that boot nothing (longer), instead of either lane waiting on the lock mid-run; and the
# hypervisors lane's boots, the longer part, end with the machine's lane done and both CPUs theirs.
def _lane_order(item):
    if item.get_closest_marker("boot") is None:
        return 1
    return 2 if item.get_closest_marker("hypervisors") else 0


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if "fleet_lab" in item.fixturenames:
            item.add_marker(pytest.mark.hypervisors)
    items.sort(key=_lane_order)


@pytest.fixture(autouse=True)
def one_boot_at_a_time(request):
    """A test that boots the Debian guest holds the lab's boot lock for its length, so the two lanes never
    boot at once: TCG guests booting side by side on this machine's two CPUs each slow past their deadlines."""
    if request.node.get_closest_marker("boot") is None:
        yield
        return
    os.makedirs(lab_config.RUN_DIR, exist_ok=True)
    with open(os.path.join(lab_config.RUN_DIR, "boot.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def lab():
    """The running lab (brought up if needed): uri, pool, bridge, netns, mirror_url, cache_dir, images."""
    if os.geteuid() != 0:
        pytest.fail("integration tests drive qemu:///system, bridges and netns; run them as root")
    lab_control.up()
    return lab_control.describe()


@pytest.fixture
def hypervisor(lab):
    """The collection's seam, open on the lab's libvirtd for the test."""
    with Hypervisor.open(lab.uri) as hypervisor:
        yield hypervisor


@pytest.fixture
def lab_cleanup(lab, hypervisor):
    """lab_cleanup(domains=(), volumes=()): those domains and volumes of the lab pool go now and when the test ends.

    Now, so a test starts clean after a run that died before its cleanup; at the end, so it leaves nothing.
    """
    asked = []

    def clean(domains=(), volumes=()):
        asked.append((domains, volumes))
        lab_objects.remove(hypervisor, lab.pool, domains, volumes)

    yield clean
    for domains, volumes in asked:
        lab_objects.remove(hypervisor, lab.pool, domains, volumes)


class AnsibleRun:
    """rc, raw stdout/stderr, and for playbooks the parsed output of tests/lab/callback_plugins/json_results.py."""

    def __init__(self, completed, parse_json):
        self.rc = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr
        self.result = json.loads(completed.stdout) if parse_json and completed.stdout.strip() else None

    def task_results(self, task_name, host="localhost"):
        """The per-host result dicts of every task with this name, in play order."""
        return [task["hosts"][host] for play in self.result["plays"] for task in play["tasks"]
                if task["task"]["name"] == task_name and host in task["hosts"]]

    def failures(self):
        """(task name, msg) of every failed task and loop item."""
        found = []
        for play in (self.result or {}).get("plays", []):
            for task in play["tasks"]:
                for result in task["hosts"].values():
                    for failed in [result] + [item for item in result.get("results", []) if isinstance(item, dict)]:
                        if failed.get("failed"):
                            found.append((task["task"]["name"], failed.get("msg")))
        return found

    def __repr__(self):
        failed = "".join("\n- %s: %s" % failure for failure in self.failures())
        return "AnsibleRun(rc=%d)%s\n--- stdout\n%s\n--- stderr\n%s" % (
            self.rc, failed, self.stdout[-4000:], self.stderr[-4000:])


def _ansible_env(tmp_dir, json_output):
    env = dict(os.environ)
    env.update({
        "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS_DIR,
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
        "ANSIBLE_LOCAL_TEMP": os.path.join(tmp_dir, "ansible-local"),
        "ANSIBLE_HOST_KEY_CHECKING": "false",
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
        "ANSIBLE_NOCOLOR": "true",
        "ANSIBLE_FORCE_COLOR": "false",
        "ANSIBLE_PYTHON_INTERPRETER": HYPERVISOR_PYTHON,
    })
    if json_output:
        env["ANSIBLE_CALLBACK_PLUGINS"] = CALLBACKS
        env["ANSIBLE_STDOUT_CALLBACK"] = "json_results"
    return env


def _inventory(tmp_dir, extra_hosts=()):
    path = os.path.join(tmp_dir, "inventory.ini")
    lines = ["localhost ansible_connection=local ansible_python_interpreter=%s" % HYPERVISOR_PYTHON]
    lines.extend(extra_hosts)
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


@pytest.fixture
def run_playbook(tmp_path):
    """run_playbook(path, extra_vars=None, check=False, extra_hosts=()) -> AnsibleRun (json callback)."""

    def run(path, extra_vars=None, check=False, extra_hosts=(), timeout=1800):
        argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", _inventory(str(tmp_path), extra_hosts),
                "-e", json.dumps(extra_vars or {}), path]
        if check:
            argv.append("--check")
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                                   env=_ansible_env(str(tmp_path), json_output=True), cwd=REPO_ROOT)
        return AnsibleRun(completed, parse_json=True)

    return run


@pytest.fixture
def run_ansible(tmp_path):
    """run_ansible(module, args="", pattern="localhost", extra_hosts=()) -> AnsibleRun; ad-hoc ansible."""

    def run(module, args="", pattern="localhost", extra_hosts=(), timeout=600):
        argv = [os.path.join(VENV_BIN, "ansible"), pattern, "-i", _inventory(str(tmp_path), extra_hosts),
                "-m", module, "-a", args]
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                                   env=_ansible_env(str(tmp_path), json_output=False), cwd=REPO_ROOT)
        return AnsibleRun(completed, parse_json=False)

    return run


SSHD_HOST = "127.0.0.1"
SSHD_PORT = 2222


class Sshd:
    """A private sshd on 127.0.0.1:2222 that lets root in with a generated test key."""

    def __init__(self, key_path):
        self.host = SSHD_HOST
        self.port = SSHD_PORT
        self.user = "root"
        self.key_path = key_path
        # Host key checking is off: the host key is regenerated with every fresh build/ directory.
        self.ssh_args = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes"
        self.uri = "qemu+ssh://%s@%s:%d/system?keyfile=%s&no_verify=1" % (self.user, self.host, self.port, key_path)

    def inventory_line(self, name="hypervisor-ssh"):
        return ("%s ansible_host=%s ansible_port=%d ansible_user=%s ansible_ssh_private_key_file=%s "
                "ansible_ssh_common_args='%s' ansible_python_interpreter=%s") % (
            name, self.host, self.port, self.user, self.key_path, self.ssh_args, HYPERVISOR_PYTHON)


def _port_open(host, port):
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def sshd():
    """Start /usr/sbin/sshd on 127.0.0.1:2222 (keys and config under build/ssh) for the test session."""
    if _port_open(SSHD_HOST, SSHD_PORT):
        pytest.fail("%s:%d is already in use; the test sshd needs it" % (SSHD_HOST, SSHD_PORT))
    ssh_dir = os.path.join(BUILD_DIR, "ssh")
    os.makedirs(ssh_dir, mode=0o700, exist_ok=True)
    host_key = os.path.join(ssh_dir, "ssh_host_ed25519_key")
    client_key = os.path.join(ssh_dir, "id_ed25519")
    for key, comment in ((host_key, "egress-lab test sshd"), (client_key, "egress-lab test client")):
        if not os.path.exists(key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", key], check=True)
    authorized_keys = os.path.join(ssh_dir, "authorized_keys")
    shutil.copyfile(client_key + ".pub", authorized_keys)
    config_path = os.path.join(ssh_dir, "sshd_config")
    with open(config_path, "w") as handle:
        handle.write("\n".join([
            "ListenAddress %s:%d" % (SSHD_HOST, SSHD_PORT),
            "HostKey %s" % host_key,
            "AuthorizedKeysFile %s" % authorized_keys,
            "PidFile %s" % os.path.join(ssh_dir, "sshd.pid"),
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            # build/ lives in a checkout whose directory modes sshd's strict checks would reject.
            "StrictModes no",
            "Subsystem sftp internal-sftp",
            "",
        ]))
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    log_path = os.path.join(ssh_dir, "sshd.log")
    process = subprocess.Popen(["/usr/sbin/sshd", "-D", "-f", config_path, "-E", log_path])
    deadline = time.monotonic() + 10
    while not _port_open(SSHD_HOST, SSHD_PORT):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail("test sshd did not start; see %s" % log_path)
        time.sleep(0.1)
    try:
        yield Sshd(client_key)
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def serve_in_netns(lab, tmp_path):
    """serve_in_netns(text, port) -> URL of a page holding ``text``, served from inside the lab netns.

    The destination a proxy under test is asked to fetch; the servers stop with the test.
    """
    servers = []

    def serve(text, port):
        root = tmp_path / ("netns-origin-%d" % port)
        root.mkdir()
        (root / "index.html").write_text(text)
        servers.append(subprocess.Popen(
            ["ip", "netns", "exec", lab.netns, HYPERVISOR_PYTHON, "-m", "http.server", "--bind", lab.netns_address,
             "--directory", str(root), str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return "http://%s:%d/index.html" % (lab.netns_address, port)

    yield serve
    for server in servers:
        server.terminate()
        server.wait(timeout=10)
