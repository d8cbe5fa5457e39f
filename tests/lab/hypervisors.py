"""The lab's hypervisors: independent libvirt hosts on this machine, reached over SSH.

Each hypervisor (config.HypervisorSpec) is a host of its own:

- network namespace `eplab-hvN` with `mgmt0` = 198.18.10.(10+N)/24, joined by a veth pair to the
  management bridge `eplabhv0` (198.18.10.1/24 in the root namespace, where the controller runs);
- its own mount and UTS namespaces (tests/lab/namespaces.py), named `lab-hvN`, in which libvirt's
  directories (/etc/libvirt with the *.conf files only, /run/libvirt, /var/lib/libvirt,
  /var/cache/libvirt, /var/log/libvirt) are bind-mounted from private ones;
- virtlogd, libvirtd and sshd started in those namespaces, with their own pid files;
- the image mirror on its own 127.0.0.1:8642 (the cache dir's mirror/, as in the root namespace);
- bridge `br0` for its VMs, and a client namespace `eplab-hvN-lan` (its "LAN") on that bridge,
  198.18.(10+N).1/24, where dnsmasq hands out 198.18.(10+N).100-200;
- bridge `br1`, the outside segment, and on it a namespace `eplab-hvN-out` standing for the uplink,
  198.18.(20+N).1/24 (no DHCP: outside addresses are static);
- the origin server (tests/lab/origin.py) on port 8080 of the LAN's and the outside namespace's address;
- dir storage pool `egress` in its own state directory.

VMs of two hypervisors never share br0 or br1: each lives in the hypervisor's own namespace. They share the client
segment: bridge `br2` of every hypervisor is joined by a veth pair to bridge `seg0` of the hub namespace `eplab-seg`
(198.18.40.1/24, 2001:db8:40::1/64, an origin server on port 8080), as hypervisors on one VLAN; a client namespace
`eplab-seg-client` (198.18.40.2, 2001:db8:40::2) is on it too. Static addresses only, no DHCP.
"""

import glob
import os
import shutil
import signal
import subprocess
import sys
import time

from tests.lab import config, lab_ssh, libvirt_host, namespaces, network, origin
from tests.lab.shell import LabError, read_pidfile, report, run, succeeds

# A SIGSTOPped process shows as stopped once a CPU runs it again: far below this, even beside TCG boots.
STOP_BOUND = 10

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOST_LIBVIRT_ETC = "/etc/libvirt"
MIRROR_HOST = "127.0.0.1"  # inside each hypervisor's namespace
DAEMONS = ("virtlogd", "libvirtd")  # start order: libvirtd's qemu driver hands consoles to virtlogd


# --- what is there ---------------------------------------------------------------------------------


def present_specs():
    """The hypervisors that have anything on this machine (namespace, run or state directory)."""
    return [spec for spec in config.hypervisor_specs(config.MAX_HYPERVISORS)
            if namespaces.netns_exists(spec.netns) or namespaces.netns_exists(spec.lan_netns)
            or os.path.isdir(spec.run_dir) or os.path.isdir(spec.state_dir)]


def spec_named(name):
    """The spec of `lab-hvN`, `hvN` or `N`."""
    for spec in config.hypervisor_specs(config.MAX_HYPERVISORS):
        if name in (spec.name, spec.name[len("lab-"):], str(spec.index)):
            return spec
    raise LabError("no lab hypervisor %r; they are lab-hv1 ... lab-hv%d" % (name, config.MAX_HYPERVISORS))


def _pidfile(spec, program):
    return spec.run_file("%s.pid" % program)


def holder(spec):
    return namespaces.holder_pid(spec.run_file("holder.pid"), spec.netns)


def _require_holder(spec):
    pid = holder(spec)
    if pid is None:
        raise LabError("hypervisor %s is not up (no namespaces); run scripts/lab up" % spec.name)
    return pid


def _in_holders_namespaces(spec, pid):
    holder_pid = holder(spec)
    return bool(pid and holder_pid and namespaces.same_mount_namespace(pid, holder_pid))


def daemon_pid(spec, program):
    """The pid of program (virtlogd, libvirtd) when it runs in the hypervisor's current namespaces."""
    pid = namespaces.daemon_pid(_pidfile(spec, program), program, spec.netns)
    return pid if _in_holders_namespaces(spec, pid) else None


def sshd_pid(spec):
    """The pid of the hypervisor's sshd listener, when it runs in the hypervisor's current namespaces."""
    pid = namespaces.daemon_pid(lab_ssh.sshd_pidfile(spec), "sshd", spec.netns)
    return pid if _in_holders_namespaces(spec, pid) else None


def mirror_pid(spec):
    pid = read_pidfile(spec.run_file("mirror.pid"))
    if pid and " -m tests.lab.mirror " in namespaces.cmdline_text(pid) and namespaces.in_netns(pid, spec.netns):
        return pid
    return None


def virsh_argv(spec, *args):
    return namespaces.nsenter(_require_holder(spec), ["virsh", "-q", "-c", config.LIBVIRT_URI] + list(args))


def virsh(spec, *args, check=True):
    """virsh on the hypervisor's own libvirtd, entered from this machine (not over SSH)."""
    return run(virsh_argv(spec, *args), check=check)


# --- up ----------------------------------------------------------------------------------------------


def up(specs):
    """Bring every hypervisor in specs up; return the list of things that had to change."""
    actions = lab_ssh.ensure_client_files(sorted(set(specs) | set(present_specs()), key=lambda spec: spec.index))
    actions += network.ensure_bridge(config.MGMT_BRIDGE)
    actions += network.ensure_address(config.MGMT_BRIDGE, "%s/%d" % (config.MGMT_ADDRESS, config.MGMT_PREFIX_LEN))
    for spec in specs:
        actions += _up_one(spec)
    if specs:
        actions += _ensure_segment(specs)
    for action in actions:
        report(action)
    return actions


def _up_one(spec):
    actions = _ensure_dirs(spec)
    actions += _ensure_network(spec)
    actions += _ensure_namespaces(spec)
    actions += _ensure_daemons(spec)
    actions += libvirt_host.ensure_pool(lambda *args, check=True: virsh(spec, *args, check=check),
                                        config.HV_POOL_NAME, spec.pool_dir, announce=False)
    actions += start_sshd(spec)
    actions += _ensure_mirror(spec)
    actions += _ensure_origins(spec)
    return ["%s: %s" % (spec.name, action) for action in actions]


def _ensure_dirs(spec):
    actions = []
    for path in [spec.run_dir, spec.state_dir] + [source for source, _target in spec.private_dirs()]:
        if not os.path.isdir(path):
            os.makedirs(path, mode=0o755)
            actions.append("created %s" % path)
    etc = spec.private_dirs()[0][0]
    # The daemons' configuration files only: no domain, network or pool definitions of the host's libvirtd.
    for conf in glob.glob(os.path.join(HOST_LIBVIRT_ETC, "*.conf")):
        target = os.path.join(etc, os.path.basename(conf))
        if not os.path.exists(target):
            shutil.copy2(conf, target)
            actions.append("copied %s" % conf)
    return actions


def _ensure_network(spec):
    mask = "/%d" % config.LAN_PREFIX_LEN
    actions = network.ensure_netns(spec.netns)
    # The LAN namespace before the hypervisor's mount namespace exists: `ip netns exec` of it from the
    # hypervisor works either way (the holder's /run/netns follows the root's), but this keeps the order plain.
    actions += network.ensure_netns(spec.lan_netns)
    actions += network.ensure_veth(spec.mgmt_veth, None, config.HV_MGMT_IFACE, spec.netns, bridge=config.MGMT_BRIDGE)
    actions += network.ensure_address(config.HV_MGMT_IFACE, "%s/%d" % (spec.address, config.MGMT_PREFIX_LEN), spec.netns)
    actions += network.ensure_bridge(config.HV_BRIDGE, spec.netns)
    actions += network.ensure_veth(config.HV_LAN_PORT, spec.netns, config.LAN_IFACE, spec.lan_netns, bridge=config.HV_BRIDGE)
    actions += network.ensure_address(config.LAN_IFACE, spec.lan_address + mask, spec.lan_netns)
    argv = network.dnsmasq_options(config.LAN_IFACE, spec.dhcp_range, dnsmasq_leasefile(spec),
                                   spec.run_file("dnsmasq.pid"), spec.run_file("dnsmasq.log"), spec.dns_records)
    actions += network.ensure_dnsmasq(spec.lan_netns, argv, spec.run_file("dnsmasq.pid"))
    actions += network.ensure_netns(spec.outside_netns)
    actions += network.ensure_bridge(config.HV_OUTSIDE_BRIDGE, spec.netns)
    actions += network.ensure_veth(config.HV_OUTSIDE_PORT, spec.netns, config.OUTSIDE_IFACE, spec.outside_netns,
                                   bridge=config.HV_OUTSIDE_BRIDGE)
    actions += network.ensure_address(config.OUTSIDE_IFACE, "%s/%d" % (spec.outside_address, config.OUTSIDE_PREFIX_LEN),
                                      spec.outside_netns)
    return actions


def _origins(spec):
    """(netns, address, pid file) of each origin server: on the LAN and on the outside segment."""
    return ((spec.lan_netns, spec.lan_address, spec.run_file("origin-lan.pid")),
            (spec.outside_netns, spec.outside_address, spec.run_file("origin-outside.pid")))


def _ensure_origins(spec):
    actions = []
    for netns, address, pidfile in _origins(spec):
        actions += origin.ensure_origin(netns, address, config.ORIGIN_PORT, pidfile, spec.run_file("origin.log"), REPO_ROOT)
    return actions


def dnsmasq_leasefile(spec):
    return spec.run_file("dnsmasq.leases")


def _ensure_namespaces(spec):
    actions = []
    pid = holder(spec)
    if pid is None:
        # Daemons left in the namespaces of a holder that is gone (a killed holder) see mounts that
        # nothing maintains any more: they are stopped and started again in the new namespaces.
        leftovers = [found for found in [namespaces.daemon_pid(_pidfile(spec, p), p, spec.netns) for p in DAEMONS]
                     + [namespaces.daemon_pid(lab_ssh.sshd_pidfile(spec), "sshd", spec.netns)] if found]
        if leftovers:
            namespaces.terminate(leftovers)
            actions.append("stopped daemons of lost namespaces (pids %s)" % ", ".join(map(str, leftovers)))
        pid = namespaces.start_holder(spec.run_file("holder.pid"), spec.netns, spec.name)
        actions.append("created mount and UTS namespaces (holder pid %d)" % pid)
    elif namespaces.hostname_of(pid) != spec.name:
        run(namespaces.nsenter(pid, ["hostname", spec.name]))
        actions.append("set host name %s" % spec.name)
    actions += namespaces.ensure_bind_mounts(pid, spec.private_dirs())
    return actions


def _ensure_daemons(spec):
    actions = []
    pid = _require_holder(spec)
    started = False
    for program in DAEMONS:
        running = daemon_pid(spec, program)
        if running and namespaces.is_frozen(running):
            os.kill(running, signal.SIGCONT)
            actions.append("thawed %s (pid %d)" % (program, running))
        if running:
            continue
        run(namespaces.nsenter(pid, [program, "-d", "-p", _pidfile(spec, program)]))
        actions.append("started %s" % program)
        started = True
    if started or actions:
        _wait_for_libvirt(spec)
    return actions


def _wait_for_libvirt(spec, timeout=30.0):
    socket = os.path.join(spec.private_dirs()[1][0], "libvirt-sock")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(socket) and succeeds(virsh_argv(spec, "version")):
            return
        time.sleep(0.2)
    raise LabError("libvirtd of %s did not answer on %s within %ds" % (spec.name, socket, timeout))


def start_sshd(spec):
    """The hypervisor's sshd running with its current configuration; the actions taken."""
    actions = []
    changed = lab_ssh.write_sshd_config(spec)
    pid = sshd_pid(spec)
    if pid and changed:
        namespaces.terminate([pid])
        actions.append("stopped sshd with an outdated configuration")
        pid = None
    if pid:
        return actions
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    run(namespaces.nsenter(_require_holder(spec), lab_ssh.sshd_argv(spec)))
    deadline = time.monotonic() + 10
    while True:
        pid = sshd_pid(spec)
        if pid and namespaces.listening(pid, spec.address, config.SSH_PORT):
            break
        if time.monotonic() > deadline:
            raise LabError("sshd of %s did not listen on %s:%d; see %s" % (
                spec.name, spec.address, config.SSH_PORT, lab_ssh.sshd_logfile(spec)))
        time.sleep(0.1)
    actions.append("started sshd on %s:%d" % (spec.address, config.SSH_PORT))
    return actions


def _ensure_mirror(spec):
    if mirror_pid(spec):
        return []
    with open(spec.run_file("mirror.log"), "ab") as log:
        process = subprocess.Popen(
            ["ip", "netns", "exec", spec.netns, sys.executable, "-m", "tests.lab.mirror", config.MIRROR_DIR,
             MIRROR_HOST, str(config.MIRROR_PORT)],
            cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    with open(spec.run_file("mirror.pid"), "w") as handle:
        handle.write("%d\n" % process.pid)
    deadline = time.monotonic() + 10
    while not namespaces.listening(process.pid, MIRROR_HOST, config.MIRROR_PORT):
        if process.poll() is not None or time.monotonic() > deadline:
            raise LabError("the image mirror of %s did not start; see %s" % (spec.name, spec.run_file("mirror.log")))
        time.sleep(0.1)
    return ["started image mirror http://%s:%d/ in netns %s" % (MIRROR_HOST, config.MIRROR_PORT, spec.netns)]


# --- the client segment --------------------------------------------------------------------------------

# The hub and the client have planned static addresses: no duplicate address detection (it would hold back their
# link-local addresses a second too; the global ones are added nodad), no router advertisement taken from a guest (a
# proxy or a test may send one), no forwarding (the hub answers as the origin; nothing lies behind it). Set before
# their devices exist, which take the namespace's defaults.
SEGMENT_HOST_SYSCTLS = tuple(("net.ipv6.conf.%s.%s" % (scope, key), 0)
                             for scope in ("all", "default") for key in ("accept_dad", "accept_ra", "forwarding"))
SEGMENT_ORIGIN_LOG = os.path.join(config.SEGMENT_RUN_DIR, "origin.log")


def _segment_hosts():
    """(netns, device, IPv4 address, IPv6 address) of the hub and the client, each address with its prefix length."""
    return tuple((netns, device, "%s/%d" % (address, config.SEGMENT_PREFIX_LEN),
                  "%s/%d" % (address6, config.SEGMENT_PREFIX6_LEN)) for netns, device, address, address6 in (
        (config.SEGMENT_NETNS, config.SEGMENT_BRIDGE, config.SEGMENT_ADDRESS, config.SEGMENT_ADDRESS6),
        (config.SEGMENT_CLIENT_NETNS, config.SEGMENT_CLIENT_IFACE, config.SEGMENT_CLIENT_ADDRESS,
         config.SEGMENT_CLIENT_ADDRESS6)))


def _segment_origins():
    """(address, pid file) of the hub's origin servers, IPv4 and IPv6."""
    return ((config.SEGMENT_ADDRESS, os.path.join(config.SEGMENT_RUN_DIR, "origin.pid")),
            (config.SEGMENT_ADDRESS6, os.path.join(config.SEGMENT_RUN_DIR, "origin6.pid")))


def _ensure_segment(specs):
    """The client segment's hub, its client and origin servers, and every hypervisor in specs on it."""
    hub = config.SEGMENT_NETNS
    actions = []
    for netns in (hub, config.SEGMENT_CLIENT_NETNS):
        actions += network.ensure_netns(netns)
        actions += network.ensure_sysctls(netns, SEGMENT_HOST_SYSCTLS)
    actions += network.ensure_bridge(config.SEGMENT_BRIDGE, hub, mac=config.SEGMENT_BRIDGE_MAC)
    actions += network.ensure_veth(config.SEGMENT_CLIENT_PORT, hub, config.SEGMENT_CLIENT_IFACE,
                                   config.SEGMENT_CLIENT_NETNS, bridge=config.SEGMENT_BRIDGE)
    for netns, device, address, address6 in _segment_hosts():
        actions += network.ensure_address(device, address, netns)
        actions += network.ensure_address(device, address6, netns)
    os.makedirs(config.SEGMENT_RUN_DIR, exist_ok=True)
    for address, pidfile in _segment_origins():
        actions += origin.ensure_origin(hub, address, config.ORIGIN_PORT, pidfile, SEGMENT_ORIGIN_LOG, REPO_ROOT)
    actions = ["client segment: %s" % action for action in actions]
    for spec in specs:
        # br2 holds no address: the hypervisor is no host on the segment, its VMs are.
        joined = network.ensure_bridge(config.HV_SEGMENT_BRIDGE, spec.netns)
        joined += network.ensure_veth(config.HV_SEGMENT_PORT, spec.netns, spec.segment_port, hub,
                                      bridge=config.HV_SEGMENT_BRIDGE, far_bridge=config.SEGMENT_BRIDGE)
        actions += ["%s: %s" % (spec.name, action) for action in joined]
    return actions


def _remove_segment():
    """Stop what runs in the hub and the client namespace and delete both (and with the hub every hypervisor's veth
    to it); the actions taken."""
    actions = []
    for netns in (config.SEGMENT_NETNS, config.SEGMENT_CLIENT_NETNS):
        pids = namespaces.netns_pids(netns)
        if pids:
            namespaces.terminate(pids)
            actions.append("stopped %d process(es) in netns %s" % (len(pids), netns))
        if namespaces.netns_exists(netns):
            run(["ip", "netns", "del", netns])
            actions.append("deleted netns %s" % netns)
    if os.path.isdir(config.SEGMENT_RUN_DIR):
        shutil.rmtree(config.SEGMENT_RUN_DIR)
    return ["client segment: %s" % action for action in actions]


def _segment_status():
    state = {}
    for netns, device, address, address6 in _segment_hosts():
        state["segment netns %s: %s %s, %s" % (netns, device, address, address6)] = (
            "present" if namespaces.netns_exists(netns) and network.link_exists(device, netns) else "absent")
    for (_address, pidfile), url in zip(_segment_origins(), config.segment_origin_urls()):
        state["segment origin %s" % url] = "running" if origin.origin_pid(pidfile) else "not running"
    return state


# --- helpers for tests ---------------------------------------------------------------------------------


def stop_sshd(spec):
    """Stop the hypervisor's sshd and drop its sessions, as a host whose SSH goes away; the actions taken."""
    pids = [pid for pid in namespaces.netns_pids(spec.netns) if namespaces.runs(pid, "sshd")]
    if not pids:
        return []
    namespaces.terminate(pids)
    return ["stopped sshd and %d session process(es)" % (len(pids) - 1)]


def freeze(spec):
    """SIGSTOP the hypervisor's libvirtd, and return once it is stopped: it accepts connections and never answers.

    The stop lands when a CPU next runs the daemon, milliseconds later on a busy machine. thaw() resumes
    only a stopped daemon, so a freeze that returned at once and a quick thaw would leave it stopped."""
    pid = daemon_pid(spec, "libvirtd")
    if pid is None:
        raise LabError("libvirtd of %s is not running" % spec.name)
    if namespaces.is_frozen(pid):
        return []
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + STOP_BOUND
    while not namespaces.is_frozen(pid):
        if time.monotonic() > deadline:
            raise LabError("libvirtd of %s (pid %d) did not stop within %d s of SIGSTOP" % (spec.name, pid, STOP_BOUND))
        time.sleep(0.001)
    return ["froze libvirtd (pid %d)" % pid]


def thaw(spec):
    pid = daemon_pid(spec, "libvirtd")
    if pid is None or not namespaces.is_frozen(pid):
        return []
    os.kill(pid, signal.SIGCONT)
    return ["thawed libvirtd (pid %d)" % pid]


# --- down ----------------------------------------------------------------------------------------------


def down():
    """Remove every lab hypervisor: its processes (VMs included), namespaces, files, the client segment and the
    management bridge."""
    actions = []
    actions += _remove_segment()
    for spec in present_specs():
        actions += ["%s: %s" % (spec.name, action) for action in _down_one(spec)]
    if network.link_exists(config.MGMT_BRIDGE):
        run(["ip", "link", "del", config.MGMT_BRIDGE])
        actions.append("deleted bridge %s" % config.MGMT_BRIDGE)
    if os.path.isdir(config.SSH_DIR):
        shutil.rmtree(config.SSH_DIR)
        actions.append("removed %s" % config.SSH_DIR)
    if os.path.isdir(config.HV_RUN_DIR) and not os.listdir(config.HV_RUN_DIR):
        os.rmdir(config.HV_RUN_DIR)
    if os.path.isdir(config.HV_STATE_DIR) and not os.listdir(config.HV_STATE_DIR):
        os.rmdir(config.HV_STATE_DIR)
    for action in actions:
        report(action)
    return actions


def _down_one(spec):
    actions = []
    # Everything the hypervisor runs lives in its network namespaces: the holder, the daemons, sshd
    # and its sessions, the mirror, the VMs' qemu processes, dnsmasq and whatever a test served on the LAN.
    for netns in (spec.netns, spec.lan_netns, spec.outside_netns):
        pids = namespaces.netns_pids(netns)
        if pids:
            namespaces.terminate(pids)
            actions.append("stopped %d process(es) in netns %s" % (len(pids), netns))
    for netns in (spec.netns, spec.lan_netns, spec.outside_netns):
        if namespaces.netns_exists(netns):
            run(["ip", "netns", "del", netns])
            actions.append("deleted netns %s" % netns)
    if network.link_exists(spec.mgmt_veth):
        run(["ip", "link", "del", spec.mgmt_veth])
    for path in (spec.run_dir, spec.state_dir):
        if os.path.isdir(path):
            shutil.rmtree(path)
            actions.append("removed %s" % path)
    return actions


# --- status --------------------------------------------------------------------------------------------


UP_WORDS = ("running", "present", "listening", "current", "up")


def status(specs):
    """{component: description} for every hypervisor in specs; a part that is up starts with an UP_WORDS word."""
    state = {}
    for spec in specs:
        state.update(("%s %s" % (spec.name, key), value) for key, value in _status_one(spec).items())
    if specs:
        state.update(_segment_status())
    return state


def _status_one(spec):
    state = {}
    pid = holder(spec)
    if not namespaces.netns_exists(spec.netns):
        state["netns %s" % spec.netns] = "absent"
    else:
        state["address %s (netns %s)" % (spec.address, spec.netns)] = (
            "present" if network.link_exists(config.HV_MGMT_IFACE, spec.netns) else "absent")
    state["host name"] = ("up (%s)" % namespaces.hostname_of(pid)) if pid else "no namespaces"
    sshd = sshd_pid(spec)
    state["sshd %s:%d" % (spec.address, config.SSH_PORT)] = (
        "listening (pid %d)" % sshd if sshd and namespaces.listening(sshd, spec.address, config.SSH_PORT) else "stopped")
    for program in DAEMONS:
        running = daemon_pid(spec, program) if pid else None
        if running is None:
            state[program] = "not running"
        else:
            state[program] = "frozen (pid %d, SIGSTOP; scripts/lab thaw %s)" % (running, spec.name) \
                if namespaces.is_frozen(running) else "running (pid %d)" % running
    answering = pid and state["libvirtd"].startswith("running")
    pool_state = libvirt_host.pool_state(lambda *a, check=True: virsh(spec, *a, check=check), config.HV_POOL_NAME) \
        if answering else None
    state["pool %s" % config.HV_POOL_NAME] = (pool_state or "undefined") if answering else "unknown"
    state["bridge %s" % config.HV_BRIDGE] = (
        "present" if namespaces.netns_exists(spec.netns) and network.link_exists(config.HV_BRIDGE, spec.netns) else "absent")
    state["LAN netns %s (%s)" % (spec.lan_netns, spec.lan_address)] = (
        "present" if namespaces.netns_exists(spec.lan_netns) else "absent")
    state["DHCP %s-%s" % spec.dhcp_range] = "running" if network.dnsmasq_pid(spec.run_file("dnsmasq.pid")) else "not running"
    state["mirror http://%s:%d/" % (MIRROR_HOST, config.MIRROR_PORT)] = "running" if mirror_pid(spec) else "not running"
    state["outside netns %s (%s) on %s" % (spec.outside_netns, spec.outside_address, config.HV_OUTSIDE_BRIDGE)] = (
        "present" if namespaces.netns_exists(spec.outside_netns)
        and network.link_exists(config.HV_OUTSIDE_BRIDGE, spec.netns) else "absent")
    for _netns, address, pidfile in _origins(spec):
        state["origin %s" % spec.origin_url(address)] = "running" if origin.origin_pid(pidfile) else "not running"
    state["segment bridge %s (to %s)" % (config.HV_SEGMENT_BRIDGE, config.SEGMENT_BRIDGE)] = (
        "present" if namespaces.netns_exists(spec.netns) and network.link_exists(config.HV_SEGMENT_BRIDGE, spec.netns)
        and namespaces.netns_exists(config.SEGMENT_NETNS)
        and network.link_exists(spec.segment_port, config.SEGMENT_NETNS) else "absent")
    state[libvirt_host.KVM_DEVICE] = libvirt_host.kvm_device_status("/proc/%d/root" % pid) if pid else "unknown"
    if answering:
        state["domains"] = ", ".join(virsh(spec, "list", "--all", "--name").stdout.split()) or "none"
    return state


def is_up(state):
    return all(value.startswith(UP_WORDS) for key, value in state.items()
               if not key.endswith((" domains", " " + libvirt_host.KVM_DEVICE)))
