# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Storage volume XML: the builder for virStorageVolCreateXML and a reader of virStorageVolGetXMLDesc."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass
from typing import Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import validate_disk_format, validate_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.xml import (
    child_text,
    etree,
    is_value_text,
    parse_xml,
    scaled_bytes,
    to_string,
)


@dataclass(frozen=True)
class VolumeSpec:
    """A volume to create. A ``backing_path`` makes it a copy-on-write overlay of that file."""

    name: str
    capacity_bytes: int
    disk_format: str
    backing_path: Optional[str] = None
    backing_format: Optional[str] = None


@dataclass(frozen=True)
class VolumeInfo:
    """What libvirt reports about an existing volume. Sizes are in bytes; absent values are None."""

    name: str
    path: Optional[str]
    disk_format: Optional[str]
    capacity_bytes: Optional[int]
    backing_path: Optional[str]


def validate_volume_spec(spec):
    """Raise ValidationError unless ``spec`` describes a volume libvirt can create safely."""
    validate_volume_name(spec.name)
    validate_disk_format(spec.disk_format)
    if isinstance(spec.capacity_bytes, bool) or not isinstance(spec.capacity_bytes, int) or spec.capacity_bytes <= 0:
        raise ValidationError(
            "volume %r needs a positive capacity in bytes, got %r" % (spec.name, spec.capacity_bytes))
    if spec.backing_path is None:
        if spec.backing_format is not None:
            raise ValidationError("volume %r has a backing format but no backing path" % (spec.name,))
        return
    if spec.disk_format != "qcow2":
        raise ValidationError("volume %r is %s; only qcow2 volumes can have a backing store" % (spec.name, spec.disk_format))
    if not is_value_text(spec.backing_path) or not spec.backing_path.startswith("/"):
        raise ValidationError("backing path %r of volume %r must be an absolute path without control characters or "
                              "surrounding whitespace" % (spec.backing_path, spec.name))
    # Without an explicit backing format QEMU would probe it, and a probed
    # raw image that looks like qcow2 can point the guest at any host file.
    if spec.backing_format is None:
        raise ValidationError("volume %r has a backing path but no backing format" % (spec.name,))
    validate_disk_format(spec.backing_format)


def build_volume_element(spec):
    """Build ``<volume>`` for ``spec`` (a VolumeSpec); capacity is always in bytes so no unit suffix is misread."""
    validate_volume_spec(spec)
    volume = etree.Element("volume", type="file")
    etree.SubElement(volume, "name").text = spec.name
    etree.SubElement(volume, "capacity", unit="bytes").text = str(spec.capacity_bytes)
    target = etree.SubElement(volume, "target")
    etree.SubElement(target, "format", type=spec.disk_format)
    if spec.backing_path is not None:
        backing = etree.SubElement(volume, "backingStore")
        etree.SubElement(backing, "path").text = spec.backing_path
        etree.SubElement(backing, "format", type=spec.backing_format)
    return volume


def build_volume_xml(spec):
    """build_volume_element serialised; what virStorageVolCreateXML takes."""
    return to_string(build_volume_element(spec))


def parse_volume_xml(xml_string):
    """Read name, path, format, capacity and backing path from a volume's XML."""
    volume = parse_xml(xml_string, "volume XML")
    if volume.tag != "volume":
        raise PermanentError("volume XML has root <%s>, expected <volume>" % (volume.tag,))
    name = child_text(volume, "name")
    if name is None:
        raise PermanentError("volume XML has no <name>")
    capacity = volume.find("capacity")
    disk_format = volume.find("target/format")
    return VolumeInfo(
        name=name,
        path=child_text(volume, "target/path"),
        disk_format=None if disk_format is None else disk_format.get("type"),
        capacity_bytes=None if capacity is None else scaled_bytes(capacity, "volume %r <capacity>" % (name,)),
        backing_path=child_text(volume, "backingStore/path"),
    )
