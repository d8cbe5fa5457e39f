"""A small fleet of domains on the lab's libvirtd for the kvm_proxy_info and kvm_proxies tests.

Three domains carry the collection's metadata (built with _domain_xml and
_metadata, virt type qemu, the lab bridge, disks as volumes in the lab pool
holding the lab's non-booting tiny.qcow2); one is started, so the listing
sees a live domain that has no address. One more domain is hand-made, with
no metadata. Owners are unique per run, so filtering by uid isolates the
fleet from whatever else runs on the lab. Every name starts with
``eptest-`` (scripts/lab down removes such leftovers too).
"""

import contextlib
import datetime
import uuid
from dataclasses import dataclass

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import overlay_volume_name, seed_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import Hypervisor
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import VolumeSpec, build_volume_xml
from tests.integration import lab_objects
from tests.lab import config
from tests.lab.proxy_domains import managed_domain_xml

SEED_BYTES = 64 * 1024


@dataclass
class Member:
    name: str
    uid: object  # None for the hand-made domain
    created_at: object
    running: bool
    autostart: bool
    mac: str


@dataclass
class Fleet:
    prefix: str
    owner_one: str
    owner_two: str
    members: list

    def member(self, suffix):
        return next(m for m in self.members if m.name == self.prefix + suffix)

    @property
    def names(self):
        return [m.name for m in self.members]

    def volumes(self):
        return [volume for m in self.members if m.uid is not None for volume in (overlay_volume_name(m.name), seed_volume_name(m.name))]


def plan(prefix):
    """The fleet to build: ``<prefix>run`` (started), ``off``, ``old`` and the hand-made ``hand``."""
    token = uuid.uuid4().hex[:8]
    owner_one, owner_two = "eptest-owner-1-" + token, "eptest-owner-2-" + token
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    old = datetime.datetime(2020, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    members = [
        Member(prefix + "run", owner_one, now, running=True, autostart=False, mac="52:54:00:e9:6a:01"),
        Member(prefix + "off", owner_two, now, running=False, autostart=True, mac="52:54:00:e9:6a:02"),
        Member(prefix + "old", owner_one, old, running=False, autostart=False, mac="52:54:00:e9:6a:03"),
        Member(prefix + "hand", None, None, running=False, autostart=False, mac="52:54:00:e9:6a:04"),
    ]
    return Fleet(prefix, owner_one, owner_two, members)


def _hand_made_xml(member, lab):
    return (
        "<domain type='%s'><name>%s</name><memory unit='MiB'>128</memory><vcpu>1</vcpu>"
        "<os><type arch='x86_64' machine='q35'>hvm</type></os>"
        "<devices><interface type='bridge'><source bridge='%s'/><mac address='%s'/><model type='virtio'/></interface></devices>"
        "</domain>" % (lab.virt_type, member.name, lab.bridge, member.mac)
    )


def _managed_xml(member, lab):
    return managed_domain_xml(member.name, member.uid, member.created_at, lab.pool, lab.bridge, lab.virt_type,
                              lab.cpu_mode, member.mac)


def _upload_new_volume(hypervisor, pool, name, disk_format, content):
    vol = hypervisor.create_volume(pool, build_volume_xml(VolumeSpec(name, len(content), disk_format)))
    hypervisor.upload_volume(vol, [content])


def build(lab, fleet):
    """Define (and start) the fleet on the lab; whatever a failed earlier run left is removed first."""
    with open(lab.images[config.TINY_QCOW2]["path"], "rb") as handle:
        tiny = handle.read()
    with Hypervisor.open(lab.uri) as hypervisor:
        remove(hypervisor, lab, fleet)
        pool = hypervisor.lookup_pool(lab.pool)
        for member in fleet.members:
            if member.uid is None:
                hypervisor.define_domain(_hand_made_xml(member, lab))
                continue
            _upload_new_volume(hypervisor, pool, overlay_volume_name(member.name), "qcow2", tiny)
            _upload_new_volume(hypervisor, pool, seed_volume_name(member.name), "raw", b"\0" * SEED_BYTES)
            dom = hypervisor.define_domain(_managed_xml(member, lab))
            if member.autostart:
                hypervisor.set_domain_autostart(dom, True)
            if member.running:
                hypervisor.start_domain(dom)
        hypervisor.refresh_pool(pool)


def remove(hypervisor, lab, fleet):
    lab_objects.remove(hypervisor, lab.pool, fleet.names, fleet.volumes())


def tear_down(lab, fleet):
    with Hypervisor.open(lab.uri) as hypervisor:
        remove(hypervisor, lab, fleet)


@contextlib.contextmanager
def built(lab, prefix):
    """The fleet of ``plan(prefix)`` on the lab for the duration of the block, removed even when building fails."""
    fleet = plan(prefix)
    try:
        build(lab, fleet)
        yield fleet
    finally:
        tear_down(lab, fleet)


def fixture(prefix):
    """A module-scoped ``fleet`` fixture: the fleet of ``plan(prefix)``, built once for the test module."""

    @pytest.fixture(scope="module")
    def fleet(lab):
        """The fleet of proxy_fleet.plan(prefix) on the lab, for this module's tests."""
        with built(lab, prefix) as planned:
            yield planned

    return fleet
