"""The integration fixtures themselves: mirror, playbook runner, test sshd, the monitoring servers and the client segment
behave as documented."""

import hashlib
import json
import os
import subprocess
import sys
import time

import pytest
import requests

from tests.lab import config, hypervisors, monitoring, namespaces, network, origin

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.integration.fleet_fixtures"]

PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks")


@pytest.mark.parametrize("name", config.MIRROR_IMAGES)
def test_mirror_serves_image_with_content_length_and_listed_checksum(lab, name):
    image = lab.images[name]
    with requests.get(image["url"], stream=True, timeout=30) as response:
        assert int(response.headers["Content-Length"]) == image["size"]
        digest = hashlib.sha256()
        for chunk in response.iter_content(1 << 20):
            digest.update(chunk)
    assert digest.hexdigest() == image["sha256"]


def test_playbook_modules_run_on_the_distro_python(lab, run_playbook):
    run = run_playbook(os.path.join(PLAYBOOKS, "lab_smoke.yml"))
    assert run.rc == 0, run
    facts = run.task_results("Gathering Facts")[0]["ansible_facts"]
    assert facts["ansible_python"]["executable"] == "/usr/bin/python3"
    version = run.task_results("Read the libvirt version through the module interpreter")[0]
    assert int(version["stdout"]) >= 9000000


def test_ansible_reaches_the_test_sshd(sshd, run_ansible):
    run = run_ansible("ansible.builtin.ping", pattern="hypervisor-ssh", extra_hosts=[sshd.inventory_line()])
    assert run.rc == 0, run
    assert '"ping": "pong"' in run.stdout


# A namespace of its own with only loopback: the monitoring helpers (tests/lab/monitoring.py) work in any namespace,
# and this one shares no port with a LAN where another test runs its servers.
MONITORING_NETNS = "eplab-montest"
LOOPBACK = "127.0.0.1"


@pytest.fixture
def monitoring_netns(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the monitoring servers run in a network namespace; run the integration tests as root")
    if namespaces.netns_exists(MONITORING_NETNS):
        namespaces.terminate(namespaces.netns_pids(MONITORING_NETNS))
        subprocess.run(["ip", "netns", "delete", MONITORING_NETNS], check=True)
    subprocess.run(["ip", "netns", "add", MONITORING_NETNS], check=True)
    subprocess.run(["ip", "-n", MONITORING_NETNS, "link", "set", "lo", "up"], check=True)
    yield MONITORING_NETNS
    monitoring.stop_prometheus(str(tmp_path))
    monitoring.stop_syslog(str(tmp_path))
    namespaces.terminate(namespaces.netns_pids(MONITORING_NETNS))
    subprocess.run(["ip", "netns", "delete", MONITORING_NETNS], check=True)


def _wait_for(probe, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def test_prometheus_scrapes_a_file_sd_target_and_answers_queries(monitoring_netns, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "metrics").write_text('# TYPE lab_answer gauge\nlab_answer{kind="test"} 42\n')
    target = subprocess.Popen(["ip", "netns", "exec", monitoring_netns, sys.executable, "-m", "http.server",
                               "--bind", LOOPBACK, "--directory", str(site), "9301"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        file_sd = str(tmp_path / "targets.json")
        assert monitoring.write_file_sd(file_sd, ["%s:9301" % LOOPBACK], {"proxy": "p1"})
        assert not monitoring.write_file_sd(file_sd, ["%s:9301" % LOOPBACK], {"proxy": "p1"})
        assert monitoring.ensure_prometheus(monitoring_netns, LOOPBACK, 9090, str(tmp_path), file_sd)
        assert monitoring.ensure_prometheus(monitoring_netns, LOOPBACK, 9090, str(tmp_path), file_sd) == []

        def target_up():
            return [t for t in monitoring.prometheus_targets(monitoring_netns, LOOPBACK, 9090) if t["health"] == "up"]

        targets = _wait_for(target_up)
        assert [t["labels"] for t in targets] == [{"instance": "%s:9301" % LOOPBACK, "job": monitoring.SCRAPE_JOB, "proxy": "p1"}]
        answer = monitoring.prometheus_query(monitoring_netns, LOOPBACK, 9090, "lab_answer")
        assert [(sample["metric"]["kind"], sample["metric"]["proxy"], sample["value"][1]) for sample in answer] == [("test", "p1", "42")]
        with pytest.raises(monitoring.LabError, match="refused query"):
            monitoring.prometheus_query(monitoring_netns, LOOPBACK, 9090, "up{")
    finally:
        target.terminate()
        target.wait()
    assert monitoring.stop_prometheus(str(tmp_path))
    assert monitoring.prometheus_pid(str(tmp_path)) is None


@pytest.mark.parametrize("protocol", monitoring.SYSLOG_PROTOCOLS)
def test_syslog_server_writes_each_message_received_as_one_line(monitoring_netns, tmp_path, protocol):
    logfile = tmp_path / "received.log"
    dev_log = os.path.exists("/dev/log")
    assert monitoring.ensure_syslog(monitoring_netns, LOOPBACK, 5514, protocol, str(logfile), str(tmp_path))
    assert monitoring.ensure_syslog(monitoring_netns, LOOPBACK, 5514, protocol, str(logfile), str(tmp_path)) == []
    lines = ['<134>1 2026-12-04T03:00:0%d.000Z proxy-1 squid - - - request %d' % (n, n) for n in range(3)]
    # RFC 5424 messages, each in a datagram of its own (UDP) or newline-delimited on one connection (TCP).
    sender = ("import socket, sys\n"
              "lines = sys.argv[3:]\n"
              "if sys.argv[1] == 'udp':\n"
              "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
              "    [s.sendto(line.encode(), ('%s', int(sys.argv[2]))) for line in lines]\n"
              "else:\n"
              "    s = socket.create_connection(('%s', int(sys.argv[2])))\n"
              "    s.sendall(''.join(line + '\\n' for line in lines).encode())\n"
              "s.close()\n" % (LOOPBACK, LOOPBACK))
    subprocess.run(["ip", "netns", "exec", monitoring_netns, sys.executable, "-c", sender, protocol, "5514"] + lines, check=True)
    assert _wait_for(lambda: logfile.exists() and logfile.read_text().count("\n") >= 3, timeout=10)
    assert logfile.read_text().splitlines() == lines
    assert os.path.exists("/dev/log") == dev_log  # it opened no /dev/log of the machine's
    assert monitoring.stop_syslog(str(tmp_path))
    assert monitoring.syslog_pid(str(tmp_path), protocol, 5514) is None


# Two hosts the test attaches to the client segment, each through br2 of another hypervisor (a veth from SEGMENT_PORT on
# br2 to SEGMENT_CLIENT_IFACE in a namespace of its own), with the last two member addresses (a demo's proxies take the
# first ones): a request between them crosses lab-hv1's br2, the hub's seg0 and lab-hv2's br2, as between two proxies
# of one HA group on two hypervisors. Each has the same MAC on every run, as the same host would: with a new one the
# client's cache entry for its address (from the run before) would hold the request back 8 s or more.
SEGMENT_PORT = "segtest-port"
SEGMENT_MEMBER_NUMBERS = (config.SEGMENT_MEMBERS - 1, config.SEGMENT_MEMBERS)


def _remove_netns(netns):
    namespaces.terminate(namespaces.netns_pids(netns))
    if namespaces.netns_exists(netns):
        subprocess.run(["ip", "netns", "delete", netns], check=True)  # and with it the veth pair to br2


@pytest.fixture
def segment_hosts(fleet_lab):
    """[(netns, IPv4 address, IPv6 address)] of a host on br2 of lab-hv1 and one on br2 of lab-hv2."""
    hosts = [("eplab-segtest%d" % spec.index, spec, config.segment_member_address(number),
              config.segment_member_address6(number)) for spec, number in zip(fleet_lab[:2], SEGMENT_MEMBER_NUMBERS)]
    for netns, spec, address, address6 in hosts:
        _remove_netns(netns)  # left by an interrupted run
        network.ensure_netns(netns)
        network.ensure_sysctls(netns, hypervisors.SEGMENT_HOST_SYSCTLS)
        network.ensure_veth(SEGMENT_PORT, spec.netns, config.SEGMENT_CLIENT_IFACE, netns, bridge=config.HV_SEGMENT_BRIDGE)
        subprocess.run(["ip", "-n", netns, "link", "set", config.SEGMENT_CLIENT_IFACE, "address",
                        "02:00:c6:12:28:%02x" % int(address.rsplit(".", 1)[1])], check=True)
        network.ensure_address(config.SEGMENT_CLIENT_IFACE, "%s/%d" % (address, config.SEGMENT_PREFIX_LEN), netns)
        network.ensure_address(config.SEGMENT_CLIENT_IFACE, "%s/%d" % (address6, config.SEGMENT_PREFIX6_LEN), netns)
    try:
        yield [(netns, address, address6) for netns, _spec, address, address6 in hosts]
    finally:
        for netns, *_rest in hosts:
            _remove_netns(netns)


def _peer_seen(netns, url):
    """The peer the origin server at url saw, asked from inside netns."""
    fetched = subprocess.run(["ip", "netns", "exec", netns, "curl", "-sS", "--noproxy", "*", "--max-time", "10", url],
                             capture_output=True, text=True, timeout=30, check=False)
    assert fetched.returncode == 0, "%s from netns %s: %s" % (url, netns, fetched.stderr)
    return json.loads(fetched.stdout)["peer"]


def test_client_segment_joins_the_hub_the_client_and_every_hypervisors_br2(segment_hosts, tmp_path):
    url4, url6 = config.segment_origin_urls()
    client = config.SEGMENT_CLIENT_NETNS
    assert _peer_seen(client, url4) == config.SEGMENT_CLIENT_ADDRESS
    assert _peer_seen(client, url6) == config.SEGMENT_CLIENT_ADDRESS6
    (on_hv1, address, address6), (on_hv2, other, other6) = segment_hosts
    for served in (address, address6):
        origin.ensure_origin(on_hv1, served, config.ORIGIN_PORT, str(tmp_path / ("origin-%s.pid" % served)),
                             str(tmp_path / "origin.log"), hypervisors.REPO_ROOT)
    assert _peer_seen(on_hv2, "http://%s:%d/" % (address, config.ORIGIN_PORT)) == other
    assert _peer_seen(on_hv2, "http://[%s]:%d/" % (address6, config.ORIGIN_PORT)) == other6
    assert _peer_seen(on_hv1, url4) == address
    assert _peer_seen(client, "http://[%s]:%d/" % (address6, config.ORIGIN_PORT)) == config.SEGMENT_CLIENT_ADDRESS6
