"""Properties of every builder and parser in module_utils, over any text hypothesis can make.

Each builder either refuses a value with ValidationError or writes it so that its parser reads back
exactly that value, and the document keeps exactly the structure the builder meant: a value never
becomes markup (an element, an attribute, a second document). Parsers of bytes from the hypervisor
(seed images, image headers) answer anything with their typed errors only.
"""

import dataclasses
import datetime
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import names as _names
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import quoted
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.header import (
    QCOW2_MAGIC,
    ImageHeader,
    NeedMoreBytes,
    parse_image_header,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import (
    DomainParams,
    NicInfo,
    build_domain_xml,
    parse_domain_xml,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import build_instance_element
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import (
    VolumeSpec,
    build_volume_xml,
    parse_volume_xml,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.xml import parse_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import build_iso, read_iso
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.nocloud import seed_files

CREATED = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
# Markup-heavy text first: what an attacker would put in a name or a path.
MARKUP = st.sampled_from(["<", ">", "&", '"', "'", "]]>", "<!--", "-->", "<?xml ?>", "&amp;", "&#0;", "<a/>",
                          "</name>", "<!ENTITY x SYSTEM 'file:///etc/passwd'>", "&x;", "\n", "\x00", "\ud800"])
ANY_TEXT = st.one_of(st.text(), st.lists(st.one_of(MARKUP, st.text(max_size=4)), max_size=8).map("".join))
SHA = st.text("0123456789abcdef", min_size=64, max_size=64)
# No deadline: a busy machine makes single examples slow, which says nothing about the property.
PROPERTY = settings(deadline=None)
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _shape(xml):
    """Every element's path and attribute names: what the builder meant, whatever the values."""
    root = parse_xml(xml, "built XML")
    tree = root.getroottree()
    return sorted((tree.getpath(node), tuple(sorted(node.attrib))) for node in root.iter() if isinstance(node.tag, str))


# --- volume XML -------------------------------------------------------------------------------------------


def _volume(backing_path):
    return VolumeSpec(name="eptest.qcow2", capacity_bytes=1 << 30, disk_format="qcow2",
                      backing_path=backing_path, backing_format="qcow2")


REFERENCE_VOLUME = _shape(build_volume_xml(_volume("/pool/base.qcow2")))


@PROPERTY
@given(ANY_TEXT)
def test_a_backing_path_is_refused_or_read_back_exactly_and_never_markup(text):
    path = "/" + text
    try:
        xml = build_volume_xml(_volume(path))
    except ValidationError:
        return
    assert parse_volume_xml(xml).backing_path == path
    assert _shape(xml) == REFERENCE_VOLUME


@PROPERTY
@given(ANY_TEXT)
def test_a_volume_name_is_refused_or_read_back_exactly(name):
    try:
        xml = build_volume_xml(VolumeSpec(name=name, capacity_bytes=1, disk_format="raw"))
    except ValidationError:
        return
    assert parse_volume_xml(xml).name == name


# --- metadata inside the domain XML ----------------------------------------------------------------------


def _domain(bridge="br0", network=None, **changes):
    """The test's domain; ``bridge`` and ``network`` are its one NIC's."""
    base = DomainParams(name="eptest-prop", metadata=build_instance_element("uid", CREATED), vcpus=1,
                        memory_mib=128, pool="egress", overlay_volume="eptest-prop.qcow2",
                        seed_volume="eptest-prop-seed.iso", interfaces=(NicInfo(mac=None, bridge=bridge, network=network),))
    return dataclasses.replace(base, **changes)


REFERENCE_DOMAIN = _shape(build_domain_xml(_domain(
    metadata=build_instance_element("uid", CREATED, "ab" * 32, "{}"))))


@PROPERTY
@given(uid=ANY_TEXT, spec=st.dictionaries(ANY_TEXT, ANY_TEXT, max_size=4))
def test_owner_and_spec_are_refused_or_read_back_exactly_and_never_markup(uid, spec):
    spec_json = json.dumps(spec, sort_keys=True, ensure_ascii=True)
    try:
        element = build_instance_element(uid, CREATED, "ab" * 32, spec_json)
    except ValidationError:
        return
    xml = build_domain_xml(_domain(metadata=element))
    metadata = parse_domain_xml(xml).metadata
    assert (metadata.uid, metadata.spec_json, metadata.created_at) == (uid, spec_json, CREATED)
    assert json.loads(metadata.spec_json) == spec
    assert _shape(xml) == REFERENCE_DOMAIN


@PROPERTY
@given(ANY_TEXT)
def test_any_spec_text_is_refused_or_read_back_exactly(spec_json):
    try:
        element = build_instance_element("uid", CREATED, None, spec_json)
    except ValidationError:
        return
    assert parse_domain_xml(build_domain_xml(_domain(metadata=element))).metadata.spec_json == spec_json


@PROPERTY
@given(bridge=ANY_TEXT, pool=ANY_TEXT, network=ANY_TEXT)
def test_bridge_pool_and_network_names_are_refused_or_read_back_exactly(bridge, pool, network):
    for changes, read in (
        ({"bridge": bridge}, lambda info: info.nics[0].bridge == bridge),
        ({"bridge": None, "network": network}, lambda info: info.nics[0].network == network),
        ({"pool": pool}, lambda info: {disk.pool for disk in info.disks} == {pool}),
    ):
        try:
            xml = build_domain_xml(_domain(**changes))
        except ValidationError:
            continue
        assert read(parse_domain_xml(xml))


# --- names ----------------------------------------------------------------------------------------------


VALIDATORS = [getattr(_names, name) for name in sorted(vars(_names)) if name.startswith("validate_")]


@PROPERTY
@given(ANY_TEXT)
def test_every_name_validator_refuses_markup_and_path_characters(text):
    for validate in VALIDATORS:
        try:
            accepted = validate(text)
        except ValidationError as error:
            # Named whole, or as _text.quoted shows it: escaped, and cut short when long.
            assert repr(text) in error.message or quoted(text) in error.message
            continue
        assert not set(accepted) & set("<>&\"'/\\ \t\n\x00"), (validate.__name__, accepted)


@PROPERTY
@given(image=st.from_regex(r"[a-z0-9][a-z0-9._-]{0,40}", fullmatch=True), fmt=st.sampled_from(_names.DISK_FORMATS),
       sha=st.one_of(st.none(), SHA), marker=st.booleans())
def test_a_base_volume_name_parses_back_to_what_made_it(image, fmt, sha, marker):
    volume = _names.base_volume_name(image, fmt, sha)
    if marker:
        volume = _names.marker_volume_name(volume)
    parsed = _names.parse_base_volume_name(image, volume)
    assert (parsed.disk_format, parsed.digest_prefix, parsed.is_marker) == (
        fmt, None if sha is None else sha[:_names.DIGEST_PREFIX_LENGTH], marker)


# --- the seed: NoCloud files in an ISO 9660 image --------------------------------------------------------


def _is_text(text):
    """UTF-8 text without control characters (tab, line feed and carriage return are text): what a seed file holds."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not any(ord(char) < 32 and char not in "\t\n\r" or char == "\x7f" for char in text)


CLOUD_CONFIG_TEXT = ANY_TEXT.filter(_is_text).map(lambda body: "#cloud-config\n" + body)


@SLOW
@given(user_data=st.one_of(CLOUD_CONFIG_TEXT, CLOUD_CONFIG_TEXT.map(str.encode)),
       vendor_data=CLOUD_CONFIG_TEXT,
       meta=st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=3))
def test_seed_files_come_back_from_the_image_byte_for_byte(user_data, vendor_data, meta):
    files = seed_files("eptest-prop", user_data, meta, vendor_data)
    back = read_iso(build_iso(files))
    assert back == files
    expected_user_data = user_data if isinstance(user_data, bytes) else user_data.encode("utf-8")
    assert back["user-data"] == expected_user_data


@SLOW
@given(user_data=st.one_of(ANY_TEXT, st.binary(max_size=4096)))
def test_any_user_data_is_written_exactly_or_refused_naming_user_data(user_data):
    try:
        files = seed_files("eptest-prop", user_data)
    except ValidationError as error:
        assert error.message.startswith("user_data "), error.message
        return
    assert read_iso(build_iso(files))["user-data"] == (user_data if isinstance(user_data, bytes) else user_data.encode())


@SLOW
@given(st.dictionaries(st.from_regex(r"[a-z0-9][a-z0-9-]{0,28}", fullmatch=True), st.binary(max_size=3000),
                       min_size=1, max_size=6))
def test_any_seed_file_set_round_trips(files):
    assert read_iso(build_iso(files)) == files


@PROPERTY
@given(st.binary(max_size=4096))
def test_any_bytes_read_as_a_seed_fail_only_typed(data):
    try:
        read_iso(data)
    except PermanentError:
        pass


# --- image headers --------------------------------------------------------------------------------------


@PROPERTY
@given(st.binary(max_size=2048), st.one_of(st.none(), st.integers(0, 1 << 40)))
def test_any_qcow2_looking_bytes_give_a_header_a_need_or_a_typed_refusal(tail, length):
    for head in (QCOW2_MAGIC + tail, tail):
        try:
            parsed = parse_image_header(head, length)
        except PermanentError:
            continue
        assert isinstance(parsed, (ImageHeader, NeedMoreBytes))


def test_the_markup_strategy_reaches_the_builders():
    # The properties above only mean something if markup actually got through a builder once.
    xml = build_volume_xml(_volume("/a<b>&c]]>\"'"))
    assert etree.fromstring(xml.encode()).findtext("backingStore/path") == "/a<b>&c]]>\"'"
