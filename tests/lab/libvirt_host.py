"""libvirt on the lab host: the daemons, the lab's storage pool, and the lab's domains."""

import grp
import os
import pwd
import stat
import subprocess
import time

from tests.lab import config
from tests.lab.shell import LabError, read_pidfile, report, run, succeeds

LIBVIRT_SOCKET = "/run/libvirt/libvirt-sock"
KVM_DEVICE = "/dev/kvm"
KVM_GROUP = "kvm"  # libvirt-qemu's group, the one libvirtd checks the node with
KVM_DEVICE_MODE = 0o660  # udev's rule: KERNEL=="kvm", GROUP="kvm", MODE="0660"
KVM_GROUP_ACCESS = stat.S_IRGRP | stat.S_IWGRP
# (binary, pid file) in start order: libvirtd's qemu driver hands guest consoles to virtlogd.
DAEMONS = (("virtlogd", "/run/virtlogd.pid"), ("libvirtd", "/run/libvirtd.pid"))


def virsh(*args, check=True):
    return run(["virsh", "-q", "-c", config.LIBVIRT_URI] + list(args), check=check)


def daemons_running():
    return all(read_pidfile(pidfile) for pidfile in dict(DAEMONS).values())


def _kvm_group():
    try:
        return grp.getgrnam(KVM_GROUP)
    except KeyError:
        raise LabError("no group %s; libvirt-daemon-system creates it (scripts/bootstrap installs that)" % KVM_GROUP) from None


def _kvm_node(root="/"):
    """os.stat of /dev/kvm (under root: /proc/PID/root for another mount namespace), or None without one."""
    try:
        return os.stat(os.path.join(root, KVM_DEVICE.lstrip("/")))
    except FileNotFoundError:
        return None


def _group_can_use(node):
    return node.st_gid == _kvm_group().gr_gid and node.st_mode & KVM_GROUP_ACCESS == KVM_GROUP_ACCESS


def kvm_device_ready():
    """Whether group kvm can read and write /dev/kvm (True when this host has no such node)."""
    node = _kvm_node()
    return node is None or _group_can_use(node)


def kvm_device_status(root="/"):
    """/dev/kvm's type and mode as `ls -l` shows them, owner:group, and what up would change."""
    node = _kvm_node(root)
    if node is None:
        return "absent"
    shown = "%s %s:%s" % (stat.filemode(node.st_mode), _name(pwd.getpwuid, node.st_uid), _name(grp.getgrgid, node.st_gid))
    if _group_can_use(node):
        return shown
    return "%s (not read-write for group %s; up sets group %s, mode %04o)" % (shown, KVM_GROUP, KVM_GROUP, KVM_DEVICE_MODE)


def _name(lookup, number):
    """The user or group name of number (lookup: pwd.getpwuid or grp.getgrgid), else the number."""
    try:
        return lookup(number)[0]
    except KeyError:
        return str(number)


def ensure_kvm_device():
    """Give /dev/kvm to group kvm with mode 0660, as udev's rule does on a normal Debian host.

    On these machines the node arrives as crw------- root:root (or root:kvm). libvirtd's capability
    probe (run as root) then sees KVM while its cache check (as libvirt-qemu, group kvm) does not, so
    it re-probes QEMU on every define (25-50 s each instead of milliseconds). Done before the daemons
    start, so that libvirtd's first probe already agrees with its cache check. Guests still run under
    TCG (type qemu): nested KVM is broken here.
    """
    node = _kvm_node()
    if node is None:
        return []
    kvm = _kvm_group()
    actions = []
    if node.st_gid != kvm.gr_gid:
        os.chown(KVM_DEVICE, -1, kvm.gr_gid)
        actions.append("gave %s to group %s (was %s)" % (KVM_DEVICE, KVM_GROUP, _name(grp.getgrgid, node.st_gid)))
    # A mode that already lets the group read and write (0666 on some hosts) is left alone.
    if node.st_mode & KVM_GROUP_ACCESS != KVM_GROUP_ACCESS:
        os.chmod(KVM_DEVICE, KVM_DEVICE_MODE)
        actions.append("set %s to mode %04o (was %04o)" % (KVM_DEVICE, KVM_DEVICE_MODE, stat.S_IMODE(node.st_mode)))
    return actions


def ensure_daemons():
    """Start virtlogd and libvirtd when they are not running (these machines have no systemd)."""
    actions = ensure_kvm_device()
    started = []
    for binary, pidfile in DAEMONS:
        if read_pidfile(pidfile):
            continue
        # -d daemonizes; the daemon writes its own pid file.
        subprocess.run([binary, "-d"], check=True)
        started.append("started %s" % binary)
    if started:
        _wait_for_libvirt()
    actions += started
    for action in actions:
        report(action)
    return actions


def _wait_for_libvirt(timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(LIBVIRT_SOCKET) and succeeds(["virsh", "-c", config.LIBVIRT_URI, "version"]):
            return
        time.sleep(0.2)
    raise LabError("libvirtd did not answer on %s within %ds" % (LIBVIRT_SOCKET, timeout))


def _pool_info(virsh_run=None, name=config.POOL_NAME):
    """virsh pool-info as {field: value}, or None when the pool is not defined."""
    result = (virsh_run or virsh)("pool-info", name, check=False)
    if result.returncode != 0:
        return None
    fields = (line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in fields}


def pool_state(virsh_run=None, name=config.POOL_NAME):
    """'running', 'inactive' or None when the pool is not defined."""
    info = _pool_info(virsh_run, name)
    return None if info is None else info.get("State")


def pool_autostart(virsh_run=None, name=config.POOL_NAME):
    info = _pool_info(virsh_run, name)
    return info is not None and info.get("Autostart") == "yes"


def ensure_pool(virsh_run=None, name=config.POOL_NAME, path=config.POOL_DIR, announce=True):
    """The dir pool name at path: defined, built, started, autostart (virsh_run: the daemon's virsh)."""
    virsh_run = virsh_run or virsh
    actions = []
    state = pool_state(virsh_run, name)
    if state is None:
        virsh_run("pool-define-as", name, "dir", "--target", path)
        actions.append("defined pool %s (%s)" % (name, path))
    if not os.path.isdir(path):
        virsh_run("pool-build", name)
        actions.append("built pool directory %s" % path)
    if state != "running":
        virsh_run("pool-start", name)
        actions.append("started pool %s" % name)
    if not pool_autostart(virsh_run, name):
        virsh_run("pool-autostart", name)
        actions.append("set pool %s to autostart" % name)
    if announce:
        for action in actions:
            report(action)
    return actions


def lab_domains():
    result = virsh("list", "--all", "--name")
    return [name for name in result.stdout.split()
            if name.startswith(config.LAB_DOMAIN_PREFIXES)]


def remove_lab_domains():
    actions = []
    for name in lab_domains():
        if virsh("domstate", name).stdout.strip() != "shut off":
            virsh("destroy", name, check=False)
        virsh("undefine", name, "--managed-save", "--snapshots-metadata")
        actions.append("removed domain %s" % name)
    for action in actions:
        report(action)
    return actions


def remove_pool(virsh_run=None, name=config.POOL_NAME):
    virsh_run = virsh_run or virsh
    state = pool_state(virsh_run, name)
    if state is None:
        return []
    if state != "running":
        virsh_run("pool-start", name)
    # pool-delete only removes an empty directory; every volume in the lab pool belongs to the lab.
    for line in virsh_run("vol-list", name).stdout.splitlines():
        # "name   path"; lab volume names never contain spaces (tests/lab and _names.py derive them).
        virsh_run("vol-delete", line.split()[0], "--pool", name)
    virsh_run("pool-destroy", name)
    virsh_run("pool-delete", name)
    virsh_run("pool-undefine", name)
    report("removed pool %s" % name)
    return ["removed pool %s" % name]
