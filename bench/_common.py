"""What every benchmark of bench/run shares: timing commands, the collection under test, Ansible, the peer.

A figure is a dict ``{"runs": [seconds, ...], "median": seconds}`` (figure()); a
benchmark returns a dict of such figures and plain values, which bench/run writes
into one JSON file and bench/report.py turns into docs/performance.md.
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(REPO_ROOT, ".venv")
BUILD_COLLECTIONS = os.path.join(REPO_ROOT, "build", "collections")
HYPERVISOR_PYTHON = "/usr/bin/python3"
CACHE = os.path.expanduser("~/.cache/egress-proxies-bench")
# The peer, community.libvirt, as the `ansible` package bundles it (ansible 12 is ansible-core 2.19,
# the core this collection is tested with).
PEER_ANSIBLE = "ansible==12.3.0"
# Every domain and volume a benchmark makes starts with this; each benchmark removes its own.
PREFIX = "eptest-bench-"

sys.path.insert(0, REPO_ROOT)

from tests.lab import config  # noqa: E402 - needs the sys.path entry above


def read_text(path):
    with open(path) as handle:
        return handle.read()


def figure(runs):
    return {"runs": [round(value, 4) for value in runs], "median": round(statistics.median(runs), 4)}


def timed(argv, env=None, check=True, **kwargs):
    """(seconds, CompletedProcess) of running ``argv`` to its end."""
    started = time.monotonic()
    completed = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, **kwargs)
    seconds = time.monotonic() - started
    if check and completed.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s\n%s" % (" ".join(argv), completed.returncode,
                                                        completed.stdout[-3000:], completed.stderr[-3000:]))
    return seconds, completed


def cpu_seconds(argv, env=None):
    """CPU seconds (user + system) of one run of ``argv`` and every process it waited for (ssh, for one)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    timed(argv, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 3)


def repeat(runs, argv, env=None, before=None, after=None):
    """figure() of ``runs`` timed runs of ``argv``, ``before()`` and ``after()`` around each (untimed)."""
    seconds = []
    for _run in range(runs):
        if before is not None:
            before()
        seconds.append(timed(argv, env=env)[0])
        if after is not None:
            after()
    return figure(seconds)


def collections_of(ref, workdir):
    """ANSIBLE_COLLECTIONS_PATH of the checkout (ref None) or of commit ``ref``, unpacked under ``workdir``."""
    if ref is None:
        return BUILD_COLLECTIONS
    target = os.path.join(workdir, "baseline-" + ref, "collections")
    collection = os.path.join(target, "ansible_collections", "egress_proxies", "kvm")
    if not os.path.isdir(collection):
        os.makedirs(collection)
        archive = subprocess.run(["git", "-C", REPO_ROOT, "archive", ref], capture_output=True, check=True).stdout
        tar_path = os.path.join(workdir, "baseline-%s.tar" % ref)
        with open(tar_path, "wb") as handle:
            handle.write(archive)
        with tarfile.open(tar_path) as tar:
            tar.extractall(collection, filter="data")
        os.unlink(tar_path)
    return target


def ansible_env(collections, **extra):
    env = dict(os.environ)
    env.update(ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_NOCOLOR="1",
               ANSIBLE_DEPRECATION_WARNINGS="False", ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", PATH=os.path.join(VENV, "bin") + ":" + env["PATH"])
    env.update(extra)
    return env


def adhoc(module, args, venv=VENV, extra_vars="ansible_python_interpreter=%s" % HYPERVISOR_PYTHON):
    """argv of ``ansible localhost -m module -a args`` with the hypervisor's Python, from ``venv``."""
    argv = [os.path.join(venv, "bin", "ansible"), "localhost", "-m", module, "-e", extra_vars]
    if args:
        argv += ["-a", args]
    return argv


def peer_venv():
    """A virtualenv with the pinned ``ansible`` package (community.libvirt inside) and libvirt-python; made once."""
    venv = os.path.join(CACHE, "peer-" + PEER_ANSIBLE.replace("==", "-"))
    marker = os.path.join(venv, ".complete")
    if not os.path.exists(marker):
        subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
        libvirt_pin = [line.strip() for line in read_text(os.path.join(REPO_ROOT, "requirements-dev.txt")).splitlines()
                       if line.startswith("libvirt-python")]
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", PEER_ANSIBLE, "lxml"] + libvirt_pin,
                       check=True)
        open(marker, "w").close()
    return venv


def peer_version(venv):
    out = subprocess.run([os.path.join(venv, "bin", "ansible-galaxy"), "collection", "list", "community.libvirt",
                          "--format", "json"], capture_output=True, text=True, check=True).stdout
    for collections in json.loads(out).values():
        if "community.libvirt" in collections:
            return collections["community.libvirt"]["version"]
    return None


def virsh(*args, uri=config.LIBVIRT_URI, check=True):
    return subprocess.run(["virsh", "-q", "-c", uri] + list(args), capture_output=True, text=True, check=check).stdout


def delete_volumes(containing, pool=config.POOL_NAME):
    """Delete the pool's volumes whose names contain ``containing`` (a benchmark's own)."""
    virsh("pool-refresh", pool)
    for line in virsh("vol-list", pool).splitlines():
        name = line.split()[0] if line.strip() else ""
        if containing in name:
            virsh("vol-delete", name, "--pool", pool)
