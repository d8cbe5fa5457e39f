# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Validation of every name the collection hands to libvirt, the names derived from them, and ids.

Everything is checked here before any libvirt call. The VM name is the one
rule the rest derives from: a lowercase DNS label (RFC 1123), so it is also a
valid guest hostname, and the volume names built from it can neither leave
the pool directory nor break the XML they are written into. Uppercase is
refused because hostnames are case-insensitive while libvirt names are not:
``Proxy`` and ``proxy`` would be two domains answering to one hostname.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from collections import namedtuple

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import quoted

DISK_FORMATS = ("qcow2", "raw")
DEFAULT_DISK_FORMAT = DISK_FORMATS[0]
# The storage pool every module uses unless told otherwise: libvirt's own default pool.
DEFAULT_POOL = "default"

_VM_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# Pool, network and volume names are chosen outside this collection (or derived
# here); they only have to be safe as a file name and in XML.
_LIBVIRT_OBJECT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}")
# Linux interface names: at most 15 bytes (IFNAMSIZ - 1), no '/', ':' or blanks.
_BRIDGE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}")
# Inventory host names, FQDNs and IP addresses (IPv6 included) all fit.
_HOST_NAME = re.compile(r"[A-Za-z0-9_:][A-Za-z0-9_.:-]{0,252}")
_IMAGE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
# A DNS name: labels of letters, digits and inner hyphens (RFC 1123), at most 253 characters in all.
_DNS_NAME = re.compile(r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
# A content-addressed base volume ends in "-<16 hex>"; an image name ending
# like that would make "base-<image>.<fmt>" of one image indistinguishable
# from the content-addressed volume of another.
_DIGEST_SUFFIX = re.compile(r".*-[0-9a-f]{16}")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")

DIGEST_PREFIX_LENGTH = 16
MARKER_SUFFIX = ".sha256"

BaseVolumeName = namedtuple("BaseVolumeName", ["volume", "image", "disk_format", "digest_prefix", "is_marker"])
BaseVolumeName.__doc__ = """A volume recognised as an image's base volume or its marker.

``volume`` is the name as found in the pool, ``digest_prefix`` the first 16
hex digits of the image's sha256 (None for an unchecksummed base), and
``is_marker`` tells the ``<base>.sha256`` sidecar from the base itself.
"""


def is_dns_name(value):
    """Whether ``value`` is a DNS name (RFC 1123 labels, no trailing dot, ASCII only)."""
    return isinstance(value, str) and _DNS_NAME.fullmatch(value) is not None


def _check(pattern, value, message):
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValidationError(message % (quoted(value),))
    return value


def validate_vm_name(name):
    """Return ``name`` when it is a valid VM name, else raise ValidationError."""
    return _check(
        _VM_NAME, name,
        "name %s is not a valid VM name: use 1-63 lowercase letters, digits and hyphens, "
        "starting and ending with a letter or digit (it becomes the guest's hostname)")


def validate_pool_name(name):
    """Return ``name`` when it is a usable storage pool name, else raise ValidationError."""
    return _check(
        _LIBVIRT_OBJECT_NAME, name,
        "pool %s is not a valid storage pool name: use 1-255 letters, digits, '_', '.', '+' or '-', "
        "not starting with '.', '+' or '-'")


def validate_network_name(name):
    """Return ``name`` when it is a usable libvirt network name, else raise ValidationError."""
    return _check(
        _LIBVIRT_OBJECT_NAME, name,
        "network %s is not a valid libvirt network name: use 1-255 letters, digits, '_', '.', '+' or '-', "
        "not starting with '.', '+' or '-'")


def validate_bridge_name(name):
    """Return ``name`` when it is a valid Linux bridge name, else raise ValidationError."""
    return _check(
        _BRIDGE_NAME, name,
        "bridge %s is not a valid Linux interface name: use 1-15 letters, digits, '_', '.' or '-', "
        "not starting with '.' or '-'")


def validate_volume_name(name):
    """Return ``name`` when it is a safe storage volume name (a plain file name), else raise ValidationError."""
    return _check(
        _LIBVIRT_OBJECT_NAME, name,
        "volume %s is not a valid volume name: use 1-255 letters, digits, '_', '.', '+' or '-', "
        "not starting with '.', '+' or '-'")


def validate_host_name(host):
    """Return ``host`` when it can appear in a domain id, else raise ValidationError."""
    return _check(
        _HOST_NAME, host,
        "host %s is not a valid host name: use 1-253 letters, digits, '.', '_', '-' or ':' "
        "(a host name, FQDN or IP address)")


def validate_image_name(image):
    """Return ``image`` when it is a valid image cache name, else raise ValidationError."""
    _check(
        _IMAGE_NAME, image,
        "image name %s is not valid: use 1-128 lowercase letters, digits, '.', '_' or '-', "
        "starting with a letter or digit")
    if _DIGEST_SUFFIX.fullmatch(image):
        raise ValidationError(
            "image name %r is not valid: it must not end in '-' followed by 16 hex digits, "
            "which is how cached volumes carry their checksum" % (image,))
    return image


def validate_disk_format(disk_format):
    """Return ``disk_format`` when it is one of DISK_FORMATS, else raise ValidationError."""
    if disk_format not in DISK_FORMATS:
        raise ValidationError("disk format %r is not supported: use one of %s" % (disk_format, ", ".join(DISK_FORMATS)))
    return disk_format


def validate_sha256(digest):
    """Return ``digest`` in lowercase when it is 64 hex digits, else raise ValidationError."""
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise ValidationError("checksum %r is not a sha256 digest: use 64 hex digits" % (digest,))
    return digest.lower()


def overlay_volume_name(name):
    """The VM's copy-on-write disk: ``<name>.qcow2``."""
    return validate_vm_name(name) + ".qcow2"


def seed_volume_name(name):
    """The VM's cloud-init NoCloud seed: ``<name>-seed.iso``."""
    return validate_vm_name(name) + "-seed.iso"


def base_volume_name(image, disk_format, sha256=None):
    """The cached base volume of an image.

    With a checksum the name is content-addressed
    (``base-<image>-<first 16 hex of sha256>.<fmt>``), so a new upstream
    release lands next to the old base instead of replacing a file that
    overlays still read from. Without one it is ``base-<image>.<fmt>``.
    """
    validate_image_name(image)
    validate_disk_format(disk_format)
    if sha256 is None:
        return "base-%s.%s" % (image, disk_format)
    return "base-%s-%s.%s" % (image, validate_sha256(sha256)[:DIGEST_PREFIX_LENGTH], disk_format)


def marker_volume_name(base_volume):
    """The sidecar volume holding the verified sha256 of ``base_volume``: ``<base>.sha256``."""
    return validate_volume_name(base_volume) + MARKER_SUFFIX


def parse_base_volume_name(image, volume):
    """Recognise ``volume`` as a base volume or marker of ``image``.

    Returns a BaseVolumeName, or None when the volume belongs to something
    else (another image, a VM, a foreign file). Used to find what to prune.
    """
    validate_image_name(image)
    prefix = "base-" + image
    if not isinstance(volume, str) or not volume.startswith(prefix):
        return None
    rest = volume[len(prefix):]
    match = re.fullmatch(
        r"(?:-(?P<digest>[0-9a-f]{%d}))?\.(?P<fmt>%s)(?P<marker>%s)?"
        % (DIGEST_PREFIX_LENGTH, "|".join(DISK_FORMATS), re.escape(MARKER_SUFFIX)),
        rest)
    if match is None:
        return None
    return BaseVolumeName(
        volume=volume,
        image=image,
        disk_format=match.group("fmt"),
        digest_prefix=match.group("digest"),
        is_marker=match.group("marker") is not None,
    )


def format_domain_id(host, name):
    """The id of a VM: ``hosts/<host>/domains/<name>``.

    The id carries the hypervisor so a later task reaches the same host even
    when the inventory's placement changed in between.
    """
    return "hosts/%s/domains/%s" % (validate_host_name(host), validate_vm_name(name))
