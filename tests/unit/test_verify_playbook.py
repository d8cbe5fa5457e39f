"""playbooks/verify.yml's wait for a proxy and its check of the answer, against a scripted proxy on localhost.

verify.yml's own fetch, report and check tasks (and its play variables) run through ansible-playbook on
localhost; the proxy is an HTTP server in the test that answers each request with the next answer of a
script: what a booting proxy says before cloud-init has configured squid (refused, 403, 200 without the
role's header), then the role's answer, or a wrong one until the timeout.
"""

import http.server
import json
import os
import socket
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
ORIGIN_TASK = "Check the address and the headers the origin saw from each proxy"
PROXY = "eptest-verify-1"
BODY = {"peer": "198.51.100.7", "headers": {}}


class ScriptedProxy(http.server.ThreadingHTTPServer):
    """Answers the n-th request with answers[n] (the last one again after the end): (status, X-Egress-Proxy) and
    optionally the headers the origin says it got, with the body an origin gives (``peer`` the address it says it saw)."""

    def __init__(self, answers, host="127.0.0.1", peer=BODY["peer"], headers=None, body_bytes=None):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, 0), ScriptedAnswer)
        self.answers = answers
        self.requests = 0
        self.body = dict(BODY, peer=peer, headers=headers or {})
        self.body_bytes = body_bytes


class ScriptedAnswer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        status, header, *origin_headers = self.server.answers[min(self.server.requests, len(self.server.answers) - 1)]
        self.server.requests += 1
        seen = dict(self.server.body)
        if origin_headers:
            seen["headers"] = origin_headers[0]
        body = json.dumps(seen).encode() + b"\n"
        if self.server.body_bytes is not None:
            body = b"x" * self.server.body_bytes
        self.send_response(status)
        if header:
            self.send_header("X-Egress-Proxy", header)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client read as much as it wanted

    def log_message(self, fmt, *args):
        pass


@pytest.fixture
def scripted_proxy():
    servers = []

    def start(answers, **given):
        server = ScriptedProxy(answers, **given)
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
    # The role's first answer is asked again (that answer may have crossed squid's reload).
    assert proxy.requests == 4
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


# Issue 40 item 9: what kvm_proxy_info lists of a proxy whose egress address its domain records, the NICs with their
# roles. A pooled proxy's outside address is in no inventory entry; an IPv6-only one is its egress_address (and 6).
POOLED = {"egress_proxy_outside": {"bridge": "br1", "pool": ["198.51.100.7-198.51.100.9"]},
          "egress_proxy_instances": [{"name": PROXY, "address": "198.18.11.50/24"}]}
OUTSIDE_NICS = [{"role": "inside", "ipv4": "198.18.11.50"}, {"role": "outside", "ipv4": "198.51.100.7", "egress": True}]


def listed(ip, **recorded):
    return dict({"name": PROXY, "id": "hosts/localhost/domains/" + PROXY, "ip": ip, "interfaces": OUTSIDE_NICS,
                 "egress_ip": None, "egress_ipv6": None, "egress_address": None, "egress_address6": None}, **recorded)


ORIGIN_TASKS = (FETCH_TASK, REPORT_TASK, CHECK_TASK, ORIGIN_TASK)


@pytest.mark.parametrize("peer, headers, proven", [
    ("198.51.100.7", {}, True),
    ("198.51.100.8", {}, False),
    ("198.51.100.8", {"Via": "1.1 egress"}, False),
], ids=["its own", "another", "another with Via"])
def test_a_pooled_proxys_egress_address_is_the_one_its_domain_records(tmp_path, scripted_proxy, peer, headers, proven):
    proxy = scripted_proxy([(200, PROXY)], peer=peer, headers=headers)
    completed = verify(tmp_path, proxy.server_address[1], 30, ORIGIN_TASKS, egress_proxy_verify_origin=True,
                       verify_proxies=[listed("127.0.0.1", egress_address="198.51.100.7")], **POOLED)
    assert (completed.returncode == 0) == proven, completed.stdout
    if proven:
        assert "X-Egress-Proxy %s, after 0 s; the origin saw 198.51.100.7" % PROXY in completed.stdout, completed.stdout
    else:
        assert ("the origin saw the request come from 198.51.100.8, expected the proxy's egress address 198.51.100.7%s"
                % ("; the origin received via" if headers else ".")) in completed.stdout, completed.stdout


def test_the_roles_first_answer_is_asked_again_as_it_may_have_crossed_squids_reload(tmp_path, scripted_proxy):
    """The image's squid (caching, Via on) forwarded a request that squid's reload then answered with the role's header:
    the origin got the image's headers. The request asked after that answer is the role's end to end."""
    proxy = scripted_proxy([(200, ""), (200, PROXY, {"Via": "1.1 localhost (squid/5.7)"}), (200, PROXY)])
    completed = verify(tmp_path, proxy.server_address[1], 30, ORIGIN_TASKS, egress_proxy_verify_origin=True,
                       verify_proxies=[listed("127.0.0.1", egress_address="198.51.100.7")], **POOLED)
    assert completed.returncode == 0, completed.stdout
    assert proxy.requests == 3
    assert "X-Egress-Proxy %s, after 1 s; the origin saw 198.51.100.7" % PROXY in completed.stdout, completed.stdout


@pytest.mark.parametrize("url, peer, proven", [
    ("http://[2001:db8:21::1]:8080/", "2001:db8:21::10", True),
    ("http://origin.example/", "2001:db8:21::10", True),
    ("http://[2001:db8:21::1]:8080/", "198.51.100.7", False),
    ("http://198.51.100.1:8080/", "2001:db8:21::10", False),
], ids=["IPv6 URL", "a name", "an IPv4 peer", "an IPv4 URL"])
def test_an_ipv6_only_outside_nics_egress_address_is_proven_by_the_urls_family(tmp_path, scripted_proxy, url, peer, proven):
    proxy = scripted_proxy([(200, PROXY)], peer=peer)
    completed = verify(tmp_path, proxy.server_address[1], 30, ORIGIN_TASKS, egress_proxy_verify_origin=True,
                       egress_proxy_verify_url=url, egress_proxy_outside={"bridge": "br1"},
                       egress_proxy_instances=[{"name": PROXY, "address": "198.18.11.50/24",
                                                "outside": {"address6": "2001:db8:21::10/64"}}],
                       verify_proxies=[listed("127.0.0.1", egress_address="2001:db8:21::10",
                                              egress_address6="2001:db8:21::10")])
    assert (completed.returncode == 0) == proven, completed.stdout
    if not proven and "[" in url:
        assert "the origin saw the request come from %s, expected the proxy's egress address 2001:db8:21::10" % peer \
            in completed.stdout, completed.stdout
    elif not proven:
        assert "expected the proxy's egress address (it records none of the URL host's family)" in completed.stdout, \
            completed.stdout


def test_an_ipv6_proxy_is_asked_at_its_address_in_brackets(tmp_path, scripted_proxy):
    proxy = scripted_proxy([(200, PROXY)], host="::1", peer="2001:db8:11::70")
    completed = verify(tmp_path, proxy.server_address[1], 30, ORIGIN_TASKS, egress_proxy_verify_origin=True,
                       egress_proxy_instances=[{"name": PROXY, "address6": "2001:db8:11::70/64"}],
                       verify_proxies=[listed("::1", interfaces=[{"role": None, "ipv6": "::1", "egress": True}],
                                              egress_address="2001:db8:11::70", egress_address6="2001:db8:11::70")])
    assert completed.returncode == 0, completed.stdout
    assert proxy.requests == 2
    assert "([::1]:%d), asked from this controller" % proxy.server_address[1] in completed.stdout, completed.stdout


@pytest.mark.parametrize("variables, url", [
    (POOLED, "http://198.18.11.1:8080/"),
    ({"egress_proxy_instances": [{"name": PROXY, "address": "198.18.11.50/24"}]}, "http://198.18.11.1:8080/"),
    ({"egress_proxy_instances": [{"name": PROXY, "address6": "2001:db8:11::50/64",
                                  "outside": {"bridge": "br1", "address6": "2001:db8:21::10/64"}}]},
     "http://[2001:db8:11::1]:8080/"),
], ids=["pooled", "outside NIC in the listing alone", "IPv6-only"])
def test_a_url_on_the_inside_network_is_refused_for_every_proxy_with_an_outside_nic(tmp_path, variables, url):
    completed = verify(tmp_path, 9, 300, task_names=(INSIDE_TASK,), egress_proxy_verify_url=url,
                       verify_proxies=[listed("127.0.0.1")], **variables)
    assert completed.returncode != 0, completed.stdout
    assert "%s on localhost has an outside NIC (" % PROXY in completed.stdout, completed.stdout
    assert "and %s is on its inside network (%s)" % (url, variables["egress_proxy_instances"][0].get(
        "address") or variables["egress_proxy_instances"][0]["address6"]) in completed.stdout, completed.stdout


def test_what_the_listing_gives_is_read_as_addresses_never_as_url_text():
    """The hypervisor's listing (a guest agent's report among it) is untrusted: a text that is no address is no URL."""
    from ansible_collections.egress_proxies.kvm.plugins.filter.verify_expectations import verify_expectations

    hostile = {"name": PROXY, "ip": "198.51.100.7@evil.example:80/x?", "interfaces": [{"role": "outside"}],
               "egress_address": "198.51.100.7 or anything", "egress_address6": ["2001:db8::1"],
               "egress_ip": "2001:db8:21::10%eth0", "egress_ipv6": "2001:DB8:21:0::10"}
    assert verify_expectations(hostile, {"address": "198.18.11.50/24"}, {}, "http://origin.example/", 3128) == {
        "endpoint": None, "proxy_url": None, "outside": "its address not known", "egress": ["2001:db8:21::10"],
        "inside_url": None}


def test_the_inventorys_outside_address_is_expected_before_the_recorded_one_family_by_family():
    from ansible_collections.egress_proxies.kvm.plugins.filter.verify_expectations import verify_expectations

    proxy = listed("198.18.11.50", egress_address="198.51.100.7", egress_address6="2001:db8:21::7")
    instance = {"name": PROXY, "address": "198.18.11.50/24", "outside": {"address": "198.51.100.9/24"}}
    assert verify_expectations(proxy, instance, {}, "http://origin.example/", 3128)["egress"] == [
        "198.51.100.9", "2001:db8:21::7"]
    assert verify_expectations(proxy, instance, {}, "http://[2001:db8:21::1]/", 3128)["egress"] == ["2001:db8:21::7"]


def test_an_answer_longer_than_the_bound_is_read_no_further_and_is_no_answer(tmp_path, scripted_proxy):
    """The answer comes from the proxy, a guest: 64 MiB of it would sit in the fetch's result; 64 KiB are read."""
    proxy = scripted_proxy([(200, PROXY)], body_bytes=64 * 1024 * 1024)
    completed = verify(tmp_path, proxy.server_address[1], timeout=1)
    assert completed.returncode != 0, completed.stdout
    assert ("did not forward http://origin.example/ as expected within 1 s: the answer was longer than 65536 bytes, "
            "X-Egress-Proxy not set" in completed.stdout), completed.stdout[-3000:]
    assert len(completed.stdout) < 200000, len(completed.stdout)
