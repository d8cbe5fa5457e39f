# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The count of a proxy's decisions on its metrics page: a program of the guest, which squid runs as its log daemon.

With profiles or report mode and the metrics on, squid.conf (squid_conf.decisions_counted) names this program squid's
``logfile_daemon`` and writes one more access log, ``daemon:`` COUNTED_LOG, whose lines are a request's decision,
profile and rule. squid starts the program once per ``daemon:`` log with the log's path as its argument, writes the
log's lines to its standard input (squid's log daemon protocol: a line per command, ``L`` then the log line) and closes
it on a reconfigure, starting a new one. For every other log the program becomes squid's own log_file_daemon (exec),
which writes the file as before; for COUNTED_LOG it counts each line's (decision, profile, rule) and serves, on the
loopback at DECISIONS_PORT, the exporter's page followed by the counts as the counter egress_proxy_decisions_total.
squid's metrics port then reaches this page instead of the exporter's: the same scrape, the same target, one more
metric.

What reaches the counter is squid's annotations of the role's own rules, but it is read as untrusted text: a line of at
most LINE_BYTES, three fields of LABEL's characters or it is not counted, at most MAX_SERIES distinct ones; the
exporter's page at most PAGE_BYTES, within PAGE_SECONDS, else the page answers 502 as squid does when the exporter is
down. The counts start again at each reconfigure (a new daemon), which Prometheus' rate() and increase() take as a
counter reset.

Runs in the guest on its python3 (Debian's, standard library only) as ``main(argv, exporter_port, port)``; the role
writes this file's text there (guest_program.program_text), not the module itself.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import socket
import sys
import threading
from http.client import HTTPConnection, HTTPException
from http.server import BaseHTTPRequestHandler, HTTPServer

PROGRAM_PATH = "/usr/local/sbin/egress-proxy-decision-counter"
# The log squid hands to the counter: a name no file is written to.
COUNTED_LOG = "/run/egress-proxy-decisions"
SQUID_LOG_DAEMON = "/usr/lib/squid/log_file_daemon"
DECISIONS_PORT = 19302
METRIC = "egress_proxy_decisions_total"
# squid's own limit on a log daemon's line (LOGFILE_BUF_LEN).
LINE_BYTES = 65536
PAGE_BYTES = 1 << 20
PAGE_SECONDS = 5
MAX_SERIES = 4096
# A decision, a profile or a rule as the role writes them; "-" where squid had none to write.
LABEL = re.compile(r"[a-z0-9_-]{1,64}")
LABEL_NAMES = ("decision", "profile", "rule")


class Counts:
    """The count of each (decision, profile, rule) seen, at most MAX_SERIES of them; guarded, as the page reads it
    while the log adds to it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = {}

    def add(self, line):
        """Count one log line (bytes, without squid's command letter); a line that is not three LABEL fields, or a new
        one past MAX_SERIES, is left out."""
        fields = tuple(line.decode("ascii", "replace").split())
        if len(fields) != len(LABEL_NAMES) or not all(LABEL.fullmatch(field) for field in fields):
            return
        with self._lock:
            if fields in self._counts or len(self._counts) < MAX_SERIES:
                self._counts[fields] = self._counts.get(fields, 0) + 1

    def exposition(self):
        """The counts in Prometheus' text format, sorted."""
        with self._lock:
            counts = sorted(self._counts.items())
        lines = ["# HELP %s Requests the proxy's policy decided since squid last (re)configured, by decision "
                 "(allow, deny, would_deny), profile and rule." % METRIC, "# TYPE %s counter" % METRIC]
        lines += ["%s{%s} %d" % (METRIC, ",".join('%s="%s"' % pair for pair in zip(LABEL_NAMES, fields)), count)
                  for fields, count in counts]
        return "\n".join(lines) + "\n"


def read_log(stream, counts):
    """Count the ``L`` lines of squid's log daemon protocol from ``stream`` until squid closes it; the other commands
    (rotate, flush, buffering) concern a file, which this log has none of."""
    while True:
        line = stream.readline(LINE_BYTES)
        if not line:
            return
        if not line.endswith(b"\n"):
            # Longer than squid writes: the rest of it is no line of its own.
            while line and not line.endswith(b"\n"):
                line = stream.readline(LINE_BYTES)
            continue
        if line.startswith(b"L"):
            counts.add(line[1:])


def exporter_page(port):
    """The exporter's page (bytes) on the loopback at ``port``, or None when it does not answer 200 within PAGE_SECONDS
    or is longer than PAGE_BYTES."""
    connection = HTTPConnection("127.0.0.1", port, timeout=PAGE_SECONDS)
    try:
        connection.request("GET", "/metrics")
        answer = connection.getresponse()
        page = answer.read(PAGE_BYTES + 1)
    except (OSError, HTTPException):
        return None
    finally:
        connection.close()
    return page if answer.status == 200 and len(page) <= PAGE_BYTES else None


def handler(counts, exporter_port):
    class Page(BaseHTTPRequestHandler):
        # One page at a time: a client that sends nothing holds the next one back this long at most.
        timeout = PAGE_SECONDS

        def do_GET(self):  # noqa: N802 - http.server's name
            # The page alone: a peer's other paths (squid's cache digest, say) are none of the counter's.
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404)
                return
            page = exporter_page(exporter_port)
            if page is None:
                self.send_error(502, "the exporter did not answer")
                return
            body = page + (b"" if page.endswith(b"\n") or not page else b"\n") + counts.exposition().encode("ascii")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            """squid's stderr is no place for a line per scrape."""

    return Page


class _Server(HTTPServer):
    # The daemon squid starts at a reconfigure listens while the one it replaces still finishes.
    def server_bind(self):
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        HTTPServer.server_bind(self)


def serve(stream, port, exporter_port):
    """Count ``stream``'s log and serve the page on the loopback at ``port`` until squid closes the log."""
    counts = Counts()
    server = _Server(("127.0.0.1", port), handler(counts, exporter_port))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        read_log(stream, counts)
    finally:
        server.shutdown()
        server.server_close()


def main(argv, exporter_port, port):
    if len(argv) != 2:
        sys.exit("usage: %s LOGFILE (squid's logfile_daemon)" % argv[0])
    if argv[1] != COUNTED_LOG:
        os.execv(SQUID_LOG_DAEMON, [SQUID_LOG_DAEMON, argv[1]])
    serve(sys.stdin.buffer, port, exporter_port)
