"""B2: converging one hypervisor's set (`bench/b2_converge.py`, B2w with it)."""

from bench.report_sections import b10
from bench.report_sections._common import add_plot, counted_at, line_plot, met, runs_text, section, table_head


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


@section("B2", "## B2: converging one hypervisor's set")
def render(results, b2, plots):
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
                    first["ping"]["median"], counts[0], b10.set_start_text(results)))
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
