"""B7: provision to verified egress with the demo's real guest, beside the bare boot of the same domain.

On lab-hv1 over SSH: playbooks/deploy.yml with inventories/lab's hosts and group variables
(the real guest image, wait for the address) in the layout before the demo became an HA pair
(bench._common.lan_inventory: bridge br0, DHCP, lab-hv1's LAN the clients), one proxy of a
name of its own. Timed from ansible-playbook's start: when the domain first runs and when
its guest agent first reports an address (a BootWatch: virsh entered into lab-hv1's
namespaces, no SSH session, every second), when the playbook ends, and the first request
proxied by the guest's squid from lab-hv1's LAN to the LAN's origin server (curl every
second after the playbook). Then, in the same run, the bare boot: the same domain, its
overlay emptied again, `virsh start` to the agent's address polled with virsh.
Overhead = first proxied request - bare boot. One run by default (each boot ~40-180 s).
"""

import os
import subprocess
import tempfile
import time

from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.addresses import POLL_INTERVAL
from bench._common import (
    BUILD_COLLECTIONS,
    PREFIX,
    REPO_ROOT,
    VENV,
    BootWatch,
    Virsh,
    ansible_env,
    config,
    fresh_first_boot,
    lan_inventory,
    rounded,
    timed,
    virsh_boot_to_address,
)

HOST = "lab-hv1"
DOMAIN = PREFIX + "b7"
UID = PREFIX + "b7"
BOOT_TIMEOUT = 600
SQUID_PORT = 3128


def spec():
    return [each for each in config.hypervisor_specs() if each.name == HOST][0]


def inventory(work):
    """inventories/lab in its LAN layout, with this benchmark's one proxy on lab-hv1."""
    return lan_inventory(os.path.join(work, "inventory"), HOST, egress_proxy_instances=[{"name": DOMAIN}],
                         egress_proxy_uid=UID)


def proxied_request(address, deadline):
    """Seconds (monotonic) when a request through the proxy first got the origin's answer, or None by ``deadline``."""
    hypervisor = spec()
    while time.monotonic() < deadline:
        completed = subprocess.run(["ip", "netns", "exec", hypervisor.lan_netns, "curl", "-sf", "--max-time", "5",
                                    "-x", "http://%s:%d" % (address, SQUID_PORT),
                                    hypervisor.origin_url(hypervisor.lan_address)],
                                   capture_output=True, text=True, check=False)
        if completed.returncode == 0:
            return time.monotonic()
        time.sleep(1)
    return None


def playbook(name, inventory_path, env):
    return timed([os.path.join(VENV, "bin", "ansible-playbook"), "-i", inventory_path, "-l", HOST,
                  os.path.join(REPO_ROOT, "playbooks", name)], env=env)[0]


def run():
    hypervisor = spec()
    on = Virsh(hypervisor)
    prefix = hypervisor.lan_prefix + "."
    results = {"host": HOST, "poll_interval": POLL_INTERVAL}
    with tempfile.TemporaryDirectory(prefix="bench-b7-") as work:
        inventory_path = inventory(work)
        env = ansible_env(BUILD_COLLECTIONS, ANSIBLE_SSH_CONTROL_PATH_DIR=os.path.join(work, "cp"))
        try:
            watch = BootWatch(on, DOMAIN, prefix).start()
            deploy = playbook("deploy.yml", inventory_path, env)
            address = watch.wait(deploy + BOOT_TIMEOUT)
            served = proxied_request(address, watch.started + BOOT_TIMEOUT) if address else None
            row = watch.stop()
            row.update(playbook=rounded(deploy),
                       first_request_at=rounded(served - watch.started) if served else None)
            results["deploy"] = row
            fresh_first_boot(on, DOMAIN)
            results["bare_boot_to_address"] = virsh_boot_to_address(on, DOMAIN, prefix, BOOT_TIMEOUT)
        finally:
            playbook("destroy.yml", inventory_path, env)
    return results
