# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Domain XML: the builder for a proxy VM and small readers of an existing domain's XML."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import (
    validate_bridge_name,
    validate_network_name,
    validate_pool_name,
    validate_vm_name,
    validate_volume_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import ascii_decimal, normalize_mac, quoted
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import (
    INSTANCE_TAG,
    METADATA_URI,
    instance_metadata_from_domain_element,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.xml import etree, parse_xml, scaled_bytes, to_string

GUEST_AGENT_CHANNEL = "org.qemu.guest_agent.0"
VIRT_TYPES = ("kvm", "qemu")
CPU_MODES = ("host-passthrough", "host-model", "maximum", "none")
ARCH = "x86_64"
OVERLAY_TARGET = "vda"
SEED_TARGET = "sda"

MAX_VCPUS = 512
MIN_MEMORY_MIB = 128
MAX_MEMORY_MIB = 16 * 1024 * 1024

_MIB = 1024 * 1024
_MACHINE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


@dataclass(frozen=True)
class DomainParams:
    """Everything build_domain_xml needs, already resolved so the builder stays a pure function.

    ``metadata`` is the element from _libvirt.metadata.build_instance_element.
    ``interfaces`` are the NICs in device order (the first is the boot NIC):
    values with the attributes ``bridge`` (a host bridge) or ``network`` (a
    libvirt network), exactly one of them set, and ``mac`` (None lets libvirt
    pick one), such as _proxy.interfaces.Interface or NicInfo.
    """

    name: str
    metadata: Any
    vcpus: int
    memory_mib: int
    pool: str
    overlay_volume: str
    seed_volume: str
    interfaces: tuple = ()
    virt_type: str = "kvm"
    cpu_mode: str = "host-passthrough"
    machine: str = "q35"


@dataclass(frozen=True)
class DiskInfo:
    """One ``<disk>`` of a domain. pool/volume are set for pool-backed disks, path for file-backed ones."""

    device: Optional[str]
    target: Optional[str]
    pool: Optional[str]
    volume: Optional[str]
    path: Optional[str]


@dataclass(frozen=True)
class NicInfo:
    """One ``<interface>`` of a domain; bridge or network depending on its type."""

    mac: Optional[str]
    bridge: Optional[str]
    network: Optional[str]


@dataclass(frozen=True)
class DomainInfo:
    """The parts of a domain's XML the modules compare and report."""

    name: str
    virt_type: Optional[str]
    vcpus: Optional[int]
    memory_mib: Optional[int]
    disks: tuple[DiskInfo, ...] = field(default_factory=tuple)
    nics: tuple[NicInfo, ...] = field(default_factory=tuple)
    metadata: Any = None

    def volumes(self):
        """(pool, volume) of every pool-backed disk, in device order."""
        return [(disk.pool, disk.volume) for disk in self.disks if disk.volume is not None]

    def macs(self):
        """MAC addresses of every NIC that has one, in device order."""
        return [nic.mac for nic in self.nics if nic.mac is not None]


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def validate_domain_params(params):
    """Raise ValidationError for anything in ``params`` (a DomainParams) libvirt would reject or misread."""
    validate_vm_name(params.name)
    metadata = params.metadata
    if not etree.iselement(metadata) or metadata.tag != "{%s}%s" % (METADATA_URI, INSTANCE_TAG):
        raise ValidationError("domain %r needs the metadata element from build_instance_element" % (params.name,))
    validate_domain_settings(params)


def validate_domain_settings(params):
    """validate_domain_params without the metadata element: needs no lxml, so a request validates on any Python."""
    validate_vm_name(params.name)
    if not _is_int(params.vcpus) or not 1 <= params.vcpus <= MAX_VCPUS:
        raise ValidationError("vcpus must be a whole number from 1 to %d, got %s" % (MAX_VCPUS, quoted(params.vcpus)))
    if not _is_int(params.memory_mib) or not MIN_MEMORY_MIB <= params.memory_mib <= MAX_MEMORY_MIB:
        raise ValidationError(
            "memory_mib must be a whole number from %d to %d, got %s" % (MIN_MEMORY_MIB, MAX_MEMORY_MIB, quoted(params.memory_mib)))
    validate_pool_name(params.pool)
    validate_volume_name(params.overlay_volume)
    validate_volume_name(params.seed_volume)
    if not params.interfaces:
        raise ValidationError("domain %r needs a NIC: give at least one in interfaces" % (params.name,))
    macs = set()
    for index, nic in enumerate(params.interfaces):
        if (nic.bridge is None) == (nic.network is None):
            raise ValidationError("domain %r needs exactly one of bridge or network for NIC %d" % (params.name, index))
        if nic.bridge is not None:
            validate_bridge_name(nic.bridge)
        else:
            validate_network_name(nic.network)
        if nic.mac is not None:
            mac = normalize_mac(nic.mac)
            if mac in macs:
                raise ValidationError("domain %r has two NICs with MAC address %s" % (params.name, mac))
            macs.add(mac)
    if params.virt_type not in VIRT_TYPES:
        raise ValidationError("virt_type %r is not supported: use one of %s" % (params.virt_type, ", ".join(VIRT_TYPES)))
    if params.cpu_mode not in CPU_MODES:
        raise ValidationError("cpu_mode %r is not supported: use one of %s" % (params.cpu_mode, ", ".join(CPU_MODES)))
    # QEMU refuses "-cpu host" under TCG; saying so here beats libvirt's start-time error.
    if params.virt_type == "qemu" and params.cpu_mode == "host-passthrough":
        raise ValidationError(
            "cpu_mode host-passthrough needs virt_type kvm; with virt_type qemu use host-model, maximum or none")
    if not isinstance(params.machine, str) or not _MACHINE.fullmatch(params.machine):
        raise ValidationError("machine %s is not a valid machine type, e.g. q35 or pc-q35-7.2" % (quoted(params.machine),))


def _sub(parent, tag, text=None, **attributes):
    element = etree.SubElement(parent, tag, **attributes)
    if text is not None:
        element.text = text
    return element


def _pool_disk(devices, device, driver_type, pool, volume, target, bus):
    disk = _sub(devices, "disk", type="volume", device=device)
    _sub(disk, "driver", name="qemu", type=driver_type)
    _sub(disk, "source", pool=pool, volume=volume)
    _sub(disk, "target", dev=target, bus=bus)
    return disk


def build_domain_element(params):
    """Build the ``<domain>`` of a headless proxy VM from ``params`` (a DomainParams).

    The guest boots its qcow2 overlay (vda, virtio) and reads its cloud-init
    seed from a read-only cdrom; both are referenced as pool volumes so no
    host paths leak into the XML. Serial console, guest agent channel and a
    virtio RNG; no graphics.
    """
    validate_domain_params(params)
    domain = etree.Element("domain", type=params.virt_type)
    _sub(domain, "name", params.name)
    _sub(domain, "metadata").append(copy.deepcopy(params.metadata))
    _sub(domain, "memory", str(params.memory_mib), unit="MiB")
    _sub(domain, "vcpu", str(params.vcpus))
    os_element = _sub(domain, "os")
    _sub(os_element, "type", "hvm", arch=ARCH, machine=params.machine)
    _sub(os_element, "boot", dev="hd")
    features = _sub(domain, "features")
    _sub(features, "acpi")
    _sub(features, "apic")
    if params.cpu_mode != "none":
        _sub(domain, "cpu", mode=params.cpu_mode)
    _sub(domain, "clock", offset="utc")
    _sub(domain, "on_poweroff", "destroy")
    _sub(domain, "on_reboot", "restart")
    _sub(domain, "on_crash", "destroy")

    devices = _sub(domain, "devices")
    _pool_disk(devices, "disk", "qcow2", params.pool, params.overlay_volume, OVERLAY_TARGET, "virtio")
    # The seed sits on virtio-scsi, not SATA: Debian's cloud kernel has no
    # AHCI driver, so a SATA cdrom is invisible and cloud-init falls back to
    # DataSourceNone (measured); on virtio-scsi it finds the NoCloud seed.
    seed = _pool_disk(devices, "cdrom", "raw", params.pool, params.seed_volume, SEED_TARGET, "scsi")
    _sub(seed, "readonly")
    _sub(devices, "controller", type="scsi", index="0", model="virtio-scsi")

    for nic in params.interfaces:
        if nic.bridge is not None:
            interface = _sub(devices, "interface", type="bridge")
            _sub(interface, "source", bridge=nic.bridge)
        else:
            interface = _sub(devices, "interface", type="network")
            _sub(interface, "source", network=nic.network)
        if nic.mac is not None:
            _sub(interface, "mac", address=normalize_mac(nic.mac))
        _sub(interface, "model", type="virtio")

    serial = _sub(devices, "serial", type="pty")
    _sub(serial, "target", port="0")
    console = _sub(devices, "console", type="pty")
    _sub(console, "target", type="serial", port="0")
    channel = _sub(devices, "channel", type="unix")
    _sub(channel, "target", type="virtio", name=GUEST_AGENT_CHANNEL)
    rng = _sub(devices, "rng", model="virtio")
    _sub(rng, "backend", "/dev/urandom", model="random")
    return domain


def build_domain_xml(params):
    """build_domain_element serialised; what virDomainDefineXML takes."""
    return to_string(build_domain_element(params))


def _optional_int(text, what):
    if text is None:
        return None
    number = ascii_decimal(text.strip())
    if number is None:
        raise PermanentError("%s %r is not a whole number" % (what, text.strip()))
    return number


def parse_domain_element(domain):
    """DomainInfo of an already parsed ``<domain>`` root element."""
    if domain.tag != "domain":
        raise PermanentError("domain XML has root <%s>, expected <domain>" % (domain.tag,))
    name = (domain.findtext("name") or "").strip()
    if not name:
        raise PermanentError("domain XML has no <name>")
    memory = domain.find("memory")
    memory_mib = None if memory is None else scaled_bytes(memory, "domain %r <memory>" % (name,)) // _MIB

    disks = []
    for disk in domain.iterfind("devices/disk"):
        source = disk.find("source")
        target = disk.find("target")
        disks.append(DiskInfo(
            device=disk.get("device"),
            target=None if target is None else target.get("dev"),
            pool=None if source is None else source.get("pool"),
            volume=None if source is None else source.get("volume"),
            path=None if source is None else source.get("file") or source.get("dev"),
        ))
    nics = []
    for interface in domain.iterfind("devices/interface"):
        mac = interface.find("mac")
        source = interface.find("source")
        nics.append(NicInfo(
            mac=None if mac is None else (mac.get("address") or "").lower() or None,
            bridge=None if source is None else source.get("bridge"),
            network=None if source is None else source.get("network"),
        ))
    return DomainInfo(
        name=name,
        virt_type=domain.get("type"),
        vcpus=_optional_int(domain.findtext("vcpu"), "domain %r <vcpu>" % (name,)),
        memory_mib=memory_mib,
        disks=tuple(disks),
        nics=tuple(nics),
        metadata=instance_metadata_from_domain_element(domain),
    )


def parse_domain_xml(xml_string):
    """Read name, virt type, vcpus, memory (MiB), disks, NICs and our metadata from a domain's XML."""
    return parse_domain_element(parse_xml(xml_string, "domain XML"))
