"""B5: fan-out, the same deploy on 2 and 3 hypervisors with forks 1 against forks 2 and 3.

playbooks/deploy.yml (the role: one kvm_proxy_set call per hypervisor) creates PROXIES
non-booting proxies (the lab's small image, no address to wait for) on each hypervisor,
then playbooks/destroy.yml removes them; both are timed, ansible-playbook's start to its
end. The hypervisors: lab-hv1 and lab-hv2 over SSH, as inventories/lab has them, and
for three, the single lab's own libvirtd on this machine (`lab-local`, connection local,
pool egress-lab, bridge eplab0): a third lab hypervisor (EGRESS_LAB_HYPERVISORS=3) would
change the lab every other test shares, and the bare host has no libvirt until
prepare.yml has run. Speed-up = the forks-1 time over the forks-N time, same hosts.
"""

import os
import pathlib
import tempfile

import yaml

from bench._common import BUILD_COLLECTIONS, PREFIX, REPO_ROOT, VENV, ansible_env, config, figure, read_text, timed, write_text
from tests.lab.fleet_runs import LAB_HOSTS, Fleet

PROXIES = 3
UID = PREFIX + "b5"
LOCAL = "lab-local"
# (hypervisors, forks): the comparisons, forks 1 first on each set of hosts.
CASES = ((2, 1), (2, 2), (3, 1), (3, 3))


def inventory(work):
    """inventories/lab's hypervisors plus lab-local, each with PROXIES proxies of its own."""
    path = os.path.join(work, "inventory")
    os.makedirs(os.path.join(path, "host_vars"))
    hosts = yaml.safe_load(read_text(LAB_HOSTS))
    hosts["hypervisors"]["hosts"][LOCAL] = {"ansible_connection": "local"}
    write_text(os.path.join(path, "hosts.yml"), yaml.safe_dump(hosts))
    specs = config.hypervisor_specs()
    fleet = Fleet(specs, pathlib.Path(work))
    os.makedirs(os.path.join(path, "group_vars"))
    write_text(os.path.join(path, "group_vars", "hypervisors.yml"),
               yaml.safe_dump(fleet.role_vars(egress_proxy_uid=UID)))
    names = [spec.name for spec in specs] + [LOCAL]
    for name in names:
        variables = {"egress_proxy_instances": [{"name": "%s%s-%d" % (PREFIX, name, index)} for index in range(PROXIES)]}
        if name == LOCAL:
            variables.update(egress_proxy_pool=config.POOL_NAME, egress_proxy_bridge=config.BRIDGE)
        write_text(os.path.join(path, "host_vars", name + ".yml"), yaml.safe_dump(variables))
    return path, names


def playbook(name, inventory_path, hosts, forks, env):
    return timed([os.path.join(VENV, "bin", "ansible-playbook"), "-i", inventory_path, "-f", str(forks),
                  "-l", ",".join(hosts), os.path.join(REPO_ROOT, "playbooks", name)], env=env)[0]


def run(runs):
    results = {"proxies_per_hypervisor": PROXIES, "by": {}}
    with tempfile.TemporaryDirectory(prefix="bench-b5-") as work:
        inventory_path, names = inventory(work)
        results["hypervisors"] = names
        env = ansible_env(BUILD_COLLECTIONS, ANSIBLE_SSH_CONTROL_PATH_DIR=os.path.join(work, "cp"))
        try:
            for count, forks in CASES:
                hosts = names[:count]
                creates, destroys = [], []
                for _run in range(runs):
                    creates.append(playbook("deploy.yml", inventory_path, hosts, forks, env))
                    destroys.append(playbook("destroy.yml", inventory_path, hosts, forks, env))
                results["by"]["%d/%d" % (count, forks)] = {"hypervisors": count, "forks": forks,
                                                           "create": figure(creates), "destroy": figure(destroys)}
        finally:
            playbook("destroy.yml", inventory_path, names, len(names), env)
    for count in sorted({count for count, _forks in CASES}):
        serial = results["by"]["%d/1" % count]
        parallel = results["by"]["%d/%d" % (count, count)]
        results["by"]["%d/%d" % (count, count)]["speedup"] = {
            action: round(serial[action]["median"] / parallel[action]["median"], 2) for action in ("create", "destroy")}
    return results
