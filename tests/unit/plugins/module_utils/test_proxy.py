# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The kvm_proxy flow over the fake seam: the reference's kvm_test.go cases, plus drift, ownership and check mode.

Every scenario that changes something is run through ``converge``: check mode
first (which must not call a single mutating seam method), then for real,
and the two action lists must be equal: check mode predicts exactly.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import hashlib
import json

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import base_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.timing import Timing
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.addresses import POLL_INTERVAL
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import (
    DomainParams,
    NicInfo,
    build_domain_xml,
    parse_domain_xml,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import (
    ADDRESS_SOURCE_AGENT,
    ADDRESS_SOURCE_ARP,
    UNDEFINE_ALL,
    UNDEFINE_MANAGED_SAVE,
    UNDEFINE_SNAPSHOTS_METADATA,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import build_instance_element
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy import plan as steps
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy import request as proxy_request
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.flow import run_proxy
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import read_iso
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.nocloud import DEFAULT_VENDOR_DATA
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import (
    PAUSED,
    RUNNING,
    SHUTOFF,
    FakeHypervisor,
)
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_image_cache import (
    PROBE_RANGE,
    VIRTUAL_SIZE,
    ImageServer,
    qcow2_image,
)

NAME = "proxy-abc123def456"
UID = "11111111-2222-3333-4444-555555555555"
USER_DATA = "#cloud-config\npackages: [squid]\nchpasswd: {list: 'root:s3cr3t-do-not-print'}\n"
NOW = datetime.datetime(2026, 9, 8, 10, 0, 0, tzinfo=datetime.timezone.utc)
IMAGE = qcow2_image(b"debian 13 genericcloud " * 1000)
IMAGE_SHA = hashlib.sha256(IMAGE).hexdigest()
BASE = base_volume_name("debian-13", "qcow2", IMAGE_SHA)
MARKER = BASE + ".sha256"
OVERLAY = NAME + ".qcow2"
SEED = NAME + "-seed.iso"
GIB = 1024 ** 3

MUTATING = FakeHypervisor.MUTATING_METHODS
CREATE = [steps.CREATE_OVERLAY, steps.WRITE_SEED, steps.DEFINE_DOMAIN, steps.START_DOMAIN, steps.ENABLE_AUTOSTART]
REMOVE_RUNNING = [steps.SHUTDOWN_DOMAIN, steps.DELETE_OVERLAY, steps.DELETE_SEED, steps.UNDEFINE_DOMAIN]


class FakeTime:
    """monotonic() and sleep() for the polls: sleeping advances the clock, and hooks can act on the guest."""

    def __init__(self):
        self.now = 1000.0
        self.slept = []
        self.on_sleep = None

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.slept))


def params(**changes):
    base = dict(
        name=NAME,
        uid=UID,
        vcpus=2,
        memory_mib=2048,
        bridge="br0",
        image=dict(name="debian-13", url="https://images.example/debian-13.qcow2", checksum="sha256:" + IMAGE_SHA),
        user_data=USER_DATA,
    )
    base.update(changes)
    return base


def request(**changes):
    return proxy_request.ProxyRequest.from_params(params(**changes))


def ready_host(hostname="nas1"):
    """A hypervisor whose default pool already caches the image (base + marker), as kvm_base_image leaves it."""
    hv = FakeHypervisor(hostname=hostname)
    hv.add_pool("default")
    cache_image(hv)
    return hv


def cache_image(hv, pool="default"):
    hv.add_volume(pool, BASE, content=IMAGE, fmt="qcow2", capacity=VIRTUAL_SIZE)
    hv.add_volume(pool, MARKER, content=IMAGE_SHA.encode("ascii"))


@pytest.fixture
def fake_time():
    return FakeTime()


@pytest.fixture
def run(tmp_path, fake_time):
    """run(hv, request, check_mode=False, **flow options) -> the result dict, with its diff."""

    def run_flow(hv, req, check_mode=False, **options):
        options.setdefault("lock_dir", str(tmp_path / "locks"))
        timing = Timing(clock=lambda: NOW, sleep=fake_time.sleep, monotonic=fake_time.monotonic)
        return run_proxy(hv, req, check_mode, timing=timing, **options).module_result(diff_mode=True)

    return run_flow


@pytest.fixture
def converge(run):
    """converge(hv, request) -> real result, after checking that check mode predicted it and changed nothing."""

    def check_then_apply(hv, req, **options):
        before = len(hv.calls)
        predicted = run(hv, req, check_mode=True, **options)
        assert not MUTATING.intersection(hv.calls[before:]), hv.calls[before:]
        result = run(hv, req, **options)
        assert predicted["actions"] == result["actions"]
        assert predicted["changed"] == result["changed"] == bool(result["actions"])
        assert predicted["diff"]["after"]["state"] == result["diff"]["after"]["state"]
        return result

    return check_then_apply


def domain_of(hv, name=NAME):
    return parse_domain_xml(hv.domains[name].xml)


def pool_names(hv, pool="default"):
    return sorted(hv.pools[pool].volumes)


def assert_created(hv, name=NAME, running=True):
    dom = hv.domains.get(name)
    assert dom is not None, "domain not defined"
    assert dom.state == (RUNNING if running else SHUTOFF)
    assert dom.autostart is True
    overlay = hv.volume("default", name + ".qcow2")
    base = hv.volume("default", BASE)
    assert overlay is not None, "overlay volume missing"
    assert (overlay.format, overlay.backing_path, overlay.backing_format) == ("qcow2", base.path, "qcow2")
    assert overlay.capacity == 10 * GIB
    seed = hv.volume("default", name + "-seed.iso")
    assert seed is not None, "seed volume missing"
    assert seed.format == "raw" and seed.capacity == len(seed.content) > 0
    files = read_iso(bytes(seed.content))
    assert files["user-data"] == USER_DATA.encode()
    assert json.loads(files["meta-data"]) == {"instance-id": name, "local-hostname": name}
    assert files["vendor-data"] == DEFAULT_VENDOR_DATA.encode()
    disks = domain_of(hv, name).volumes()
    assert disks == [("default", name + ".qcow2"), ("default", name + "-seed.iso")]


def assert_gone(hv, name=NAME):
    assert name not in hv.domains
    assert pool_names(hv) == sorted([BASE, MARKER]), "only the cached base image and its marker may remain"


# --- Create ------------------------------------------------------------------------------------------


def test_create_on_a_fresh_host(converge):
    hv = ready_host()
    result = converge(hv, request())

    assert result["actions"] == CREATE
    assert result["changed"] is True and result["drifted"] is False
    assert result["id"] == "hosts/nas1/domains/" + NAME
    assert (result["name"], result["host"], result["uid"]) == (NAME, "nas1", UID)
    assert result["created_at"] == "2026-09-08T10:00:00Z"
    assert result["state"] == "Provisioning" and result["ip"] is None  # running, no address yet
    assert result["volumes"] == {"pool": "default", "overlay": OVERLAY, "seed": SEED, "base": BASE}
    assert_created(hv)

    info = domain_of(hv)
    assert (info.vcpus, info.memory_mib, info.virt_type) == (2, 2048, "kvm")
    assert info.nics[0].bridge == "br0"
    assert info.metadata.managed and info.metadata.uid == UID
    assert info.metadata.spec_digest == result["spec_digest"] == proxy_request.spec_digest(request().spec())
    # No image download, and exactly one upload: the seed.
    assert "download_volume" not in hv.calls[hv.calls.index("define_domain"):]
    assert hv.calls.count("upload_volume") == 1
    assert "list_domains" not in hv.calls


def test_create_fetches_the_image_on_first_use_only(converge):
    server = ImageServer()
    try:
        url = server.add("/debian-13.qcow2", IMAGE)
        hv = FakeHypervisor(hostname="nas1")
        hv.add_pool("default")
        first = request(image=dict(name="debian-13", url=url, checksum="sha256:" + IMAGE_SHA))

        result = converge(hv, first)
        assert result["actions"] == [steps.FETCH_IMAGE] + CREATE
        # Check mode's and the real run's plans read the header; the fetch downloads it once.
        assert server.ranges_asked("/debian-13.qcow2") == [PROBE_RANGE, PROBE_RANGE, None]
        assert bytes(hv.volume("default", BASE).content) == IMAGE
        assert_created(hv)

        # A second proxy with the same image on the same host reuses the cache.
        second = proxy_request.ProxyRequest.from_params(params(name="proxy-second", uid="uid-2", image=first.image.__dict__))
        result = converge(hv, second)
        assert result["actions"] == CREATE
        assert server.hit_count("/debian-13.qcow2") == 3
        assert_created(hv, "proxy-second")
    finally:
        server.close()


def test_create_resumes_after_the_image_fetch_fails(run, converge):
    server = ImageServer()
    try:
        # The plan's header read gets through; the download then fails.
        url = server.add("/debian-13.qcow2", IMAGE, failures=[200, 503])
        hv = FakeHypervisor(hostname="nas1")
        hv.add_pool("default")
        req = request(image=dict(name="debian-13", url=url, checksum="sha256:" + IMAGE_SHA), retries=0)
        with pytest.raises(errors.TransientError, match="fetch base image failed: .*503"):
            run(hv, req)
        assert pool_names(hv) == [] and not hv.domains

        result = converge(hv, req)
        assert result["actions"] == [steps.FETCH_IMAGE] + CREATE
        assert_created(hv)
    finally:
        server.close()


def test_create_is_idempotent_when_complete(converge, run):
    hv = ready_host()
    converge(hv, request())
    before = len(hv.calls)

    result = converge(hv, request())
    assert result["changed"] is False and result["actions"] == []
    assert result["id"] == "hosts/nas1/domains/" + NAME
    assert result["diff"]["before"] == result["diff"]["after"]
    for method, count in (("define_domain", 1), ("start_domain", 1), ("upload_volume", 1), ("create_volume", 2)):
        assert hv.calls.count(method) == count, method
    # A small constant conversation, and never a listing of every domain.
    second_run = hv.calls[before:]
    real_run = second_run[len(second_run) // 2:]
    assert "list_domains" not in second_run
    # The base's marker is read too (a marker gone or overwritten is trusted by no later run). The untouched
    # domain's state and autostart are asked once: the result describes it as observed.
    assert real_run == ["hostname", "lookup_domain", "domain_xml", "domain_state", "domain_autostart",
                        "lookup_pool", "lookup_volume", "lookup_volume", "download_volume", "volume_xml",
                        "domain_addresses", "domain_addresses"]


def test_host_option_spares_the_hostname_call(run):
    hv = ready_host()
    result = run(hv, request(host="hv-a.example.net"))
    assert result["id"] == "hosts/hv-a.example.net/domains/" + NAME
    assert "hostname" not in hv.calls


def fail_create_overlay(hv):
    hv.fail("create_volume", times=1, when=lambda pool, xml: "<name>%s</name>" % OVERLAY in xml)


def fail_create_seed(hv):
    hv.fail("create_volume", times=1, when=lambda pool, xml: "<name>%s</name>" % SEED in xml)


# Each case breaks the run after a different step; the next run must pick up
# where it stopped, without duplicating what exists, and end complete.
RESUME_CASES = {
    "transport drops at the domain lookup": (
        lambda hv: hv.fail("lookup_domain", errors.VIR_ERR_RPC, "connection reset", times=1), CREATE),
    "overlay creation fails": (fail_create_overlay, CREATE),
    "seed volume creation fails after the overlay exists": (fail_create_seed, CREATE[1:]),
    "seed upload cut off half-way": (lambda hv: hv.cut_upload_after(SEED, 2048), CREATE[1:]),
    "define fails after both volumes exist": (
        lambda hv: hv.fail("define_domain", times=1), [steps.DEFINE_DOMAIN, steps.START_DOMAIN, steps.ENABLE_AUTOSTART]),
    "start fails after define": (
        lambda hv: hv.fail("start_domain", times=1), [steps.START_DOMAIN, steps.ENABLE_AUTOSTART]),
    "autostart fails after start": (lambda hv: hv.fail("set_domain_autostart", times=1), [steps.ENABLE_AUTOSTART]),
}


@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_create_resumes_after_a_failure_at_each_step(run, converge, case):
    sabotage, resumed_actions = RESUME_CASES[case]
    hv = ready_host()
    sabotage(hv)
    with pytest.raises(errors.KvmError):
        run(hv, request())

    result = converge(hv, request())
    assert result["actions"] == resumed_actions
    assert_created(hv)
    assert hv.calls.count("define_domain") == 1 + (case == "define fails after both volumes exist")
    assert pool_names(hv) == sorted([BASE, MARKER, OVERLAY, SEED])
    assert converge(hv, request())["changed"] is False


def test_a_cut_seed_upload_that_could_not_be_cleaned_is_rebuilt(run, converge):
    hv = ready_host()
    hv.cut_upload_after(SEED, 2048)
    # The connection is gone, so the clean-up of the partial seed fails too.
    hv.fail("delete_volume", errors.VIR_ERR_RPC, "connection reset", times=1)
    with pytest.raises(errors.KvmError, match="left in place"):
        run(hv, request())
    assert len(hv.volume("default", SEED).content) == 2048

    result = converge(hv, request())
    assert result["actions"] == CREATE[1:]
    assert_created(hv)


def test_leftover_truncated_seed_is_replaced(converge):
    hv = ready_host()
    hv.add_volume("default", SEED, content=b"trunc")
    result = converge(hv, request())
    assert result["actions"] == CREATE
    assert_created(hv)
    assert hv.calls.count("upload_volume") == 1


def test_leftover_seed_with_the_right_files_is_kept(run, converge):
    hv = ready_host()
    run(hv, request())
    hv.destroy_domain(hv.domains[NAME])
    hv.undefine_domain(hv.domains[NAME], 0)
    hv.delete_volume(hv.volume("default", OVERLAY))

    result = converge(hv, request())
    assert result["actions"] == [steps.CREATE_OVERLAY, steps.DEFINE_DOMAIN, steps.START_DOMAIN, steps.ENABLE_AUTOSTART]
    assert_created(hv)


def test_leftover_overlay_is_reused_when_it_fits_and_replaced_when_not(converge):
    hv = ready_host()
    base = hv.volume("default", BASE)
    hv.add_volume("default", OVERLAY, fmt="qcow2", capacity=10 * GIB, backing_path=base.path, backing_format="qcow2")
    assert converge(hv, request())["actions"] == CREATE[1:]

    other = ready_host()
    other.add_volume("default", OVERLAY, fmt="qcow2", capacity=10 * GIB, backing_path="/srv/other-base.qcow2",
                     backing_format="qcow2")
    assert converge(other, request())["actions"] == [steps.DELETE_OVERLAY] + CREATE
    assert_created(other)


def test_stopped_domain_is_started_and_its_volumes_left_alone(run, converge):
    hv = ready_host()
    run(hv, request())
    hv.domains[NAME].state = SHUTOFF
    before = len(hv.calls)

    result = converge(hv, request())
    assert result["actions"] == [steps.START_DOMAIN]
    assert hv.domains[NAME].state == RUNNING
    # Its disks are looked up (a VM that must start needs them) and its seed read back, never rewritten.
    for method in ("define_domain", "upload_volume", "create_volume", "delete_volume"):
        assert method not in hv.calls[before:], method


@pytest.mark.parametrize("tamper", ["truncated", "garbage of the same size"])
def test_a_stopped_domains_broken_seed_is_written_again_before_it_starts(run, converge, tamper):
    hv = ready_host()
    run(hv, request())
    hv.domains[NAME].state = SHUTOFF
    seed = hv.volume("default", NAME + "-seed.iso")
    size = len(seed.content)
    seed.content = seed.content[:size // 2] if tamper == "truncated" else bytearray(b"\x5a" * size)
    result = converge(hv, request())
    assert result["actions"] == [steps.WRITE_SEED, steps.START_DOMAIN]
    assert hv.domains[NAME].state == RUNNING and len(hv.volume("default", NAME + "-seed.iso").content) == size
    assert converge(hv, request())["changed"] is False


def test_a_stopped_domains_intact_seed_is_left_alone(run, converge):
    hv = ready_host()
    run(hv, request(state="stopped"))
    before = len(hv.calls)
    assert converge(hv, request(state="stopped"))["changed"] is False
    assert "download_volume" in hv.calls[before:] and "upload_volume" not in hv.calls[before:]


def test_domain_started_meanwhile_counts_as_started(run):
    hv = ready_host()
    run(hv, request())
    hv.domains[NAME].state = SHUTOFF
    hv.fail("start_domain", errors.VIR_ERR_OPERATION_INVALID, "domain is already running", times=1)
    assert run(hv, request())["actions"] == [steps.START_DOMAIN]


def test_paused_domain_is_not_started_blindly(run):
    hv = ready_host()
    run(hv, request())
    hv.domains[NAME].state = PAUSED
    with pytest.raises(errors.PermanentError, match=r"is in state paused .*virsh resume"):
        run(hv, request())


def test_autostart_is_made_right_on_an_existing_domain(converge):
    hv = ready_host()
    converge(hv, request())
    assert converge(hv, request(autostart=False))["actions"] == [steps.DISABLE_AUTOSTART]
    assert hv.domains[NAME].autostart is False
    assert converge(hv, request())["actions"] == [steps.ENABLE_AUTOSTART]


def test_base_volume_instead_of_image(converge):
    hv = ready_host()
    result = converge(hv, request(image=None, base_volume=BASE))
    assert result["actions"] == CREATE
    assert result["volumes"]["base"] == BASE
    assert_created(hv)


def test_network_mac_and_tcg_reach_the_domain(converge):
    hv = ready_host()
    converge(hv, request(bridge=None, network="default", mac="52:54:00:AB:CD:EF", virt_type="qemu"))
    info = domain_of(hv)
    assert info.virt_type == "qemu"
    assert (info.nics[0].network, info.nics[0].mac) == ("default", "52:54:00:ab:cd:ef")
    assert "<cpu" not in hv.domains[NAME].xml  # cpu_mode defaults to none under TCG


def test_stopped_state_creates_without_starting(converge):
    hv = ready_host()
    result = converge(hv, request(state="stopped"))
    assert result["actions"] == [steps.CREATE_OVERLAY, steps.WRITE_SEED, steps.DEFINE_DOMAIN, steps.ENABLE_AUTOSTART]
    assert result["state"] == "Stopped"
    assert_created(hv, running=False)


# --- placement and host errors ---------------------------------------------------------------------


@pytest.mark.parametrize("changes, message", [
    (dict(name="Proxy_1"), "not a valid VM name"),
    (dict(name="base-debian"), "reserved"),
    (dict(state="running"), "state 'running' is not supported"),
    (dict(bridge="br0", network="default"), "mutually exclusive"),
    (dict(bridge=None), "needs bridge"),
    (dict(image=None), "needs image"),
    (dict(base_volume=BASE), "mutually exclusive"),
    (dict(image=dict(name="debian-13")), "needs a url"),
    (dict(image=dict(name="debian-13", url="ftp://x/y.qcow2")), "not an http"),
    (dict(vcpus=0), "vcpus must be"),
    (dict(memory_mib=64), "memory_mib must be"),
    (dict(disk_size_gb=0), "disk_size_gb must be"),
    (dict(mac="01:00:5e:00:00:01"), "multicast"),
    (dict(virt_type="xen"), "virt_type 'xen'"),
    (dict(cpu_mode="host"), "cpu_mode 'host'"),
    (dict(virt_type="qemu", cpu_mode="host-passthrough"), "needs virt_type kvm"),
    (dict(machine="q35; rm -rf /"), "not a valid machine type"),
    (dict(pool="../etc"), "not a valid storage pool name"),
    (dict(bridge="a-bridge-name-too-long"), "not a valid Linux interface name"),
    (dict(uid=" padded"), "owner uid"),
    (dict(host="bad host"), "not a valid host name"),
    (dict(meta_data={"when": datetime.date(2026, 1, 1)}), "meta_data cannot be written"),
    (dict(wait_timeout=-1), "wait_timeout must be"),
    (dict(on_drift="recreate"), "on_drift 'recreate'"),
])
def test_bad_requests_fail_before_the_hypervisor_is_touched(changes, message):
    with pytest.raises(errors.ValidationError, match=message):
        request(**changes)


def test_absent_needs_only_a_name():
    req = proxy_request.ProxyRequest.from_params({"name": NAME, "state": "absent", "pool": "default"})
    assert req.state == "absent"


def test_missing_pool_is_permanent_and_names_the_pool(run):
    hv = FakeHypervisor()
    hv.add_pool("other")
    with pytest.raises(errors.PermanentError, match="storage pool 'default' does not exist"):
        run(hv, request())
    assert not MUTATING.intersection(hv.calls)


def test_missing_base_volume_says_how_to_cache_it(run):
    hv = ready_host()
    with pytest.raises(errors.PermanentError, match="base volume 'base-gone.qcow2' is not in storage pool 'default'.*kvm_base_image"):
        run(hv, request(image=None, base_volume="base-gone.qcow2"))
    assert not MUTATING.intersection(hv.calls)


def test_disk_smaller_than_the_image_is_refused_before_creating_anything(run):
    hv = ready_host()
    hv.volume("default", BASE).capacity = 20 * GIB
    with pytest.raises(errors.ValidationError, match="disk_size_gb 10 is smaller"):
        run(hv, request())
    assert not MUTATING.intersection(hv.calls)


def test_rejected_domain_xml_is_permanent(run):
    hv = ready_host()
    hv.fail("define_domain", errors.VIR_ERR_CONFIG_UNSUPPORTED, "unsupported configuration: no q35 here")
    with pytest.raises(errors.PermanentError, match="no q35 here"):
        run(hv, request())


def test_host_errors_keep_their_class(run):
    hv = ready_host()
    hv.fail("lookup_domain", errors.VIR_ERR_INTERNAL_ERROR, "boom")
    with pytest.raises(errors.TransientError, match="boom"):
        run(hv, request())


def test_a_failed_step_says_how_far_the_run_got(run):
    hv = ready_host()
    hv.fail("start_domain", errors.VIR_ERR_INTERNAL_ERROR, "qemu died")
    with pytest.raises(errors.TransientError) as raised:
        run(hv, request())
    assert raised.value.message.startswith("start domain failed after create overlay, write seed, define domain: ")
    assert raised.value.message.endswith("qemu died")
    assert (raised.value.code, raised.value.libvirt_message) == (errors.VIR_ERR_INTERNAL_ERROR, "qemu died")


def test_a_pinned_checksum_in_capitals_is_the_same_image():
    upper = request(image=dict(name="debian-13", url="https://images.example/debian-13.qcow2", checksum="SHA256:" + IMAGE_SHA.upper()))
    assert proxy_request.spec_digest(upper.spec()) == proxy_request.spec_digest(request().spec())


# --- drift -------------------------------------------------------------------------------------------


def test_drift_replaces_the_vm_and_the_diff_says_what_changed(run, converge):
    hv = ready_host()
    created = run(hv, request())
    result = converge(hv, request(vcpus=4))

    assert result["drifted"] is True
    assert result["actions"] == REMOVE_RUNNING + CREATE
    assert domain_of(hv).vcpus == 4
    assert_created(hv)
    before, after = result["diff"]["before"]["spec"], result["diff"]["after"]["spec"]
    assert {key for key in after if before[key] != after[key]} == {"vcpus"}
    assert (before["vcpus"], after["vcpus"]) == (2, 4)
    assert result["diff"]["before"]["spec_digest"] == created["spec_digest"] != result["spec_digest"]
    assert converge(hv, request(vcpus=4))["changed"] is False


@pytest.mark.parametrize("changes", [
    dict(disk_size_gb=20),
    dict(user_data="#cloud-config\n"),
    dict(vendor_data=""),
    dict(meta_data={"public-keys": ["ssh-ed25519 AAAA"]}),
    dict(network_config={"version": 2}),
    dict(bridge="br1"),
    dict(mac="52:54:00:00:00:01"),
    dict(memory_mib=4096),
    dict(virt_type="qemu"),
    dict(cpu_mode="host-model"),
    dict(machine="pc"),
    dict(image=None, base_volume=BASE),
    dict(image=dict(name="debian-13", url="https://images.example/debian-13.qcow2", checksum="sha256:" + "0" * 64)),
])
def test_everything_that_shapes_the_vm_is_in_the_digest(changes):
    assert proxy_request.spec_digest(request(**changes).spec()) != proxy_request.spec_digest(request().spec())


@pytest.mark.parametrize("changes", [
    dict(autostart=False),
    dict(state="stopped"),
    dict(uid="someone-else"),
    dict(host="elsewhere"),
    dict(wait_for_ip=True),
    dict(image=dict(name="debian-13", url="https://mirror.example/debian-13.qcow2", checksum="sha256:" + IMAGE_SHA)),
])
def test_what_does_not_shape_the_vm_stays_out_of_the_digest(changes):
    assert proxy_request.spec_digest(request(**changes).spec()) == proxy_request.spec_digest(request().spec())


def test_the_spec_shows_cloud_init_data_as_digests_only():
    spec = request().spec()
    assert USER_DATA not in json.dumps(spec)
    assert spec["user_data_sha256"] == hashlib.sha256(USER_DATA.encode()).hexdigest()


def test_drift_in_the_seed_replaces_the_seed_content(run, converge):
    hv = ready_host()
    run(hv, request())
    converge(hv, request(user_data="#cloud-config\nhostname: other\n"))
    assert read_iso(bytes(hv.volume("default", SEED).content))["user-data"] == b"#cloud-config\nhostname: other\n"


def test_drift_of_a_stopped_domain_needs_no_destroy(run, converge):
    hv = ready_host()
    run(hv, request())
    hv.domains[NAME].state = SHUTOFF
    result = converge(hv, request(memory_mib=1024))
    assert result["actions"] == REMOVE_RUNNING[1:] + CREATE


def test_drift_ignored_leaves_the_vm_alone(run, converge):
    hv = ready_host()
    created = run(hv, request())
    before = len(hv.calls)
    result = converge(hv, request(vcpus=4, on_drift="ignore"))
    assert result["drifted"] is True and result["changed"] is False and result["actions"] == []
    assert domain_of(hv).vcpus == 2
    assert result["spec_digest"] == created["spec_digest"]
    assert not MUTATING.intersection(hv.calls[before:])


def test_replace_after_a_failure_half_way_finishes_on_the_next_run(run, converge):
    hv = ready_host()
    run(hv, request())
    hv.fail("delete_volume", times=1, when=lambda vol: vol.name == SEED)
    with pytest.raises(errors.TransientError):
        run(hv, request(vcpus=4))
    # The domain is still defined, so the next run sees the drift again and finishes the removal.
    assert NAME in hv.domains and hv.volume("default", OVERLAY) is None
    result = converge(hv, request(vcpus=4))
    assert result["actions"] == [steps.DELETE_SEED, steps.UNDEFINE_DOMAIN] + CREATE
    assert_created(hv)


def test_pool_change_cleans_the_old_pool(run, converge):
    hv = ready_host()
    hv.add_pool("fast")
    cache_image(hv, "fast")
    run(hv, request())
    result = converge(hv, request(pool="fast"))
    assert result["actions"] == REMOVE_RUNNING + CREATE
    assert pool_names(hv, "default") == sorted([BASE, MARKER])
    assert pool_names(hv, "fast") == sorted([BASE, MARKER, OVERLAY, SEED])


# --- ownership ---------------------------------------------------------------------------------------


def hand_made(hv, state=RUNNING):
    xml = ("<domain type='kvm'><name>%s</name><memory unit='MiB'>512</memory><vcpu>1</vcpu><devices>"
           "<disk type='volume' device='disk'><source pool='default' volume='%s'/><target dev='vda'/></disk>"
           "</devices></domain>" % (NAME, OVERLAY))
    hv.add_volume("default", OVERLAY, fmt="qcow2", capacity=GIB)
    return hv.add_domain(NAME, xml, state=state)


def owned_by(hv, uid):
    xml = build_domain_xml(DomainParams(
        name=NAME, metadata=build_instance_element(uid, NOW, "ab" * 32), vcpus=1, memory_mib=512, pool="default",
        overlay_volume=OVERLAY, seed_volume=SEED, interfaces=(NicInfo(mac=None, bridge="br0", network=None),)))
    return hv.add_domain(NAME, xml, state=RUNNING)


@pytest.mark.parametrize("state", ["present", "stopped", "absent"])
def test_an_unmanaged_domain_is_never_touched_without_force(run, state):
    hv = ready_host()
    hand_made(hv)
    with pytest.raises(errors.PermanentError) as raised:
        run(hv, request(state=state))
    assert "was not created by egress_proxies.kvm" in raised.value.message
    assert "force=true" in raised.value.message and "Nothing was changed" in raised.value.message
    assert not MUTATING.intersection(hv.calls)
    assert hv.domains[NAME].state == RUNNING and hv.volume("default", OVERLAY) is not None


def test_a_domain_of_another_uid_is_refused_and_named(run):
    hv = ready_host()
    owned_by(hv, "uid-of-someone-else")
    with pytest.raises(errors.PermanentError, match="owned by uid 'uid-of-someone-else', not by this task's uid '%s'" % UID):
        run(hv, request(state="absent"))
    assert not MUTATING.intersection(hv.calls)


def test_without_a_uid_any_managed_domain_is_ours(run, converge):
    hv = ready_host()
    run(hv, request())
    result = converge(hv, request(uid=None))
    assert result["changed"] is False and result["uid"] == UID


def test_a_new_domain_without_uid_gets_a_generated_one(run):
    hv = ready_host()
    result = run(hv, request(uid=None))
    assert len(result["uid"]) == 36 and domain_of(hv).metadata.uid == result["uid"]


def test_force_deletes_an_unmanaged_domain(converge):
    hv = ready_host()
    hand_made(hv)
    result = converge(hv, request(state="absent", force=True))
    assert result["actions"] == [steps.SHUTDOWN_DOMAIN, steps.DELETE_OVERLAY, steps.UNDEFINE_DOMAIN]
    assert_gone(hv)


def test_force_replaces_a_domain_of_another_uid(converge):
    hv = ready_host()
    owned_by(hv, "uid-of-someone-else")
    result = converge(hv, request(force=True))
    assert result["drifted"] is False
    assert result["actions"] == [steps.SHUTDOWN_DOMAIN, steps.UNDEFINE_DOMAIN] + CREATE
    assert domain_of(hv).metadata.uid == UID


# --- Delete ------------------------------------------------------------------------------------------


def absent(**changes):
    return request(state="absent", **changes)


def running_proxy(run, hv):
    run(hv, request())
    return hv


DELETE_CASES = {
    "running domain": (running_proxy, REMOVE_RUNNING),
    "stopped domain": (
        lambda run, hv: setattr(running_proxy(run, hv).domains[NAME], "state", SHUTOFF), REMOVE_RUNNING[1:]),
    "domain gone, volumes left": (
        lambda run, hv: (hv.add_volume("default", OVERLAY, fmt="qcow2"), hv.add_volume("default", SEED)),
        [steps.DELETE_OVERLAY, steps.DELETE_SEED]),
    "domain gone, seed left": (lambda run, hv: hv.add_volume("default", SEED), [steps.DELETE_SEED]),
    "domain without volumes": (
        lambda run, hv: (running_proxy(run, hv), hv.delete_volume(hv.volume("default", OVERLAY)),
                         hv.delete_volume(hv.volume("default", SEED))),
        [steps.SHUTDOWN_DOMAIN, steps.UNDEFINE_DOMAIN]),
    "nothing exists": (lambda run, hv: None, []),
}


@pytest.mark.parametrize("case", sorted(DELETE_CASES))
def test_delete_tolerates_every_already_gone_case(run, converge, case):
    setup, actions = DELETE_CASES[case]
    hv = ready_host()
    setup(run, hv)
    before = len(hv.calls)
    result = converge(hv, absent())
    assert result["actions"] == actions
    assert result["state"] is None and result["diff"]["after"] == {"state": "absent"}
    assert_gone(hv)
    if not actions:
        assert not MUTATING.intersection(hv.calls[before:])
    assert converge(hv, absent())["changed"] is False


def test_delete_with_a_missing_pool_still_removes_the_domain(run, converge):
    hv = ready_host()
    run(hv, request())
    del hv.pools["default"]
    result = converge(hv, absent())
    assert result["actions"] == [steps.SHUTDOWN_DOMAIN, steps.UNDEFINE_DOMAIN]
    assert NAME not in hv.domains


def test_delete_when_nothing_and_no_pool_exists():
    hv = FakeHypervisor()
    result = run_proxy(hv, absent()).as_dict()
    assert result["changed"] is False


@pytest.mark.parametrize("method, code", [
    ("destroy_domain", errors.VIR_ERR_OPERATION_INVALID),  # it stopped since we looked
    ("destroy_domain", errors.VIR_ERR_NO_DOMAIN),  # it was undefined since we looked
    ("undefine_domain", errors.VIR_ERR_NO_DOMAIN),
    ("delete_volume", errors.VIR_ERR_NO_STORAGE_VOL),
])
def test_delete_races_with_someone_else_deleting(run, method, code):
    hv = running_proxy(run, ready_host())
    hv.fail(method, code, "already gone", times=1)
    run(hv, absent())
    # The fake reports the injected error without acting, so finish what "someone else" did.
    if NAME in hv.domains and method != "destroy_domain":
        hv.undefine_domain(hv.domains[NAME], 0)
    assert run(hv, absent())["changed"] is (method == "delete_volume")
    assert_gone(hv)


@pytest.mark.parametrize("supported, flags_tried", [
    (UNDEFINE_ALL, [UNDEFINE_ALL]),
    (UNDEFINE_MANAGED_SAVE | UNDEFINE_SNAPSHOTS_METADATA, [UNDEFINE_ALL, 3]),
    (UNDEFINE_MANAGED_SAVE, [UNDEFINE_ALL, 3, 1]),
    (0, [UNDEFINE_ALL, 3, 1, 0]),
])
def test_undefine_falls_back_to_the_flags_an_older_libvirt_knows(run, supported, flags_tried):
    hv = running_proxy(run, ready_host())
    hv.undefine_supported_flags = supported
    tried = []
    undefine = hv.undefine_domain

    def recording(dom, flags):
        tried.append(flags)
        return undefine(dom, flags)

    hv.undefine_domain = recording
    run(hv, absent())
    assert tried == flags_tried
    assert_gone(hv)


def test_undefine_failing_otherwise_is_reported(run):
    hv = running_proxy(run, ready_host())
    hv.fail("undefine_domain", errors.VIR_ERR_INTERNAL_ERROR, "boom")
    with pytest.raises(errors.TransientError, match="boom"):
        run(hv, absent())


def test_delete_never_touches_other_vms_or_base_images(run):
    hv = ready_host()
    run(hv, request())
    run(hv, request(name="proxy-other", uid="uid-2"))
    run(hv, absent())
    assert sorted(hv.domains) == ["proxy-other"]
    assert pool_names(hv) == sorted([BASE, MARKER, "proxy-other.qcow2", "proxy-other-seed.iso"])


# --- stopped -----------------------------------------------------------------------------------------


def test_stopped_shuts_the_guest_down_gracefully(run, converge, fake_time):
    hv = running_proxy(run, ready_host())
    result = converge(hv, request(state="stopped"))
    assert result["actions"] == [steps.SHUTDOWN_DOMAIN]
    assert result["state"] == "Stopped" and "warnings" not in result
    assert "destroy_domain" not in hv.calls
    assert converge(hv, request(state="stopped"))["changed"] is False


def test_stopped_stops_hard_after_the_timeout(run, fake_time):
    hv = running_proxy(run, ready_host())
    hv.domains[NAME].honours_acpi = False
    result = run(hv, request(state="stopped", shutdown_timeout=30))
    assert result["actions"] == [steps.SHUTDOWN_DOMAIN]
    assert hv.domains[NAME].state == SHUTOFF
    assert sum(fake_time.slept) == 30
    assert "did not power off within 30 s" in result["warnings"][0]


@pytest.mark.parametrize("changes", [dict(state="absent"), dict(vcpus=4)], ids=["removed", "replaced"])
def test_a_running_vm_is_shut_down_gracefully_before_it_is_removed_or_replaced(run, converge, fake_time, changes):
    hv = running_proxy(run, ready_host())
    stopped_at = []
    original_delete = hv.delete_volume
    hv.delete_volume = lambda vol: (stopped_at.append(hv.domains[NAME].state), original_delete(vol))
    result = converge(hv, request(**changes))
    assert result["actions"][0] == steps.SHUTDOWN_DOMAIN
    # The ACPI request alone powered it off: nothing hard-stopped it, and its disks went only once it was off.
    assert "destroy_domain" not in hv.calls and "warnings" not in result
    assert stopped_at and set(stopped_at) == {SHUTOFF}


def test_a_guest_that_ignores_acpi_is_stopped_hard_after_shutdown_timeout_then_removed(run, fake_time):
    hv = running_proxy(run, ready_host())
    hv.domains[NAME].honours_acpi = False
    result = run(hv, absent(shutdown_timeout=20))
    assert result["actions"] == REMOVE_RUNNING
    assert sum(fake_time.slept) == 20 and NAME not in hv.domains
    assert "did not power off within 20 s of the ACPI shutdown request and was stopped hard" in result["warnings"][0]


def test_stopped_destroys_a_paused_guest(run, converge):
    hv = running_proxy(run, ready_host())
    hv.domains[NAME].state = PAUSED
    assert converge(hv, request(state="stopped"))["actions"] == [steps.DESTROY_DOMAIN]


# --- wait_for_ip -------------------------------------------------------------------------------------


def lease(hv, ip="198.18.0.150", source=ADDRESS_SOURCE_ARP):
    dom = hv.domains[NAME]
    mac = parse_domain_xml(dom.xml).macs()
    dom.addresses[source] = {"vnet0": {"hwaddr": mac[0] if mac else None, "addrs": [{"type": 0, "addr": ip, "prefix": 24}]}}


def test_wait_for_ip_polls_until_the_guest_has_an_address(run, fake_time):
    hv = ready_host()
    fake_time.on_sleep = lambda n: lease(hv, "198.18.0.150", ADDRESS_SOURCE_AGENT) if n == 3 else None
    result = run(hv, request(wait_for_ip=True, mac="52:54:00:12:34:56"))
    assert (result["state"], result["ip"]) == ("Running", "198.18.0.150")
    assert fake_time.slept == [POLL_INTERVAL] * 3


def test_wait_for_ip_gives_up_with_what_each_source_said(run, fake_time):
    hv = ready_host()
    fake_time.on_sleep = lambda n: setattr(hv.domains[NAME], "agent_error", errors.VIR_ERR_AGENT_UNRESPONSIVE)
    with pytest.raises(errors.TransientError) as raised:
        run(hv, request(wait_for_ip=True, wait_timeout=10))
    message = raised.value.message
    assert message.startswith("%s got no routable IPv4 within wait_timeout (10 s): %s (state running, bridge br0; "
                              "arp: no address yet, agent: guest agent not responding (VIR_ERR_AGENT_UNRESPONSIVE))" % (NAME, NAME)), message


def test_wait_for_ip_fails_at_once_when_the_guest_stops(run, fake_time):
    hv = ready_host()
    fake_time.on_sleep = lambda n: setattr(hv.domains[NAME], "state", SHUTOFF)
    with pytest.raises(errors.PermanentError) as raised:
        run(hv, request(wait_for_ip=True))
    assert raised.value.message.startswith(
        "%s stopped while its address was awaited: %s (state shutoff, bridge br0; arp: no address yet, agent: "
        "no address yet)" % (NAME, NAME)), raised.value.message
    assert len(fake_time.slept) == 1 and raised.value.completed_actions == CREATE


def test_an_existing_running_domain_reports_its_address(run):
    hv = running_proxy(run, ready_host())
    lease(hv)
    result = run(hv, request())
    assert (result["state"], result["ip"], result["ip_sources"]) == ("Running", "198.18.0.150", {"arp": "198.18.0.150"})


# --- results -----------------------------------------------------------------------------------------


def test_user_data_never_appears_in_the_result(converge, run):
    hv = ready_host()
    for req in (request(), request(vcpus=3), absent()):
        result = converge(hv, req)
        assert "s3cr3t" not in json.dumps(result)


def test_check_mode_on_a_fresh_host_predicts_the_new_vm(run):
    hv = ready_host()
    result = run(hv, request(), check_mode=True)
    assert result["changed"] is True and result["actions"] == CREATE
    assert result["state"] is None and result["uid"] == UID
    assert result["diff"]["before"] == {"state": "absent"}
    assert result["diff"]["after"]["spec"] == request().spec()
    assert not hv.domains and pool_names(hv) == sorted([BASE, MARKER])


def test_check_mode_does_not_invent_the_uid_a_new_vm_will_get(run):
    # A random uid in check mode would differ from the one the real run records.
    predicted = run(ready_host(), request(uid=None), check_mode=True)
    assert predicted["uid"] is None and predicted["diff"]["after"]["uid"] is None


# --- a replacement gets everything it needs before it removes the old VM -----------------------------

NEW_IMAGE = qcow2_image(b"debian 13 point release " * 1000)
NEW_IMAGE_SHA = hashlib.sha256(NEW_IMAGE).hexdigest()
NEW_BASE = base_volume_name("debian-13", "qcow2", NEW_IMAGE_SHA)


def assert_untouched(hv, volumes):
    assert hv.domains[NAME].state == RUNNING
    assert pool_names(hv) == volumes
    assert domain_of(hv).metadata.uid == UID


def new_image_request(url, checksum=NEW_IMAGE_SHA, **changes):
    changes.setdefault("retries", 0)
    return request(image=dict(name="debian-13", url=url, checksum="sha256:" + checksum), **changes)


REPLACEMENT_FAILURES = {
    "the new image answers 404": (dict(status=404), {}, errors.PermanentError, "404"),
    "the new image's checksum does not match": (dict(body=qcow2_image(b"tampered")), {}, errors.PermanentError, "checksum says"),
    "retries run out": (dict(failures=[503, 503]), dict(retries=1), errors.TransientError, "503"),
}


@pytest.mark.parametrize("case", sorted(REPLACEMENT_FAILURES))
def test_a_replacement_that_cannot_get_its_image_leaves_the_running_vm(run, case):
    route, changes, error_class, message = REPLACEMENT_FAILURES[case]
    server = ImageServer()
    try:
        url = server.add("/debian-13-new.qcow2", route.pop("body", NEW_IMAGE), **route)
        hv = running_proxy(run, ready_host())
        volumes = pool_names(hv)
        with pytest.raises(error_class, match=message) as raised:
            run(hv, new_image_request(url, **changes))
        # Found while planning (the image header is probed) or while fetching: either way before the removal.
        assert raised.value.message.endswith("domain '%s' was left as it was (running) and still needs replacing" % NAME)
        assert raised.value.completed_actions == []
        assert_untouched(hv, volumes)
    finally:
        server.close()


def test_a_replacement_onto_a_too_small_disk_is_refused_before_anything(run):
    hv = running_proxy(run, ready_host())
    hv.add_volume("default", NEW_BASE, content=NEW_IMAGE, fmt="qcow2", capacity=20 * GIB)
    hv.add_volume("default", NEW_BASE + ".sha256", content=NEW_IMAGE_SHA.encode("ascii"))
    volumes = pool_names(hv)
    before = len(hv.calls)
    with pytest.raises(errors.ValidationError, match="disk_size_gb 10 is smaller.*was left as it was"):
        run(hv, new_image_request("https://images.example/debian-13-new.qcow2"))
    assert not MUTATING.intersection(hv.calls[before:])
    assert_untouched(hv, volumes)


@pytest.mark.parametrize("check_mode", [True, False])
def test_an_image_larger_than_the_disk_fails_before_it_is_downloaded(run, check_mode):
    large = qcow2_image(b"a 20 GiB disk " * 1000, virtual_size=20 * GIB)
    server = ImageServer()
    try:
        url = server.add("/large.qcow2", large)
        hv = ready_host()
        before = len(hv.calls)
        with pytest.raises(errors.ValidationError, match="disk_size_gb 10 is smaller than the 21474836480 bytes"):
            run(hv, new_image_request(url, checksum=hashlib.sha256(large).hexdigest()), check_mode=check_mode)
        assert server.ranges_asked("/large.qcow2") == [PROBE_RANGE], "only the header may be read"
        assert not MUTATING.intersection(hv.calls[before:])
    finally:
        server.close()


def test_a_replacement_fetches_first_then_removes_then_builds(converge, run):
    server = ImageServer()
    try:
        url = server.add("/debian-13-new.qcow2", NEW_IMAGE)
        hv = running_proxy(run, ready_host())
        result = converge(hv, new_image_request(url))
        assert result["drifted"] is True
        assert result["actions"] == [steps.FETCH_IMAGE] + REMOVE_RUNNING + CREATE
        assert domain_of(hv).metadata.uid == UID
        assert result["volumes"]["base"] == NEW_BASE
    finally:
        server.close()


# --- a failed run says what it changed ----------------------------------------------------------------


def test_a_failed_run_reports_the_steps_it_completed(run):
    hv = ready_host()
    hv.fail("start_domain", errors.VIR_ERR_INTERNAL_ERROR, "qemu died")
    with pytest.raises(errors.TransientError) as raised:
        run(hv, request())
    assert raised.value.completed_actions == [steps.CREATE_OVERLAY, steps.WRITE_SEED, steps.DEFINE_DOMAIN]
    result = raised.value.to_result()
    assert result["changed"] is True and result["actions"] == raised.value.completed_actions


def test_wait_for_ip_giving_up_still_reports_the_build(run, fake_time):
    hv = ready_host()
    with pytest.raises(errors.TransientError, match="no routable IPv4") as raised:
        run(hv, request(wait_for_ip=True, wait_timeout=4))
    assert raised.value.to_result()["changed"] is True
    assert raised.value.completed_actions == CREATE


@pytest.mark.parametrize("changes, message", [
    (dict(bridge="br9"), "bridge 'br9' \\(option bridge\\) is not an interface of the hypervisor"),
    (dict(bridge=None, network="lab"), "libvirt network 'lab' \\(option network\\) is not defined"),
])
def test_a_missing_bridge_or_network_is_permanent_before_anything(run, changes, message):
    hv = ready_host()
    with pytest.raises(errors.PermanentError, match=message) as raised:
        run(hv, request(**changes))
    assert raised.value.kind == "permanent"
    assert not MUTATING.intersection(hv.calls)


def test_a_connection_without_the_interface_driver_skips_the_bridge_check(converge):
    hv = ready_host()
    hv.fail("lookup_interface", errors.VIR_ERR_NO_SUPPORT, "this function is not supported by the connection driver")
    assert converge(hv, request(bridge="br9"))["actions"] == CREATE


# --- a VM whose own volume is gone is rebuilt ---------------------------------------------------------


def test_a_stopped_vm_whose_disk_was_deleted_is_rebuilt_and_reported_drifted(run, converge):
    hv = running_proxy(run, ready_host())
    hv.domains[NAME].state = SHUTOFF
    del hv.pools["default"].volumes[OVERLAY]
    result = converge(hv, request())
    assert result["actions"] == [steps.DELETE_SEED, steps.UNDEFINE_DOMAIN] + CREATE
    # A rebuild is never reported as no drift; the warning says why.
    assert result["drifted"] is True
    assert "volume '%s' of domain '%s' is missing" % (OVERLAY, NAME) in result["warnings"][0]
    assert_created(hv)
    assert domain_of(hv).metadata.uid == UID


def test_a_stopped_vm_whose_seed_was_deleted_gets_it_written_again_and_keeps_its_disk(run, converge):
    hv = running_proxy(run, ready_host())
    hv.domains[NAME].state = SHUTOFF
    disk = hv.volume("default", OVERLAY)
    del hv.pools["default"].volumes[SEED]
    result = converge(hv, request())
    # The seed holds only the request's data: written again, the disk stays and nothing drifted.
    assert result["actions"] == [steps.WRITE_SEED, steps.START_DOMAIN]
    assert result["drifted"] is False and "warnings" not in result
    assert hv.volume("default", OVERLAY) is disk
    assert_created(hv)


# --- a SHA256SUMS that moves on is a new image -------------------------------------------------------


def test_a_new_release_in_the_checksum_file_replaces_the_vm(run, converge):
    server = ImageServer()
    try:
        url = server.add("/debian-13.qcow2", IMAGE)
        sums = server.add("/SHA256SUMS", ("%s  debian-13.qcow2\n" % IMAGE_SHA).encode())
        listed = request(image=dict(name="debian-13", url=url, checksum="sha256:" + sums))
        hv = ready_host()
        created = converge(hv, listed)
        assert created["actions"] == CREATE and created["volumes"]["base"] == BASE
        assert converge(hv, listed)["changed"] is False

        server.add("/debian-13.qcow2", NEW_IMAGE)
        server.add("/SHA256SUMS", ("%s  debian-13.qcow2\n" % NEW_IMAGE_SHA).encode())
        result = converge(hv, listed)
        assert result["drifted"] is True
        assert result["actions"] == [steps.FETCH_IMAGE] + REMOVE_RUNNING + CREATE
        assert result["volumes"]["base"] == NEW_BASE
        assert hv.volume("default", OVERLAY).backing_path == hv.volume("default", NEW_BASE).path
        assert result["diff"]["after"]["spec"]["image"]["checksum"] == "sha256:" + NEW_IMAGE_SHA
    finally:
        server.close()


# --- owners: kept across replacements, another owner's matching VM reported, adoption -----------------


def test_a_replacement_keeps_the_owner_when_the_task_gives_none(run, converge):
    hv = ready_host()
    run(hv, request(uid=None))
    owner = domain_of(hv).metadata.uid
    predicted = run(hv, request(uid=None, vcpus=4), check_mode=True)
    result = converge(hv, request(uid=None, vcpus=4))
    assert domain_of(hv).metadata.uid == owner == result["uid"] == predicted["uid"]
    assert predicted["diff"]["after"]["uid"] == result["diff"]["after"]["uid"] == owner


def test_a_matching_vm_of_another_owner_is_reported_and_left_alone(run):
    hv = ready_host()
    run(hv, request(uid="previous-owner", autostart=False))
    hv.domains[NAME].state = SHUTOFF
    before = len(hv.calls)
    result = run(hv, request())
    assert result["changed"] is False and result["actions"] == []
    assert result["uid"] == "previous-owner"
    assert "owned by uid 'previous-owner', not '%s'" % UID in result["warnings"][0]
    assert "adopt_uids" in result["warnings"][0]
    assert result["diff"]["before"] == result["diff"]["after"]
    assert not MUTATING.intersection(hv.calls[before:])


@pytest.mark.parametrize("state, what", [("present", "replace"), ("absent", "delete")])
def test_a_drifted_vm_of_another_owner_is_still_refused_naming_adopt_uids(run, state, what):
    hv = ready_host()
    run(hv, request(uid="previous-owner"))
    with pytest.raises(errors.PermanentError) as raised:
        run(hv, request(vcpus=4, state=state))
    assert "refusing to %s it" % what in raised.value.message
    assert "add 'previous-owner' to adopt_uids to take it over" in raised.value.message


@pytest.mark.parametrize("adopt_uids", [["previous-owner"], ["*"]])
def test_adopt_uids_records_the_new_owner_in_place(run, converge, adopt_uids):
    hv = ready_host()
    created = run(hv, request(uid="previous-owner"))
    result = converge(hv, request(adopt_uids=adopt_uids))
    assert result["actions"] == [steps.RECORD_OWNER]
    assert result["uid"] == UID and result["diff"]["after"]["uid"] == UID
    assert result["diff"]["before"]["uid"] == "previous-owner"
    metadata = domain_of(hv).metadata
    assert (metadata.uid, metadata.spec_digest) == (UID, created["spec_digest"])
    assert metadata.created_at_raw == created["created_at"]
    assert converge(hv, request(adopt_uids=adopt_uids))["changed"] is False


def test_adopt_uids_replaces_a_drifted_vm_as_the_new_owner(run, converge):
    hv = ready_host()
    run(hv, request(uid="previous-owner"))
    result = converge(hv, request(vcpus=4, adopt_uids=["previous-owner"]))
    assert result["drifted"] is True and result["actions"] == REMOVE_RUNNING + CREATE
    assert domain_of(hv).metadata.uid == UID


def test_adopt_uids_needs_a_uid():
    with pytest.raises(errors.ValidationError, match="adopt_uids needs uid"):
        request(uid=None, adopt_uids=["previous-owner"])


# --- the diff says what happens ------------------------------------------------------------------------


def test_a_replacement_diff_shows_autostart_before(run, converge):
    hv = ready_host()
    run(hv, request(autostart=False))
    result = converge(hv, request(autostart=False, vcpus=4))
    assert result["diff"]["before"]["autostart"] is False


def test_stopping_a_paused_vm_shows_paused_before(run, converge):
    hv = running_proxy(run, ready_host())
    hv.domains[NAME].state = PAUSED
    result = converge(hv, request(state="stopped"))
    assert (result["diff"]["before"]["state"], result["diff"]["after"]["state"]) == ("paused", "stopped")


def test_check_mode_describes_a_vm_it_would_replace_as_it_is(run):
    hv = ready_host()
    created = run(hv, request())
    predicted = run(hv, request(vcpus=4), check_mode=True)
    assert predicted["actions"] == REMOVE_RUNNING + CREATE
    for key in ("state", "libvirt_state", "created_at", "uid", "spec_digest", "mac", "autostart"):
        assert predicted[key] == created[key], key


def test_a_removal_reports_the_pool_its_volumes_were_found_in(run, converge):
    hv = ready_host()
    hv.add_pool("fast")
    cache_image(hv, "fast")
    run(hv, request(pool="fast"))
    result = converge(hv, absent())
    assert result["volumes"]["pool"] == "fast"
    assert pool_names(hv, "fast") == sorted([BASE, MARKER])
