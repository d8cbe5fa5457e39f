"""B14: a pair behind one client address under a client's load, beside one proxy without a group
(`bench/b14_ha_group.py`)."""

from bench.report_sections._common import met, seconds_text, section, table_head
from tests.lab.client_load import DOWNLOAD_TIMEOUT


def errors_text(kinds):
    return ", ".join("%d %s" % (count, kind) for kind, count in sorted(kinds.items())) or "-"


def downloads_text(side):
    """Downloads ended whole, and those that ended in an error by kind (a refused one never started)."""
    kinds = " (%s)" % errors_text(side["cut_errors"]) if side["downloads_cut"] else ""
    return "%d whole, %d cut or refused%s" % (side["downloads"] - side["downloads_cut"], side["downloads_cut"], kinds)


def in_flight_text(cut_on):
    """Downloads cut after their answer began, by the proxy they were on (the member that gave the address up)."""
    return ", ".join("%d on %s" % (count, proxy) for proxy, count in sorted(cut_on.items())) or "none"


def side_cells(side, gap=None):
    """A client's cells: new requests (failed), longest gap (``gap`` instead when given), downloads (whole / not)."""
    return ["%d (%d failed)" % (side["requests"], side["failed"]), gap or seconds_text(side["longest_gap"], "-"),
            "%d / %d" % (side["downloads"] - side["downloads_cut"], side["downloads_cut"])]


def row(label, step, single_gap=None):
    return "| %s | %d | %s | %s | %s |" % (
        label, step["group"]["rate"], seconds_text(step["change_seconds"]),
        "**failed**" if step.get("failures") else "ok" if "failures" in step else "-",
        " | ".join(side_cells(step["group"]) + side_cells(step["single"], single_gap)))


def actions_text(actions):
    """Each proxy's first converge actions (a replacement's: release or shutdown, then the new domain's steps)."""
    return "; ".join("%s: %s" % (name, ", ".join(done[:2]) + (
        ", ... (%d actions)" % len(done) if len(done) > 2 else "")) for name, done in sorted(actions.items()))


@section("B14", "## B14: a pair behind one address under load, beside one proxy without a group")
def render(results, b14, plots):
    policies, roll, destroy = b14["policy"], b14["roll"], b14["destroy"]
    chosen = b14["rate"]
    carried = [step for step in policies if step["group"]["rate"] == chosen
               and step["group"]["failed"] == 0 and not step.get("failures")]
    group_after, single_after = destroy["group_after"], destroy["single_after"]
    back = group_after["answered_again_after"]
    lines = [
        "Issue 42's figures, side by side in one run (`bench/b14_ha_group.py`): a pair of the demo's guest on lab-hv1 "
        "and lab-hv2 (%s) behind the group's address %s on the lab's client segment, and one proxy without a group "
        "(%s), what users have today, each %d MiB under TCG. Through each, at the same time, a client in the "
        "segment's client namespace (`tests/lab/client_load.py`) starts new requests to the segment's origin at a "
        "rate, each on a new connection with %d s to be answered, and keeps %d downloads going one after another: "
        "%d MiB each at %d KiB/s (about %.0f s), from a file server the bench runs beside the origin in the "
        "segment's hub (the lab's origin answers a short JSON body only). Each step starts both clients %d s before "
        "its change and stops them %d s after it; the same change goes to the pair and the single proxy in one "
        "playbooks/deploy.yml run (one hypervisor after the other: the group spans both). Longest gap: the longest "
        "time between two answered new requests. A download counts as cut when it ends in an error (reset, or %g "
        "s of silence); one still running when a client stops is not counted." % (
            " and ".join("%s %s" % item for item in sorted(b14["members"].items())), b14["group_address"],
            b14["single"], b14["memory_mib"], b14["request_timeout"], b14["downloads"],
            b14["download_bytes"] >> 20, b14["download_pace"] >> 10, b14["download_bytes"] / b14["download_pace"],
            b14["warmup"], b14["settle"], DOWNLOAD_TIMEOUT), "",
        "The rate: the issue asks for %d new requests/s plus %d downloads. The policy change ran first at that rate "
        "and then at each lower rate of %s until the group's client lost no request and the deploy succeeded; %s. "
        "The deploy of the three: playbook %s s, all serving %s s after it." % (
            b14["rates"][0], b14["downloads"], "/".join(str(rate) for rate in b14["rates"]),
            "it did at **%d/s**, the rate of the rolling replacement and the destroy" % chosen if carried else
            "none did on this machine, so the rolling replacement and the destroy ran at the lowest, **%d/s**" % chosen,
            seconds_text(b14["deploy"]["playbook"]), seconds_text(b14["deploy"]["all_serving"])), ""]
    lines += table_head(["step", "new requests/s", "change (s)", "deploy", "group: new requests",
                         "group: longest gap (s)", "group: downloads whole / cut", "single: new requests",
                         "single: longest gap (s)", "single: downloads whole / cut"], "lrrlrrrrrr")
    lines.append(row("steady, no change", b14["steady"]))
    lines += [row("policy change in place", step) for step in policies]
    lines.append(row("rolling replacement of all three", roll))
    # The longest gap is between two answers: a proxy that never answers again has none after the destroy.
    lines.append(row("`virsh destroy` of the holder and the single proxy", destroy,
                     "no answer after it" if single_after["answered_after"] == 0 else None))
    # (figure, measured, target, met): issue 42's four figures. A roll whose deploy stopped replaced only part of the
    # group: its count proves nothing.
    figures = [
        ("rolling replacement: failed new requests through the group",
         "%d%s" % (roll["group"]["failed"], " (the deploy failed)" if roll.get("failures") else ""), "0",
         roll["group"]["failed"] == 0 and not roll.get("failures")),
        ("policy change: failed requests through the group, at %d/s" % chosen, str(policies[-1]["group"]["failed"]),
         "0", bool(carried)),
        ("holder destroyed: a new request through the group answered again after (s)", seconds_text(back, "never"),
         "<= %g" % b14["failover_bound"], back is not None and back <= b14["failover_bound"]),
        ("holder destroyed: failed new requests started more than %g s after it" % b14["failover_bound"],
         str(group_after["failed_after_bound"]), "0", group_after["failed_after_bound"] == 0)]
    lines += ["", "| issue 42's figure | measured | target |", "|---|---|---|"] + [
        "| %s | %s | %s: %s |" % (figure, measured, target, met(done)) for figure, measured, target, done in figures]
    lines += ["", "- Policy change: %s. A reload holds new connections (their SYN dropped, sent again by the client "
              "1, 3, 7, 15 s later) while squid reconfigures and lets those in flight go on; under TCG squid "
              "reconfigures for tens of seconds while loaded, and a download silent for %g s counts as cut." % (
                  "; ".join("at %d/s the group's client lost %d of %d new requests (%s), longest gap %s s, the single "
                            "proxy's %d of %d, longest gap %s s" % (
                                step["group"]["rate"], step["group"]["failed"], step["group"]["requests"],
                                errors_text(step["group"]["failed_errors"]), seconds_text(step["group"]["longest_gap"]),
                                step["single"]["failed"], step["single"]["requests"],
                                seconds_text(step["single"]["longest_gap"])) for step in policies), DOWNLOAD_TIMEOUT)]
    lines += ["- The deploy failed under the load (%s): %s" % (label, "; ".join(
        failure[:400] for failure in step["failures"])) for label, step in
        [("policy change at %d/s" % step["group"]["rate"], step) for step in policies] + [("rolling replacement", roll)]
        if step.get("failures")]
    lines += [
        "- Rolling replacement at %d/s: the converge did %s. The group's client lost %d of %d new requests (%s), its "
        "longest gap %s s, answered by %s; its downloads: %s; cut in flight: %s. A member hands the address over once "
        "the other serves and lets requests in flight finish for at most %d s, so a longer download on it is cut. The "
        "single proxy, "
        "replaced as a proxy is today, lost %d of %d (%s), its longest gap %s s; its downloads: %s (each attempt "
        "while it was down counts)." % (
            roll["group"]["rate"], actions_text(roll["actions"]), roll["group"]["failed"], roll["group"]["requests"],
            errors_text(roll["group"]["failed_errors"]), seconds_text(roll["group"]["longest_gap"]),
            ", ".join(roll["group"]["proxies"]) or "none", downloads_text(roll["group"]),
            in_flight_text(roll["group"]["cut_in_flight_on"]), b14["hand_over_drain"],
            roll["single"]["failed"], roll["single"]["requests"], errors_text(roll["single"]["failed_errors"]),
            seconds_text(roll["single"]["longest_gap"]), downloads_text(roll["single"])),
        "- `virsh destroy` of the holder (%s) and of the single proxy at %d/s: a request through the group's address "
        "started after it was answered %s s later; %d of the %d new requests started after it failed, %d of them "
        "more than %g s after it; after that they were answered by %s; its downloads: %s. The single proxy answered "
        "%d of the %d new requests started after its destroy: it stays down until someone starts it." % (
            destroy["holder"], destroy["group"]["rate"], seconds_text(back, "never"),
            group_after["requests_after"] - group_after["answered_after"], group_after["requests_after"],
            group_after["failed_after_bound"], b14["failover_bound"],
            ", ".join(group_after["proxies_after_bound"]) or "none", downloads_text(destroy["group"]),
            single_after["answered_after"], single_after["requests_after"]),
        "- TCG: the lab's 2 vCPUs carry the demo's pair, these three guests, both clients, the file server and "
        "Ansible; a guest that boots (each replacement) takes most of one core, and a loaded squid reconfigures for "
        "tens of seconds. Requests that fail here while nothing is handed over are the guests' CPU running out (the "
        "steady row at %d/s), not the group's mechanics; on a KVM host reloads and boots are many times faster." % (
            b14["steady"]["group"]["rate"]),
        "- What to conclude: a destroyed single proxy stays down and its clients with it, a destroyed holder's address "
        "is served by the other member; a replaced single proxy refuses its clients for its whole replacement, a "
        "group's members are replaced one after the other with the address handed over. %s A download's cut at a "
        "hand-over (in flight longer than the %d s the member waits) and one stalled %g s by a starved guest both end "
        "in a timeout here, so the clients' records do not tell them apart." % (
            "All four of issue 42's figures are met at %d/s on this lab's TCG guests%s." % (chosen, "" if chosen == (
                policies[0]["group"]["rate"]) else "; at %d/s, the issue's rate, the policy change lost %d new requests "
                "through the group and %d through the single proxy on these starved guests" % (
                    policies[0]["group"]["rate"], policies[0]["group"]["failed"], policies[0]["single"]["failed"]))
            if all(figure[-1] for figure in figures) else
            "The figures missed here need guests that are not starved: on this lab's TCG guests the other member "
            "answers late or not at all while a guest boots or reconfigures, so they belong to a KVM host.",
            b14["hand_over_drain"], DOWNLOAD_TIMEOUT)]
    return lines
