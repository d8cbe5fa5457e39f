"""bench/run: every benchmark of issue 19 (and issue 42's B14, issue 43's B15) on the lab, one JSON file of results,
docs/performance.md and plots.

Usage (as root, lab up, under the integration lock):

    flock /tmp/egress-integration.lock bench/run [--only B1,B6] [--runs 3] [--proxies 10] [--baseline COMMIT]
    bench/run --report-only bench/results/<run>.json ...  # regenerate the doc and plots from runs

--baseline runs B1 and B6 a second time with the collection of that commit
(unpacked from git), for the before/after of a change. B2 is bench/b2_converge.py
(its own script, writing bench/results/converge.json); it is run when present and its
JSON is folded into this run's.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench import (
    b1_image,
    b3_listing,
    b4_address,
    b5_fanout,
    b6_inventory,
    b7_egress,
    b8_policy,
    b9_exporter,
    b10_module_start,
    b14_ha_group,
    b15_profiles,
    report,
)
from bench._common import (
    BUILD_COLLECTIONS,
    CACHE,
    PEER_ANSIBLE,
    REPO_ROOT,
    adhoc,
    ansible_env,
    collections_of,
    machine,
    timed,
    utc_now_text,
)

RESULTS = os.path.join(REPO_ROOT, "bench", "results")
CONVERGE_JSON = os.path.join(RESULTS, "converge.json")
ALL = ("B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9", "B10", "B14", "B15")


def converge(runs):
    subprocess.run([sys.executable, "-m", "bench.b2_converge", "--runs", str(runs)], check=True, cwd=REPO_ROOT)
    with open(CONVERGE_JSON) as handle:
        return json.load(handle)


def save(results, path, started):
    results["seconds"] = round(time.monotonic() - started, 1)
    os.makedirs(RESULTS, exist_ok=True)
    with open(path, "w") as handle:
        json.dump(results, handle, indent=1, sort_keys=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--only", default=",".join(ALL), help="comma-separated benchmark ids (default: all)")
    parser.add_argument("--runs", type=int, default=3, help="repetitions of each timed step (4 GiB: once)")
    parser.add_argument("--sizes", default="256,1024,4096", help="B1's image sizes in MiB")
    parser.add_argument("--entries", default="1,5,20", help="B6's hypervisor entry counts")
    parser.add_argument("--domains", default="100,1000", help="B3's domain counts")
    parser.add_argument("--proxies", type=int, default=10, help="B8's running proxies (a policy change, then a roll)")
    parser.add_argument("--baseline", help="a commit whose collection B1, B6 and B10 also run, for before/after")
    parser.add_argument("--report-only", metavar="JSON", nargs="+",
                        help="only regenerate docs/performance.md and the plots, from these results files (each "
                             "benchmark from the last file that has it)")
    args = parser.parse_args()
    if args.report_only:
        report.write(args.report_only)
        return
    only = set(args.only.upper().split(","))
    started = time.monotonic()
    results = {"started": utc_now_text(),
               "machine": machine(), "runs": args.runs, "peer": PEER_ANSIBLE}
    path = os.path.join(RESULTS, "run-%s.json" % results["started"].replace(":", "").replace("+0000", "Z"))
    os.makedirs(CACHE, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-run-", dir=CACHE) as workdir:
        # Ansible's first run on a machine compiles and caches; no benchmark should pay for it.
        timed(adhoc("ansible.builtin.ping", ""), env=ansible_env(BUILD_COLLECTIONS))
        labels = {"now": BUILD_COLLECTIONS}
        if args.baseline:
            labels["baseline"] = collections_of(args.baseline, workdir)
            results["baseline"] = args.baseline
        sizes = [int(size) for size in args.sizes.split(",")]
        pieces = {
            # The baseline skips the 4 GiB image: a before/after at 1 GiB says as much, in a quarter of the time.
            "B1": lambda: {label: b1_image.run(collections, sizes if label == "now" else [s for s in sizes if s < 4096],
                                               args.runs)
                           for label, collections in labels.items()},
            "B2": lambda: converge(args.runs),
            "B3": lambda: b3_listing.run([int(n) for n in args.domains.split(",")], args.runs),
            "B4": lambda: b4_address.run(ansible_env(BUILD_COLLECTIONS)),
            "B5": lambda: b5_fanout.run(args.runs),
            "B6": lambda: b6_inventory.run(labels, [int(n) for n in args.entries.split(",")], args.runs),
            "B7": b7_egress.run,
            "B8": lambda: b8_policy.run(args.proxies),
            "B9": b9_exporter.run,
            "B10": lambda: b10_module_start.run(labels, args.runs, args.baseline),
            "B14": b14_ha_group.run,
            "B15": b15_profiles.run,
        }
        for bench in ALL:
            if bench in only:
                piece_started = time.monotonic()
                try:
                    results[bench] = pieces[bench]()
                except (RuntimeError, OSError, AssertionError, subprocess.CalledProcessError, SystemExit) as exc:
                    # One piece failing (a boot that never came, a playbook's error) leaves the others to measure;
                    # the doc says which failed and why.
                    results.setdefault("failed", {})[bench] = str(exc)[-2000:]
                    print("%s failed: %s" % (bench, exc), flush=True)
                results.setdefault("piece_seconds", {})[bench] = round(time.monotonic() - piece_started, 1)
                # Saved after every piece: a run stopped later keeps what it measured.
                save(results, path, started)
                print("%s ended (%.0f s)" % (bench, results["piece_seconds"][bench]), flush=True)
    save(results, path, started)
    print("results: %s (%.0f s)" % (os.path.relpath(path, REPO_ROOT), results["seconds"]))
    report.write([path])


if __name__ == "__main__":
    main()
