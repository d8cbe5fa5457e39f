"""The lab's guest image really boots under TCG: DHCP lease, guest agent and squid.

Everything later issues do with real guests (kvm_proxy, the demo) rests on these three facts, so
they are checked directly with virsh and a hand-written domain, independent of the collection.
"""

import json
import os
import subprocess
import textwrap
import time

import pytest

from tests.lab import config, network

pytestmark = [pytest.mark.integration, pytest.mark.boot]

DOMAIN = config.TEST_DOMAIN_PREFIX + "lab-guest"
MAC = "52:54:00:e9:1a:01"
SQUID_PORT = 3128
ORIGIN_PORT = 18080
# ~50 s on an idle 2-core machine; much longer when other work shares the cores.
BOOT_TIMEOUT = 600


def virsh(*args, check=True):
    return subprocess.run(["virsh", "-q", "-c", config.LIBVIRT_URI] + list(args),
                          capture_output=True, text=True, check=check)


def domain_xml(overlay, seed, console_log):
    return textwrap.dedent("""\
        <domain type='{virt_type}'>
          <name>{name}</name>
          <memory unit='MiB'>512</memory>
          <vcpu>1</vcpu>
          <os><type arch='x86_64' machine='q35'>hvm</type><boot dev='hd'/></os>
          <features><acpi/></features>
          <on_poweroff>destroy</on_poweroff>
          <devices>
            <disk type='file' device='disk'>
              <driver name='qemu' type='qcow2'/>
              <source file='{overlay}'/>
              <target dev='vda' bus='virtio'/>
            </disk>
            <controller type='scsi' model='virtio-scsi'/>
            <disk type='file' device='cdrom'>
              <driver name='qemu' type='raw'/>
              <source file='{seed}'/>
              <target dev='sda' bus='scsi'/>
              <readonly/>
            </disk>
            <interface type='bridge'>
              <source bridge='{bridge}'/>
              <mac address='{mac}'/>
              <model type='virtio'/>
            </interface>
            <channel type='unix'>
              <target type='virtio' name='org.qemu.guest_agent.0'/>
            </channel>
            <serial type='file'><source path='{console_log}'/></serial>
            <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
          </devices>
        </domain>
        """).format(virt_type=config.VIRT_TYPE, name=DOMAIN, overlay=overlay, seed=seed,
                    bridge=config.BRIDGE, mac=MAC, console_log=console_log)


def write_seed(path, workdir):
    seed_dir = os.path.join(workdir, "seed")
    os.makedirs(seed_dir, exist_ok=True)
    with open(os.path.join(seed_dir, "meta-data"), "w") as handle:
        handle.write("instance-id: %s\nlocal-hostname: %s\n" % (DOMAIN, DOMAIN))
    with open(os.path.join(seed_dir, "user-data"), "w") as handle:
        handle.write("#cloud-config\nhostname: %s\n" % DOMAIN)
    subprocess.run(["genisoimage", "-quiet", "-o", path, "-V", "cidata", "-J", "-r", seed_dir], check=True)


def remove_domain():
    if virsh("dominfo", DOMAIN, check=False).returncode == 0:
        virsh("destroy", DOMAIN, check=False)
        virsh("undefine", DOMAIN)


def wait_for(what, probe, deadline):
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(1)
    pytest.fail("timed out waiting for %s" % what)


def agent_ping():
    return virsh("qemu-agent-command", DOMAIN, json.dumps({"execute": "guest-ping"}), check=False).returncode == 0


@pytest.fixture
def booted_guest(lab, tmp_path):
    """A throwaway domain on a qcow2 overlay of the lab image, with a NoCloud seed on virtio-scsi."""
    remove_domain()
    overlay = os.path.join(lab.pool_dir, DOMAIN + ".qcow2")
    seed = os.path.join(lab.pool_dir, DOMAIN + "-seed.iso")
    console_log = os.path.join(config.RUN_DIR, DOMAIN + "-console.log")
    image = lab.images[config.GUEST_IMAGE]["path"]
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", image, overlay], check=True)
    write_seed(seed, str(tmp_path))
    xml_path = tmp_path / "domain.xml"
    xml_path.write_text(domain_xml(overlay, seed, console_log))
    virsh("define", str(xml_path))
    # A lease left by an earlier boot with this MAC must not be mistaken for this boot's.
    earlier_lease = network.dhcp_leases().get(MAC)
    started = time.monotonic()
    virsh("start", DOMAIN)
    try:
        yield {"started": started, "console_log": console_log, "earlier_lease": earlier_lease}
    finally:
        remove_domain()
        for path in (overlay, seed):
            if os.path.exists(path):
                os.unlink(path)
        virsh("pool-refresh", lab.pool, check=False)


@pytest.fixture
def netns_origin(serve_in_netns):
    """The destination squid is asked to fetch."""
    return serve_in_netns("egress-lab origin\n", ORIGIN_PORT)


def test_guest_boots_gets_lease_answers_agent_and_proxies(lab, booted_guest, netns_origin):
    deadline = booted_guest["started"] + BOOT_TIMEOUT

    def new_lease():
        lease = network.dhcp_leases().get(MAC)
        earlier = booted_guest["earlier_lease"]
        return lease if lease and (earlier is None or lease[1] > earlier[1]) else None

    ip = wait_for("a DHCP lease for %s" % MAC, new_lease, deadline)[0]
    lease_seconds = time.monotonic() - booted_guest["started"]
    assert ip.startswith("198.18.0.")

    wait_for("the guest agent", agent_ping, deadline)
    agent_seconds = time.monotonic() - booted_guest["started"]
    addresses = json.loads(virsh("qemu-agent-command", DOMAIN,
                                 json.dumps({"execute": "guest-network-get-interfaces"})).stdout)["return"]
    guest_ips = [a["ip-address"] for nic in addresses for a in nic.get("ip-addresses", [])]
    assert ip in guest_ips
    # cloud-init read the NoCloud seed from the virtio-scsi cdrom and applied its hostname.
    hostname = json.loads(virsh("qemu-agent-command", DOMAIN, json.dumps({"execute": "guest-get-host-name"})).stdout)
    assert hostname["return"]["host-name"] == DOMAIN

    def fetch_through_squid():
        result = subprocess.run(
            ["ip", "netns", "exec", lab.netns, "curl", "-sS", "--max-time", "10",
             "-x", "http://%s:%d" % (ip, SQUID_PORT), netns_origin],
            capture_output=True, text=True, check=False)
        return result.stdout if result.returncode == 0 else None

    body = wait_for("squid on %s:%d" % (ip, SQUID_PORT), fetch_through_squid, deadline)
    proxy_seconds = time.monotonic() - booted_guest["started"]
    assert body == "egress-lab origin\n"
    print("boot timings under TCG: lease %.0fs, agent %.0fs, squid %.0fs" % (lease_seconds, agent_seconds, proxy_seconds))
