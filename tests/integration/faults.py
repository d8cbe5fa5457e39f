"""Helpers for the fault tests: a lab hypervisor's libvirtd frozen or restarted, and always given back.

The tests that use them run on lab-hv1/lab-hv2 (tests/lab/hypervisors.py) so the single lab's
libvirtd, which other integration tests share, is never touched.
"""

import contextlib
import os
import signal
import time

from tests.lab import hypervisors, namespaces


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
