"""The lab's bare host: a hypervisor host that starts with nothing of QEMU or libvirt.

It is a lab hypervisor (tests/lab/hypervisors.py) in everything the network sees: network namespace
`eplab-bare` with `mgmt0` = 198.18.10.30/24 on the management bridge, bridge `br0`, a LAN namespace
`eplab-bare-lan` (198.18.30.1/24, DHCP .100-.200), the origin server on port 8080 of its LAN and outside
segment, the image mirror on its own 127.0.0.1:8642, and
its own sshd whose host key is in the lab's known_hosts. What differs is its filesystem: a Debian 12
minbase root with openssh-server, python3 and iproute2 only (tests/lab/build_bare_root.sh, cached by
the recipe's SHA-256 in the cache dir), copied afresh on every `up`. The holder's mount namespace has
that copy as its root (bind-mounted onto itself, then pivot_root): libvirt's per-domain mount
namespaces need the root to be a mount point. It gets its own /proc, /sys (of its network namespace),
/dev (a tmpfs with the few nodes and links a server has, /dev/net/tun and /dev/stdin among them, and no /dev/kvm: the host's
node stays out of reach of package scripts that would re-own it) and /run.

Nothing starts libvirt here: playbooks/prepare.yml installs and starts it. Its apt reaches
deb.debian.org through tests/lab/apt_proxy.py on the controller's management address.
"""

import dataclasses
import os
import shutil
import subprocess
import sys
import time

from tests.lab import config, hypervisors, lab_ssh, namespaces, network
from tests.lab.images import BUILD_DIR, DEB_CACHE, sha256_file
from tests.lab.lab import _exclusive
from tests.lab.shell import LabError, read_pidfile, report, run

RECIPE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build_bare_root.sh")
RECIPE_STAMP = config.BARE_ROOT_CACHE + ".recipe-sha256"
APT_PROXY_CONF = "etc/apt/apt.conf.d/00egress-lab-proxy"

# Run in the holder's namespaces (still seeing this machine's root) with $1 = the copy of the root,
# $2 = the run directory, which stays at the same path inside so that sshd's files are found, and
# $3 = the lab's .deb cache, apt's archive inside: a second run downloads no package again.
PIVOT_SCRIPT = r"""
set -eu
root=$1 run=$2 debs=$3
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup"
mount -t tmpfs -o mode=0755,nosuid dev "$root/dev"
mknod -m 666 "$root/dev/null" c 1 3
mknod -m 666 "$root/dev/zero" c 1 5
mknod -m 666 "$root/dev/full" c 1 7
mknod -m 666 "$root/dev/random" c 1 8
mknod -m 666 "$root/dev/urandom" c 1 9
mknod -m 666 "$root/dev/tty" c 5 0
mkdir "$root/dev/pts" "$root/dev/shm" "$root/dev/net"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
mknod -m 666 "$root/dev/net/tun" c 10 200
mount -t tmpfs -o mode=0755,nosuid run "$root/run"
mkdir -p "$root/run/sshd" "$root$run" "$root/.host"
mount --bind "$run" "$root$run"
mount --bind "$debs" "$root/var/cache/apt/archives"
cd "$root"
pivot_root . .host
umount -l /.host
rmdir /.host
"""


@dataclasses.dataclass(frozen=True)
class BareHostSpec(config.HypervisorSpec):
    """The bare host's names and addresses, in the shape of a lab hypervisor's."""

    index: int = 0

    @property
    def name(self):
        return config.BARE_HOST_NAME

    @property
    def netns(self):
        return config.BARE_HOST_NETNS

    @property
    def lan_netns(self):
        return config.BARE_HOST_LAN_NETNS

    @property
    def mgmt_veth(self):
        return config.BARE_HOST_MGMT_VETH

    @property
    def address(self):
        return config.BARE_HOST_ADDRESS

    @property
    def lan_prefix(self):
        return config.BARE_HOST_LAN_PREFIX

    @property
    def outside_netns(self):
        return config.BARE_HOST_OUTSIDE_NETNS

    @property
    def outside_prefix(self):
        return config.BARE_HOST_OUTSIDE_PREFIX

    @property
    def root_dir(self):
        """The copy of the cached root that the host runs on."""
        return os.path.join(self.state_dir, "root")


SPEC = BareHostSpec()


def root_current():
    try:
        with open(RECIPE_STAMP) as handle:
            stamp = handle.read().strip()
    except FileNotFoundError:
        return False
    return os.path.isdir(config.BARE_ROOT_CACHE) and stamp == sha256_file(RECIPE)


def ensure_root_cache():
    """The cached root, built when it is missing or its recipe changed; the actions taken."""
    if root_current():
        return []
    report("building the bare host's root (recipe changed or missing; about a minute)")
    started = time.monotonic()
    build = subprocess.run([RECIPE, config.BARE_ROOT_CACHE, os.path.join(BUILD_DIR, "bare-root"), DEB_CACHE],
                           check=False)
    if build.returncode != 0:
        raise LabError("building the bare host's root failed (rc=%d); its output is above" % build.returncode)
    with open(RECIPE_STAMP, "w") as handle:
        handle.write(sha256_file(RECIPE) + "\n")
    return ["built %s in %.0fs" % (config.BARE_ROOT_CACHE, time.monotonic() - started)]


def holder():
    return hypervisors.holder(SPEC)


def up():
    """The bare host up, on a fresh copy of the cached root when it was not running; the actions taken."""
    # Under the lab's lock: `up` builds into the same cache dir and rewrites the same known_hosts.
    with _exclusive():
        actions = ensure_root_cache()
        actions += lab_ssh.ensure_client_files(hypervisors.present_specs() + [SPEC])
        actions += _write_known_hosts()
        actions += network.ensure_bridge(config.MGMT_BRIDGE)
        actions += network.ensure_address(config.MGMT_BRIDGE, "%s/%d" % (config.MGMT_ADDRESS, config.MGMT_PREFIX_LEN))
        actions += hypervisors._ensure_network(SPEC)
        if holder() is None:
            actions += _fresh_root()
            actions += _start_holder()
        actions += hypervisors.start_sshd(SPEC)
        actions += hypervisors._ensure_mirror(SPEC)
        actions += hypervisors._ensure_origins(SPEC)
        actions += _ensure_apt_proxy()
    actions = ["%s: %s" % (SPEC.name, action) for action in actions]
    for action in actions:
        report(action)
    return actions


def known_hosts():
    """The bare host's own known_hosts file: `scripts/lab up` rewrites the lab's without the bare host."""
    return SPEC.run_file("known_hosts")


def _write_known_hosts():
    with open(lab_ssh.host_key(SPEC) + ".pub") as handle:
        kind, key = handle.read().split()[:2]
    line = "%s,%s %s %s\n" % (SPEC.name, SPEC.address, kind, key)
    try:
        with open(known_hosts()) as handle:
            if handle.read() == line:
                return []
    except FileNotFoundError:
        pass
    with open(known_hosts(), "w") as handle:
        handle.write(line)
    return ["wrote %s" % known_hosts()]


def _fresh_root():
    if os.path.isdir(SPEC.root_dir):
        shutil.rmtree(SPEC.root_dir)
    os.makedirs(SPEC.state_dir, exist_ok=True)
    run(["cp", "-a", config.BARE_ROOT_CACHE, SPEC.root_dir])
    with open(os.path.join(SPEC.root_dir, APT_PROXY_CONF), "w") as handle:
        handle.write('Acquire::http::Proxy "http://%s:%d/";\n' % (config.MGMT_ADDRESS, config.APT_PROXY_PORT))
    return ["copied %s to %s" % (config.BARE_ROOT_CACHE, SPEC.root_dir)]


def _start_holder():
    pid = namespaces.start_holder(SPEC.run_file("holder.pid"), SPEC.netns, SPEC.name)
    run(namespaces.nsenter(pid, ["sh", "-c", PIVOT_SCRIPT, "sh", SPEC.root_dir, SPEC.run_dir, DEB_CACHE]))
    return ["created namespaces on root %s (holder pid %d)" % (SPEC.root_dir, pid)]


def _apt_proxy_pid():
    pid = read_pidfile(SPEC.run_file("apt-proxy.pid"))
    return pid if pid and " -m tests.lab.apt_proxy " in namespaces.cmdline_text(pid) else None


def _ensure_apt_proxy():
    if _apt_proxy_pid():
        return []
    with open(SPEC.run_file("apt-proxy.log"), "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.lab.apt_proxy", config.MGMT_ADDRESS, str(config.APT_PROXY_PORT)],
            cwd=hypervisors.REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    with open(SPEC.run_file("apt-proxy.pid"), "w") as handle:
        handle.write("%d\n" % process.pid)
    deadline = time.monotonic() + 10
    while not namespaces.listening(process.pid, config.MGMT_ADDRESS, config.APT_PROXY_PORT):
        if process.poll() is not None or time.monotonic() > deadline:
            raise LabError("the apt proxy did not start; see %s" % SPEC.run_file("apt-proxy.log"))
        time.sleep(0.1)
    return ["started the apt proxy on %s:%d" % (config.MGMT_ADDRESS, config.APT_PROXY_PORT)]


def down():
    """Every process, namespace and file of the bare host gone (the cached root stays); the actions taken."""
    with _exclusive():
        actions = []
        proxy = _apt_proxy_pid()
        if proxy:
            namespaces.terminate([proxy])
            actions.append("stopped the apt proxy")
        actions += hypervisors._down_one(SPEC)
        if os.path.isdir(config.SSH_DIR):
            actions += lab_ssh.ensure_client_files(hypervisors.present_specs())
    actions = ["%s: %s" % (SPEC.name, action) for action in actions]
    for action in actions:
        report(action)
    return actions
