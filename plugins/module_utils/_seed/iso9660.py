# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The seed's ISO 9660 image: built in memory with pycdlib, read back by a bounded reader of its own.

``build_iso(files)`` -> bytes
    The image holding ``{file name: bytes}``: label ``cidata``, Rock Ridge and
    Joliet names equal to the file names (what Linux isofs, and so
    cloud-init, shows).
``read_iso(data)`` -> ``{file name: bytes}``
    The files of a seed image; raises UnreadableSeedError (a PermanentError)
    when the bytes are not a complete ``cidata`` image.

Two builds of the same files differ in a few bytes: pycdlib stamps the
current time into the volume descriptor and every directory record and
offers no way to fix it. So images are never compared by their bytes, only
by the files read back from them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import re
import struct

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.imports import lazy_import

pycdlib, PYCDLIB_REQUIREMENT = lazy_import("pycdlib", "pycdlib", "python3-pycdlib on Debian/Ubuntu, pycdlib from PyPI")

# The volume label cloud-init's NoCloud datasource looks for.
SEED_LABEL = "cidata"

_SECTOR = 2048

# Seed file names: what NoCloud reads, and anything alike. They must map to
# distinct ISO 9660 names ('-' becomes '_'), hence no '_' of their own, and
# fit the 30 characters ISO 9660 allows a file identifier.
_FILE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,28}")


class UnreadableSeedError(PermanentError):
    """Bytes that are not a complete NoCloud seed image (truncated, corrupt, or something else)."""

    kind = "unreadable_seed"


def _iso9660_name(name):
    # ISO 9660 proper only knows A-Z, 0-9 and '_'; the exact names live in
    # the Rock Ridge and Joliet records, which every reader that matters uses.
    return "/%s.;1" % name.upper().replace("-", "_")


def _check_files(files):
    for name, content in files.items():
        if not isinstance(name, str) or not _FILE_NAME.fullmatch(name):
            raise ValidationError(
                "seed file name %r is not valid: use 1-29 lowercase letters, digits and '-', "
                "starting with a letter or digit" % (name,))
        if not isinstance(content, bytes):
            raise ValidationError("seed file %r must be bytes, got %s" % (name, type(content).__name__))


def build_iso(files):
    """The NoCloud seed image holding ``files`` (``{file name: bytes}``), built in memory."""
    if pycdlib is None:
        raise PermanentError("building a seed image needs the Python library pycdlib: %s" % PYCDLIB_REQUIREMENT[1])
    _check_files(files)
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, vol_ident=SEED_LABEL, joliet=3, rock_ridge="1.09")
    for name, content in files.items():
        iso.add_fp(io.BytesIO(content), len(content), _iso9660_name(name), rr_name=name, joliet_path="/" + name)
    out = io.BytesIO()
    iso.write_fp(out)
    iso.close()
    return out.getvalue()


# --- reading a seed back --------------------------------------------------------
#
# A small ISO 9660 reader of its own instead of pycdlib's: the bytes come from
# a volume anyone may have written, and pycdlib 1.12 (Debian 12) answers some
# corrupt directory records by allocating without bound (measured here: a
# fuzzed seed made it exhaust memory). This one reads only what a seed has,
# one root directory of plain files, checks every offset against the image
# and follows Linux isofs in which names it shows: Rock Ridge when the image
# has it, else Joliet, else the ISO 9660 names lowercased.

_VD_PRIMARY = 1
_VD_SUPPLEMENTARY = 2
_VD_TERMINATOR = 255
_JOLIET_ESCAPES = (b"%/@", b"%/C", b"%/E")
_MAX_VOLUME_DESCRIPTORS = 64
_MAX_CONTINUATIONS = 16
_FLAG_DIRECTORY = 0x02
_FLAG_ASSOCIATED = 0x04
_FLAG_MULTI_EXTENT = 0x80


def _u32(data, offset):
    return struct.unpack_from("<I", data, offset)[0]


def _sector(data, index, what):
    start = index * _SECTOR
    if start + _SECTOR > len(data):
        raise UnreadableSeedError("the image ends before its %s (sector %d)" % (what, index))
    return data[start:start + _SECTOR]


def _volume_descriptors(data):
    """The primary and, when present, the Joliet volume descriptor."""
    primary = joliet = None
    for index in range(16, 16 + _MAX_VOLUME_DESCRIPTORS):
        descriptor = _sector(data, index, "volume descriptors")
        if descriptor[1:6] != b"CD001":
            raise UnreadableSeedError("no ISO 9660 volume descriptor at sector %d" % index)
        kind = descriptor[0]
        if kind == _VD_TERMINATOR:
            break
        if kind == _VD_PRIMARY and primary is None:
            primary = descriptor
        elif kind == _VD_SUPPLEMENTARY and joliet is None and descriptor[88:91] in _JOLIET_ESCAPES:
            joliet = descriptor
    else:
        raise UnreadableSeedError("no volume descriptor set terminator in the first %d descriptors" % _MAX_VOLUME_DESCRIPTORS)
    if primary is None:
        raise UnreadableSeedError("no ISO 9660 primary volume descriptor")
    return primary, joliet


def _records(data, root_record):
    """Yield the directory records of the directory ``root_record`` (a descriptor's root entry) describes."""
    extent, length = _u32(root_record, 2), _u32(root_record, 10)
    start = extent * _SECTOR
    if start + length > len(data):
        raise UnreadableSeedError("the root directory ends past the end of the image")
    offset, end = start, start + length
    while offset < end:
        record_length = data[offset]
        if record_length == 0:
            # Records never cross a sector boundary; the rest of this sector is padding.
            offset = (offset // _SECTOR + 1) * _SECTOR
            continue
        if record_length < 34 or offset + record_length > end or 33 + data[offset + 32] > record_length:
            raise UnreadableSeedError("malformed directory record at byte %d" % offset)
        yield data[offset:offset + record_length]
        offset += record_length


def _system_use(record, skip):
    name_length = record[32]
    return record[33 + name_length + (1 - name_length % 2) + skip:]


def _susp_entries(data, area):
    """Yield (signature, entry) of the SUSP entries in a system use area, following continuation areas."""
    for _area in range(_MAX_CONTINUATIONS):
        continuation = None
        offset = 0
        while offset + 4 <= len(area):
            signature, length = area[offset:offset + 2], area[offset + 2]
            if signature == b"ST":
                break
            if length < 4 or offset + length > len(area):
                raise UnreadableSeedError("malformed Rock Ridge entry %r" % (signature,))
            entry = area[offset:offset + length]
            if signature == b"CE" and length >= 28:
                continuation = (_u32(entry, 4) * _SECTOR + _u32(entry, 12), _u32(entry, 20))
            else:
                yield signature, entry
            offset += length
        if continuation is None:
            return
        start, length = continuation
        if start + length > len(data):
            raise UnreadableSeedError("a Rock Ridge continuation area lies past the end of the image")
        area = data[start:start + length]
    raise UnreadableSeedError("more than %d chained Rock Ridge continuation areas" % _MAX_CONTINUATIONS)


def _rock_ridge_skip(data, root_record):
    """SUSP's LEN_SKP when the image has Rock Ridge (an SP entry on the root's '.' record), else None."""
    for record in _records(data, root_record):
        area = _system_use(record, 0)
        if area[0:2] == b"SP" and len(area) >= 7 and area[4:6] == b"\xbe\xef":
            return area[6]
        return None
    return None


def _dot_entry(record):
    return record[32] == 1 and record[33] in (0, 1)


def _iso9660_entry_name(identifier, encoding):
    name = identifier.decode(encoding, "replace")
    if ";" in name:
        name = name[:name.index(";")]
    return name.rstrip(".")


def _read_files(data, root_record, naming, skip=0):
    files = {}
    for record in _records(data, root_record):
        if _dot_entry(record):
            continue
        identifier = record[33:33 + record[32]]
        name = _iso9660_entry_name(identifier, "utf-16-be" if naming == "joliet" else "ascii")
        if naming != "joliet":
            # Linux isofs (map=normal) shows ISO 9660 names in lowercase, as
            # it does for Rock Ridge entries without an NM name.
            name = name.lower()
        is_symlink = False
        if naming == "rock_ridge":
            parts = []
            for signature, entry in _susp_entries(data, _system_use(record, skip)):
                if signature == b"NM" and len(entry) >= 5:
                    parts.append(entry[5:])
                is_symlink = is_symlink or signature == b"SL"
            if parts:
                name = b"".join(parts).decode("utf-8", "replace")
        flags = record[25]
        if is_symlink or flags & (_FLAG_DIRECTORY | _FLAG_ASSOCIATED):
            raise UnreadableSeedError("the image holds %r, which is not a plain file" % (name,))
        if flags & _FLAG_MULTI_EXTENT or record[26] or record[27]:
            raise UnreadableSeedError("file %r is stored in several extents or interleaved, which seeds never are" % (name,))
        if name in files:
            raise UnreadableSeedError("the image holds %r twice" % (name,))
        start, length = _u32(record, 2) * _SECTOR, _u32(record, 10)
        if start + length > len(data):
            raise UnreadableSeedError("file %r ends at byte %d, past the end of the image (%d bytes)"
                                      % (name, start + length, len(data)))
        files[name] = bytes(data[start:start + length])
    return files


def read_iso(data):
    """The files of the seed image ``data`` as ``{file name: bytes}``.

    Raises UnreadableSeedError when the image is shorter than its own
    volume descriptor declares (an upload that was cut off), malformed,
    not labelled ``cidata``, or holds anything but plain files at its root.
    """
    data = bytes(data)
    primary, joliet = _volume_descriptors(data)
    declared_size = _u32(primary, 80) * struct.unpack_from("<H", primary, 128)[0]
    if len(data) < declared_size:
        raise UnreadableSeedError("the image is truncated: %d of the %d bytes its volume descriptor declares"
                                  % (len(data), declared_size))
    label = primary[40:72].decode("ascii", "replace").rstrip(" \x00")
    if label.lower() != SEED_LABEL:
        raise UnreadableSeedError("the image is labelled %r, not %r" % (label, SEED_LABEL))
    root = primary[156:190]
    skip = _rock_ridge_skip(data, root)
    if skip is not None:
        return _read_files(data, root, "rock_ridge", skip)
    if joliet is not None:
        return _read_files(data, joliet[156:190], "joliet")
    return _read_files(data, root, "iso9660")
