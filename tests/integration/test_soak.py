"""A seeded random walk over desired sets on lab-hv1 and lab-hv2, converged with kvm_proxy_set.

Each step changes the desired set (add, remove, change spec, move between hypervisors, stop, start),
converges both hypervisors in one ansible-playbook run, then checks with virsh on each hypervisor:
exactly the desired proxies exist in the desired state, each with its own overlay and seed; no
overlay or seed without its proxy; the unmanaged domain and the other owner's proxy planted at the
start are untouched; every base image an overlay backs onto is there. At two random early steps a
fault is injected during the converge, the module SIGKILLed at one and libvirtd killed and restarted
at the other; that run may fail, and the next converge of the same set must restore every invariant.

Bounded by EGRESS_SOAK_STEPS (default 12) and EGRESS_SOAK_SECONDS (default 150); the seed is printed,
and EGRESS_SOAK_SEED replays a walk.
"""

import os
import random
import threading
import time

import pytest
from lxml import etree

from tests.integration.faults import ProxySets, kill_libvirtd, kill_module_when_it_runs, restore_libvirtd
from tests.lab import config, hypervisors

pytest_plugins = ["tests.integration.fleet_fixtures"]

PREFIX = "eptest-soak-"
NAMES = tuple(PREFIX + letter for letter in "abcde")
UNMANAGED = PREFIX + "unmanaged"
FOREIGN = PREFIX + "foreign"
OTHER_OWNER = "eptest-soak-other"
IMAGE = "eptest-soak-tiny"
STEPS = int(os.environ.get("EGRESS_SOAK_STEPS", "12"))
SECONDS = float(os.environ.get("EGRESS_SOAK_SECONDS", "150"))

UNMANAGED_XML = """<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>
<os><type arch='x86_64'>hvm</type></os></domain>""" % UNMANAGED


def _step(rng, desired, hosts):
    """One random change of ``desired`` ({name: {host, vcpus, state}}); what it was, in words."""
    absent = [name for name in NAMES if name not in desired]
    running = sorted(name for name, entry in desired.items() if entry["state"] == "present")
    stopped = sorted(name for name, entry in desired.items() if entry["state"] == "stopped")
    candidates = {"add": absent, "remove": sorted(desired), "change spec": sorted(desired), "move": sorted(desired),
                  "stop": running, "start": stopped}
    # Adding weighs more while the set is small, so the walk reaches sets of several proxies.
    weights = {"add": 3 if len(desired) < 3 else 1}
    moves = [move for move, names in sorted(candidates.items()) for _copy in range(weights.get(move, 1)) if names]
    move = rng.choice(moves)
    name = rng.choice(candidates[move])
    if move == "add":
        desired[name] = {"host": rng.choice(hosts), "vcpus": 1, "state": "present"}
        return "add %s on %s" % (name, desired[name]["host"])
    entry = desired[name]
    if move == "remove":
        del desired[name]
    elif move == "change spec":
        entry["vcpus"] = 3 - entry["vcpus"]
    elif move == "move":
        entry["host"] = [host for host in hosts if host != entry["host"]][0]
    else:
        entry["state"] = "stopped" if move == "stop" else "present"
    return "%s %s" % (move, name)


def _sets(desired, hosts):
    return {host: [{"name": name, "vcpus": entry["vcpus"], "state": entry["state"]}
                   for name, entry in sorted(desired.items()) if entry["host"] == host] for host in hosts}


def _check(soak, desired, planted, context):
    for spec in soak.specs.values():
        wanted = {name: entry for name, entry in desired.items() if entry["host"] == spec.name}
        domains = soak.domains(spec)
        expected = {name: ("running" if entry["state"] == "present" else "shut off") for name, entry in wanted.items()}
        expected.update({name: state for name, (host, state, _xml) in planted.items() if host == spec.name})
        assert domains == expected, "%s: %s holds %s, wanted %s" % (context, spec.name, domains, expected)
        for name, (host, _state, xml) in planted.items():
            if host == spec.name:
                assert hypervisors.virsh(spec, "dumpxml", "--inactive", name).stdout == xml, "%s: %s was changed" % (context, name)
        volumes = soak.volumes(spec)
        ours = {volume for volume in volumes if volume.startswith(PREFIX)}
        own = {name + suffix for name in wanted for suffix in (".qcow2", "-seed.iso")}
        foreign = {FOREIGN + suffix for suffix in (".qcow2", "-seed.iso")} if planted[FOREIGN][0] == spec.name else set()
        assert ours == own | foreign, "%s: %s has volumes %s, wanted %s" % (context, spec.name, ours, own | foreign)
        paths = set(volumes.values())
        for overlay in sorted(own | foreign):
            if overlay.endswith(".qcow2"):
                xml = hypervisors.virsh(spec, "vol-dumpxml", overlay, "--pool", config.HV_POOL_NAME).stdout
                path = etree.fromstring(xml.encode()).findtext("backingStore/path")
                assert path in paths, "%s: the base %s of %s on %s is gone" % (context, path, overlay, spec.name)


@pytest.fixture
def soak(hv_fleet):
    sets = ProxySets(hv_fleet, PREFIX, IMAGE)
    sets.clean()
    try:
        yield sets
    finally:
        sets.clean()


def _plant(soak):
    """An unmanaged domain on hv1 and another owner's proxy on hv2: {name: (host, state, xml)}."""
    hv1, hv2 = soak.fleet.hv1, soak.fleet.hv2
    xml_file = soak.fleet.tmp_path / "unmanaged.xml"
    xml_file.write_text(UNMANAGED_XML)
    hypervisors.virsh(hv1, "define", str(xml_file))
    run = soak.converge({hv2.name: [{"name": FOREIGN}]}, gc=False, uid=OTHER_OWNER)
    assert run.rc == 0, run
    return {UNMANAGED: (hv1.name, "shut off", hypervisors.virsh(hv1, "dumpxml", "--inactive", UNMANAGED).stdout),
            FOREIGN: (hv2.name, "running", hypervisors.virsh(hv2, "dumpxml", "--inactive", FOREIGN).stdout)}


def test_random_walk_over_desired_sets_keeps_the_invariants(soak):
    seed = int(os.environ.get("EGRESS_SOAK_SEED") or random.SystemRandom().randrange(1 << 32))
    print("soak seed %d (replay with EGRESS_SOAK_SEED=%d)" % (seed, seed))
    rng = random.Random(seed)
    hosts = sorted(soak.specs)
    planted = _plant(soak)

    desired = {}
    # Both faults in every walk, each at its own early step (so the time bound never skips one), on a random
    # hypervisor after a random delay.
    faults = dict(zip(rng.sample(range(1, max(3, min(STEPS, 6))), 2), ["kill the module", "restart libvirtd"]))
    started = time.monotonic()
    for step in range(max(STEPS, max(faults) + 1)):
        if time.monotonic() - started > SECONDS and step > max(faults):
            print("soak: time bound reached after %d steps" % step)
            break
        what = _step(rng, desired, hosts)
        sets = _sets(desired, hosts)
        context = "seed %d step %d (%s)" % (seed, step, what)
        if step in faults:
            fault, fault_host, fault_delay = faults[step], rng.choice(hosts), rng.uniform(0.0, 1.5)
            context += ", after %s on %s" % (fault, fault_host)
            outcome = {}
            runner = threading.Thread(target=soak.converge_into, args=(outcome, sets))
            runner.start()
            if fault == "kill the module":
                print("%s: killed pid %s" % (context, kill_module_when_it_runs(soak.specs[fault_host], fault_delay)))
            else:
                time.sleep(1.0 + fault_delay)
                kill_libvirtd(soak.specs[fault_host])
                restore_libvirtd(soak.specs[fault_host])
            runner.join()
            faulted = outcome["run"]
            assert "Traceback" not in faulted.stdout + faulted.stderr, faulted
            print("%s: the faulted run ended rc=%d: %s" % (context, faulted.rc, faulted.failures()))
        run = soak.converge(sets)
        assert run.rc == 0, "%s: %r" % (context, run)
        _check(soak, desired, planted, context)
        print("%s: converged in %.1f s" % (context, run.seconds))
