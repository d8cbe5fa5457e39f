"""kvm_proxy on the lab's real libvirtd, with a small image that does not boot.

The playbook (playbooks/kvm_proxy.yml) walks one VM through its whole
lifecycle in check mode and for real; this file sets the stage, checks what
libvirt really holds afterwards, and makes sure a domain the collection did
not create survives every attempt to delete or replace it.
"""

import os
import subprocess

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import NotFoundError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import base_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import is_active
from tests.lab import config

pytestmark = pytest.mark.integration

PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks")
VM = config.TEST_DOMAIN_PREFIX + "proxy"
HAND_MADE = config.TEST_DOMAIN_PREFIX + "proxy-hand-made"
# An image name of its own, so the first run really fetches it and no other test's VM uses its base.
IMAGE_NAME = "eptest-proxy-tiny"


def volume_names(hypervisor, pool_name):
    pool = hypervisor.lookup_pool(pool_name)
    hypervisor.refresh_pool(pool)
    return {hypervisor.volume_name(vol) for vol in hypervisor.list_volumes(pool)}


@pytest.fixture
def tiny(lab):
    image = lab.images[config.TINY_QCOW2]
    return {"url": image["url"], "sha256": image["sha256"], "base": base_volume_name(IMAGE_NAME, "qcow2", image["sha256"])}


@pytest.fixture
def clean_vm(lab_cleanup, tiny):
    """Neither the VM, its volumes nor the test image's base are there before the test, nor after."""
    lab_cleanup(domains=[VM], volumes=[VM + ".qcow2", VM + "-seed.iso", tiny["base"] + ".sha256", tiny["base"]])


def extra_vars(lab, tiny):
    return {
        "uri": lab.uri, "pool": lab.pool, "pool_dir": lab.pool_dir, "bridge": lab.bridge, "vm_name": VM,
        "image_name": IMAGE_NAME, "image_url": tiny["url"], "image_sha256": tiny["sha256"],
        "virt_type": lab.virt_type, "cpu_mode": lab.cpu_mode,
    }


def test_lifecycle_present_drift_stopped_absent(lab, hypervisor, tiny, clean_vm, run_playbook):
    before = volume_names(hypervisor, lab.pool)

    playbook = os.path.join(PLAYBOOKS, "kvm_proxy.yml")
    run = run_playbook(playbook, extra_vars(lab, tiny))
    assert run.rc == 0, run
    # Every step ran (none skipped): the playbook's asserts are the test.
    with open(playbook) as handle:
        planned = [task["name"] for task in yaml.safe_load(handle)[0]["tasks"]]
    ran = [task for play in run.result["plays"] for task in play["tasks"]]
    assert [task["task"]["name"] for task in ran] == planned
    assert not [task["task"]["name"] for task in ran if task["hosts"]["localhost"].get("skipped")]

    # Nothing of the VM is left; what the run added is the cached base image and its marker only.
    with pytest.raises(NotFoundError):
        hypervisor.lookup_domain(VM)
    after = volume_names(hypervisor, lab.pool)
    assert not {VM + ".qcow2", VM + "-seed.iso"} & after
    assert after - before == {tiny["base"], tiny["base"] + ".sha256"}
    assert all(name.startswith("base-") for name in after - before)
    # The user-data's secret reached neither the output nor any result.
    assert "never-printed-secret" not in run.stdout + run.stderr


@pytest.fixture
def hand_made(lab, hypervisor, lab_cleanup):
    """A domain defined with virsh, no collection metadata, on a disk named like the one kvm_proxy would use."""
    disk = HAND_MADE + ".qcow2"
    lab_cleanup(domains=[HAND_MADE], volumes=[disk])
    subprocess.run(["virsh", "-q", "-c", lab.uri, "vol-create-as", lab.pool, disk, "64M", "--format", "qcow2"],
                   check=True, capture_output=True)
    xml = ("<domain type='{virt}'><name>{name}</name><memory unit='MiB'>128</memory><vcpu>1</vcpu>"
           "<os><type arch='x86_64' machine='q35'>hvm</type></os><devices>"
           "<disk type='volume' device='disk'><driver name='qemu' type='qcow2'/><source pool='{pool}' volume='{disk}'/>"
           "<target dev='vda' bus='virtio'/></disk></devices></domain>").format(
        virt=lab.virt_type, name=HAND_MADE, pool=lab.pool, disk=disk)
    dom = hypervisor.define_domain(xml)
    hypervisor.start_domain(dom)
    return dom


def test_an_unmanaged_domain_survives_delete_and_replace(lab, hypervisor, hand_made, run_playbook):
    # The refusal comes before any volume is looked at, so the base volume need not exist.
    run = run_playbook(os.path.join(PLAYBOOKS, "kvm_proxy_unmanaged.yml"), {
        "uri": lab.uri, "pool": lab.pool, "bridge": lab.bridge, "vm_name": HAND_MADE, "base_volume": "base-unused.qcow2",
    })
    assert run.rc == 0, run
    assert len(run.task_results("The failure names the domain, the reason and the way out")) == 4

    dom = hypervisor.lookup_domain(HAND_MADE)
    assert is_active(hypervisor.domain_state(dom))
    assert HAND_MADE + ".qcow2" in volume_names(hypervisor, lab.pool)


TASK = os.path.join(PLAYBOOKS, "kvm_proxy_task.yml")


def proxy_task(lab, tiny, **options):
    proxy = {
        "uri": lab.uri, "name": VM, "uid": "eptest-owner", "pool": lab.pool, "bridge": lab.bridge, "vcpus": 1,
        "memory_mib": 256, "disk_size_gb": 1, "virt_type": lab.virt_type, "cpu_mode": lab.cpu_mode,
        "image": {"name": IMAGE_NAME, "url": tiny["url"], "checksum": "sha256:" + tiny["sha256"]},
    }
    proxy.update(options)
    # An option set to None is left out (Ansible counts a present null in mutually exclusive options).
    return {key: value for key, value in proxy.items() if value is not None}


def run_task(run_playbook, proxy, check=False):
    run = run_playbook(TASK, {"proxy": proxy, "check": check, "diff": True})
    assert run.rc == 0, run
    return run.task_results("Show the result")[0]["kvm_proxy_result"]


@pytest.mark.parametrize("nic, message", [
    ({"bridge": "eptest-nobr0"}, "bridge 'eptest-nobr0' (option bridge) is not an interface of the hypervisor"),
    ({"bridge": None, "network": "eptest-nonet"}, "libvirt network 'eptest-nonet' (option network) is not defined"),
])
def test_a_missing_bridge_or_network_fails_before_anything_is_created(lab, hypervisor, tiny, clean_vm, run_playbook,
                                                                      nic, message):
    before = volume_names(hypervisor, lab.pool)
    for check in (True, False):
        result = run_task(run_playbook, proxy_task(lab, tiny, **nic), check=check)
        assert result["failed"] and message in result["msg"], result
        assert result["error_kind"] == "permanent" and result["changed"] is False
    with pytest.raises(NotFoundError):
        hypervisor.lookup_domain(VM)
    assert volume_names(hypervisor, lab.pool) == before


def test_a_failed_start_reports_changed_and_the_steps_done(lab, hypervisor, tiny, clean_vm, run_playbook):
    # lo exists but is no bridge: libvirt defines the domain and fails to start it.
    result = run_task(run_playbook, proxy_task(lab, tiny, bridge="lo"))
    assert result["failed"], result
    assert result["changed"] is True
    assert result["actions"] == ["fetch base image", "create overlay", "write seed", "define domain"]
    assert result["msg"].startswith("start domain failed after fetch base image, create overlay, write seed, define domain")


@pytest.mark.parametrize("volume", ["overlay", "seed"])
def test_a_stopped_vm_whose_volume_was_deleted_is_rebuilt(lab, hypervisor, tiny, clean_vm, run_playbook, volume):
    created = run_task(run_playbook, proxy_task(lab, tiny, state="stopped"))
    assert created["changed"] and not created.get("failed"), created
    subprocess.run(["virsh", "-q", "-c", lab.uri, "vol-delete", created["volumes"][volume], "--pool", lab.pool],
                   check=True, capture_output=True)

    predicted = run_task(run_playbook, proxy_task(lab, tiny, state="stopped"), check=True)
    rebuilt = run_task(run_playbook, proxy_task(lab, tiny, state="stopped"))
    assert not rebuilt.get("failed"), rebuilt
    assert predicted["actions"] == rebuilt["actions"]
    if volume == "seed":
        # The seed holds only the task's data: written again, the disk kept, nothing drifted.
        assert rebuilt["actions"] == ["write seed"] and rebuilt["drifted"] is False, rebuilt
    else:
        # A rebuild is never reported as no drift.
        assert "undefine domain" in rebuilt["actions"] and "define domain" in rebuilt["actions"]
        assert rebuilt["drifted"] is True
        assert any("is missing from storage pool" in warning for warning in rebuilt["warnings"])
    assert {created["volumes"]["overlay"], created["volumes"]["seed"]} <= volume_names(hypervisor, lab.pool)
    assert rebuilt["uid"] == "eptest-owner"

    started = run_task(run_playbook, proxy_task(lab, tiny))
    assert started["actions"] == ["start domain"] and not started.get("failed"), started
