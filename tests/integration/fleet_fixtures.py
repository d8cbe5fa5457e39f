"""Fixtures for the tests on the lab's hypervisors, reached over SSH (test_fleet.py loads them as a plugin).

Each test writes an inventory of its own through a Fleet (tests/lab/fleet_runs.py: the connection part is
inventories/lab/hosts.yml as users run it, the role's variables are the test's) and runs Ansible through it.
"""

import json
import os
import subprocess
import time

import pytest

from tests.lab import config, hypervisors
from tests.lab import lab as lab_control
from tests.lab.fleet_runs import Fleet

# The web server on each hypervisor's LAN that booted proxies fetch from.
ORIGIN_PORT = 18090


def fetch(spec, proxy, url, credentials=None):
    """(HTTP status, X-Egress-Proxy) of a request from the hypervisor's LAN namespace through proxy, as the proxy user
    ``credentials`` (user:password) when given."""
    completed = subprocess.run(
        ["ip", "netns", "exec", spec.lan_netns, "curl", "-sS", "--max-time", "20", "-o", "/dev/null",
         "-w", "%{http_code} %header{x-egress-proxy}", "-x", proxy, url]
        + (["--proxy-user", credentials] if credentials else []), capture_output=True, text=True, check=False)
    status, header = (completed.stdout.split(" ", 1) + [""])[:2]
    return int(status or 0), header


def agent(spec, proxy, command, arguments=None):
    """One guest agent command in the proxy's guest, through the hypervisor's virsh; its ``return`` value."""
    message = {"execute": command}
    if arguments is not None:
        message["arguments"] = arguments
    completed = hypervisors.virsh(spec, "qemu-agent-command", proxy, json.dumps(message), check=False)
    return json.loads(completed.stdout)["return"] if completed.returncode == 0 else None


def in_guest(spec, proxy, *argv):
    """Run argv in the proxy's guest (through its agent, as an operator with virsh would) and wait for it."""
    started = agent(spec, proxy, "guest-exec", {"path": argv[0], "arg": list(argv[1:]), "capture-output": True})
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = agent(spec, proxy, "guest-exec-status", {"pid": started["pid"]})
        if status is None or status.get("exited"):
            return status
        time.sleep(0.2)
    raise AssertionError("%s did not finish in %s" % (argv, proxy))


@pytest.fixture(scope="session")
def fleet_lab():
    """The lab brought up (if needed) with at least two hypervisors; their specs."""
    if os.geteuid() != 0:
        pytest.fail("the fleet tests drive network namespaces and libvirt daemons; run them as root")
    lab_control.up()
    specs = [spec for spec in hypervisors.present_specs() if hypervisors.holder(spec)]
    if len(specs) < 2:
        pytest.fail("the lab brought up %d hypervisor(s); the fleet tests need two (%s)" % (
            len(specs), config.HYPERVISORS_ENV))
    return specs


@pytest.fixture
def hv_fleet(fleet_lab, tmp_path):
    """A Fleet on a clean lab: nothing of these tests before or after, every sshd up, nothing frozen.

    Whatever else runs on the lab (scripts/demo's egress-demo-1 and egress-demo-2, a user's own domains) is left
    alone: a test owns its names and owner and asserts on those; here, at the end, every domain that no test made
    is still there.
    """
    hypervisor_fleet = Fleet(fleet_lab, tmp_path)
    hypervisor_fleet.clean()
    others = {spec.name: Fleet.others_local(spec) for spec in fleet_lab}
    try:
        yield hypervisor_fleet
    finally:
        hypervisor_fleet.clean()
    gone = {spec.name: sorted(set(others[spec.name]) - set(Fleet.others_local(spec))) for spec in fleet_lab}
    assert not any(gone.values()), "the test removed domains it did not make: %s" % gone


def lan_http_server(spec, address, root):
    """python's http.server serving ``root`` on ``address``:ORIGIN_PORT in the hypervisor's LAN namespace, once it
    listens there: a server that could not bind (the port held by one a stopped run left) fails here, naming what
    holds it, rather than as a body that is not the test's."""
    server = subprocess.Popen(["ip", "netns", "exec", spec.lan_netns, "/usr/bin/python3", "-m", "http.server", "--bind",
                               address, "--directory", str(root), str(ORIGIN_PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    listening, deadline = "%s:%d " % (address, ORIGIN_PORT), time.monotonic() + 20
    while True:
        listed = subprocess.run(["ip", "netns", "exec", spec.lan_netns, "ss", "-Hltnp"], capture_output=True, text=True,
                                check=False).stdout
        if any(listening in line and "pid=%d," % server.pid in line for line in listed.splitlines()):
            return server
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            server.wait()
            raise AssertionError("the origin server on %sin %s did not start; listening there: %s"
                                 % (listening, spec.lan_netns, listed))
        time.sleep(0.1)


@pytest.fixture
def lan_origins(hv_fleet, tmp_path):
    """A web server on each hypervisor's LAN, in its LAN namespace: {host: URL}."""
    root = tmp_path / "origin"
    root.mkdir()
    (root / "index.html").write_text("egress fleet origin\n")
    servers, urls = [], {}
    for spec in hv_fleet.specs:
        servers.append(lan_http_server(spec, spec.lan_address, root))
        urls[spec.name] = "http://%s:%d/" % (spec.lan_address, ORIGIN_PORT)
    yield urls
    for server in servers:
        server.terminate()
        server.wait(timeout=10)
