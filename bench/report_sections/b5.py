"""B5: fan-out over hypervisors (`bench/b5_fanout.py`)."""

from bench.report_sections._common import met, runs_of, runs_text, section, table_head


@section("B5", "## B5: fan-out over hypervisors")
def render(results, b5, plots):
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
