"""The integration fixtures themselves: mirror, playbook runner, test sshd and the monitoring servers behave as documented."""

import hashlib
import os
import subprocess
import sys
import time

import pytest
import requests

from tests.lab import config, monitoring, namespaces

pytestmark = pytest.mark.integration

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
