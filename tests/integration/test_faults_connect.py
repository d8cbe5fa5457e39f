"""A hypervisor whose libvirtd stops answering fails the call in bounded time, local URI or remote.

The seam bounds the open (a daemon frozen before the connection is made) and turns keepalive on for
every URI (a daemon frozen after it). test_remote_keepalive.py covers a frozen SSH session after the
open; here libvirtd itself is frozen on lab-hv1, reached over SSH and, from inside the hypervisor, as
qemu:///system.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import TransientError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import (
    KEEPALIVE_COUNT,
    KEEPALIVE_INTERVAL,
    Hypervisor,
)
from tests.integration.faults import frozen_libvirtd
from tests.lab import hypervisors, namespaces

pytest_plugins = ["tests.integration.fleet_fixtures"]

COLLECTIONS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                               "build", "collections")
# A short bound for the open, so the test does not wait the default OPEN_TIMEOUT.
OPEN_SECONDS = 5
# Far above keepalive's bound: only there so a regression fails instead of hanging the run.
GUARD_SECONDS = 10 * KEEPALIVE_INTERVAL * (KEEPALIVE_COUNT + 1)

# Runs on the hypervisor (its namespaces, its /usr/bin/python3) against its own qemu:///system. It says
# "open" once connected, then waits for a line on stdin (the test freezes libvirtd meanwhile) and
# makes one call.
LOCAL_CALL = textwrap.dedent("""
    import sys
    from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError
    from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import Hypervisor
    with Hypervisor.open("qemu:///system") as hypervisor:
        print("open", flush=True)
        sys.stdin.readline()
        try:
            hypervisor.list_domains()
            print("answered", flush=True)
        except KvmError as error:
            print("%s: %s" % (error.kind, error.message), flush=True)
""")

LOCAL_OPEN = textwrap.dedent("""
    from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError
    from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import Hypervisor
    try:
        Hypervisor.open("qemu:///system", timeout=%d).close()
        print("opened")
    except KvmError as error:
        print("%%s: %%s" %% (error.kind, error.message))
""" % OPEN_SECONDS)


def _on_hypervisor(spec, code, **popen):
    argv = namespaces.nsenter(hypervisors.holder(spec), ["/usr/bin/python3", "-c", code])
    return subprocess.Popen(argv, env=dict(os.environ, PYTHONPATH=COLLECTIONS_DIR), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def test_remote_open_of_a_frozen_libvirtd_fails_within_the_bound(hv_fleet):
    with frozen_libvirtd(hv_fleet.hv1), pytest.raises(TransientError) as caught:
        Hypervisor.open(hv_fleet.hv1.uri, timeout=OPEN_SECONDS)
    assert hv_fleet.hv1.uri in caught.value.message
    assert "check libvirtd on that host" in caught.value.message
    # Thawed, the same hypervisor answers again: nothing was left wedged.
    with Hypervisor.open(hv_fleet.hv1.uri) as hypervisor:
        assert hypervisor.hostname() == hv_fleet.hv1.name


def test_local_open_of_a_frozen_libvirtd_fails_within_the_bound(hv_fleet):
    with frozen_libvirtd(hv_fleet.hv1):
        process = _on_hypervisor(hv_fleet.hv1, LOCAL_OPEN)
        out, err = process.communicate(timeout=GUARD_SECONDS)
    assert out.startswith("transient: connecting to hypervisor qemu:///system: no answer within"), (out, err)


def test_local_libvirtd_frozen_after_the_open_fails_the_call_through_keepalive(hv_fleet):
    process = _on_hypervisor(hv_fleet.hv1, LOCAL_CALL, stdin=subprocess.PIPE)
    try:
        assert process.stdout.readline().strip() == "open", process.stderr.read()
        with frozen_libvirtd(hv_fleet.hv1):
            process.stdin.write("go\n")
            process.stdin.flush()
            out, err = process.communicate(timeout=GUARD_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert out.startswith("transient: listing domains:"), (out, err)
    print("frozen local libvirtd reported: %s" % out.strip(), file=sys.stderr)
    assert hypervisors.virsh(hv_fleet.hv1, "version").returncode == 0
