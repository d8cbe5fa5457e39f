"""B3: listing N managed domains with owner and creation time, beside community.libvirt.

N stopped domains `eptest-bench-<i>` carrying the collection's metadata are defined
in the lab pool (bench_proxy_info's fleet: a 1 MiB overlay and a 64 KiB seed each).
Timed through Ansible on the same machine, the modules on /usr/bin/python3:

- `kvm_proxy_info uid=...` (every entry has uid and created_at);
- the kvm_proxies inventory plugin over qemu:///system (`ansible-inventory --list`);
- community.libvirt (pinned `ansible` package, its own venv): `virt command=info`, which
  has neither metadata nor uuid, and a playbook of N `virt command=get_xml` tasks (one
  loop), the only way it offers to read the metadata: run once, it is the slow one;
- `ansible.builtin.ping`, Ansible's own cost.

The libvirt calls are counted, not estimated: bench_proxy_info's MEASURE process runs
the module's listing through a wrapper around the seam (every public Hypervisor method
call, with the domain it is about). `domain_name` is answered by the client library,
so the round trips per domain are the calls minus that one.
"""

import os
import tempfile
import uuid

from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt import Hypervisor
from bench import bench_proxy_info as fleet
from bench._common import VENV, adhoc, ansible_env, config, figure, peer_venv, peer_version, repeat, timed

GET_XML_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    ansible_python_interpreter: /usr/bin/python3
  tasks:
    - community.libvirt.virt:
        command: get_xml
        name: "{{ item }}"
      loop: %s
"""


def counted_calls(uid):
    measured = fleet.measure(uid, 1)
    per_domain, overhead, methods = fleet.calls_per_domain(measured)
    calls = sorted(set(per_domain.values()))
    # domain_name is virDomainGetName: the client library answers it, no round trip.
    round_trips = sorted({len([m for m in called if m != "domain_name"]) for called in methods.values()})
    return {"calls_per_domain": calls, "round_trips_per_domain": round_trips, "other_calls": overhead,
            "methods": sorted(set(next(iter(methods.values()), [])))}


def run(counts, runs):
    uid = "bench-b3-" + uuid.uuid4().hex[:8]
    peer = peer_venv()
    env = ansible_env(fleet.COLLECTIONS)
    peer_env = ansible_env(fleet.COLLECTIONS, PATH=os.path.join(peer, "bin") + ":" + os.environ["PATH"])
    results = {"peer_version": peer_version(peer), "by_domains": {}}
    results["ping"] = repeat(runs, adhoc("ansible.builtin.ping", ""), env=env)
    with Hypervisor.open(config.LIBVIRT_URI) as hypervisor, tempfile.TemporaryDirectory(prefix="bench-b3-") as work:
        fleet.remove_fleet(hypervisor)
        defined = 0
        try:
            for count in counts:
                fleet.grow_fleet(hypervisor, hypervisor.lookup_pool(config.POOL_NAME), uid, defined, count, running=0)
                defined = count
                names = ["%s%d" % (fleet.PREFIX, index) for index in range(count)]
                inventory = os.path.join(work, "b3.kvm_proxies.yml")
                with open(inventory, "w") as handle:
                    handle.write("plugin: egress_proxies.kvm.kvm_proxies\nuid: %s\n" % uid)
                playbook = os.path.join(work, "get_xml.yml")
                with open(playbook, "w") as handle:
                    handle.write(GET_XML_PLAYBOOK % names)
                row = {
                    "module": repeat(runs, adhoc("egress_proxies.kvm.kvm_proxy_info", "uid=%s" % uid), env=env),
                    "plugin": repeat(runs, [os.path.join(VENV, "bin", "ansible-inventory"), "-i", inventory, "--list"],
                                     env=env),
                    "peer_info": repeat(runs, adhoc("community.libvirt.virt", "command=info", venv=peer),
                                        env=peer_env),
                    "peer_get_xml_loop": figure([timed([os.path.join(peer, "bin", "ansible-playbook"), playbook],
                                                       env=peer_env)[0]]),
                }
                row.update(counted_calls(uid))
                results["by_domains"][str(count)] = row
        finally:
            fleet.remove_fleet(hypervisor)
    return results
