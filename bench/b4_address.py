"""B4: provision to address on the single lab: kvm_proxy with wait_for_ip, `virsh start` + polling, community.libvirt.

The lab's real guest (debian-12-egress, TCG, 1 vCPU, 512 MiB) on qemu:///system, three ways:

- this collection: a playbook of one kvm_proxy task with wait_for_ip (the base image cached
  beforehand, untimed), from ansible-playbook's start to its end, Ansible's start-up included;
  a BootWatch (virsh in a thread) notes when the domain first runs and when its agent reports
  an address, so the module's own lag after the address is visible;
- the floor: the same domain, its overlay emptied again (a first boot once more), started with
  `virsh start` and polled with `virsh domifaddr --source agent` every second;
- the peer: community.libvirt's virt_install (the pinned collection has no virt_cloud_instance)
  with the same image as backing store, virt-install's own cloud-init seed and the same bridge; its run is
  capped at PEER_CAP seconds (its process group killed there) and the watch says what it reached.

Booting costs ~40-180 s under TCG on this 2-vCPU machine, so each path runs once by default.
"""

import os
import signal
import subprocess
import tempfile
import time
from xml.etree import ElementTree

from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.addresses import POLL_INTERVAL
from bench._common import (
    BUILD_COLLECTIONS,
    HYPERVISOR_PYTHON,
    PREFIX,
    VENV,
    BootWatch,
    ansible_env,
    config,
    fresh_first_boot,
    peer_venv,
    peer_version,
    rounded,
    timed,
    virsh,
    virsh_boot_to_address,
    write_text,
)

DOMAIN = PREFIX + "b4"
PEER_DOMAIN = PREFIX + "b4-peer"
MAC = "52:54:00:e9:b4:01"
PEER_MAC = "52:54:00:e9:b4:02"
ADDRESS_PREFIX = "198.18.0."
IMAGE = {"name": "debian-12-egress", "url": config.MIRROR_URL + config.GUEST_IMAGE,
         "checksum": "sha256:%sSHA256SUMS" % config.MIRROR_URL}
BOOT_TIMEOUT = 600
# A failing peer costs at most this: the issue saw virt_cloud_instance wait 605 s before failing.
PEER_CAP = 180

PROXY_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    ansible_python_interpreter: %(python)s
  tasks:
    - egress_proxies.kvm.kvm_proxy:
        uri: %(uri)s
        name: %(name)s
        uid: eptest-bench-b4
        state: "{{ bench_state }}"
        pool: %(pool)s
        bridge: %(bridge)s
        mac: "%(mac)s"
        vcpus: 1
        memory_mib: 512
        virt_type: %(virt_type)s
        cpu_mode: %(cpu_mode)s
        image: %(image)s
        user_data: "#cloud-config\\nhostname: %(name)s\\n"
        vendor_data: ""
        wait_for_ip: "{{ bench_state == 'present' }}"
        wait_timeout: %(timeout)d
"""

PEER_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    ansible_python_interpreter: %(python)s
  tasks:
    - community.libvirt.virt_install:
        uri: %(uri)s
        name: %(name)s
        memory: 512
        vcpus: 1
        virt_type: %(virt_type)s
        import: true
        osinfo:
          name: debian11
        disks:
          - path: %(disk)s
            backing_store: %(image)s
            backing_format: qcow2
            format: qcow2
            size: 4
        networks:
          - bridge: %(bridge)s
            mac:
              address: "%(mac)s"
        graphics:
          type: none
        # Its user_data and meta_data (dictionaries) reach virt-install as `user-data.<key>=`, which it
        # refuses (it wants a file), so the peer gets virt-install's own seed.
        cloud_init:
          root_password_generate: true
"""


def proxy_playbook(work):
    return write_text(os.path.join(work, "b4-proxy.yml"), PROXY_PLAYBOOK % {
        "python": HYPERVISOR_PYTHON, "uri": config.LIBVIRT_URI, "name": DOMAIN, "pool": config.POOL_NAME,
        "bridge": config.BRIDGE, "mac": MAC, "virt_type": config.VIRT_TYPE, "cpu_mode": config.CPU_MODE,
        "image": IMAGE, "timeout": BOOT_TIMEOUT})


def peer_disk():
    return os.path.join(config.POOL_DIR, PEER_DOMAIN + ".qcow2")


def cache_image(env):
    """The base image in the pool before anything is timed: provisioning, not downloading, is measured."""
    timed([os.path.join(VENV, "bin", "ansible"), "localhost", "-e", "ansible_python_interpreter=" + HYPERVISOR_PYTHON,
           "-m", "egress_proxies.kvm.kvm_base_image", "-a",
           "name=%(name)s url=%(url)s checksum=%(checksum)s format=qcow2 pool=" % IMAGE + config.POOL_NAME], env=env)


def module_path(playbook, env):
    watch = BootWatch(virsh, DOMAIN, ADDRESS_PREFIX).start()
    seconds, _completed = timed([os.path.join(VENV, "bin", "ansible-playbook"), playbook, "-e", "bench_state=present"],
                                env=env)
    watch.wait(seconds + 5)
    row = watch.stop()
    row["playbook"] = round(seconds, 2)
    return row


def floor_path():
    fresh_first_boot(virsh, DOMAIN)
    return {"start_to_address": virsh_boot_to_address(virsh, DOMAIN, ADDRESS_PREFIX, BOOT_TIMEOUT)}


def peer_path(peer, work):
    playbook = write_text(os.path.join(work, "b4-peer.yml"), PEER_PLAYBOOK % {
        "python": HYPERVISOR_PYTHON, "uri": config.LIBVIRT_URI, "name": PEER_DOMAIN, "virt_type": config.VIRT_TYPE,
        "disk": peer_disk(), "image": os.path.join(config.MIRROR_DIR, config.GUEST_IMAGE), "bridge": config.BRIDGE,
        "mac": PEER_MAC})
    env = ansible_env(BUILD_COLLECTIONS, PATH=os.path.join(peer, "bin") + ":" + os.environ["PATH"])
    watch = BootWatch(virsh, PEER_DOMAIN, ADDRESS_PREFIX).start()
    started = time.monotonic()
    # Its own process group, so the cap stops virt-install too, by the group's id.
    process = subprocess.Popen([os.path.join(peer, "bin", "ansible-playbook"), playbook], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output = process.communicate(timeout=PEER_CAP)[0]
        ended = "rc %d" % process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output = process.communicate()[0]
        ended = "still running at the %d s cap: stopped" % PEER_CAP
    task_seconds = time.monotonic() - started
    devices = {}
    if virsh("dominfo", PEER_DOMAIN, check=False):
        devices = peer_devices()
        watch.wait(PEER_CAP)
    row = watch.stop()
    row.update(devices)
    row.update({"task_seconds": rounded(task_seconds), "ended": ended, "cap": PEER_CAP,
                "output_tail": output[-1500:]})
    return row


def peer_devices():
    """What virt-install gave the peer's guest: the seed's cdrom bus, and whether it has the guest agent's channel."""
    devices = ElementTree.fromstring(virsh("dumpxml", PEER_DOMAIN)).find("devices")
    cdrom = devices.find("disk[@device='cdrom']/target")
    return {"seed_cdrom_bus": None if cdrom is None else cdrom.get("bus"),
            "agent_channel": devices.find("channel/target[@name='org.qemu.guest_agent.0']") is not None}


def remove_peer():
    if virsh("dominfo", PEER_DOMAIN, check=False):
        virsh("destroy", PEER_DOMAIN, check=False)
        virsh("undefine", PEER_DOMAIN, "--nvram", check=False)
    if os.path.exists(peer_disk()):
        os.unlink(peer_disk())
    virsh("pool-refresh", config.POOL_NAME, check=False)


def run(env):
    """B4's three paths, each once: ``env`` is the checkout's Ansible environment."""
    peer = peer_venv()
    results = {"peer_version": peer_version(peer), "peer_module": "community.libvirt.virt_install",
               "poll_interval": POLL_INTERVAL}
    with tempfile.TemporaryDirectory(prefix="bench-b4-") as work:
        playbook = proxy_playbook(work)
        remove_peer()
        cache_image(env)
        try:
            results["module"] = module_path(playbook, env)
            results["floor"] = floor_path()
        finally:
            timed([os.path.join(VENV, "bin", "ansible-playbook"), playbook, "-e", "bench_state=absent"], env=env)
        try:
            results["peer"] = peer_path(peer, work)
        finally:
            remove_peer()
    return results
