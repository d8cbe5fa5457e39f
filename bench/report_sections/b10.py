"""B10: the module's start (`bench/b10_module_start.py`)."""

from bench.report_sections._common import section, table_head


@section("B10", "## B10: the module's start")
def render(results, b10, plots):
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


def set_start_text(results):
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
