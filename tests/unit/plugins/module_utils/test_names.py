# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import (
    BaseVolumeName,
    base_volume_name,
    format_domain_id,
    marker_volume_name,
    overlay_volume_name,
    parse_base_volume_name,
    seed_volume_name,
    validate_bridge_name,
    validate_disk_format,
    validate_host_name,
    validate_image_name,
    validate_network_name,
    validate_pool_name,
    validate_sha256,
    validate_vm_name,
    validate_volume_name,
)

SHA = "0123456789ABCDEF" + "a" * 48

# Everything that could leave a pool directory, break XML or the hostname.
HOSTILE = [
    "", "..", ".", "../x", "a/b", "/etc/passwd", "a\x00b", "a b", " a", "a\n", "a\t",
    "<a>", "a&b", 'a"b', "a'b", "a]]>b", "a;b", "a$b", "\u00e9t\u00e9",
]


@pytest.mark.parametrize("name", ["a", "0", "proxy-1", "p" * 63, "a1-b2-c3", "9lives"])
def test_vm_name_accepts_dns_labels(name):
    assert validate_vm_name(name) == name


@pytest.mark.parametrize("name", HOSTILE + ["Proxy", "-a", "a-", "a_b", "a.b", "p" * 64, None, 7])
def test_vm_name_rejects(name):
    with pytest.raises(ValidationError, match="is not a valid VM name: use 1-63 lowercase letters"):
        validate_vm_name(name)


def test_vm_name_message_names_the_input():
    with pytest.raises(ValidationError) as info:
        validate_vm_name("Foo/../x")
    assert "'Foo/../x'" in info.value.message


@given(st.text(max_size=70))
def test_vm_name_accepted_only_as_dns_label(text):
    label = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
    try:
        validate_vm_name(text)
    except ValidationError:
        assert not label.fullmatch(text)
    else:
        assert label.fullmatch(text)
        assert "/" not in overlay_volume_name(text) and "/" not in seed_volume_name(text)


@pytest.mark.parametrize("validate", [validate_pool_name, validate_network_name, validate_volume_name])
@pytest.mark.parametrize("name", ["default", "egress-lab", "My_Pool.2", "a+b", "x" * 255])
def test_libvirt_object_names_accepted(validate, name):
    assert validate(name) == name


@pytest.mark.parametrize("validate", [validate_pool_name, validate_network_name, validate_volume_name])
@pytest.mark.parametrize("name", HOSTILE + [".hidden", "-x", "+x", "x" * 256])
def test_libvirt_object_names_rejected(validate, name):
    with pytest.raises(ValidationError, match="is not a valid"):
        validate(name)


@pytest.mark.parametrize("name", ["br0", "eplab0", "virbr0", "br_lan.10", "x" * 15])
def test_bridge_name_accepted(name):
    assert validate_bridge_name(name) == name


@pytest.mark.parametrize("name", HOSTILE + ["x" * 16, "br:0", 'br0" onload="x'])
def test_bridge_name_rejected(name):
    with pytest.raises(ValidationError, match="is not a valid Linux interface name"):
        validate_bridge_name(name)


@pytest.mark.parametrize("host", ["nas1", "nas1.example.com", "hv_01", "192.0.2.1", "::1", "fe80::1", "localhost"])
def test_host_name_accepted(host):
    assert validate_host_name(host) == host


@pytest.mark.parametrize("host", ["", "a/b", "a b", "-x", ".x", "a<b", "h" * 254])
def test_host_name_rejected(host):
    with pytest.raises(ValidationError, match="is not a valid host name"):
        validate_host_name(host)


@pytest.mark.parametrize("image", ["debian-12", "debian-12-egress", "tiny", "ubuntu_24.04", "a"])
def test_image_name_accepted(image):
    assert validate_image_name(image) == image


@pytest.mark.parametrize("image", HOSTILE + [".debian", "-x", "Debian", "x" * 129])
def test_image_name_rejected(image):
    with pytest.raises(ValidationError, match="image name .* is not valid"):
        validate_image_name(image)


def test_image_name_rejects_digest_lookalike_suffix():
    with pytest.raises(ValidationError, match="16 hex digits"):
        validate_image_name("debian-0123456789abcdef")


def test_disk_format_and_sha256():
    assert validate_disk_format("qcow2") == "qcow2"
    assert validate_disk_format("raw") == "raw"
    for bad in ("vmdk", "QCOW2", "", None):
        with pytest.raises(ValidationError, match="disk format"):
            validate_disk_format(bad)
    assert validate_sha256(SHA) == SHA.lower()
    for bad in ("abc", SHA + "0", "g" * 64, None):
        with pytest.raises(ValidationError, match="not a sha256 digest"):
            validate_sha256(bad)


def test_per_vm_volume_names():
    assert overlay_volume_name("proxy-x") == "proxy-x.qcow2"
    assert seed_volume_name("proxy-x") == "proxy-x-seed.iso"
    for derive in (overlay_volume_name, seed_volume_name):
        with pytest.raises(ValidationError):
            derive("../etc")


def test_base_volume_names():
    assert base_volume_name("debian-12", "qcow2") == "base-debian-12.qcow2"
    assert base_volume_name("tiny", "raw", SHA) == "base-tiny-0123456789abcdef.raw"
    assert marker_volume_name("base-debian-12.qcow2") == "base-debian-12.qcow2.sha256"
    with pytest.raises(ValidationError):
        base_volume_name("debian", "vmdk")
    with pytest.raises(ValidationError):
        base_volume_name("debian", "qcow2", "not-a-digest")
    with pytest.raises(ValidationError):
        marker_volume_name("../x")


def test_parse_base_volume_name_recognises_the_image_family():
    plain = base_volume_name("debian", "qcow2")
    addressed = base_volume_name("debian", "raw", SHA)
    assert parse_base_volume_name("debian", plain) == BaseVolumeName(plain, "debian", "qcow2", None, False)
    assert parse_base_volume_name("debian", addressed) == BaseVolumeName(addressed, "debian", "raw", "0123456789abcdef", False)
    marker = parse_base_volume_name("debian", marker_volume_name(addressed))
    assert marker.is_marker and marker.digest_prefix == "0123456789abcdef" and marker.disk_format == "raw"


@pytest.mark.parametrize("volume", [
    "base-debian-12.qcow2",            # another image whose name extends this one
    "base-debian-12-0123456789abcdef.qcow2",
    "base-debian.qcow2.qcow2",         # image "debian.qcow2"
    "base-debian.vmdk",
    "base-debian-0123456789ABCDEF.qcow2",
    "base-debian-0123.qcow2",
    "debian.qcow2",
    "base-debian.qcow2.sha256.sha256",
    "proxy-1.qcow2",
])
def test_parse_base_volume_name_ignores_other_volumes(volume):
    assert parse_base_volume_name("debian", volume) is None


@given(
    image=st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True),
    other=st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True),
    disk_format=st.sampled_from(["qcow2", "raw"]),
    digest=st.one_of(st.none(), st.from_regex(r"[0-9a-f]{64}", fullmatch=True)),
)
def test_base_volumes_belong_to_exactly_one_image(image, other, disk_format, digest):
    valid = []
    for candidate in (image, other):
        try:
            valid.append(validate_image_name(candidate))
        except ValidationError:
            return
    base = base_volume_name(image, disk_format, digest)
    parsed = parse_base_volume_name(image, base)
    assert parsed == BaseVolumeName(base, image, disk_format, digest[:16] if digest else None, False)
    assert parse_base_volume_name(image, marker_volume_name(base)).is_marker
    if other != image:
        assert parse_base_volume_name(other, base) is None
        assert parse_base_volume_name(other, marker_volume_name(base)) is None


def test_domain_id():
    assert format_domain_id("nas1", "proxy-abc123") == "hosts/nas1/domains/proxy-abc123"


@given(
    host=st.from_regex(r"[A-Za-z0-9_:][A-Za-z0-9_.:-]{0,40}", fullmatch=True),
    name=st.from_regex(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", fullmatch=True),
)
def test_domain_id_splits_back_into_host_and_name(host, name):
    assert format_domain_id(host, name).split("/") == ["hosts", host, "domains", name]


def test_format_domain_id_validates_both_parts():
    with pytest.raises(ValidationError, match="host"):
        format_domain_id("a/b", "proxy")
    with pytest.raises(ValidationError, match="VM name"):
        format_domain_id("nas1", "a/b")
