"""Fixtures for integration tests on the real local lab (see docs/dev/lab.md)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pytest puts this directory, not the repository root, on sys.path; tests.lab lives at the root.
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from tests.lab import config  # noqa: I001 - needs the sys.path entry above
from tests.lab import lab as lab_control

BUILD_DIR = os.path.join(REPO_ROOT, "build")
# ansible finds the collection through a symlink here. scripts/sanity owns
# build/ansible_collections (a real copy, which ansible-test needs); this tree is separate.
COLLECTIONS_DIR = os.path.join(BUILD_DIR, "collections")
VENV_BIN = os.path.join(REPO_ROOT, ".venv", "bin")
# Modules run on the distro Python with Debian's python3-libvirt, lxml, pycdlib and requests,
# exactly as on a real hypervisor.
HYPERVISOR_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="session")
def lab():
    """The running lab (brought up if needed): uri, pool, bridge, netns, mirror_url, cache_dir, images."""
    if os.geteuid() != 0:
        pytest.fail("integration tests drive qemu:///system, bridges and netns; run them as root")
    lab_control.up()
    return lab_control.describe()


def _collections_path():
    link = os.path.join(COLLECTIONS_DIR, "ansible_collections", "egress_proxies", "kvm")
    if os.path.realpath(link) != REPO_ROOT:
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(REPO_ROOT, link)
    return COLLECTIONS_DIR


class AnsibleRun:
    """rc, raw stdout/stderr, and for playbooks the json callback's parsed result."""

    def __init__(self, completed, parse_json):
        self.rc = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr
        self.result = json.loads(completed.stdout) if parse_json and completed.stdout.strip() else None

    def task_results(self, task_name, host="localhost"):
        """The per-host result dicts of every task with this name, in play order."""
        return [task["hosts"][host] for play in self.result["plays"] for task in play["tasks"]
                if task["task"]["name"] == task_name and host in task["hosts"]]

    def __repr__(self):
        return "AnsibleRun(rc=%d)\n--- stdout\n%s\n--- stderr\n%s" % (self.rc, self.stdout[-4000:], self.stderr[-4000:])


def _ansible_env(tmp_dir, json_output):
    env = dict(os.environ)
    env.update({
        "ANSIBLE_COLLECTIONS_PATH": _collections_path(),
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
        "ANSIBLE_LOCAL_TEMP": os.path.join(tmp_dir, "ansible-local"),
        "ANSIBLE_HOST_KEY_CHECKING": "false",
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
        "ANSIBLE_NOCOLOR": "true",
        "ANSIBLE_FORCE_COLOR": "false",
        "ANSIBLE_PYTHON_INTERPRETER": HYPERVISOR_PYTHON,
    })
    if json_output:
        env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.json"
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
