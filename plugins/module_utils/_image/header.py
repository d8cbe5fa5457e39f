# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the first bytes of a disk image say: its format, virtual size and the other files it needs.

A qcow2 image can make whoever opens it read other files: a backing file
(read wherever the image has no data of its own) and an external data file
(incompatible feature bit 2, named by header extension 0x44415441). Both
are named in the header, which QEMU requires to lie in the image's first
cluster (at most 2 MiB), so they can be checked on the first bytes of a
download before anything is stored. Raw images have no header: their
virtual size is their length.

The reading follows QEMU's qcow2_do_open and qcow2_read_extensions (the
layout is QEMU's docs/interop/qcow2.txt), and refuses every header QEMU
would refuse, so nothing QEMU reads goes unseen here::

    answer = parse_image_header(head, length=None, what="image")
    # NeedMoreBytes(needed, have): feed the first ``needed`` bytes and ask again
    # ImageHeader(format, virtual_size, backing_file, data_file, external_data)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import struct
from dataclasses import dataclass
from typing import Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError

QCOW2_MAGIC = b"QFI\xfb"
# QEMU opens clusters of 512 B to 2 MiB; the header, its extensions and the
# backing file name all lie in the first cluster.
MIN_CLUSTER_BITS = 9
MAX_CLUSTER_BITS = 21
MAX_HEADER_BYTES = 1 << MAX_CLUSTER_BITS
V2_HEADER_LENGTH = 72
V3_MIN_HEADER_LENGTH = 104
MAX_BACKING_FILE_NAME = 1023
INCOMPATIBLE_DATA_FILE = 1 << 2
EXTENSION_END = 0x00000000
EXTENSION_DATA_FILE = 0x44415441

# magic, version, backing_file_offset, backing_file_size, cluster_bits, size
_FIXED = struct.Struct(">4sIQIIQ")


@dataclass(frozen=True)
class ImageHeader:
    """A parsed image head. ``virtual_size`` of a raw image is its length (None when unknown).

    ``backing_file`` and ``data_file`` are the names the header gives (None
    when it gives none); ``external_data`` is qcow2's feature bit saying the
    guest's data lives in another file, named or not.
    """

    format: str
    virtual_size: Optional[int]
    backing_file: Optional[str] = None
    data_file: Optional[str] = None
    external_data: bool = False

    @property
    def self_contained(self):
        """Whether opening the image reads nothing but the image itself."""
        return self.backing_file is None and self.data_file is None and not self.external_data

    def external_files(self):
        """The other files the image needs, in words, for messages."""
        files = []
        if self.backing_file is not None:
            files.append("the backing file %r" % (self.backing_file,))
        if self.data_file is not None:
            files.append("the external data file %r" % (self.data_file,))
        elif self.external_data:
            files.append("an external data file (qcow2 feature bit 2) without naming it")
        return files


@dataclass(frozen=True)
class NeedMoreBytes:
    """The head is too short to answer: the first ``needed`` bytes of the image are (``have`` were given)."""

    needed: int
    have: int

    @property
    def missing(self):
        return self.needed - self.have


def parse_image_header(head, length=None, what="image"):
    """Read the head of an image: an ImageHeader, or NeedMoreBytes when ``head`` is too short.

    ``length`` is the whole image's length when known; a qcow2 header that
    would need more bytes than that is refused. ``what`` names the image in
    messages. Raises PermanentError for a qcow2 header QEMU would not open.
    """
    if len(head) < len(QCOW2_MAGIC):
        if length is not None and length <= len(head):
            return ImageHeader(format="raw", virtual_size=length)
        return NeedMoreBytes(len(QCOW2_MAGIC), len(head))
    if bytes(head[:len(QCOW2_MAGIC)]) != QCOW2_MAGIC:
        return ImageHeader(format="raw", virtual_size=length)
    try:
        return _Qcow2Reader(head, length, what).read()
    except _Short as short:
        return NeedMoreBytes(short.needed, len(head))


class _Short(Exception):
    """The head ends before byte ``needed``."""

    def __init__(self, needed):
        super().__init__(needed)
        self.needed = needed


class _Qcow2Reader:
    def __init__(self, head, length, what):
        self.head = head
        self.length = length
        self.what = what

    def _invalid(self, reason):
        return PermanentError("%s has an invalid qcow2 header (%s); QEMU would not open it" % (self.what, reason))

    def _require(self, end):
        """Go on only when the head holds its first ``end`` bytes."""
        if len(self.head) >= end:
            return
        if self.length is not None and end > self.length:
            raise self._invalid("the image ends at byte %d, inside its header, which needs %d bytes" % (self.length, end))
        raise _Short(end)

    def read(self):
        self._require(V2_HEADER_LENGTH)
        _magic, version, backing_offset, backing_size, cluster_bits, size = _FIXED.unpack_from(self.head, 0)
        if version not in (2, 3):
            raise self._invalid("version %d; QEMU reads versions 2 and 3" % version)
        if not MIN_CLUSTER_BITS <= cluster_bits <= MAX_CLUSTER_BITS:
            raise self._invalid("cluster_bits %d is outside %d-%d" % (cluster_bits, MIN_CLUSTER_BITS, MAX_CLUSTER_BITS))
        cluster_size = 1 << cluster_bits
        incompatible, header_length = 0, V2_HEADER_LENGTH
        if version == 3:
            self._require(V3_MIN_HEADER_LENGTH)
            (incompatible,) = struct.unpack_from(">Q", self.head, 72)
            (header_length,) = struct.unpack_from(">I", self.head, 100)
            if not V3_MIN_HEADER_LENGTH <= header_length <= cluster_size:
                raise self._invalid("header_length %d is outside %d-%d" % (header_length, V3_MIN_HEADER_LENGTH, cluster_size))
        if backing_offset > cluster_size:
            raise self._invalid("backing_file_offset %d is beyond the first cluster" % backing_offset)

        # Extensions run from the end of the header to the backing file name
        # (or the end of the first cluster).
        extensions_end = backing_offset or cluster_size
        data_file = None
        offset = header_length
        while offset < extensions_end:
            if offset + 8 > extensions_end:
                raise self._invalid("a header extension at byte %d crosses byte %d" % (offset, extensions_end))
            self._require(offset + 8)
            kind, size_of_data = struct.unpack_from(">II", self.head, offset)
            offset += 8
            if size_of_data > extensions_end - offset:
                raise self._invalid("header extension 0x%08x of %d bytes crosses byte %d"
                                    % (kind, size_of_data, extensions_end))
            if kind == EXTENSION_END:
                break
            if kind == EXTENSION_DATA_FILE:
                self._require(offset + size_of_data)
                data_file = _name(self.head[offset:offset + size_of_data])
            offset += (size_of_data + 7) & ~7

        backing_file = None
        if backing_offset:
            if backing_size > min(MAX_BACKING_FILE_NAME, cluster_size - backing_offset):
                raise self._invalid("backing file name of %d bytes is too long" % backing_size)
            self._require(backing_offset + backing_size)
            backing_file = _name(self.head[backing_offset:backing_offset + backing_size])
        return ImageHeader(format="qcow2", virtual_size=size, backing_file=backing_file, data_file=data_file,
                           external_data=bool(incompatible & INCOMPATIBLE_DATA_FILE))


def _name(raw):
    # File names are bytes to QEMU; undecodable ones still show in messages.
    return bytes(raw).decode("utf-8", "backslashreplace")
