"""Cost of listing the fleet (kvm_proxy_info, the kvm_proxies inventory), on the local lab.

N managed domains named eptest-bench-<i> are defined in the lab pool (built with _domain_xml and
_metadata like the integration fleet, tiny qcow2 overlays and raw seeds); a few of them are started
(virt type qemu, cpu mode none, on the lab bridge; they need not boot), so the running path with its
address lookups is measured too. A fresh process on the hypervisor's Python (/usr/bin/python3 with
Debian's python3-libvirt 9.0) then times resolve_host + _inventory.list_proxies through a real
Hypervisor, and counts the seam calls per domain in one more listing through a counting proxy (every
public method call of the Hypervisor counts). The fleet grows from one N to the next; for the
largest N the module itself is timed through ``ansible localhost -m kvm_proxy_info``.

Usage (as root, lab up, from the checkout):  PYTHONPATH=build/collections .venv/bin/python -m bench.bench_proxy_info [N ...]
Default: 10 50 100, 3 of them running. Every domain and volume made here is removed afterwards,
also when the run fails or is interrupted.
"""

import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import uuid

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import NotFoundError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import overlay_volume_name, seed_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import DomainParams, NicInfo, build_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import UNDEFINE_ALL, Hypervisor
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import build_instance_element
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import is_active
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import VolumeSpec, build_volume_xml
from bench._common import BUILD_COLLECTIONS as COLLECTIONS
from bench._common import HYPERVISOR_PYTHON, REPO_ROOT, RSS_READER
from tests.lab import config

PREFIX = "eptest-bench-"
BENCH_DOMAIN = re.compile(r"eptest-bench-\d+")
OVERLAY_BYTES = 1 << 20
SEED_BYTES = 64 << 10

# Runs in the measured process: the module's own calls (resolve_host, then list_proxies), timed
# ``runs`` times, then once more through a proxy that records every seam call and its domain.
MEASURE = RSS_READER + r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])

from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.inventory import list_proxies, resolve_host
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import Hypervisor


class Counting:
    # Stands in for the Hypervisor: every public method call is recorded with the domain it is about.
    def __init__(self, target):
        self._target = target
        self.calls = []

    def __getattr__(self, name):
        attr = getattr(self._target, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def counted(*args, **kwargs):
            subject = args[0] if args else None
            # virDomain.name() is answered by the client library, not by a round trip.
            domain = subject.name() if type(subject).__name__ == "virDomain" else None
            started = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.calls.append((name, domain, time.perf_counter() - started))
        return counted


uri, uid, runs = sys.argv[2], sys.argv[3], int(sys.argv[4])
with Hypervisor.open(uri) as hypervisor:
    rss_start = rss_kib("VmRSS")
    seconds = []
    for _run in range(runs):
        started = time.perf_counter()
        entries, warnings = list_proxies(hypervisor, resolve_host(hypervisor), uid=uid)
        seconds.append(time.perf_counter() - started)
    peak = rss_kib("VmHWM")
    counting = Counting(hypervisor)
    counted_entries, counted_warnings = list_proxies(counting, resolve_host(counting), uid=uid)
print(json.dumps({
    "seconds": seconds, "rss_start_kib": rss_start, "peak_kib": peak, "calls": counting.calls,
    "entries": [{"name": e["name"], "libvirt_state": e["libvirt_state"], "ip_sources": e["ip_sources"]}
                for e in counted_entries],
    "warnings": warnings + counted_warnings,
}))
"""


def link_collection():
    """build/collections/ansible_collections/egress_proxies/kvm -> this checkout, as scripts/test makes it."""
    link = os.path.join(COLLECTIONS, "ansible_collections", "egress_proxies", "kvm")
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(REPO_ROOT, link)


def domain_xml(name, uid, pool_name, bridge):
    return build_domain_xml(DomainParams(
        name=name,
        metadata=build_instance_element(uid, datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0), "0" * 64),
        vcpus=1,
        memory_mib=128,
        pool=pool_name,
        overlay_volume=overlay_volume_name(name),
        seed_volume=seed_volume_name(name),
        interfaces=(NicInfo(mac=None, bridge=bridge, network=None),),
        virt_type=config.VIRT_TYPE,
        cpu_mode=config.CPU_MODE,
    ))


def grow_fleet(hypervisor, uid, first, count, running, pool_name=config.POOL_NAME, bridge=config.BRIDGE):
    """Define domains ``first`` .. ``count - 1`` with their volumes; start those below ``running``.

    The defaults are the single lab's pool and bridge; a lab hypervisor has its own (config.HV_POOL_NAME, HV_BRIDGE).
    """
    pool = hypervisor.lookup_pool(pool_name)
    for index in range(first, count):
        name = "%s%d" % (PREFIX, index)
        hypervisor.create_volume(pool, build_volume_xml(VolumeSpec(overlay_volume_name(name), OVERLAY_BYTES, "qcow2")))
        hypervisor.create_volume(pool, build_volume_xml(VolumeSpec(seed_volume_name(name), SEED_BYTES, "raw")))
        dom = hypervisor.define_domain(domain_xml(name, uid, pool_name, bridge))
        if index < running:
            hypervisor.start_domain(dom)


def remove_fleet(hypervisor, pool_name=config.POOL_NAME):
    """Remove every eptest-bench-<i> domain and volume in ``pool_name``, this run's or a failed earlier run's."""
    for dom in hypervisor.list_domains():
        if not BENCH_DOMAIN.fullmatch(hypervisor.domain_name(dom)):
            continue
        try:
            if is_active(hypervisor.domain_state(dom)):
                hypervisor.destroy_domain(dom)
            hypervisor.undefine_domain(dom, UNDEFINE_ALL)
        except NotFoundError:
            pass
    pool = hypervisor.lookup_pool(pool_name)
    hypervisor.refresh_pool(pool)
    for vol in hypervisor.list_volumes(pool):
        name = hypervisor.volume_name(vol)
        if any(BENCH_DOMAIN.fullmatch(name[:-len(suffix)]) for suffix in (".qcow2", "-seed.iso") if name.endswith(suffix)):
            try:
                hypervisor.delete_volume(vol)
            except NotFoundError:
                pass


def measure(uid, runs):
    completed = subprocess.run([HYPERVISOR_PYTHON, "-c", MEASURE, COLLECTIONS, config.LIBVIRT_URI, uid, str(runs)],
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        sys.exit("the measured listing failed:\n%s" % completed.stderr)
    return json.loads(completed.stdout)


def calls_per_domain(result):
    """({bench domain: number of calls}, calls about no domain or another domain, {bench domain: [method, ...]})."""
    per_domain, methods, overhead = {}, {}, 0
    for method, domain, _seconds in result["calls"]:
        if domain is None or not BENCH_DOMAIN.fullmatch(domain):
            overhead += 1
            continue
        per_domain[domain] = per_domain.get(domain, 0) + 1
        methods.setdefault(domain, []).append(method)
    return per_domain, overhead, methods


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
    with Hypervisor.open(config.LIBVIRT_URI) as hypervisor:
        others = sum(1 for dom in hypervisor.list_domains() if not BENCH_DOMAIN.fullmatch(hypervisor.domain_name(dom)))
        try:
            remove_fleet(hypervisor)
            defined = 0
            for count in sizes:
                grow_fleet(hypervisor, uid, defined, count, min(args.running, count))
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
            remove_fleet(hypervisor)
    report(rows, module_run, others, args)


def report(rows, module_run, others, args):
    print("Other domains on the hypervisor at the start: %d (each costs domain_name and domain_xml, in 'other calls' below"
          " with resolve_host's hostname and list_domains)" % others)
    print()
    print("| domains (N) | running | listing, first run (s) | listing, median of %d (s) | ms per domain "
          "| calls per stopped domain | calls per running domain | other calls | peak RSS (MiB) |" % args.runs)
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
        print("Calls for a stopped domain: %s" % ", ".join(methods[stopped[0]["name"]]))
    if running:
        print("Calls for a running domain: %s; its address sources: %s" % (
            ", ".join(methods[running[0]["name"]]), json.dumps(running[0]["ip_sources"])))
    print("Median time per call (counted listing, N=%d): %s" % (count, ", ".join(
        "%s %.2f ms (%d calls)" % (method, median, calls) for method, (calls, median) in call_times(result).items())))
    print("RSS of the measuring process after imports and connecting: %.1f MiB" % (result["rss_start_kib"] / 1024))
    if module_run:
        count, median, baseline = module_run
        print()
        print("| module run | N | wall, median of %d (s) |" % args.ansible_runs)
        print("|---|---:|---:|")
        print("| `ansible localhost -m egress_proxies.kvm.kvm_proxy_info -a uid=...` | %d | %.2f |" % (count, median))
        print("| `ansible localhost -m ansible.builtin.ping` (ansible's own cost) | - | %.2f |" % baseline)


if __name__ == "__main__":
    main()
