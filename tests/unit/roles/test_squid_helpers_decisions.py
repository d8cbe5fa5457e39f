"""The decisions' counter (count_decisions of the role's files/squid_helpers.py): squid's log daemon protocol counted, hostile lines left
out, the page served with the exporter's, and every other log handed to squid's own log_file_daemon.

The program runs as the guest runs it (program_text, a script of its own on python3); the page is read by promtool,
Prometheus' own check of a metrics page.
"""

import http.client
import http.server
import io
import os
import shutil
import socket
import subprocess
import threading
import time

import pytest

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.guest_program import COUNT_DECISIONS, program_text
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_conf import COUNTED_LOG, DECISIONS_PORT
from ansible_collections.egress_proxies.kvm.tests.unit.squid_helpers_program import squid_helpers

Counts, METRIC, MAX_SERIES = squid_helpers.Counts, squid_helpers.METRIC, squid_helpers.MAX_SERIES

EXPORTER_PAGE = b"# HELP squid_up Is squid up\n# TYPE squid_up gauge\nsquid_up 1\n"


def counted(*lines):
    counts = Counts()
    squid_helpers.read_log(io.BytesIO(b"".join(lines)), counts)
    return counts.exposition()


def test_each_logged_decision_is_counted_by_its_decision_profile_and_rule():
    page = counted(b"r10\n", b"b0\n", b"Lwould_deny backup not_allowed\n", b"Lallow ci allowed_destinations\n",
                   b"F\n", b"Lwould_deny backup not_allowed\n", b"R\n", b"Ldeny - users\n")
    assert page.splitlines()[2:] == [
        '%s{decision="allow",profile="ci",rule="allowed_destinations"} 1' % METRIC,
        '%s{decision="deny",profile="-",rule="users"} 1' % METRIC,
        '%s{decision="would_deny",profile="backup",rule="not_allowed"} 2' % METRIC]


@pytest.mark.parametrize("line", [
    b'Lwould_deny backup" not_allowed\n',  # a quote would end the label's value
    b"Lwould_deny backup} not_allowed\n",
    b"Lwould_deny backup\\ not_allowed\n",
    b"Lwould_deny Backup not_allowed\n",
    b"Lwould_deny backup not_allowed extra\n",
    b"Lwould_deny backup\n",
    b"L\n",
    b"Lwould_deny \xd9\xa1 not_allowed\n",  # another script's digit
    b"Lwould_deny " + b"a" * 65 + b" not_allowed\n",
    b"Xwould_deny backup not_allowed\n",  # not a log line
])
def test_a_line_that_is_not_three_plain_labels_is_not_counted(line):
    assert METRIC + "{" not in counted(line, b"Lallow ci allowed_destinations\n").replace(
        '%s{decision="allow",profile="ci",rule="allowed_destinations"} 1' % METRIC, "")


def test_a_line_longer_than_squid_writes_is_left_out_whole():
    """Its tail is no line of its own: a decision hidden at the end of a long line is not counted."""
    page = counted(b"L" + b"x" * squid_helpers.LOG_LINE_BYTES + b" would_deny backup not_allowed\n",
                   b"Lallow ci allowed_destinations\n")
    assert page.count(METRIC + "{") == 1 and 'decision="allow"' in page


def test_the_series_stop_growing_at_max_series_and_the_known_ones_go_on_counting():
    counts = Counts()
    for number in range(MAX_SERIES + 10):
        counts.add(b"would_deny p%d not_allowed" % number)
    counts.add(b"would_deny p0 not_allowed")
    counts.add(b"would_deny p%d not_allowed" % (MAX_SERIES + 5))
    page = counts.exposition()
    assert page.count(METRIC + "{") == MAX_SERIES
    assert '%s{decision="would_deny",profile="p0",rule="not_allowed"} 2' % METRIC in page
    assert 'profile="p%d"' % (MAX_SERIES + 5) not in page


class ExporterStandIn(http.server.BaseHTTPRequestHandler):
    page = EXPORTER_PAGE

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args):
        pass


@pytest.fixture
def exporter():
    server = http.server.HTTPServer(("127.0.0.1", 0), ExporterStandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fetch(port):
    """The counter's page on the loopback at ``port``: (its status, its body), asked again while nothing listens."""
    deadline = time.monotonic() + 10
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            connection.request("GET", "/metrics")
            answer = connection.getresponse()
            return answer.status, answer.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        finally:
            connection.close()


@pytest.fixture
def start_counter(tmp_path):
    """Starts the program as the guest runs it, as squid starts it for the counted log, on a free port of the loopback,
    reading the exporter's page on ``exporter_port``: (the process, its page's port)."""
    started = []

    def start(exporter_port):
        script = tmp_path / "decision-counter"
        port = free_port()
        script.write_text(program_text(COUNT_DECISIONS, COUNTED_LOG, exporter_port, port))
        started.append(subprocess.Popen(["/usr/bin/python3", str(script), COUNTED_LOG], stdin=subprocess.PIPE))
        return started[-1], port

    yield start
    for process in started:
        process.kill()
        process.wait()


@pytest.fixture
def counter(exporter, start_counter):
    return start_counter(exporter.server_address[1])


def test_the_page_is_the_exporters_then_the_counts_and_promtool_reads_it(counter):
    process, port = counter
    process.stdin.write(b"Lwould_deny backup not_allowed\nLallow ci allowed_destinations\n")
    process.stdin.flush()
    deadline = time.monotonic() + 10
    while b"would_deny" not in fetch(port)[1] and time.monotonic() < deadline:
        time.sleep(0.05)
    status, page = fetch(port)
    assert status == 200 and page.startswith(EXPORTER_PAGE)
    assert b'%s{decision="would_deny",profile="backup",rule="not_allowed"} 1\n' % METRIC.encode() in page
    checked = subprocess.run([shutil.which("promtool") or "promtool", "check", "metrics"], input=page,
                             capture_output=True, timeout=30, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # squid closes the log at a reconfigure: the counter stops and frees its port for the next one.
    process.stdin.close()
    assert process.wait(timeout=10) == 0


def test_a_page_longer_than_page_bytes_answers_502_as_squid_does_for_a_down_exporter(counter, monkeypatch):
    monkeypatch.setattr(ExporterStandIn, "page", b"x" * (squid_helpers.PAGE_BYTES + 1))
    assert fetch(counter[1])[0] == 502


def test_an_exporter_that_does_not_answer_makes_the_page_answer_502(start_counter):
    _process, port = start_counter(free_port())
    assert fetch(port)[0] == 502


def test_a_client_that_sends_nothing_holds_the_page_back_for_page_seconds_at_most(counter):
    _process, port = counter
    assert fetch(port)[0] == 200
    # fetch gives up after 10 s: without the bound the silent client holds the page for good.
    with socket.create_connection(("127.0.0.1", port)):
        assert fetch(port)[0] == 200


def test_every_other_log_goes_to_squids_own_log_file_daemon(tmp_path):
    if not os.access(squid_helpers.SQUID_LOG_DAEMON, os.X_OK):
        pytest.fail("%s is missing: scripts/bootstrap installs squid" % squid_helpers.SQUID_LOG_DAEMON)
    script = tmp_path / "decision-counter"
    script.write_text(program_text(COUNT_DECISIONS, COUNTED_LOG, 19301, DECISIONS_PORT))
    log = tmp_path / "access.log"
    subprocess.run(["/usr/bin/python3", str(script), str(log)], input=b"Lone request\nF\nLanother\n", timeout=30,
                   check=True)
    assert log.read_text() == "one request\nanother\n"


def test_the_guest_runs_the_roles_own_text_and_nothing_of_the_collection():
    text = program_text(COUNT_DECISIONS, COUNTED_LOG, 19301, DECISIONS_PORT)
    call = "count_decisions(sys.argv, %r, 19301, %d)" % (COUNTED_LOG, DECISIONS_PORT)
    assert text.startswith("#!/usr/bin/python3\n") and text.rstrip().endswith(call)
    assert not [line for line in text.splitlines() if line.startswith(("import", "from")) and "ansible" in line]
