"""What every benchmark of bench/run shares: timing commands, the collection under test, Ansible, the peer.

A figure is a dict ``{"runs": [seconds, ...], "median": seconds}`` (figure()); a
benchmark returns a dict of such figures and plain values, which bench/run writes
into one JSON file and bench/report.py turns into docs/performance.md.
"""

import datetime
import glob
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from xml.etree import ElementTree

import yaml

from tests.lab import config, hypervisors

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(REPO_ROOT, ".venv")
BUILD_COLLECTIONS = os.path.join(REPO_ROOT, "build", "collections")
LAB_INVENTORY = os.path.join(REPO_ROOT, "inventories", "lab")
HYPERVISOR_PYTHON = "/usr/bin/python3"
CACHE = os.path.expanduser("~/.cache/egress-proxies-bench")
# The peer, community.libvirt, as the `ansible` package bundles it (ansible 12 is ansible-core 2.19,
# the core this collection is tested with).
PEER_ANSIBLE = "ansible==12.3.0"
# Every domain and volume a benchmark makes starts with this; each benchmark removes its own.
PREFIX = "eptest-bench-"


def read_text(path):
    with open(path) as handle:
        return handle.read()


def utc_now_text():
    """Now, in UTC to the second, as the results files record when a run started."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def command_output(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def machine():
    cpu = [line.split(":", 1)[1].strip() for line in read_text("/proc/cpuinfo").splitlines() if line.startswith("model name")]
    mem_kib = [int(line.split()[1]) for line in read_text("/proc/meminfo").splitlines() if line.startswith("MemTotal")][0]
    return {
        "hostname": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
        "cpu_model": cpu[0] if cpu else None, "memory_gib": round(mem_kib / (1 << 20), 1),
        "libvirt": (command_output(["virsh", "-c", config.LIBVIRT_URI, "version", "--daemon"]) or "?").splitlines()[-1],
        "qemu": command_output(["qemu-system-x86_64", "--version"]),
        "hypervisor_python": command_output([HYPERVISOR_PYTHON, "-c", "import sys; print(sys.version.split()[0])"]),
        "ansible_core": command_output([os.path.join(VENV, "bin", "ansible"), "--version"]).splitlines()[0],
        "collection_commit": command_output(["git", "-C", REPO_ROOT, "rev-parse", "--short", "HEAD"]),
        "load_average": read_text("/proc/loadavg").split()[:3],
        "collection_dirty": bool(command_output(["git", "-C", REPO_ROOT, "status", "--porcelain", "--",
                                                 "plugins"])),
    }


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


class Virsh:
    """`virsh -q` on one libvirtd: the single lab's, or a lab hypervisor's entered with nsenter (no SSH session)."""

    def __init__(self, spec=None):
        self.spec = spec

    def argv(self, *args):
        if self.spec is None:
            return ["virsh", "-q", "-c", config.LIBVIRT_URI] + list(args)
        return hypervisors.virsh_argv(self.spec, *args)

    def __call__(self, *args, check=True):
        return subprocess.run(self.argv(*args), capture_output=True, text=True, check=check).stdout


virsh = Virsh()


def delete_volumes(containing, pool=config.POOL_NAME):
    """Delete the pool's volumes whose names contain ``containing`` (a benchmark's own)."""
    virsh("pool-refresh", pool)
    for line in virsh("vol-list", pool).splitlines():
        name = line.split()[0] if line.strip() else ""
        if containing in name:
            virsh("vol-delete", name, "--pool", pool)


def write_text(path, text):
    with open(path, "w") as handle:
        handle.write(text)
    return path


def update_yaml(path, **variables):
    """The YAML mapping in ``path`` updated with ``variables``; a None removes its key."""
    current = yaml.safe_load(read_text(path)) or {}
    current.update(variables)
    write_text(path, yaml.safe_dump({key: value for key, value in current.items() if value is not None}))


def lan_inventory(path, host, **variables):
    """inventories/lab copied to ``path`` in the layout B7, B8 and B9 were written for, ``host``'s host_vars updated
    with ``variables``; the path.

    Since issue 42 inventories/lab puts the demo on the client segment as an HA group. The layout before it: each
    hypervisor's proxies on its bridge br0 with DHCP addresses, no gateway, no HA group, the hypervisor's LAN the
    clients (and where verify.yml asks from), its LAN's and outside segment's origins the destinations.
    """
    shutil.copytree(LAB_INVENTORY, path)
    update_yaml(os.path.join(path, "group_vars", "hypervisors.yml"), egress_proxy_bridge=config.HV_BRIDGE,
                egress_proxy_ha_groups=None)
    for spec in config.hypervisor_specs(config.MAX_HYPERVISORS):
        host_vars = os.path.join(path, "host_vars", spec.name + ".yml")
        if os.path.exists(host_vars):
            instances = yaml.safe_load(read_text(host_vars)).get("egress_proxy_instances", [])
            update_yaml(host_vars, egress_proxy_bridge=None, egress_proxy_gateway=None,
                        egress_proxy_instances=[{"name": instance["name"]} for instance in instances],
                        egress_proxy_allowed_clients=[spec.lan_cidr],
                        egress_proxy_allowed_destinations=list(spec.origin_cidrs),
                        egress_proxy_verify_netns=spec.lan_netns,
                        egress_proxy_verify_url=spec.origin_url(spec.lan_address))
    update_yaml(os.path.join(path, "host_vars", host + ".yml"), **variables)
    return path


# Prefixed to the script of a measured /usr/bin/python3 process: it reads its own memory, VmRSS now and
# VmHWM the peak (KiB).
RSS_READER = r"""
def rss_kib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
"""

# Runs in a measured process on the hypervisor's Python, its argv[1] the collections path: a module's main() as
# AnsiballZ runs it there, with ansible's module_utils taken from this checkout's venv (the hypervisor has none).
# The bench sees the module as a user does (its arguments and its result), not the module_utils behind it.
RUN_MODULE = r"""
import contextlib, importlib, io, json, sys
sys.path.insert(0, sys.argv[1])
sys.path.append(%r)
from ansible.module_utils.testing import patch_module_args


def module_main(module):
    # Import it ahead of a measured run, so that its imports are not part of the run.
    return importlib.import_module("ansible_collections.egress_proxies.kvm.plugins.modules." + module).main


def run_module(module, args):
    # The module's result: the JSON it prints when it exits. A failed task raises.
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out):
        try:
            module_main(module)()
        except SystemExit:
            pass
    result = json.loads(out.getvalue())
    if result.get("failed"):
        raise RuntimeError("%%s failed: %%s" %% (module, result.get("msg")))
    return result
""" % next(iter(glob.glob(os.path.join(VENV, "lib", "python3*", "site-packages"))), "")


# Runs in a measured process ahead of RUN_MODULE's runs: count_libvirt_calls() wraps every public method of the
# libvirt-python classes a module calls through, so each call is recorded in libvirt_calls as (Class.method, the
# domain's name or None, seconds). The counts are libvirt's own calls, whatever the collection's code between.
COUNT_LIBVIRT = r"""
import inspect, time
import libvirt

# Answered by libvirt-python from the object it holds: no round trip to libvirtd.
CLIENT_SIDE = frozenset({"virDomain.name", "virStoragePool.name", "virStorageVol.name"})
libvirt_calls = []
_domain_name = libvirt.virDomain.name


def _counted(cls, method_name, method):
    label = "%s.%s" % (cls.__name__, method_name)

    def call(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            domain = _domain_name(self) if cls is libvirt.virDomain else None
            # list.append holds the GIL: the set's worker threads record safely.
            libvirt_calls.append((label, domain, time.perf_counter() - started))
    return call


def count_libvirt_calls():
    for cls in (libvirt.virConnect, libvirt.virDomain, libvirt.virStoragePool, libvirt.virStorageVol, libvirt.virStream):
        for method_name, method in list(vars(cls).items()):
            if not method_name.startswith("_") and inspect.isfunction(method):
                setattr(cls, method_name, _counted(cls, method_name, method))
"""


def agent_ipv4(on, domain, prefix):
    """The IPv4 under ``prefix`` that ``virsh domifaddr --source agent`` reports for ``domain`` (on a Virsh), or None."""
    out = on("domifaddr", domain, "--source", "agent", check=False)
    for line in out.splitlines():
        for field in line.split():
            if field.startswith(prefix):
                return field.split("/")[0]
    return None


def domain_running(on, domain):
    return on("domstate", domain, check=False).strip() == "running"


class BootWatch:
    """Polls a domain with virsh from a thread: when it first runs, when its agent first reports an address.

    Times are seconds after start(); the thread stops at stop() or once the address is seen.
    """

    def __init__(self, on, domain, prefix, interval=1.0):
        self.on, self.domain, self.prefix, self.interval = on, domain, prefix, interval
        self.started = None
        self.running_at = None
        self.address_at = None
        self.address = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self):
        self.started = time.monotonic()
        self._thread.start()
        return self

    def _poll(self):
        while not self._stop.is_set():
            if self.running_at is None and domain_running(self.on, self.domain):
                self.running_at = time.monotonic() - self.started
            if self.running_at is not None:
                address = agent_ipv4(self.on, self.domain, self.prefix)
                if address:
                    self.address, self.address_at = address, time.monotonic() - self.started
                    return
            self._stop.wait(self.interval)

    def wait(self, seconds):
        """Wait up to ``seconds`` (from start()) for the address; the address or None."""
        self._thread.join(max(0.0, self.started + seconds - time.monotonic()))
        return self.address

    def stop(self):
        self._stop.set()
        self._thread.join()
        return {"running_at": rounded(self.running_at), "address_at": rounded(self.address_at), "address": self.address}


def rounded(seconds):
    return None if seconds is None else round(seconds, 2)


def disk_source(on, domain):
    """The file of the domain's first disk (device disk, not its seed's cdrom)."""
    source = ElementTree.fromstring(on("dumpxml", domain)).find("./devices/disk[@device='disk']/source")
    if source.get("file"):
        return source.get("file")
    return on("vol-path", "--pool", source.get("pool"), source.get("volume")).strip()


def fresh_first_boot(on, domain):
    """Stop ``domain`` and give it a new, empty overlay on the same backing file: its next start is a first boot.

    The overlay's path is the same in the lab hypervisors' mount namespaces as here, so qemu-img runs here.
    """
    if domain_running(on, domain):
        on("destroy", domain)
    path = disk_source(on, domain)
    info = json.loads(subprocess.run(["qemu-img", "info", "-U", "--output=json", path], capture_output=True,
                                     text=True, check=True).stdout)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", info["backing-filename-format"], "-b",
                    info["backing-filename"], path, str(info["virtual-size"])], check=True)


def virsh_boot_to_address(on, domain, prefix, timeout, interval=1.0):
    """Seconds from `virsh start` to the agent's address, polled with `virsh domifaddr --source agent`; None at timeout."""
    started = time.monotonic()
    on("start", domain)
    while time.monotonic() - started < timeout:
        if agent_ipv4(on, domain, prefix):
            return round(time.monotonic() - started, 2)
        time.sleep(interval)
    return None
