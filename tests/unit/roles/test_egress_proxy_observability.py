# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What an operator sees of the proxies (issue 30): metrics behind squid, access lines to syslog, the scrape targets.

The metrics and the syslog settings are rendered through the role's templates as tasks/arguments.yml renders them
and read by squid itself (squid -k parse); bad values are refused naming the variable. The scrape targets are shaped
by the role's filters and written by the role's own tasks (tasks/write_targets.yml, run by ansible-playbook on this
machine); the status playbook's reading of the metrics pages by its filter.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json
import os
import socket
import subprocess
import time

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.filter.metrics_pages import metrics_pages
from ansible_collections.egress_proxies.kvm.plugins.filter.metrics_targets import metrics_targets
from ansible_collections.egress_proxies.kvm.plugins.module_utils._targets.file_sd import TargetsError, file_sd
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_proxy import RoleInputError, role_instances
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_conf import (
    EXPORTER_PORT,
    MANAGER_PORT,
    squid_settings,
)
from ansible_collections.egress_proxies.kvm.tests.unit.page_server import PageServers
from ansible_collections.egress_proxies.kvm.tests.unit.role_playbook import run_role_tasks
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import (
    EXPORTER_DEFAULTS,
    SQUID_CONF,
    policy_files,
    role_set_args,
    role_variables,
    squid_parsed,
    user_data_document,
)
from ansible_collections.egress_proxies.kvm.tests.unit.squid_helpers_program import squid_helpers

ENTRY = {"name": "egress-1", "address": "198.51.100.5/24", "outside": {"bridge": "br1", "address": "203.0.113.5/24"}}
BASE = {"egress_proxy_bridge": "br0", "egress_proxy_allowed_clients": ["198.51.100.0/24"],
        "egress_proxy_outside": {"gateway": "203.0.113.1"},
        "egress_proxy_image": {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"}}
EXPORTER = "prometheus-squid-exporter"


def rendered(**overrides):
    """(the user-data parsed, squid.conf) of the proxy ENTRY, as the role renders it with ``overrides``."""
    (proxy,) = role_set_args([dict(ENTRY)], **dict(BASE, **overrides))["proxies"]
    return user_data_document(proxy["user_data"]), policy_files(proxy)[SQUID_CONF]["content"]


def lines(squid, *starts):
    return [line for line in squid.splitlines() if line.startswith(starts)]


def test_metrics_are_served_by_squid_to_their_clients_alone_from_an_exporter_on_the_loopback(tmp_path):
    user_data, squid = rendered(egress_proxy_metrics_clients=["198.51.100.9", "2001:DB8::/64"])
    # The exporter listens on the loopback only, from its first start: its arguments are written before the packages.
    (written,) = user_data["write_files"]
    assert written == {"path": EXPORTER_DEFAULTS, "content": 'ARGS="-listen 127.0.0.1:%d -squid-hostname 127.0.0.1 '
                       '-squid-port %d -extractservicetimes=false"\n' % (EXPORTER_PORT, MANAGER_PORT)}
    assert EXPORTER in user_data["packages"]
    # Listening before squid loads the configuration that makes it squid's peer (a peer squid finds closed answers 502
    # until squid probes it again).
    runcmd = user_data["runcmd"]
    assert runcmd.index(["systemctl", "restart", EXPORTER]) < runcmd.index(["systemctl", "reload-or-restart", "squid"])
    # squid: the metrics port on the inside address, for the metrics clients, never the cache manager through it;
    # the manager on its loopback port for the exporter alone, and for no client anywhere.
    assert lines(squid, "http_port", "cache_peer ", "acl egress_metrics_clients") == [
        "http_port 198.51.100.5:3128",
        "http_port 198.51.100.5:9301 accel defaultsite=metrics name=egress_metrics",
        "http_port 127.0.0.1:%d name=egress_manager" % MANAGER_PORT,
        "cache_peer 127.0.0.1 parent %d 0 no-query originserver name=egress_exporter" % EXPORTER_PORT,
        "acl egress_metrics_clients src 198.51.100.9 2001:db8::/64"]
    assert lines(squid, "http_access")[:6] == [
        "http_access allow egress_metrics egress_metrics_clients !manager", "http_access deny egress_metrics",
        "http_access allow egress_manager manager localhost", "http_access deny egress_manager",
        "http_access deny manager", "http_access deny !safe_ports"]
    squid_parsed(squid, tmp_path)


def test_the_metrics_clients_are_the_proxys_clients_unless_given_and_a_port_is_theirs_alone():
    assert squid_settings(dict(ENTRY, port=3128, allowed_clients=["10.0.0.0/8"], metrics=True, metrics_port=9301),
                          ["80"], ["443"])[0]["metrics_clients"] == ["10.0.0.0/8"]
    for port, metrics_port, refused in ((3128, 3128, "egress_proxy_metrics_port 3128 is the proxy's port"),
                                        (3128, EXPORTER_PORT, "is a loopback port of the metrics"),
                                        (MANAGER_PORT, 9301, "port %d is a loopback port of the metrics" % MANAGER_PORT),
                                        (3128, "9301\n", "egress_proxy_metrics_port '9301\\n' is not a port")):
        problems = squid_settings(dict(ENTRY, port=port, allowed_clients=["10.0.0.0/8"], metrics=True,
                                       metrics_port=metrics_port), ["80"], ["443"])[1]
        assert any(refused in problem for problem in problems), (port, metrics_port, problems)


def test_metrics_off_leave_no_exporter_and_no_metrics_port(tmp_path):
    user_data, squid = rendered(egress_proxy_metrics=False)
    assert "write_files" not in user_data and EXPORTER not in json.dumps(user_data)
    assert "egress_metrics" not in squid and "egress_manager" not in squid
    # The cache manager answers no client either way.
    assert "http_access deny manager" in lines(squid, "http_access")
    squid_parsed(squid, tmp_path)


@pytest.mark.parametrize("server, protocol, written", [
    ("198.51.100.7:514", "udp", "udp://198.51.100.7:514"),
    ("[2001:DB8::7]:6514", "tcp", "tcp://[2001:db8::7]:6514"),
])
def test_each_request_is_also_sent_to_the_syslog_server_and_the_local_log_stays(tmp_path, server, protocol, written):
    _user_data, squid = rendered(egress_proxy_syslog=server, egress_proxy_syslog_protocol=protocol)
    assert lines(squid, "logformat", "access_log") == [
        "logformat egress_syslog <134>1 %{%Y-%m-%dT%H:%M:%S}tg.%03tuZ egress-1 squid - access - client=%>a user=%#un "
        "method=%#rm dest=%#>rd:%>rP status=%>Hs bytes=%<st result=%Ss",
        "access_log daemon:/var/log/squid/access.log squid",
        "access_log %s logformat=egress_syslog buffer-size=0KB on-error=drop !egress_metrics !manager" % written]
    squid_parsed(squid, tmp_path)


@pytest.mark.parametrize("variable, value", [
    ("egress_proxy_syslog", "198.51.100.7:514\naccess_log none"),
    ("egress_proxy_syslog", "syslog.example.com:514"),
    ("egress_proxy_syslog", "198.51.100.7"),
    ("egress_proxy_syslog", "198.51.100.7:0"),
    ("egress_proxy_syslog", "2001:db8::7:514"),
    ("egress_proxy_syslog", "[198.51.100.7]:514"),
    ("egress_proxy_syslog", "[fe80::1%eth0]:514"),
    ("egress_proxy_syslog_protocol", "relp"),
    ("egress_proxy_metrics_clients", ["198.51.100.9 all"]),
    ("egress_proxy_metrics", "sometimes"),
])
def test_bad_observability_settings_are_refused_naming_the_variable(variable, value):
    variables = role_variables(**dict(BASE, **dict({"egress_proxy_syslog": "198.51.100.7:514"}, **{variable: value})))
    with pytest.raises(RoleInputError) as raised:
        role_instances([dict(ENTRY)], variables)
    assert variable in str(raised.value) and "egress-1" in str(raised.value), raised.value


INSTANCES = [
    {"name": "dhcp-up", "state": "present", "address": "", "metrics": True, "metrics_port": 9301},
    {"name": "static-down", "state": "present", "address": "198.51.100.6/24", "metrics": True, "metrics_port": 9301},
    {"name": "dhcp-down", "state": "present", "address": "", "metrics": True, "metrics_port": 9301},
    {"name": "stopped", "state": "stopped", "address": "198.51.100.8/24", "metrics": True, "metrics_port": 9301},
    {"name": "gone", "state": "absent", "address": "", "metrics": True, "metrics_port": 9301},
    {"name": "v6", "state": "present", "address": "", "metrics": True, "metrics_port": 9400},
    {"name": "dark", "state": "present", "address": "198.51.100.9/24", "metrics": False, "metrics_port": 9301},
]
LISTED = [{"name": "dhcp-up", "state": "Running", "ip": "198.51.100.20"}, {"name": "v6", "state": "Running", "ip": "2001:db8::5"},
          {"name": "stopped", "state": "Stopped", "ip": None}, {"name": "stranger", "state": "Running", "ip": "198.51.100.30"}]


def group(proxy, target, hypervisor="hv1"):
    return {"targets": [target], "labels": {"hypervisor": hypervisor, "proxy": proxy, "owner": "deploy-a"}}


def test_every_proxy_the_inventory_wants_running_is_a_target_at_its_address_now():
    found = metrics_targets(LISTED, INSTANCES, "hv1", "deploy-a")
    # A proxy down keeps its static address (so Prometheus sees it down); one without any address cannot be a target.
    assert found == {"groups": [group("dhcp-up", "198.51.100.20:9301"), group("static-down", "198.51.100.6:9301"),
                                group("v6", "[2001:db8::5]:9400")],
                     "unaddressed": ["dhcp-down"]}


def test_the_file_keeps_an_unlisted_hypervisors_targets_and_drops_one_gone_from_the_inventory():
    before = json.dumps([group("old", "198.51.100.1:9301", "hv1"), group("b", "198.51.100.2:9301", "hv2"),
                         group("c", "198.51.100.3:9301", "hv-retired")])
    fresh = {"hv1": [group("new", "198.51.100.4:9301", "hv1")], "hv3": []}
    written = file_sd(fresh, before, ["hv1", "hv2", "hv3"])
    assert written == [group("new", "198.51.100.4:9301", "hv1"), group("b", "198.51.100.2:9301", "hv2")]
    # Sorted: the same fleet, the same bytes, whatever order the hypervisors answered in.
    assert file_sd(dict(reversed(list(fresh.items()))), before, ["hv3", "hv2", "hv1"]) == written
    assert file_sd(fresh, None, ["hv1"]) == [group("new", "198.51.100.4:9301", "hv1")]
    for text in ("{not json", json.dumps({"targets": []}), json.dumps([{"targets": ["x:1"]}])):
        with pytest.raises(TargetsError):
            file_sd(fresh, text, ["hv1"])


def run_write_targets(tmp_path, listed, check=False):
    path = tmp_path / "targets" / "egress-proxies.json"
    path.parent.mkdir(exist_ok=True)
    instances = [{"name": "egress-1", "state": "present", "address": "", "metrics": True, "metrics_port": 9301}]
    output = run_role_tasks(tmp_path, "egress_proxy", "write_targets", {
        "egress_proxy__listed": listed, "egress_proxy__instances": instances, "egress_proxy_uid": "deploy-a",
        "egress_proxy_metrics_file_sd": str(path)}, check=check)
    return path, output


def test_the_role_replaces_the_file_whole_and_leaves_it_alone_when_nothing_moved(tmp_path):
    path, _output = run_write_targets(tmp_path, [{"name": "egress-1", "ip": "198.51.100.20"}])
    assert json.loads(path.read_text()) == [{"targets": ["198.51.100.20:9301"],
                                             "labels": {"hypervisor": "localhost", "proxy": "egress-1", "owner": "deploy-a"}}]
    first = os.stat(path).st_ino
    # Unchanged: not written again.
    _path, output = run_write_targets(tmp_path, [{"name": "egress-1", "ip": "198.51.100.20"}])
    assert "changed=0" in output and os.stat(path).st_ino == first
    # Check mode predicts the new address and writes nothing.
    _path, output = run_write_targets(tmp_path, [{"name": "egress-1", "ip": "198.51.100.21"}], check=True)
    assert "changed=1" in output and "198.51.100.20" in path.read_text()
    # A replaced proxy's new address: a new file renamed into place (Prometheus never reads half of one).
    run_write_targets(tmp_path, [{"name": "egress-1", "ip": "198.51.100.21"}])
    assert "198.51.100.21:9301" in path.read_text() and os.stat(path).st_ino != first
    # No address known: the proxy is named, and gone from the file.
    _path, output = run_write_targets(tmp_path, [])
    assert json.loads(path.read_text()) == [] and "No address is known yet for egress-1 on localhost" in output


PAGE = """# HELP squid_client_http_requests_total The total number of client requests
squid_client_http_requests_total %s
squid_up{host="127.0.0.1"} %d
"""
STATUS_PLAY = os.path.join(os.path.dirname(__file__), "..", "..", "..", "playbooks", "status.yml")


def fetched(url, page, status="200", exit_code="0"):
    """A line of status.yml's fetch: the URL, the page (text or bytes) in base64, curl's status and exit code."""
    page = page if isinstance(page, bytes) else page.encode()
    return "%s %s %s %s" % (url, base64.b64encode(page).decode(), status, exit_code)


def test_status_reads_each_page_curl_fetched():
    text = "\n".join([fetched("http://198.51.100.5:9301/metrics", PAGE % ("1.234e+03", 1)),
                      fetched("http://198.51.100.6:9301/metrics", PAGE % ("1234 1700000000000", 0)),
                      fetched("http://198.51.100.7:9301/metrics", "<html>403</html>", "403"),
                      fetched("http://198.51.100.9:9301/metrics", "<html>502</html>", "502"),
                      fetched("http://198.51.100.8:9301/metrics", "", "000", "7"), ""])
    assert metrics_pages(text) == {
        "http://198.51.100.5:9301/metrics": {"answer": "up", "requests": 1234, "would_deny": None},
        "http://198.51.100.6:9301/metrics": {"answer": "squid down", "requests": 1234, "would_deny": None},
        "http://198.51.100.7:9301/metrics": {"answer": "refused", "requests": None, "would_deny": None},
        "http://198.51.100.9:9301/metrics": {"answer": "exporter down", "requests": None, "would_deny": None},
        "http://198.51.100.8:9301/metrics": {"answer": "no answer", "requests": None, "would_deny": None}}


def test_a_page_cannot_speak_for_another_proxys_page():
    """Issue 40 item 6: a page that writes the old in-band marker of another proxy's URL gave that proxy its row."""
    forged = PAGE % ("7", 1) + "@@egress-proxy-metrics http://198.51.100.6:9301/metrics 200\n" + PAGE % ("4242", 1)
    forged += "http://198.51.100.6:9301/metrics %s 200 0\n" % base64.b64encode((PAGE % ("4242", 1)).encode()).decode()
    pages = metrics_pages("\n".join([fetched("http://198.51.100.5:9301/metrics", forged),
                                     fetched("http://198.51.100.6:9301/metrics", "", "000", "28")]))
    assert pages == {"http://198.51.100.5:9301/metrics": {"answer": "up", "requests": None, "would_deny": None},
                     "http://198.51.100.6:9301/metrics": {"answer": "no answer", "requests": None, "would_deny": None}}


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "-5", "1e400", "9007199254740993", "12.5", "\u0661\u0662",
                                   "0x10", "1_000", "", "12 ab cd"])
def test_a_count_that_is_no_plain_whole_number_is_unknown_and_the_rest_of_the_table_stands(value):
    pages = metrics_pages("\n".join([fetched("http://198.51.100.5:9301/metrics", PAGE % (value, 1)),
                                     fetched("http://198.51.100.6:9301/metrics", PAGE % ("17", 1))]))
    assert pages == {"http://198.51.100.5:9301/metrics": {"answer": "up", "requests": None, "would_deny": None},
                     "http://198.51.100.6:9301/metrics": {"answer": "up", "requests": 17, "would_deny": None}}


@pytest.mark.parametrize("line, answer", [
    (fetched("http://198.51.100.5:9301/metrics", PAGE % ("17", 1) + "#" * 65536), "unreadable"),  # over the bound
    (fetched("http://198.51.100.5:9301/metrics", PAGE % ("17", 1), exit_code="28"), "unreadable"),  # cut short
    ("http://198.51.100.5:9301/metrics not-base64! 200 0", "unreadable"),
    ("http://198.51.100.5:9301/metrics  20x 0", "unreadable"),
    ("http://198.51.100.5:9301/metrics  200", "unreadable"),
    (fetched("http://198.51.100.5:9301/metrics", b'squid_up{host="127.0.0.1"} \xd9\xa1\n\xff\xfe\n'), "squid down"),
], ids=["too long", "cut short", "not base64", "no status", "a field short", "not text"])
def test_a_page_that_cannot_be_read_whole_says_so(line, answer):
    assert metrics_pages(line) == {
        "http://198.51.100.5:9301/metrics": {"answer": answer, "requests": None, "would_deny": None}}


def counter_page(*lines):
    """The page of a proxy that counts its decisions: the exporter's, then what the counter writes for ``lines``."""
    counts = squid_helpers.Counts()
    for line in lines:
        counts.add(line)
    return PAGE % ("17", 1) + counts.exposition()


@pytest.mark.parametrize("page, would_deny", [
    (PAGE % ("17", 1), None),  # no counter: no profile and no report mode
    (counter_page(), 0),
    (counter_page(b"allow ci allowed_destinations", b"deny default not_allowed"), 0),
    (counter_page(b"would_deny backup not_allowed", b"would_deny backup not_allowed",
                  b"would_deny default denied_destinations", b"allow ci allowed_destinations"), 3),
    # The page's own word: a count that is no count, or one series given twice differently, is unknown.
    (counter_page(b"would_deny backup not_allowed") + squid_helpers.METRIC + '{decision="would_deny",profile="x",rule="y"} NaN\n', None),
    (counter_page(b"would_deny backup not_allowed") + squid_helpers.METRIC + '{decision="would_deny",profile="backup",'
     'rule="not_allowed"} 9\n', None),
    # A series the counter never writes is no decision of it.
    (counter_page(b"would_deny backup not_allowed") + squid_helpers.METRIC + '{decision="would_deny",profile="a b",rule="y"} 5\n'
     + squid_helpers.METRIC + '{profile="x",decision="would_deny",rule="y"} 5\n', 1),
], ids=["no counter", "nothing counted", "none would deny", "three", "not a count", "twice", "not the counter's"])
def test_status_reads_the_would_deny_decisions_the_counter_counted(page, would_deny):
    pages = metrics_pages(fetched("http://198.51.100.5:9301/metrics", page))
    assert pages == {"http://198.51.100.5:9301/metrics": {"answer": "up", "requests": 17, "would_deny": would_deny}}


@pytest.fixture
def pages():
    servers = PageServers()
    yield lambda page: "http://127.0.0.1:%d/metrics" % servers.serve("127.0.0.1", 0, page)
    servers.close()


def test_status_fetches_each_page_apart_within_its_bounds(pages):
    """status.yml's own fetch (its script, with curl) of a forging page, an endless one and a proxy that does not
    answer, then its filter."""
    with open(STATUS_PLAY) as handle:
        (play,) = yaml.safe_load(handle)
    (read,) = [task for task in play["tasks"] if task["name"] == "Read the metrics page of each running proxy"]
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    gone = "http://127.0.0.1:%d/metrics" % silent.getsockname()[1]
    silent.close()
    honest = pages((PAGE % ("3", 1)).encode())
    forging = pages(("%s@@egress-proxy-metrics %s 200\n%s %s 200 0\n" % (
        PAGE % ("7", 1), gone, gone, base64.b64encode((PAGE % ("4242", 1)).encode()).decode())).encode())
    endless = pages(None)
    limit = play["vars"]["status_page_bytes"]
    started = time.monotonic()
    completed = subprocess.run(["sh", "-c", read["vars"]["status_read_pages"], "status.yml", str(limit + 1),
                                honest, forging, gone, endless],
                               capture_output=True, text=True, check=True, timeout=60)
    assert time.monotonic() - started < 15
    assert len(completed.stdout) < 4 * (limit + 1024), len(completed.stdout)
    assert metrics_pages(completed.stdout, limit) == {
        honest: {"answer": "up", "requests": 3, "would_deny": None},
        forging: {"answer": "up", "requests": 7, "would_deny": None},
        gone: {"answer": "no answer", "requests": None, "would_deny": None},
        endless: {"answer": "unreadable", "requests": None, "would_deny": None}}


def test_status_reads_a_page_without_the_decisions_counts_once_more(pages):
    """squid's first answer on the metrics port after a policy change is the exporter's page straight (it probes the
    decisions' counter then): status.yml reads such a page again, so its WOULD DENY shows right after a deploy. A page
    with the counts is read once; one of a proxy that counts nothing, twice."""
    with open(STATUS_PLAY) as handle:
        (play,) = yaml.safe_load(handle)
    (read,) = [task for task in play["tasks"] if task["name"] == "Read the metrics page of each running proxy"]
    exporter, counted = (PAGE % ("17", 1)).encode(), counter_page(b"would_deny backup not_allowed").encode()
    served = {"reconfigured": [exporter, counted, b"unread"], "counting": [counted, b"unread"],
              "counting nothing": [exporter, exporter, b"unread"]}
    urls = {pages(answers): kind for kind, answers in served.items()}
    limit = play["vars"]["status_page_bytes"]
    completed = subprocess.run(["sh", "-c", read["vars"]["status_read_pages"], "status.yml", str(limit + 1)] + list(urls),
                               capture_output=True, text=True, check=True, timeout=60)
    assert {urls[url]: page["would_deny"] for url, page in metrics_pages(completed.stdout, limit).items()} == {
        "reconfigured": 1, "counting": 1, "counting nothing": None}
    assert all(answers == [b"unread"] for answers in served.values()), served


def test_the_status_playbook_reads_the_pages_from_where_verify_reaches_the_proxies():
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "playbooks", "status.yml")) as handle:
        (play,) = yaml.safe_load(handle)
    (read,) = [task for task in play["tasks"] if task["name"] == "Read the metrics page of each running proxy"]
    argv = read["ansible.builtin.command"]["argv"]
    assert "egress_proxy_verify_netns" in argv and "status_read_pages" in argv and "status_urls" in argv
    assert read["changed_when"] is False
