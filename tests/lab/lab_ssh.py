"""SSH into the lab's hypervisors with host keys checked: keys, known_hosts, ssh_config, sshd_config.

The controller has one client key (config.SSH_KEY) that every hypervisor's sshd authorises for root,
and one known_hosts file (config.SSH_KNOWN_HOSTS) holding each hypervisor's host key under its name
and its management address. config.SSH_CONFIG names each hypervisor for `ssh -F`; tests/lab/lab-ssh.sh
is that command, for people and for libvirt's qemu+ssh (`?command=`).
"""

import os

from tests.lab import config
from tests.lab.shell import run, write_if_changed

SSHD = "/usr/sbin/sshd"


def _ensure_key(path, comment):
    if os.path.exists(path) and os.path.exists(path + ".pub"):
        return []
    for stale in (path, path + ".pub"):
        if os.path.exists(stale):
            os.unlink(stale)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path])
    return ["generated %s" % path]


def _public_key(path):
    with open(path + ".pub") as handle:
        kind, key = handle.read().split()[:2]
    return "%s %s" % (kind, key)


def host_key(spec):
    return spec.run_file("ssh_host_ed25519_key")


def sshd_config_path(spec):
    return spec.run_file("sshd_config")


def sshd_pidfile(spec):
    return spec.run_file("sshd.pid")


def sshd_logfile(spec):
    return spec.run_file("sshd.log")


def authorized_keys(spec):
    return spec.run_file("authorized_keys")


def ensure_client_files(specs):
    """The client key, and known_hosts and ssh_config for every hypervisor in specs (host keys made here)."""
    os.makedirs(config.SSH_DIR, mode=0o700, exist_ok=True)
    actions = _ensure_key(config.SSH_KEY, "egress-lab controller")
    known, blocks = [], []
    for spec in specs:
        os.makedirs(spec.run_dir, mode=0o700, exist_ok=True)
        actions += _ensure_key(host_key(spec), "egress-lab %s" % spec.name)
        known.append("%s,%s %s\n" % (spec.name, spec.address, _public_key(host_key(spec))))
        blocks.append("Host %s\n  HostName %s\n" % (spec.name, spec.address))
        if write_if_changed(authorized_keys(spec), _public_key(config.SSH_KEY) + "\n", 0o600):
            actions.append("authorised the controller's key on %s" % spec.name)
    if write_if_changed(config.SSH_KNOWN_HOSTS, "".join(known)):
        actions.append("wrote %s" % config.SSH_KNOWN_HOSTS)
    ssh_config = "".join(blocks) + (
        "Host *\n"
        "  User %s\n"
        "  Port %d\n"
        "  IdentityFile %s\n"
        "  IdentitiesOnly yes\n"
        "  UserKnownHostsFile %s\n"
        "  GlobalKnownHostsFile /dev/null\n"
        "  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n"
        "  ConnectTimeout 10\n"
        # One SSH connection per hypervisor shared by every session for a minute: libvirt's qemu+ssh opens a
        # session per connection (the kvm_proxies inventory one per entry), and each would pay a key exchange.
        "  ControlMaster auto\n"
        "  ControlPath %s\n"
        "  ControlPersist 60\n" % (config.SSH_USER, config.SSH_PORT, config.SSH_KEY, config.SSH_KNOWN_HOSTS,
                                   config.SSH_CONTROL_PATH))
    if write_if_changed(config.SSH_CONFIG, ssh_config):
        actions.append("wrote %s" % config.SSH_CONFIG)
    return actions


def sshd_config(spec):
    return "".join("%s\n" % line for line in (
        "ListenAddress %s:%d" % (spec.address, config.SSH_PORT),
        "HostKey %s" % host_key(spec),
        "AuthorizedKeysFile %s" % authorized_keys(spec),
        "PidFile %s" % sshd_pidfile(spec),
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "UseDNS no",
        "Subsystem sftp internal-sftp",
    ))


def write_sshd_config(spec):
    """Write the hypervisor's sshd_config; True when it changed."""
    return write_if_changed(sshd_config_path(spec), sshd_config(spec), 0o600)


def sshd_argv(spec):
    # Without -D sshd daemonizes and writes PidFile itself.
    return [SSHD, "-f", sshd_config_path(spec), "-E", sshd_logfile(spec)]
