"""B15: a request's latency with 50 profiles beside one policy of the same size and none; a mode change in place
(`bench/b15_profiles.py`)."""

from bench.report_sections._common import seconds_text, section
from bench.report_sections.b8 import outcome_text

LABELS = (("none", "no destination policy"), ("default", "one default policy of %d entries"),
          ("profiles", "%d profiles of %d entries, the client's the last"))


def added(latency, label, key):
    """``label``'s ``key`` (median or p99) less no policy's, in ms."""
    return "%+.2f" % (latency[label][key] - latency["none"][key]) if label != "none" else "-"


def change_text(change):
    return "%s s, %s, ids kept %d" % (
        seconds_text(change["playbook"]), outcome_text(change["outcomes"]), change["ids_kept"])


@section("B15", "## B15: 50 profiles beside one policy of the same size, and a mode change in place")
def render(results, b15, plots):
    latency, count, entries, profiles = b15["latency"], b15["proxies"], b15["entries"], b15["profiles"]
    names = {"none": LABELS[0][1], "default": LABELS[1][1] % (profiles * entries),
             "profiles": LABELS[2][1] % (profiles, entries)}
    lines = ["%d running proxies of the demo's real guest on %s over SSH (`bench/b15_profiles.py`, %d MiB each), "
             "playbooks/deploy.yml with inventories/lab in its LAN layout. Each policy is a policy change applied "
             "in place to all %d; then %d requests to the LAN's origin through the first proxy, from the LAN's "
             "namespace, one curl whose connection to squid stays open (so each request is squid's decision and the "
             "origin's answer, no new connection). With the profiles, the other %d profiles' clients are other "
             "addresses of the LAN: a request passes every profile's identity before it takes its own. "
             "The proxies' own deploy, booting at once: playbook %s s, all answering %s s." % (
                 count, b15["host"], b15["memory_mib"], count, b15["requests"], profiles - 1,
                 seconds_text(b15["deploy"]["playbook"]), seconds_text(b15["deploy"]["all_served"])), "",
             "| policy | median (ms) | p99 (ms) | added median (ms) | added p99 (ms) | statuses | its change in place "
             "(playbook, outcomes) |", "|---|---:|---:|---:|---:|---|---|"]
    for label, _text in LABELS:
        measured = latency[label]
        lines.append("| %s | %.2f | %.2f | %s | %s | %s | %s |" % (
            names[label], measured["median"], measured["p99"], added(latency, label, "median"),
            added(latency, label, "p99"), ", ".join("%s: %d" % item for item in sorted(measured["statuses"].items())),
            change_text(measured["change"])))
    lines += ["", "Against no destination policy, one list of %d entries changes the median by %s ms (squid finds a "
              "destination in a tree of its names, not along the list), and %d profiles of %d by %s ms: each request "
              "is matched against the identities of the profiles before its own, one rule each." % (
                  profiles * entries, added(latency, "default", "median"), profiles, entries,
                  added(latency, "profiles", "median"))]
    enforce, report = b15["enforce"], b15["report"]
    lines += ["", "The mode change: the client's profile refuses the origin (enforced), then the same profile in "
              "`report` mode, timed from ansible-playbook's start until every one of the %d proxies answers (each "
              "polled every %g s from a thread of its own)." % (count, b15["poll_interval"]), "",
              "| | every proxy answers (s) | playbook (s) | outcomes | domain ids kept |", "|---|---:|---:|---|---:|",
              "| enforce: 403 | %s | %s | %s | %d of %d |" % (
                  seconds_text(enforce["all_answered"]), seconds_text(enforce["playbook"]),
                  outcome_text(enforce["outcomes"]), enforce["ids_kept"], count),
              "| report: 200 again (`decision=would_deny`) | %s | %s | %s | %d of %d |" % (
                  seconds_text(report["all_answered"]), seconds_text(report["playbook"]),
                  outcome_text(report["outcomes"]), report["ids_kept"], count)]
    return lines
