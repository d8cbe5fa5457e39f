"""Faults of a fleet converge over SSH (kvm_proxy_set on lab-hv1 and lab-hv2, non-booting proxies).

- Two ansible-playbook runs of the same sets at once.
- ansible-playbook SIGKILLed (with its SSH sessions) while the modules run on the hypervisors.
- A hypervisor whose libvirtd stops answering in the middle of a run with garbage collection on.
- The module SIGKILLed after it made a proxy's overlay and before it defined the domain (the seed's moment).
Each time the next converge gives exactly the desired sets, and nothing the sets do not own is lost.
test_fleet.py covers a hypervisor with sshd stopped and one frozen before the run.
"""

import contextlib
import os
import signal
import time

import pytest

from tests.integration.faults import CONVERGE_BOUND, KILLED_RUN_BOUND, Phases, ProxySets, frozen_libvirtd, module_pids, promptly

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
        phase = Phases()
        sets.clean()
        phase("cleanup done")


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
    runners = [proxy_sets.in_background(sets), proxy_sets.in_background(sets)]
    for runner in runners:
        run = runner.join(CONVERGE_BOUND + 30, "beside a second run of the same sets")
        assert run, runner.error()
        # Each run succeeds, or fails with a message: never a traceback, never a failure without words.
        assert "Traceback" not in run.stdout + run.stderr, run
        assert all(message for _host, _task, message in run.failures()), run
        print("concurrent run rc=%d: %s" % (run.rc, run.failures()))
    run = proxy_sets.converge(sets)
    assert run.rc == 0, run
    _assert_exactly(proxy_sets, sets)


def _wait_for_a_module(spec, runner, bound=120):
    """Wait until a module runs on the hypervisor (the run still going, within ``bound`` s)."""
    deadline = time.monotonic() + bound
    while not module_pids(spec):
        assert runner.is_alive(), "the run ended before its module started on %s" % spec.name
        assert time.monotonic() < deadline, "no module started on %s within %d s of the run" % (spec.name, bound)
        time.sleep(0.05)


def test_the_controller_killed_mid_converge_leaves_a_fleet_the_next_run_converges(proxy_sets):
    phase = Phases()
    sets = _sets(proxy_sets, 2)
    runner = proxy_sets.in_background(sets)
    spec = proxy_sets.specs[sorted(proxy_sets.specs)[0]]
    _wait_for_a_module(spec, runner)
    phase("module running on %s" % spec.name)
    # The controller: every ansible-playbook process of this run (forks included).
    listed = proxy_sets.kill_controller()
    phase("killed controller pids %s" % listed)
    runner.join(KILLED_RUN_BOUND, "of its SIGKILL")  # its output is cut off: the run is not read, only what it left
    phase("runner joined")
    # A module whose controller died may still finish on the hypervisor; the next run starts after it.
    deadline = time.monotonic() + 300
    while any(module_pids(each) for each in proxy_sets.specs.values()):
        assert time.monotonic() < deadline, "a module outlived its controller by 300 s"
        time.sleep(0.2)
    phase("no module left on the hypervisors")
    run = proxy_sets.converge(sets)
    phase("next converge done (%.1f s)" % run.seconds)
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
    print("converge beside frozen %s: %.1f s" % (frozen_host, run.seconds))
    assert run.rc != 0, run
    failures = run.failures(frozen_host)
    assert failures and all("qemu:///system" in str(message) or frozen_host in str(message)
                            for _host, _task, message in failures), failures
    assert not run.failures(sorted(proxy_sets.specs)[0]), run
    # Nothing was removed on the frozen hypervisor; the other one converged.
    assert sorted(proxy_sets.domains(frozen)) == sorted(entry["name"] for entry in first[frozen_host])
    run = proxy_sets.converge(smaller)
    assert run.rc == 0, run
    _assert_exactly(proxy_sets, smaller)


@pytest.mark.parametrize("volume", ["overlay", "seed"])
def test_the_module_killed_after_the_overlay_and_before_define_leaves_what_the_next_run_converges(proxy_sets, volume):
    """The window of the reference's truncated-seed lesson: the overlay made, the seed being written, no domain yet.
    When the overlay (or the seed volume) appears in the pool's directory libvirtd is frozen at once, so the module
    is held inside the window while it is SIGKILLed; the next converge must make the proxy whole."""
    phase = Phases()
    host = sorted(proxy_sets.specs)[0]
    spec = proxy_sets.specs[host]
    name = PREFIX + "window"
    sets = {host: [{"name": name}]}
    trigger = os.path.join(spec.pool_dir, name + (".qcow2" if volume == "overlay" else "-seed.iso"))
    runner = proxy_sets.in_background(sets)
    deadline = time.monotonic() + 120
    # promptly() ends first: libvirtd is thawed (and asked whether it answers) at normal priority.
    with contextlib.ExitStack() as frozen, promptly():
        running = []
        while not os.path.exists(trigger):
            assert runner.is_alive(), "the run ended before the %s appeared" % volume
            assert time.monotonic() < deadline, "the %s did not appear within 120 s of the run" % volume
            # The module's pids known before the window opens: on the machine's other CPU it goes on while this
            # thread looks for them, and from the seed volume to the define takes it a few milliseconds.
            running = running or module_pids(spec)
            time.sleep(0.002)
        for pid in running:
            os.kill(pid, signal.SIGSTOP)
        frozen.enter_context(frozen_libvirtd(spec))
        killed = module_pids(spec)
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
    phase("%s seen; libvirtd frozen, module %s killed, thawed" % (volume, killed))
    assert killed, "no module ran on %s when the %s appeared" % (host, volume)
    runner.join(KILLED_RUN_BOUND, "of its module's SIGKILL")
    phase("runner joined")
    assert name not in proxy_sets.domains(spec), "the domain was defined before the kill: the window was missed"
    print("left %s" % proxy_sets.own_volumes(spec))
    run = proxy_sets.converge(sets)
    phase("next converge done (%.1f s)" % run.seconds)
    assert run.rc == 0, run
    _assert_exactly(proxy_sets, dict({other: [] for other in proxy_sets.specs}, **sets))
