"""B15: a request's latency through a proxy with 50 profiles of 200 entries, beside one default policy of the same size
and beside no destination policy; then a profile's mode change applied in place to 4 running proxies.

On lab-hv1 over SSH, as B8: playbooks/deploy.yml with inventories/lab in its LAN layout (bench._common.lan_inventory),
PROXIES proxies of an owner of their own, 384 MiB each. Each policy below is a policy change, applied in place through
the proxies' guest agents; after each, REQUESTS requests to the LAN's origin through the first proxy from the LAN's
namespace (one curl, its connection to squid kept alive), their median and 99th percentile:

- none: no destination policy (no allowed destinations, internal ones not refused);
- default: one default policy of PROFILES x ENTRIES allowed destinations (host names, the origin's networks last);
- profiles: PROFILES profiles of ENTRIES allowed destinations each, the client's the last (every other profile's
  clients are other addresses of the LAN), so a request passes every profile's identity before it takes its own.

Then the mode change: the client's profile refuses the origin (enforced: every proxy answers 403), then the same
profile in report mode, timed from ansible-playbook's start until every proxy forwards again (200; each polled every
0.5 s from a thread of its own, as B8 polls). Every policy change must leave each proxy "updated" with its domain id
kept. Everything is destroyed at the end (playbooks/destroy.yml), also on failure.
"""

import os
import statistics
import subprocess
import tempfile

from bench._common import PREFIX, REPO_ROOT, VENV, Virsh, rounded, timed
from bench.b7_egress import HOST, SQUID_PORT, spec
from bench.b8_policy import (
    ENFORCE_GRACE,
    MEMORY_MIB,
    POLL_INTERVAL,
    Deploy,
    answered,
    deployed,
    domain_ids,
    inventory,
    last,
    outcomes,
    set_host_vars,
    timeline_env,
)

UID = PREFIX + "b15"
PROXIES = 4
PROFILES = 50
ENTRIES = 200
REQUESTS = 1000
# The LAN's addresses that stand for the other profiles' clients: none of them asks.
OTHER_CLIENTS_FROM = 100


def names(count):
    return ["%sb15-%d" % (PREFIX, index) for index in range(1, count + 1)]


def destinations(profile, count):
    """``count`` host names of a profile's allowlist, none of them the origin's."""
    return ["d%d.p%d.b15.example" % (index, profile) for index in range(count)]


def policies(hypervisor):
    """{label: lab-hv1's host_vars for that policy}; None removes a variable (the LAN layout's value comes back)."""
    origin = list(hypervisor.origin_cidrs)
    profiles = [{"name": "p%d" % index, "clients": ["%s.%d" % (hypervisor.lan_prefix, OTHER_CLIENTS_FROM + index)],
                 "allowed_destinations": destinations(index, ENTRIES)} for index in range(1, PROFILES)]
    profiles.append({"name": "p%d" % PROFILES, "clients": [hypervisor.lan_address],
                     "allowed_destinations": destinations(PROFILES, ENTRIES - len(origin)) + origin})
    return {
        "none": {"egress_proxy_allowed_destinations": [], "egress_proxy_deny_internal": False},
        "default": {"egress_proxy_allowed_destinations": destinations(0, PROFILES * ENTRIES - len(origin)) + origin,
                    "egress_proxy_deny_internal": None},
        "profiles": {"egress_proxy_allowed_destinations": origin, "egress_proxy_profiles": profiles},
    }


def refusing(profiles, mode):
    """``profiles`` with the client's (the last) refusing the origin by its allowlist, in ``mode``. Not as internal:
    report mode refuses internal destinations too, and the lab's origin is one."""
    last_profile = dict(profiles[-1], allowed_destinations=destinations(PROFILES, ENTRIES), deny_internal=False,
                        mode=mode)
    return profiles[:-1] + [last_profile]


def latencies(hypervisor, address):
    """(status counts, seconds of each request) of REQUESTS requests to the LAN's origin through the proxy at
    ``address``, one curl in the LAN's namespace (its connection to squid kept alive)."""
    # A config of REQUESTS URLs, each with its output: a glob would write every body but the first to stdout.
    urls = "".join('url = "%s?n=%d"\noutput = "/dev/null"\n' % (hypervisor.origin_url(hypervisor.lan_address), number)
                   for number in range(REQUESTS))
    completed = subprocess.run(["ip", "netns", "exec", hypervisor.lan_netns, "curl", "-s", "-K", "-",
                                "-w", "%{http_code} %{time_total}\\n", "--max-time", "10",
                                "-x", "http://%s:%d" % (address, SQUID_PORT)],
                               input=urls, capture_output=True, text=True, timeout=REQUESTS * 10, check=False)
    statuses, seconds = {}, []
    for line in completed.stdout.splitlines():
        status, total = line.split()
        statuses[status] = statuses.get(status, 0) + 1
        seconds.append(float(total))
    return statuses, seconds


def percentiles(seconds):
    """{"median", "p99"} of ``seconds``, in milliseconds."""
    cuts = statistics.quantiles(seconds, n=100, method="inclusive")
    return {"median": round(statistics.median(seconds) * 1000, 2), "p99": round(cuts[98] * 1000, 2)}


def policy_change(inventory_path, env, work, on, proxies, ids, addresses, status=None, **variables):
    """The deploy of lab-hv1's host_vars updated with ``variables``, in place: {"all_answered": seconds after its
    start until every proxy answers ``status`` (with a status), "playbook", "outcomes", "ids_kept"}."""
    set_host_vars(inventory_path, **variables)
    deploy = Deploy("deploy.yml", inventory_path, env, work).start()
    times = answered(addresses, status, deploy.started, lambda: deploy.ended_before(ENFORCE_GRACE)) if status else {}
    run = deploy.result()
    return {"all_answered": last(times) if times else None, "answered": times, "playbook": rounded(deploy.outcome[0]),
            "outcomes": outcomes(run, proxies),
            "ids_kept": sum(1 for name, domid in domain_ids(on, proxies).items() if domid == ids[name])}


def run():
    hypervisor = spec()
    on = Virsh(hypervisor)
    proxies = names(PROXIES)
    results = {"host": HOST, "proxies": PROXIES, "profiles": PROFILES, "entries": ENTRIES, "requests": REQUESTS,
               "memory_mib": MEMORY_MIB, "poll_interval": POLL_INTERVAL}
    with tempfile.TemporaryDirectory(prefix="bench-b15-") as work:
        inventory_path = inventory(work, proxies, UID)
        env = timeline_env(work)
        try:
            addresses, results["deploy"] = deployed(inventory_path, env, work, on, proxies)
            ids = domain_ids(on, proxies)
            measured = addresses[proxies[0]]
            results["latency"] = {}
            for label, variables in policies(hypervisor).items():
                change = policy_change(inventory_path, env, work, on, proxies, ids, addresses, **variables)
                statuses, seconds = latencies(hypervisor, measured)
                results["latency"][label] = dict(percentiles(seconds), statuses=statuses, change=change)
            profiles = policies(hypervisor)["profiles"]["egress_proxy_profiles"]
            results["enforce"] = policy_change(inventory_path, env, work, on, proxies, ids, addresses, "403",
                                               egress_proxy_profiles=refusing(profiles, "enforce"))
            results["report"] = policy_change(inventory_path, env, work, on, proxies, ids, addresses, "200",
                                              egress_proxy_profiles=refusing(profiles, "report"))
        finally:
            timed([os.path.join(VENV, "bin", "ansible-playbook"), "-i", inventory_path, "-l", HOST,
                   os.path.join(REPO_ROOT, "playbooks", "destroy.yml")], env=env)
    return results
