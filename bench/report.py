"""docs/performance.md and docs/images/perf-*.png from one bench/run results file.

Every table puts this collection, the floor or the peer, the ratio and the
target side by side; a missed target says why and what would close it, with
the run's own figures. The "Converge" section (B2) is written by
bench/bench_converge.py's engineer: it is kept as it is in the current doc.
"""

import json
import os

from matplotlib.figure import Figure

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(REPO_ROOT, "docs", "performance.md")
IMAGES = os.path.join(REPO_ROOT, "docs", "images")
CONVERGE_HEADING = "## Converge"
CONVERGE_JSON = os.path.join(REPO_ROOT, "bench", "results", "converge.json")
MIB = 1 << 20


def mibps(size, seconds):
    return size / MIB / seconds if seconds > 0 else float("inf")


def met(ok):
    return "met" if ok else "**missed**"


def kept_section(heading):
    """The current doc's section under ``heading`` (to the next "## "), or None."""
    if not os.path.exists(DOC):
        return None
    with open(DOC) as handle:
        text = handle.read()
    start = text.find("\n" + heading + "\n")
    if start < 0:
        return None
    end = text.find("\n## ", start + 1)
    return text[start + 1:end if end >= 0 else len(text)].rstrip() + "\n"


def add_plot(plots, lines, name, figure, caption):
    """Queue ``figure`` to be saved as docs/images/``name`` and link it from the section's ``lines``."""
    figure.tight_layout()
    plots.append((name, figure))
    lines += ["", "![%s](images/%s)" % (caption, name)]


def not_run(heading):
    return "%s\n\nNot run in the results files this page comes from: `bench/run --only %s` measures it.\n" % (
        heading, heading.split(":")[0][3:])


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
            "rss": row["peak_rss_mib"], "rss_start": row["rss_after_imports_mib"], "row": row}))
    return rows


def b1_section(results, plots):
    b1 = results.get("B1")
    if not b1:
        return not_run("## B1: caching a base image")
    now = b1_rows(b1["now"])
    base = dict(b1_rows(b1["baseline"])) if "baseline" in b1 else {}
    lines = ["## B1: caching a base image", "",
             "kvm_base_image caches a qcow2 image of incompressible data served over HTTP from 127.0.0.1 into the "
             "lab's dir pool (`bench/b1_image.py`). Module work is the task's wall time minus an "
             "`ansible.builtin.ping` task's (%.2f s here). The floor is `virsh vol-create-as` plus `virsh vol-upload` "
             "of the same file into the same pool; `curl` to /dev/null is the HTTP side alone. Peak RSS is VmHWM of "
             "a /usr/bin/python3 process running the module's `ensure_image`. Medians of %s runs (4 GiB: one run, "
             "to keep `bench/run` under 15 minutes)." % (b1["now"]["ping"]["median"], runs_of(results, "B1")), "",
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
                  "file and sends it; the module also receives it over HTTP and hashes it. With the three overlapped "
                  "the module is bounded by the slowest stage plus the pool's write, so what is left is the "
                  "receive path in Python (requests' `iter_content` copies each chunk; `curl` alone reaches %.0f MiB/s "
                  "here) on a 2-vCPU machine where the receive, the hash and libvirt's client share two cores with "
                  "libvirtd writing the volume. What would close it: receiving with `readinto` into reused buffers "
                  "instead of a new bytes object per chunk from `iter_content`, hashing in a third thread, and "
                  "sending libvirt's stream its largest messages without the copy `upload_volume` makes per slice." % (
                      worst[0], worst[1]["ratio"], worst[1]["curl"])]
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
    return "\n".join(lines) + "\n"


def b3_section(results, plots):
    b3 = results.get("B3")
    if not b3:
        return not_run("## B3: listing managed domains")
    lines = ["## B3: listing managed domains", "",
             "N stopped domains with the collection's metadata in the lab pool (`bench/b3_listing.py`). The module "
             "and the plugin return owner (uid) and creation time for each; community.libvirt %s (from `ansible` "
             "%s) has `virt command=info`, without metadata or uuid, and `virt command=get_xml` per domain, the "
             "only way it offers to read the metadata (a loop of N tasks, one run). libvirt calls are counted "
             "through a wrapper around the seam. Medians of %s runs; Ansible's own cost (a ping task) %.2f s." % (
                 b3["peer_version"], results["peer"].split("==")[1], runs_of(results, "B3"), b3["ping"]["median"]), "",
             "| domains | kvm_proxy_info (s) | plugin, 1 hypervisor (s) | peer `virt info` (s) | peer N x `get_xml` (s) "
             "| speed-up over get_xml | target | round trips per domain | target |",
             "|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    for count, row in sorted(b3["by_domains"].items(), key=lambda item: int(item[0])):
        speedup = row["peer_get_xml_loop"]["median"] / row["module"]["median"]
        trips = max(row["round_trips_per_domain"]) if row["round_trips_per_domain"] else 0
        lines.append("| %s | %.2f | %.2f | %.2f | %.2f | %.0fx | >= 15x: %s | %d | <= 4: %s |" % (
            count, row["module"]["median"], row["plugin"]["median"], row["peer_info"]["median"],
            row["peer_get_xml_loop"]["median"], speedup, met(speedup >= 15), trips, met(trips <= 4)))
    last = sorted(b3["by_domains"].items(), key=lambda item: int(item[0]))[-1][1]
    lines += ["", "Calls per domain: %s (%s); other calls per listing: %d." % (
        "/".join(str(c) for c in last["calls_per_domain"]), ", ".join("`%s`" % m for m in last["methods"]),
        last["other_calls"]),
        "", "Not measured in this run: 1000 domains, and the plugin over 3 hypervisors x 100 (target <= 2 s). "
        "Defining 1000 domains, and 100 on each lab hypervisor over SSH, did not fit the 15-minute budget of "
        "`bench/run` on this 2-vCPU machine; `--domains 100,1000` runs the first."]
    counts = sorted(int(c) for c in b3["by_domains"])
    if counts:
        row = b3["by_domains"][str(counts[-1])]
        figure, axes = new_plot(6, 3.2)
        labels = ["kvm_proxy_info", "plugin", "peer virt info", "peer get_xml loop"]
        values = [row["module"]["median"], row["plugin"]["median"], row["peer_info"]["median"],
                  row["peer_get_xml_loop"]["median"]]
        axes.barh(labels, values, color=["C0", "C0", "C1", "C1"])
        axes.set_xscale("log")
        axes.set_xlabel("seconds (log scale)")
        axes.set_title("B3: listing %d domains" % counts[-1])
        add_plot(plots, lines, "perf-b3-listing.png", figure, "B3 listing")
    return "\n".join(lines) + "\n"


def b6_section(results, plots):
    b6 = results.get("B6")
    if not b6:
        return not_run("## B6: the inventory plugin over many hypervisor entries")
    lines = ["## B6: the inventory plugin over many hypervisor entries", "",
             "`ansible-inventory --list` with the kvm_proxies plugin over 1, 5 and 20 entries, each a qemu+ssh "
             "connection of its own to %s (each named several times, as a large fleet would be; "
             "`bench/b6_inventory.py`). Ansible's start-up is in every figure. Medians of %s runs." % (
                 " and ".join(b6["hypervisors"]), runs_of(results, "B6")), ""]
    labels = sorted(b6["by"], key=lambda label: label != "now")
    names = ["this collection" if label == "now" else "baseline %s" % results["baseline"] for label in labels]
    header = "| entries | " + " | ".join("%s (s) | x one entry" % name for name in names) + " | target |"
    lines += [header, "|---:|" + "---:|---:|" * len(labels) + "---|"]
    entries = sorted(int(n) for n in b6["by"][labels[0]])
    for count in entries:
        cells = []
        for label in labels:
            one = b6["by"][label][str(entries[0])]["median"]
            value = b6["by"][label][str(count)]["median"]
            cells.append("%.2f | %.2f" % (value, value / one))
        ratio = b6["by"]["now"][str(count)]["median"] / b6["by"]["now"][str(entries[0])]["median"]
        target = "<= 2x: %s" % met(ratio <= 2) if count == max(entries) else ""
        lines.append("| %d | %s | %s |" % (count, " | ".join(cells), target))
    now = b6["by"]["now"]
    one, most = now[str(entries[0])], now[str(entries[-1])]
    if "controller_cpu_seconds" in most:
        per_entry = (most["controller_cpu_seconds"] - one["controller_cpu_seconds"]) / max(entries[-1] - entries[0], 1)
        lines += ["", "Controller CPU (ansible-inventory and the ssh clients libvirt starts): %.2f s at %d entry, %.2f s "
                  "at %d: %.2f s per further entry." % (one["controller_cpu_seconds"], entries[0],
                                                        most["controller_cpu_seconds"], entries[-1], per_entry)]
        if most["median"] > 2 * one["median"]:
            cores = results["machine"]["cpus"]
            lines += ["", "**Where the target is missed** (%d entries at %.2fx one): the reads overlap (up to 16 at "
                      "once, `_inventory.read_each`), but each entry is an SSH session and a libvirt handshake that "
                      "cost %.2f s of CPU on the controller, and as much again in the hypervisor's sshd and "
                      "libvirtd, which in this lab run on the same %d vCPUs. %d entries need about %.1f CPU-seconds "
                      "beyond the first, %.1f s on %d cores: CPU, not waiting, is what is left. On a real fleet "
                      "the hypervisors' half runs on the hypervisors; what would close the rest is fewer handshakes "
                      "per entry: SSH connection sharing for qemu+ssh (`ControlMaster`/`ControlPersist` in the "
                      "controller's ssh config, which libvirt's ssh honours), or libvirt's TLS transport "
                      "(`qemu+tls://`), which starts no process per connection." % (
                          entries[-1], most["median"] / one["median"], per_entry, cores, entries[-1],
                          2 * per_entry * (entries[-1] - entries[0]),
                          2 * per_entry * (entries[-1] - entries[0]) / cores, cores)]
    series = [(entries, [b6["by"][label][str(n)]["median"] for n in entries], "o-",
               "this collection" if label == "now" else "baseline %s (one after another)" % results["baseline"])
              for label in labels]
    figure, _axes = line_plot(series, "B6: ansible-inventory with kvm_proxies", "hypervisor entries", "seconds")
    add_plot(plots, lines, "perf-b6-inventory.png", figure, "B6 inventory plugin")
    return "\n".join(lines) + "\n"


def seconds_text(value, missing="none"):
    return missing if value is None else "%.1f" % value


def b4_section(results):
    b4 = results.get("B4")
    if not b4:
        return not_run("## B4: provision to address")
    module, floor, peer = b4["module"], b4["floor"], b4["peer"]
    overhead = module["playbook"] - floor["start_to_address"] if floor["start_to_address"] else None
    if peer["address_at"] is not None:
        ahead = met(module["playbook"] < peer["address_at"])
    elif module["playbook"] <= peer["cap"]:
        ahead = met(True)
    else:
        ahead = "undecided: the cap came before kvm_proxy's own address"
    lines = ["## B4: provision to address", "",
             "The lab's real guest (TCG, 1 vCPU, 512 MiB) on the single lab's qemu:///system (`bench/b4_address.py`), "
             "one run of each path (a boot costs 40-240 s under TCG on this 2-vCPU machine, with the load). This collection: a "
             "playbook of one kvm_proxy task with `wait_for_ip`, the base image cached beforehand, timed from "
             "ansible-playbook's start to its end. The floor: the same domain with its overlay emptied again (a first "
             "boot once more), `virsh start` and `virsh domifaddr --source agent` every second. The peer: "
             "community.libvirt %s's `virt_install` (`ansible` %s has no `virt_cloud_instance`, the module the issue "
             "named; `virt_install` with `cloud_init` is its way to a cloud-init guest, with virt-install's own seed: the "
             "module passes a `user_data` dictionary on as `user-data.<key>=`, which virt-install refuses) on the "
             "same image as backing store, capped at %d s. A thread polling virsh every second notes when each domain first runs and when its "
             "agent first reports an address." % (b4["peer_version"], results["peer"].split("==")[1], peer["cap"]), "",
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
                  "between the agent's address and the playbook's end (the module asks every 2 s, "
                  "`_proxy_execute.POLL_INTERVAL`; the floor every second). The other %.1f s is the boot itself: "
                  "%s s here against the floor's %.1f s, one TCG boot each on 2 vCPUs shared with other work, which "
                  "varies by more than the target from one boot to the next. What would close it: runs on a quiet "
                  "machine, several of each path, to tell the boot's noise from the module's cost; then a 1 s poll "
                  "once the domain runs, and fewer tasks before the define." % (
                      overhead, own, module["running_at"] or 0, after, overhead - own, seconds_text(boot),
                      floor["start_to_address"])]
    if "seed_cdrom_bus" in peer:
        lines += ["", "virt-install gave the peer's guest its seed on a %s cdrom (Debian's cloud kernel has no driver for "
                  "SATA, so cloud-init there finds no seed) and %s guest agent channel." % (
                      peer["seed_cdrom_bus"], "a" if peer["agent_channel"] else "no")]
    if peer["address_at"] is None and floor["start_to_address"] and floor["start_to_address"] > peer["cap"]:
        lines += ["", "In this run the floor's own boot took %.0f s, longer than the peer's %d s cap: the peer's "
                  "missing address says only that the cap came first." % (floor["start_to_address"], peer["cap"])]
    lines += ["", "What the peer did: %s; the last lines of its output:" % peer["ended"], "", "```",
              peer["output_tail"].strip()[-800:], "```"]
    return "\n".join(lines) + "\n"


def b5_section(results):
    b5 = results.get("B5")
    if not b5:
        return not_run("## B5: fan-out over hypervisors")
    lines = ["## B5: fan-out over hypervisors", "",
             "playbooks/deploy.yml creates %d non-booting proxies (the lab's small image) on each hypervisor, then "
             "playbooks/destroy.yml removes them, with forks 1 and with one fork per hypervisor (`bench/b5_fanout.py`). "
             "The hypervisors: %s; the third is the single lab's own libvirtd on this machine (connection local): a "
             "third lab hypervisor (`EGRESS_LAB_HYPERVISORS=3`) would change the lab the other tests share, and the "
             "bare host has no libvirt before prepare.yml. Medians of %s runs, ansible-playbook's start to its end." % (
                 b5["proxies_per_hypervisor"], ", ".join(b5["hypervisors"]), runs_of(results, "B5")), "",
             "| hypervisors | create, forks 1 (s) | create, forks N (s) | speed-up | destroy, forks 1 (s) "
             "| destroy, forks N (s) | speed-up | target |",
             "|---:|---:|---:|---:|---:|---:|---:|---|"]
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
    lines += ["", "Runs (s): " + "; ".join(runs),
              "", "With forks 1 the runs spread widely (the lab's other work shares the 2 vCPUs); with a fork per "
              "hypervisor they stay close. The third hypervisor is reached without SSH and likely costs less than "
              "the other two, one reason 3 with forks 1 is not 1.5 times 2 with forks 1; the spread is the other."]
    if missed is not None:
        lines += ["", "**Where the target is missed** (%.2fx): the hypervisors' libvirtd, sshd and the modules' "
                  "Python run on the same %s vCPUs as the controller's forks, so two forks share the cores one fork "
                  "had to itself; Ansible's start-up is paid once either way. On separate hypervisors the work "
                  "overlaps fully; here what would close it is more cores, not a change in the collection." % (
                      missed, results["machine"]["cpus"])]
    return "\n".join(lines) + "\n"


def b7_section(results):
    b7 = results.get("B7")
    if not b7:
        return not_run("## B7: provision to verified egress")
    deploy, bare = b7["deploy"], b7["bare_boot_to_address"]
    first = deploy["first_request_at"]
    overhead = first - bare if first is not None and bare is not None else None
    lines = ["## B7: provision to verified egress", "",
             "The demo's real guest on %s over SSH (`bench/b7_egress.py`): playbooks/deploy.yml with inventories/lab, "
             "one proxy, timed from ansible-playbook's start to the first request proxied by the guest's squid from "
             "the hypervisor's LAN to the LAN's origin server (curl every second after the playbook). In the same run, "
             "the bare boot: the same domain, its overlay emptied again, `virsh start` to the agent's address polled "
             "with virsh every second. One run (each boot 40-240 s under TCG, with the load)." % b7["host"], "",
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
                  "answered %.1f s after that. What would close it: the role's tasks before the converge run in one "
                  "module call rather than several tasks, the address poll runs every second rather than every 2 s, "
                  "and the wait is for the proxy's port (`wait_for_port`) so the playbook ends when squid answers." % (
                      overhead, deploy["running_at"] or 0, (deploy["address_at"] or 0) - (deploy["running_at"] or 0),
                      bare, (deploy["playbook"] or 0) - (deploy["address_at"] or 0),
                      first - (deploy["playbook"] or 0))]
    return "\n".join(lines) + "\n"


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
    lines = ["## Time to first address, every path"]
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


def converge_plot(results, plots):
    """Converge time against the number of proxies, from bench_converge.py's figures (its section is its own)."""
    noop = results.get("B2", {}).get("figures", {}).get("noop")
    if not noop:
        return ""
    lines = ["## B2 in a picture: no-op converge against the number of proxies", "",
             "From `bench/results/converge.json` (the Converge section above says how it was measured). "
             "community.libvirt is not in that file: %s." % results.get("B2", {}).get(
                 "peer_note", "bench_converge.py does not measure it yet")]
    labels = {"set": "kvm_proxy_set (the role)", "loop": "kvm_proxy loop", "peer": "community.libvirt"}
    series = []
    for way, by_count in sorted(noop.items()):
        counts = sorted(int(count) for count in by_count)
        series.append((counts, [by_count[str(count)]["task"]["median"] for count in counts], "o-",
                       labels.get(way, way)))
    figure, _axes = line_plot(series, "B2: no-op converge", "proxies on one hypervisor", "task seconds")
    add_plot(plots, lines, "perf-b2-converge.png", figure, "B2 converge time against the number of proxies")
    return "\n".join(lines) + "\n"


def converge_section(results):
    kept = kept_section(CONVERGE_HEADING)
    if kept:
        return kept
    b2 = results.get("B2", {})
    return "%s\n\nB2 (no-op converge and create/destroy of 1, 10, 40 proxies) is `bench/bench_converge.py`'s: %s.\n" % (
        CONVERGE_HEADING, b2.get("skipped", "its section is added by that script"))


def merged(paths):
    """One results dict from the files of several bench/run pieces: machine and versions from the first,
    each benchmark from the last file that has it, the seconds added up; B2 from converge.json."""
    results = None
    for path in paths:
        with open(path) as handle:
            run = json.load(handle)
        if results is None:
            results = dict(run, sources=[], seconds=0)
        results["sources"].append(os.path.relpath(path, REPO_ROOT))
        results.setdefault("loads", []).append("%s: %s" % (
            "+".join(key for key in sorted(run) if key[:1] == "B" and key[1:].isdigit()),
            " ".join(run["machine"].get("load_average", []))))
        results["seconds"] += run["seconds"]
        pieces = {key: value for key, value in run.items() if key[:1] == "B" and key[1:].isdigit()}
        results.update(pieces)
        results.setdefault("runs_of", {}).update(dict.fromkeys(pieces, run["runs"]))
    # B2 is bench_converge.py's: its latest figures, whichever run wrote them.
    if os.path.exists(CONVERGE_JSON):
        with open(CONVERGE_JSON) as handle:
            results["B2"] = json.load(handle)
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
            "| | |\n|---|---|\n| run | from %s, %.0f s in all |\n| machine | %s vCPUs (%s), %s GiB, kernel %s |\n"
            "| libvirt, QEMU | %s; %s |\n| load average at the start of each piece | %s (the lab machine is shared) |\n"
            "| Ansible | %s, modules on Python %s |\n| collection | %s%s |\n"
            "| peer | community.libvirt from `%s`, in its own virtualenv |\n" % (
                ", ".join("`%s`" % source for source in results["sources"]), results["started"], results["seconds"], m["cpus"],
                m["cpu_model"], m["memory_gib"], m["kernel"], m["libvirt"], (m["qemu"] or "").splitlines()[0], "; ".join(results["loads"]),
                m["ansible_core"], m["hypervisor_python"], m["collection_commit"],
                " (with uncommitted changes)" if m["collection_dirty"] else "", results["peer"]))
    body = [head, b1_section(results, plots), converge_section(results), converge_plot(results, plots),
            b3_section(results, plots), b4_section(results), b5_section(results), b6_section(results, plots),
            b7_section(results), address_plot(results, plots)]
    os.makedirs(IMAGES, exist_ok=True)
    for name, figure in plots:
        figure.savefig(os.path.join(IMAGES, name), dpi=110)
    with open(DOC, "w") as handle:
        handle.write("\n".join(body))
    print("wrote %s and %d plot(s)" % (os.path.relpath(DOC, REPO_ROOT), len(plots)))
