"""B14: a pair behind one client address (an HA group, issue 42) under a client's load, beside one proxy without one.

On lab-hv1 and lab-hv2 over SSH, deployed as tests/integration/test_ha_group.py deploys its pair (tests/lab/fleet_runs'
Fleet, playbooks/deploy.yml): the demo's guest (inventories/lab's group variables) on the lab's client segment (bridge
br2, gateway the segment's router), MEMBERS at .31 (lab-hv1) and .32 (lab-hv2) behind GROUP_ADDRESS (group `bench`),
and SINGLE at .33 (lab-hv1) in no group, what users have today; one owner of their own, so nothing else is touched.

Each step runs two clients at once in the segment's client namespace (tests/lab/client_load.py), one through the
group's address and one through SINGLE, each making new requests to the segment's origin at a rate (a new TCP
connection each, REQUEST_TIMEOUT to answer) and keeping DOWNLOADS long downloads going one after another. The lab's
origin answers every GET with a short JSON body, so the downloads come from a file server the bench runs in the
segment's hub beside it (PACED_FILES: DOWNLOAD_BYTES at DOWNLOAD_PACE, ~32 s a download). The clients start WARMUP s
before the step's change (downloads in flight when it comes) and stop SETTLE s after it; each client's records give
its failed new requests, its longest gap between two answers, its downloads ended and cut, and who answered:

- steady: no change, at the issue's rate (RATES[0]);
- a policy change in place, applied to all three by one deploy (a documentation address denied, another each time):
  at the issue's rate, then at each lower rate of RATES until the group's client loses no request and the deploy
  succeeds; the rate that carried it is the rate of the steps below. A deploy that fails under the load (a guest's
  reload not done in time) is recorded with its message, and every proxy awaited serving before the next step;
- the rolling replacement of all three (memory_mib 512 -> 576): a member hands the address over before it is shut
  down (the policy's release), SINGLE is shut down and booted again;
- `virsh destroy` of the holder (the member that answered the group's client last) and of SINGLE, one right after the
  other: how long the group's address went unanswered, which requests failed after FAILOVER_BOUND, and that SINGLE
  stays gone.

Leftovers of an earlier run are removed first (playbooks/destroy.yml on the same names and owner), everything at the
end, also on failure. One run: about 30 minutes under TCG (10 of them the roll's three boots, one after another).
"""

import collections
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

import yaml

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import DRAIN_SECONDS
from bench._common import LAB_INVENTORY, PREFIX, read_text, rounded
from tests.lab import client_load, config, hypervisors, namespaces
from tests.lab.fleet_runs import REPO_ROOT, VENV_BIN, Fleet

UID = PREFIX + "b14"
MEMBERS = (PREFIX + "b14-1", PREFIX + "b14-2")
SINGLE = PREFIX + "b14-single"
GROUP = "bench"
# Clear of the demo's pair (.10, members .11 and .12) and test_ha_group's (.20, .21 and .22), which may run beside it.
GROUP_ADDRESS = "198.18.40.30"
# Segment member numbers (config.segment_member_address): .31, .32 and .33.
NUMBERS = {MEMBERS[0]: 21, MEMBERS[1]: 22, SINGLE: 23}
PORT = 3128
ORIGIN = "http://%s:%d/" % (config.SEGMENT_ADDRESS, config.ORIGIN_PORT)
MEMORY_MIB = 512
ROLLED_MEMORY_MIB = 576
CONVERGE_TASK = "Converge the proxies of this hypervisor"
# New requests a second: the 20 first; under TCG a guest's squid may not carry it through a reload, so the
# policy change is tried at each lower rate until the group's client loses none.
RATES = (20, 10, 5)
DOWNLOADS = 4
# How long a new request may take, as a package manager's would (pip: 15 s, apt: 120 s): a held SYN is sent again
# after 1, 3, 7, 15 s.
REQUEST_TIMEOUT = 30
DOWNLOAD_PORT = 8091
DOWNLOAD_BYTES = 16 << 20
DOWNLOAD_PACE = 512 << 10
DOWNLOAD_URL = "http://%s:%d/large" % (config.SEGMENT_ADDRESS, DOWNLOAD_PORT)
WARMUP = 10
SETTLE = 10
STEADY = 20
# The unplanned loss of the holder: how long the group's address may go unanswered (test_ha_group's bound).
FAILOVER_BOUND = 3.0
# Each policy change denies one more of these (TEST-NET-1, never asked for): squid.conf changes, the traffic does not.
DENIED = "192.0.2.%d/32"
# How many failed requests and cut downloads a step keeps whole in the results (the rest are counted).
KEPT_RECORDS = 5

# Runs in the client segment's hub (ip netns exec): argv address, port, size (bytes), pace (bytes a second). Every GET
# gets the size's bytes at that pace, as a distant mirror sends a large package.
PACED_FILES = r"""
import http.server, sys, time
address, port, size, pace = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
block = b"\0" * 16384


class Paced(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        started, sent = time.monotonic(), 0
        try:
            while sent < size:
                piece = block[:size - sent]
                self.wfile.write(piece)
                sent += len(piece)
                time.sleep(max(0.0, started + sent / pace - time.monotonic()))
        except OSError:
            pass  # the proxy went away: the client counts the download as cut

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer((address, port), Paced).serve_forever()
"""


def proxy_of(name):
    return "%s:%d" % (config.segment_member_address(NUMBERS[name]), PORT)


SIDES = {"group": "%s:%d" % (GROUP_ADDRESS, PORT), "single": proxy_of(SINGLE)}


def placed(fleet):
    """{proxy: the hypervisor (spec) it runs on}: a member on each, the single proxy beside the first."""
    return {MEMBERS[0]: fleet.specs[0], MEMBERS[1]: fleet.specs[1], SINGLE: fleet.specs[0]}


def fleet_vars(fleet, memory_mib=MEMORY_MIB, denied=()):
    """The role's variables: inventories/lab's group variables (the demo's guest image and machine) with this bench's
    owner, its three proxies on the client segment and its group."""
    variables = yaml.safe_load(read_text(os.path.join(LAB_INVENTORY, "group_vars", "hypervisors.yml")))
    variables.update(
        egress_proxy_uid=UID, egress_proxy_bridge=config.HV_SEGMENT_BRIDGE, egress_proxy_gateway=config.SEGMENT_ADDRESS,
        egress_proxy_wait_for_ip=True, egress_proxy_shutdown_timeout=60,
        egress_proxy_allowed_clients=[config.SEGMENT_CIDR],
        egress_proxy_allowed_destinations=[config.SEGMENT_ADDRESS + "/32"],
        egress_proxy_denied_destinations=list(denied),
        egress_proxy_fleet=[
            {"name": name, "hypervisor": spec.name, "memory_mib": memory_mib,
             "address": "%s/%d" % (config.segment_member_address(NUMBERS[name]), config.SEGMENT_PREFIX_LEN)}
            for name, spec in placed(fleet).items()],
        egress_proxy_ha_groups=[{"name": GROUP, "address": GROUP_ADDRESS, "members": list(MEMBERS)}])
    return variables


def playbook(fleet, name, variables, check=True):
    """ansible-playbook playbooks/``name`` with ``variables``: its FleetRun; a failed run raises when ``check``."""
    run = fleet.playbook(name, fleet.inventory(variables), timeout=1800)
    if check and run.rc != 0:
        raise RuntimeError("%s failed: %r" % (name, run))
    return run


def changed(fleet, run):
    """What a step's deploy did: {"actions": {proxy: what the converge did}, "failures": [what failed, its message]}.
    A change the guests fail under the load (a reload that does not end in time) is a figure, not the end of the run."""
    found = {}
    for spec in fleet.specs:
        if spec.name in run.ran(CONVERGE_TASK):
            found.update({name: entry.get("actions") for name, entry in run.items(CONVERGE_TASK, spec.name).items()})
    return {"actions": found, "failures": ["%s: %s" % (host, message) for host, _task, message in run.failures()]}


def remove(fleet):
    """This bench's proxies gone from both hypervisors: each still running destroyed first (a running member would
    wait for another to serve before it stops, and none may), then playbooks/destroy.yml removes them."""
    for name, spec in placed(fleet).items():
        if hypervisors.virsh(spec, "domstate", name, check=False).stdout.strip() == "running":
            hypervisors.virsh(spec, "destroy", name)
    playbook(fleet, "destroy.yml", fleet_vars(fleet))


def answers(proxy):
    """Whether a request through ``proxy`` (address:port) from the segment's client namespace gets the origin's 200."""
    completed = subprocess.run(["ip", "netns", "exec", config.SEGMENT_CLIENT_NETNS, "curl", "-s", "--max-time", "5",
                                "-o", "/dev/null", "-w", "%{http_code}", "-x", "http://" + proxy, ORIGIN],
                               capture_output=True, text=True, check=False)
    return completed.stdout == "200"


def await_all(timeout=600):
    """Seconds until each proxy serves on its own address (its first boot over) and the group's address answers; then
    the time a member's keepalived takes to count squid as answering (its check's rise)."""
    started = time.monotonic()
    for proxy in [proxy_of(name) for name in MEMBERS + (SINGLE,)] + [SIDES["group"]]:
        while not answers(proxy):
            if time.monotonic() - started > timeout:
                raise RuntimeError("nothing answered on %s within %d s" % (proxy, timeout))
            time.sleep(2)
    waited = time.monotonic() - started
    time.sleep(10)
    return rounded(waited)


class PacedFiles:
    """PACED_FILES in the client segment's hub, on the origin's address."""

    def __init__(self, log):
        with open(log, "ab") as handle:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", config.SEGMENT_NETNS, sys.executable, "-c", PACED_FILES, config.SEGMENT_ADDRESS,
                 str(DOWNLOAD_PORT), str(DOWNLOAD_BYTES), str(DOWNLOAD_PACE)],
                stdin=subprocess.DEVNULL, stdout=handle, stderr=handle)
        deadline = time.monotonic() + 10
        while not namespaces.listening(self.process.pid, config.SEGMENT_ADDRESS, DOWNLOAD_PORT):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the paced file server did not start: %s" % read_text(log)[-1000:])
            time.sleep(0.1)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


class Load:
    """tests/lab/client_load from the segment's client namespace through ``proxy``, its records in ``out``."""

    def __init__(self, proxy, rate, out):
        self.out = out
        with open(out + ".log", "ab") as log:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", config.SEGMENT_CLIENT_NETNS, os.path.join(VENV_BIN, "python"), "-m",
                 "tests.lab.client_load", proxy, ORIGIN, out, "--rate", str(rate), "--timeout", str(REQUEST_TIMEOUT),
                 "--downloads", str(DOWNLOADS), "--download-url", DOWNLOAD_URL],
                cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def records(self):
        return client_load.records(self.out) if os.path.exists(self.out) else []

    def stop(self):
        # A request under way is waited for (up to its timeout); a download under way is dropped unrecorded.
        self.process.send_signal(signal.SIGTERM)

    def wait(self):
        if self.process.wait(timeout=REQUEST_TIMEOUT + 30) != 0:
            raise RuntimeError("client_load through %s failed: %s" % (self.out, read_text(self.out + ".log")[-1000:]))


def error_kinds(records):
    """{an error's type: how many}, e.g. ConnectionRefusedError, TimeoutError, IncompleteRead."""
    return dict(collections.Counter((record["error"] or "status %s" % record["status"]).split(":")[0]
                                    for record in records))


def kept(records, since):
    """The first KEPT_RECORDS of ``records``, their times as seconds after ``since``."""
    return [dict(record, start=rounded(record["start"] - since), end=rounded(record["end"] - since))
            for record in records[:KEPT_RECORDS]]


def figures(load, rate, since):
    """What one client lived through, from its records; times are seconds after ``since`` (the change's start)."""
    seen = client_load.summary(load.out)
    failed, cut = seen["failed"], seen["downloads_cut"]
    return {
        "rate": rate, "requests": seen["requests"], "failed": len(failed), "failed_errors": error_kinds(failed),
        "failed_first": kept(failed, since), "longest_gap": rounded(seen["longest_gap"]),
        "downloads": seen["downloads"], "downloads_cut": len(cut), "cut_errors": error_kinds(cut),
        "cut_first": kept(sorted(cut, key=lambda record: record["end"]), since),
        # Downloads cut in flight, by the proxy that had answered them (the others never got an answer).
        "cut_in_flight_on": dict(collections.Counter(record["proxy"] for record in cut if record["proxy"])),
        "proxies": seen["proxies"]}


def step(work, name, rate, action):
    """Both clients at ``rate`` from WARMUP s before ``action(loads)`` to SETTLE s after it: (its result, their
    figures, the loads)."""
    loads = {side: Load(proxy, rate, os.path.join(work, "%s-%s.jsonl" % (name, side))) for side, proxy in SIDES.items()}
    try:
        time.sleep(WARMUP)
        started = time.monotonic()
        result = action(loads)
        ended = time.monotonic()
        time.sleep(SETTLE)
    finally:
        for load in loads.values():
            load.stop()
        for load in loads.values():
            load.wait()
    print("B14 %s at %d/s: %.0f s" % (name, rate, ended - started), flush=True)
    found = {side: figures(load, rate, started) for side, load in loads.items()}
    found["change_seconds"] = rounded(ended - started)
    return result, found, loads


def holder(load):
    """The member that answered the last request through the group's address."""
    answered = [record for record in load.records() if record["kind"] == "request" and record["ok"]]
    if not answered:
        raise RuntimeError("no request through %s was answered" % GROUP_ADDRESS)
    return answered[-1]["proxy"]


def after_destroy(load, destroyed_at):
    """What a client saw of a proxy destroyed at ``destroyed_at``: when a request started after it was first answered
    (seconds after it), the requests started after FAILOVER_BOUND that failed, and who answered them."""
    started_after = [record for record in load.records() if record["kind"] == "request"
                     and record["start"] >= destroyed_at]
    answered = [record["end"] for record in started_after if record["ok"]]
    return {"answered_again_after": rounded(min(answered) - destroyed_at) if answered else None,
            "requests_after": len(started_after), "answered_after": len(answered),
            "failed_after_bound": len([record for record in started_after if not record["ok"]
                                       and record["start"] > destroyed_at + FAILOVER_BOUND]),
            "proxies_after_bound": sorted({record["proxy"] for record in started_after if record["ok"]
                                           and record["start"] > destroyed_at + FAILOVER_BOUND})}


def run():
    specs = config.hypervisor_specs()[:2]
    if len(specs) < 2:
        raise RuntimeError("B14 needs lab-hv1 and lab-hv2 (EGRESS_LAB_HYPERVISORS >= 2)")
    results = {"group_address": GROUP_ADDRESS, "members": {name: proxy_of(name) for name in MEMBERS},
               "single": proxy_of(SINGLE), "rates": list(RATES), "downloads": DOWNLOADS,
               "download_bytes": DOWNLOAD_BYTES, "download_pace": DOWNLOAD_PACE, "request_timeout": REQUEST_TIMEOUT,
               "warmup": WARMUP, "settle": SETTLE, "failover_bound": FAILOVER_BOUND, "memory_mib": MEMORY_MIB,
               "rolled_memory_mib": ROLLED_MEMORY_MIB, "hand_over_drain": DRAIN_SECONDS}
    with tempfile.TemporaryDirectory(prefix="bench-b14-") as work:
        fleet = Fleet(specs, pathlib.Path(work))
        remove(fleet)
        files = PacedFiles(os.path.join(work, "paced-files.log"))
        try:
            started = time.monotonic()
            playbook(fleet, "deploy.yml", fleet_vars(fleet))
            results["deploy"] = {"playbook": rounded(time.monotonic() - started), "all_serving": await_all()}

            _none, results["steady"], _loads = step(work, "steady", RATES[0], lambda loads: time.sleep(STEADY))

            # The policy change, at the rate first; the steps below take the rate that carried it.
            results["policy"] = []
            rate = RATES[-1]
            for number, candidate in enumerate(RATES, start=1):
                denied = [DENIED % index for index in range(1, number + 1)]
                policy = fleet_vars(fleet, denied=denied)
                run_, found, _loads = step(work, "policy-%d" % number, candidate, lambda loads, policy=policy: playbook(
                    fleet, "deploy.yml", policy, check=False))
                found.update(changed(fleet, run_), all_serving_after=await_all())
                results["policy"].append(found)
                if found["group"]["failed"] == 0 and not found["failures"]:
                    rate = candidate
                    break
            results["rate"] = rate

            rolled = fleet_vars(fleet, memory_mib=ROLLED_MEMORY_MIB, denied=denied)
            run_, results["roll"], _loads = step(work, "roll", rate, lambda loads: playbook(
                fleet, "deploy.yml", rolled, check=False))
            results["roll"].update(changed(fleet, run_), all_serving_after=await_all())

            def destroy(loads):
                destroyed = {}
                for name in (holder(loads["group"]), SINGLE):
                    hypervisors.virsh(placed(fleet)[name], "destroy", name)
                    destroyed[name] = time.monotonic()
                return destroyed

            destroyed, results["destroy"], loads = step(work, "destroy", rate, destroy)
            lost = [name for name in destroyed if name != SINGLE][0]
            results["destroy"].update(
                holder=lost, group_after=after_destroy(loads["group"], destroyed[lost]),
                single_after=after_destroy(loads["single"], destroyed[SINGLE]))
        finally:
            files.stop()
            remove(fleet)
    return results
