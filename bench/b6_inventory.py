"""B6: the kvm_proxies inventory plugin over 1, 5 and 20 hypervisor entries, beside itself over one.

The entries are the lab's hypervisors (lab-hv1, lab-hv2) over qemu+ssh, each named
several times under names of its own (`hv-<i>`), as a large fleet would be: every
entry is a connection of its own, an SSH session and libvirt's handshake. Timed:
`ansible-inventory -i <file> --list` from the checkout's venv (the controller's
Python, with libvirt-python), so Ansible's own start-up is in every figure, the
same at every N. The CPU time of one more run (ansible-inventory and the ssh
clients libvirt starts, not the hypervisors' sshd and libvirtd) says what the
controller spends per entry. With a baseline commit the same runs are made with the plugin of
that commit, to show the change.
"""

import os
import tempfile

from bench._common import VENV, ansible_env, config, cpu_seconds, repeat

ENTRY = '  - {name: hv-%d, uri: "%s"}\n'


def inventory_file(directory, entries):
    hypervisors = [spec.uri for spec in config.hypervisor_specs()]
    path = os.path.join(directory, "b6-%d.kvm_proxies.yml" % entries)
    with open(path, "w") as handle:
        handle.write("plugin: egress_proxies.kvm.kvm_proxies\nstrict: true\nqualify_hostnames: true\nhypervisors:\n")
        for index in range(entries):
            handle.write(ENTRY % (index, hypervisors[index % len(hypervisors)]))
    return path


def run(collections_by_label, entry_counts, runs):
    """{label: {entries: figure}} for each collection (the checkout, and a baseline if given)."""
    results = {"hypervisors": [spec.name for spec in config.hypervisor_specs()], "by": {}}
    with tempfile.TemporaryDirectory(prefix="bench-b6-") as directory:
        for label, collections in collections_by_label.items():
            env = ansible_env(collections)
            results["by"][label] = {}
            for entries in entry_counts:
                argv = [os.path.join(VENV, "bin", "ansible-inventory"), "-i", inventory_file(directory, entries), "--list"]
                row = repeat(runs, argv, env=env)
                row["controller_cpu_seconds"] = cpu_seconds(argv, env=env)
                results["by"][label][str(entries)] = row
    return results
