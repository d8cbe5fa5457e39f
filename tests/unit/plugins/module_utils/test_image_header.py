# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The image header reader against headers qemu-img makes, headers built by hand, and raw heads."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import struct
import subprocess

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.header import (
    EXTENSION_DATA_FILE,
    INCOMPATIBLE_DATA_FILE,
    MAX_HEADER_BYTES,
    QCOW2_MAGIC,
    ImageHeader,
    NeedMoreBytes,
    parse_image_header,
)

GIB = 1024 ** 3
EXTENSION_BACKING_FORMAT = 0xE2792ACA
URL = "http://mirror.example/debian.qcow2"


def qcow2_header(virtual_size, version=3, backing_file=None, data_file=None, external_data=None, cluster_bits=16,
                 extensions=(), header_length=None):
    """A qcow2 header laid out as qemu-img writes one: the fixed fields, the extensions, the end
    extension, then the backing file name. ``external_data`` defaults to whether a data file is named."""
    header_length = header_length or (104 if version == 3 else 72)
    extensions = list(extensions)
    if data_file is not None:
        extensions.append((EXTENSION_DATA_FILE, data_file.encode()))
    area = b"".join(struct.pack(">II", kind, len(data)) + data + b"\0" * (-len(data) % 8) for kind, data in extensions)
    area += b"\0" * 8  # the end extension
    backing = b"" if backing_file is None else backing_file.encode()
    backing_offset = 0 if backing_file is None else header_length + len(area)
    fixed = struct.pack(">4sIQIIQ", QCOW2_MAGIC, version, backing_offset, len(backing), cluster_bits, virtual_size)
    fixed += b"\0" * (72 - len(fixed))  # encryption, L1, refcount and snapshot tables: not read
    if version == 3:
        external = data_file is not None if external_data is None else external_data
        fixed += struct.pack(">QQQII", INCOMPATIBLE_DATA_FILE if external else 0, 0, 0, 4, header_length)
        fixed += b"\0" * (header_length - len(fixed))
    return fixed + area + backing


def qemu_img(tmp_path, name, *options, size="2G"):
    """An image made by qemu-img create, and what qemu-img info reads in it."""
    path = tmp_path / name
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2"] + list(options) + [str(path)] + ([size] if size else []),
                   check=True)
    info = json.loads(subprocess.run(["qemu-img", "info", "-U", "--output=json", str(path)], check=True,
                                     capture_output=True, text=True).stdout)
    return path.read_bytes(), info


def read_as_a_stream(data):
    """Feed the parser exactly what it asks for each time: (answer, bytes it needed)."""
    have = 0
    while True:
        answer = parse_image_header(data[:have], len(data), URL)
        if not isinstance(answer, NeedMoreBytes):
            return answer, have
        assert answer.have == have and answer.needed > have and answer.missing == answer.needed - have
        have = answer.needed


# --- against qemu-img ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, options, size", [
    ("v3.qcow2", [], "2G"),
    ("v2.qcow2", ["-o", "compat=0.10"], "2G"),
    ("backing.qcow2", ["-b", "/etc/hostname", "-F", "raw"], None),
    ("backing-v2.qcow2", ["-b", "/etc/hostname", "-F", "raw", "-o", "compat=0.10"], None),
    ("backing-sized.qcow2", ["-b", "/etc/hostname", "-F", "raw"], "3G"),
    ("clusters-2m.qcow2", ["-o", "cluster_size=2M"], "1G"),
    ("clusters-512.qcow2", ["-o", "cluster_size=512"], "1G"),
    ("data-file.qcow2", ["-o", "data_file={tmp}/data.raw"], "1G"),
])
def test_qemu_img_images_read_as_qemu_img_reads_them(tmp_path, name, options, size):
    options = [option.format(tmp=tmp_path) for option in options]
    data, info = qemu_img(tmp_path, name, *options, size=size)
    header, needed = read_as_a_stream(data)
    data_file = info["format-specific"]["data"].get("data-file")
    assert header == ImageHeader(format="qcow2", virtual_size=info["virtual-size"],
                                 backing_file=info.get("backing-filename"), data_file=data_file,
                                 external_data=data_file is not None)
    assert header.self_contained is (info.get("backing-filename") is None and data_file is None)
    # The header, its extensions and the backing file name are in the first few hundred bytes.
    assert needed <= 1024
    assert parse_image_header(data[:MAX_HEADER_BYTES], len(data), URL) == header


def test_a_hand_built_header_reads_like_the_one_qemu_img_makes(tmp_path):
    data, info = qemu_img(tmp_path, "evil.qcow2", "-b", "/etc/hostname", "-F", "raw", size=None)
    by_hand = qcow2_header(info["virtual-size"], backing_file="/etc/hostname",
                           extensions=[(EXTENSION_BACKING_FORMAT, b"raw")])
    assert parse_image_header(by_hand, len(by_hand), URL) == parse_image_header(data, len(data), URL)
    assert parse_image_header(by_hand, len(by_hand)).backing_file == "/etc/hostname"


# --- what the header says ------------------------------------------------------------------------------


def test_a_self_contained_header():
    header = parse_image_header(qcow2_header(2 * GIB) + b"payload")
    assert header == ImageHeader(format="qcow2", virtual_size=2 * GIB)
    assert header.self_contained and header.external_files() == []


def test_backing_and_data_files_are_named_in_words():
    header = parse_image_header(qcow2_header(GIB, backing_file="/etc/shadow", data_file="/dev/sda"))
    assert (header.backing_file, header.data_file, header.external_data) == ("/etc/shadow", "/dev/sda", True)
    assert header.external_files() == ["the backing file '/etc/shadow'", "the external data file '/dev/sda'"]
    assert not header.self_contained


def test_the_data_file_feature_bit_alone_is_not_self_contained():
    header = parse_image_header(qcow2_header(GIB, external_data=True))
    assert (header.data_file, header.external_data, header.self_contained) == (None, True, False)
    assert header.external_files() == ["an external data file (qcow2 feature bit 2) without naming it"]


def test_a_data_file_extension_without_the_feature_bit_is_not_self_contained():
    header = parse_image_header(qcow2_header(GIB, data_file="/srv/data.raw", external_data=False))
    assert (header.data_file, header.external_data, header.self_contained) == ("/srv/data.raw", False, False)


def test_the_data_file_is_found_after_other_extensions():
    extensions = [(EXTENSION_BACKING_FORMAT, b"qcow2"), (0x12345678, b"x" * 13)]
    header = parse_image_header(qcow2_header(GIB, data_file="/srv/data.raw", extensions=extensions))
    assert header.data_file == "/srv/data.raw"


def test_a_v3_header_longer_than_104_bytes_has_its_extensions_after_it():
    header = parse_image_header(qcow2_header(GIB, data_file="/srv/d", header_length=112))
    assert header.data_file == "/srv/d"


def test_undecodable_names_still_show():
    header = parse_image_header(qcow2_header(GIB, backing_file="/tmp/x").replace(b"/tmp/x", b"/tmp/\xff"))
    assert header.backing_file == "/tmp/\\xff"


@pytest.mark.parametrize("head, length, expected", [
    (b"\0" * 512, 4096, ImageHeader(format="raw", virtual_size=4096)),
    (b"\xeb\x63\x90", 3, ImageHeader(format="raw", virtual_size=3)),
    (b"QFI", 3, ImageHeader(format="raw", virtual_size=3)),
    (b"QFI\xfa" + b"\0" * 100, None, ImageHeader(format="raw", virtual_size=None)),
])
def test_raw_heads_have_no_header_and_their_length_is_their_size(head, length, expected):
    assert parse_image_header(head, length) == expected


@pytest.mark.parametrize("head, needed", [
    (b"", 4),
    (b"QF", 4),
    (QCOW2_MAGIC, 72),
    (qcow2_header(GIB)[:100], 104),
    (qcow2_header(GIB)[:104], 112),
    (qcow2_header(GIB, backing_file="/etc/hostname")[:-1], 112 + len("/etc/hostname")),
    (qcow2_header(GIB, data_file="/x")[:110], 112),
    (qcow2_header(GIB, data_file="/x")[:112], 114),
])
def test_a_short_head_says_how_many_bytes_it_needs(head, needed):
    answer = parse_image_header(head)
    assert answer == NeedMoreBytes(needed=needed, have=len(head))
    assert answer.missing == needed - len(head)


def _patched(header, offset, fmt, value):
    patched = bytearray(header)
    struct.pack_into(fmt, patched, offset, value)
    return bytes(patched)


@pytest.mark.parametrize("head, length, message", [
    (_patched(qcow2_header(GIB), 4, ">I", 4), None, "version 4; QEMU reads versions 2 and 3"),
    (_patched(qcow2_header(GIB), 4, ">I", 1), None, "version 1"),
    (qcow2_header(GIB, cluster_bits=8), None, "cluster_bits 8 is outside 9-21"),
    (qcow2_header(GIB, cluster_bits=22), None, "cluster_bits 22 is outside 9-21"),
    (_patched(qcow2_header(GIB), 100, ">I", 96), None, "header_length 96 is outside 104-65536"),
    (_patched(qcow2_header(GIB, cluster_bits=9), 100, ">I", 1024), None, "header_length 1024 is outside 104-512"),
    (_patched(qcow2_header(GIB), 8, ">Q", 65537), None, "backing_file_offset 65537 is beyond the first cluster"),
    (qcow2_header(GIB, backing_file="/" + "a" * 1023), None, "backing file name of 1024 bytes is too long"),
    (qcow2_header(GIB, extensions=[(0x12345678, b"x" * 65536)]), None, "header extension 0x12345678 of 65536 bytes"),
    (_patched(qcow2_header(GIB, backing_file="/b"), 8, ">Q", 108), None, "header extension at byte 104 crosses byte 108"),
    (qcow2_header(GIB)[:80], 80, "the image ends at byte 80, inside its header, which needs 104 bytes"),
    (QCOW2_MAGIC, 4, "the image ends at byte 4"),
])
def test_headers_qemu_would_not_open_are_refused(head, length, message):
    with pytest.raises(PermanentError) as raised:
        parse_image_header(head, length, URL)
    assert raised.value.message.startswith("%s has an invalid qcow2 header (" % URL)
    assert message in raised.value.message
    assert raised.value.message.endswith("QEMU would not open it")
