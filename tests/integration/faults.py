"""Helpers for the fault tests: a lab hypervisor's libvirtd frozen or restarted, and always given back.

The tests that use them run on lab-hv1/lab-hv2 (tests/lab/hypervisors.py) so the single lab's
libvirtd, which other integration tests share, is never touched.
"""

import contextlib
import os
import signal
import time

import yaml

from tests.lab import config, hypervisors, namespaces


@contextlib.contextmanager
def frozen_libvirtd(spec):
    """The hypervisor's libvirtd stopped with SIGSTOP for the block: it accepts connections, never answers."""
    hypervisors.freeze(spec)
    try:
        yield
    finally:
        hypervisors.thaw(spec)


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
        }
        options.update(changes)
        return options

    def converge(self, sets, **changes):
        """One ansible-playbook run converging ``sets`` ({host: [proxy entries]}) -> FleetRun."""
        full = {host: list(sets.get(host, ())) for host in self.specs}
        return self.fleet.playbook(self.playbook, self.inventory, {"options": self.options(**changes), "sets": full})

    def converge_into(self, outcome, sets, **changes):
        """converge() for a thread: the FleetRun lands in outcome["run"]."""
        outcome["run"] = self.converge(sets, **changes)

    def domains(self, spec):
        """{name: state} of this test's domains on the hypervisor."""
        states = {}
        for line in hypervisors.virsh(spec, "list", "--all").stdout.splitlines():
            fields = line.split(None, 2)
            if len(fields) == 3 and fields[1].startswith(self.prefix):
                states[fields[1]] = fields[2].strip()
        return states

    @staticmethod
    def volumes(spec):
        """{volume name: path} of the hypervisor's pool, refreshed."""
        hypervisors.virsh(spec, "pool-refresh", config.HV_POOL_NAME)
        lines = hypervisors.virsh(spec, "vol-list", config.HV_POOL_NAME).stdout.splitlines()
        return dict(line.split(None, 1) for line in lines if line.strip())

    def own_volumes(self, spec):
        return sorted(volume for volume in self.volumes(spec) if volume.startswith(self.prefix))

    def clean(self):
        """None of this test's domains or volumes on either hypervisor; libvirtd running and answering."""
        for spec in self.specs.values():
            restore_libvirtd(spec)
            for name in self.domains(spec):
                hypervisors.virsh(spec, "destroy", name, check=False)
                hypervisors.virsh(spec, "undefine", name, "--managed-save", "--snapshots-metadata", "--nvram")
            for volume in self.volumes(spec):
                if volume.startswith((self.prefix, "base-" + self.image)):
                    hypervisors.virsh(spec, "vol-delete", volume, "--pool", config.HV_POOL_NAME)
