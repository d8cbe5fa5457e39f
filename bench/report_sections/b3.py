"""B3: listing managed domains (`bench/b3_listing.py`)."""

from matplotlib.ticker import NullFormatter

from bench.report_sections._common import add_plot, counted_at, met, new_plot, runs_of, section, table_head

# B3's paths: (label, key in a row of by_domains, this collection or the peer's colour).
B3_PATHS = (("kvm_proxy_info", "module", "C0"), ("kvm_proxies plugin", "plugin", "C0"),
            ("peer virt info", "peer_info", "C1"), ("peer libvirt plugin", "peer_plugin", "C1"),
            ("peer get_xml loop", "peer_get_xml_loop", "C1"))


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


B3_COUNTED = {
    True: "libvirt calls are counted at libvirt-python, in kvm_proxy_info's main() on /usr/bin/python3: every "
          "method call of its connection and domain objects, the connection's own included; a domain's `name` is "
          "answered by libvirt-python itself, so the round trips are the calls without it.",
    False: "libvirt calls are counted through a wrapper around the collection's seam (its `Hypervisor` methods, "
           "around the listing, the connection's opening left out); the bench counts at libvirt-python now.",
}


@section("B3", "## B3: listing managed domains")
def render(results, b3, plots):
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
