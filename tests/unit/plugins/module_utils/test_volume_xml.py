# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lxml import etree

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import (
    VolumeInfo,
    VolumeSpec,
    build_volume_xml,
    parse_volume_xml,
)
from ansible_collections.egress_proxies.kvm.tests.unit.libvirt_schema import virt_xml_validate

GIB = 1 << 30
BASE = "/var/lib/egress-proxies-lab/pool/base-debian-12.qcow2"
OVERLAY = VolumeSpec("proxy-x.qcow2", 10 * GIB, "qcow2", BASE, "qcow2")


def test_overlay_field_by_field():
    volume = etree.fromstring(build_volume_xml(OVERLAY))
    assert volume.tag == "volume" and volume.get("type") == "file"
    assert volume.findtext("name") == "proxy-x.qcow2"
    capacity = volume.find("capacity")
    assert capacity.get("unit") == "bytes" and capacity.text == str(10 * GIB)
    assert volume.find("target/format").get("type") == "qcow2"
    assert volume.findtext("backingStore/path") == BASE
    assert volume.find("backingStore/format").get("type") == "qcow2"
    assert volume.find("allocation") is None


def test_raw_volume_has_no_backing_store():
    raw = build_volume_xml(VolumeSpec("proxy-x-seed.iso", 372736, "raw"))
    volume = etree.fromstring(raw)
    assert volume.find("backingStore") is None
    assert volume.findtext("name") == "proxy-x-seed.iso"
    assert volume.findtext("capacity") == "372736"
    assert volume.find("target/format").get("type") == "raw"


@pytest.mark.parametrize("spec, message", [
    (VolumeSpec("../x.qcow2", GIB, "qcow2"), "not a valid volume name"),
    (VolumeSpec("a/b", GIB, "qcow2"), "not a valid volume name"),
    (VolumeSpec("x<y", GIB, "qcow2"), "not a valid volume name"),
    (VolumeSpec("x", GIB, "vmdk"), "disk format"),
    (VolumeSpec("x", 0, "raw"), "positive capacity"),
    (VolumeSpec("x", -1, "raw"), "positive capacity"),
    (VolumeSpec("x", True, "raw"), "positive capacity"),
    (VolumeSpec("x", 1.5, "raw"), "positive capacity"),
    (VolumeSpec("x", "10G", "raw"), "positive capacity"),
    (VolumeSpec("x", GIB, "raw", BASE, "qcow2"), "only qcow2"),
    (VolumeSpec("x", GIB, "qcow2", "relative/base.qcow2", "qcow2"), "absolute path"),
    (VolumeSpec("x", GIB, "qcow2", "/a\x00b", "qcow2"), "absolute path"),
    (VolumeSpec("x", GIB, "qcow2", BASE), "no backing format"),
    (VolumeSpec("x", GIB, "qcow2", BASE, "vmdk"), "disk format"),
    (VolumeSpec("x", GIB, "qcow2", None, "qcow2"), "no backing path"),
])
def test_invalid_specs_are_rejected(spec, message):
    with pytest.raises(ValidationError, match=message):
        build_volume_xml(spec)


@pytest.mark.parametrize("path", ['/pool/a"b.qcow2', "/pool/<x>&y.qcow2", "/pool/]]>.qcow2", "/pool/a'b"])
def test_markup_in_backing_path_comes_back_verbatim(path):
    raw = build_volume_xml(VolumeSpec("x.qcow2", GIB, "qcow2", path, "qcow2"))
    volume = etree.fromstring(raw)
    assert [child.tag for child in volume] == ["name", "capacity", "target", "backingStore"]
    assert volume.findtext("backingStore/path") == path
    assert parse_volume_xml(raw).backing_path == path


@given(capacity=st.integers(min_value=1, max_value=1 << 62), backed=st.booleans())
def test_build_then_parse_round_trips(capacity, backed):
    spec = VolumeSpec("v.qcow2", capacity, "qcow2", BASE if backed else None, "qcow2" if backed else None)
    info = parse_volume_xml(build_volume_xml(spec))
    assert info == VolumeInfo("v.qcow2", None, "qcow2", capacity, BASE if backed else None)


# What virStorageVolGetXMLDesc returns on libvirt 9.0 for an overlay.
LIBVIRT_OVERLAY = """<volume type='file'>
  <name>proxy-x.qcow2</name>
  <key>/var/lib/egress-proxies-lab/pool/proxy-x.qcow2</key>
  <capacity unit='bytes'>10737418240</capacity>
  <allocation unit='bytes'>200704</allocation>
  <physical unit='bytes'>196616</physical>
  <target>
    <path>/var/lib/egress-proxies-lab/pool/proxy-x.qcow2</path>
    <format type='qcow2'/>
    <permissions>
      <mode>0600</mode>
      <owner>0</owner>
      <group>0</group>
    </permissions>
    <compat>1.1</compat>
  </target>
  <backingStore>
    <path>/var/lib/egress-proxies-lab/pool/base-debian-12.qcow2</path>
    <format type='qcow2'/>
  </backingStore>
</volume>
"""


def test_parse_libvirt_volume_xml():
    assert parse_volume_xml(LIBVIRT_OVERLAY) == VolumeInfo(
        name="proxy-x.qcow2",
        path="/var/lib/egress-proxies-lab/pool/proxy-x.qcow2",
        disk_format="qcow2",
        capacity_bytes=10737418240,
        backing_path=BASE,
    )


@pytest.mark.parametrize("unit, factor", [("KiB", 1024), ("K", 1024), ("MB", 1000 ** 2), ("G", GIB), ("gib", GIB)])
def test_parse_scales_units(unit, factor):
    raw = "<volume><name>v</name><capacity unit='%s'>3</capacity></volume>" % unit
    assert parse_volume_xml(raw).capacity_bytes == 3 * factor


def test_parse_minimal_volume_leaves_absent_fields_none():
    assert parse_volume_xml("<volume><name>v</name></volume>") == VolumeInfo("v", None, None, None, None)


@pytest.mark.parametrize("raw, message", [
    ("<pool><name>v</name></pool>", "expected <volume>"),
    ("<volume><capacity>1</capacity></volume>", "no <name>"),
    ("<volume><name>v</name><capacity unit='furlongs'>1</capacity></volume>", "unreadable size"),
    ("<volume><name>v</name><capacity>-1</capacity></volume>", "unreadable size"),
    ("<volume><name>v</name><capacity>\u00b2</capacity></volume>", "unreadable size"),
    ("<volume>", "not well-formed"),
])
def test_parse_rejects_broken_xml(raw, message):
    with pytest.raises(PermanentError, match=message):
        parse_volume_xml(raw)


@pytest.mark.parametrize("spec", [OVERLAY, VolumeSpec("proxy-x-seed.iso", 372736, "raw")])
def test_libvirt_schema_accepts_volume(tmp_path, spec):
    result = virt_xml_validate(tmp_path, build_volume_xml(spec), "storagevol")
    assert result.returncode == 0, result.stderr
