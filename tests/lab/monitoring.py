"""Prometheus and a syslog server in a lab namespace: what the proxies' observability (issue 30) reports to.

A proxy serves prometheus-squid-exporter's metrics on its inside address (port 9301 by default) and sends one
syslog line per request to ``egress_proxy_syslog``. The integration test runs the other end where a user's
monitoring would be, in a hypervisor's LAN namespace (``HypervisorSpec.lan_netns``, at ``lan_address``):

- ``ensure_prometheus`` starts Debian's ``prometheus`` there, scraping every target listed in a file_sd file
  (``write_file_sd``) every 2 s as job ``egress_proxy``; ``prometheus_query`` and ``prometheus_targets`` read its
  HTTP API from inside the namespace (the controller has no route to a LAN).
- ``ensure_syslog`` starts Debian's ``rsyslogd`` there, receiving over UDP or TCP (RFC 5424 framing, or octet
  counting on TCP) and writing each message it receives, as received (``%rawmsg%``), as one line of a log file.

Each server's files (config, pid file, log, Prometheus's TSDB) live in a work directory the caller gives; the
``ensure_`` functions are idempotent as ``origin.ensure_origin`` is (a running server is left alone and they return
the actions taken), and the ``stop_`` functions stop only a process whose pid file names it. Both servers run in
the foreground of a process started with ``ip netns exec``, so `scripts/lab down` (which stops every process in
the lab's namespaces) stops them too. Neither touches the machine's own syslog: rsyslogd loads no imuxsock, so it
opens no /dev/log, and reads no /etc/rsyslog.conf.
"""

import glob
import json
import os
import subprocess
import time

from tests.lab import namespaces
from tests.lab.shell import LabError, read_pidfile, run, write_if_changed

PROMETHEUS = "/usr/bin/prometheus"
RSYSLOGD = "/usr/sbin/rsyslogd"
CURL = "curl"

SCRAPE_JOB = "egress_proxy"
# Fast enough for a test to see a change within seconds; the scrape timeout may not exceed the interval.
INTERVAL = "2s"
SYSLOG_PROTOCOLS = ("udp", "tcp")
START_TIMEOUT = 30.0


def _pid_running(pidfile, program):
    """The pid in pidfile when that process runs program (a path or base name), else None."""
    pid = read_pidfile(pidfile)
    if pid and namespaces.runs(pid, os.path.basename(program)):
        return pid
    return None


def _socket_inodes(pid):
    """The inodes of the sockets process pid holds open."""
    inodes = set()
    try:
        entries = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return inodes
    for entry in entries:
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, entry))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def _bound(pid, address, port, protocol):
    """Whether process pid itself holds a socket on address:port: listening (TCP) or bound (UDP).

    Its own socket, not merely one in its namespace: a server whose port another process holds must not look
    started (rsyslogd even keeps running when it cannot bind, saying so in its log).
    """
    wanted = "%s:%04X" % ("".join("%02X" % int(part) for part in reversed(address.split("."))), port)
    inodes = _socket_inodes(pid)
    try:
        with open("/proc/%d/net/%s" % (pid, protocol)) as handle:
            next(handle)
            rows = [line.split() for line in handle]
    except OSError:
        return False
    # Columns: sl local_address rem_address st ... inode (the tenth); TCP state 0A is LISTEN.
    return any(row[1] == wanted and row[9] in inodes and (protocol == "udp" or row[3] == "0A") for row in rows)


def _start(argv, netns, pidfile, logfile, ready, what, writes_pidfile=False):
    """Start argv in netns (ip netns exec execs it: the child's pid is the server's), record its pid, wait for ready().

    writes_pidfile: the server writes pidfile itself (rsyslogd -i refuses to start while the file names a live
    process, even its own pid), so it is only cleared here.
    """
    try:
        os.unlink(pidfile)  # stale: the callers start only when it names no running server
    except FileNotFoundError:
        pass
    with open(logfile, "ab") as log:
        process = subprocess.Popen(["ip", "netns", "exec", netns] + argv, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=log, start_new_session=True)
    if not writes_pidfile:
        with open(pidfile, "w") as handle:
            handle.write("%d\n" % process.pid)
    deadline = time.monotonic() + START_TIMEOUT
    while not ready(process.pid):
        if process.poll() is not None:
            raise LabError("%s did not start: it exited (rc=%d); see %s" % (what, process.returncode, logfile))
        if time.monotonic() > deadline:
            namespaces.terminate([process.pid])
            process.wait()
            raise LabError("%s did not start within %.0f s (stopped it); see %s" % (what, START_TIMEOUT, logfile))
        time.sleep(0.2)
    return process.pid


def _stop(pidfile, program, what):
    pid = _pid_running(pidfile, program)
    if pid is None:
        return []
    namespaces.terminate([pid])
    try:
        os.unlink(pidfile)
    except FileNotFoundError:
        pass
    return ["stopped %s (pid %d)" % (what, pid)]


# --- Prometheus -----------------------------------------------------------------------------------------------


def prometheus_paths(workdir):
    """{config, pidfile, logfile, data}: the files of the Prometheus whose work directory is workdir."""
    return {"config": os.path.join(workdir, "prometheus.yml"), "pidfile": os.path.join(workdir, "prometheus.pid"),
            "logfile": os.path.join(workdir, "prometheus.log"), "data": os.path.join(workdir, "prometheus-data")}


def prometheus_config(file_sd_path, rule_files=()):
    """prometheus.yml: job SCRAPE_JOB scraping the targets of file_sd_path, scrapes and rule evaluations every INTERVAL.

    YAML written as JSON (a subset of YAML), so no path needs quoting rules of its own.
    """
    config = {
        "global": {"scrape_interval": INTERVAL, "scrape_timeout": INTERVAL, "evaluation_interval": INTERVAL},
        "rule_files": [os.path.abspath(path) for path in rule_files],
        "scrape_configs": [{
            "job_name": SCRAPE_JOB,
            "file_sd_configs": [{"files": [os.path.abspath(file_sd_path)], "refresh_interval": INTERVAL}],
        }],
    }
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def write_file_sd(path, targets, labels=None):
    """Write a file_sd file: one target group, targets ["host:port", ...] with labels {name: value}; whether it changed.

    Atomic (a rename), so Prometheus never reads half a file. It picks a change up within its refresh_interval.
    """
    group = {"targets": list(targets), "labels": dict(labels or {})}
    return write_if_changed(path, json.dumps([group], indent=2, sort_keys=True) + "\n")


def prometheus_pid(workdir):
    return _pid_running(prometheus_paths(workdir)["pidfile"], PROMETHEUS)


def _api_get(netns, address, port, path, params=()):
    """GET http://address:port/path from inside netns with curl; the parsed JSON body (LabError unless it parses)."""
    argv = [CURL, "--silent", "--show-error", "--max-time", "10", "--get", "http://%s:%d%s" % (address, port, path)]
    for name, value in params:
        argv += ["--data-urlencode", "%s=%s" % (name, value)]
    result = run(["ip", "netns", "exec", netns] + argv, check=False)
    try:
        return json.loads(result.stdout)
    except ValueError:
        raise LabError("Prometheus at http://%s:%d (netns %s) gave no JSON for %s (curl rc=%d): %s" % (
            address, port, netns, path, result.returncode, (result.stderr or result.stdout).strip())) from None


def _prometheus_ready(netns, address, port):
    argv = [CURL, "--silent", "--fail", "--max-time", "5", "--output", "/dev/null", "http://%s:%d/-/ready" % (address, port)]
    return run(["ip", "netns", "exec", netns] + argv, check=False).returncode == 0


def ensure_prometheus(netns, address, port, workdir, file_sd_path, rule_files=()):
    """Run Prometheus on address:port in netns, scraping the targets listed in file_sd_path; the actions taken.

    Its config (prometheus_config), pid file, log and TSDB are in workdir (prometheus_paths). A Prometheus already
    running from workdir is kept; when the config changed (other rule files or file_sd path) it reloads it (SIGHUP).
    Returns once its API answers ready.
    """
    os.makedirs(workdir, exist_ok=True)
    paths = prometheus_paths(workdir)
    changed = write_if_changed(paths["config"], prometheus_config(file_sd_path, rule_files))
    pid = prometheus_pid(workdir)
    if pid:
        if not changed:
            return []
        os.kill(pid, 1)  # SIGHUP: reload the config
        return ["reloaded Prometheus's config %s" % paths["config"]]
    argv = [PROMETHEUS, "--config.file", paths["config"], "--storage.tsdb.path", paths["data"],
            "--web.listen-address", "%s:%d" % (address, port)]
    _start(argv, netns, paths["pidfile"], paths["logfile"],
           lambda pid: _bound(pid, address, port, "tcp") and _prometheus_ready(netns, address, port),
           "Prometheus on %s:%d (netns %s)" % (address, port, netns))
    return ["started Prometheus http://%s:%d/ in netns %s" % (address, port, netns)]


def stop_prometheus(workdir):
    """Stop the Prometheus started from workdir, if it runs; the actions taken. Its files stay."""
    return _stop(prometheus_paths(workdir)["pidfile"], PROMETHEUS, "Prometheus")


def prometheus_query(netns, address, port, expr):
    """The result of instant query expr, as the API gives it: for a vector, [{"metric": {label: value}, "value":
    [unix time, "value as text"]}, ...]. LabError when Prometheus refuses the query (the error it gave)."""
    body = _api_get(netns, address, port, "/api/v1/query", [("query", expr)])
    if body.get("status") != "success":
        raise LabError("Prometheus refused query %r: %s: %s" % (expr, body.get("errorType"), body.get("error")))
    return body["data"]["result"]


def prometheus_targets(netns, address, port):
    """The active targets, as the API gives them: [{"labels": {...}, "health": "up" | "down" | "unknown", "lastError":
    "...", "scrapeUrl": "...", "lastScrape": "...", "discoveredLabels": {...}, ...}, ...]."""
    body = _api_get(netns, address, port, "/api/v1/targets", [("state", "active")])
    if body.get("status") != "success":
        raise LabError("Prometheus gave no targets: %s" % body.get("error"))
    return body["data"]["activeTargets"]


# --- syslog ---------------------------------------------------------------------------------------------------


def syslog_paths(workdir, protocol, port):
    """{config, pidfile, logfile}: the files of the syslog server for protocol and port started from workdir (its
    own log; the messages go to the caller's log file)."""
    base = os.path.join(workdir, "rsyslog-%s-%d" % (protocol, port))
    return {"config": base + ".conf", "pidfile": base + ".pid", "logfile": base + ".log"}


def rsyslog_config(address, port, protocol, logfile, workdir):
    """rsyslog.conf: one input (imudp or imtcp) on address:port whose ruleset writes %rawmsg% as one line of logfile.

    No imuxsock (no /dev/log) and no imklog: nothing but that input. The input has a ruleset of its own, so rsyslogd's
    own messages (start, errors), which go to the default ruleset, never mix with the messages received; they go to
    rsyslogd's stderr (its log in workdir).
    """
    if protocol not in SYSLOG_PROTOCOLS:
        raise ValueError("protocol %r: give one of %s" % (protocol, ", ".join(SYSLOG_PROTOCOLS)))
    module = "im" + protocol
    return "\n".join([
        "global(workDirectory=%s processInternalMessages=\"off\")" % json.dumps(os.path.abspath(workdir)),
        "module(load=\"%s\")" % module,
        "template(name=\"egress_lab_raw\" type=\"string\" string=\"%rawmsg%\\n\")",
        "ruleset(name=\"egress_lab_received\") {",
        "  action(type=\"omfile\" file=%s template=\"egress_lab_raw\")" % json.dumps(os.path.abspath(logfile)),
        "}",
        "input(type=\"%s\" address=\"%s\" port=\"%d\" ruleset=\"egress_lab_received\")" % (module, address, port),
        "",
    ])


def syslog_pid(workdir, protocol, port):
    return _pid_running(syslog_paths(workdir, protocol, port)["pidfile"], RSYSLOGD)


def ensure_syslog(netns, address, port, protocol, logfile, workdir):
    """Run rsyslogd receiving syslog over protocol ("udp" or "tcp") on address:port in netns; the actions taken.

    Every message received is appended to logfile as one line, as it came (RFC 5424's "<PRI>1 TIMESTAMP HOST ..."
    with no framing; control characters escaped by rsyslog as #NNN). Its config, pid file and own log are in workdir
    (syslog_paths). A server already running for that protocol and port from workdir is kept, unless its config
    changed (another address or log file): then it is restarted.
    """
    os.makedirs(workdir, exist_ok=True)
    paths = syslog_paths(workdir, protocol, port)
    changed = write_if_changed(paths["config"], rsyslog_config(address, port, protocol, logfile, workdir))
    actions = []
    if syslog_pid(workdir, protocol, port):
        if not changed:
            return []
        actions += _stop(paths["pidfile"], RSYSLOGD, "rsyslogd (%s %d)" % (protocol, port))
    # -n: in the foreground (the pid started is the server's); -i: its pid file; -f: this config only.
    argv = [RSYSLOGD, "-n", "-i", paths["pidfile"], "-f", paths["config"]]
    _start(argv, netns, paths["pidfile"], paths["logfile"],
           lambda pid: _bound(pid, address, port, protocol) and read_pidfile(paths["pidfile"]) == pid,
           "rsyslogd on %s %s:%d (netns %s)" % (protocol, address, port, netns), writes_pidfile=True)
    return actions + ["started syslog server %s://%s:%d in netns %s, writing %s" % (protocol, address, port, netns, logfile)]


def stop_syslog(workdir):
    """Stop every syslog server started from workdir (any protocol and port); the actions taken. Its files stay."""
    actions = []
    for pidfile in sorted(glob.glob(os.path.join(workdir, "rsyslog-*.pid"))):
        actions += _stop(pidfile, RSYSLOGD, "rsyslogd (%s)" % os.path.basename(pidfile)[len("rsyslog-"):-len(".pid")])
    return actions
