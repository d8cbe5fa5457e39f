"""docs/performance.md and docs/images/perf-*.png from one bench/run results file.

Every table puts this collection, the floor or the peer, the ratio and the
target side by side; a missed target says why and what would close it, with
the run's own figures. B2's figures are bench/b2_converge.py's
(bench/results/converge.json, which bench/run has it rewrite).
"""

import functools
import json
import os

from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(REPO_ROOT, "docs", "performance.md")
IMAGES = os.path.join(REPO_ROOT, "docs", "images")
CONVERGE_JSON = os.path.join(REPO_ROOT, "bench", "results", "converge.json")
MIB = 1 << 20


def mibps(size, seconds):
    return size / MIB / seconds if seconds > 0 else float("inf")


def met(ok):
    return "met" if ok else "**missed**"


def add_plot(plots, lines, name, figure, caption):
    """Queue ``figure`` to be saved as docs/images/``name`` and link it from the section's ``lines``."""
    figure.tight_layout()
    plots.append((name, figure))
    lines += ["", "![%s](images/%s)" % (caption, name)]


def section(bench, heading):
    """A section of the doc: ``build(results, data, plots)`` gives the lines under ``heading`` from the results of
    ``bench``; a benchmark the results lack gets a line naming the command that measures it."""
    def decorate(build):
        @functools.wraps(build)
        def built(results, plots):
            data = results.get(bench)
            if bench in results.get("failed", {}):
                return "%s\n\nFailed in this run (`bench/run --only %s` measures it again):\n\n```\n%s\n```\n" % (
                    heading, bench, results["failed"][bench].strip()[-1500:])
            if not data:
                return "%s\n\nNot run in the results files this page comes from: `bench/run --only %s` measures it.\n" % (
                    heading, bench)
            return "\n".join([heading, "", run_line(results, bench), ""] + build(results, data, plots)) + "\n"
        return built
    return decorate


def run_line(results, bench):
    """The sentence naming the run a section's figures come from: its file, the collection's commit, the kernel."""
    source, machine = results["run_of"][bench]
    return "Run: `%s`, started %s, collection %s%s, kernel %s, load average %s at its start." % (
        source, machine["started"], machine["collection_commit"],
        " (with uncommitted changes)" if machine["collection_dirty"] else "", machine["kernel"],
        " ".join(machine.get("load_average", [])) or "not recorded")


def new_plot(width, height):
    """A figure and its one axes; Figure draws with Agg itself, no pyplot or display needed."""
    figure = Figure(figsize=(width, height))
    return figure, figure.subplots()


def line_plot(series, title, xlabel, ylabel):
    """A figure of ``series`` ((xs, ys, style, label) each), y from 0, with its legend; and its axes."""
    figure, axes = new_plot(6, 3.4)
    for xs, ys, style, label in series:
        axes.plot(xs, ys, style, label=label)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_ylim(bottom=0)
    axes.set_title(title)
    axes.legend(fontsize="small")
    return figure, axes


def runs_of(results, bench):
    """How many runs the piece that measured ``bench`` made (pieces of one report may differ)."""
    return results.get("runs_of", {}).get(bench, results["runs"])


def runs_text(fig):
    return ", ".join("%.2f" % value for value in fig["runs"])


def b1_rows(b1):
    """[(size MiB, dict of derived figures)] of one collection's B1."""
    ping = b1["ping"]["median"]
    rows = []
    for size, row in sorted(b1["sizes"].items(), key=lambda item: int(item[0])):
        work = row["task"]["median"] - ping
        rows.append((int(size), {
            "work": work, "module": mibps(row["bytes"], work), "floor": mibps(row["bytes"], row["floor"]["median"]),
            "curl": mibps(row["bytes"], row["curl"]["median"]), "ratio": row["floor"]["median"] / work,
            "sha256": mibps(row["bytes"], row["sha256"]["median"]) if "sha256" in row else None,
            "rss": row["peak_rss_mib"], "rss_start": row["rss_after_imports_mib"], "row": row}))
    return rows


@section("B1", "## B1: caching a base image")
def b1_section(results, b1, plots):
    now = b1_rows(b1["now"])
    base = dict(b1_rows(b1["baseline"])) if "baseline" in b1 else {}
    lines = ["kvm_base_image caches a qcow2 image of incompressible data served over HTTP from 127.0.0.1 into the "
             "lab's dir pool (`bench/b1_image.py`). Module work is the task's wall time minus an "
             "`ansible.builtin.ping` task's (%.2f s here). The floor is `virsh vol-create-as` plus `virsh vol-upload` "
             "of the same file into the same pool; `curl` to /dev/null is the HTTP side alone. Peak RSS is VmHWM of "
             "a /usr/bin/python3 process running the module's `ensure_image`. Medians of %s runs (4 GiB: one run)." % (
                 b1["now"]["ping"]["median"], runs_of(results, "B1")), "",
             "| image | module work (s) | module (MiB/s) | `virsh vol-upload` (MiB/s) | ratio | target | `curl` (MiB/s) "
             "| peak RSS (MiB) | target |",
             "|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    misses = []
    for size, d in now:
        lines.append("| %d MiB | %.2f | %.0f | %.0f | %.2f | >= 0.8: %s | %.0f | %.1f | <= 80, flat: %s |" % (
            size, d["work"], d["module"], d["floor"], d["ratio"], met(d["ratio"] >= 0.8), d["curl"], d["rss"],
            met(d["rss"] <= 80)))
        if d["ratio"] < 0.8:
            misses.append((size, d))
    for size, reason in sorted(b1["now"].get("skipped", {}).items(), key=lambda item: int(item[0])):
        lines.append("| %s MiB | skipped: %s | | | | | | | |" % (size, reason))
    if now:
        rss = [d["rss"] for _size, d in now]
        lines += ["", "Peak RSS from the smallest to the largest image: %.1f to %.1f MiB (%.1f MiB after the imports)."
                  % (min(rss), max(rss), now[0][1]["rss_start"])]
    if base:
        lines += ["", "Before and after the change (baseline %s, same run, same files):" % results["baseline"], "",
                  "| image | before: module (MiB/s) | ratio | after: module (MiB/s) | ratio | peak RSS before / after (MiB) |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for size, d in now:
            if size in base:
                lines.append("| %d MiB | %.0f | %.2f | %.0f | %.2f | %.1f / %.1f |" % (
                    size, base[size]["module"], base[size]["ratio"], d["module"], d["ratio"], base[size]["rss"],
                    d["rss"]))
    if misses:
        worst = min(misses, key=lambda item: item[1]["ratio"])
        lines += ["", "**Where the target is missed** (%d MiB at %.2f of the floor): `virsh vol-upload` reads a local "
                  "file and sends it; the module also receives it over HTTP (`curl` alone: %.0f MiB/s here) and "
                  "hashes every byte (hashlib's SHA-256 alone: %s), each stage faster than the floor on its own. "
                  "They run overlapped, in threads of their own, but all at once they need more than this "
                  "machine's %d vCPUs: the HTTP server (a Python process on the same machine in this bench), the "
                  "receive and the hash, libvirt's client and libvirtd writing the volume. Receiving with "
                  "`readinto` into reused buffers instead of `iter_content` was measured and made no difference "
                  "beyond the runs' spread, and libvirt's stream takes bytes and 256 KiB messages already. Module "
                  "work also holds the module's start (the task minus a ping task, the AnsiballZ unpacking and "
                  "imports that a ping does not have), a larger share of the smaller images. What would close it: "
                  "cores to spare beside libvirtd's, as a hypervisor serving the image from elsewhere has." % (
                      worst[0], worst[1]["ratio"], worst[1]["curl"],
                      "not measured in this run" if worst[1]["sha256"] is None else "%.0f MiB/s" % worst[1]["sha256"],
                      results["machine"]["cpus"])]
    runs = ["%d MiB task %s, floor %s" % (size, runs_text(d["row"]["task"]), runs_text(d["row"]["floor"]))
            for size, d in now]
    lines += ["", "Runs (s): " + "; ".join(runs)]
    if now:
        sizes = [size for size, _d in now]
        series = [(sizes, [d["module"] for _s, d in now], "o-", "kvm_base_image (module work)")]
        if base:
            series.append(([s for s in sizes if s in base], [base[s]["module"] for s in sizes if s in base], "o--",
                           "kvm_base_image, baseline %s" % results["baseline"]))
        series += [(sizes, [d["floor"] for _s, d in now], "s-", "virsh vol-upload (floor)"),
                   (sizes, [d["curl"] for _s, d in now], "^:", "curl to /dev/null")]
        figure, axes = line_plot(series, "B1: throughput against image size", "image size", "MiB/s")
        axes.set_xscale("log", base=2)
        axes.set_xticks(sizes, ["%d MiB" % s if s < 1024 else "%d GiB" % (s // 1024) for s in sizes])
        add_plot(plots, lines, "perf-b1-throughput.png", figure, "B1 throughput against image size")
    return lines


# B3's paths: (label, key in a row of by_domains, this collection or the peer's colour).
B3_PATHS = (("kvm_proxy_info", "module", "C0"), ("kvm_proxies plugin", "plugin", "C0"),
            ("peer virt info", "peer_info", "C1"), ("peer libvirt plugin", "peer_plugin", "C1"),
            ("peer get_xml loop", "peer_get_xml_loop", "C1"))


def table_head(titles, aligns):
    """A markdown table's header and rule: ``aligns`` has an "r" (numbers) or "l" for each title."""
    return ["| " + " | ".join(titles) + " |", "|" + "".join("---:|" if a == "r" else "---|" for a in aligns)]


def b3_get_xml_cells(rows, count, row):
    """The get_xml, speed-up and target cells of one B3 row; where the loop was not run, what it took at the largest N it ran."""
    if "peer_get_xml_loop" in row:
        speedup = row["peer_get_xml_loop"]["median"] / row["module"]["median"]
        return "%.2f | %.0fx | >= 15x: %s" % (row["peer_get_xml_loop"]["median"], speedup, met(speedup >= 15))
    ran = [(n, r) for n, r in rows if "peer_get_xml_loop" in r]
    if not ran:
        return "not run | - | >= 15x: not measured"
    n, r = ran[-1]
    return "not run at %d: %d x `get_xml` at %d took %.1f s | - | >= 15x: not measured at %d" % (
        count, n, n, r["peer_get_xml_loop"]["median"], count)


def b3_three_hypervisors(b3, cores):
    three = b3["three_hypervisors"]
    start = b3["inventory_start"]["median"]
    ours, peer = three["plugin"]["median"], three["peer_plugin"]["median"]
    lines = ["", "Both plugins over three hypervisors at once, %d managed domains on each: %s (the single lab's "
             "qemu:///system and the lab hypervisors over qemu+ssh). Ours reads them from one source with three "
             "entries (`qualify_hostnames`, the same domain names on each); community.libvirt's takes one URI a "
             "source, so three sources." % (three["domains_each"], ", ".join(three["hypervisors"])), ""]
    lines += table_head(["hypervisors x domains", "kvm_proxies plugin (s)", "controller CPU (s)",
                         "community.libvirt.libvirt, 3 sources (s)", "peer / ours", "target"], "rrrrrl")
    lines.append("| %d x %d | %.2f | %.2f | %.2f | %.2fx | <= 2 s: %s |" % (
        len(three["hypervisors"]), three["domains_each"], ours, three["plugin_controller_cpu_seconds"], peer,
        peer / ours, met(ours <= 2)))
    if ours > 2:
        work = ours - start
        domains = len(three["hypervisors"]) * three["domains_each"]
        rows = sorted((int(count), row["plugin"]["median"]) for count, row in b3["by_domains"].items())
        lines += ["", "**Where the target is missed** (%d x %d in %.2f s): ansible-inventory's own start-up is %.2f s "
                  "of it (a one-host static source), which leaves %.2f s of the target for the plugin's work; it took "
                  "%.2f s. The three hypervisors are read at once (`_inventory.read_each`), but they overlap only in "
                  "their waiting: the controller spent %.2f CPU-seconds of the %.2f s (ansible-inventory and the ssh "
                  "clients), on %d vCPUs shared with lab-hv1's and lab-hv2's libvirtd and sshd." % (
                      len(three["hypervisors"]), three["domains_each"], ours, start, 2 - start, work,
                      three["plugin_controller_cpu_seconds"], ours, cores)]
        if len(rows) > 1:
            (low, low_s), (high, high_s) = rows[0], rows[-1]
            slope = (high_s - low_s) / (high - low)
            lines[-1] += (" On one hypervisor the plugin's time grows %.1f ms per domain from %d to %d domains: %d "
                          "domains at that rate are %.2f s before any connection is made, and the target leaves "
                          "%.1f ms per domain with nothing for the connections." % (
                              1000 * slope, low, high, domains, domains * slope, 1000 * (2 - start) / domains))
        lines[-1] += (" What would close it: less of the controller's Python per domain (a profile of one plugin run "
                      "is the next step, to place it between the listing's calls, the XML parse and Ansible's host "
                      "variables and groups); for inventories read often, the plugin's cache (`cache: true`) leaves a "
                      "run within its timeout only the start-up.")
        if all(row["peer_plugin"]["median"] < row["plugin"]["median"] for row in b3["by_domains"].values()):
            lines[-1] += (" community.libvirt's plugin, faster on one hypervisor at every N here, parses no XML: owner "
                          "and creation time are left in each host's `xml_desc` for the user to read.")
    return lines


def counted_at(entry):
    """Whether ``entry``'s libvirt calls were counted at libvirt-python (the bench's way since 2026-12-03).

    Results from before that counted the calls of the collection's own libvirt seam: their text says so.
    """
    return entry.get("counted") == "libvirt-python"


B3_COUNTED = {
    True: "libvirt calls are counted at libvirt-python, in kvm_proxy_info's main() on /usr/bin/python3: every "
          "method call of its connection and domain objects, the connection's own included; a domain's `name` is "
          "answered by libvirt-python itself, so the round trips are the calls without it.",
    False: "libvirt calls are counted through a wrapper around the collection's seam (its `Hypervisor` methods, "
           "around the listing, the connection's opening left out); the bench counts at libvirt-python now.",
}


@section("B3", "## B3: listing managed domains")
def b3_section(results, b3, plots):
    rows = sorted(((int(count), row) for count, row in b3["by_domains"].items()), key=lambda item: item[0])
    lines = ["N stopped domains with the collection's metadata in the lab pool (`bench/b3_listing.py`). The module "
             "and the plugin return owner (uid) and creation time for each. community.libvirt %s (from `ansible` "
             "%s) has `virt command=info`, without metadata or uuid; its inventory plugin community.libvirt.libvirt, "
             "which gives every domain of the hypervisor with its whole XML (the metadata in it, unparsed, no filter "
             "by owner); and `virt command=get_xml` per domain, the only module way it offers to read the metadata "
             "(a loop of N tasks, one run, only up to %d domains). %s Medians of %s runs; Ansible's own cost: a ping "
             "task %.2f s, an `ansible-inventory` run over a one-host static source %.2f s." % (
                 b3["peer_version"], results["peer"].split("==")[1], b3["get_xml_up_to"], B3_COUNTED[counted_at(rows[-1][1])],
                 runs_of(results, "B3"), b3["ping"]["median"], b3["inventory_start"]["median"]), ""]
    lines += table_head(["domains", "kvm_proxy_info (s)", "kvm_proxies plugin, 1 hypervisor (s)", "peer `virt info` (s)",
                         "peer libvirt plugin (s)", "peer N x `get_xml` (s)", "speed-up over get_xml", "target",
                         "round trips per domain", "target"], "rrrrrrrlrl")
    for count, row in rows:
        trips = max(row["round_trips_per_domain"]) if row["round_trips_per_domain"] else 0
        lines.append("| %d | %.2f | %.2f | %.2f | %.2f | %s | %d | <= 4: %s |" % (
            count, row["module"]["median"], row["plugin"]["median"], row["peer_info"]["median"],
            row["peer_plugin"]["median"], b3_get_xml_cells(rows, count, row), trips, met(trips <= 4)))
    last = rows[-1][1]
    lines += ["", "Calls per domain: %s (%s), of which %s are round trips (a domain's `name` is answered by "
              "libvirt-python itself); other %s per listing: %d." % (
                  "/".join(str(c) for c in last["calls_per_domain"]), ", ".join("`%s`" % m for m in last["methods"]),
                  "/".join(str(t) for t in last["round_trips_per_domain"]),
                  "round trips" if counted_at(last) else "calls", last["other_calls"])]
    if "three_hypervisors" in b3:
        lines += b3_three_hypervisors(b3, results["machine"]["cpus"])
    bars = [("%s, %d" % (label, count), row[key]["median"], colour)
            for count, row in rows for label, key, colour in B3_PATHS if key in row]
    if "three_hypervisors" in b3:
        three = b3["three_hypervisors"]
        size = "%d x %d" % (len(three["hypervisors"]), three["domains_each"])
        bars += [("kvm_proxies plugin, " + size, three["plugin"]["median"], "C0"),
                 ("peer libvirt plugin, " + size, three["peer_plugin"]["median"], "C1")]
    figure, axes = new_plot(6.4, 0.8 + 0.3 * len(bars))
    shown = bars[::-1]
    axes.barh([label for label, _s, _c in shown], [seconds for _l, seconds, _c in shown],
              color=[colour for _l, _s, colour in shown])
    axes.set_xscale("log")
    axes.xaxis.set_minor_formatter(NullFormatter())
    ticks = [tick for tick in (1, 2, 5, 10, 20, 50, 100, 200) if tick <= 2 * max(seconds for _l, seconds, _c in bars)]
    axes.set_xticks(ticks, [str(tick) for tick in ticks])
    axes.set_xlabel("seconds (log scale)")
    axes.set_title("B3: listing (blue: this collection, orange: community.libvirt)", fontsize="medium")
    add_plot(plots, lines, "perf-b3-listing.png", figure, "B3 listing")
    return lines


@section("B6", "## B6: the inventory plugin over many hypervisor entries")
def b6_section(results, b6, plots):
    lines = ["`ansible-inventory --list` with the kvm_proxies plugin over 1, 5 and 20 entries, each a qemu+ssh "
             "connection of its own to %s (each named several times, as a large fleet would be; "
             "`bench/b6_inventory.py`). Ansible's start-up is in every figure. Medians of %s runs. SSH connection "
             "sharing: the lab's ssh_config shares one connection per hypervisor (`ControlMaster auto`, "
             "`ControlPersist 60`), so a run within a minute of another opens sessions on the open connections; "
             "without sharing (the same ssh_config without those lines, in the same run), every entry is a key "
             "exchange of its own. `cold`: the first run of each count with no shared connection open yet." % (
                 " and ".join(b6["hypervisors"]), runs_of(results, "B6")), ""]
    labels = sorted(b6["by"], key=lambda label: ("now", "unshared").index(label) if label in ("now", "unshared") else 2)
    names = {"now": "shared connections", "unshared": "without sharing"}
    names = [names.get(label, "baseline %s" % results.get("baseline")) for label in labels]
    header = "| entries | " + " | ".join("%s (s) | x one entry" % name for name in names) + " | shared, cold (s) | target |"
    lines += [header, "|---:|" + "---:|---:|" * len(labels) + "---:|---|"]
    entries = sorted(int(n) for n in b6["by"][labels[0]])
    now = b6["by"]["now"]
    for count in entries:
        cells = []
        for label in labels:
            one = b6["by"][label][str(entries[0])]["median"]
            value = b6["by"][label][str(count)]["median"]
            cells.append("%.2f | %.2f" % (value, value / one))
        ratio = now[str(count)]["median"] / now[str(entries[0])]["median"]
        target = "<= 2x: %s" % met(ratio <= 2) if count == max(entries) else ""
        cold = now[str(count)].get("cold")
        lines.append("| %d | %s | %s | %s |" % (count, " | ".join(cells), "-" if cold is None else "%.2f" % cold, target))
    one, most = now[str(entries[0])], now[str(entries[-1])]
    if "controller_cpu_seconds" in most:
        cpu = ["%s %.2f s at %d entry, %.2f s at %d" % (
            name, b6["by"][label][str(entries[0])]["controller_cpu_seconds"], entries[0],
            b6["by"][label][str(entries[-1])]["controller_cpu_seconds"], entries[-1])
            for label, name in zip(labels, names)]
        lines += ["", "Controller CPU (ansible-inventory and the ssh clients libvirt starts; a shared connection's "
                  "master runs detached and is not counted): %s." % "; ".join(cpu)]
    if most["median"] > 2 * one["median"] and "controller_cpu_seconds" in most:
        further = max(entries[-1] - entries[0], 1)
        per_entry = (most["median"] - one["median"]) / further
        cpu_per_entry = (most["controller_cpu_seconds"] - one["controller_cpu_seconds"]) / further
        lines += ["", "**Where the target is missed** (%d entries at %.2fx one, with shared connections): each further "
                  "entry costs %.3f s of the run although the controller spends %.3f CPU-seconds on it; the reads "
                  "overlap (up to 16 at once, `_inventory.read_each`), so the rest is the hypervisor's side of each "
                  "entry: sshd starts a shell and libvirt's helper for the session, libvirtd makes its handshake, and "
                  "here every lab hypervisor runs on the same %d vCPUs as the controller. On a fleet each "
                  "hypervisor does its own entries' share at once. What would close it here: libvirt's TLS "
                  "transport (`qemu+tls://`), which starts no process per connection." % (
                      entries[-1], most["median"] / one["median"], per_entry, cpu_per_entry, results["machine"]["cpus"])]
    series = [(entries, [b6["by"][label][str(n)]["median"] for n in entries], "o-", name)
              for label, name in zip(labels, names)]
    figure, _axes = line_plot(series, "B6: ansible-inventory with kvm_proxies", "hypervisor entries", "seconds")
    add_plot(plots, lines, "perf-b6-inventory.png", figure, "B6 inventory plugin")
    return lines


def seconds_text(value, missing="none"):
    return missing if value is None else "%.1f" % value


@section("B4", "## B4: provision to address")
def b4_section(results, b4, plots):
    module, floor, peer = b4["module"], b4["floor"], b4["peer"]
    overhead = module["playbook"] - floor["start_to_address"] if floor["start_to_address"] else None
    if peer["address_at"] is not None:
        ahead = met(module["playbook"] < peer["address_at"])
    elif module["playbook"] <= peer["cap"]:
        ahead = met(True)
    else:
        ahead = "undecided: the cap came before kvm_proxy's own address"
    boots = [boot for boot in (floor["start_to_address"],
                               module["address_at"] - (module["running_at"] or 0) if module["address_at"] else None,
                               peer["address_at"] - (peer["running_at"] or 0) if peer["address_at"] else None) if boot]
    boot_range = "%.0f-%.0f s" % (min(boots), max(boots)) if boots else "no boot reached an address"
    lines = ["The lab's real guest (TCG, 1 vCPU, 512 MiB) on the single lab's qemu:///system (`bench/b4_address.py`), "
             "one run of each path (a first boot to the agent's address took %s in this run, under TCG on this 2-vCPU "
             "machine, with the load). This collection: a "
             "playbook of one kvm_proxy task with `wait_for_ip`, the base image cached beforehand, timed from "
             "ansible-playbook's start to its end. The floor: the same domain with its overlay emptied again (a first "
             "boot once more), `virsh start` and `virsh domifaddr --source agent` every second. The peer: "
             "community.libvirt %s's `virt_install` (`ansible` %s has no `virt_cloud_instance`, the module the issue "
             "named; `virt_install` with `cloud_init` is its way to a cloud-init guest, with virt-install's own seed: the "
             "module passes a `user_data` dictionary on as `user-data.<key>=`, which virt-install refuses) on the "
             "same image as backing store, capped at %d s. A thread polling virsh every second notes when each domain first runs and when its "
             "agent first reports an address." % (boot_range, b4["peer_version"], results["peer"].split("==")[1], peer["cap"]), "",
             "| path | domain running (s) | agent address (s) | done (s) | over the floor (s) | target |",
             "|---|---:|---:|---:|---:|---|",
             "| kvm_proxy, `wait_for_ip` (Ansible included) | %s | %s | %.1f | %s | <= 5: %s |" % (
                 seconds_text(module["running_at"]), seconds_text(module["address_at"]), module["playbook"],
                 seconds_text(overhead), met(overhead is not None and overhead <= 5)),
             "| floor: `virsh start` + `domifaddr --source agent` | - | %s | %s | - | |" % (
                 seconds_text(floor["start_to_address"]), seconds_text(floor["start_to_address"])),
             "| community.libvirt `virt_install` | %s | %s | %.1f (%s) | %s | kvm_proxy ahead: %s |" % (
                 seconds_text(peer["running_at"]), seconds_text(peer["address_at"], "none within the cap"),
                 peer["task_seconds"], peer["ended"],
                 seconds_text(peer["address_at"] - floor["start_to_address"]
                              if peer["address_at"] and floor["start_to_address"] else None, "-"), ahead)]
    if module["address_at"] is not None:
        lines += ["", "kvm_proxy's run: the domain ran %.1f s after ansible-playbook started (Ansible's start-up, the "
                  "image check, the seed, the define), the agent reported its address %.1f s after that, and the "
                  "playbook ended %.1f s after the address." % (
                      module["running_at"] or 0, module["address_at"] - (module["running_at"] or 0),
                      module["playbook"] - module["address_at"])]
    if overhead is not None and overhead > 5:
        boot = module["address_at"] - (module["running_at"] or 0) if module["address_at"] else None
        after = module["playbook"] - (module["address_at"] or module["playbook"])
        own = (module["running_at"] or 0) + after
        lines += ["", "**Where the target is missed** (%.1f s over the floor). kvm_proxy's own share is %.1f s: %.1f s "
                  "before the domain runs (Ansible's start-up, the image check, the seed, the define) and %.1f s "
                  "between the agent's address and the playbook's end (the module asks every %g s, "
                  "`_addresses.POLL_INTERVAL`, as the floor does). The other %.1f s is the boot itself: "
                  "%s s here against the floor's %.1f s, one TCG boot each on %d vCPUs shared with other work, which "
                  "varies by more than the target from one boot to the next. What would close it: runs on a quiet "
                  "machine, several of each path, to tell the boot's noise from the module's cost; then fewer tasks "
                  "before the define." % (
                      overhead, own, module["running_at"] or 0, after, b4["poll_interval"], overhead - own,
                      seconds_text(boot), floor["start_to_address"], results["machine"]["cpus"])]
    if peer["address_at"] is not None and module["playbook"] >= peer["address_at"]:
        lines += ["", "**Where the target is missed** (kvm_proxy's address %.1f s after its start, the peer's %.1f s): "
                  "both are one first boot of the same image under TCG, and kvm_proxy ended %.1f s after the floor's "
                  "own boot, so the difference is the boots' spread, not the module: one boot here varies by more "
                  "than the gap from one run to the next. What would close it: several boots of each path on a quiet "
                  "machine (each a boot, %s here), compared by their medians." % (
                      module["playbook"], peer["address_at"], module["playbook"] - floor["start_to_address"], boot_range)]
    if "seed_cdrom_bus" in peer:
        lines += ["", "virt-install gave the peer's guest its seed on a %s cdrom (Debian's cloud kernel has no driver for "
                  "SATA, so cloud-init there finds no seed) and %s guest agent channel." % (
                      peer["seed_cdrom_bus"], "a" if peer["agent_channel"] else "no")]
    if peer["address_at"] is None and floor["start_to_address"] and floor["start_to_address"] > peer["cap"]:
        lines += ["", "In this run the floor's own boot took %.0f s, longer than the peer's %d s cap: the peer's "
                  "missing address says only that the cap came first." % (floor["start_to_address"], peer["cap"])]
    lines += ["", "What the peer did: %s; the last lines of its output:" % peer["ended"], "", "```",
              peer["output_tail"].strip()[-800:], "```"]
    return lines


@section("B5", "## B5: fan-out over hypervisors")
def b5_section(results, b5, plots):
    lines = ["playbooks/deploy.yml creates %d non-booting proxies (the lab's small image) on each hypervisor, then "
             "playbooks/destroy.yml removes them, with forks 1 and with one fork per hypervisor (`bench/b5_fanout.py`). "
             "The hypervisors: %s; the third is the single lab's own libvirtd on this machine (connection local): a "
             "third lab hypervisor (`EGRESS_LAB_HYPERVISORS=3`) would change the lab the other tests share, and the "
             "bare host has no libvirt before prepare.yml. Medians of %s runs, ansible-playbook's start to its end." % (
                 b5["proxies_per_hypervisor"], ", ".join(b5["hypervisors"]), runs_of(results, "B5")), ""]
    lines += table_head(["hypervisors", "create, forks 1 (s)", "create, forks N (s)", "speed-up", "destroy, forks 1 (s)",
                         "destroy, forks N (s)", "speed-up", "target"], "rrrrrrrl")
    missed = None
    for count in sorted({row["hypervisors"] for row in b5["by"].values()}):
        serial, parallel = b5["by"]["%d/1" % count], b5["by"]["%d/%d" % (count, count)]
        speedup = parallel["speedup"]
        target = ""
        if count == 2:
            target = ">= 1.7x with 2 forks: %s" % met(speedup["create"] >= 1.7)
            if speedup["create"] < 1.7:
                missed = speedup["create"]
        lines.append("| %d | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx | %s |" % (
            count, serial["create"]["median"], parallel["create"]["median"], speedup["create"],
            serial["destroy"]["median"], parallel["destroy"]["median"], speedup["destroy"], target))
    runs = ["%s hypervisor(s), forks %d: create %s, destroy %s" % (
        row["hypervisors"], row["forks"], runs_text(row["create"]), runs_text(row["destroy"]))
        for _key, row in sorted(b5["by"].items())]
    lines += ["", "Runs (s): " + "; ".join(runs)]
    if missed is not None:
        # With forks 1 the run is S + 2 W (S: what one fork per hypervisor cannot overlap; W: one hypervisor's
        # share), with forks 2 it is S + W: the two medians give both. 1.7x = (S + 2 W) / (S + W) at S = 0.3 W / 0.7.
        serial, parallel = b5["by"]["2/1"]["create"]["median"], b5["by"]["2/2"]["create"]["median"]
        share = serial - parallel
        lines += ["", "**Where the target is missed** (%.2fx): the create with forks 1 (%.1f s) and with forks 2 "
                  "(%.1f s) split into %.1f s per hypervisor, which the forks overlap, and %.1f s they do not: the "
                  "target needs that second part below %.1f s at this share per hypervisor. The part that does not overlap is "
                  "ansible-playbook's start-up and the linear strategy, which ends each of the role's tasks when its "
                  "slowest hypervisor does, on the same %s vCPUs that run the hypervisors' libvirtd, sshd and the "
                  "modules' Python. As the role's own work per hypervisor shrank (its templating, rendered once per "
                  "run now), that fixed part became the larger share. What would close it: fewer tasks in the role "
                  "before and after the converge, each one a wait for the slowest hypervisor." % (
                      missed, serial, parallel, share, parallel - share, share * 0.3 / 0.7, results["machine"]["cpus"])]
    return lines


@section("B7", "## B7: provision to verified egress")
def b7_section(results, b7, plots):
    deploy, bare = b7["deploy"], b7["bare_boot_to_address"]
    first = deploy["first_request_at"]
    overhead = first - bare if first is not None and bare is not None else None
    lines = ["The demo's real guest on %s over SSH (`bench/b7_egress.py`): playbooks/deploy.yml with inventories/lab, "
             "one proxy, timed from ansible-playbook's start to the first request proxied by the guest's squid from "
             "the hypervisor's LAN to the LAN's origin server (curl every second after the playbook). In the same run, "
             "the bare boot: the same domain, its overlay emptied again, `virsh start` to the agent's address polled "
             "with virsh every second. One run (each path one first boot under TCG, with the load)." % b7["host"], "",
             "| | seconds |", "|---|---:|",
             "| domain running, after the playbook's start | %s |" % seconds_text(deploy["running_at"]),
             "| agent address | %s |" % seconds_text(deploy["address_at"]),
             "| playbook done | %s |" % seconds_text(deploy["playbook"]),
             "| first proxied request | %s |" % seconds_text(first),
             "| bare boot: `virsh start` to the agent's address | %s |" % seconds_text(bare),
             "| overhead: first request - bare boot (target <= 5) | %s: %s |" % (
                 seconds_text(overhead, "-"), met(overhead is not None and overhead <= 5))]
    if overhead is not None and overhead > 5:
        lines += ["", "**Where the target is missed** (%.1f s): %.1f s pass before the domain runs (Ansible over SSH, "
                  "the role's validation, the image check, the seed, the define), the boot to the agent's address "
                  "took %.1f s against the bare boot's %.1f s, the playbook ended %.1f s after the address and squid "
                  "answered %.1f s after that (the module asks libvirt for the address every %g s). What would close "
                  "it: the role's checks and rendering on the controller inside the converge's own task (an action "
                  "plugin around kvm_proxy_set, as for B2w), the boots' own spread aside; and part "
                  "of the gap is squid starting after the agent, which `egress_proxy_wait_for_port: true` (off by "
                  "default and in this run) makes the playbook wait for, so no polling follows it." % (
                      overhead, deploy["running_at"] or 0, (deploy["address_at"] or 0) - (deploy["running_at"] or 0),
                      bare, (deploy["playbook"] or 0) - (deploy["address_at"] or 0),
                      first - (deploy["playbook"] or 0), b7["poll_interval"])]
    return lines


def outcome_text(outcomes):
    counts = {}
    for outcome in outcomes.values():
        counts[outcome or "none"] = counts.get(outcome or "none", 0) + 1
    return ", ".join("%d %s" % (count, outcome) for outcome, count in sorted(counts.items()))


def span_text(span):
    return "-" if not span else "%.1f (%.1f to %.1f)" % (span[1] - span[0], span[0], span[1])


@section("B8", "## B8: a policy change in place beside a rolling replacement")
def b8_section(results, b8, plots):
    policy, roll, count = b8["policy"], b8["roll"], b8["proxies"]
    ratio = b8["ratio"]
    enforced = [value for value in policy["enforced"].values() if value is not None]
    lines = ["%d running proxies of the demo's real guest on %s over SSH (`bench/b8_policy.py`, %d MiB each), "
             "playbooks/deploy.yml with inventories/lab. The policy change: the LAN's origin server in "
             "`egress_proxy_denied_destinations`, applied in place through each proxy's guest agent, timed from "
             "ansible-playbook's start until every proxy answers 403 for the origin (each polled every %g s from a "
             "thread of its own). In the same run, the rolling replacement of the same %d: the denied list removed "
             "again and `egress_proxy_memory_mib` %d (a machine change, `egress_proxy_max_unavailable` 1, each "
             "awaited), timed from ansible-playbook's start until every proxy, at its new address, answers 200 "
             "again. Converge: the role's kvm_proxy_set task, start to end, seconds after the playbook's start. "
             "One run; the %d proxies' own deploy, booting at once: playbook %s s, all answering %s s, all first "
             "boots done (the role's runcmd restarts the guest agent last; the policy change waits for it) %s s." % (
                 count, b8["host"], b8["memory_mib"], b8["poll_interval"], count, b8["rolled_memory_mib"], count,
                 seconds_text(b8["deploy"]["playbook"]), seconds_text(b8["deploy"]["all_served"]),
                 seconds_text(b8["deploy"].get("first_boots_done"))), "",
             "| | policy change in place | rolling replacement |", "|---|---:|---:|",
             "| every proxy enforces it (s) | %s | %s |" % (
                 seconds_text(policy["all_enforced"]), seconds_text(roll["all_served"])),
             "| playbook (s) | %s | %s |" % (seconds_text(policy["playbook"]), seconds_text(roll["playbook"])),
             "| converge task (s) | %s | %s |" % (span_text(policy["converge"]), span_text(roll["converge"])),
             "| converge task / %d proxies (s) | %s | %s |" % ((count,) + tuple(
                 "%.2f" % ((span[1] - span[0]) / count) if span else "-"
                 for span in (policy["converge"], roll["converge"]))),
             "| outcomes | %s | %s |" % (outcome_text(policy["outcomes"]), outcome_text(roll["outcomes"])),
             "| domain ids kept | %d of %d | %d of %d |" % (policy["ids_kept"], count, roll["ids_kept"], count),
             "| rolling / in place (target >= 10x) | %s: %s | |" % (
                 "-" if ratio is None else "%.1fx" % ratio, met(ratio is not None and ratio >= 10))]
    beyond = [(label, span[1] - playbook) for label, span, playbook in (
        ("policy change", policy["converge"], policy["playbook"]), ("rolling replacement", roll["converge"], roll["playbook"]))
        if span and span[1] > playbook]
    if beyond:
        lines += ["", "The converge task's span comes from the timeline callback's wall-clock times, the playbook's "
                  "time from the bench's monotonic clock. The span ends after the playbook did (%s), which no task "
                  "can: the two clocks disagree over that run, so that span is not exact (the playbook's time and "
                  "when each proxy answered are both monotonic)." % "; ".join(
                      "%s: %.1f s after" % (label, over) for label, over in beyond)]
    if enforced:
        lines += ["", "The first proxy enforced the policy %.1f s after the playbook's start, the last %.1f s%s." % (
            min(enforced), max(enforced), "" if len(enforced) == count else
            "; %d of %d never answered 403" % (count - len(enforced), count))]
    if ratio is not None and ratio < 10:
        lines += ["", "**Where the target is missed** (%.1fx): of the policy change's %.1f s, %.1f s pass before the "
                  "converge task starts (ansible-playbook's start-up and the role's tasks before it), which the roll "
                  "pays once too; the roll's %.1f s are %d boots one after another under TCG. The roll grows with N "
                  "and that fixed part does not, so the ratio is larger with more proxies; what would close it here: "
                  "fewer role tasks before the converge." % (
                      ratio, policy["all_enforced"], (policy["converge"] or [0])[0], roll["all_served"], count)]
    return lines


B9_PHASES = (("idle_unscraped", "idle, not scraped"), ("idle", "idle, scraped every %s"), ("load", "load, scraped every %s"))


@section("B9", "## B9: the exporter's cost beside squid")
def b9_section(results, b9, plots):
    phases, interval = b9["phases"], b9["scrape_interval"].replace("s", " s")
    load = phases["load"]["client"]
    lines = ["One proxy of the demo's real guest on %s over SSH (`bench/b9_exporter.py`, %d MiB, 1 vCPU under TCG), "
             "playbooks/deploy.yml with inventories/lab and the role's metrics on: prometheus-squid-exporter on the "
             "guest's loopback, squid serving its page on port %d, each request also sent to a syslog server on the "
             "LAN (%s). A Prometheus on the LAN (`tests/lab/monitoring.py`) scrapes the targets file the deploy wrote. "
             "Once squid answered and the first boot had ended, three phases of %d s: nothing scraped and nothing "
             "sent; scraped every %s; scraped while %d clients on the LAN send requests through the proxy to the LAN's "
             "origin server, each one after the other on a kept-alive connection of its own. CPU time (user + system) "
             "and memory read from the guest's /proc through its agent (`guest-exec`) at each phase's start and end, "
             "rates over the guest's own clock between the two reads; squid is its master, its kid and every process "
             "under them. The guest runs under TCG: every CPU figure is emulated time, many times what the same work "
             "takes on a real CPU; the ratios between them are what carries over. One run." % (
                 b9["host"], b9["memory_mib"], b9["metrics_port"], b9["syslog"], b9["phase_seconds"], interval,
                 load["clients"]), ""]
    lines += table_head(["phase", "exporter CPU (s)", "exporter CPU", "exporter RSS (MiB)", "squid CPU (s)", "squid CPU",
                         "squid RSS (MiB)", "exporter / squid CPU", "guest CPU busy"], "lrrrrrrrr")
    for key, label in B9_PHASES:
        phase = phases[key]
        exporter, squid = phase["exporter"], phase["squid"]
        share = "%.2f" % (exporter["cpu_seconds"] / squid["cpu_seconds"]) if squid["cpu_seconds"] else "-"
        lines.append("| %s (%.0f s) | %.2f | %.2f %% | %.1f | %.2f | %.2f %% | %.1f | %s | %.1f %% |" % (
            label.replace("%s", interval), phase["seconds"], exporter["cpu_seconds"], exporter["cpu_percent"],
            exporter["rss_mib"], squid["cpu_seconds"], squid["cpu_percent"], squid["rss_mib"], share,
            phase["guest_busy_percent"]))
    idle, unscraped, loaded = phases["idle"], phases["idle_unscraped"], phases["load"]
    squid_scrape = idle["squid"]["cpu_seconds"] - unscraped["squid"]["cpu_seconds"]
    scrapes = idle["scrape"]["scrapes"] or 0

    def ms(value):
        return "-" if value is None else "%.0f ms" % (1000 * value)

    lines += ["", "RSS at each phase's end. The exporter's grew from %.1f MiB before its first scrape to %.1f MiB under "
              "load; PSS (shared pages split between the processes) under load: exporter %.1f MiB, squid %.1f MiB (%d "
              "processes: %s); peak RSS (VmHWM, summed) exporter %.1f MiB, squid %.1f MiB." % (
                  unscraped["exporter"]["rss_mib"], loaded["exporter"]["rss_mib"], loaded["exporter"]["pss_mib"],
                  loaded["squid"]["pss_mib"], len(loaded["squid"]["processes"]),
                  ", ".join("`%s`" % name for name in loaded["squid"]["processes"]), loaded["exporter"]["hwm_mib"],
                  loaded["squid"]["hwm_mib"])]
    lines += ["", "Each scrape, as Prometheus saw it: %s on average idle and %s under load (at most %s and %s), %s "
              "samples; %s scrapes in the idle window, every one in both windows up: %s. Per scrape, idle, the exporter spent "
              "%s CPU-ms and squid %s CPU-ms more than when not scraped (the metrics port it serves, the cache manager "
              "page the exporter reads)." % (
                  ms(idle["scrape"]["duration_mean"]), ms(loaded["scrape"]["duration_mean"]),
                  ms(idle["scrape"]["duration_max"]), ms(loaded["scrape"]["duration_max"]),
                  "%.0f" % idle["scrape"]["samples"] if idle["scrape"]["samples"] else "-", "%.0f" % scrapes,
                  "yes" if idle["scrape"]["up_ratio"] == 1 and loaded["scrape"]["up_ratio"] == 1 else "no",
                  "%.0f" % (1000 * idle["exporter"]["cpu_seconds"] / scrapes) if scrapes else "-",
                  "%.0f" % (1000 * squid_scrape / scrapes) if scrapes else "-")]
    if idle["exporter"]["cpu_seconds"] and abs(loaded["exporter"]["cpu_seconds"] - idle["exporter"]["cpu_seconds"]) <= (
            0.25 * idle["exporter"]["cpu_seconds"]):
        lines[-1] += (" Under load the exporter's CPU stayed where it was idle (%.2f s against %.2f s): its cost is per "
                      "scrape, not per request." % (loaded["exporter"]["cpu_seconds"], idle["exporter"]["cpu_seconds"]))
    lines += ["", "The load: %d requests in %.1f s (%.1f a second; statuses %s; %d errors) and %d syslog lines received "
              "for them, one a request." % (
                  load["requests"], load["seconds"], load["rate"],
                  ", ".join("%s: %d" % item for item in sorted(load["statuses"].items())), load["errors"],
                  load["syslog_lines"])]
    return lines


@section("B10", "## B10: the module's start")
def b10_section(results, b10, plots):
    by = b10["by"]
    labels = [label for label in ("baseline", "now") if label in by]
    lines = ["Each module's no-op task on libvirt's test driver (`bench/b10_module_start.py`: test:///default, in "
             "the module's own process, so no libvirtd's handshake is in the figures; a listing of a uid no domain "
             "carries, the absent state of names that do not exist) with "
             "`ansible localhost -m` and /usr/bin/python3 %s. The payload is the AnsiballZ file Ansible built "
             "(ANSIBLE_KEEP_REMOTE_FILES), with the collection's module_utils files its zip holds; the import is a fresh "
             "/usr/bin/python3 importing the module from that zip, as AnsiballZ runs it, and the heavy libraries that "
             "import ran (in sys.modules after it). Medians of %s runs, and the import's fastest run: the machine is shared, "
             "and the least disturbed run is the closest to the import's own cost; ansible.builtin.ping's task beside them: %.2f s. %s" % (
                 results["machine"]["hypervisor_python"], results.get("runs_of", {}).get("B10", "the"),
                 b10["ping"]["median"],
                 "Baseline: the collection of %s, measured module by module beside the checkout's in the same run." % (
                     b10.get("baseline") or "an earlier commit")
                 if "baseline" in by else ""), ""]
    titles = ["module"]
    for label in labels:
        titles += ["payload KiB (%s)" % label, "module_utils files (%s)" % label, "import ms, median (min) (%s)" % label,
                   "libraries imported (%s)" % label, "task s (%s)" % label]
    lines += table_head(titles, "l" + "rrrlr" * len(labels))
    for module in by[labels[-1]]:
        cells = [module]
        for label in labels:
            row = by[label][module]
            imported = row["import"]
            cells += ["%.0f" % row["payload_kib"], "%d" % len(row["module_utils"]),
                      "%.0f (%.0f)" % (1000 * imported["median"], 1000 * min(imported["runs"])),
                      ", ".join(row["imported_libraries"]) or "none", "%.2f" % row["task"]["median"]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def address_plot(results, plots):
    """Time to first address for each path of B4 and B7, one bar each."""
    paths = []
    b4, b7 = results.get("B4"), results.get("B7")
    if b4:
        capped = "" if b4["peer"]["address_at"] else ": none by the %d s cap" % b4["peer"]["cap"]
        paths += [("B4 kvm_proxy wait_for_ip", b4["module"]["playbook"], "C0"),
                  ("B4 virsh start + domifaddr", b4["floor"]["start_to_address"], "C2"),
                  ("B4 virt_install (peer)" + capped,
                   b4["peer"]["address_at"] or b4["peer"]["cap"], "C1")]
    if b7:
        paths += [("B7 deploy.yml: agent address", b7["deploy"]["address_at"], "C0"),
                  ("B7 deploy.yml: first proxied request", b7["deploy"]["first_request_at"], "C0"),
                  ("B7 bare boot (virsh)", b7["bare_boot_to_address"], "C2")]
    paths = [path for path in paths if path[1] is not None]
    if not paths:
        return ""
    lines = ["## Time to first address, every path", ""]
    for bench in ("B4", "B7"):
        if results.get(bench):
            lines += ["%s's bars. %s" % (bench, run_line(results, bench)), ""]
    lines += ["B4 and B7 come from different runs, on different loads: compare the bars within each."]
    figure, axes = new_plot(6.4, 3.6)
    shown = axes.barh([path[0] for path in paths][::-1], [path[1] for path in paths][::-1],
                      color=[path[2] for path in paths][::-1])
    for path, bar_patch in zip(paths[::-1], shown):
        if "cap" in path[0]:
            # The cap, not an address: drawn hollow.
            bar_patch.set_fill(False)
            bar_patch.set_hatch("//")
            bar_patch.set_edgecolor(path[2])
    axes.set_xlabel("seconds after the start")
    axes.set_title("B4 and B7: time to first address")
    add_plot(plots, lines, "perf-address.png", figure, "Time to first address per path")
    return "\n".join(lines) + "\n"


def b2w_lines(figures, counts):
    """B2w: the whole no-op playbook beside a one-task ping playbook of the same run, and the loop's and the peer's."""
    pings = figures.get("ping_playbook")
    if not pings:
        return ["", "B2w (the whole no-op playbook over a one-task ping playbook) was not measured in this run, "
                "whose B2 bench predates it."]
    noop = figures["noop"]
    lines = ["", "B2w: the whole no-op playbook (wall seconds) beside a playbook of the one ping task, timed as often "
             "in the same run:", ""]
    lines += table_head(["no-op playbook", "the role (s)", "ping playbook (s)", "role / ping", "target <= 2x",
                         "kvm_proxy loop (s)", "community.libvirt (s)", "faster than both"], "lrrrlrrl")
    over, slower = [], []
    for count in counts:
        role, loop, peer = (noop[way][str(count)]["playbook"]["median"] for way in ("set", "loop", "peer"))
        ping = pings[str(count)]["median"]
        if role / ping > 2:
            over.append("%d (%.2fx)" % (count, role / ping))
        if role >= min(loop, peer):
            slower.append("%d (role %.1f s, loop %.1f s, peer %.1f s)" % (count, role, loop, peer))
        lines.append("| %d | %.2f | %.2f | %.2f | %s | %.2f | %.2f | %s |" % (
            count, role, ping, role / ping, met(role / ping <= 2), loop, peer, met(role < min(loop, peer))))
    if over or slower:
        # The role's playbook is Ansible's start and the ping task (the ping playbook), the converge task, and the
        # role's other tasks on the controller: what is left of the wall time.
        parts = []
        for count in counts:
            entry = noop["set"][str(count)]
            role, ping, converge = entry["playbook"]["median"], pings[str(count)]["median"], entry["task"]["median"]
            parts.append("%d: %.2f s = %.2f (the ping playbook) + %.2f (the converge task) + %.2f (the other tasks)" % (
                count, role, ping, converge, role - ping - converge))
        lines += ["", "**Where a target is missed** (B2w: over 2x the ping playbook at %s; not faster than the loop "
                  "and the peer at %s). The role's no-op playbook split by this run's medians, at %s. The other "
                  "tasks are the role's dozen on the controller: its argument spec, the fleet and instance checks, "
                  "the rendering of every proxy's texts (one lookup), the module's validation, the kept arguments and "
                  "the report. They grow little with the proxies, so their cost is the strategy's round per task "
                  "rather than work per proxy; the converge task's excess over the ping task is the module's start "
                  "(B10). What would close it: the checks, the rendering and the report inside the converge's own "
                  "task (an action plugin around kvm_proxy_set), which would leave Ansible's start, one task and the "
                  "module's start." % (", ".join(over) or "none", ", ".join(slower) or "none", "; ".join(parts))]
    return lines


def b10_set_text(results):
    """What B10 measured of kvm_proxy_set's start beside the earlier module, from its run."""
    b10 = results.get("B10")
    if not b10 or "kvm_proxy_set" not in b10["by"].get("now", {}):
        return "B10 measures the module's start (not in these results)."
    before, now = b10["by"]["baseline"]["kvm_proxy_set"], b10["by"]["now"]["kvm_proxy_set"]
    return ("B10 measured kvm_proxy_set's start beside the earlier module: the libraries its import loads went from "
            "%s to %s (import %.0f ms to %.0f ms, medians), while its payload stayed %.0f KiB (%.0f KiB before): the "
            "imports were cut, not the payload." % (
                ", ".join(before["imported_libraries"]), ", ".join(now["imported_libraries"]),
                before["import"]["median"] * 1000, now["import"]["median"] * 1000, now["payload_kib"],
                before["payload_kib"]))


@section("B2", "## B2: converging one hypervisor's set")
def b2_section(results, b2, plots):
    figures, calls = b2["figures"], b2["noop_calls"]
    noop = figures["noop"]
    counts = sorted(int(count) for count in noop["set"])
    big = "%d" % counts[-1]
    peer_changed = sorted({changed for runs in figures["noop_changed"]["peer"].values() for changed in runs})
    lines = ["`bench/b2_converge.py` on %s over SSH, the lab's small non-booting image, medians of %d runs. Every "
             "playbook opens with an `ansible.builtin.ping` task, so each figure has Ansible's fixed cost of the same "
             "run beside it. Task time: start to end of the converge task on the host (the fleet_timeline callback). "
             "This collection is the role's one kvm_proxy_set task. Beside it, the same desired state two other ways:"
             % (b2["host"], b2["runs"]), "",
             "- a loop of kvm_proxy tasks, one per proxy (how the role worked before kvm_proxy_set);",
             "- community.libvirt %s (`PEER_DEPLOY` and `PEER_DESTROY` in b2_converge.py). `get_url` caches the base "
             "with its checksum. Then one task per step loops over the proxies: an overlay on the base and a cloud-init "
             "seed (`virt_volume`), the domain defined (`virt command=define`, `ADD_MAC_ADDRESSES_FUZZY` so a redefine "
             "keeps the MAC) and running (`virt state=running`). Its time is from its first task's start to its last "
             "one's end. Its seed task reports a change at every run (`create_cidata_cdrom` always does), so its no-op "
             "is never `changed=0`: %s changed per no-op run here." % (
                 b2["peer_version"], " or ".join(str(changed) for changed in peer_changed)), ""]
    lines += table_head(["no-op converge", "kvm_proxy_set, the role (s)", "ping, same runs (s)", "set / ping", "target",
                         "kvm_proxy loop (s)", "community.libvirt (s)", "peer / set", "faster than the peer"], "rrrrlrrrl")
    missed_noop, slower = [], []
    for count in counts:
        row, loop, peer = (noop[way][str(count)]["task"]["median"] for way in ("set", "loop", "peer"))
        over_ping = row / noop["set"][str(count)]["ping"]["median"]
        if over_ping > 1.5:
            missed_noop.append(count)
        if peer <= row:
            slower.append("no-op %d" % count)
        lines.append("| %d %s | %.2f | %.2f | %.2f | <= 1.5: %s | %.2f | %.2f | %.2fx | %s |" % (
            count, "proxy" if count == 1 else "proxies", row, noop["set"][str(count)]["ping"]["median"], over_ping,
            met(over_ping <= 1.5), loop, peer, peer / row, met(peer > row)))
    lines.append("")
    lines += table_head(["%s proxies" % big, "kvm_proxy_set, the role (s)", "kvm_proxy loop (s)", "loop / set", "target",
                         "community.libvirt (s)", "peer / set", "faster than the peer"], "lrrrlrrl")
    missed_actions = []
    for action in ("create", "destroy"):
        entry = figures["%s_%s" % (action, big)]
        row, loop, peer = (entry[way]["task"]["median"] for way in ("set", "loop", "peer"))
        if loop / row < 5:
            missed_actions.append("%s at %.1fx" % (action, loop / row))
        if peer <= row:
            slower.append(action)
        lines.append("| %s | %.1f | %.1f | %.1fx | >= 5x: %s | %.1f | %.1fx | %s |" % (
            action, row, loop, loop / row, met(loop / row >= 5), peer, peer / row, met(peer > row)))
    lines += ["", "The whole playbook, as a user waits for it (wall seconds, ping included):", ""]
    lines += table_head(["playbook", "the role", "kvm_proxy loop", "community.libvirt"], "lrrr")
    ways = ("set", "loop", "peer")
    playbooks = [("no-op %d" % count, {way: noop[way][str(count)] for way in ways}) for count in counts]
    playbooks += [("%s %s" % (action, big), figures["%s_%s" % (action, big)]) for action in ("create", "destroy")]
    for label, entry in playbooks:
        lines.append("| %s | %.1f | %.1f | %.1f |" % ((label,) + tuple(entry[way]["playbook"]["median"] for way in ways)))
    role_tasks = {count: noop["set"][count]["playbook"]["median"] - noop["set"][count]["task"]["median"]
                  for count in (str(counts[0]), big)}
    lines += ["", "The role's playbook carries its own tasks besides the converge (validation on the controller, the "
              "rendering, the report): %.1f s of the no-op at %d proxy and %.1f s at %s, where the loop's and "
              "the peer's playbooks grow by the proxy." % (role_tasks[str(counts[0])], counts[0], role_tasks[big], big)]
    lines += b2w_lines(figures, counts)
    by_method = ", ".join("%s %d" % item for item in sorted(calls["by_method"].items(), key=lambda item: -item[1]))
    if counted_at(calls):
        lines += ["", "libvirt round trips of a no-op set of %d, counted at libvirt-python (every method call of its "
                  "connection, domain, pool, volume and stream objects in kvm_proxy_set's main(), run on /usr/bin/python3 "
                  "over qemu+ssh to %s; the %d calls of a domain's `name`, which libvirt-python answers itself, left out): "
                  "%.2f per proxy, %d in all (%s), %.2f s for main(), its connection included." % (
                      calls["proxies"], b2["host"], calls["client_side_calls"], calls["per_proxy"], calls["calls"],
                      by_method, calls["seconds"])]
    else:
        lines += ["", "libvirt calls of a no-op set of %d, counted through a wrapper around the collection's seam "
                  "(the set's flow in this process over qemu+ssh to %s): %.2f per proxy, %d in all (%s), %.2f s for "
                  "the whole flow (the bench counts at libvirt-python now: round trips of the module's main())." % (
                      calls["proxies"], b2["host"], calls["per_proxy"], calls["calls"], by_method, calls["seconds"])]
    if missed_noop or missed_actions or slower:
        first, last = noop["set"][str(counts[0])], noop["set"][big]
        create = figures["create_%s" % big]["set"]["task"]["median"]
        lines += ["", "**Where a target is missed** (no-op over ping at %s proxies%s%s):" % (
            ", ".join(str(count) for count in missed_noop) or "none",
            "; loop over set: " + ", ".join(missed_actions) if missed_actions else "",
            "; not faster than community.libvirt: " + ", ".join(slower) if slower else ""), ""]
        if missed_noop:
            lines.append(
                "- No-op: the role's converge task is flat in the number of proxies (%.2f s at %d, %.2f s at %s), "
                "and the set's %s for %d proxies takes %.2f s%s, so what is over the ping "
                "(%.2f s at %d) is the cost of one module task over SSH rather than work per proxy. That cost is "
                "sending the module and its module_utils (AnsiballZ), starting Python on the hypervisor with "
                "libvirt, and opening the connection. %s What would close the rest: a process on the "
                "hypervisor that keeps Python, libvirt-python and the connection between tasks (a persistent "
                "connection, as network collections have); an ordinary module task starts all three anew." % (
                    first["task"]["median"], counts[0], last["task"]["median"], big,
                    "main()" if counted_at(calls) else "whole flow", calls["proxies"], calls["seconds"],
                    " on its own, its connection included" if counted_at(calls) else " in the bench's process",
                    first["ping"]["median"], counts[0], b10_set_text(results)))
        if missed_actions:
            lines.append(
                "- Create of %s: the set takes %.1f s, %.2f s per proxy, with up to 8 proxies built at a time "
                "(`WORKERS` in `_proxy/flow.py`). Each build is an overlay, a seed, a define and a QEMU start; on "
                "this 2-vCPU machine, lab-hv1's libvirtd and the QEMU processes it starts share the two cores with "
                "the controller. What would close it: a profile of the builds against `virsh start` of as many "
                "defined domains, the floor of the starts alone." % (big, create, create / int(big)))
        if slower:
            lines.append("- community.libvirt was as fast or faster at: %s." % ", ".join(slower))
    runs = ["no-op %s: set %s, loop %s, peer %s" % ((count,) + tuple(
        runs_text(noop[way][str(count)]["task"]) for way in ("set", "loop", "peer"))) for count in counts]
    lines += ["", "Runs (task s): " + "; ".join(runs)]
    series = [(counts, [noop[way][str(count)]["task"]["median"] for count in counts], "o-", label)
              for way, label in (("set", "kvm_proxy_set (the role)"), ("loop", "kvm_proxy loop"),
                                 ("peer", "community.libvirt"))]
    figure, _axes = line_plot(series, "B2: no-op converge", "proxies on one hypervisor", "task seconds")
    add_plot(plots, lines, "perf-b2-converge.png", figure, "B2 converge time against the number of proxies")
    return lines


def merged(paths):
    """One results dict from the files of several bench/run pieces: machine and versions from the first,
    each benchmark from the last file that has it, the seconds added up; B2 from converge.json."""
    results = None
    for path in paths:
        with open(path) as handle:
            run = json.load(handle)
        if results is None:
            results = dict(run, sources=[], seconds=0, failed={}, piece_seconds={})
        results["sources"].append(os.path.relpath(path, REPO_ROOT))
        results.setdefault("loads", []).append("%s: %s" % (
            "+".join(key for key in sorted(set(run) | set(run.get("failed", {}))) if key[:1] == "B" and key[1:].isdigit()),
            " ".join(run["machine"].get("load_average", []))))
        results["seconds"] += run["seconds"]
        pieces = {key: value for key, value in run.items() if key[:1] == "B" and key[1:].isdigit()}
        results.update(pieces)
        results.setdefault("runs_of", {}).update(dict.fromkeys(pieces, run["runs"]))
        results.setdefault("run_of", {}).update(dict.fromkeys(pieces, (
            os.path.relpath(path, REPO_ROOT), dict(run["machine"], started=run.get("started", "not recorded")))))
        results["piece_seconds"].update(run.get("piece_seconds", {}))
        # A piece that failed in one file and was measured in a later one is measured.
        results["failed"].update(run.get("failed", {}))
        for key in pieces:
            results["failed"].pop(key, None)
    # B2 is b2_converge.py's: runs without it take its latest figures, whichever run wrote them.
    if "B2" not in results and os.path.exists(CONVERGE_JSON):
        with open(CONVERGE_JSON) as handle:
            results["B2"] = json.load(handle)
        results["run_of"]["B2"] = (os.path.relpath(CONVERGE_JSON, REPO_ROOT), dict(
            results["B2"].get("machine", {}), started=results["B2"].get("started", "not recorded")))
    return results


def write(paths):
    results = merged(paths)
    plots = []
    m = results["machine"]
    head = ("# Performance, side by side\n\n"
            "Generated by `bench/run` (`bench/suite.py`, `bench/report.py`) from %s: every figure below is from "
            "a run on the lab machine, each comparison measured beside it in the same run on the same work. "
            "Regenerate with `flock /tmp/egress-integration.lock bench/run`, or in pieces (`--only B4`, one "
            "benchmark per hold of the lab's lock) and then `bench/run --report-only <results.json> ...`. "
            "Benchmarks never run in the test command.\n\n"
            "Each section names the run its figures come from (file, commit, kernel); the table gives the first run's "
            "machine and versions.\n\n"
            "| | |\n|---|---|\n| run | from %s, %.0f s in all%s |\n| machine | %s vCPUs (%s), %s GiB, kernel %s |\n"
            "| libvirt, QEMU | %s; %s |\n| load average at the start of each piece | %s (the lab machine is shared) |\n"
            "| Ansible | %s, modules on Python %s |\n| collection | %s%s |\n"
            "| peer | community.libvirt from `%s`, in its own virtualenv |\n" % (
                ", ".join("`%s`" % source for source in results["sources"]), results["started"], results["seconds"],
                "".join("; %s %.0f s" % item for item in sorted(results["piece_seconds"].items())), m["cpus"],
                m["cpu_model"], m["memory_gib"], m["kernel"], m["libvirt"], (m["qemu"] or "").splitlines()[0], "; ".join(results["loads"]),
                m["ansible_core"], m["hypervisor_python"], m["collection_commit"],
                " (with uncommitted changes)" if m["collection_dirty"] else "", results["peer"]))
    body = [head, b1_section(results, plots), b2_section(results, plots),
            b3_section(results, plots), b4_section(results, plots), b5_section(results, plots), b6_section(results, plots),
            b7_section(results, plots), address_plot(results, plots), b8_section(results, plots), b9_section(results, plots),
            b10_section(results, plots)]
    os.makedirs(IMAGES, exist_ok=True)
    for name, figure in plots:
        figure.savefig(os.path.join(IMAGES, name), dpi=110)
    with open(DOC, "w") as handle:
        handle.write("\n".join(body))
    print("wrote %s and %d plot(s)" % (os.path.relpath(DOC, REPO_ROOT), len(plots)))
