"""A host of its own inside this machine: a network namespace plus a mount and a UTS namespace.

`ip netns add` makes the network namespace persistent. The mount and UTS namespaces are held by a
`sleep infinity` started in them (the holder, its pid in a pid file): every daemon of the host is
started with nsenter into the holder's namespaces, so they all see the same private mounts and the
same host name, and a daemon can be stopped and started again without losing them.

The holder's mount namespace is a slave of the root one (unshare --propagation slave): network
namespaces added later under /run/netns still appear inside it, while its own bind mounts (libvirt's
private directories) never leak out.
"""

import ipaddress
import os
import signal
import subprocess
import time

from tests.lab.shell import LabError, process_cmdline, read_pidfile, run

NETNS_DIR = "/run/netns"
HOLDER_ARGV = ("sleep", "infinity")


def netns_exists(name):
    return os.path.exists(os.path.join(NETNS_DIR, name))


def _namespace_id(path):
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def in_netns(pid, netns):
    """Whether process pid lives in the named network namespace."""
    wanted = _namespace_id(os.path.join(NETNS_DIR, netns))
    return wanted is not None and _namespace_id("/proc/%d/ns/net" % pid) == wanted


def same_mount_namespace(pid, other):
    """Whether two processes share a mount namespace (False when either is gone)."""
    first = _namespace_id("/proc/%d/ns/mnt" % pid)
    return first is not None and first == _namespace_id("/proc/%d/ns/mnt" % other)


def netns_pids(netns):
    """The pids of every process in the named network namespace."""
    wanted = _namespace_id(os.path.join(NETNS_DIR, netns))
    if wanted is None:
        return []
    return sorted(int(entry) for entry in os.listdir("/proc")
                  if entry.isdigit() and _namespace_id("/proc/%s/ns/net" % entry) == wanted)


def program_of(pid):
    """The base name of the program pid runs ('' when it is gone)."""
    argv = process_cmdline(pid)
    return os.path.basename(argv[0].decode()) if argv and argv[0] else ""


def cmdline_text(pid):
    """The process's command line as one string (sshd rewrites its own into "sshd: ...")."""
    return " ".join(arg.decode(errors="replace") for arg in process_cmdline(pid) if arg)


def runs(pid, program):
    """Whether pid runs program (a base name), judged by its command line."""
    text = cmdline_text(pid)
    return program_of(pid) == program or text.startswith((program + ":", "/usr/sbin/%s " % program))


def daemon_pid(pidfile, program, netns):
    """The pid in pidfile when that process runs program inside netns, else None."""
    pid = read_pidfile(pidfile)
    if pid and runs(pid, program) and in_netns(pid, netns):
        return pid
    return None


def is_frozen(pid):
    """Whether pid is stopped by a signal (SIGSTOP): state T in /proc/PID/stat."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except OSError:
        return False


def holder_pid(pidfile, netns):
    pid = daemon_pid(pidfile, HOLDER_ARGV[0], netns)
    if pid and [arg.decode() for arg in process_cmdline(pid) if arg] == list(HOLDER_ARGV):
        return pid
    return None


def start_holder(pidfile, netns, hostname):
    """Start the holder in netns with new mount and UTS namespaces, named hostname; return its pid."""
    process = subprocess.Popen(
        ["ip", "netns", "exec", netns, "unshare", "--mount", "--uts", "--propagation", "slave"] + list(HOLDER_ARGV),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    own_uts = _namespace_id("/proc/self/ns/uts")
    deadline = time.monotonic() + 10
    # ip netns exec and unshare exec each other in turn: the pid ends up running sleep in the new namespaces.
    while not (program_of(process.pid) == HOLDER_ARGV[0] and _namespace_id("/proc/%d/ns/uts" % process.pid) != own_uts):
        if process.poll() is not None or time.monotonic() > deadline:
            raise LabError("the namespace holder of %s did not start (rc=%s)" % (netns, process.poll()))
        time.sleep(0.05)
    with open(pidfile, "w") as handle:
        handle.write("%d\n" % process.pid)
    run(nsenter(process.pid, ["hostname", hostname]))
    return process.pid


def nsenter(pid, argv, mount=True, uts=True, net=True):
    """argv run in the holder's namespaces."""
    flags = [flag for flag, wanted in (("--mount", mount), ("--uts", uts), ("--net", net)) if wanted]
    return ["nsenter", "--target", str(pid)] + flags + ["--"] + list(argv)


def hostname_of(pid):
    return run(nsenter(pid, ["hostname"])).stdout.strip()


def mount_points(pid):
    """{mount point: root of the mount within its filesystem} in pid's mount namespace."""
    points = {}
    with open("/proc/%d/mountinfo" % pid) as handle:
        for line in handle:
            fields = line.split()
            points[fields[4]] = fields[3]
    return points


def ensure_bind_mounts(pid, pairs):
    """Bind-mount each (source, target) in the holder's mount namespace unless already there."""
    actions = []
    points = mount_points(pid)
    for source, target in pairs:
        # A bind mount's root is the source's path within the filesystem holding it; on this
        # machine's single root filesystem that is the path itself, elsewhere a suffix of it.
        if target in points and source.endswith(points[target]) and points[target] != "/":
            continue
        run(nsenter(pid, ["mount", "--bind", source, target], uts=False, net=False))
        actions.append("bind-mounted %s on %s" % (source, target))
    return actions


def listening(pid, address, port):
    """Whether a TCP socket listens on address:port in pid's network namespace (from /proc/PID/net/tcp, or tcp6 for
    an IPv6 address: each of its 32-bit words written as the kernel holds it, little-endian here)."""
    if ":" in address:
        packed = ipaddress.IPv6Address(address).packed
        written = "".join("%02X%02X%02X%02X" % tuple(reversed(packed[at:at + 4])) for at in range(0, 16, 4))
        table = "tcp6"
    else:
        written = "".join("%02X" % int(part) for part in reversed(address.split(".")))
        table = "tcp"
    wanted = "%s:%04X" % (written, port)
    try:
        with open("/proc/%d/net/%s" % (pid, table)) as handle:
            next(handle)
            return any(fields[1] == wanted and fields[3] == "0A" for fields in (line.split() for line in handle))
    except OSError:
        return False


def terminate(pids, timeout=10.0):
    """SIGTERM each pid (thawing it first: a stopped process cannot act on it), SIGKILL what is left."""
    pids = [pid for pid in pids if os.path.exists("/proc/%d" % pid)]
    for sig in (signal.SIGCONT, signal.SIGTERM):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
