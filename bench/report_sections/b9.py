"""B9: the exporter's cost beside squid (`bench/b9_exporter.py`)."""

from bench.report_sections._common import section, table_head

B9_PHASES = (("idle_unscraped", "idle, not scraped"), ("idle", "idle, scraped every %s"), ("load", "load, scraped every %s"))


@section("B9", "## B9: the exporter's cost beside squid")
def render(results, b9, plots):
    phases, interval = b9["phases"], b9["scrape_interval"].replace("s", " s")
    load = phases["load"]["client"]
    lines = ["One proxy of the demo's real guest on %s over SSH (`bench/b9_exporter.py`, %d MiB, 1 vCPU under TCG), "
             "playbooks/deploy.yml with inventories/lab and the role's metrics on: prometheus-squid-exporter on the "
             "guest's loopback, squid serving its page on port %d, each request also sent to a syslog server on the "
             "LAN (%s). A Prometheus on the LAN (`tests/lab/monitoring.py`) scrapes the targets file the deploy wrote. "
             "Once squid answered and the first boot had ended, three phases of %d s: nothing scraped and nothing "
             "sent; scraped every %s; scraped while %d clients on the LAN send requests through the proxy to the LAN's "
             "origin server, each one after the other on a kept-alive connection of its own. CPU time (user + system) "
             "and memory read from the guest's /proc through its agent (`guest-exec`) at each phase's start and end, "
             "rates over the guest's own clock between the two reads; squid is its master, its kid and every process "
             "under them. The guest runs under TCG: every CPU figure is emulated time, many times what the same work "
             "takes on a real CPU; the ratios between them are what carries over. One run." % (
                 b9["host"], b9["memory_mib"], b9["metrics_port"], b9["syslog"], b9["phase_seconds"], interval,
                 load["clients"]), ""]
    lines += table_head(["phase", "exporter CPU (s)", "exporter CPU", "exporter RSS (MiB)", "squid CPU (s)", "squid CPU",
                         "squid RSS (MiB)", "exporter / squid CPU", "guest CPU busy"], "lrrrrrrrr")
    for key, label in B9_PHASES:
        phase = phases[key]
        exporter, squid = phase["exporter"], phase["squid"]
        share = "%.2f" % (exporter["cpu_seconds"] / squid["cpu_seconds"]) if squid["cpu_seconds"] else "-"
        lines.append("| %s (%.0f s) | %.2f | %.2f %% | %.1f | %.2f | %.2f %% | %.1f | %s | %.1f %% |" % (
            label.replace("%s", interval), phase["seconds"], exporter["cpu_seconds"], exporter["cpu_percent"],
            exporter["rss_mib"], squid["cpu_seconds"], squid["cpu_percent"], squid["rss_mib"], share,
            phase["guest_busy_percent"]))
    idle, unscraped, loaded = phases["idle"], phases["idle_unscraped"], phases["load"]
    squid_scrape = idle["squid"]["cpu_seconds"] - unscraped["squid"]["cpu_seconds"]
    scrapes = idle["scrape"]["scrapes"] or 0

    def ms(value):
        return "-" if value is None else "%.0f ms" % (1000 * value)

    lines += ["", "RSS at each phase's end. The exporter's grew from %.1f MiB before its first scrape to %.1f MiB under "
              "load; PSS (shared pages split between the processes) under load: exporter %.1f MiB, squid %.1f MiB (%d "
              "processes: %s); peak RSS (VmHWM, summed) exporter %.1f MiB, squid %.1f MiB." % (
                  unscraped["exporter"]["rss_mib"], loaded["exporter"]["rss_mib"], loaded["exporter"]["pss_mib"],
                  loaded["squid"]["pss_mib"], len(loaded["squid"]["processes"]),
                  ", ".join("`%s`" % name for name in loaded["squid"]["processes"]), loaded["exporter"]["hwm_mib"],
                  loaded["squid"]["hwm_mib"])]
    lines += ["", "Each scrape, as Prometheus saw it: %s on average idle and %s under load (at most %s and %s), %s "
              "samples; %s scrapes in the idle window, every one in both windows up: %s. Per scrape, idle, the exporter spent "
              "%s CPU-ms and squid %s CPU-ms more than when not scraped (the metrics port it serves, the cache manager "
              "page the exporter reads)." % (
                  ms(idle["scrape"]["duration_mean"]), ms(loaded["scrape"]["duration_mean"]),
                  ms(idle["scrape"]["duration_max"]), ms(loaded["scrape"]["duration_max"]),
                  "%.0f" % idle["scrape"]["samples"] if idle["scrape"]["samples"] else "-", "%.0f" % scrapes,
                  "yes" if idle["scrape"]["up_ratio"] == 1 and loaded["scrape"]["up_ratio"] == 1 else "no",
                  "%.0f" % (1000 * idle["exporter"]["cpu_seconds"] / scrapes) if scrapes else "-",
                  "%.0f" % (1000 * squid_scrape / scrapes) if scrapes else "-")]
    if idle["exporter"]["cpu_seconds"] and abs(loaded["exporter"]["cpu_seconds"] - idle["exporter"]["cpu_seconds"]) <= (
            0.25 * idle["exporter"]["cpu_seconds"]):
        lines[-1] += (" Under load the exporter's CPU stayed where it was idle (%.2f s against %.2f s): its cost is per "
                      "scrape, not per request." % (loaded["exporter"]["cpu_seconds"], idle["exporter"]["cpu_seconds"]))
    lines += ["", "The load: %d requests in %.1f s (%.1f a second; statuses %s; %d errors) and %d syslog lines received "
              "for them, one a request." % (
                  load["requests"], load["seconds"], load["rate"],
                  ", ".join("%s: %d" % item for item in sorted(load["statuses"].items())), load["errors"],
                  load["syslog_lines"])]
    return lines
