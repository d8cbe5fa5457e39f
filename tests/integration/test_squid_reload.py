"""squid's policy reload under load (issue 42, item 2): a real squid 5.7 with the role's squid.conf, reloaded while
clients ask through it, in a network namespace of the test's (tests/integration/squid_netns.py; the load in
tests/integration/squid_load.py): the machine's lane.

squid reconfigures on SIGHUP (what the guest's ``systemctl reload-or-restart squid`` sends) by closing its listening
sockets and opening them again: a client connecting in between is refused, and the connections waiting in the
accept queue are reset. squid_reload_argv's script holds new connections across that window (a tc filter dropping
SYNs to squid's ports: the clients send them again) and lifts the hold on every path.

- About 20 new requests a second (IPv4 and IPv6, each on a new connection) and 2 long downloads while the policy
  changes 4 times: the plain reload fails requests; the held reload fails none and cuts no download. A policy of
  10,000 allowed names (squid's reconfigure takes longer to read it: the window a client can fall into).
- squid listening on its inside addresses only (IPv4 and IPv6), with the metrics' ports: the held reload fails none.
- Connections queued in squid's accept queue when the reload starts: the plain reload resets them, the held one
  serves them.
- No hold is left behind: squid not listening again in time (the script fails saying so), the script interrupted,
  the script killed (the next run removes the hold), a tc filter of the guest's own at the hold's place (squid
  reloaded without the hold, that filter untouched).

Each figure is printed (pytest -s shows them): failed requests, cut downloads, the slowest request beside the median.
"""

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import pytest

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_reload import HOLD_HANDLE, squid_reload_argv
from tests.integration import squid_load
from tests.integration.squid_netns import squid_namespace
from tests.unit.role_templates import SQUID_CONF, policy_files, role_set_args

pytestmark = pytest.mark.integration

ORIGIN = "93.184.216.99"
ORIGIN_PORT = 8080
BASE = {"egress_proxy_bridge": "br0", "egress_proxy_metrics": False,
        "egress_proxy_image": {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"}}
# squid on every address (http_port 3128): its clients on the loopback.
EVERYWHERE = {"name": "egress-1", "address": "198.51.100.5/24", "dns": ["127.0.0.1"]}
# A proxy with an outside NIC: squid on its inside addresses only, the metrics beside it.
INSIDE = {"name": "egress-1", "address": "198.51.100.5/24", "address6": "2001:db8:5::5/64", "dns": ["127.0.0.1"],
          "outside": {"bridge": "br1", "address": "198.19.0.5/24", "gateway": "198.19.0.1"}}
INSIDE_PORTS = [3128, 9301, 13128]
LOAD = {"origin": "http://%s:%d" % (ORIGIN, ORIGIN_PORT), "seconds": 7, "rate": 20, "downloads": 2,
        "download_seconds": 7.5, "timeout": 15}
RELOADS_AT = (1.0, 2.5, 4.0, 5.5)


def squid_conf(entry, **overrides):
    (proxy,) = role_set_args([dict(entry)], **dict(BASE, **overrides))["proxies"]
    return policy_files(proxy)[SQUID_CONF]["content"]


def netns(namespace, argv):
    return ["ip", "netns", "exec", namespace.name] + list(argv)


@contextlib.contextmanager
def origin(namespace):
    """squid_load's origin on ORIGIN_PORT of every address of the namespace."""
    server = subprocess.Popen(netns(namespace, [sys.executable, squid_load.__file__, "origin", str(ORIGIN_PORT)]),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        yield
    finally:
        server.terminate()
        server.wait(timeout=15)


def squid_pid(namespace):
    with open(os.path.join(namespace.workdir, "squid.pid")) as handle:
        return int(handle.read())


def plain_reload(namespace):
    """What the guest's squid.service does for a reload: SIGHUP to squid."""
    return ["kill", "-HUP", str(squid_pid(namespace))]


def held_reload(namespace, ports, **options):
    return netns(namespace, squid_reload_argv(ports, reload=plain_reload(namespace), **options))


def change_policy(namespace):
    """squid.conf with a changed policy (via on and off in turn), as a policy change in place writes it."""
    path = os.path.join(namespace.workdir, "squid.conf")
    with open(path) as handle:
        conf = handle.read()
    changed = conf.replace("via off", "via on") if "via off" in conf else conf.replace("via on", "via off")
    assert changed != conf
    with open(path, "w") as handle:
        handle.write(changed)


class Figures:
    """One load's outcome: the failed requests, the cut downloads, the requests' latencies, how long each reload
    command ran (for the held reload: the hold)."""

    def __init__(self, results, reload_seconds):
        self.reload_seconds = reload_seconds
        self.requests = sorted(results["requests"], key=lambda request: request["start"])
        self.failed = [request for request in self.requests if request["error"]]
        self.cut = [download for download in results["downloads"] if download["error"]]
        self.seconds = sorted(request["seconds"] for request in self.requests if not request["error"])

    def longest_failing(self):
        """The longest time from a failed request's start to that of the last one failing with it (less than 0.5 s
        apart), plus a request's interval: how long new requests failed at one reload."""
        longest, first, last = 0.0, None, None
        for start in [request["start"] for request in self.failed] + [None]:
            if first is not None and (start is None or start - last >= 0.5):
                longest = max(longest, last - first + 1.0 / LOAD["rate"])
                first = None
            if start is not None:
                first, last = (start if first is None else first), start
        return longest

    def summary(self, label):
        return ("%s: %d requests, %d failed (for %.2f s at the longest), %d of %d downloads cut; latency median %.3f s, "
                "slowest %.3f s, %d slower than 0.5 s; reloads ran %s s; failures: %s" % (
                    label, len(self.requests), len(self.failed), self.longest_failing(), len(self.cut), LOAD["downloads"],
                    statistics.median(self.seconds),
                    self.seconds[-1], len([seconds for seconds in self.seconds if seconds > 0.5]),
                    " ".join("%.2f" % seconds for seconds in self.reload_seconds),
                    sorted({request["error"] for request in self.failed}) or "none"))


def load_during_reloads(namespace, proxies, reload):
    """Figures of LOAD through squid's ``proxies`` ([address, port]) while the policy changes and ``reload`` (an argv)
    runs at each of RELOADS_AT; every reload must pass."""
    client = subprocess.Popen(netns(namespace, [sys.executable, squid_load.__file__, "load", json.dumps(
        dict(LOAD, proxies=proxies))]), stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "started"
        began = time.monotonic()
        reload_seconds = []
        for at in RELOADS_AT:
            time.sleep(max(0.0, began + at - time.monotonic()))
            change_policy(namespace)
            started = time.monotonic()
            reloaded = subprocess.run(reload, capture_output=True, text=True, timeout=60, check=False)
            reload_seconds.append(time.monotonic() - started)
            assert reloaded.returncode == 0, reloaded.stderr
        output = client.communicate(timeout=LOAD["download_seconds"] + 60)[0]
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    return Figures(json.loads(output), reload_seconds)


def hold_left(namespace):
    """What of a hold is in the namespace, "" when nothing: {device: its ingress filters} of each device with an
    ingress qdisc."""
    qdiscs = [line.split() for line in namespace.run(["tc", "qdisc", "show"]).stdout.splitlines() if "ingress" in line]
    found = {fields[4]: namespace.run(["tc", "filter", "show", "dev", fields[4], "ingress"]).stdout for fields in qdiscs}
    return found or ""


def test_the_held_reload_refuses_no_connection_where_the_plain_reload_refuses_some():
    names = ["host%d.example.com" % number for number in range(10000)]
    conf = squid_conf(EVERYWHERE, egress_proxy_allowed_clients=["127.0.0.1", "::1"],
                      egress_proxy_allowed_destinations=names + [ORIGIN])
    with squid_namespace(conf, {}, [ORIGIN]) as namespace, origin(namespace):
        proxies = [["127.0.0.1", 3128], ["::1", 3128]]
        plain = load_during_reloads(namespace, proxies, plain_reload(namespace))
        held = load_during_reloads(namespace, proxies, held_reload(namespace, [3128]))
        left = hold_left(namespace)
    print("\n" + plain.summary("plain reload") + "\n" + held.summary("held reload"))
    # The plain reload refuses new connections: the window the held reload closes is there to be closed.
    assert plain.failed, plain.summary("plain reload")
    assert not held.failed and not held.cut, held.summary("held reload")
    assert left == ""


def test_the_held_reload_of_squid_on_its_inside_addresses_refuses_no_connection():
    conf = squid_conf(INSIDE, egress_proxy_allowed_clients=["198.51.100.0/24", "2001:db8:5::/64"],
                      egress_proxy_metrics=True)
    with squid_namespace(conf, {}, [ORIGIN, "198.51.100.5", "2001:db8:5::5", "198.19.0.5"]) as namespace, \
            origin(namespace):
        listening = namespace.run(["ss", "-Hltn"]).stdout
        listeners = ("198.51.100.5:3128", "[2001:db8:5::5]:3128", "198.51.100.5:9301", "127.0.0.1:13128")
        assert all(address in listening for address in listeners), listening
        held = load_during_reloads(namespace, [["198.51.100.5", 3128], ["2001:db8:5::5", 3128]],
                                   held_reload(namespace, INSIDE_PORTS))
        left = hold_left(namespace)
    print("\n" + held.summary("held reload, squid on its inside addresses"))
    assert not held.failed and not held.cut, held.summary("held reload, squid on its inside addresses")
    assert left == ""


# Connections that squid's kernel accepted but squid has not (squid stopped): each sends its request and reads the
# status line; printed as a JSON list once every connection is queued ("queued" first).
QUEUED_CLIENT = r"""
import json, socket, sys
connections = []
for number in range(int(sys.argv[1])):
    connection = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    connection.sendall(b"GET http://%s:%d/small/q%d HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n"
                       % (sys.argv[2].encode(), int(sys.argv[3]), number))
    connections.append(connection)
print("queued", flush=True)
answers = []
for connection in connections:
    try:
        answers.append(connection.makefile("rb").readline().decode().strip() or "closed")
    except OSError as error:
        answers.append(type(error).__name__)
print(json.dumps(answers), flush=True)
"""


def queued_answers(namespace, reload_while_stopped):
    """The answers of 5 connections queued while squid is stopped (SIGSTOP), then ``reload_while_stopped()`` runs
    and returns a callable waited on after squid continues (SIGCONT)."""
    deadline = time.monotonic() + 10
    while ":3128 " not in namespace.run(["ss", "-Hltn"]).stdout:  # after an earlier reload
        assert time.monotonic() < deadline, "squid is not listening"
        time.sleep(0.05)
    pid = squid_pid(namespace)
    os.kill(pid, signal.SIGSTOP)
    try:
        client = subprocess.Popen(netns(namespace, [sys.executable, "-c", QUEUED_CLIENT, "5", ORIGIN, str(ORIGIN_PORT)]),
                                  stdout=subprocess.PIPE, text=True)
        assert client.stdout.readline().strip() == "queued"
        finish = reload_while_stopped()
        time.sleep(0.3)
    finally:
        os.kill(pid, signal.SIGCONT)
    finish()
    output = client.communicate(timeout=60)[0]
    return json.loads(output)


def test_connections_queued_when_the_reload_starts_are_served():
    conf = squid_conf(EVERYWHERE, egress_proxy_allowed_clients=["127.0.0.1"])
    with squid_namespace(conf, {}, [ORIGIN]) as namespace, origin(namespace):
        def plain():
            subprocess.run(plain_reload(namespace), check=True)
            return lambda: None

        def held():
            script = subprocess.Popen(held_reload(namespace, [3128]), stderr=subprocess.PIPE, text=True)

            def finish():
                stderr = script.communicate(timeout=60)[1]
                assert script.returncode == 0, stderr
            return finish

        plain_answers = queued_answers(namespace, plain)
        held_answers = queued_answers(namespace, held)
        left = hold_left(namespace)
    print("\nqueued connections: plain reload %s, held reload %s" % (plain_answers, held_answers))
    assert "HTTP/1.1 200 OK" not in plain_answers, plain_answers
    assert held_answers == ["HTTP/1.1 200 OK"] * 5, held_answers
    assert left == ""


def wait_for_hold(namespace):
    """Until the hold is on the loopback, where connects() asks: the script holds one device after the other, and
    another device's filter may come first."""
    deadline = time.monotonic() + 10
    while "bpf" not in (hold_left(namespace) or {}).get("lo", ""):
        assert time.monotonic() < deadline, "the hold was not set"
        time.sleep(0.05)


def connects(namespace, timeout=0.5):
    """Whether a new connection to squid on 127.0.0.1:3128 is accepted within ``timeout`` ("held": no answer)."""
    probe = ("import socket, sys\ntry:\n    socket.create_connection(('127.0.0.1', 3128), timeout=%s)\n"
             "except socket.timeout:\n    sys.exit('held')\n" % timeout)
    return namespace.run([sys.executable, "-c", probe]).returncode == 0


DEVICES = ["lo", "eptest-a", "eptest-b"]


def test_no_hold_is_left_on_any_path():
    conf = squid_conf(EVERYWHERE, egress_proxy_allowed_clients=["127.0.0.1"])
    with squid_namespace(conf, {}, [ORIGIN]) as namespace:
        # Two devices beside the loopback (a veth pair, one end up): the hold goes on each network device.
        namespace.run(["ip", "link", "add", DEVICES[1], "type", "veth", "peer", "name", DEVICES[2]])
        namespace.run(["ip", "link", "set", DEVICES[1], "up"])
        # squid not listening again in time (the reload did nothing): the script fails saying so, the hold lifted.
        timed_out = subprocess.run(netns(namespace, squid_reload_argv([3128], reload=["true"], listen_seconds=1)),
                                   capture_output=True, text=True, timeout=60, check=False)
        assert timed_out.returncode == 1, timed_out
        assert "squid did not listen again on every port of 3128 within 1 s; listening: 3128" in timed_out.stderr
        assert hold_left(namespace) == ""
        assert connects(namespace)

        # Interrupted (SIGTERM to the script and its reload, as systemd stops the guest agent's): lifted.
        script = subprocess.Popen(netns(namespace, squid_reload_argv([3128], reload=["sleep", "30"])),
                                  start_new_session=True, stderr=subprocess.PIPE, text=True)
        wait_for_hold(namespace)
        assert not connects(namespace)
        os.killpg(script.pid, signal.SIGTERM)
        stderr = script.communicate(timeout=20)[1]
        assert script.returncode == 143, stderr
        assert hold_left(namespace) == ""
        assert connects(namespace)

        # Killed (SIGKILL): the hold stays, on every device, and holds every new connection, until the next reload
        # removes it first.
        script = subprocess.Popen(netns(namespace, squid_reload_argv([3128], reload=["sleep", "30"])),
                                  start_new_session=True)
        wait_for_hold(namespace)
        os.killpg(script.pid, signal.SIGKILL)
        script.wait(timeout=20)
        left = hold_left(namespace)
        assert sorted(left) == sorted(DEVICES) and all("handle 0x%x" % HOLD_HANDLE in filters
                                                       for filters in left.values()), left
        assert not connects(namespace)
        next_run = subprocess.run(held_reload(namespace, [3128]), capture_output=True, text=True, timeout=60,
                                  check=False)
        assert next_run.returncode == 0, next_run.stderr
        assert hold_left(namespace) == dict.fromkeys(DEVICES, "")
        assert connects(namespace)
        # The killed run's ingress qdiscs stay, empty: no later run can tell them from the guest's own.
        for device in DEVICES:
            namespace.run(["tc", "qdisc", "del", "dev", device, "ingress"])

        # A tc filter of the guest's own at the hold's preference: squid is reloaded without the hold (its listening
        # socket is a new one), the script says so and succeeds, and that filter stays.
        namespace.run(["tc", "qdisc", "add", "dev", "lo", "ingress"])
        own = namespace.run(["tc", "filter", "add", "dev", "lo", "ingress", "pref", "1", "protocol", "ip", "u32", "match",
                             "u32", "0", "0"])
        assert own.returncode == 0, own.stderr
        before = namespace.run(["ss", "-Hltne", "sport", "=", ":3128"]).stdout
        fallback = subprocess.run(held_reload(namespace, [3128]), capture_output=True, text=True, timeout=60,
                                  check=False)
        assert fallback.returncode == 0, fallback.stderr
        assert "squid reloaded without holding new connections" in fallback.stderr
        deadline = time.monotonic() + 10
        while namespace.run(["ss", "-Hltne", "sport", "=", ":3128"]).stdout in ("", before):
            assert time.monotonic() < deadline, "squid did not reconfigure"
            time.sleep(0.05)
        # The hold set on the other devices before the loopback refused it is gone from them too.
        left = hold_left(namespace)
        assert list(left) == ["lo"] and "u32" in left["lo"] and "bpf" not in left["lo"], left
        assert connects(namespace)
