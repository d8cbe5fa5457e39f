# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The cloud-init NoCloud seed: render its files, build the ISO, read it back, keep a pool volume equal to it.

Public API (kvm_seed and kvm_proxy call it):

``DEFAULT_VENDOR_DATA``
    cloud-config that installs and starts qemu-guest-agent, placed as
    vendor-data unless the caller gives its own.
``seed_files(name, user_data="", meta_data=None, vendor_data=None, network_config=None)``
    The files of the seed as an ordered ``{file name: bytes}``: ``user-data``
    (a string verbatim, a dictionary as a ``#cloud-config`` document),
    ``meta-data`` (``meta_data`` merged over instance-id = local-hostname =
    name), ``vendor-data`` (like user-data), and ``network-config`` when
    given. Raises ValidationError naming the option for a value it cannot write.
``build_iso(files)`` -> bytes
    The ISO image, built in memory: label ``cidata``, Rock Ridge and Joliet
    names equal to the file names (what Linux isofs, and so cloud-init, shows).
``read_iso(data)`` -> ``{file name: bytes}``
    The files of a seed image; raises UnreadableSeedError (a PermanentError)
    when the bytes are not a complete ``cidata`` image.
``ensure_seed(hypervisor, pool_name, name, files, check_mode=False)`` -> SeedResult
    Make volume ``<name>-seed.iso`` in the pool hold exactly ``files``.
``remove_seed(hypervisor, pool_name, name, check_mode=False)`` -> bool
    Delete the seed volume; False when the pool or the volume is missing.
``PYCDLIB_REQUIREMENT``
    The (library, install hint, import error) triple for KvmModule's
    ``requirements``, for every module that builds seeds.

Two builds of the same files differ in a few bytes: pycdlib stamps the
current time into the volume descriptor and every directory record and
offers no way to fix it. So nothing here compares images by their bytes;
an existing seed is read back, parsed, and compared file by file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import io
import json
import re
import struct
import traceback
from collections import OrderedDict

try:
    import pycdlib

    PYCDLIB_IMPORT_ERROR = None
except ImportError:
    pycdlib = None
    PYCDLIB_IMPORT_ERROR = traceback.format_exc()

from ansible_collections.egress_proxies.kvm.plugins.module_utils._errors import (
    KvmError,
    NotFoundError,
    PermanentError,
    ValidationError,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._names import (
    seed_volume_name,
    validate_pool_name,
    validate_vm_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._volume_xml import (
    VolumeSpec,
    build_volume_xml,
    parse_volume_xml,
)

PYCDLIB_REQUIREMENT = ("pycdlib", "python3-pycdlib on Debian/Ubuntu, pycdlib from PyPI", PYCDLIB_IMPORT_ERROR)

# The volume label cloud-init's NoCloud datasource looks for.
SEED_LABEL = "cidata"

USER_DATA = "user-data"
META_DATA = "meta-data"
VENDOR_DATA = "vendor-data"
NETWORK_CONFIG = "network-config"

# cloud-init merges vendor-data under the user's own user-data, so stock
# images grow a guest agent (through which the VM's address can be read
# before ARP has seen any traffic) without the user-data having to know.
DEFAULT_VENDOR_DATA = """#cloud-config
packages:
  - qemu-guest-agent
runcmd:
  - [systemctl, enable, --now, qemu-guest-agent]
"""

_SECTOR = 2048
UPLOAD_CHUNK = 256 * 1024

# Seed file names: what NoCloud reads, and anything alike. They must map to
# distinct ISO 9660 names ('-' becomes '_'), hence no '_' of their own, and
# fit the 30 characters ISO 9660 allows a file identifier.
_FILE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,28}")

# Characters JSON leaves raw but YAML 1.1 (which cloud-init reads meta-data
# and network-config with) treats as line breaks or refuses outright. They
# are written as \u escapes, which JSON and YAML read alike. Everything they
# could appear in is a string, so the escapes never land outside one.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")


class UnreadableSeedError(PermanentError):
    """Bytes that are not a complete NoCloud seed image (truncated, corrupt, or something else)."""

    kind = "unreadable_seed"


def _render_json(data):
    """Deterministic JSON (sorted keys) that YAML 1.1 loaders read back to the same data."""
    text = json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    return _YAML_UNSAFE.sub(lambda match: "\\u%04x" % ord(match.group()), text) + "\n"


def _to_bytes(value, what):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValidationError("%s cannot be written as UTF-8: %s" % (what, exc)) from exc
    raise ValidationError("%s must be a string, got %s" % (what, type(value).__name__))


def _render_dict(data, option):
    """The dictionary ``data`` of option ``option`` as deterministic JSON bytes, which cloud-init reads as YAML.

    JSON needs no YAML library where the module runs, and renders the same
    bytes whatever order the keys came in, so digests of it are stable.
    """
    for key in data:
        if not isinstance(key, str):
            raise ValidationError("%s keys must be strings, got %r" % (option, key))
    try:
        return _render_json(data).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ValidationError("%s cannot be written as YAML: %s" % (option, exc)) from exc


def render_meta_data(name, meta_data=None):
    """The meta-data file: ``meta_data`` merged over instance-id = local-hostname = ``name``.

    A fixed instance-id is what keeps cloud-init from taking a reboot for a
    new instance.
    """
    merged = {"instance-id": validate_vm_name(name), "local-hostname": name}
    if meta_data is not None:
        if not isinstance(meta_data, dict):
            raise ValidationError("meta_data must be a dictionary, got %s" % type(meta_data).__name__)
        merged.update(meta_data)
    return _render_dict(merged, "meta_data")


def render_network_config(network_config):
    """The network-config file: a string verbatim, a dictionary rendered like meta-data."""
    if isinstance(network_config, dict):
        return _render_dict(network_config, "network_config")
    return _to_bytes(network_config, "network_config")


def render_cloud_data(value, option):
    """A user-data or vendor-data file: a string verbatim, a dictionary as a cloud-config document.

    cloud-init acts on user-data only by its first line, so a dictionary
    needs the ``#cloud-config`` header; without it (as a Python repr of the
    dictionary once was) cloud-init ignores the file without a word.
    """
    if isinstance(value, dict):
        return b"#cloud-config\n" + _render_dict(value, option)
    if isinstance(value, (str, bytes)):
        return _to_bytes(value, option)
    raise ValidationError("%s must be a string or a dictionary (written as #cloud-config), got %s"
                          % (option, type(value).__name__))


def seed_files(name, user_data="", meta_data=None, vendor_data=None, network_config=None):
    """The seed's files, in the order they are written: ``{file name: bytes}``.

    ``user_data`` is a string written verbatim (cloud-config, a script, or
    empty: an empty file is still present, as NoCloud requires) or a
    dictionary written as cloud-config. ``vendor_data`` likewise; None means
    DEFAULT_VENDOR_DATA, an empty string an empty vendor-data.
    ``network_config`` None leaves the file out, so cloud-init keeps its
    default (DHCP on the first NIC).
    """
    files = OrderedDict()
    files[USER_DATA] = render_cloud_data(user_data if user_data is not None else "", "user_data")
    files[META_DATA] = render_meta_data(name, meta_data)
    files[VENDOR_DATA] = render_cloud_data(DEFAULT_VENDOR_DATA if vendor_data is None else vendor_data, "vendor_data")
    if network_config is not None:
        files[NETWORK_CONFIG] = render_network_config(network_config)
    return files


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


def file_summary(files):
    """``[{name, sha256, size}]`` for ``{file name: bytes}``, in the files' order."""
    return [{"name": name, "sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
            for name, content in files.items()]


def changed_file_names(current, desired):
    """Names of files added, removed or modified going from ``current`` to ``desired``; sorted."""
    return sorted(name for name in set(current) | set(desired) if current.get(name) != desired.get(name))


# What ensure_seed found where the seed volume should be.
PREVIOUS_ABSENT = "absent"
PREVIOUS_UNREADABLE = "unreadable"
PREVIOUS_PRESENT = "present"


class SeedResult:
    """What ensure_seed found and did (or, in check mode, would do).

    ``files`` summarises the desired files, ``previous`` the files found on
    the volume (None unless ``previous_state`` is PREVIOUS_PRESENT) and
    ``current_files`` their contents, for callers that show them on request.
    ``changed_files`` compares contents when the volume was read, and is
    every desired file when it was absent or unreadable (then nothing is
    known of what it held). ``reason`` says why the volume is (re)written
    (None when unchanged) and ``actions`` what was done, in order.
    """

    def __init__(self, volume, volume_path, size, changed, changed_files, files, previous_state, current_files, reason,
                 actions):
        self.volume = volume
        # Not "path" in results: Ansible adds a stat of the local file at any result's "path".
        self.volume_path = volume_path
        self.size = size
        self.changed = changed
        self.changed_files = changed_files
        self.files = files
        self.previous_state = previous_state
        self.current_files = current_files
        self.previous = None if current_files is None else file_summary(current_files)
        self.reason = reason
        self.actions = actions

    def as_dict(self):
        return {
            "changed": self.changed,
            "volume": self.volume,
            "volume_path": self.volume_path,
            "size": self.size,
            "previous_state": self.previous_state,
            "changed_files": list(self.changed_files),
            "files": [dict(entry) for entry in self.files],
            "reason": self.reason,
            "actions": list(self.actions),
        }

    def diff(self):
        """``{before, after}``: the volume's state and each file's sha256 and size, never a file's content."""
        before = {"volume": self.volume, "state": self.previous_state}
        if self.previous is not None:
            before["files"] = _by_name(self.previous)
        return {"before": before, "after": {"volume": self.volume, "state": PREVIOUS_PRESENT, "files": _by_name(self.files)}}


def _by_name(summary):
    return {entry["name"]: {"sha256": entry["sha256"], "size": entry["size"]} for entry in summary}


# NoCloud seeds hold a few small text files. A volume larger than this is
# not read into memory at all: it is reported unreadable and replaced.
MAX_SEED_READ = 16 * 1024 * 1024


def _read_limit(desired_size):
    # Never below twice this task's own image, which another ISO writer may
    # pad to more: a seed of these very files is always read back, or a large
    # user-data would be rewritten on every run.
    return max(MAX_SEED_READ, 2 * desired_size)


def _lookup_volume(hypervisor, pool, volume_name):
    try:
        return hypervisor.lookup_volume(pool, volume_name)
    except NotFoundError:
        return None


def _read_current(hypervisor, vol, volume_name, desired_size):
    """(capacity, files or None, why the files could not be read or None)."""
    capacity = parse_volume_xml(hypervisor.volume_xml(vol)).capacity_bytes
    limit = _read_limit(desired_size)
    if capacity is not None and capacity > limit:
        return capacity, None, ("volume %s is %d bytes, too large for a seed (at most %d bytes are read back)"
                                % (volume_name, capacity, limit))
    data = b"".join(hypervisor.download_volume(vol, limit=capacity if capacity else limit))
    try:
        return capacity, read_iso(data), None
    except UnreadableSeedError as exc:
        return capacity, None, "volume %s is not a readable seed: %s" % (volume_name, exc.message)


def _chunks(data):
    view = memoryview(data)
    for start in range(0, len(view), UPLOAD_CHUNK):
        yield view[start:start + UPLOAD_CHUNK]


def _write(hypervisor, pool, pool_name, vol, volume_name, image):
    """Replace ``vol`` (or nothing) with a raw volume holding ``image``; return the new volume."""
    if vol is not None:
        hypervisor.delete_volume(vol)
    new_vol = hypervisor.create_volume(pool, build_volume_xml(VolumeSpec(volume_name, len(image), "raw")))
    try:
        hypervisor.upload_volume(new_vol, _chunks(image))
    except KvmError as error:
        # The volume now holds part of a seed. It is removed when the
        # connection still allows it; if not, the next run reads it back,
        # finds it truncated and rebuilds it, so it is never used as is.
        try:
            hypervisor.delete_volume(new_vol)
            fate = "the partial volume was removed"
        except KvmError:
            fate = "the partial volume is left in place and will be rebuilt on the next run"
        raise type(error)(
            "uploading seed volume %s to pool %s failed (%s): %s" % (volume_name, pool_name, fate, error.message),
            code=error.code, libvirt_message=error.libvirt_message) from error
    return new_vol


def ensure_seed(hypervisor, pool_name, name, files, check_mode=False):
    """Make volume ``<name>-seed.iso`` in pool ``pool_name`` a seed holding exactly ``files``.

    The existing volume is read back through libvirt (its capacity, when
    that is within the read limit), parsed and compared file by file: the
    same files leave it untouched. Different files, or a volume that is not
    a complete seed (an upload cut off earlier leaves one), are replaced:
    delete, create a raw volume of the image's size, upload. A truncated
    seed is never kept, since a VM booted from it would come up without its
    cloud-init configuration. In check mode only reads happen and the
    result predicts the change.
    """
    validate_pool_name(pool_name)
    volume_name = seed_volume_name(name)
    image = build_iso(files)
    desired = file_summary(files)
    pool = hypervisor.lookup_pool(pool_name)
    vol = _lookup_volume(hypervisor, pool, volume_name)

    current = None
    # Absent or unreadable, nothing is known of the old files: every file is new.
    changed_files = sorted(files)
    if vol is None:
        previous_state, reason = PREVIOUS_ABSENT, "volume %s does not exist" % volume_name
    else:
        capacity, current, problem = _read_current(hypervisor, vol, volume_name, len(image))
        if current is None:
            previous_state, reason = PREVIOUS_UNREADABLE, problem
        else:
            previous_state, changed_files = PREVIOUS_PRESENT, changed_file_names(current, files)
            if not changed_files:
                return SeedResult(volume_name, hypervisor.volume_path(vol), capacity, False, [], desired,
                                  PREVIOUS_PRESENT, current, None, [])
            reason = "files on volume %s differ: %s" % (volume_name, ", ".join(changed_files))

    actions = (["delete volume %s" % volume_name] if vol is not None else []) + [
        "create volume %s (%d bytes)" % (volume_name, len(image)),
        "upload seed to volume %s" % volume_name,
    ]
    if check_mode:
        volume_path = None if vol is None else hypervisor.volume_path(vol)
    else:
        volume_path = hypervisor.volume_path(_write(hypervisor, pool, pool_name, vol, volume_name, image))
    return SeedResult(volume_name, volume_path, len(image), True, changed_files, desired, previous_state, current,
                      reason, actions)


def remove_seed(hypervisor, pool_name, name, check_mode=False):
    """Delete volume ``<name>-seed.iso``; True when it existed. A missing pool or volume is nothing to do."""
    validate_pool_name(pool_name)
    volume_name = seed_volume_name(name)
    try:
        pool = hypervisor.lookup_pool(pool_name)
    except NotFoundError:
        return False
    vol = _lookup_volume(hypervisor, pool, volume_name)
    if vol is None:
        return False
    if not check_mode:
        hypervisor.delete_volume(vol)
    return True
