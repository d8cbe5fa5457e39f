"""A remote hypervisor that stops answering fails the task instead of hanging it.

The seam turns on libvirt keepalive for remote URIs. Here the SSH session that
carries a qemu+ssh connection is frozen (SIGSTOP) after the connection is up,
as a hypervisor that hangs or drops off the network would look; the next call
must come back with a typed error on its own.
"""

import os
import signal
import threading

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import (
    KEEPALIVE_COUNT,
    KEEPALIVE_INTERVAL,
    Hypervisor,
)

# Far above keepalive's own bound (interval * (count + 1)); only there so a
# regression fails this test instead of hanging the whole run.
GUARD_SECONDS = 10 * KEEPALIVE_INTERVAL * (KEEPALIVE_COUNT + 1)


def _children():
    """{pid: parent pid} of every process."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as handle:
                    stat = handle.read()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def _descendants(root):
    parents = _children()
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                found.append(pid)
                frontier.append(pid)
    return found


def test_a_frozen_remote_hypervisor_fails_the_call_instead_of_hanging(lab, sshd):
    with open(os.path.join(os.path.dirname(sshd.key_path), "sshd.pid")) as handle:
        listener = int(handle.read())
    hypervisor = Hypervisor.open(sshd.uri)
    frozen = []
    try:
        assert hypervisor.hostname()
        # The listener keeps accepting; the session processes serving this connection stop.
        frozen = _descendants(listener)
        assert frozen, "no sshd session process serves the qemu+ssh connection"
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)

        outcome = {}

        def call():
            try:
                hypervisor.list_domains()
                outcome["result"] = "answered"
            except KvmError as error:
                outcome["error"] = error

        worker = threading.Thread(target=call, daemon=True)
        worker.start()
        worker.join(GUARD_SECONDS)
        assert not worker.is_alive(), "the call to a frozen hypervisor still hangs after %d s" % GUARD_SECONDS
        assert "error" in outcome, outcome
        print("frozen hypervisor reported: %s" % outcome["error"].message)
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        hypervisor.close()
