"""The lab network: bridge eplab0 (no address) <-> veth <-> netns `eplab` running dnsmasq.

Guests' NICs join the bridge; every packet to or from a guest is sent or received inside the netns,
so tests never touch the host's real networks.
"""

import os
import time

from tests.lab import config
from tests.lab.shell import LabError, process_cmdline, read_pidfile, report, run, succeeds

BRIDGE_NETFILTER = "/proc/sys/net/bridge/bridge-nf-call-iptables"


def link_exists(name, netns=None):
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    return succeeds(prefix + ["link", "show", "dev", name])


def _link_is_up(name, netns=None):
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    result = run(prefix + ["-o", "link", "show", "dev", name], check=False)
    return result.returncode == 0 and ",UP" in result.stdout.split(">")[0]


def netns_exists():
    return os.path.exists(os.path.join("/run/netns", config.NETNS))


def ensure_network():
    actions = []
    if not link_exists(config.BRIDGE):
        run(["ip", "link", "add", config.BRIDGE, "type", "bridge"])
        actions.append("created bridge %s" % config.BRIDGE)
    if not _link_is_up(config.BRIDGE):
        run(["ip", "link", "set", config.BRIDGE, "up"])
        actions.append("set bridge %s up" % config.BRIDGE)
    # With br_netfilter loaded, bridged frames traverse the host's iptables FORWARD chain, where a
    # DROP policy (Docker sets one) silently eats the guests' DHCP and test traffic.
    if os.path.exists(BRIDGE_NETFILTER):
        with open(BRIDGE_NETFILTER) as handle:
            if handle.read().strip() != "0":
                with open(BRIDGE_NETFILTER, "w") as out:
                    out.write("0\n")
                actions.append("set net.bridge.bridge-nf-call-iptables=0")
    if not netns_exists():
        run(["ip", "netns", "add", config.NETNS])
        actions.append("created netns %s" % config.NETNS)
    if not _link_is_up("lo", config.NETNS):
        run(["ip", "-n", config.NETNS, "link", "set", "lo", "up"])
    if not link_exists(config.VETH_NETNS_END, config.NETNS):
        if link_exists(config.VETH_BRIDGE_END):
            run(["ip", "link", "del", config.VETH_BRIDGE_END])
        run(["ip", "link", "add", config.VETH_BRIDGE_END, "type", "veth",
             "peer", "name", config.VETH_NETNS_END, "netns", config.NETNS])
        actions.append("created veth %s <-> %s:%s" % (
            config.VETH_BRIDGE_END, config.NETNS, config.VETH_NETNS_END))
    veth_link = run(["ip", "-o", "link", "show", "dev", config.VETH_BRIDGE_END]).stdout
    if "master %s" % config.BRIDGE not in veth_link:
        run(["ip", "link", "set", config.VETH_BRIDGE_END, "master", config.BRIDGE])
        actions.append("enslaved %s to %s" % (config.VETH_BRIDGE_END, config.BRIDGE))
    if not _link_is_up(config.VETH_BRIDGE_END):
        run(["ip", "link", "set", config.VETH_BRIDGE_END, "up"])
    address = "%s/%d" % (config.NETNS_ADDRESS, config.NETNS_PREFIX_LEN)
    shown = run(["ip", "-n", config.NETNS, "-o", "addr", "show", "dev", config.VETH_NETNS_END]).stdout
    if " %s " % address not in shown:
        run(["ip", "-n", config.NETNS, "addr", "add", address, "dev", config.VETH_NETNS_END])
        actions.append("addressed %s:%s with %s" % (config.NETNS, config.VETH_NETNS_END, address))
    if not _link_is_up(config.VETH_NETNS_END, config.NETNS):
        run(["ip", "-n", config.NETNS, "link", "set", config.VETH_NETNS_END, "up"])
    actions.extend(_ensure_dnsmasq())
    for action in actions:
        report(action)
    return actions


def dnsmasq_argv():
    return ["dnsmasq",
            "--conf-file=/dev/null",
            "--interface=%s" % config.VETH_NETNS_END, "--bind-interfaces",
            "--dhcp-range=%s,%s,255.255.255.0,12h" % (config.DHCP_RANGE_START, config.DHCP_RANGE_END),
            "--dhcp-authoritative",
            # One lease per MAC: a guest re-created with the same MAC (fresh machine-id, so a new
            # DHCP client id) gets its old address back instead of a second lease.
            "--dhcp-ignore-clid",
            "--dhcp-leasefile=%s" % config.DNSMASQ_LEASEFILE,
            "--pid-file=%s" % config.DNSMASQ_PIDFILE,
            # dnsmasq answers DNS only for the lab (guests' DHCP hostnames); nothing is forwarded.
            "--no-resolv", "--no-hosts", "--domain=lab", "--local=/lab/",
            "--log-dhcp", "--log-facility=%s" % os.path.join(config.RUN_DIR, "dnsmasq.log"),
            # The lease and pid files live in RUN_DIR, owned by root.
            "--user=root", "--group=root"]


def dnsmasq_pid():
    pid = read_pidfile(config.DNSMASQ_PIDFILE)
    if pid and any(arg.endswith(b"dnsmasq") for arg in process_cmdline(pid)[:1]):
        return pid
    return None


def _ensure_dnsmasq():
    actions = []
    argv = dnsmasq_argv()
    pid = dnsmasq_pid()
    if pid:
        running = [arg.decode() for arg in process_cmdline(pid) if arg]
        if running[1:] == argv[1:]:
            return []
        _stop_dnsmasq(pid)
        actions.append("stopped dnsmasq with outdated options")
    os.makedirs(config.RUN_DIR, exist_ok=True)
    run(["ip", "netns", "exec", config.NETNS] + argv)
    deadline = time.monotonic() + 10
    while not dnsmasq_pid():
        if time.monotonic() > deadline:
            raise LabError("dnsmasq in netns %s did not start" % config.NETNS)
        time.sleep(0.1)
    actions.append("started dnsmasq in netns %s (DHCP %s-%s)" % (
        config.NETNS, config.DHCP_RANGE_START, config.DHCP_RANGE_END))
    return actions


def _stop_dnsmasq(pid):
    os.kill(pid, 15)
    deadline = time.monotonic() + 10
    while os.path.exists("/proc/%d" % pid):
        if time.monotonic() > deadline:
            raise LabError("dnsmasq (pid %d) did not stop" % pid)
        time.sleep(0.1)


def dhcp_leases():
    """{mac: (ip, expiry epoch seconds)} from dnsmasq's lease file; the newest lease per MAC."""
    leases = {}
    try:
        with open(config.DNSMASQ_LEASEFILE) as handle:
            for line in handle:
                fields = line.split()
                if len(fields) >= 3:
                    mac, lease = fields[1].lower(), (fields[2], int(fields[0]))
                    if mac not in leases or lease[1] > leases[mac][1]:
                        leases[mac] = lease
    except FileNotFoundError:
        pass
    return leases


def remove_network():
    actions = []
    pid = dnsmasq_pid()
    if pid:
        _stop_dnsmasq(pid)
        actions.append("stopped dnsmasq")
    for path in (config.DNSMASQ_PIDFILE, config.DNSMASQ_LEASEFILE):
        if os.path.exists(path):
            os.unlink(path)
    if netns_exists():
        # Deleting the netns destroys its veth end, and with it the peer on the bridge.
        run(["ip", "netns", "del", config.NETNS])
        actions.append("deleted netns %s" % config.NETNS)
    if link_exists(config.VETH_BRIDGE_END):
        run(["ip", "link", "del", config.VETH_BRIDGE_END])
    if link_exists(config.BRIDGE):
        run(["ip", "link", "del", config.BRIDGE])
        actions.append("deleted bridge %s" % config.BRIDGE)
    for action in actions:
        report(action)
    return actions
