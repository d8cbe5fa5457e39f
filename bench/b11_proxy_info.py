"""Cost of listing the fleet (kvm_proxy_info, the kvm_proxies inventory), on the local lab.

N managed domains named eptest-bench-<i> are defined in the lab pool (bench/_fleet.py: the domain XML of
tests/lab/proxy_domains.py, as kvm_proxy writes it, tiny qcow2 overlays and raw seeds); a few of them are
started (virt type qemu, no cpu model, on the lab bridge; they need not boot), so the running path with its
address lookups is measured too. A fresh process on the hypervisor's Python (/usr/bin/python3 with
Debian's python3-libvirt 9.0) then times kvm_proxy_info's main() (as AnsiballZ runs it there: connect,
list, close), and counts libvirt calls per domain in one more run, every call of a libvirt-python
connection, domain, pool, volume or stream method in that process. The fleet grows from one N to the next;
for the largest N the module is also timed through ``ansible localhost -m kvm_proxy_info``.

Usage (as root, lab up, from the checkout):  PYTHONPATH=build/collections .venv/bin/python -m bench.b11_proxy_info [N ...]
Default: 10 50 100, 3 of them running. Every domain and volume made here is removed afterwards,
also when the run fails or is interrupted.
"""

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid

import libvirt

from bench._common import BUILD_COLLECTIONS as COLLECTIONS
from bench._common import COUNT_LIBVIRT, HYPERVISOR_PYTHON, REPO_ROOT, RSS_READER, RUN_MODULE
from bench._fleet import BENCH_DOMAIN, grow_fleet, remove_fleet
from tests.lab import config

# Runs in the measured process: kvm_proxy_info's main() ``runs`` times, then once more with libvirt's calls counted.
MEASURE = RSS_READER + RUN_MODULE + COUNT_LIBVIRT + r"""
import time

uri, uid, runs = sys.argv[2], sys.argv[3], int(sys.argv[4])
args = dict(uri=uri, uid=uid)
module_main("kvm_proxy_info")
rss_start = rss_kib("VmRSS")
seconds = []
for _run in range(runs):
    started = time.perf_counter()
    result = run_module("kvm_proxy_info", args)
    seconds.append(time.perf_counter() - started)
peak = rss_kib("VmHWM")
count_libvirt_calls()
counted = run_module("kvm_proxy_info", args)
print(json.dumps({
    "seconds": seconds, "rss_start_kib": rss_start, "peak_kib": peak, "calls": libvirt_calls,
    "client_side": sorted(CLIENT_SIDE),
    "entries": [{"name": e["name"], "libvirt_state": e["libvirt_state"], "ip_sources": e["ip_sources"]}
                for e in counted["proxies"]],
    "warnings": result.get("warnings", []) + counted.get("warnings", []),
}))
"""


def link_collection():
    """build/collections/ansible_collections/egress_proxies/kvm -> this checkout, as scripts/test makes it."""
    link = os.path.join(COLLECTIONS, "ansible_collections", "egress_proxies", "kvm")
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(REPO_ROOT, link)


def measure(uid, runs):
    completed = subprocess.run([HYPERVISOR_PYTHON, "-c", MEASURE, COLLECTIONS, config.LIBVIRT_URI, uid, str(runs)],
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        sys.exit("the measured listing failed:\n%s" % completed.stderr)
    return json.loads(completed.stdout)


def calls_per_domain(result):
    """({bench domain: round trips}, round trips about no bench domain, {bench domain: [every call, ...]}).

    A call libvirt-python answers itself (result["client_side"]: a domain's name) is listed but is no round trip.
    """
    per_domain, methods, overhead = {}, {}, 0
    for method, domain, _seconds in result["calls"]:
        trip = int(method not in result["client_side"])
        if domain is None or not BENCH_DOMAIN.fullmatch(domain):
            overhead += trip
            continue
        per_domain[domain] = per_domain.get(domain, 0) + trip
        methods.setdefault(domain, []).append(method)
    return per_domain, overhead, methods


def tally(methods):
    """``a, b x4, c``: each method once, with how often it was called when more than once."""
    counts = collections.Counter(methods)
    return ", ".join(method if n == 1 else "%s x%d" % (method, n) for method, n in sorted(counts.items()))


def call_times(result):
    """{method: (calls, median ms)} over the counted listing."""
    times = {}
    for method, _domain, seconds in result["calls"]:
        times.setdefault(method, []).append(seconds)
    return {method: (len(values), 1000 * statistics.median(values)) for method, values in sorted(times.items())}


def spread(values):
    values = sorted(set(values))
    if not values:
        return "-"
    return str(values[0]) if len(values) == 1 else "%d-%d" % (values[0], values[-1])


def ansible_seconds(module, args, runs):
    """Median wall time of ``ansible localhost -m <module>``, and the last run's result."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="1")
    command = [os.path.join(REPO_ROOT, ".venv", "bin", "ansible"), "localhost", "-m", module,
               "-e", "ansible_python_interpreter=" + HYPERVISOR_PYTHON]
    if args:
        command += ["-a", args]
    seconds = []
    for _run in range(runs):
        started = time.monotonic()
        completed = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        seconds.append(time.monotonic() - started)
        if completed.returncode != 0:
            sys.exit("%s failed:\n%s%s" % (" ".join(command), completed.stdout, completed.stderr))
    return statistics.median(seconds), json.loads(completed.stdout.split("=>", 1)[1])


def on_signal(signum, frame):
    raise SystemExit("interrupted by signal %d" % signum)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[10, 50, 100], help="numbers of domains")
    parser.add_argument("--running", type=int, default=3, help="how many of the domains are started")
    parser.add_argument("--runs", type=int, default=5, help="timed listings per N (the median is reported)")
    parser.add_argument("--ansible-runs", type=int, default=3, help="timed ansible runs for the largest N")
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    link_collection()
    uid = "eptest-bench-" + uuid.uuid4().hex[:8]
    rows = []
    module_run = None
    conn = libvirt.open(config.LIBVIRT_URI)
    try:
        others = sum(1 for dom in conn.listAllDomains(0) if not BENCH_DOMAIN.fullmatch(dom.name()))
        try:
            remove_fleet(conn)
            defined = 0
            for count in sizes:
                grow_fleet(conn, uid, defined, count, min(args.running, count))
                defined = count
                result = measure(uid, args.runs)
                if len(result["entries"]) != count:
                    sys.exit("listed %d domains, expected %d: %s" % (len(result["entries"]), count, result["warnings"]))
                rows.append((count, result))
            median, module_result = ansible_seconds("egress_proxies.kvm.kvm_proxy_info", "uid=" + uid, args.ansible_runs)
            if len(module_result["proxies"]) != sizes[-1]:
                sys.exit("kvm_proxy_info listed %d proxies, expected %d" % (len(module_result["proxies"]), sizes[-1]))
            baseline, _ping = ansible_seconds("ansible.builtin.ping", None, args.ansible_runs)
            module_run = (sizes[-1], median, baseline)
        finally:
            remove_fleet(conn)
    finally:
        conn.close()
    report(rows, module_run, others, args)


def report(rows, module_run, others, args):
    print("Other domains on the hypervisor at the start: %d (each costs its XMLDesc, in 'other round trips' below with"
          " the connection's own calls)" % others)
    print()
    print("| domains (N) | running | main(), first run (s) | main(), median of %d (s) | ms per domain "
          "| round trips per stopped domain | per running domain | other round trips | peak RSS (MiB) |" % args.runs)
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for count, result in rows:
        per_domain, overhead, methods = calls_per_domain(result)
        running = {e["name"] for e in result["entries"] if e["libvirt_state"] == "running"}
        median = statistics.median(result["seconds"])
        print("| %d | %d | %.3f | %.3f | %.2f | %s | %s | %d | %.1f |" % (
            count, len(running), result["seconds"][0], median, 1000 * median / count,
            spread(n for name, n in per_domain.items() if name not in running),
            spread(n for name, n in per_domain.items() if name in running),
            overhead, result["peak_kib"] / 1024))
    count, result = rows[-1]
    per_domain, overhead, methods = calls_per_domain(result)
    running = [e for e in result["entries"] if e["libvirt_state"] == "running"]
    stopped = [e for e in result["entries"] if e["libvirt_state"] != "running"]
    print()
    if stopped:
        print("libvirt calls for a stopped domain: %s" % tally(methods[stopped[0]["name"]]))
    if running:
        print("libvirt calls for a running domain: %s; its address sources: %s" % (
            tally(methods[running[0]["name"]]), json.dumps(running[0]["ip_sources"])))
    print("Answered by libvirt-python itself, no round trip: %s" % ", ".join(result["client_side"]))
    print("Median time per call (counted listing, N=%d): %s" % (count, ", ".join(
        "%s %.2f ms (%d calls)" % (method, median, calls) for method, (calls, median) in call_times(result).items())))
    print("RSS of the measuring process after importing the module: %.1f MiB" % (result["rss_start_kib"] / 1024))
    if module_run:
        count, median, baseline = module_run
        print()
        print("| module run | N | wall, median of %d (s) |" % args.ansible_runs)
        print("|---|---:|---:|")
        print("| `ansible localhost -m egress_proxies.kvm.kvm_proxy_info -a uid=...` | %d | %.2f |" % (count, median))
        print("| `ansible localhost -m ansible.builtin.ping` (ansible's own cost) | - | %.2f |" % baseline)


if __name__ == "__main__":
    main()
