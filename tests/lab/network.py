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


def netns_exists(name=config.NETNS):
    return os.path.exists(os.path.join("/run/netns", name))


def ensure_bridge(name, netns=None, mac=None):
    """A bridge named name (in netns, or the root namespace), up, with the MAC address mac when given.

    A bridge without a MAC of its own takes its ports' lowest, which changes when a port comes or goes: its
    neighbours, holding the old one for its address, then lose it until their cache entry fails (8 s or more)."""
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    actions = []
    if not link_exists(name, netns):
        run(prefix + ["link", "add", name, "type", "bridge"])
        actions.append("created bridge %s%s" % (name, " in netns %s" % netns if netns else ""))
    if mac and "link/ether %s " % mac not in run(prefix + ["-o", "link", "show", "dev", name]).stdout:
        run(prefix + ["link", "set", name, "address", mac])
        actions.append("set bridge %s's MAC address %s" % (name, mac))
    if not _link_is_up(name, netns):
        run(prefix + ["link", "set", name, "up"])
        actions.append("set bridge %s up" % name)
    return actions


def ensure_netns(name):
    actions = []
    if not netns_exists(name):
        run(["ip", "netns", "add", name])
        actions.append("created netns %s" % name)
    if not _link_is_up("lo", name):
        run(["ip", "-n", name, "link", "set", "lo", "up"])
    return actions


def ensure_veth(near, near_netns, far, far_netns, bridge=None, far_bridge=None):
    """A veth pair near <-> far (each in its netns, None for the root one), both up, near enslaved to bridge and far
    to far_bridge (a bridge in far_netns) when given."""
    near_prefix = ["ip", "-n", near_netns] if near_netns else ["ip"]
    actions = []
    if not link_exists(far, far_netns):
        if link_exists(near, near_netns):
            run(near_prefix + ["link", "del", near])
        run(near_prefix + ["link", "add", near, "type", "veth", "peer", "name", far] + (["netns", far_netns] if far_netns else []))
        actions.append("created veth %s%s <-> %s%s" % (
            "%s:" % near_netns if near_netns else "", near, "%s:" % far_netns if far_netns else "", far))
    for name, netns, master in ((near, near_netns, bridge), (far, far_netns, far_bridge)):
        if master:
            actions += _ensure_master(name, netns, master)
    for name, netns in ((near, near_netns), (far, far_netns)):
        if not _link_is_up(name, netns):
            run((["ip", "-n", netns] if netns else ["ip"]) + ["link", "set", name, "up"])
    return actions


def _ensure_master(device, netns, bridge):
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    if "master %s " % bridge in run(prefix + ["-o", "link", "show", "dev", device]).stdout:
        return []
    run(prefix + ["link", "set", device, "master", bridge])
    return ["enslaved %s to %s" % (device, bridge)]


def ensure_address(device, address, netns=None):
    """address ("A.B.C.D/LEN" or an IPv6 one) on device, in netns or the root namespace.

    An IPv6 address is added without duplicate address detection (nodad): the lab's addresses are planned, and DAD
    would hold each one back a second or more (tentative) after every `up`."""
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    shown = run(prefix + ["-o", "addr", "show", "dev", device]).stdout
    if " %s " % address in shown:
        return []
    run(prefix + ["addr", "add", address, "dev", device] + (["nodad"] if ":" in address else []))
    return ["addressed %s%s with %s" % ("%s:" % netns if netns else "", device, address)]


def ensure_sysctls(netns, settings):
    """Each (key, value) of settings set in netns, a key as sysctl names it (net.ipv6.conf.all.accept_ra); the actions
    taken. Written to /proc/sys from inside the namespace: procps' sysctl is not on every machine."""
    actions = []
    for key, value in settings:
        path = "/proc/sys/" + key.replace(".", "/")
        if run(["ip", "netns", "exec", netns, "cat", path]).stdout.strip() != str(value):
            run(["ip", "netns", "exec", netns, "sh", "-c", 'echo "$1" > "$2"', "sh", str(value), path])
            actions.append("set %s=%s in netns %s" % (key, value, netns))
    return actions


def ensure_network():
    actions = ensure_bridge(config.BRIDGE)
    # With br_netfilter loaded, bridged frames traverse the host's iptables FORWARD chain, where a
    # DROP policy (Docker sets one) silently eats the guests' DHCP and test traffic.
    if os.path.exists(BRIDGE_NETFILTER):
        with open(BRIDGE_NETFILTER) as handle:
            if handle.read().strip() != "0":
                with open(BRIDGE_NETFILTER, "w") as out:
                    out.write("0\n")
                actions.append("set net.bridge.bridge-nf-call-iptables=0")
    actions += ensure_netns(config.NETNS)
    actions += ensure_veth(config.VETH_BRIDGE_END, None, config.VETH_NETNS_END, config.NETNS, bridge=config.BRIDGE)
    actions += ensure_address(config.VETH_NETNS_END, "%s/%d" % (config.NETNS_ADDRESS, config.NETNS_PREFIX_LEN), config.NETNS)
    actions.extend(_ensure_dnsmasq())
    for action in actions:
        report(action)
    return actions


def dnsmasq_options(interface, dhcp_range, leasefile, pidfile, logfile, host_records=()):
    """dnsmasq's options: DHCP on interface over dhcp_range (start, end) of a /24, DNS for the lab domain only.

    host_records: (name, address) pairs it answers besides the DHCP clients' names (names in the lab domain).
    """
    return ["--conf-file=/dev/null",
            "--interface=%s" % interface, "--bind-interfaces",
            "--dhcp-range=%s,%s,255.255.255.0,12h" % dhcp_range,
            "--dhcp-authoritative",
            # One lease per MAC: a guest re-created with the same MAC (fresh machine-id, so a new
            # DHCP client id) gets its old address back instead of a second lease.
            "--dhcp-ignore-clid",
            "--dhcp-leasefile=%s" % leasefile,
            "--pid-file=%s" % pidfile,
            # dnsmasq answers DNS only for the lab (guests' DHCP hostnames); nothing is forwarded.
            "--no-resolv", "--no-hosts", "--domain=lab", "--local=/lab/",
            *["--host-record=%s,%s" % record for record in host_records],
            "--log-dhcp", "--log-facility=%s" % logfile,
            # The lease and pid files live in the lab's run directory, owned by root.
            "--user=root", "--group=root"]


def dnsmasq_argv():
    options = dnsmasq_options(config.VETH_NETNS_END, (config.DHCP_RANGE_START, config.DHCP_RANGE_END),
                              config.DNSMASQ_LEASEFILE, config.DNSMASQ_PIDFILE, os.path.join(config.RUN_DIR, "dnsmasq.log"))
    return ["dnsmasq"] + options


def dnsmasq_pid(pidfile=config.DNSMASQ_PIDFILE):
    pid = read_pidfile(pidfile)
    if pid and any(arg.endswith(b"dnsmasq") for arg in process_cmdline(pid)[:1]):
        return pid
    return None


def ensure_dnsmasq(netns, options, pidfile):
    """dnsmasq with exactly these options running in netns (restarted when its options changed)."""
    actions = []
    pid = dnsmasq_pid(pidfile)
    if pid:
        running = [arg.decode() for arg in process_cmdline(pid) if arg]
        if running[1:] == options:
            return []
        _stop_dnsmasq(pid)
        actions.append("stopped dnsmasq with outdated options")
    os.makedirs(os.path.dirname(pidfile), exist_ok=True)
    run(["ip", "netns", "exec", netns, "dnsmasq"] + options)
    deadline = time.monotonic() + 10
    while not dnsmasq_pid(pidfile):
        if time.monotonic() > deadline:
            raise LabError("dnsmasq in netns %s did not start" % netns)
        time.sleep(0.1)
    dhcp_range = next(arg for arg in options if arg.startswith("--dhcp-range=")).split("=", 1)[1].split(",")[:2]
    actions.append("started dnsmasq in netns %s (DHCP %s-%s)" % (netns, dhcp_range[0], dhcp_range[1]))
    return actions


def _ensure_dnsmasq():
    return ensure_dnsmasq(config.NETNS, dnsmasq_argv()[1:], config.DNSMASQ_PIDFILE)


def stop_dnsmasq(pidfile, leasefile):
    """Stop the dnsmasq of pidfile and remove its pid and lease files; the actions taken."""
    actions = []
    pid = dnsmasq_pid(pidfile)
    if pid:
        _stop_dnsmasq(pid)
        actions.append("stopped dnsmasq")
    for path in (pidfile, leasefile):
        if os.path.exists(path):
            os.unlink(path)
    return actions


def _stop_dnsmasq(pid):
    os.kill(pid, 15)
    deadline = time.monotonic() + 10
    while os.path.exists("/proc/%d" % pid):
        if time.monotonic() > deadline:
            raise LabError("dnsmasq (pid %d) did not stop" % pid)
        time.sleep(0.1)


def dhcp_leases(leasefile=config.DNSMASQ_LEASEFILE):
    """{mac: (ip, expiry epoch seconds)} from dnsmasq's lease file; the newest lease per MAC."""
    leases = {}
    try:
        with open(leasefile) as handle:
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
    actions = stop_dnsmasq(config.DNSMASQ_PIDFILE, config.DNSMASQ_LEASEFILE)
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
