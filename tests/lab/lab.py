"""Bring the whole lab up or down, idempotently, and describe it to tests."""

import contextlib
import dataclasses
import fcntl
import os

from tests.lab import config, hypervisors, images, libvirt_host, mirror, network
from tests.lab.shell import LabError


@dataclasses.dataclass(frozen=True)
class Lab:
    """What a test needs to know about the running lab."""

    uri: str
    pool: str
    pool_dir: str
    bridge: str
    netns: str
    netns_address: str
    mirror_url: str
    cache_dir: str
    virt_type: str
    cpu_mode: str
    images: dict  # name -> {"url", "sha256", "size", "path"}


def describe():
    return Lab(uri=config.LIBVIRT_URI, pool=config.POOL_NAME, pool_dir=config.POOL_DIR,
               bridge=config.BRIDGE, netns=config.NETNS, netns_address=config.NETNS_ADDRESS,
               mirror_url=config.MIRROR_URL, cache_dir=config.CACHE_DIR,
               virt_type=config.VIRT_TYPE, cpu_mode=config.CPU_MODE, images=images.image_info())


@contextlib.contextmanager
def _exclusive():
    # Two test sessions (or a test session and the demo) bringing the lab up at once would
    # build the guest image into the same directory; the second waits for the first instead.
    os.makedirs(config.RUN_DIR, exist_ok=True)
    with open(os.path.join(config.RUN_DIR, "lab.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def up():
    """Bring every part of the lab up; return the list of things that had to change."""
    with _exclusive():
        return _up()


def _up():
    actions = []
    actions += libvirt_host.ensure_daemons()
    actions += libvirt_host.ensure_pool()
    actions += network.ensure_network()
    actions += images.ensure_images()
    actions += mirror.ensure_mirror()
    actions += hypervisors.up(_requested_hypervisors())
    return actions


def _requested_hypervisors():
    try:
        return config.hypervisor_specs()
    except ValueError as error:
        raise LabError(str(error)) from None


def down():
    """Remove the lab's domains, pool, network and mirror, and every lab hypervisor. libvirtd keeps running."""
    with _exclusive():
        return _down()


def _down():
    actions = hypervisors.down()
    actions += mirror.stop_mirror()
    if libvirt_host.daemons_running():
        actions += libvirt_host.remove_lab_domains()
        actions += libvirt_host.remove_pool()
    actions += network.remove_network()
    return actions


def status():
    """{component: description}; a component that is down says so."""
    daemons = libvirt_host.daemons_running()
    state = {
        libvirt_host.KVM_DEVICE: libvirt_host.kvm_device_status(),
        "libvirt daemons": "running" if daemons else "not running",
        "pool %s" % config.POOL_NAME: (libvirt_host.pool_state() or "undefined") if daemons else "unknown",
        "bridge %s" % config.BRIDGE: "present" if network.link_exists(config.BRIDGE) else "absent",
        "netns %s" % config.NETNS: "present" if network.netns_exists() else "absent",
        "dnsmasq": "running" if network.dnsmasq_pid() else "not running",
        "mirror %s" % config.MIRROR_URL: "running" if mirror.mirror_pid() else "not running",
        "image %s" % config.GUEST_IMAGE: "current" if images.guest_image_current() else "missing or stale",
    }
    if daemons:
        state["lab domains"] = ", ".join(libvirt_host.lab_domains()) or "none"
    return state


def hypervisor_status():
    """{component: description} of every lab hypervisor `up` brings up or that is present."""
    specs = sorted(set(_requested_hypervisors()) | set(hypervisors.present_specs()), key=lambda spec: spec.index)
    return hypervisors.status(specs)


def is_up(state, hypervisor_state=None):
    return libvirt_host.kvm_device_ready() and all(
        value in ("running", "present", "current") for key, value in state.items()
        if key not in ("lab domains", libvirt_host.KVM_DEVICE)) and hypervisors.is_up(hypervisor_state or {})


def hypervisors_down():
    """Remove the lab hypervisors only; the single lab (eplab) stays."""
    with _exclusive():
        return hypervisors.down()


def hypervisor_action(action, name):
    """A test helper on one hypervisor: sshd-stop, sshd-start, freeze or thaw."""
    spec = hypervisors.spec_named(name)
    helpers = {"sshd-stop": hypervisors.stop_sshd, "sshd-start": hypervisors.start_sshd,
               "freeze": hypervisors.freeze, "thaw": hypervisors.thaw}
    return ["%s: %s" % (spec.name, done) for done in helpers[action](spec)]
