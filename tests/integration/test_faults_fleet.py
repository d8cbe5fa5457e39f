"""Faults of a fleet converge over SSH (kvm_proxy_set on lab-hv1 and lab-hv2, non-booting proxies).

- Two ansible-playbook runs of the same sets at once.
- ansible-playbook SIGKILLed (with its SSH sessions) while the modules run on the hypervisors.
- A hypervisor whose libvirtd stops answering in the middle of a run with garbage collection on.
- The module SIGKILLed after it made a proxy's overlay and before it defined the domain (the seed's moment).
Each time the next converge gives exactly the desired sets, and nothing the sets do not own is lost.
test_fleet.py covers a hypervisor with sshd stopped and one frozen before the run.
"""

import os
import signal
import threading
import time

import pytest

from tests.integration.faults import ProxySets, frozen_libvirtd, module_pids
from tests.lab import hypervisors, namespaces

pytest_plugins = ["tests.integration.fleet_fixtures"]

PREFIX = "eptest-ffleet-"
IMAGE = "eptest-ffleet-tiny"


@pytest.fixture
def proxy_sets(hv_fleet):
    sets = ProxySets(hv_fleet, PREFIX, IMAGE)
    sets.clean()
    try:
        yield sets
    finally:
        sets.clean()


def _sets(proxy_sets, per_host):
    return {host: [{"name": "%s%s-%d" % (PREFIX, host[-3:], index)} for index in range(per_host)]
            for host in proxy_sets.specs}


def _assert_exactly(proxy_sets, sets, state="running"):
    for host, spec in proxy_sets.specs.items():
        names = sorted(entry["name"] for entry in sets[host])
        assert proxy_sets.domains(spec) == dict.fromkeys(names, state), host
        assert proxy_sets.own_volumes(spec) == sorted(name + suffix for name in names for suffix in ("-seed.iso", ".qcow2"))


def test_two_runs_of_the_same_sets_at_once_end_converged(proxy_sets):
    sets = _sets(proxy_sets, 2)
    outcomes = [{}, {}]
    runners = [threading.Thread(target=proxy_sets.converge_into, args=(outcome, sets)) for outcome in outcomes]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join()
    for outcome in outcomes:
        run = outcome["run"]
        # Each run succeeds, or fails with a message: never a traceback, never a failure without words.
        assert "Traceback" not in run.stdout + run.stderr, run
        assert all(message for _host, _task, message in run.failures()), run
        print("concurrent run rc=%d: %s" % (run.rc, run.failures()))
    run = proxy_sets.converge(sets)
    assert run.rc == 0, run
    _assert_exactly(proxy_sets, sets)


def _converge_ignoring_cut_output(proxy_sets, sets):
    try:
        proxy_sets.converge(sets)
    except ValueError:
        pass  # the killed run's JSON output ends mid-document


def test_the_controller_killed_mid_converge_leaves_a_fleet_the_next_run_converges(proxy_sets):
    sets = _sets(proxy_sets, 2)
    runner = threading.Thread(target=_converge_ignoring_cut_output, args=(proxy_sets, sets))
    runner.start()
    spec = proxy_sets.specs[sorted(proxy_sets.specs)[0]]
    while not module_pids(spec):
        assert runner.is_alive(), "the run ended before its module started"
        time.sleep(0.05)
    # The controller: every ansible-playbook process of this run (forks included), found by its playbook path.
    listed = [int(pid) for pid in os.listdir("/proc") if pid.isdigit()
              and proxy_sets.playbook in namespaces.cmdline_text(int(pid))]
    for pid in listed:
        os.kill(pid, signal.SIGKILL)
    runner.join()  # its output is cut off: the run is not read, only what it left
    print("killed controller pids %s" % listed)
    # A module whose controller died may still finish on the hypervisor; the next run starts after it.
    deadline = time.monotonic() + 300
    while any(module_pids(each) for each in proxy_sets.specs.values()):
        assert time.monotonic() < deadline, "a module outlived its controller by 300 s"
        time.sleep(0.2)
    run = proxy_sets.converge(sets)
    assert run.rc == 0, run
    _assert_exactly(proxy_sets, sets)


def test_a_hypervisor_frozen_mid_run_with_gc_on_loses_nothing_and_converges_after(proxy_sets):
    first = _sets(proxy_sets, 2)
    run = proxy_sets.converge(first)
    assert run.rc == 0, run
    frozen_host = sorted(proxy_sets.specs)[1]
    frozen = proxy_sets.specs[frozen_host]
    # The next set drops one proxy on each hypervisor: GC would remove it.
    smaller = {host: entries[:1] for host, entries in first.items()}
    with frozen_libvirtd(frozen):
        run = proxy_sets.converge(smaller)
    assert run.rc != 0, run
    failures = run.failures(frozen_host)
    assert failures and all("qemu:///system" in str(message) or frozen_host in str(message)
                            for _host, _task, message in failures), failures
    assert not run.failures(sorted(proxy_sets.specs)[0]), run
    # Nothing was removed on the frozen hypervisor; the other one converged.
    assert sorted(proxy_sets.domains(frozen)) == sorted(entry["name"] for entry in first[frozen_host])
    assert hypervisors.virsh(frozen, "version").returncode == 0
    run = proxy_sets.converge(smaller)
    assert run.rc == 0, run
    _assert_exactly(proxy_sets, smaller)


@pytest.mark.parametrize("volume", ["overlay", "seed"])
def test_the_module_killed_after_the_overlay_and_before_define_leaves_what_the_next_run_converges(proxy_sets, volume):
    """The window of the reference's truncated-seed lesson: the overlay made, the seed being written, no domain yet.
    When the overlay (or the seed volume) appears in the pool's directory libvirtd is frozen at once, so the module
    is held inside the window while it is SIGKILLed; the next converge must make the proxy whole."""
    host = sorted(proxy_sets.specs)[0]
    spec = proxy_sets.specs[host]
    name = PREFIX + "window"
    sets = {host: [{"name": name}]}
    trigger = os.path.join(spec.pool_dir, name + (".qcow2" if volume == "overlay" else "-seed.iso"))
    runner = threading.Thread(target=proxy_sets.converge_into, args=({}, sets))
    runner.start()
    deadline = time.monotonic() + 120
    while not os.path.exists(trigger):
        assert runner.is_alive() and time.monotonic() < deadline, "the run ended, or took 120 s, before the %s" % volume
        time.sleep(0.002)
    with frozen_libvirtd(spec):
        killed = module_pids(spec)
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
    runner.join()
    assert killed, "no module ran on %s when the overlay appeared" % host
    assert name not in proxy_sets.domains(spec), "the domain was defined before the kill: the window was missed"
    print("killed %s; left %s" % (killed, proxy_sets.own_volumes(spec)))
    run = proxy_sets.converge(sets)
    assert run.rc == 0, run
    _assert_exactly(proxy_sets, dict({other: [] for other in proxy_sets.specs}, **sets))
