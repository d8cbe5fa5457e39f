# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The collection's private element inside a domain's ``<metadata>``.

libvirt has no labels, but it keeps any namespaced XML under ``<metadata>``
and hands it back through virDomainGetMetadata. That is how a VM says it is
managed by this collection, who owns it (uid), when it was created (orphan
cleanup works oldest first) and which spec it was built from (drift).

The element is read from the domain's XML, where it is namespaced (in the
default namespace or under a prefix; children without a prefix count as
ours), so the flows never spend a round trip on virDomainGetMetadata. It is
written with virDomainSetMetadata, which wants it unqualified
(``unqualified_xml``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import datetime
import json
import re
from dataclasses import dataclass
from typing import Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import quoted
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.xml import etree, is_value_text, to_string

METADATA_URI = "https://github.com/egress-proxies/kvm/metadata/1"
METADATA_PREFIX = "egressproxy"
INSTANCE_TAG = "instance"

OLDEST = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
# How far ahead of the reading host's clock a createdAt may lie and still be believed: hosts under NTP differ by
# far less; more means a clock set wrong or an edited timestamp, which must not protect a VM from cleanup forever.
CLOCK_SKEW_TOLERANCE = datetime.timedelta(minutes=5)

_RFC3339 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt](?P<time>\d{2}:\d{2}:\d{2})(?P<fraction>\.\d+)?"
    r"(?P<offset>[Zz]|[+-]\d{2}:\d{2})")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_MAX_UID_LENGTH = 256


@dataclass(frozen=True)
class InstanceMetadata:
    """What the element says. Fields are None when the element lacks them."""

    managed: bool
    uid: Optional[str]
    created_at_raw: Optional[str]
    spec_digest: Optional[str] = None
    spec_json: Optional[str] = None  # the spec the digest was taken of, as JSON (no secrets: see _proxy.request)
    policy_digest: Optional[str] = None  # the policy the guest was last given (_guest.policy)
    ha_group_json: Optional[str] = None  # the HA group that policy names, as JSON (_common.ha_group); absent: none
    # The egress addresses a pool gave that policy's profiles, as JSON (_common.pooled_addresses); absent: none.
    pooled_addresses_json: Optional[str] = None

    @property
    def created_at(self):
        """createdAt as an aware UTC datetime.

        A missing or malformed value reads as the oldest possible time, so a
        corrupt timestamp can never protect a VM from cleanup forever.
        """
        return parse_rfc3339(self.created_at_raw)

    def created_at_as_of(self, now):
        """createdAt as the host whose clock says ``now`` (aware) counts it: never in the future.

        Up to CLOCK_SKEW_TOLERANCE ahead is another host's clock running fast and reads as ``now``; further ahead
        is corrupt and reads as OLDEST, as a malformed value does.
        """
        created_at = self.created_at
        if created_at <= now:
            return created_at
        return now if created_at - now <= CLOCK_SKEW_TOLERANCE else OLDEST

    def created_within(self, seconds, now):
        """Whether createdAt (as created_at_as_of counts it) is less than ``seconds`` before ``now``: the first boot
        of a domain created that recently may still be going on."""
        return now - self.created_at_as_of(now) < datetime.timedelta(seconds=seconds)


def format_rfc3339(moment):
    """Render an aware datetime as RFC 3339 in UTC with second precision (``2026-11-29T18:00:00Z``)."""
    if not isinstance(moment, datetime.datetime) or moment.utcoffset() is None:
        raise ValidationError("createdAt must be a timezone-aware datetime, got %r" % (moment,))
    utc = moment.astimezone(datetime.timezone.utc)
    # Not strftime: glibc's %Y does not zero-pad years before 1000, and OLDEST is year 1.
    return "%04d-%02d-%02dT%02d:%02d:%02dZ" % (utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second)


def parse_rfc3339(text):
    """Parse an RFC 3339 timestamp into an aware UTC datetime; OLDEST when missing or malformed."""
    match = _RFC3339.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        return OLDEST
    offset = match.group("offset").upper()
    # fromisoformat in Python 3.9 takes neither "Z" nor arbitrary fraction lengths.
    fraction = (match.group("fraction") or ".0")[1:7].ljust(6, "0")
    iso = "%sT%s.%s%s" % (match.group("date"), match.group("time"), fraction, "+00:00" if offset == "Z" else offset)
    try:
        moment = datetime.datetime.fromisoformat(iso)
        return moment.astimezone(datetime.timezone.utc)
    except (ValueError, OverflowError):
        return OLDEST


def validate_uid(uid):
    """``uid`` when it can be recorded as an owner, else ValidationError (no XML built: needs no lxml)."""
    if not is_value_text(uid) or len(uid) > _MAX_UID_LENGTH:
        raise ValidationError(
            "owner uid %s is not valid: use 1-%d characters without control characters "
            "or leading/trailing whitespace" % (quoted(uid), _MAX_UID_LENGTH))
    return uid


def _validate_digest(what, digest):
    if digest is None:
        return None
    if not isinstance(digest, str) or not _SHA256_HEX.fullmatch(digest.lower()):
        raise ValidationError("%s digest %r is not a sha256 digest: use 64 hex digits" % (what, digest))
    return digest.lower()


def build_instance_element(uid, created_at, spec_digest=None, spec_json=None, policy_digest=None, ha_group_json=None,
                           pooled_addresses_json=None):
    """Build ``<egressproxy:instance>`` with managed, uid, createdAt and the optional specDigest, spec, policyDigest,
    haGroup and pooledAddresses.

    ``created_at`` is an aware datetime; ``spec_digest`` a sha256 hex digest
    of the VM spec, ``spec_json`` that spec as JSON text; ``policy_digest``
    the digest of the policy the guest holds, ``ha_group_json`` the HA group
    that policy names and ``pooled_addresses_json`` the egress addresses a
    pool gave its profiles, each as JSON text.
    """
    texts = [
        ("managed", "true"),
        ("uid", validate_uid(uid)),
        ("createdAt", format_rfc3339(created_at)),
    ]
    digest = _validate_digest("spec", spec_digest)
    if digest is not None:
        texts.append(("specDigest", digest))
    if spec_json is not None:
        if not is_value_text(spec_json):
            raise ValidationError("the spec to record must be non-empty XML-compatible text without surrounding "
                                  "whitespace, got %r" % (spec_json[:80] if isinstance(spec_json, str) else spec_json,))
        texts.append(("spec", spec_json))
    policy = _validate_digest("policy", policy_digest)
    if policy is not None:
        texts.append(("policyDigest", policy))
    for tag, what, text in (("haGroup", "the HA group", ha_group_json),
                            ("pooledAddresses", "the pooled egress addresses", pooled_addresses_json)):
        if text is None:
            continue
        if not is_value_text(text):
            raise ValidationError("%s to record must be non-empty XML-compatible text without surrounding whitespace, "
                                  "got %r" % (what, text[:80] if isinstance(text, str) else text))
        texts.append((tag, text))
    root = etree.Element(etree.QName(METADATA_URI, INSTANCE_TAG), nsmap={METADATA_PREFIX: METADATA_URI})
    for tag, text in texts:
        etree.SubElement(root, etree.QName(METADATA_URI, tag)).text = text
    return root


def unqualified_xml(element):
    """``element`` as virDomainSetMetadata takes it: without namespaces.

    libvirt puts the element and its children into the namespace of the call,
    under the key as prefix; an element that declares that prefix itself is
    refused ("failed to create a new XML namespace", measured on libvirt 9.0).
    """
    bare = copy.deepcopy(element)
    for node in bare.iter():
        if isinstance(node.tag, str):
            node.tag = etree.QName(node).localname
    etree.cleanup_namespaces(bare)
    return to_string(bare)


def instance_metadata_from_domain_element(domain):
    """Our element under ``metadata`` of a parsed ``<domain>`` (_libvirt.domain_xml checked the root); None when it has none.

    An element present but not saying managed ``true`` reads with ``managed=False``.
    """
    found = domain.xpath(
        "metadata/*[local-name() = $tag and namespace-uri() = $uri]", tag=INSTANCE_TAG, uri=METADATA_URI)
    if not found:
        return None
    texts = {}
    for child in found[0]:
        if not isinstance(child.tag, str):
            continue  # comments and processing instructions
        child_name = etree.QName(child)
        if child_name.namespace in (None, METADATA_URI) and child_name.localname not in texts:
            texts[child_name.localname] = (child.text or "").strip() or None
    return InstanceMetadata(
        managed=texts.get("managed") == "true",
        uid=texts.get("uid"),
        created_at_raw=texts.get("createdAt"),
        spec_digest=texts.get("specDigest"),
        spec_json=texts.get("spec"),
        policy_digest=texts.get("policyDigest"),
        ha_group_json=texts.get("haGroup"),
        pooled_addresses_json=texts.get("pooledAddresses"),
    )


def recorded_spec(metadata):
    """The spec a domain's metadata (InstanceMetadata or None) records, or None when absent or unreadable."""
    if metadata is None or metadata.spec_json is None:
        return None
    try:
        spec = json.loads(metadata.spec_json)
    except ValueError:
        return None
    return spec if isinstance(spec, dict) else None
