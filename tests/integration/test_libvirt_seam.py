"""The seam and the builders against the lab's real libvirtd.

The reference never checked that libvirt accepts its metadata form or what
libvirt hands back; these tests do, with a domain built by _domain_xml and
volumes built by _volume_xml, streamed through libvirt for real.
"""

import datetime
import hashlib
import os
import subprocess

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import NotFoundError, PermanentError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt import domain_xml as _domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt import metadata as _metadata
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt import state as _state
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt import volume_xml as _volume_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import UNDEFINE_ALL, Hypervisor

NAME = "eptest-seam"
OVERLAY = NAME + ".qcow2"
SEED = NAME + "-seed.iso"
BASE = "eptest-seam-base.qcow2"


@pytest.fixture(autouse=True)
def clean(lab_cleanup):
    """No test domain or volume before a test, nor after it."""
    lab_cleanup(domains=[NAME], volumes=[OVERLAY, SEED, BASE])


def test_volume_upload_and_download_round_trip_through_streams(lab, hypervisor):
    pool = hypervisor.lookup_pool(lab.pool)
    payload = os.urandom(40 * 1024 * 1024 + 123)
    vol = hypervisor.create_volume(pool, _volume_xml.build_volume_xml(_volume_xml.VolumeSpec(SEED, len(payload), "raw")))
    chunks = [payload[i:i + 100000] for i in range(0, len(payload), 100000)]
    hypervisor.upload_volume(vol, iter(chunks))

    downloaded = b"".join(hypervisor.download_volume(vol))
    assert hashlib.sha256(downloaded).hexdigest() == hashlib.sha256(payload).hexdigest()
    # One chunk far above libvirt's per-message limit still goes through.
    hypervisor.upload_volume(vol, [payload])
    downloaded = b"".join(hypervisor.download_volume(vol))
    assert hashlib.sha256(downloaded).hexdigest() == hashlib.sha256(payload).hexdigest()
    assert b"".join(hypervisor.download_volume(vol, limit=1000)) == payload[:1000]
    info = _volume_xml.parse_volume_xml(hypervisor.volume_xml(vol))
    assert info.name == SEED
    assert info.capacity_bytes == len(payload)
    assert info.path == hypervisor.volume_path(vol) == os.path.join(lab.pool_dir, SEED)


def test_failed_upload_aborts_and_leaves_the_connection_usable(lab, hypervisor):
    pool = hypervisor.lookup_pool(lab.pool)
    vol = hypervisor.create_volume(pool, _volume_xml.build_volume_xml(_volume_xml.VolumeSpec(SEED, 1 << 20, "raw")))

    def broken():
        yield b"x" * 4096
        raise RuntimeError("source went away")

    with pytest.raises(RuntimeError):
        hypervisor.upload_volume(vol, broken())
    assert hypervisor.volume_name(hypervisor.lookup_volume(pool, SEED)) == SEED


def test_overlay_backing_store_and_refresh_read_qcow2_virtual_size(lab, hypervisor):
    pool = hypervisor.lookup_pool(lab.pool)
    source = os.path.join(lab.cache_dir, "mirror", "tiny.qcow2")
    with open(source, "rb") as handle:
        image = handle.read()
    base = hypervisor.create_volume(pool, _volume_xml.build_volume_xml(_volume_xml.VolumeSpec(BASE, len(image), "qcow2")))
    hypervisor.upload_volume(base, [image])
    hypervisor.refresh_pool(pool)
    base = hypervisor.lookup_volume(pool, BASE)
    virtual_size = int(subprocess.run(["qemu-img", "info", "--output=json", source], capture_output=True, check=True,
                                      text=True).stdout.split('"virtual-size":')[1].split(",")[0])
    assert _volume_xml.parse_volume_xml(hypervisor.volume_xml(base)).capacity_bytes == virtual_size

    spec = _volume_xml.VolumeSpec(OVERLAY, 2 << 30, "qcow2", backing_path=hypervisor.volume_path(base), backing_format="qcow2")
    overlay = hypervisor.create_volume(pool, _volume_xml.build_volume_xml(spec))
    info = _volume_xml.parse_volume_xml(hypervisor.volume_xml(overlay))
    assert info.backing_path == hypervisor.volume_path(base)
    assert info.capacity_bytes == 2 << 30
    assert info.disk_format == "qcow2"


def test_domain_from_the_builders_is_accepted_started_and_read_back(lab, hypervisor):
    pool = hypervisor.lookup_pool(lab.pool)
    hypervisor.create_volume(pool, _volume_xml.build_volume_xml(_volume_xml.VolumeSpec(OVERLAY, 64 << 20, "qcow2")))
    hypervisor.create_volume(pool, _volume_xml.build_volume_xml(_volume_xml.VolumeSpec(SEED, 64 << 10, "raw")))
    created = datetime.datetime(2026, 11, 29, 18, 0, 0, tzinfo=datetime.timezone.utc)
    digest = hashlib.sha256(b"spec").hexdigest()
    params = _domain_xml.DomainParams(
        name=NAME, metadata=_metadata.build_instance_element("uid-<&>\"'", created, digest), vcpus=1, memory_mib=128,
        pool=lab.pool, overlay_volume=OVERLAY, seed_volume=SEED,
        interfaces=(_domain_xml.NicInfo(mac="52:54:00:aa:bb:cc", bridge=lab.bridge, network=None),),
        virt_type=lab.virt_type, cpu_mode=lab.cpu_mode)
    dom = hypervisor.define_domain(_domain_xml.build_domain_xml(params))

    info = _domain_xml.parse_domain_xml(hypervisor.domain_xml(dom))
    assert (info.name, info.virt_type, info.vcpus, info.memory_mib) == (NAME, "qemu", 1, 128)
    assert info.volumes() == [(lab.pool, OVERLAY), (lab.pool, SEED)]
    assert info.macs() == ["52:54:00:aa:bb:cc"]
    meta = info.metadata
    assert (meta.managed, meta.uid, meta.created_at, meta.spec_digest) == (True, "uid-<&>\"'", created, digest)

    # How adopt_uids records a new owner: libvirt qualifies the unqualified element under the prefix.
    owner = _metadata.build_instance_element("uid-new", created, digest)
    hypervisor.set_domain_metadata(dom, _metadata.unqualified_xml(owner), _metadata.METADATA_PREFIX, _metadata.METADATA_URI,
                                   live=False)
    assert _domain_xml.parse_domain_xml(hypervisor.domain_xml(dom)).metadata.uid == "uid-new"

    hypervisor.start_domain(dom)
    assert hypervisor.domain_state(dom) == _state.VIR_DOMAIN_RUNNING
    hypervisor.set_domain_autostart(dom, True)
    assert hypervisor.domain_autostart(dom) is True
    hypervisor.destroy_domain(dom)
    assert hypervisor.domain_state(dom) == _state.VIR_DOMAIN_SHUTOFF
    hypervisor.undefine_domain(dom, UNDEFINE_ALL)
    with pytest.raises(NotFoundError):
        hypervisor.lookup_domain(NAME)


def test_libvirt_rejections_keep_code_and_message(lab, hypervisor):
    with pytest.raises(PermanentError) as caught:
        hypervisor.define_domain("<domain type='kvm'><name>%s</name></domain>" % NAME)
    assert caught.value.code is not None
    assert caught.value.libvirt_message
    with pytest.raises(NotFoundError) as missing:
        hypervisor.lookup_pool("eptest-no-such-pool")
    assert "eptest-no-such-pool" in missing.value.message


def test_session_uri_opens_and_lists(lab):
    with Hypervisor.open("qemu:///session") as session:
        assert isinstance(session.list_domains(), list)
        assert session.hostname()
