# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The rsyslog receiver docs/role-egress_proxy.md shows, run as written (Debian's rsyslogd, on the loopback).

The role's squid sends each access line over TCP ended by a line feed (squid's tcp:// log module); the doc's
receiver must file each line, as sent, under the proxy's name, and keep a forged host name inside its directory.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import socket
import subprocess
import time

from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import REPO_ROOT, render, role_defaults

DOC = os.path.join(REPO_ROOT, "docs", "role-egress_proxy.md")
LOG_DIRECTORY = "/var/log/egress-proxies/"


def doc_section():
    with open(DOC) as handle:
        return handle.read().split("**Access logs.**", 1)[1].split("**Status.**", 1)[0]


def blocks():
    return re.findall(r"```\n(.*?)```", doc_section(), re.S)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(predicate, seconds=15):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "not within %d s" % seconds
        time.sleep(0.1)


def test_the_role_sends_tcp_lines_as_the_doc_says():
    instance = {"name": "egress-1", "port": 3128, "allowed_clients": ["198.51.100.0/24"], "address": "", "outside": {},
                "metrics": False, "metrics_port": 9301, "metrics_clients": [], "syslog": "198.51.100.7:514",
                "syslog_protocol": "tcp"}
    squid_conf = render("squid.conf.j2", dict(role_defaults(), egress_proxy_instance=instance))
    assert "access_log tcp://198.51.100.7:514 logformat=egress_syslog" in squid_conf
    assert re.search(r"^logformat egress_syslog <134>1 \S+ egress-1 squid - access - client=", squid_conf, re.M)


def test_the_rsyslog_receiver_files_each_line_under_its_proxy(tmp_path):
    examples, config = blocks()[0], blocks()[1]
    assert "module(load=\"imtcp\")" in config and LOG_DIRECTORY in config
    port = free_port()
    logs = tmp_path / "logs"
    logs.mkdir()
    config = config.replace(LOG_DIRECTORY, str(logs) + "/").replace('port="514"', 'address="127.0.0.1" port="%d"' % port)
    (tmp_path / "rsyslog.conf").write_text('global(workDirectory="%s")\n' % tmp_path + config)
    server = subprocess.Popen(["rsyslogd", "-n", "-i", str(tmp_path / "rsyslog.pid"), "-f", str(tmp_path / "rsyslog.conf")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def listening():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(listening)
        forged = "<134>1 2026-12-04T03:02:08.000Z ../../x squid - access - forged"
        with socket.create_connection(("127.0.0.1", port)) as sender:
            # As squid's tcp:// log module sends them: the lines one after the other, each ended by a line feed.
            sender.sendall((examples.strip() + "\n" + forged + "\n").encode())
        received = logs / "egress-1.log"
        wait_for(lambda: received.exists() and received.read_text().count("\n") == 2 and (logs / ".._.._x.log").exists())
        assert received.read_text() == examples.strip() + "\n"
        assert sorted(os.listdir(logs)) == [".._.._x.log", "egress-1.log"]
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0]
    assert b"error" not in output.lower(), output
