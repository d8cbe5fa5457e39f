# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The reference's seed tests and more: the files, the image (read back by pycdlib, genisoimage's images
read by ours), and ensure_seed/seed_removal over the fake seam."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import hashlib
import io
import json
import random
import shutil
import subprocess
import time

import pycdlib
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import seed_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import DomainParams, NicInfo, build_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import build_instance_element
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import (
    SEED_LABEL,
    UnreadableSeedError,
    build_iso,
    read_iso,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.nocloud import (
    DEFAULT_VENDOR_DATA,
    render_meta_data,
    seed_files,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.seed import (
    MAX_SEED_READ,
    SeedObservation,
    SeedRequest,
    changed_file_names,
    ensure_seed,
    plan_seed,
    plan_seed_removal,
    seed_removal,
)
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import FakeHypervisor

NAME = "proxy-abc123def456ghij"
USER_DATA = "#cloud-config\npackages: [squid]\n"
SEED_VOLUME = NAME + "-seed.iso"


def pycdlib_read(image):
    """label and {name: bytes} as pycdlib reads them, by Rock Ridge and by Joliet names: a reader that is not ours."""
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(image))
    try:
        label = iso.pvd.volume_identifier.decode("ascii").rstrip()
        by_namespace = {}
        for namespace in ("rr_path", "joliet_path"):
            files = {}
            for record in iso.list_children(**{namespace: "/"}):
                if record is None or record.is_dot() or record.is_dotdot():
                    continue
                rr_name = namespace == "rr_path"
                name = (record.rock_ridge.name() if rr_name else record.file_identifier()).decode("utf-8" if rr_name else "utf-16-be")
                out = io.BytesIO()
                iso.get_file_from_iso_fp(out, **{namespace: "/" + name})
                files[name] = out.getvalue()
            by_namespace[namespace] = files
    finally:
        iso.close()
    assert by_namespace["rr_path"] == by_namespace["joliet_path"]
    return label, by_namespace["rr_path"]


# --- the files ---------------------------------------------------------------------------------


def test_seed_files_are_user_meta_vendor_data_in_order():
    files = seed_files(NAME, USER_DATA)
    assert list(files) == ["user-data", "meta-data", "vendor-data"]
    assert files["user-data"] == USER_DATA.encode()
    assert files["vendor-data"] == DEFAULT_VENDOR_DATA.encode()


def test_meta_data_is_instance_id_and_hostname_as_yaml():
    meta = seed_files(NAME, USER_DATA)["meta-data"]
    assert yaml.safe_load(meta) == {"instance-id": NAME, "local-hostname": NAME}
    assert json.loads(meta) == {"instance-id": NAME, "local-hostname": NAME}


def test_meta_data_merges_over_the_defaults_and_renders_deterministically():
    meta = render_meta_data(NAME, {"local-hostname": "proxy.example.net", "public-keys": ["ssh-ed25519 AAAA x"]})
    assert yaml.safe_load(meta) == {"instance-id": NAME, "local-hostname": "proxy.example.net",
                                    "public-keys": ["ssh-ed25519 AAAA x"]}
    assert meta == render_meta_data(NAME, {"public-keys": ["ssh-ed25519 AAAA x"], "local-hostname": "proxy.example.net"})


def test_meta_data_can_override_instance_id():
    assert yaml.safe_load(render_meta_data(NAME, {"instance-id": "iid-2"}))["instance-id"] == "iid-2"


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)))
_META_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 53), 2 ** 53) | _TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_TEXT, children, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(_TEXT, _META_VALUES, max_size=6))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_meta_data_reads_back_as_yaml_whatever_the_text(meta_data):
    # cloud-init reads meta-data with a YAML 1.1 loader: line separators, NEL and C1
    # controls must not reach it raw, or the values it reads would differ.
    expected = {"instance-id": NAME, "local-hostname": NAME}
    expected.update(meta_data)
    assert yaml.safe_load(render_meta_data(NAME, meta_data)) == expected


@pytest.mark.parametrize("meta_data, message", [
    (["instance-id"], "must be a dictionary"),
    ({1: "x"}, "keys must be strings"),
    ({"x": float("nan")}, "cannot be written"),
    ({"x": object()}, "cannot be written"),
])
def test_meta_data_that_cannot_be_written_is_refused(meta_data, message):
    with pytest.raises(errors.ValidationError, match=message):
        seed_files(NAME, USER_DATA, meta_data=meta_data)


def test_empty_vendor_data_is_an_empty_file_and_none_is_the_default():
    assert seed_files(NAME, vendor_data="")["vendor-data"] == b""
    assert seed_files(NAME, vendor_data=None)["vendor-data"] == DEFAULT_VENDOR_DATA.encode()
    assert seed_files(NAME, vendor_data="#cloud-config\n{}\n")["vendor-data"] == b"#cloud-config\n{}\n"


def test_network_config_string_is_verbatim_and_dict_is_yaml():
    text = "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n"
    assert seed_files(NAME, network_config=text)["network-config"] == text.encode()
    config = {"version": 2, "ethernets": {"primary": {"match": {"name": "en*"}, "addresses": ["192.0.2.12/24"]}}}
    files = seed_files(NAME, network_config=config)
    assert list(files) == ["user-data", "meta-data", "vendor-data", "network-config"]
    assert yaml.safe_load(files["network-config"]) == config


def test_default_vendor_data_installs_and_starts_the_guest_agent():
    vendor = yaml.safe_load(DEFAULT_VENDOR_DATA)
    assert DEFAULT_VENDOR_DATA.startswith("#cloud-config\n")
    assert vendor == {"packages": ["qemu-guest-agent"], "runcmd": [["systemctl", "enable", "--now", "qemu-guest-agent"]]}


@pytest.mark.parametrize("name", ["Proxy-1", "-x", "a" * 64, "proxy_1", "../x", ""])
def test_invalid_vm_name_is_refused(name):
    with pytest.raises(errors.ValidationError):
        seed_files(name)


def test_user_data_bytes_of_utf8_text_are_written_as_they_are_and_binary_or_other_types_refused():
    assert seed_files(NAME, "#!/bin/sh\necho é\n".encode())["user-data"] == "#!/bin/sh\necho é\n".encode()
    with pytest.raises(errors.ValidationError, match="^user_data is not UTF-8 text"):
        seed_files(NAME, b"#!/bin/sh\n\xff\x00binary")
    with pytest.raises(errors.ValidationError, match="^user_data must be a string"):
        seed_files(NAME, 42)


CLOUD_CONFIG = {"packages": ["squid"], "write_files": [{"path": "/etc/eptest", "content": "x\u2028y\n"}],
                "runcmd": [["systemctl", "restart", "squid"]]}


@pytest.mark.parametrize("option, file_name", [("user_data", "user-data"), ("vendor_data", "vendor-data")])
def test_a_dictionary_is_written_as_a_cloud_config_document(option, file_name):
    content = seed_files(NAME, **{option: CLOUD_CONFIG})[file_name]
    assert content.startswith(b"#cloud-config\n")
    assert yaml.safe_load(content) == CLOUD_CONFIG
    assert json.loads(content.split(b"\n", 1)[1]) == CLOUD_CONFIG


def test_a_cloud_config_dictionary_renders_the_same_bytes_whatever_its_key_order():
    # kvm_proxy's spec digest covers these bytes: other bytes for the same
    # dictionary would make every VM look drifted and be replaced.
    reordered = {"runcmd": [["systemctl", "restart", "squid"]],
                 "write_files": [{"content": "x\u2028y\n", "path": "/etc/eptest"}], "packages": ["squid"]}
    expected = (b'#cloud-config\n{\n  "packages": [\n    "squid"\n  ],\n  "runcmd": [\n    [\n      "systemctl",\n'
                b'      "restart",\n      "squid"\n    ]\n  ],\n  "write_files": [\n    {\n'
                b'      "content": "x\\u2028y\\n",\n      "path": "/etc/eptest"\n    }\n  ]\n}\n')
    assert seed_files(NAME, CLOUD_CONFIG)["user-data"] == seed_files(NAME, reordered)["user-data"] == expected
    assert seed_files(NAME, vendor_data=reordered)["vendor-data"] == expected


@pytest.mark.parametrize("option", ["user_data", "vendor_data"])
@pytest.mark.parametrize("value, message", [
    (["packages", "squid"], "must be a string or a dictionary (written as #cloud-config), got list"),
    (42, "must be a string or a dictionary (written as #cloud-config), got int"),
    (True, "must be a string or a dictionary (written as #cloud-config), got bool"),
    ({1: "x"}, "keys must be strings"),
    ({"x": float("nan")}, "cannot be written as YAML"),
])
def test_cloud_data_that_is_neither_text_nor_a_dictionary_is_refused_naming_the_option(option, value, message):
    with pytest.raises(errors.ValidationError) as raised:
        seed_files(NAME, **{option: value})
    assert raised.value.message.startswith(option + " ") and message in raised.value.message


# --- the image ---------------------------------------------------------------------------------


def test_image_has_label_cidata_and_the_three_files_verbatim():
    files = seed_files(NAME, USER_DATA)
    image = build_iso(files)
    label, read_back = pycdlib_read(image)
    assert label == SEED_LABEL
    assert read_back == dict(files)
    assert read_iso(image) == dict(files)
    assert read_back["meta-data"] == render_meta_data(NAME)


def test_empty_user_data_is_still_present():
    image = build_iso(seed_files(NAME, ""))
    assert read_iso(image)["user-data"] == b""
    assert pycdlib_read(image)[1]["user-data"] == b""


def test_network_config_is_on_the_image():
    files = seed_files(NAME, USER_DATA, network_config="version: 2\n")
    assert set(read_iso(build_iso(files))) == {"user-data", "meta-data", "vendor-data", "network-config"}
    assert pycdlib_read(build_iso(files))[1]["network-config"] == b"version: 2\n"


@given(st.text())
@settings(max_examples=60, deadline=None)
def test_any_unicode_user_data_round_trips_or_is_refused_as_not_text(body):
    user_data = "#cloud-config\n" + body
    try:
        expected = user_data.encode("utf-8")
    except UnicodeEncodeError:
        with pytest.raises(errors.ValidationError, match="^user_data is not UTF-8 text"):
            seed_files(NAME, user_data)
        return
    if any(ord(char) < 32 and char not in "\t\n\r" or char == "\x7f" for char in body):
        with pytest.raises(errors.ValidationError, match="^user_data holds binary data"):
            seed_files(NAME, user_data)
        return
    image = build_iso(seed_files(NAME, user_data))
    assert read_iso(image)["user-data"] == expected
    assert pycdlib_read(image)[1]["user-data"] == expected


# Hypothesis draws megabytes slowly; it draws the size and a seeded generator fills them.
_ALPHABET = "abc \n\t#:-\u00e9\u00df\u2028\u0085\u4e2d\u6587\U0001f600\U0001d11e\x00\x7f"


@given(st.integers(1024 * 1024, 3 * 1024 * 1024 + 7), st.integers(0, 2 ** 32), st.booleans())
@settings(max_examples=6, deadline=None)
def test_mib_sized_seed_files_round_trip(size, seed, as_text):
    rnd = random.Random(seed)
    text = "".join(rnd.choices(_ALPHABET, k=size // 4)).encode("utf-8")
    expected = text if as_text else rnd.getrandbits(8 * size).to_bytes(size, "little")
    # Past what seed_files takes (MAX_FILE_BYTES): the ISO itself holds any size and any bytes.
    files = dict(seed_files(NAME), **{"user-data": expected})
    image = build_iso(files)
    assert read_iso(image)["user-data"] == expected
    assert hashlib.sha256(pycdlib_read(image)[1]["user-data"]).digest() == hashlib.sha256(expected).digest()


def test_two_builds_differ_in_bytes_only_by_time_and_compare_equal_by_content(monkeypatch):
    files = seed_files(NAME, USER_DATA)
    monkeypatch.setattr(time, "time", lambda: 1788000000.0)
    first = build_iso(files)
    monkeypatch.setattr(time, "time", lambda: 1788003661.0)
    second = build_iso(files)
    assert first != second, "pycdlib stamps the build time; if this fails it no longer does"
    assert len(first) == len(second)
    assert read_iso(first) == read_iso(second) == dict(files)


@pytest.mark.parametrize("name", ["user_data", "User-data", "-x", "a" * 30, "", "dir/file", 7])
def test_file_names_that_would_not_survive_iso9660_are_refused(name):
    with pytest.raises(errors.ValidationError, match="seed file name"):
        build_iso({name: b""})


def test_file_content_must_be_bytes():
    with pytest.raises(errors.ValidationError, match="must be bytes"):
        build_iso({"user-data": "text"})


# --- reading images back -----------------------------------------------------------------------


@pytest.fixture
def genisoimage(tmp_path):
    """build(options, files) -> image bytes, made by genisoimage as cloud-localds does."""
    if shutil.which("genisoimage") is None:
        pytest.fail("genisoimage is missing; scripts/bootstrap installs it")

    def build(options, files, subdirectory=None):
        root = tmp_path / "root"
        shutil.rmtree(str(root), ignore_errors=True)
        root.mkdir()
        for name, content in files.items():
            (root / name).write_bytes(content)
        if subdirectory:
            (root / subdirectory).mkdir()
        out = tmp_path / "seed.iso"
        subprocess.run(["genisoimage", "-quiet", "-o", str(out), "-V", "cidata"] + options + [str(root)], check=True)
        return out.read_bytes()

    return build


@pytest.mark.parametrize("options", [["-J", "-r"], ["-J"], ["-r"], ["-J", "-R", "-iso-level", "4"]])
def test_images_made_by_genisoimage_read_with_their_exact_names(genisoimage, options):
    files = dict(seed_files(NAME, USER_DATA, network_config="version: 2\n"))
    assert read_iso(genisoimage(options, files)) == files


def test_plain_iso9660_names_read_as_linux_shows_them(genisoimage):
    # Without Rock Ridge or Joliet, Linux shows the 8.3 names in lowercase,
    # and cloud-init would find no user-data: the module then rebuilds.
    files = read_iso(genisoimage([], dict(seed_files(NAME, USER_DATA))))
    assert set(files) == {"user_dat", "meta_dat", "vendor_d"}


def test_a_directory_on_the_image_makes_it_unreadable(genisoimage):
    with pytest.raises(UnreadableSeedError, match="not a plain file"):
        read_iso(genisoimage(["-J", "-r"], dict(seed_files(NAME, USER_DATA)), subdirectory="extra"))


def test_a_label_other_than_cidata_is_unreadable():
    image = bytearray(build_iso(seed_files(NAME, USER_DATA)))
    image[16 * 2048 + 40:16 * 2048 + 46] = b"CDROM "
    with pytest.raises(UnreadableSeedError, match="labelled 'CDROM'"):
        read_iso(bytes(image))


def test_every_truncation_is_unreadable():
    image = build_iso(seed_files(NAME, USER_DATA))
    for cut in list(range(0, len(image), 2048)) + [1, 16 * 2048 + 100, len(image) - 1]:
        with pytest.raises(UnreadableSeedError):
            read_iso(image[:cut])


def test_a_cut_upload_padded_with_zeros_never_reads_as_the_seed():
    # libvirt writes an upload into a raw volume created at the image's size,
    # so a cut-off upload leaves zeros, not a short file.
    files = dict(seed_files(NAME, USER_DATA))
    image = build_iso(files)
    for cut in range(0, len(image), 2048):
        padded = image[:cut] + bytes(len(image) - cut)
        try:
            assert read_iso(padded) != files, "cut at %d reads as the whole seed" % cut
        except UnreadableSeedError:
            pass


@pytest.mark.parametrize("data", [b"", b"x" * 100000, bytes(70000)])
def test_garbage_is_unreadable(data):
    with pytest.raises(UnreadableSeedError):
        read_iso(data)


@given(st.lists(st.tuples(st.integers(0, 1 << 31), st.integers(0, 255)), min_size=1, max_size=64),
       st.one_of(st.none(), st.integers(0, 1 << 31)))
@settings(max_examples=500, deadline=None)
def test_corrupt_images_fail_only_as_unreadable(mutations, cut):
    # Bytes flipped from the volume descriptors on (pycdlib 1.12 ran out of
    # memory on such images), optionally cut and zero-padded as libvirt leaves it.
    image = bytearray(build_iso_once())
    start = 16 * 2048
    for position, value in mutations:
        image[start + position % (len(image) - start)] = value
    if cut is not None:
        cut %= len(image)
        image = image[:cut] + bytes(len(image) - cut)
    try:
        read_iso(bytes(image))
    except UnreadableSeedError:
        pass


_BUILT = []


def build_iso_once():
    if not _BUILT:
        _BUILT.append(build_iso(seed_files(NAME, USER_DATA * 40, network_config="version: 2\n")))
    return _BUILT[0]


def test_changed_file_names_lists_added_removed_and_modified():
    assert changed_file_names({"a": b"1", "b": b"2", "c": b"3"}, {"a": b"1", "b": b"x", "d": b""}) == ["b", "c", "d"]
    assert changed_file_names({"a": b""}, {"a": b""}) == []


# --- ensure_seed and seed_removal over the fake --------------------------------------------------


@pytest.fixture
def hv():
    hypervisor = FakeHypervisor()
    hypervisor.add_pool("default")
    return hypervisor


def mutating(calls):
    return [call for call in calls if call in ("create_volume", "delete_volume", "upload_volume")]


def test_creates_a_raw_volume_sized_to_the_image(hv):
    files = seed_files(NAME, USER_DATA)
    result = ensure_seed(hv, "default", NAME, files)
    vol = hv.volume("default", SEED_VOLUME)
    assert result.changed and result.previous_state == "absent"
    assert vol.format == "raw" and vol.capacity == len(vol.content) == result.size
    assert read_iso(bytes(vol.content)) == dict(files)
    assert result.volume_path == "/var/lib/libvirt/images/default/" + SEED_VOLUME
    assert result.changed_files == ["meta-data", "user-data", "vendor-data"]
    assert result.actions == ["create volume %s (%d bytes)" % (SEED_VOLUME, result.size), "upload seed to volume " + SEED_VOLUME]
    assert result.as_dict()["files"] == [
        {"name": name, "sha256": hashlib.sha256(content).hexdigest(), "size": len(content)} for name, content in files.items()]


def test_same_files_are_unchanged_and_nothing_is_written(hv):
    files = seed_files(NAME, USER_DATA)
    ensure_seed(hv, "default", NAME, files)
    hv.calls.clear()
    result = ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA))
    assert not result.changed and result.changed_files == [] and result.actions == [] and result.reason is None
    assert mutating(hv.calls) == []
    assert result.size == hv.volume("default", SEED_VOLUME).capacity
    assert result.volume_path == "/var/lib/libvirt/images/default/" + SEED_VOLUME
    assert result.diff()["before"] == result.diff()["after"]


def test_a_seed_built_at_another_time_is_unchanged(hv, monkeypatch):
    files = seed_files(NAME, USER_DATA)
    monkeypatch.setattr(time, "time", lambda: 1700000000.0)
    hv.add_volume("default", SEED_VOLUME, build_iso(files))
    monkeypatch.undo()
    assert not ensure_seed(hv, "default", NAME, files).changed


def test_one_changed_file_rewrites_the_volume_and_names_the_file(hv):
    ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA))
    hv.calls.clear()
    files = seed_files(NAME, USER_DATA + "runcmd: [reboot]\n")
    result = ensure_seed(hv, "default", NAME, files)
    assert result.changed and result.changed_files == ["user-data"]
    assert result.reason == "files on volume %s differ: user-data" % SEED_VOLUME
    assert mutating(hv.calls) == ["delete_volume", "create_volume", "upload_volume"]
    assert read_iso(bytes(hv.volume("default", SEED_VOLUME).content)) == dict(files)
    diff = result.diff()
    assert diff["before"]["files"]["user-data"]["sha256"] == hashlib.sha256(USER_DATA.encode()).hexdigest()
    assert diff["after"]["files"]["user-data"]["sha256"] == hashlib.sha256(files["user-data"]).hexdigest()
    assert diff["before"]["files"]["meta-data"] == diff["after"]["files"]["meta-data"]


def test_adding_network_config_and_removing_it_again(hv):
    ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA))
    assert ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA, network_config="version: 2\n")).changed_files == ["network-config"]
    assert ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA)).changed_files == ["network-config"]
    assert set(read_iso(bytes(hv.volume("default", SEED_VOLUME).content))) == {"user-data", "meta-data", "vendor-data"}


def test_a_volume_cut_off_mid_upload_is_rebuilt_not_skipped(hv):
    # The reference's lesson: a cancelled upload leaves a truncated seed, and
    # skipping it would boot the VM without its cloud-init configuration.
    files = seed_files(NAME, USER_DATA)
    hv.cut_upload_after(SEED_VOLUME, 40000)
    with pytest.raises(errors.TransientError, match="uploading seed volume %s to pool default failed" % SEED_VOLUME):
        ensure_seed(hv, "default", NAME, files)
    # The partial volume was removed; now leave one behind as a dead connection would.
    hv.add_volume("default", SEED_VOLUME, build_iso(files)[:40000], capacity=len(build_iso(files)))
    result = ensure_seed(hv, "default", NAME, files)
    assert result.changed and result.previous_state == "unreadable"
    assert "truncated" in result.reason
    assert read_iso(bytes(hv.volume("default", SEED_VOLUME).content)) == dict(files)


def test_a_failed_upload_whose_cleanup_also_fails_says_the_next_run_rebuilds(hv):
    hv.cut_upload_after(SEED_VOLUME, 4096)
    hv.fail("delete_volume", errors.VIR_ERR_RPC, "connection closed")
    with pytest.raises(errors.TransientError, match="left in place and will be rebuilt on the next run") as raised:
        ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA))
    assert raised.value.code == errors.VIR_ERR_RPC
    assert len(hv.volume("default", SEED_VOLUME).content) == 4096


def test_a_zero_padded_cut_upload_is_rebuilt(hv):
    files = seed_files(NAME, USER_DATA)
    image = build_iso(files)
    hv.add_volume("default", SEED_VOLUME, image[:len(image) - 4096] + bytes(4096))
    result = ensure_seed(hv, "default", NAME, files)
    assert result.changed and read_iso(bytes(hv.volume("default", SEED_VOLUME).content)) == dict(files)


@pytest.mark.parametrize("content", [b"", b"not an iso at all", bytes(100000)])
def test_an_unreadable_volume_is_rebuilt(hv, content):
    hv.add_volume("default", SEED_VOLUME, content, capacity=max(len(content), 1))
    result = ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA))
    assert result.changed and result.previous_state == "unreadable" and result.previous is None
    assert result.reason.startswith("volume %s is not a readable seed: " % SEED_VOLUME)
    assert result.changed_files == ["meta-data", "user-data", "vendor-data"]
    assert result.diff()["before"] == {"volume": SEED_VOLUME, "state": "unreadable"}


def test_a_seed_larger_than_the_new_one_is_read_and_compared_file_by_file(hv):
    # 5 MiB of padding: larger than twice the new seed plus 1 MiB, still far below the read limit.
    old = seed_files(NAME, USER_DATA, network_config="version: 2\n")
    old["padding"] = bytes(5 * 1024 * 1024)
    hv.add_volume("default", SEED_VOLUME, build_iso(old))
    files = seed_files(NAME, USER_DATA)
    result = ensure_seed(hv, "default", NAME, files, check_mode=True)
    assert result.changed and result.previous_state == "present"
    assert result.changed_files == ["network-config", "padding"]
    assert result.reason == "files on volume %s differ: network-config, padding" % SEED_VOLUME
    assert result.as_dict()["previous_state"] == "present"
    assert ensure_seed(hv, "default", NAME, files).changed_files == ["network-config", "padding"]
    assert read_iso(bytes(hv.volume("default", SEED_VOLUME).content)) == dict(files)


def test_a_seed_of_a_user_data_larger_than_the_read_limit_is_still_read_back(hv):
    # Another writer's seed: seed_files itself refuses a user-data past MAX_FILE_BYTES.
    files = dict(seed_files(NAME), **{"user-data": bytes(MAX_SEED_READ + 1024 * 1024)})
    ensure_seed(hv, "default", NAME, files)
    assert hv.volume("default", SEED_VOLUME).capacity > MAX_SEED_READ
    assert not ensure_seed(hv, "default", NAME, files).changed


def test_a_volume_past_the_read_limit_is_not_read_and_every_file_is_listed(hv):
    hv.add_volume("default", SEED_VOLUME, b"", capacity=MAX_SEED_READ + 1)
    hv.calls.clear()
    result = ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA), check_mode=True)
    assert "download_volume" not in hv.calls
    assert result.previous_state == "unreadable" and result.as_dict()["previous_state"] == "unreadable"
    assert result.reason == "volume %s is %d bytes, too large for a seed (at most %d bytes are read back)" % (
        SEED_VOLUME, MAX_SEED_READ + 1, MAX_SEED_READ)
    assert result.changed_files == ["meta-data", "user-data", "vendor-data"]


def test_the_result_names_the_volume_path_never_path(hv):
    # Ansible adds a stat of the local file at any result's "path" (size, mode, owner...).
    result = ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA)).as_dict()
    assert "path" not in result
    assert result["volume_path"] == "/var/lib/libvirt/images/default/" + SEED_VOLUME


def test_a_qcow2_volume_of_that_name_is_replaced_by_a_raw_one(hv):
    hv.add_volume("default", SEED_VOLUME, b"QFI\xfb" + bytes(60), fmt="qcow2", capacity=1 << 30)
    hv.calls.clear()
    result = ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA))
    assert "download_volume" not in hv.calls, "a 1 GiB volume cannot hold this seed and is not read"
    assert "too large" in result.reason
    assert hv.volume("default", SEED_VOLUME).format == "raw"


def test_check_mode_predicts_and_touches_nothing(hv):
    files = seed_files(NAME, USER_DATA)
    predicted = ensure_seed(hv, "default", NAME, files, check_mode=True)
    assert predicted.changed and predicted.volume_path is None and hv.volume("default", SEED_VOLUME) is None
    real = ensure_seed(hv, "default", NAME, files)
    assert (predicted.actions, predicted.changed_files, predicted.size, predicted.files) == (
        real.actions, real.changed_files, real.size, real.files)

    changed = seed_files(NAME, "#!/bin/sh\necho hi\n")
    before = bytes(hv.volume("default", SEED_VOLUME).content)
    hv.calls.clear()
    predicted = ensure_seed(hv, "default", NAME, changed, check_mode=True)
    assert predicted.changed and predicted.changed_files == ["user-data"] and predicted.volume_path == real.volume_path
    assert mutating(hv.calls) == []
    assert bytes(hv.volume("default", SEED_VOLUME).content) == before
    assert not ensure_seed(hv, "default", NAME, files, check_mode=True).changed


def test_download_is_bounded_by_the_volume_capacity(hv):
    files = seed_files(NAME, USER_DATA)
    image = build_iso(files)
    # Bytes past the capacity (as on a volume whose file grew) are never read.
    hv.add_volume("default", SEED_VOLUME, image + b"junk" * 1000, capacity=len(image))
    limits = []
    download = hv.download_volume

    def spy(vol, limit=None):
        limits.append(limit)
        return download(vol, limit)

    hv.download_volume = spy
    assert not ensure_seed(hv, "default", NAME, files).changed
    assert limits == [len(image)]


def test_missing_pool_fails_with_not_found_even_in_check_mode(hv):
    for check_mode in (False, True):
        with pytest.raises(errors.NotFoundError, match="'nope'"):
            ensure_seed(hv, "nope", NAME, seed_files(NAME, USER_DATA), check_mode=check_mode)


def test_invalid_pool_name_fails_before_any_call(hv):
    with pytest.raises(errors.ValidationError):
        ensure_seed(hv, "../etc", NAME, seed_files(NAME, USER_DATA))
    assert hv.calls == []


def test_seed_removal(hv):
    ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA))
    assert seed_removal(hv, "default", NAME, check_mode=True).changed
    assert hv.volume("default", SEED_VOLUME) is not None
    assert seed_removal(hv, "default", NAME).changed
    assert hv.volume("default", SEED_VOLUME) is None
    assert not seed_removal(hv, "default", NAME).changed
    assert not seed_removal(hv, "missing-pool", NAME).changed


def proxy_domain_xml(name, pool="default"):
    """A domain as kvm_proxy defines it: its overlay and its seed as volumes of ``pool``."""
    return build_domain_xml(DomainParams(
        name=name, metadata=build_instance_element("uid", datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)),
        vcpus=1, memory_mib=512, pool=pool, overlay_volume=name + ".qcow2", seed_volume=seed_volume_name(name),
        interfaces=(NicInfo(mac=None, bridge="br0", network=None),)))


@pytest.mark.parametrize("check_mode", [True, False])
def test_the_seed_of_a_defined_domain_is_not_removed_and_the_refusal_names_it(hv, check_mode):
    ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA))
    hv.add_domain(NAME, proxy_domain_xml(NAME))
    hv.calls.clear()
    with pytest.raises(errors.PermanentError) as refused:
        seed_removal(hv, "default", NAME, check_mode=check_mode)
    assert refused.value.message.startswith(
        "cannot delete seed volume '%s' in pool 'default': it is a disk of domain '%s'" % (SEED_VOLUME, NAME))
    assert "kvm_proxy state=absent" in refused.value.message
    assert hv.volume("default", SEED_VOLUME) is not None and NAME in hv.domains
    assert mutating(hv.calls) == []


def test_a_seed_attached_by_path_counts_as_used_and_one_of_another_pool_does_not(hv):
    hv.add_pool("other")
    ensure_seed(hv, "default", NAME, seed_files(NAME, USER_DATA))
    path = hv.volume("default", SEED_VOLUME).path
    hv.add_domain("by-path", "<domain type='kvm'><name>by-path</name><devices><disk type='file' device='cdrom'>"
                             "<source file='%s'/></disk></devices></domain>" % path)
    hv.add_domain("elsewhere", proxy_domain_xml(NAME, pool="other"))
    with pytest.raises(errors.PermanentError, match="it is a disk of domain 'by-path', which could not boot"):
        seed_removal(hv, "default", NAME)
    del hv.domains["by-path"]
    assert seed_removal(hv, "default", NAME).changed


def test_genisoimage_seed_with_the_same_files_is_kept(hv, genisoimage):
    files = seed_files(NAME, USER_DATA)
    hv.add_volume("default", SEED_VOLUME, genisoimage(["-J", "-r"], dict(files)))
    assert not ensure_seed(hv, "default", NAME, files).changed


# --- the planners: pure functions of the request and the observation -------------------------------


def seed_observation(**fields):
    return SeedObservation(SEED_VOLUME, "pool handle", **fields)


def test_seed_plan_of_the_same_files_has_no_steps():
    request = SeedRequest.of("default", NAME, seed_files(NAME, USER_DATA))
    plan = plan_seed(request, seed_observation(vol="vol", path="/p", capacity=71680, files=dict(request.files)))
    assert plan.steps == () and not plan.result.changed
    assert (plan.result.volume_path, plan.result.size, plan.result.previous_state) == ("/p", 71680, "present")


def test_seed_plan_replaces_a_volume_in_one_write_step_that_reports_create_and_upload():
    request = SeedRequest.of("default", NAME, seed_files(NAME, USER_DATA))
    plan = plan_seed(request, seed_observation(vol="vol", path="/p", capacity=1, problem="volume x is not a readable seed"))
    assert [(step.operation, step.target) for step in plan.steps] == [("delete", "vol"), ("write", "pool handle")]
    assert plan.result.actions == ["delete volume " + SEED_VOLUME, "create volume %s (%d bytes)" % (
        SEED_VOLUME, len(request.image)), "upload seed to volume " + SEED_VOLUME]
    assert (plan.result.previous_state, plan.result.reason, plan.result.size) == (
        "unreadable", "volume x is not a readable seed", len(request.image))


def test_seed_removal_plan():
    assert plan_seed_removal(seed_observation(), "default").result.as_dict() == {
        "changed": False, "volume": SEED_VOLUME, "volume_path": None, "reason": None, "actions": []}
    plan = plan_seed_removal(seed_observation(vol="vol"), "default")
    assert [step.target for step in plan.steps] == ["vol"]
    assert plan.result.diff() == {"before": {"volume": SEED_VOLUME, "state": "present"},
                                  "after": {"volume": SEED_VOLUME, "state": "absent"}}


def test_missing_pool_says_how_to_get_one(hv):
    with pytest.raises(errors.NotFoundError, match="storage pool 'nope' does not exist on the hypervisor; create it"):
        ensure_seed(hv, "nope", NAME, seed_files(NAME, USER_DATA), check_mode=True)
