"""B6: the kvm_proxies inventory plugin over 1, 5 and 20 hypervisor entries, beside itself over one.

The entries are the lab's hypervisors (lab-hv1, lab-hv2) over qemu+ssh, each named
several times under names of its own (`hv-<i>`), as a large fleet would be: every
entry is a connection of its own, an SSH session and libvirt's handshake. Timed:
`ansible-inventory -i <file> --list` from the checkout's venv (the controller's
Python, with libvirt-python), so Ansible's own start-up is in every figure, the
same at every N. The CPU time of one more run (ansible-inventory and the ssh
clients libvirt starts, not the hypervisors' sshd and libvirtd) says what the
controller spends per entry. Side by side, the same runs over SSH without connection sharing:
the lab's ssh_config (tests/lab/lab_ssh.py) shares one connection per hypervisor (ControlMaster,
ControlPersist 60 s), and a copy of it without those lines makes each entry a key exchange of its
own. The shared figures are a user's second and later runs within a minute (medians); the first
run of each count, which opens the masters, is kept as `cold`. With a baseline commit the same runs
are made with the plugin of that commit, to show the change.
"""

import os
import subprocess
import tempfile

from bench._common import VENV, ansible_env, config, cpu_seconds, figure, timed

ENTRY = '  - {name: hv-%d, uri: "%s"}\n'
UNSHARED = "unshared"


def unshared_ssh(directory):
    """An ssh command like tests/lab/lab-ssh.sh whose ssh_config shares no connection: a handshake per session."""
    with open(config.SSH_CONFIG) as handle:
        lines = [line for line in handle if not line.strip().startswith("Control")]
    ssh_config = os.path.join(directory, "ssh_config-unshared")
    with open(ssh_config, "w") as handle:
        handle.writelines(lines)
    command = os.path.join(directory, "ssh-unshared")
    with open(command, "w") as handle:
        handle.write('#!/bin/sh\nexec ssh -F %s "$@"\n' % ssh_config)
    os.chmod(command, 0o755)
    return command


def close_masters():
    """Every shared connection of the lab's ssh_config closed, so that a series starts cold."""
    for spec in config.hypervisor_specs():
        subprocess.run([config.LAB_SSH, "-O", "exit", spec.name], capture_output=True, check=False)


def inventory_file(directory, entries, command):
    hypervisors = [spec.uri.replace(config.LAB_SSH, command) for spec in config.hypervisor_specs()]
    path = os.path.join(directory, "b6-%d-%s.kvm_proxies.yml" % (entries, os.path.basename(command)))
    with open(path, "w") as handle:
        handle.write("plugin: egress_proxies.kvm.kvm_proxies\nstrict: true\nqualify_hostnames: true\nhypervisors:\n")
        for index in range(entries):
            handle.write(ENTRY % (index, hypervisors[index % len(hypervisors)]))
    return path


def run(collections_by_label, entry_counts, runs):
    """{label: {entries: figure}} for each collection (the checkout, and a baseline if given), and the checkout's
    without connection sharing under UNSHARED."""
    results = {"hypervisors": [spec.name for spec in config.hypervisor_specs()], "by": {}}
    with tempfile.TemporaryDirectory(prefix="bench-b6-") as directory:
        unshared = unshared_ssh(directory)
        series = [(label, collections, config.LAB_SSH) for label, collections in collections_by_label.items()]
        series.append((UNSHARED, collections_by_label["now"], unshared))
        for label, collections, command in series:
            env = ansible_env(collections)
            results["by"][label] = {}
            for entries in entry_counts:
                argv = [os.path.join(VENV, "bin", "ansible-inventory"), "-i", inventory_file(directory, entries, command), "--list"]
                close_masters()
                cold = timed(argv, env=env)[0]
                row = figure([timed(argv, env=env)[0] for _run in range(runs)])
                row["cold"] = cold
                # The shared connections' masters run detached, not as children: their CPU is not in this figure.
                row["controller_cpu_seconds"] = cpu_seconds(argv, env=env)
                results["by"][label][str(entries)] = row
        close_masters()
    return results
