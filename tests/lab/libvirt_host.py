"""libvirt on the lab host: the daemons, the lab's storage pool, and the lab's domains."""

import grp
import os
import subprocess
import time

from tests.lab import config
from tests.lab.shell import LabError, read_pidfile, report, run, succeeds

LIBVIRT_SOCKET = "/run/libvirt/libvirt-sock"
KVM_DEVICE = "/dev/kvm"
# (binary, pid file) in start order: libvirtd's qemu driver hands guest consoles to virtlogd.
DAEMONS = (("virtlogd", "/run/virtlogd.pid"), ("libvirtd", "/run/libvirtd.pid"))


def virsh(*args, check=True):
    return run(["virsh", "-q", "-c", config.LIBVIRT_URI] + list(args), check=check)


def daemons_running():
    return all(read_pidfile(pidfile) for pidfile in dict(DAEMONS).values())


def ensure_kvm_device_group():
    """Give /dev/kvm to group kvm, as udev does on a normal Debian host.

    On these machines the node arrives owned by an unrelated group. libvirtd's capability probe
    (run as root) then sees KVM while its cache check (as libvirt-qemu, group kvm) does not, so it
    re-probes QEMU forever and every domain define hangs. Guests still run under TCG (type qemu):
    nested KVM is broken here.
    """
    if not os.path.exists(KVM_DEVICE):
        return []
    try:
        kvm_gid = grp.getgrnam("kvm").gr_gid
    except KeyError:
        return []
    if os.stat(KVM_DEVICE).st_gid == kvm_gid:
        return []
    os.chown(KVM_DEVICE, -1, kvm_gid)
    return ["gave %s to group kvm" % KVM_DEVICE]


def ensure_daemons():
    """Start virtlogd and libvirtd when they are not running (these machines have no systemd)."""
    actions = ensure_kvm_device_group()
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


def _pool_info():
    """virsh pool-info as {field: value}, or None when the pool is not defined."""
    result = virsh("pool-info", config.POOL_NAME, check=False)
    if result.returncode != 0:
        return None
    fields = (line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in fields}


def pool_state():
    """'running', 'inactive' or None when the pool is not defined."""
    info = _pool_info()
    return None if info is None else info.get("State")


def pool_autostart():
    info = _pool_info()
    return info is not None and info.get("Autostart") == "yes"


def ensure_pool():
    actions = []
    state = pool_state()
    if state is None:
        virsh("pool-define-as", config.POOL_NAME, "dir", "--target", config.POOL_DIR)
        actions.append("defined pool %s (%s)" % (config.POOL_NAME, config.POOL_DIR))
    if not os.path.isdir(config.POOL_DIR):
        virsh("pool-build", config.POOL_NAME)
        actions.append("built pool directory %s" % config.POOL_DIR)
    if state != "running":
        virsh("pool-start", config.POOL_NAME)
        actions.append("started pool %s" % config.POOL_NAME)
    if not pool_autostart():
        virsh("pool-autostart", config.POOL_NAME)
        actions.append("set pool %s to autostart" % config.POOL_NAME)
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


def remove_pool():
    state = pool_state()
    if state is None:
        return []
    if state != "running":
        virsh("pool-start", config.POOL_NAME)
    # pool-delete only removes an empty directory; every volume in the lab pool belongs to the lab.
    for line in virsh("vol-list", config.POOL_NAME).stdout.splitlines():
        # "name   path"; lab volume names never contain spaces (tests/lab and _names.py derive them).
        virsh("vol-delete", line.split()[0], "--pool", config.POOL_NAME)
    virsh("pool-destroy", config.POOL_NAME)
    virsh("pool-delete", config.POOL_NAME)
    virsh("pool-undefine", config.POOL_NAME)
    report("removed pool %s" % config.POOL_NAME)
    return ["removed pool %s" % config.POOL_NAME]
