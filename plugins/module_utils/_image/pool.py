# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The image cache's volumes in a pool, which is the cache's only state: bases, their markers, their users.

- A base volume per image content: ``base-<image>-<first 16 hex of
  sha256>.<fmt>`` with a checksum, ``base-<image>.<fmt>`` without (_common.names).
- A marker volume ``<base>.sha256`` holding the 64 hex digits of the
  verified upload, written last. Base + well-formed marker (+ the expected
  digest when a checksum is given) is what "ready" means; anything else is
  the leftover of an interrupted attempt.
- A base is in use while another volume of the pool names it as its backing
  store, or a domain has it as a disk (_libvirt.storage.find_users); no flow deletes
  it then.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass, replace
from typing import Any, Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import NotFoundError, PermanentError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import (
    MARKER_SUFFIX,
    marker_volume_name,
    parse_base_volume_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT, STATE_PRESENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.spec import SHA256_HEX
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.storage import (
    VolumeUsers,
    find_users,
    find_volume,
    volume_info,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import VolumeSpec, build_volume_element
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.xml import etree, to_string

# Besides STATE_PRESENT and STATE_ABSENT, a base without a valid marker, or a marker without its base: what a killed run leaves.
STATE_INCOMPLETE = "incomplete"


@dataclass(frozen=True)
class CachedBase:
    """What the pool holds under one base volume name.

    ``base`` and ``marker`` are volume handles (None when absent),
    ``marker_digest`` the digest a well-formed marker records, ``info`` the
    base's parsed XML and ``users`` its _libvirt.storage.VolumeUsers (read only where needed).
    """

    volume: str
    base: Any = None
    marker: Any = None
    marker_digest: Optional[str] = None
    info: Any = None
    users: VolumeUsers = VolumeUsers()

    @property
    def marker_name(self):
        return marker_volume_name(self.volume)

    def ready(self, sha256):
        """Whether the base is cached and verified (with that digest, unless ``sha256`` is None)."""
        return (self.base is not None and self.marker_digest is not None
                and (sha256 is None or self.marker_digest == sha256))

    @property
    def state(self):
        if self.base is None and self.marker is None:
            return STATE_ABSENT
        return STATE_PRESENT if self.base is not None and self.marker_digest is not None else STATE_INCOMPLETE

    @property
    def exists(self):
        return self.base is not None or self.marker is not None


def observe_base(hypervisor, pool, volume):
    """The CachedBase of ``volume`` (looked up by name, the marker read; without its users)."""
    base, marker = find_volume(hypervisor, pool, volume), find_volume(hypervisor, pool, marker_volume_name(volume))
    digest = None
    if marker is not None:
        try:
            digest = read_marker(hypervisor, marker)
        except NotFoundError:
            marker = None
    return CachedBase(volume, base, marker, digest, volume_info(hypervisor, base) if base is not None else None)


def with_users(hypervisor, pool, pool_name, cached):
    """``cached`` with its base's XML and its users in ``pool`` (named ``pool_name``) read (unchanged without a base)."""
    if cached.base is None:
        return cached
    info = cached.info if cached.info is not None else volume_info(hypervisor, cached.base)
    return replace(cached, info=info, users=find_users(hypervisor, pool, pool_name, info))


def read_marker(hypervisor, marker):
    """The digest a marker records, or None when it is truncated or garbage (a run died writing it)."""
    content = b"".join(hypervisor.download_volume(marker, limit=128)).strip()
    try:
        text = content.decode("ascii")
    except UnicodeDecodeError:
        return None
    return text.lower() if SHA256_HEX.fullmatch(text) else None


def image_volumes(hypervisor, pool, image):
    """{base volume name: CachedBase of the handles found} of every cached copy of ``image`` (markers not read)."""
    found = {}
    for vol in hypervisor.list_volumes(pool):
        parsed = parse_base_volume_name(image, hypervisor.volume_name(vol))
        if parsed is None:
            continue
        base_name = parsed.volume[:-len(MARKER_SUFFIX)] if parsed.is_marker else parsed.volume
        base, marker = found.get(base_name, (None, None))
        found[base_name] = (base, vol) if parsed.is_marker else (vol, marker)
    return {name: CachedBase(name, base, marker) for name, (base, marker) in found.items()}


def in_use_error(volume, pool_name, users, what):
    """The refusal of ``what`` for a base that ``users`` (VolumeUsers) use."""
    return PermanentError(
        "%s: base volume '%s' in pool '%s' is %s; delete the VMs whose disks use it first "
        "(a base volume is never removed while a VM uses it)" % (what, volume, pool_name, users.describe()))


def raw_volume_xml(name, capacity):
    """A sparse raw volume of ``capacity`` bytes, to upload into."""
    element = build_volume_element(VolumeSpec(name=name, capacity_bytes=capacity, disk_format="raw"))
    # Sparse: the upload writes every byte anyway, preallocating would write the size twice.
    allocation = etree.Element("allocation", unit="bytes")
    allocation.text = "0"
    element.find("capacity").addnext(allocation)
    return to_string(element)
