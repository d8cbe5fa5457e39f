"""Time to first address, every path: B4's and B7's bars side by side."""

from bench.report_sections._common import add_plot, new_plot, run_line


def render(results, plots):
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
