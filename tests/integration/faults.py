"""Helpers for the fault tests: a lab hypervisor's libvirtd frozen or restarted, and always given back.

The tests that use them run on lab-hv1/lab-hv2 (tests/lab/hypervisors.py) so the single lab's
libvirtd, which other integration tests share, is never touched.

Every wait here has a bound of its own, far above what the step takes on a machine busy with the other
lane's TCG boots, and fails with what did not happen: a fault test that hangs would otherwise hold the
whole test command until the Fleet's 1200 s timeout.
"""

import contextlib
import os
import signal
import subprocess
import threading
import time

import yaml

from tests.lab import config, hypervisors, namespaces

# One ansible-playbook run of a few non-booting proxies on two hypervisors: 4-15 s here, loaded or not.
CONVERGE_BOUND = 300
# One virsh call on a hypervisor's libvirtd that is not frozen.
VIRSH_BOUND = 60
# ansible-playbook ending after its module's SIGKILL, or after its own: the module's failure is read at once.
KILLED_RUN_BOUND = 60


def virsh(spec, *args, check=True):
    """virsh on the hypervisor's own libvirtd (as hypervisors.virsh), within VIRSH_BOUND."""
    try:
        completed = subprocess.run(hypervisors.virsh_argv(spec, *args), capture_output=True, text=True,
                                   timeout=VIRSH_BOUND, check=False)
    except subprocess.TimeoutExpired:
        raise AssertionError("virsh %s on %s did not answer within %d s" % (" ".join(args), spec.name, VIRSH_BOUND)) from None
    assert completed.returncode == 0 or not check, "virsh %s on %s failed: %s" % (
        " ".join(args), spec.name, completed.stderr.strip())
    return completed


@contextlib.contextmanager
def frozen_libvirtd(spec):
    """The hypervisor's libvirtd stopped with SIGSTOP for the block: it accepts connections, never answers.

    hypervisors.freeze returns once the daemon is stopped, not just signalled (thaw resumes only a stopped
    one). After SIGCONT it answers again (virsh version) before the test goes on."""
    hypervisors.freeze(spec)
    try:
        yield
    finally:
        hypervisors.thaw(spec)
        virsh(spec, "version")


@contextlib.contextmanager
def promptly():
    """The calling thread scheduled SCHED_FIFO for the block, so a poll in it reacts within its interval.

    Beside the other lane's TCG boots a normal thread wakes up late, later than the module takes from
    creating the seed volume to defining the domain; a real-time one preempts them at once. Processes it
    starts run as normal ones (SCHED_RESET_ON_FORK)."""
    os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(10))
    try:
        yield
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


class Phases:
    """One timestamped line per phase of a fault test, for pytest -s and for the output a failure shows."""

    def __init__(self):
        self.started = time.monotonic()

    def __call__(self, what):
        print("%s +%.1f s: %s" % (time.strftime("%H:%M:%S"), time.monotonic() - self.started, what), flush=True)


def kill_libvirtd(spec):
    """SIGKILL the hypervisor's libvirtd, as a crash would; its pid."""
    pid = hypervisors.daemon_pid(spec, "libvirtd")
    assert pid, "libvirtd of %s is not running" % spec.name
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while hypervisors.daemon_pid(spec, "libvirtd") == pid:
        assert time.monotonic() < deadline, "libvirtd %d of %s outlived SIGKILL" % (pid, spec.name)
        time.sleep(0.1)
    return pid


def restore_libvirtd(spec):
    """The hypervisor's daemons running and answering again, its pool active (`scripts/lab up` for it alone)."""
    hypervisors.thaw(spec)
    return hypervisors.up([spec])


def module_pids(spec):
    """The pids of the modules Ansible runs on the hypervisor now (its /usr/bin/python3 processes)."""
    return [pid for pid in namespaces.netns_pids(spec.netns)
            if namespaces.cmdline_text(pid).startswith("/usr/bin/python3")]


def kill_module_when_it_runs(spec, delay, timeout=120):
    """Wait for a module on the hypervisor, let it run ``delay`` seconds, SIGKILL it; its pid, or None if it ended first."""
    deadline = time.monotonic() + timeout
    while not module_pids(spec):
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    time.sleep(delay)
    for pid in module_pids(spec):
        os.kill(pid, signal.SIGKILL)
        return pid
    return None


class ProxySets:
    """kvm_proxy_set on lab-hv1 and lab-hv2 for one test: its playbook, options, and what virsh shows.

    Every domain and volume of the test starts with ``prefix``, its base image with ``base-<image>``.
    The playbook converges each hypervisor's list ``sets[host]`` with the options ``options``.
    """

    PLAY = [{
        "name": "Converge the test's sets",
        "hosts": "hypervisors",
        "gather_facts": False,
        "tasks": [{
            "name": "Converge this hypervisor's set",
            "egress_proxies.kvm.kvm_proxy_set": "{{ options | combine({'proxies': sets[inventory_hostname]}) }}",
        }],
    }]

    def __init__(self, fleet, prefix, image):
        self.fleet = fleet
        self.prefix = prefix
        self.image = image
        self.specs = {spec.name: spec for spec in fleet.specs[:2]}
        self.inventory = fleet.inventory(group_vars={"proxy_sets_test": True})
        self.playbook = str(fleet.tmp_path / "proxy_sets.yml")
        with open(self.playbook, "w") as handle:
            yaml.safe_dump(self.PLAY, handle)

    def options(self, **changes):
        mirror = "http://127.0.0.1:8642/"  # each hypervisor's own
        options = {
            "uri": config.LIBVIRT_URI, "pool": config.HV_POOL_NAME, "bridge": config.HV_BRIDGE, "uid": self.prefix + "owner",
            "image": {"name": self.image, "url": mirror + config.TINY_QCOW2,
                      "checksum": "sha256:" + mirror + config.SHA256SUMS},
            "virt_type": config.VIRT_TYPE, "cpu_mode": config.CPU_MODE, "memory_mib": 128, "disk_size_gb": 1,
            "vendor_data": "", "wait_for_ip": False, "gc": True, "gc_grace_period": 0,
            "shutdown_timeout": config.TINY_SHUTDOWN_TIMEOUT,
        }
        options.update(changes)
        return options

    def converge(self, sets, **changes):
        """One ansible-playbook run converging ``sets`` ({host: [proxy entries]}) -> FleetRun, within CONVERGE_BOUND."""
        full = {host: list(sets.get(host, ())) for host in self.specs}
        try:
            return self.fleet.playbook(self.playbook, self.inventory, {"options": self.options(**changes), "sets": full},
                                       timeout=CONVERGE_BOUND)
        except subprocess.TimeoutExpired:
            self.kill_controller()
            raise AssertionError("ansible-playbook converging %s did not end within %d s" % (full, CONVERGE_BOUND)) from None

    def converge_into(self, outcome, sets, **changes):
        """converge() for a thread: the FleetRun lands in outcome["run"]."""
        outcome["run"] = self.converge(sets, **changes)

    def in_background(self, sets, **changes):
        """converge() started in a thread, for a test that acts while it runs -> BackgroundConverge."""
        return BackgroundConverge(self, sets, changes)

    def controller_pids(self):
        """Every ansible-playbook process of this test's runs (forks included), found by its playbook path."""
        return [int(pid) for pid in os.listdir("/proc") if pid.isdigit()
                and self.playbook in namespaces.cmdline_text(int(pid))]

    def kill_controller(self):
        """SIGKILL every ansible-playbook process of this test's runs; their pids."""
        pids = self.controller_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def domains(self, spec):
        """{name: state} of this test's domains on the hypervisor."""
        states = {}
        for line in virsh(spec, "list", "--all").stdout.splitlines():
            fields = line.split(None, 2)
            if len(fields) == 3 and fields[1].startswith(self.prefix):
                states[fields[1]] = fields[2].strip()
        return states

    @staticmethod
    def volumes(spec):
        """{volume name: path} of the hypervisor's pool, refreshed."""
        virsh(spec, "pool-refresh", config.HV_POOL_NAME)
        lines = virsh(spec, "vol-list", config.HV_POOL_NAME).stdout.splitlines()
        return dict(line.split(None, 1) for line in lines if line.strip())

    def own_volumes(self, spec):
        return sorted(volume for volume in self.volumes(spec) if volume.startswith(self.prefix))

    def clean(self):
        """None of this test's domains or volumes on either hypervisor; libvirtd running and answering."""
        for spec in self.specs.values():
            restore_libvirtd(spec)
            for name in self.domains(spec):
                virsh(spec, "destroy", name, check=False)
                virsh(spec, "undefine", name, "--managed-save", "--snapshots-metadata", "--nvram")
            for volume in self.volumes(spec):
                if volume.startswith((self.prefix, "base-" + self.image)):
                    virsh(spec, "vol-delete", volume, "--pool", config.HV_POOL_NAME)


class BackgroundConverge:
    """ProxySets.converge in a daemon thread; joined within a bound, its FleetRun or the error it raised."""

    def __init__(self, proxy_sets, sets, changes):
        self._proxy_sets = proxy_sets
        self._outcome = {}
        self._thread = threading.Thread(target=self._converge, args=(proxy_sets, sets, changes), daemon=True)
        self._thread.start()

    def _converge(self, proxy_sets, sets, changes):
        try:
            self._outcome["run"] = proxy_sets.converge(sets, **changes)
        except (AssertionError, ValueError) as error:  # ValueError: a killed run's JSON ends mid-document
            self._outcome["error"] = error

    def is_alive(self):
        return self._thread.is_alive()

    def join(self, bound, after):
        """The FleetRun (None when the run raised); asserts that it ended within ``bound`` s ``after`` what."""
        self._thread.join(bound)
        if self._thread.is_alive():
            self._proxy_sets.kill_controller()  # so the test's cleanup does not race the run
            raise AssertionError("ansible-playbook did not end within %d s %s" % (bound, after))
        return self._outcome.get("run")

    def error(self):
        return self._outcome.get("error")
