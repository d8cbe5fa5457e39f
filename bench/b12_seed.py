"""Time and memory of the cloud-init seed (kvm_seed, kvm_proxy's seed step), on the local lab.

For each user-data size, a fresh process on the hypervisor's Python (/usr/bin/python3 with Debian's
python3-libvirt 9.0 and python3-pycdlib 1.12, as the module runs there) runs kvm_seed's main() on seed
volume eptest-bench-seed-seed.iso in the lab pool, in four steps: check mode with the volume absent
(the image built, nothing written); the first run (build, create, upload); a run with the same
files (download, parse, compare: unchanged); a run with one file changed (meta-data gains a key:
download, parse, compare, delete, create, upload). Each step reports its wall time and the
process's peak resident memory during that step (the peak is reset before each step through
/proc/self/clear_refs).

Usage (as root, lab up, from the checkout):  PYTHONPATH=build/collections .venv/bin/python -m bench.b12_seed [USER_DATA_KIB ...]
Default sizes: 1 1024 8192 (1 KiB, 1 MiB, 8 MiB). The volume is removed afterwards, also when the run
fails or is interrupted.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys

from bench._common import BUILD_COLLECTIONS as COLLECTIONS
from bench._common import HYPERVISOR_PYTHON, REPO_ROOT, RSS_READER, RUN_MODULE
from tests.lab import config

NAME = "eptest-bench-seed"
# glibc's initial threshold, held fixed: buffers this large or larger are mapped for themselves and
# unmapped when freed, so a step's peak shows what the step holds, not heap kept from an earlier one.
MMAP_THRESHOLD = 128 * 1024

# Runs in the measured process: kvm_seed's main() on the hypervisor's Python, step by step.
MEASURE = RSS_READER + RUN_MODULE + r"""
import base64, os, time

def reset_peak():
    # Writing 5 resets VmHWM to the current RSS (Linux 4.0+).
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")

uri, pool, name, size, runs = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])

def user_data(size):
    # cloud-config with a comment block of incompressible text, exactly ``size`` bytes.
    head = b"#cloud-config\n"
    body = base64.encodebytes(os.urandom(size))
    text = head + b"".join(b"# " + line for line in body.splitlines(keepends=True))
    return (text[:size - 1] + b"\n").decode("ascii")

seed = dict(uri=uri, pool=pool, name=name, user_data=user_data(size))
changed = dict(seed, meta_data={"bench": "changed"})
absent = dict(uri=uri, pool=pool, name=name, state="absent")
steps = {}

def step(label, args):
    reset_peak()
    start = rss_kib("VmRSS")
    started = time.perf_counter()
    result = run_module("kvm_seed", args)
    seconds = time.perf_counter() - started
    steps.setdefault(label, []).append({"seconds": seconds, "rss_start_kib": start, "peak_kib": rss_kib("VmHWM")})
    return result

module_main("kvm_seed")
run_module("kvm_seed", absent)
rss_start = rss_kib("VmRSS")
try:
    for _run in range(runs):
        built = step("check mode, volume absent (the image built, nothing written)", dict(seed, _ansible_check_mode=True))
        first = step("first run (create + upload)", seed)
        same = step("unchanged (download + parse + compare)", seed)
        change = step("one file changed", changed)
        assert first["changed"] and not same["changed"] and change["changed_files"] == ["meta-data"], (first, same, change)
        run_module("kvm_seed", absent)
finally:
    run_module("kvm_seed", absent)
print(json.dumps({"user_data": len(seed["user_data"]), "image": built["size"], "rss_start_kib": rss_start, "steps": steps}))
"""


def remove_seed():
    """kvm_seed state=absent on the lab: the seed volume gone, whatever a killed run left."""
    completed = subprocess.run([HYPERVISOR_PYTHON, "-c", RUN_MODULE + 'run_module("kvm_seed", json.loads(sys.argv[2]))',
                                COLLECTIONS, json.dumps(dict(uri=config.LIBVIRT_URI, pool=config.POOL_NAME, name=NAME,
                                                             state="absent"))],
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        sys.exit("removing seed volume %s-seed.iso failed:\n%s" % (NAME, completed.stderr))


def on_signal(signum, frame):
    raise SystemExit("interrupted by signal %d" % signum)


def link_collection():
    """build/collections/ansible_collections/egress_proxies/kvm -> this checkout, as scripts/test makes it."""
    link = os.path.join(COLLECTIONS, "ansible_collections", "egress_proxies", "kvm")
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(REPO_ROOT, link)


def size_label(kib):
    return "%d MiB" % (kib // 1024) if kib % 1024 == 0 else "%d KiB" % kib


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[1, 1024, 8192], help="user-data sizes in KiB")
    parser.add_argument("--runs", type=int, default=5, help="rounds of the four steps per size (medians and maxima are reported)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    link_collection()
    results = []
    try:
        for kib in args.sizes:
            completed = subprocess.run(
                [HYPERVISOR_PYTHON, "-c", MEASURE, COLLECTIONS, config.LIBVIRT_URI, config.POOL_NAME, NAME, str(kib * 1024), str(args.runs)],
                capture_output=True, text=True, check=False, env=dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD)))
            if completed.returncode != 0:
                sys.exit("the seed run with %s of user-data failed:\n%s" % (size_label(kib), completed.stderr))
            results.append((kib, json.loads(completed.stdout)))
    finally:
        # The measured process removes its volume; this covers a process that was killed.
        remove_seed()
    print("| user-data | ISO (bytes) | step | median of %d (s) | RSS at step start (MiB) | peak RSS in step (MiB) "
          "| peak - start (MiB) |" % args.runs)
    print("|---|---:|---|---:|---:|---:|---:|")
    for kib, result in results:
        for label, rounds in result["steps"].items():
            worst = max(rounds, key=lambda entry: entry["peak_kib"] - entry["rss_start_kib"])
            print("| %s | %d | %s | %.3f | %.1f | %.1f | %.1f |" % (
                size_label(kib), result["image"], label, statistics.median(entry["seconds"] for entry in rounds),
                worst["rss_start_kib"] / 1024, worst["peak_kib"] / 1024, (worst["peak_kib"] - worst["rss_start_kib"]) / 1024))
    print()
    print("RSS of the measuring process after generating the user-data and importing the module: %s MiB" % ", ".join(
        "%.1f (%s)" % (result["rss_start_kib"] / 1024, size_label(kib)) for kib, result in results))


if __name__ == "__main__":
    main()
