# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The role's programs that squid runs in a proxy's guest, each from a line of squid.conf (squid_conf.squid_settings).

They are no part of the collection's Python: the guest's python3 (Debian's, standard library only) runs them, squid
alone starts them, and they start squid's own programs, which nothing in plugins/ may do. The role writes this file's
text to each program's path, followed by the call of the program's entry (plugin_utils/guest_program.program_text):

- ``check_either_password(argv)``: squid's Basic helper while a user's password is rotated.
- ``count_decisions(argv, counted_log, exporter_port, port)``: squid's log daemon, counting the policy's decisions.
- ``answer_sni_given(argv)``: squid's external acl of the TLS name check, whether a ClientHello named a server.

What squid writes to them is read as untrusted text, a line at a time and a line bounded in bytes (squid_lines).

**check_either_password.** squid's basic_ncsa_auth checks one password file and keeps one hash per user (the file's
last line for a name wins). While a user's password is rotated (``previous_password`` beside ``password``), squid.conf
names this program the helper instead, with basic_ncsa_auth's path and two files: the users' hashes, and the previous
hashes of the users being rotated. It runs one basic_ncsa_auth per file and answers each of squid's requests (a line
``user password``, squid's Basic helper protocol without concurrency) with the first file's ``OK``, else the second's,
else ``ERR``: both passwords pass until the previous one is taken out of the inventory, a policy change in place. The
password is never parsed here: squid's line goes to basic_ncsa_auth as it came. A line is at most HELPER_LINE_BYTES (a
longer one is answered ERR whole), an answer at most HELPER_LINE_BYTES; a checker that ends or answers nothing ends the
program, which squid starts again.

**count_decisions.** With profiles or report mode and the metrics on, squid.conf names this program squid's
``logfile_daemon`` and writes one more access log, ``daemon:`` counted_log, whose lines are a request's decision,
profile and rule. squid starts the program once per ``daemon:`` log with the log's path as its argument, writes the
log's lines to its standard input (squid's log daemon protocol: a line per command, ``L`` then the log line) and closes
it on a reconfigure, starting a new one. For every other log the program becomes squid's own log_file_daemon (exec),
which writes the file as before; for counted_log it counts each line's (decision, profile, rule) and serves, on the
loopback at ``port``, the exporter's page (from ``exporter_port``) followed by the counts as the counter METRIC.
squid's metrics port then reaches this page instead of the exporter's: the same scrape, the same target, one more
metric. A line is at most LOG_LINE_BYTES, three fields of LABEL's characters or it is not counted, at most MAX_SERIES
distinct ones; the exporter's page at most PAGE_BYTES, within PAGE_SECONDS, else the page answers 502 as squid does
when the exporter is down. The counts start again at each reconfigure (a new daemon), which Prometheus' rate() and
increase() take as a counter reset.

**answer_sni_given.** With the TLS name check on, squid peeks at each CONNECT's ClientHello and asks this program,
an external acl helper (without concurrency), about ``%ssl::>sni``: a line whose first word is the SNI the client sent,
or ``-`` without one (squid writes ``-`` for the acl's absent arguments after it). squid's ssl::server_name acl takes
the CONNECT's host where a ClientHello names no server, so only this tells the two apart. It answers ``OK`` for a line
whose first word is not ``-``, else ``ERR``, and ERR for a line longer than HELPER_LINE_BYTES. The name is never parsed
here: squid's acls judge it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import socket
import subprocess
import sys
import threading
from http.client import HTTPConnection, HTTPException
from http.server import BaseHTTPRequestHandler, HTTPServer

# squid's own bound on a helper's line (HELPER_INPUT_BUFFER), and on a log daemon's (LOGFILE_BUF_LEN).
HELPER_LINE_BYTES = 8196
LOG_LINE_BYTES = 65536
OK, ERR = b"OK", b"ERR\n"
SQUID_LOG_DAEMON = "/usr/lib/squid/log_file_daemon"
METRIC = "egress_proxy_decisions_total"
PAGE_BYTES = 1 << 20
PAGE_SECONDS = 5
MAX_SERIES = 4096
# A decision, a profile or a rule as the role writes them; "-" where squid had none to write.
LABEL = re.compile(r"[a-z0-9_-]{1,64}")
LABEL_NAMES = ("decision", "profile", "rule")


def squid_lines(stream, limit):
    """Each line squid writes to ``stream`` (bytes, its line feed kept) until squid closes it; None for a line longer
    than ``limit`` bytes, whose rest is read and is no line of its own."""
    while True:
        line = stream.readline(limit)
        if not line:
            return
        if line.endswith(b"\n"):
            yield line
            continue
        while line and not line.endswith(b"\n"):
            line = stream.readline(limit)
        yield None


class CheckerGone(Exception):
    """A basic_ncsa_auth that no longer answers."""


def ask(checker, line):
    """``checker``'s answer (a line) to squid's ``line``."""
    checker.stdin.write(line)
    checker.stdin.flush()
    answer = checker.stdout.readline(HELPER_LINE_BYTES)
    if not answer.endswith(b"\n"):
        raise CheckerGone()
    return answer


def either_answer(checkers, line):
    """The first checker's OK for ``line``, else the next one's, else ERR; ERR for a line too long (None)."""
    for checker in checkers if line is not None else ():
        said = ask(checker, line)
        if said.startswith(OK):
            return said
    return ERR


def answer_requests(requests, answers, checkers):
    """Answer each line of ``requests`` on ``answers`` until squid closes it."""
    for line in squid_lines(requests, HELPER_LINE_BYTES):
        answers.write(either_answer(checkers, line))
        answers.flush()


def check_either_password(argv):
    if len(argv) != 4:
        sys.exit("usage: %s BASIC_NCSA_AUTH USERS PREVIOUS_USERS (squid's Basic helper)" % argv[0])
    checkers = [subprocess.Popen([argv[1], path], stdin=subprocess.PIPE, stdout=subprocess.PIPE) for path in argv[2:]]
    try:
        answer_requests(sys.stdin.buffer, sys.stdout.buffer, checkers)
    except (CheckerGone, BrokenPipeError):
        sys.exit("%s: a basic_ncsa_auth ended" % argv[0])
    finally:
        for checker in checkers:
            checker.stdin.close()
            checker.wait()


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
    for line in squid_lines(stream, LOG_LINE_BYTES):
        if line is not None and line.startswith(b"L"):
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


def page_handler(counts, exporter_port):
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


class _PageServer(HTTPServer):
    # The daemon squid starts at a reconfigure listens while the one it replaces still finishes.
    def server_bind(self):
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        HTTPServer.server_bind(self)


def serve_counts(stream, port, exporter_port):
    """Count ``stream``'s log and serve the page on the loopback at ``port`` until squid closes the log."""
    counts = Counts()
    server = _PageServer(("127.0.0.1", port), page_handler(counts, exporter_port))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        read_log(stream, counts)
    finally:
        server.shutdown()
        server.server_close()


def count_decisions(argv, counted_log, exporter_port, port):
    if len(argv) != 2:
        sys.exit("usage: %s LOGFILE (squid's logfile_daemon)" % argv[0])
    if argv[1] != counted_log:
        os.execv(SQUID_LOG_DAEMON, [SQUID_LOG_DAEMON, argv[1]])
    serve_counts(sys.stdin.buffer, port, exporter_port)


def sni_given_answer(line):
    """OK for squid's line whose first word is an SNI, ERR when it is ``-`` (none), for no word or a line too long (None).
    squid writes the acl's arguments after the format's values, ``-`` for none: ``example.com -``."""
    words = line.split() if line is not None else []
    return OK + b"\n" if words and words[0] != b"-" else ERR


def answer_sni_given(argv):
    if len(argv) != 1:
        sys.exit("usage: %s (squid's external acl helper, reading %%ssl::>sni a line)" % argv[0])
    for line in squid_lines(sys.stdin.buffer, HELPER_LINE_BYTES):
        sys.stdout.buffer.write(sni_given_answer(line))
        sys.stdout.buffer.flush()
