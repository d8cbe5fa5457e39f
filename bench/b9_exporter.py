"""B9: what a proxy's prometheus-squid-exporter costs, beside its squid: idle and under load, Prometheus scraping.

On lab-hv1 over SSH, as B7 and B8: playbooks/deploy.yml with inventories/lab in its LAN layout
(bench._common.lan_inventory), one proxy of an owner of its own with
the role's metrics on (its default), its request lines sent to a syslog server on lab-hv1's LAN
(``egress_proxy_syslog``) and its scrape target written by the deploy (``egress_proxy_metrics_file_sd``). That file is
the file_sd of a Prometheus on the same LAN scraping every 2 s (tests/lab/monitoring.py: where a user's monitoring
would be). Once squid answers, the first boot has ended (the role's runcmd restarts the guest agent last) and
SETTLE_SECONDS more have passed, three phases of PHASE_SECONDS each:

- idle, not scraped: Prometheus not running yet, nothing sent through the proxy (the exporter works only when
  scraped: this is its floor);
- idle, scraped: Prometheus scraping the proxy's metrics page every 2 s (through squid's metrics port, to the
  exporter on the guest's loopback, which asks squid's cache manager);
- load, scraped: besides, CLIENTS clients on the LAN send requests through the proxy to the LAN's origin server, each
  one after the other on a kept-alive connection of its own (a closed loop: as many as the proxy answers).

At each phase's start and end one guest-exec (through lab-hv1's virsh, the agent's `guest-exec`, allowed by the
role's default RPC list) runs /usr/bin/python3 in the guest to read /proc: for the exporter and for squid (its master,
its kid and every process under them, such as log helpers) the CPU time (utime + stime) and VmRSS, PSS and VmHWM;
and the guest's busy CPU from /proc/stat. Rates are over the guest's own uptime between the two reads. Prometheus's
own view of the scrapes (duration, samples) and the syslog lines received are recorded too. One run; everything is
destroyed at the end (playbooks/destroy.yml), the servers stopped, also on failure.
"""

import base64
import json
import os
import subprocess
import sys
import tempfile
import time

from bench._common import (
    BUILD_COLLECTIONS,
    PREFIX,
    REPO_ROOT,
    VENV,
    Virsh,
    agent_ipv4,
    ansible_env,
    lan_inventory,
    rounded,
    timed,
)
from bench.b7_egress import HOST, SQUID_PORT, spec
from bench.b8_policy import first_boots_done, status_code
from tests.lab import monitoring

DOMAIN = PREFIX + "b9"
UID = PREFIX + "b9"
MEMORY_MIB = 512
WAIT_TIMEOUT = 900
ANSWER_TIMEOUT = 600
SETTLE_SECONDS = 15
PHASE_SECONDS = 30
METRICS_PORT = 9301
PROMETHEUS_PORT = 9090
SYSLOG_PORT = 5514
SYSLOG_PROTOCOL = "udp"
EXPORTER = "prometheus-squid-exporter"
PHASES = ("idle_unscraped", "idle", "load")
# The load's clients, each on a connection of its own. One alone left the guest's CPU mostly idle: about 20 requests a
# second, the origin server's own pace on one connection (it sends headers and body in two writes, and with Nagle on
# the second waits for the client's delayed ACK, ~40 ms); its rate grows with the connections.
CLIENTS = 8

# Runs in the guest (python3 -c, through guest-exec): every process's CPU time and memory, and the CPU's busy time.
PROC_READER = r"""
import json, os
tick = os.sysconf("SC_CLK_TCK")
processes = []
for entry in os.listdir("/proc"):
    if not entry.isdigit():
        continue
    try:
        with open("/proc/%s/stat" % entry) as handle:
            stat = handle.read()
        with open("/proc/%s/cmdline" % entry, "rb") as handle:
            argv = [arg.decode(errors="replace") for arg in handle.read().split(b"\0") if arg]
        status = {}
        with open("/proc/%s/status" % entry) as handle:
            for line in handle:
                key, _, value = line.partition(":")
                status[key] = value.split()
        pss = None
        with open("/proc/%s/smaps_rollup" % entry) as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except (OSError, ValueError):
        continue
    fields = stat[stat.rindex(")") + 2:].split()
    processes.append({"pid": int(entry), "ppid": int(fields[1]), "comm": stat[stat.index("(") + 1:stat.rindex(")")],
                      "argv": argv[:6], "cpu": (int(fields[11]) + int(fields[12])) / tick,
                      "rss_kib": int(status.get("VmRSS", [0])[0]), "hwm_kib": int(status.get("VmHWM", [0])[0]),
                      "pss_kib": pss})
with open("/proc/uptime") as handle:
    uptime = float(handle.read().split()[0])
with open("/proc/stat") as handle:
    cpu = [int(value) for value in handle.readline().split()[1:]]
# idle and iowait are not busy.
print(json.dumps({"uptime": uptime, "busy": (sum(cpu[:8]) - cpu[3] - cpu[4]) / tick, "processes": processes}))
"""

# Runs in lab-hv1's LAN namespace: argv[5] clients, each sending requests through the proxy one after the other on a
# kept-alive connection of its own, for argv[3] seconds; prints {"requests", "statuses", "errors", "seconds"}.
LOAD_CLIENT = r"""
import http.client, json, sys, threading, time
proxy, port, seconds, url, clients = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
statuses, errors = {}, []
lock = threading.Lock()
started = time.monotonic()


def client(number):
    connection, count = None, 0
    while time.monotonic() - started < seconds:
        count += 1
        try:
            if connection is None:
                connection = http.client.HTTPConnection(proxy, port, timeout=10)
            connection.request("GET", "%sb9/%d/%d" % (url, number, count))
            response = connection.getresponse()
            response.read()
            with lock:
                statuses[str(response.status)] = statuses.get(str(response.status), 0) + 1
            if response.will_close:
                connection.close()
                connection = None
        except (OSError, http.client.HTTPException):
            with lock:
                errors.append(count)
            connection = None
            time.sleep(0.1)


threads = [threading.Thread(target=client, args=(number,)) for number in range(clients)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"requests": sum(statuses.values()) + len(errors), "statuses": statuses, "errors": len(errors),
                  "seconds": time.monotonic() - started}))
"""


class Guest:
    """The proxy's guest, reached through its agent with lab-hv1's virsh (entered with nsenter, no SSH session)."""

    def __init__(self, on, domain):
        self.on, self.domain = on, domain

    def agent(self, command, arguments):
        out = self.on("qemu-agent-command", self.domain, json.dumps({"execute": command, "arguments": arguments}))
        return json.loads(out)["return"]

    def run(self, argv, timeout=120):
        """argv's standard output; raises unless it exits 0 within ``timeout``."""
        pid = self.agent("guest-exec", {"path": argv[0], "arg": list(argv[1:]), "capture-output": True})["pid"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.agent("guest-exec-status", {"pid": pid})
            if status.get("exited"):
                out = base64.b64decode(status.get("out-data", "")).decode()
                if status.get("exitcode") != 0:
                    said = base64.b64decode(status.get("err-data", "")).decode()[-1000:]
                    raise RuntimeError("%s in %s exited %s: %s" % (argv[0], self.domain, status.get("exitcode"), said))
                return out
            time.sleep(0.2)
        raise RuntimeError("%s in %s did not end in %d s" % (argv[0], self.domain, timeout))

    def snapshot(self):
        return json.loads(self.run(["/usr/bin/python3", "-c", PROC_READER]))


def groups(snapshot):
    """{"exporter": [process, ...], "squid": [...]}: the exporter's processes, and squid's with every process under it."""
    processes = snapshot["processes"]
    exporter = [p for p in processes if p["argv"] and os.path.basename(p["argv"][0]) == EXPORTER]
    squid_pids = {p["pid"] for p in processes if p["comm"] == "squid"}
    grew = True
    while grew:
        children = {p["pid"] for p in processes if p["ppid"] in squid_pids} - squid_pids
        grew = bool(children)
        squid_pids |= children
    return {"exporter": exporter, "squid": [p for p in processes if p["pid"] in squid_pids]}


def mib(kib):
    return round(kib / 1024.0, 1)


def phase_figures(before, after):
    """CPU and memory of each group between two snapshots (the processes of ``after``; a pid new since ``before``
    counts from 0, so a restarted process would show)."""
    seconds = after["uptime"] - before["uptime"]
    figures = {"seconds": round(seconds, 1), "guest_busy_percent": round(100 * (after["busy"] - before["busy"]) / seconds, 1)}
    start = {p["pid"]: p for p in before["processes"]}
    for name, processes in groups(after).items():
        cpu = sum(p["cpu"] - start.get(p["pid"], {"cpu": 0.0})["cpu"] for p in processes)
        figures[name] = {
            "cpu_seconds": round(cpu, 2), "cpu_percent": round(100 * cpu / seconds, 2),
            "rss_mib": mib(sum(p["rss_kib"] for p in processes)),
            "pss_mib": mib(sum(p["pss_kib"] or 0 for p in processes)),
            "hwm_mib": mib(sum(p["hwm_kib"] for p in processes)),
            "processes": sorted(" ".join(p["argv"][:3]) or p["comm"] for p in processes),
            "pids_new": sorted(p["pid"] for p in processes if p["pid"] not in start)}
    return figures


def metrics_page(address):
    """(HTTP status, bytes) of the proxy's metrics page, fetched from lab-hv1's LAN."""
    hypervisor = spec()
    completed = subprocess.run(["ip", "netns", "exec", hypervisor.lan_netns, "curl", "-s", "-o", "/dev/null", "-w",
                                "%{http_code} %{size_download}", "--max-time", "10",
                                "http://%s:%d/metrics" % (address, METRICS_PORT)],
                               capture_output=True, text=True, check=False)
    code, _blank, size = completed.stdout.strip().partition(" ")
    return code or "000", int(size or 0)


def answered(page):
    """page ((status, ...)) when its status is 200, else None (wait_until waits on)."""
    return page if page[0] == "200" else None


def wait_until(probe, timeout, what, interval=1.0):
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError("%s: not within %d s" % (what, timeout))
        time.sleep(interval)


def prometheus_value(expr):
    """The single value of a Prometheus query on lab-hv1's LAN, as a float (None when the result is empty)."""
    hypervisor = spec()
    result = monitoring.prometheus_query(hypervisor.lan_netns, hypervisor.lan_address, PROMETHEUS_PORT, expr)
    return float(result[0]["value"][1]) if result else None


def line_count(path):
    try:
        with open(path, "rb") as handle:
            return sum(1 for _line in handle)
    except FileNotFoundError:
        return 0


def inventory(work, file_sd):
    """inventories/lab in its LAN layout, with this benchmark's proxy on lab-hv1: metrics on, its scrape target
    written to ``file_sd``, its request lines sent to the syslog server on lab-hv1's LAN."""
    return lan_inventory(os.path.join(work, "inventory"), HOST, egress_proxy_instances=[{"name": DOMAIN}],
                         egress_proxy_uid=UID, egress_proxy_memory_mib=MEMORY_MIB, egress_proxy_wait_for_ip=True,
                         egress_proxy_wait_timeout=WAIT_TIMEOUT, egress_proxy_metrics=True,
                         egress_proxy_metrics_port=METRICS_PORT, egress_proxy_metrics_file_sd=file_sd,
                         egress_proxy_syslog="%s:%d" % (spec().lan_address, SYSLOG_PORT),
                         egress_proxy_syslog_protocol=SYSLOG_PROTOCOL)


def run():
    hypervisor = spec()
    on = Virsh(hypervisor)
    guest = Guest(on, DOMAIN)
    lan, lan_address = hypervisor.lan_netns, hypervisor.lan_address
    results = {"host": HOST, "phase_seconds": PHASE_SECONDS, "settle_seconds": SETTLE_SECONDS,
               "scrape_interval": monitoring.INTERVAL, "memory_mib": MEMORY_MIB, "metrics_port": METRICS_PORT,
               "syslog": "%s %s:%d" % (SYSLOG_PROTOCOL, lan_address, SYSLOG_PORT)}
    with tempfile.TemporaryDirectory(prefix="bench-b9-") as work:
        file_sd = os.path.join(work, "targets.json")
        inventory_path = inventory(work, file_sd)
        prometheus_dir, syslog_dir = os.path.join(work, "prometheus"), os.path.join(work, "syslog")
        received = os.path.join(syslog_dir, "received.log")
        env = ansible_env(BUILD_COLLECTIONS, ANSIBLE_SSH_CONTROL_PATH_DIR=os.path.join(work, "cp"))
        playbook = [os.path.join(VENV, "bin", "ansible-playbook"), "-i", inventory_path, "-l", HOST]
        try:
            monitoring.ensure_syslog(lan, lan_address, SYSLOG_PORT, SYSLOG_PROTOCOL, received, syslog_dir)
            started = time.monotonic()
            deploy_seconds = timed(playbook + [os.path.join(REPO_ROOT, "playbooks", "deploy.yml")], env=env)[0]
            address = agent_ipv4(on, DOMAIN, hypervisor.lan_prefix + ".")
            if not address:
                raise RuntimeError("no agent address for %s after the deploy" % DOMAIN)
            wait_until(lambda: status_code(address) == "200", ANSWER_TIMEOUT, "%s answering 200 through squid" % DOMAIN)
            served = time.monotonic() - started
            boots_done = first_boots_done(on, [DOMAIN], started, WAIT_TIMEOUT)
            page = wait_until(lambda: answered(metrics_page(address)), ANSWER_TIMEOUT, "the metrics page of %s" % DOMAIN)
            with open(file_sd) as handle:
                targets = json.load(handle)
            results["deploy"] = {"playbook": rounded(deploy_seconds), "served": rounded(served),
                                 "first_boot_done": boots_done, "metrics_page_bytes": page[1], "file_sd": targets}
            time.sleep(SETTLE_SECONDS)
            phases = {}

            # 1. Idle, not scraped.
            before = guest.snapshot()
            time.sleep(PHASE_SECONDS)
            phases["idle_unscraped"] = phase_figures(before, guest.snapshot())

            # 2. Idle, scraped every 2 s: Prometheus on the LAN, on the deploy's own targets file.
            monitoring.ensure_prometheus(lan, lan_address, PROMETHEUS_PORT, prometheus_dir, file_sd)
            up = wait_until(lambda: [t for t in monitoring.prometheus_targets(lan, lan_address, PROMETHEUS_PORT)
                                     if t["health"] == "up"], 60, "Prometheus scraping %s" % DOMAIN)
            results["target_labels"] = up[0]["labels"]
            time.sleep(2 * SETTLE_SECONDS / 3)
            before = guest.snapshot()
            time.sleep(PHASE_SECONDS)
            phases["idle"] = phase_figures(before, guest.snapshot())
            window = "%ds" % PHASE_SECONDS
            phases["idle"]["scrape"] = scrape_figures(window)

            # 3. Load, scraped: one client on the LAN, requests one after the other through the proxy.
            lines_before = line_count(received)
            before = guest.snapshot()
            client = subprocess.run(["ip", "netns", "exec", lan, sys.executable, "-c", LOAD_CLIENT, address,
                                     str(SQUID_PORT), str(PHASE_SECONDS), hypervisor.origin_url(lan_address), str(CLIENTS)],
                                    capture_output=True, text=True, check=True)
            phases["load"] = phase_figures(before, guest.snapshot())
            phases["load"]["scrape"] = scrape_figures(window)
            load = json.loads(client.stdout)
            time.sleep(2)  # the last lines on their way to the syslog server
            load.update(rate=round(load["requests"] / load["seconds"], 1), seconds=round(load["seconds"], 1), clients=CLIENTS,
                        syslog_lines=line_count(received) - lines_before)
            phases["load"]["client"] = load
            results["phases"] = phases
        finally:
            monitoring.stop_prometheus(prometheus_dir)
            monitoring.stop_syslog(syslog_dir)
            timed(playbook + [os.path.join(REPO_ROOT, "playbooks", "destroy.yml")], env=env, check=False)
    return results


def precise(value):
    return None if value is None else round(value, 4)


def scrape_figures(window):
    """Prometheus's view of the scrapes of the proxy over the last ``window``: duration (mean, max), samples, up."""
    selector = '{job="%s"}' % monitoring.SCRAPE_JOB
    return {
        "duration_mean": precise(prometheus_value("avg_over_time(scrape_duration_seconds%s[%s])" % (selector, window))),
        "duration_max": precise(prometheus_value("max_over_time(scrape_duration_seconds%s[%s])" % (selector, window))),
        "samples": prometheus_value("scrape_samples_scraped%s" % selector),
        "up_ratio": precise(prometheus_value("avg_over_time(up%s[%s])" % (selector, window))),
        "scrapes": prometheus_value("count_over_time(up%s[%s])" % (selector, window)),
    }
