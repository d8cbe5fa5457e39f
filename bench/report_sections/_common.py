"""What the sections of docs/performance.md share: the section frame, the run line, tables, plots, number texts."""

import functools

from matplotlib.figure import Figure


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


def table_head(titles, aligns):
    """A markdown table's header and rule: ``aligns`` has an "r" (numbers) or "l" for each title."""
    return ["| " + " | ".join(titles) + " |", "|" + "".join("---:|" if a == "r" else "---|" for a in aligns)]


def counted_at(entry):
    """Whether ``entry``'s libvirt calls were counted at libvirt-python (the bench's way since 2026-12-03).

    Results from before that counted the calls of the collection's own libvirt seam: their text says so.
    """
    return entry.get("counted") == "libvirt-python"


def seconds_text(value, missing="none"):
    return missing if value is None else "%.1f" % value
