# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lxml import etree

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.ha_group import HaGroup
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.pooled_addresses import PooledAddresses
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import parse_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import (
    CLOCK_SKEW_TOLERANCE,
    METADATA_PREFIX,
    METADATA_URI,
    OLDEST,
    InstanceMetadata,
    build_instance_element,
    format_rfc3339,
    parse_rfc3339,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.xml import to_string

UTC = datetime.timezone.utc
CREATED = datetime.datetime(2026, 11, 29, 18, 0, 0, tzinfo=UTC)
DIGEST = "ab" * 32
NS = "{%s}" % METADATA_URI


def built(uid, created_at, spec_digest=None):
    """The element serialised, as it stands in the domain XML libvirt keeps."""
    return to_string(build_instance_element(uid, created_at, spec_digest))


def _domain(metadata_children):
    return "<domain type='kvm'><name>p</name><metadata>%s</metadata></domain>" % metadata_children


def read(instance_xml):
    """The metadata as the flows read it: from the XML of a domain holding ``instance_xml`` in <metadata>."""
    return parse_domain_xml(_domain(instance_xml)).metadata


def test_build_field_by_field():
    root = etree.fromstring(built("uid-1", CREATED, DIGEST))
    assert root.tag == NS + "instance"
    assert root.prefix == METADATA_PREFIX
    assert [(child.tag, child.text) for child in root] == [
        (NS + "managed", "true"),
        (NS + "uid", "uid-1"),
        (NS + "createdAt", "2026-11-29T18:00:00Z"),
        (NS + "specDigest", DIGEST),
    ]


def test_build_without_spec_digest_omits_it():
    root = build_instance_element("uid-1", CREATED)
    assert root.find(NS + "specDigest") is None


def test_created_at_is_rendered_in_utc():
    cest = datetime.timezone(datetime.timedelta(hours=2))
    local = datetime.datetime(2026, 9, 4, 12, 30, 15, 999999, tzinfo=cest)
    assert format_rfc3339(local) == "2026-09-04T10:30:15Z"


def test_oldest_renders_as_a_four_digit_year_and_parses_back():
    assert format_rfc3339(OLDEST) == "0001-01-01T00:00:00Z"
    assert parse_rfc3339(format_rfc3339(OLDEST)) == OLDEST


@pytest.mark.parametrize("bad", [datetime.datetime(2026, 1, 1), "2026-01-01T00:00:00Z", None])
def test_created_at_must_be_an_aware_datetime(bad):
    with pytest.raises(ValidationError, match="timezone-aware"):
        build_instance_element("uid-1", bad)


@pytest.mark.parametrize("uid", ["", " x", "x ", "a\x00b", "a\x1bb", "x" * 257, None])
def test_bad_uids_are_rejected(uid):
    with pytest.raises(ValidationError, match="owner uid"):
        build_instance_element(uid, CREATED)


@pytest.mark.parametrize("digest", ["abc", "x" * 64, DIGEST + "0"])
def test_bad_spec_digests_are_rejected(digest):
    with pytest.raises(ValidationError, match="spec digest"):
        build_instance_element("uid-1", CREATED, digest)


def test_spec_digest_is_lowercased():
    assert read(built("u", CREATED, DIGEST.upper())).spec_digest == DIGEST


@pytest.mark.parametrize("uid", ["<uid/>", "a&amp;b", 'a"b', "a']]>b", "</egressproxy:uid><egressproxy:managed>x", "\u00fcid \u2603"])
def test_markup_in_uid_comes_back_verbatim(uid):
    raw = built(uid, CREATED)
    root = etree.fromstring(raw)
    assert len(root) == 3
    parsed = read(raw)
    assert parsed.uid == uid
    assert parsed.managed


@given(st.text(min_size=1, max_size=64).filter(
    lambda s: s == s.strip() and not any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF or ord(c) in (0xFFFE, 0xFFFF) for c in s)))
def test_any_valid_uid_round_trips(uid):
    parsed = read(built(uid, CREATED))
    assert parsed == InstanceMetadata(managed=True, uid=uid, created_at_raw="2026-11-29T18:00:00Z", spec_digest=None)


# What virDomainGetMetadata returns on libvirt 9.0: no namespace at all. In a
# domain's XML that is not ours.
UNQUALIFIED = ("<instance><managed>true</managed><uid>u-1</uid>"
               "<createdAt>2026-11-29T18:00:00Z</createdAt><specDigest>%s</specDigest></instance>" % DIGEST)
# The spellings a domain's XML holds ours in: the default-namespace form it
# was defined with, a prefixed form (how libvirt writes virDomainSetMetadata's
# element), and a prefixed element whose children have no prefix.
SPELLINGS = {
    "default namespace": '<instance xmlns="%s">\n  <managed>true</managed>\n  <uid>u-1</uid>\n'
                         "  <createdAt>2026-11-29T18:00:00Z</createdAt>\n  <specDigest>%s</specDigest>\n</instance>"
                         % (METADATA_URI, DIGEST),
    "prefixed": '<op:instance xmlns:op="%s"><op:managed>true</op:managed><op:uid>u-1</op:uid>'
                "<op:createdAt>2026-11-29T18:00:00Z</op:createdAt><op:specDigest>%s</op:specDigest></op:instance>"
                % (METADATA_URI, DIGEST),
    "prefixed, children without prefix": '<op:instance xmlns:op="%s"><managed>true</managed><uid>u-1</uid>'
                                         "<createdAt>2026-11-29T18:00:00Z</createdAt><specDigest>%s</specDigest>"
                                         "</op:instance>" % (METADATA_URI, DIGEST),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_parses(spelling):
    parsed = read(SPELLINGS[spelling])
    assert parsed == InstanceMetadata(managed=True, uid="u-1", created_at_raw="2026-11-29T18:00:00Z", spec_digest=DIGEST)
    assert parsed.created_at == CREATED
    assert parsed.uid == "u-1"


def test_bytes_with_xml_declaration_parse():
    raw = b'<?xml version="1.0" encoding="UTF-8"?>\n' + _domain(SPELLINGS["default namespace"]).encode()
    assert parse_domain_xml(raw).metadata.uid == "u-1"
    assert parse_domain_xml(raw.decode()).metadata.uid == "u-1"


def test_unmanaged_and_incomplete_elements():
    parsed = read('<instance xmlns="%s"><managed>false</managed><uid>u</uid></instance>' % METADATA_URI)
    assert not parsed.managed and parsed.uid == "u" and parsed.created_at_raw is None
    assert parsed.created_at == OLDEST
    assert not read('<instance xmlns="%s"/>' % METADATA_URI).managed
    assert not read('<instance xmlns="%s"><managed>TRUE</managed></instance>' % METADATA_URI).managed


def test_children_of_foreign_namespaces_are_ignored():
    raw = ('<instance xmlns="%s" xmlns:x="urn:other"><x:uid>evil</x:uid><uid>u-1</uid><managed>true</managed></instance>'
           % METADATA_URI)
    parsed = read(raw)
    assert parsed.uid == "u-1" and parsed.managed


@pytest.mark.parametrize("raw", [
    "not xml",
    "",
    _domain('<instance xmlns="%s"><uid>u-1</uid>' % METADATA_URI),
])
def test_broken_metadata_is_a_permanent_error(raw):
    with pytest.raises(PermanentError):
        parse_domain_xml(raw)


def test_entities_are_never_expanded():
    external = '<!DOCTYPE domain [<!ENTITY e SYSTEM "file:///etc/passwd">]>' + _domain(
        '<instance xmlns="%s"><uid>&e;</uid></instance>' % METADATA_URI)
    assert parse_domain_xml(external).metadata.uid is None
    internal = '<!DOCTYPE domain [<!ENTITY e "injected">]>' + _domain(
        '<instance xmlns="%s"><uid>a&e;</uid></instance>' % METADATA_URI)
    assert parse_domain_xml(internal).metadata.uid == "a"


@pytest.mark.parametrize("raw", [
    "yesterday", "", "   ", "2026-11-29", "2026-11-29T18:00:00", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z",
    "2026-11-29T25:00:00Z", "0001-01-01T00:00:00+01:00", "２０２６-11-29T18:00:00Z",
])
def test_malformed_created_at_reads_as_oldest(raw):
    assert parse_rfc3339(raw) == OLDEST
    assert InstanceMetadata(managed=True, uid="u", created_at_raw=raw).created_at == OLDEST


def test_oldest_sorts_before_everything():
    assert OLDEST < CREATED and OLDEST.tzinfo is not None
    assert parse_rfc3339(None) == OLDEST


@pytest.mark.parametrize("raw, expected", [
    ("2026-11-29T18:00:00Z", CREATED),
    ("2026-11-29t18:00:00z", CREATED),
    ("2026-11-29T19:00:00+01:00", CREATED),
    ("2026-11-29T18:00:00.5Z", CREATED.replace(microsecond=500000)),
    ("2026-11-29T18:00:00.123456789Z", CREATED.replace(microsecond=123456)),
    (" 2026-11-29T18:00:00Z\n", CREATED),
])
def test_rfc3339_variants(raw, expected):
    parsed = parse_rfc3339(raw)
    assert parsed == expected and parsed.utcoffset() == datetime.timedelta(0)


@given(st.datetimes(min_value=datetime.datetime(1970, 1, 1), max_value=datetime.datetime(9000, 1, 1), timezones=st.just(UTC)))
def test_created_at_round_trips_to_the_second(moment):
    parsed = read(built("u", moment))
    assert parsed.created_at == moment.replace(microsecond=0)


def test_our_element_is_found_among_others():
    ours = built("u-9", CREATED)
    parsed = read('<other:instance xmlns:other="urn:other"><uid>not-ours</uid></other:instance>' + ours)
    assert parsed.uid == "u-9" and parsed.managed and parsed.created_at == CREATED


@pytest.mark.parametrize("raw", [
    "<domain><name>p</name></domain>",
    _domain(""),
    _domain(UNQUALIFIED),  # in a full domain XML only the namespaced element is ours
    _domain('<instance xmlns="urn:other"><managed>true</managed></instance>'),
    _domain('<foo xmlns="urn:other"><managed>true</managed></foo>'),
    _domain("<foo><managed>true</managed></foo>"),
    _domain("not xml"),
])
def test_a_domain_without_our_element_has_no_metadata(raw):
    assert parse_domain_xml(raw).metadata is None


@pytest.mark.parametrize("ahead, reads_as", [
    (datetime.timedelta(0), "recorded"),
    (CLOCK_SKEW_TOLERANCE, "now"),
    (CLOCK_SKEW_TOLERANCE + datetime.timedelta(seconds=1), "oldest"),
    (-datetime.timedelta(days=3), "recorded"),
])
def test_created_at_as_of_never_lies_in_the_future(ahead, reads_as):
    metadata = InstanceMetadata(managed=True, uid="u", created_at_raw=format_rfc3339(CREATED + ahead))
    assert metadata.created_at_as_of(CREATED) == {"recorded": CREATED + ahead, "now": CREATED, "oldest": OLDEST}[reads_as]


# The HA group a proxy's policy names (_common.ha_group), recorded beside the policy's digest.
GROUP_JSON = '{"address":"198.18.40.10","address6":null,"name":"demo"}'


def test_the_ha_group_is_recorded_beside_the_policy_digest_and_reads_back():
    element = build_instance_element("uid-1", CREATED, DIGEST, policy_digest="cd" * 32, ha_group_json=GROUP_JSON)
    assert [etree.QName(child).localname for child in element][-2:] == ["policyDigest", "haGroup"]
    parsed = read(to_string(element))
    assert (parsed.policy_digest, parsed.ha_group_json) == ("cd" * 32, GROUP_JSON)
    assert HaGroup.from_recorded(parsed.ha_group_json) == HaGroup("demo", "198.18.40.10")


def test_metadata_written_before_ha_groups_reads_without_one():
    old = ('<instance xmlns="%s"><managed>true</managed><uid>u-1</uid><createdAt>2026-11-29T18:00:00Z</createdAt>'
           "<policyDigest>%s</policyDigest></instance>" % (METADATA_URI, DIGEST))
    parsed = read(old)
    assert parsed.managed and parsed.policy_digest == DIGEST and parsed.ha_group_json is None
    assert HaGroup.from_recorded(parsed.ha_group_json) is None
    assert build_instance_element("uid-1", CREATED, DIGEST).find(NS + "haGroup") is None


@pytest.mark.parametrize("bad", ["", " {}", "a\x00b"])
def test_a_group_that_is_no_xml_text_is_refused(bad):
    with pytest.raises(ValidationError):
        build_instance_element("uid-1", CREATED, ha_group_json=bad)


# The egress addresses a pool gave a proxy's profiles (_common.pooled_addresses), recorded beside the policy's digest.
POOLED_JSON = '{"backup":{"egress_address":"203.0.113.12","egress_address6":"2001:db8:20::12"}}'


def test_the_pooled_addresses_are_recorded_beside_the_policy_digest_and_read_back():
    element = build_instance_element("uid-1", CREATED, DIGEST, policy_digest="cd" * 32, ha_group_json=GROUP_JSON,
                                     pooled_addresses_json=POOLED_JSON)
    assert [etree.QName(child).localname for child in element][-3:] == ["policyDigest", "haGroup", "pooledAddresses"]
    parsed = read(to_string(element))
    assert (parsed.ha_group_json, parsed.pooled_addresses_json) == (GROUP_JSON, POOLED_JSON)
    assert PooledAddresses.from_recorded(parsed.pooled_addresses_json).as_dict() == {
        "backup": {"egress_address": "203.0.113.12", "egress_address6": "2001:db8:20::12"}}


def test_metadata_without_pooled_addresses_is_the_same_bytes_as_before_them():
    """A proxy without pooled profile addresses keeps the metadata it had: no VM replaced, nothing rewritten."""
    before = build_instance_element("uid-1", CREATED, DIGEST, policy_digest="cd" * 32)
    assert to_string(before) == to_string(build_instance_element("uid-1", CREATED, DIGEST, policy_digest="cd" * 32,
                                                                 pooled_addresses_json=None))
    assert before.find(NS + "pooledAddresses") is None and read(to_string(before)).pooled_addresses_json is None


@pytest.mark.parametrize("recorded", [
    '{"backup":{"egress_address":"203.0.113.12/24"}}',
    '{"Backup":{"egress_address":"203.0.113.12"}}',
    '{"backup":{"egress_address":"2001:db8::12"}}',
    '{"backup":{"address":"203.0.113.12"}}',
    '{"backup":{"egress_address":"203.0.113.12\\n"}}',
    '{"backup":"203.0.113.12"}',
    '["backup"]',
    "not json",
])
def test_a_record_edited_by_hand_holds_no_address(recorded):
    parsed = read(to_string(build_instance_element("uid-1", CREATED, DIGEST, pooled_addresses_json=recorded)))
    assert PooledAddresses.from_recorded(parsed.pooled_addresses_json) is None


@pytest.mark.parametrize("bad", ["", " {}", "a\x00b"])
def test_pooled_addresses_that_are_no_xml_text_are_refused(bad):
    with pytest.raises(ValidationError) as raised:
        build_instance_element("uid-1", CREATED, pooled_addresses_json=bad)
    assert raised.value.message.startswith("the pooled egress addresses to record must be")
