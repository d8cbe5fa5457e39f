"""B6: the inventory plugin over many hypervisor entries (`bench/b6_inventory.py`)."""

from bench.report_sections._common import add_plot, line_plot, met, runs_of, section


@section("B6", "## B6: the inventory plugin over many hypervisor entries")
def render(results, b6, plots):
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
