"""B8: a policy change applied in place to N running proxies, beside a rolling replacement of the same N.

On lab-hv1 over SSH, as B7: playbooks/deploy.yml with inventories/lab's hosts and group
variables in their LAN layout (bench._common.lan_inventory: the real guest image on br0, wait
for the addresses), its lab-hv1 host_vars changed,
N proxies (default 10) of an owner of their own, 384 MiB each. Once they all answer 200
through squid for the LAN's origin server:

- the policy change: the origin's address in egress_proxy_denied_destinations (squid.conf,
  applied through each proxy's guest agent). Timed from ansible-playbook's start until every
  proxy answers 403 for the origin (each polled every 0.5 s from a thread of its own);
  every proxy must come out "updated" with its domain id unchanged;
- the rolling replacement: the denied list removed again and egress_proxy_memory_mib 400
  (a machine change: each proxy replaced, max_unavailable 1, each awaited). Timed from
  ansible-playbook's start until every proxy, at its new address (read after the playbook),
  answers 200 again; every proxy must come out "replaced".

The playbooks run with the integration tests' json_results and fleet_timeline callbacks, so the
converge task's span and each proxy's outcome come from the run itself. Everything is destroyed
at the end (playbooks/destroy.yml), also on failure.
"""

import json
import os
import subprocess
import tempfile
import threading
import time

import yaml

from bench._common import (
    BUILD_COLLECTIONS,
    PREFIX,
    REPO_ROOT,
    VENV,
    Virsh,
    agent_ipv4,
    ansible_env,
    lan_inventory,
    read_text,
    rounded,
    timed,
    update_yaml,
)
from bench.b7_egress import HOST, SQUID_PORT, spec
from tests.lab.fleet_runs import CALLBACKS, FleetRun

UID = PREFIX + "b8"
MEMORY_MIB = 384
ROLLED_MEMORY_MIB = 400
WAIT_TIMEOUT = 1800
POLL_INTERVAL = 0.5
# Squid starts after the guest agent reports the address: how long a proxy may take to answer after the playbook.
ANSWER_TIMEOUT = 600
# A proxy still not enforcing the policy this long after the playbook ended never will.
ENFORCE_GRACE = 60
CONVERGE_TASK = "Converge the proxies of this hypervisor"
DEFAULTS = os.path.join(REPO_ROOT, "roles", "egress_proxy", "defaults", "main.yml")


def names(count):
    return ["%sb8-%d" % (PREFIX, index) for index in range(1, count + 1)]


def set_host_vars(inventory_path, **variables):
    """lab-hv1's host_vars of the copied inventories/lab, updated with ``variables`` (None removes one)."""
    update_yaml(os.path.join(inventory_path, "host_vars", HOST + ".yml"), **variables)


def inventory(work, proxies, uid=UID):
    """inventories/lab in its LAN layout, with ``proxies`` (names) of the owner ``uid`` on lab-hv1."""
    return lan_inventory(os.path.join(work, "inventory"), HOST,
                         egress_proxy_instances=[{"name": name} for name in proxies], egress_proxy_uid=uid,
                         egress_proxy_memory_mib=MEMORY_MIB, egress_proxy_wait_for_ip=True,
                         egress_proxy_wait_timeout=WAIT_TIMEOUT)


def timeline_env(work):
    """The environment of a Deploy: this checkout's collection, the json_results and fleet_timeline callbacks."""
    return ansible_env(BUILD_COLLECTIONS, ANSIBLE_SSH_CONTROL_PATH_DIR=os.path.join(work, "cp"),
                       ANSIBLE_CALLBACK_PLUGINS=CALLBACKS, ANSIBLE_STDOUT_CALLBACK="json_results",
                       ANSIBLE_CALLBACKS_ENABLED="fleet_timeline", ANSIBLE_VERBOSE_TO_STDERR="true")


class Deploy(threading.Thread):
    """One ansible-playbook run of playbooks/``name`` on lab-hv1, in a thread; result() is its FleetRun."""

    def __init__(self, name, inventory_path, env, work):
        super().__init__(daemon=True)
        self.timeline = os.path.join(work, "timeline-%d.jsonl" % time.monotonic_ns())
        self.argv = [os.path.join(VENV, "bin", "ansible-playbook"), "-i", inventory_path, "-l", HOST,
                     os.path.join(REPO_ROOT, "playbooks", name)]
        self.env = dict(env, EGRESS_FLEET_TIMELINE=self.timeline)
        self.started = self.wall_started = self.ended = None
        self.outcome = None

    def start(self):
        self.started, self.wall_started = time.monotonic(), time.time()
        super().start()
        return self

    def run(self):
        self.outcome = timed(self.argv, env=self.env, check=False)
        self.ended = time.monotonic()

    def ended_before(self, seconds):
        """Whether the playbook ended more than ``seconds`` ago (a poll waiting on it may give up)."""
        return self.ended is not None and time.monotonic() > self.ended + seconds

    def result(self):
        """The run's FleetRun once it ended; a failed run raises."""
        self.join()
        seconds, completed = self.outcome
        records = []
        if os.path.exists(self.timeline):
            records = [json.loads(line) for line in read_text(self.timeline).splitlines()]
        run = FleetRun(completed, records, seconds)
        if run.rc != 0:
            raise RuntimeError("%s failed (rc %d, %.0f s): %s\n%s" % (
                os.path.basename(self.argv[-1]), run.rc, seconds,
                "; ".join("%s: %s: %s" % failure for failure in run.failures()), run.stderr[-1000:]))
        return run

    def converge_span(self, run):
        """(start, end) of the converge task, seconds after the playbook's start."""
        start, end = run.spans(CONVERGE_TASK)[HOST]
        return rounded(start - self.wall_started), rounded(end - self.wall_started)


def status_code(address):
    """The HTTP status a request through the proxy at ``address`` to the LAN's origin gets ("000": no answer)."""
    hypervisor = spec()
    completed = subprocess.run(["ip", "netns", "exec", hypervisor.lan_netns, "curl", "-s", "-o", "/dev/null",
                                "-w", "%{http_code}", "--max-time", "5", "-x", "http://%s:%d" % (address, SQUID_PORT),
                                hypervisor.origin_url(hypervisor.lan_address)],
                               capture_output=True, text=True, check=False)
    return completed.stdout.strip() or "000"


def answered(addresses, status, started, expired):
    """{name: seconds after ``started`` when its proxy first answered ``status``, or None once ``expired()``}.

    Every proxy is polled every POLL_INTERVAL from a thread of its own.
    """
    times = {}

    def poll(name, address):
        times[name] = None
        while not expired():
            if status_code(address) == status:
                times[name] = rounded(time.monotonic() - started)
                return
            time.sleep(POLL_INTERVAL)

    threads = [threading.Thread(target=poll, args=item, daemon=True) for item in addresses.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times


def within(seconds):
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() > deadline


def last(times):
    """The last of ``times``; None when a proxy never answered."""
    return None if None in times.values() else max(times.values())


def addresses_of(on, proxies, prefix):
    found = {name: agent_ipv4(on, name, prefix) for name in proxies}
    missing = sorted(name for name, address in found.items() if not address)
    if missing:
        raise RuntimeError("no agent address for %s" % ", ".join(missing))
    return found


def agent_rpcs():
    """The role's default egress_proxy_guest_agent_rpcs: the only commands a proxy's agent answers after its first boot."""
    return set(yaml.safe_load(read_text(DEFAULTS))["egress_proxy_guest_agent_rpcs"])


def first_boot_done(on, name, rpcs):
    """Whether the proxy's first boot has restarted its guest agent with ``rpcs`` (the last step of the role's runcmd,
    after squid is up): its agent then answers those commands and no other (before, it also refuses one or two)."""
    out = on("qemu-agent-command", name, '{"execute": "guest-info"}', check=False)
    try:
        commands = json.loads(out)["return"]["supported_commands"]
    except (ValueError, KeyError, TypeError):
        return False
    return {command["name"] for command in commands if command["enabled"]} <= rpcs


def first_boots_done(on, proxies, started, timeout):
    """Seconds after ``started`` when every proxy's first boot had ended (polled every second); raises at timeout."""
    waiting, rpcs = set(proxies), agent_rpcs()
    while waiting:
        waiting = {name for name in waiting if not first_boot_done(on, name, rpcs)}
        if waiting and time.monotonic() - started > timeout:
            raise RuntimeError("first boot not done after %d s: %s" % (timeout, ", ".join(sorted(waiting))))
        if waiting:
            time.sleep(1)
    return rounded(time.monotonic() - started)


def domain_ids(on, proxies):
    return {name: on("domid", name, check=False).strip() for name in proxies}


def outcomes(run, proxies):
    items = run.items(CONVERGE_TASK, HOST)
    return {name: items.get(name, {}).get("outcome") for name in proxies}


def deployed(inventory_path, env, work, on, proxies):
    """The deploy of ``proxies``, booting at once, until each answers 200 through squid and its first boot is over (a
    policy change while a first boot is still in the role's runcmd would race its restart of the agent): ({name: its
    address}, {"playbook", "all_served", "first_boots_done"})."""
    deploy = Deploy("deploy.yml", inventory_path, env, work).start()
    deploy.result()
    addresses = addresses_of(on, proxies, spec().lan_prefix + ".")
    served = answered(addresses, "200", deploy.started, within(ANSWER_TIMEOUT))
    if last(served) is None:
        raise RuntimeError("proxies never answered 200 after the deploy: %s" % served)
    return addresses, {"playbook": rounded(deploy.outcome[0]), "all_served": last(served),
                       "first_boots_done": first_boots_done(on, proxies, deploy.started, WAIT_TIMEOUT)}


def run(count=10):
    hypervisor = spec()
    on = Virsh(hypervisor)
    prefix = hypervisor.lan_prefix + "."
    proxies = names(count)
    results = {"host": HOST, "proxies": count, "poll_interval": POLL_INTERVAL, "memory_mib": MEMORY_MIB,
               "rolled_memory_mib": ROLLED_MEMORY_MIB}
    with tempfile.TemporaryDirectory(prefix="bench-b8-") as work:
        inventory_path = inventory(work, proxies)
        env = timeline_env(work)
        try:
            # 1. The N proxies, booting at once.
            addresses, results["deploy"] = deployed(inventory_path, env, work, on, proxies)
            ids = domain_ids(on, proxies)

            # 2. The policy change, in place: every proxy polled from the playbook's start.
            set_host_vars(inventory_path, egress_proxy_denied_destinations=[hypervisor.lan_address])
            policy = Deploy("deploy.yml", inventory_path, env, work).start()
            enforced = answered(addresses, "403", policy.started, lambda: policy.ended_before(ENFORCE_GRACE))
            policy_run = policy.result()
            results["policy"] = {
                "all_enforced": last(enforced), "playbook": rounded(policy.outcome[0]),
                "converge": policy.converge_span(policy_run), "enforced": enforced,
                "outcomes": outcomes(policy_run, proxies),
                "ids_kept": sum(1 for name, domid in domain_ids(on, proxies).items() if domid == ids[name])}

            # 3. The rolling replacement of the same N: a machine change, the denied list removed again.
            set_host_vars(inventory_path, egress_proxy_denied_destinations=None, egress_proxy_memory_mib=ROLLED_MEMORY_MIB)
            roll = Deploy("deploy.yml", inventory_path, env, work).start()
            roll_run = roll.result()
            served = answered(addresses_of(on, proxies, prefix), "200", roll.started, within(ANSWER_TIMEOUT))
            results["roll"] = {
                "all_served": last(served), "playbook": rounded(roll.outcome[0]), "converge": roll.converge_span(roll_run),
                "served": served, "outcomes": outcomes(roll_run, proxies),
                "ids_kept": sum(1 for name, domid in domain_ids(on, proxies).items() if domid == ids[name])}
            policy_time, roll_time = results["policy"]["all_enforced"], results["roll"]["all_served"]
            results["ratio"] = round(roll_time / policy_time, 1) if policy_time and roll_time else None
        finally:
            timed([os.path.join(VENV, "bin", "ansible-playbook"), "-i", inventory_path, "-l", HOST,
                   os.path.join(REPO_ROOT, "playbooks", "destroy.yml")], env=env)
    return results
