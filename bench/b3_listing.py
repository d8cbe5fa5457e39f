"""B3: listing N managed domains with owner and creation time, beside community.libvirt.

N stopped domains `eptest-bench-<i>` carrying the collection's metadata are defined
in the lab pool (bench/_fleet.py: a 1 MiB overlay and a 64 KiB seed each).
Timed through Ansible on the same machine, the modules on /usr/bin/python3:

- `kvm_proxy_info uid=...` (every entry has uid and created_at);
- the kvm_proxies inventory plugin over qemu:///system (`ansible-inventory --list`);
- community.libvirt (pinned `ansible` package, its own venv): `virt command=info`, which
  has neither metadata nor uuid; its libvirt inventory plugin (community.libvirt.libvirt),
  which gives each domain's whole XML (the metadata is in it, unparsed); and a playbook of
  N `virt command=get_xml` tasks (one loop), the only module way it offers to read the
  metadata: run once, and only up to GET_XML_UP_TO domains, it is the slow one;
- `ansible.builtin.ping`, Ansible's own cost.

With PER_HYPERVISOR domains on the single lab, as many are defined on each lab
hypervisor (over qemu+ssh) and both plugins read the three hypervisors at once: ours from
one source with three entries, the peer's from one source per hypervisor (it takes one URI).

The libvirt calls are counted, not estimated: B11's (b11_proxy_info.py) MEASURE process runs
kvm_proxy_info's main() with every libvirt-python connection, domain, pool, volume and
stream method wrapped (each call recorded with the domain it is about). A domain's `name`
is answered by libvirt-python itself, so the round trips per domain are the calls minus those.
"""

import contextlib
import os
import tempfile
import uuid

import libvirt

from bench import b11_proxy_info
from bench._common import (
    BUILD_COLLECTIONS,
    PREFIX,
    VENV,
    adhoc,
    ansible_env,
    config,
    cpu_seconds,
    figure,
    peer_venv,
    peer_version,
    repeat,
    timed,
    write_text,
)
from bench._fleet import grow_fleet, remove_fleet

# 100 x get_xml took 51 s while the issue was prepared: at 1000 it would be most of bench/run's time.
GET_XML_UP_TO = 100
PER_HYPERVISOR = 100
LOCAL = "lab-local"

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
    measured = b11_proxy_info.measure(uid, 1)
    round_trips, overhead, methods = b11_proxy_info.calls_per_domain(measured)
    # "libvirt-python": the counts are of libvirt's own calls (report.py tells them from the seam's of older runs).
    return {"counted": "libvirt-python", "calls_per_domain": sorted({len(called) for called in methods.values()}),
            "round_trips_per_domain": sorted(set(round_trips.values())), "other_calls": overhead,
            "methods": sorted(set(next(iter(methods.values()), [])))}


def inventory_argv(venv, sources):
    argv = [os.path.join(venv, "bin", "ansible-inventory")]
    for source in sources:
        argv += ["-i", source]
    return argv + ["--list"]


def our_plugin_source(work, uid, hypervisors):
    """One kvm_proxies source reading every (name, uri) of ``hypervisors``."""
    entries = "".join('  - {name: %s, uri: "%s"}\n' % entry for entry in hypervisors)
    return write_text(os.path.join(work, "b3-%d.kvm_proxies.yml" % len(hypervisors)),
                      "plugin: egress_proxies.kvm.kvm_proxies\nuid: %s\nstrict: true\nqualify_hostnames: true\n"
                      "hypervisors:\n%s" % (uid, entries))


def peer_plugin_sources(work, hypervisors):
    """community.libvirt.libvirt takes one URI a source: one file per hypervisor."""
    return [write_text(os.path.join(work, "b3-peer-%s.libvirt.yml" % name),
                       'plugin: community.libvirt.libvirt\nuri: "%s"\n' % uri) for name, uri in hypervisors]


def three_hypervisors(work, uid, runs, env, peer, peer_env):
    """Both plugins over the single lab and the lab's hypervisors, PER_HYPERVISOR domains on each."""
    specs = config.hypervisor_specs()
    hypervisors = [(LOCAL, config.LIBVIRT_URI)] + [(spec.name, spec.uri) for spec in specs]
    with contextlib.ExitStack() as stack:
        for spec in specs:
            remote = libvirt.open(spec.uri)
            stack.callback(remote.close)
            # Registered after the open, so it runs before the close, also when a later step fails.
            stack.callback(remove_fleet, remote, config.HV_POOL_NAME)
            remove_fleet(remote, config.HV_POOL_NAME)
            grow_fleet(remote, uid, 0, PER_HYPERVISOR, 0, config.HV_POOL_NAME, config.HV_BRIDGE)
        ours = inventory_argv(VENV, [our_plugin_source(work, uid, hypervisors)])
        return {
            "hypervisors": [name for name, _uri in hypervisors], "domains_each": PER_HYPERVISOR,
            "plugin": repeat(runs, ours, env=env), "plugin_controller_cpu_seconds": cpu_seconds(ours, env=env),
            "peer_plugin": repeat(runs, inventory_argv(peer, peer_plugin_sources(work, hypervisors)), env=peer_env),
        }


def listing_row(work, uid, count, runs, env, peer, peer_env):
    local = [(LOCAL, config.LIBVIRT_URI)]
    row = {
        "module": repeat(runs, adhoc("egress_proxies.kvm.kvm_proxy_info", "uid=%s" % uid), env=env),
        "plugin": repeat(runs, inventory_argv(VENV, [our_plugin_source(work, uid, local)]), env=env),
        "peer_info": repeat(runs, adhoc("community.libvirt.virt", "command=info", venv=peer), env=peer_env),
        "peer_plugin": repeat(runs, inventory_argv(peer, peer_plugin_sources(work, local)), env=peer_env),
    }
    if count <= GET_XML_UP_TO:
        names = ["%s%d" % (PREFIX, index) for index in range(count)]
        playbook = write_text(os.path.join(work, "get_xml.yml"), GET_XML_PLAYBOOK % names)
        row["peer_get_xml_loop"] = figure([timed([os.path.join(peer, "bin", "ansible-playbook"), playbook],
                                                 env=peer_env)[0]])
    row.update(counted_calls(uid))
    return row


def run(counts, runs):
    uid = "bench-b3-" + uuid.uuid4().hex[:8]
    peer = peer_venv()
    # A source that fails to parse fails the run instead of timing a warning.
    env = ansible_env(BUILD_COLLECTIONS, ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="true")
    peer_env = ansible_env(BUILD_COLLECTIONS, ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="true",
                           PATH=os.path.join(peer, "bin") + ":" + os.environ["PATH"])
    results = {"peer_version": peer_version(peer), "get_xml_up_to": GET_XML_UP_TO, "by_domains": {}}
    results["ping"] = repeat(runs, adhoc("ansible.builtin.ping", ""), env=env)
    # Ansible's own cost of an inventory run: ansible-inventory over a static one-host source.
    results["inventory_start"] = repeat(runs, inventory_argv(VENV, ["localhost,"]), env=env)
    conn = libvirt.open(config.LIBVIRT_URI)
    with contextlib.closing(conn), tempfile.TemporaryDirectory(prefix="bench-b3-") as work:
        remove_fleet(conn)
        defined = 0
        try:
            for count in sorted(counts):
                grow_fleet(conn, uid, defined, count, 0)
                defined = count
                results["by_domains"][str(count)] = listing_row(work, uid, count, runs, env, peer, peer_env)
                if count == PER_HYPERVISOR:
                    results["three_hypervisors"] = three_hypervisors(work, uid, runs, env, peer, peer_env)
        finally:
            remove_fleet(conn)
    return results
