"""B8: a policy change in place beside a rolling replacement (`bench/b8_policy.py`)."""

from bench.report_sections._common import met, seconds_text, section


def outcome_text(outcomes):
    counts = {}
    for outcome in outcomes.values():
        counts[outcome or "none"] = counts.get(outcome or "none", 0) + 1
    return ", ".join("%d %s" % (count, outcome) for outcome, count in sorted(counts.items()))


def span_text(span):
    return "-" if not span else "%.1f (%.1f to %.1f)" % (span[1] - span[0], span[0], span[1])


@section("B8", "## B8: a policy change in place beside a rolling replacement")
def render(results, b8, plots):
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
