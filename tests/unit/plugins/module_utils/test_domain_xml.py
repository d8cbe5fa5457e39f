# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import dataclasses
import datetime

import pytest
from lxml import etree

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import (
    GUEST_AGENT_CHANNEL,
    DiskInfo,
    DomainParams,
    NicInfo,
    build_domain_xml,
    parse_domain_xml,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import (
    METADATA_URI,
    InstanceMetadata,
    build_instance_element,
)
from ansible_collections.egress_proxies.kvm.tests.unit.libvirt_schema import virt_xml_validate

CREATED = datetime.datetime(2026, 11, 29, 18, 0, 0, tzinfo=datetime.timezone.utc)
NS = "{%s}" % METADATA_URI


def params(bridge="eplab0", network=None, mac=None, **changes):
    """The test's domain; ``bridge``, ``network`` and ``mac`` are its one NIC's."""
    base = DomainParams(
        name="proxy-abc123",
        metadata=build_instance_element("11111111-2222-3333-4444-555555555555", CREATED),
        vcpus=2,
        memory_mib=2048,
        pool="egress-lab",
        overlay_volume="proxy-abc123.qcow2",
        seed_volume="proxy-abc123-seed.iso",
        interfaces=(NicInfo(mac=mac, bridge=bridge, network=network),),
    )
    return dataclasses.replace(base, **changes)


def build(**changes):
    return etree.fromstring(build_domain_xml(params(**changes)))


def test_domain_field_by_field():
    domain = build()
    assert domain.tag == "domain" and domain.get("type") == "kvm"
    assert domain.findtext("name") == "proxy-abc123"
    assert domain.find("memory").get("unit") == "MiB" and domain.findtext("memory") == "2048"
    assert domain.findtext("vcpu") == "2"
    os_type = domain.find("os/type")
    assert (os_type.text, os_type.get("arch"), os_type.get("machine")) == ("hvm", "x86_64", "q35")
    assert domain.find("os/boot").get("dev") == "hd"
    assert [feature.tag for feature in domain.find("features")] == ["acpi", "apic"]
    assert domain.find("cpu").attrib == {"mode": "host-passthrough"}
    assert domain.find("clock").get("offset") == "utc"
    assert [domain.findtext(tag) for tag in ("on_poweroff", "on_reboot", "on_crash")] == ["destroy", "restart", "destroy"]
    assert domain.find(".//graphics") is None


def test_metadata_is_namespaced_under_metadata():
    (instance,) = build().find("metadata")
    assert instance.tag == NS + "instance"
    assert instance.findtext(NS + "uid") == "11111111-2222-3333-4444-555555555555"
    assert instance.findtext(NS + "createdAt") == "2026-11-29T18:00:00Z"
    assert instance.findtext(NS + "managed") == "true"


def test_metadata_element_of_params_is_not_moved():
    p = params()
    build_domain_xml(p)
    assert p.metadata.getparent() is None
    assert etree.fromstring(build_domain_xml(p)).find("metadata/" + NS + "instance") is not None


def test_disks():
    overlay, seed = build().findall("devices/disk")
    assert (overlay.get("type"), overlay.get("device")) == ("volume", "disk")
    assert overlay.find("driver").attrib == {"name": "qemu", "type": "qcow2"}
    assert overlay.find("source").attrib == {"pool": "egress-lab", "volume": "proxy-abc123.qcow2"}
    assert overlay.find("target").attrib == {"dev": "vda", "bus": "virtio"}
    assert overlay.find("readonly") is None

    assert (seed.get("type"), seed.get("device")) == ("volume", "cdrom")
    assert seed.find("driver").attrib == {"name": "qemu", "type": "raw"}
    assert seed.find("source").attrib == {"pool": "egress-lab", "volume": "proxy-abc123-seed.iso"}
    assert seed.find("readonly") is not None


def test_seed_is_on_virtio_scsi_not_sata():
    domain = build()
    seed = domain.findall("devices/disk")[1]
    assert seed.find("target").attrib == {"dev": "sda", "bus": "scsi"}
    controllers = domain.findall("devices/controller")
    assert [c.attrib for c in controllers] == [{"type": "scsi", "index": "0", "model": "virtio-scsi"}]
    assert "sata" not in build_domain_xml(params())


def test_bridge_nic():
    (nic,) = build().findall("devices/interface")
    assert nic.get("type") == "bridge"
    assert nic.find("source").attrib == {"bridge": "eplab0"}
    assert nic.find("model").get("type") == "virtio"
    assert nic.find("mac") is None


def test_network_nic_with_fixed_mac():
    (nic,) = build(bridge=None, network="default", mac="52:54:00:AB:cd:EF").findall("devices/interface")
    assert nic.get("type") == "network"
    assert nic.find("source").attrib == {"network": "default"}
    assert nic.find("mac").get("address") == "52:54:00:ab:cd:ef"


def test_console_agent_and_rng():
    devices = build().find("devices")
    assert devices.find("serial").get("type") == "pty" and devices.find("serial/target").get("port") == "0"
    console = devices.find("console")
    assert console.get("type") == "pty" and console.find("target").attrib == {"type": "serial", "port": "0"}
    (channel,) = devices.findall("channel")
    assert channel.get("type") == "unix"
    assert channel.find("target").attrib == {"type": "virtio", "name": GUEST_AGENT_CHANNEL}
    rng = devices.find("rng")
    assert rng.get("model") == "virtio"
    assert rng.find("backend").attrib == {"model": "random"} and rng.findtext("backend") == "/dev/urandom"


@pytest.mark.parametrize("cpu_mode", ["host-model", "maximum"])
def test_cpu_modes(cpu_mode):
    assert build(cpu_mode=cpu_mode).find("cpu").attrib == {"mode": cpu_mode}


def test_cpu_mode_none_omits_cpu_element():
    assert build(cpu_mode="none").find("cpu") is None


def test_qemu_virt_type_and_machine():
    domain = build(virt_type="qemu", cpu_mode="none", machine="pc-q35-7.2")
    assert domain.get("type") == "qemu"
    assert domain.find("os/type").get("machine") == "pc-q35-7.2"


@pytest.mark.parametrize("changes, message", [
    ({"name": "Proxy"}, "not a valid VM name"),
    ({"name": "../x"}, "not a valid VM name"),
    ({"metadata": None}, "metadata element"),
    ({"metadata": etree.Element("instance")}, "metadata element"),
    ({"vcpus": 0}, "vcpus"),
    ({"vcpus": 513}, "vcpus"),
    ({"vcpus": True}, "vcpus"),
    ({"vcpus": "2"}, "vcpus"),
    ({"memory_mib": 64}, "memory_mib"),
    ({"memory_mib": 2048.0}, "memory_mib"),
    ({"pool": "a/b"}, "storage pool"),
    ({"overlay_volume": "../etc/shadow"}, "volume name"),
    ({"seed_volume": "x y"}, "volume name"),
    ({"interfaces": ()}, "needs a NIC"),
    ({"bridge": None}, "exactly one of bridge or network"),
    ({"network": "default"}, "exactly one of bridge or network"),
    ({"bridge": 'br0" onload="x'}, "Linux interface name"),
    ({"bridge": None, "network": "<net>"}, "libvirt network name"),
    ({"mac": "52:54:00:12:34"}, "MAC address"),
    ({"mac": "52-54-00-12-34-56"}, "MAC address"),
    ({"mac": "01:00:5e:00:00:01"}, "multicast"),
    ({"mac": "ff:ff:ff:ff:ff:ff"}, "multicast"),
    ({"mac": "00:00:00:00:00:00"}, "all zeros"),
    ({"virt_type": "xen"}, "virt_type"),
    ({"cpu_mode": "custom"}, "cpu_mode"),
    ({"virt_type": "qemu"}, "host-passthrough needs virt_type kvm"),
    ({"machine": "q35'/><x"}, "machine"),
    ({"machine": ""}, "machine"),
])
def test_invalid_params_are_rejected(changes, message):
    with pytest.raises(ValidationError, match=message):
        build_domain_xml(params(**changes))


def test_parse_reads_back_the_builder_output():
    raw = build_domain_xml(params(mac="52:54:00:00:00:01"))
    info = parse_domain_xml(raw)
    assert info.name == "proxy-abc123" and info.virt_type == "kvm"
    assert info.vcpus == 2 and info.memory_mib == 2048
    assert info.disks == (
        DiskInfo("disk", "vda", "egress-lab", "proxy-abc123.qcow2", None),
        DiskInfo("cdrom", "sda", "egress-lab", "proxy-abc123-seed.iso", None),
    )
    assert info.volumes() == [("egress-lab", "proxy-abc123.qcow2"), ("egress-lab", "proxy-abc123-seed.iso")]
    assert info.nics == (NicInfo("52:54:00:00:00:01", "eplab0", None),)
    assert info.macs() == ["52:54:00:00:00:01"]
    assert info.metadata == InstanceMetadata(
        managed=True, uid="11111111-2222-3333-4444-555555555555", created_at_raw="2026-11-29T18:00:00Z")


# Abridged from `virsh dumpxml` of a running domain on libvirt 9.0: memory in
# KiB, the metadata element in the default-namespace form it was defined with,
# a file-backed disk and a network NIC that also names its bridge.
LIBVIRT_DOMAIN = """<domain type='qemu' id='3'>
  <name>proxy-1</name>
  <uuid>0b7c3c4e-5f2a-4c1e-9d43-2f0a4f3b9c11</uuid>
  <metadata>
    <instance xmlns="%s">
      <managed>true</managed>
      <uid>u-1</uid>
      <createdAt>2026-11-29T18:00:00Z</createdAt>
    </instance>
  </metadata>
  <memory unit='KiB'>1048576</memory>
  <currentMemory unit='KiB'>1048576</currentMemory>
  <vcpu placement='static'>1</vcpu>
  <devices>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source pool='egress-lab' volume='proxy-1.qcow2' index='2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <source file='/tmp/other.iso'/>
      <target dev='sdb' bus='scsi'/>
    </disk>
    <interface type='network'>
      <mac address='52:54:00:AA:00:01'/>
      <source network='default' portid='e3f1' bridge='virbr0'/>
      <model type='virtio'/>
    </interface>
    <interface type='user'>
      <model type='virtio'/>
    </interface>
  </devices>
</domain>
""" % METADATA_URI


def test_parse_libvirt_domain_xml():
    info = parse_domain_xml(LIBVIRT_DOMAIN)
    assert (info.name, info.virt_type, info.vcpus, info.memory_mib) == ("proxy-1", "qemu", 1, 1024)
    assert info.disks == (
        DiskInfo("disk", "vda", "egress-lab", "proxy-1.qcow2", None),
        DiskInfo("cdrom", "sdb", None, None, "/tmp/other.iso"),
    )
    assert info.volumes() == [("egress-lab", "proxy-1.qcow2")]
    assert info.nics == (NicInfo("52:54:00:aa:00:01", "virbr0", "default"), NicInfo(None, None, None))
    assert info.macs() == ["52:54:00:aa:00:01"]
    assert info.metadata.uid == "u-1" and info.metadata.managed


def test_parse_domain_without_our_metadata():
    info = parse_domain_xml("<domain type='kvm'><name>other</name></domain>")
    assert info.metadata is None and info.vcpus is None and info.memory_mib is None
    assert info.disks == () and info.nics == ()


@pytest.mark.parametrize("raw, message", [
    ("<volume/>", "expected <domain>"),
    ("<domain><name> </name></domain>", "no <name>"),
    ("<domain><name>x</name><vcpu>two</vcpu></domain>", "not a whole number"),
    ("<domain><name>x</name><memory unit='parsecs'>1</memory></domain>", "unreadable size"),
    ("<domain", "not well-formed"),
])
def test_parse_rejects_broken_domains(raw, message):
    with pytest.raises(PermanentError, match=message):
        parse_domain_xml(raw)


@pytest.mark.parametrize("changes", [
    {},
    {"bridge": None, "network": "default", "mac": "52:54:00:00:00:02", "virt_type": "qemu", "cpu_mode": "none"},
    {"cpu_mode": "maximum", "machine": "pc-q35-7.2"},
])
def test_libvirt_schema_accepts_domain(tmp_path, changes):
    result = virt_xml_validate(tmp_path, build_domain_xml(params(**changes)), "domain")
    assert result.returncode == 0, result.stderr
