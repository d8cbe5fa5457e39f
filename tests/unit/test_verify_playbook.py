"""playbooks/verify.yml's wait for a proxy and its check of the answer, against a scripted proxy on localhost.

verify.yml's own fetch, report and check tasks (and its play variables) run through ansible-playbook on
localhost; the proxy is an HTTP server in the test that answers each request with the next answer of a
script: what a booting proxy says before cloud-init has configured squid (refused, 403, 200 without the
role's header), then the role's answer, or a wrong one until the timeout.
"""

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
FETCH_TASK = "Fetch the URL through each proxy, waiting for it to answer"
REPORT_TASK = "Report what each proxy answered"
CHECK_TASK = "Check what each proxy answered"
INSIDE_TASK = "Check that the URL is not on the inside network of a proxy with an outside NIC"
PROXY = "eptest-verify-1"
BODY = {"peer": "198.51.100.7", "headers": {}}


class ScriptedProxy(http.server.ThreadingHTTPServer):
    """Answers the n-th request with answers[n] (the last one again after the end): (status, X-Egress-Proxy)."""

    def __init__(self, answers):
        super().__init__(("127.0.0.1", 0), ScriptedAnswer)
        self.answers = answers
        self.requests = 0


class ScriptedAnswer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        status, header = self.server.answers[min(self.server.requests, len(self.server.answers) - 1)]
        self.server.requests += 1
        body = json.dumps(BODY).encode() + b"\n"
        self.send_response(status)
        if header:
            self.send_header("X-Egress-Proxy", header)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        pass


@pytest.fixture
def scripted_proxy():
    servers = []

    def start(answers):
        server = ScriptedProxy(answers)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def verify(tmp_path, port, timeout, task_names=(FETCH_TASK, REPORT_TASK, CHECK_TASK), **variables):
    """verify.yml's play with only these tasks (its fetch, report and check), on localhost, for one proxy at 127.0.0.1:port."""
    (play,) = yaml.safe_load((REPO_ROOT / "playbooks" / "verify.yml").read_text())
    tasks = {task["name"]: task for task in play["tasks"]}
    play = dict(play, hosts="localhost", connection="local", tasks=[tasks[name] for name in task_names])
    playbook = tmp_path / "verify.yml"
    playbook.write_text(yaml.safe_dump([play]))
    variables = dict({"ansible_python_interpreter": sys.executable, "egress_proxy_verify_url": "http://origin.example/",
                      "egress_proxy_verify_timeout": timeout, "verify_delay": 1,
                      "egress_proxy_instances": [{"name": PROXY}],
                      "verify_proxies": [{"name": PROXY, "id": "hosts/localhost/domains/" + PROXY, "ip": "127.0.0.1"}],
                      "verify_ports": {PROXY: port}}, **variables)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "build" / "collections"),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_NOCOLOR="true", ANSIBLE_STDOUT_CALLBACK="default")
    return subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", str(playbook),
         "-e", json.dumps(variables)], capture_output=True, text=True, check=False, env=env, timeout=120)


def test_a_booting_proxy_is_asked_again_until_the_roles_answer_in_one_task_without_retry_lines(tmp_path, scripted_proxy):
    proxy = scripted_proxy([(403, ""), (200, ""), (200, PROXY)])
    completed = verify(tmp_path, proxy.server_address[1], timeout=60)
    assert completed.returncode == 0, completed.stdout
    assert proxy.requests == 3
    assert "forwarded http://origin.example/: HTTP 200, X-Egress-Proxy %s, after" % PROXY in completed.stdout
    # curl ran on the controller: the play reaches localhost with ansible_connection local (issue 31 item 17).
    assert "asked from this controller (localhost has ansible_connection local), forwarded" in completed.stdout
    assert "FAILED - RETRYING" not in completed.stdout
    # One line per proxy: the registered result (curl's command, the body) is not dumped.
    assert "verify_result" not in completed.stdout, completed.stdout


def test_a_wrong_final_answer_fails_after_the_timeout_naming_proxy_expected_and_seen(tmp_path, scripted_proxy):
    proxy = scripted_proxy([(200, "another-proxy")])
    completed = verify(tmp_path, proxy.server_address[1], timeout=2)
    assert completed.returncode != 0, completed.stdout
    assert proxy.requests >= 2
    assert ("%s on localhost (127.0.0.1:%d) did not forward http://origin.example/ as expected within 2 s: "
            "HTTP 200 (expected 200), X-Egress-Proxy another-proxy (expected %s)." % (
                PROXY, proxy.server_address[1], PROXY)) in completed.stdout, completed.stdout


def test_a_proxy_that_never_listens_fails_with_curls_error(tmp_path, scripted_proxy):
    proxy = scripted_proxy([(200, PROXY)])
    port = proxy.server_address[1]
    proxy.shutdown()
    proxy.server_close()
    completed = verify(tmp_path, port, timeout=1)
    assert completed.returncode != 0, completed.stdout
    assert "did not forward http://origin.example/ as expected within 1 s: curl: (7) Failed to connect" in completed.stdout, \
        completed.stdout


def test_an_answer_of_the_roles_squid_that_is_not_the_expected_one_ends_the_wait_at_once(tmp_path, scripted_proxy):
    """A 503 with the role's header is squid failing to reach the origin: final, not a booting proxy (issue 31 item 12)."""
    proxy = scripted_proxy([(503, PROXY)])
    started = time.monotonic()
    completed = verify(tmp_path, proxy.server_address[1], timeout=120)
    assert completed.returncode != 0, completed.stdout
    assert time.monotonic() - started < 60 and proxy.requests == 1, completed.stdout
    assert "HTTP 503 (expected 200), X-Egress-Proxy %s (expected %s)." % (PROXY, PROXY) in completed.stdout, completed.stdout


TWO_NICS = {"name": PROXY, "address": "198.18.11.50/24", "outside": {"address": "198.18.21.10/24", "bridge": "br1"}}


@pytest.mark.parametrize("url, refused", [
    ("http://198.18.11.1:8080/", True),
    ("http://198.18.21.1:8080/", False),
    ("http://origin.example/", False),
], ids=["LAN origin", "outside origin", "a name"])
def test_a_url_on_the_inside_network_of_a_two_nic_proxy_is_refused_before_anything_is_fetched(tmp_path, url, refused):
    completed = verify(tmp_path, 9, 300, task_names=(INSIDE_TASK,), egress_proxy_verify_url=url,
                       egress_proxy_instances=[TWO_NICS])
    assert (completed.returncode != 0) == refused, completed.stdout
    if refused:
        assert ("%s on localhost has an outside NIC (198.18.21.10/24): its squid sends every request out of that address, "
                "so egress_proxy_verify_url must be reachable from the outside segment, and %s is on its inside network "
                "(198.18.11.50/24)" % (PROXY, url)) in completed.stdout, completed.stdout


def test_a_one_nic_proxy_may_fetch_from_its_own_lan(tmp_path):
    completed = verify(tmp_path, 9, 300, task_names=(INSIDE_TASK,), egress_proxy_verify_url="http://198.18.11.1:8080/",
                       egress_proxy_instances=[{"name": PROXY, "address": "198.18.11.50/24"}])
    assert completed.returncode == 0, completed.stdout


def test_a_timeout_of_a_two_nic_proxy_says_the_url_must_be_reachable_from_the_outside_segment(tmp_path, scripted_proxy):
    proxy = scripted_proxy([(200, "")])
    completed = verify(tmp_path, proxy.server_address[1], timeout=1, egress_proxy_instances=[TWO_NICS])
    assert completed.returncode != 0, completed.stdout
    assert ("%s has an outside NIC (198.18.21.10/24): its squid fetches from that address, so http://origin.example/ "
            "must be reachable from the outside segment." % PROXY) in completed.stdout, completed.stdout
