"""Volumes and metadata changed behind the collection's back, then one kvm_proxy_set converge.

Each case builds a stopped proxy on the lab (the small image, it never boots), tampers with one
thing by hand with virsh, converges again, and checks what libvirt holds. The next run repairs what
it owns (a garbage seed written again, a deleted base re-fetched, an overwritten marker checked
against its base and written again), fails naming what it cannot trust (a base whose content changed
under its VM), or leaves alone what is not its own any more (an owner edited by hand); a second
converge changes nothing.
"""

import hashlib
import subprocess

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import base_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import read_iso
from tests.lab import config

pytestmark = pytest.mark.integration

PREFIX = config.TEST_DOMAIN_PREFIX + "tamper-"
VM = PREFIX + "vm"
IMAGE = PREFIX + "tiny"
OWNER = PREFIX + "owner"


def _virsh(uri, *args, **run):
    completed = subprocess.run(["virsh", "-q", "-c", uri] + list(args), capture_output=True, check=False, **run)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


@pytest.fixture
def proxy(lab, lab_cleanup, run_playbook, tmp_path):
    """A converge function for one stopped proxy on the lab; the base's name and its sha256."""
    tiny = lab.images[config.TINY_QCOW2]
    base = base_volume_name(IMAGE, "qcow2", tiny["sha256"])
    lab_cleanup(domains=[VM], volumes=[VM + ".qcow2", VM + "-seed.iso", base, base + ".sha256"])
    playbook = tmp_path / "tamper.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Converge", "hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "Converge the set", "register": "converged", "egress_proxies.kvm.kvm_proxy_set": {
            "uri": lab.uri, "pool": lab.pool, "bridge": lab.bridge, "uid": OWNER, "gc": True, "gc_grace_period": 0,
            "image": {"name": IMAGE, "url": tiny["url"], "checksum": "sha256:" + tiny["sha256"]},
            "virt_type": lab.virt_type, "cpu_mode": lab.cpu_mode, "memory_mib": 128, "disk_size_gb": 1,
            "wait_for_ip": False, "vendor_data": "", "user_data": "#cloud-config\n",
            "proxies": "{{ proxies }}"}}]}]))

    def converge(proxies=({"name": VM, "state": "stopped"},)):
        run = run_playbook(str(playbook), {"proxies": list(proxies)})
        (result,) = run.task_results("Converge the set")
        return run, result

    run, _result = converge()
    assert run.rc == 0, run
    return converge, base, tiny["sha256"]


def _seed_files(lab):
    return read_iso(_virsh(lab.uri, "vol-download", "--pool", lab.pool, VM + "-seed.iso", "/dev/stdout"))


def test_a_stopped_proxys_seed_overwritten_with_garbage_is_written_again(lab, proxy, tmp_path):
    converge, _base, _sha = proxy
    good = _seed_files(lab)
    garbage = tmp_path / "garbage"
    # 64 KiB: past the volume descriptors at 32 KiB, so the image cannot still read as the old seed.
    garbage.write_bytes(hashlib.sha256(b"garbage").digest() * 2048)
    _virsh(lab.uri, "vol-upload", "--pool", lab.pool, VM + "-seed.iso", str(garbage))
    run, result = converge()
    assert run.rc == 0, run
    assert result["changed"], result
    assert _seed_files(lab) == good
    run, result = converge()
    assert run.rc == 0 and not result["changed"], run


def test_a_base_marker_overwritten_under_a_proxy_is_verified_against_the_base_and_written_again(lab, proxy, tmp_path):
    converge, base, sha = proxy
    zeros = tmp_path / "zeros"
    zeros.write_bytes(b"0" * 64)
    _virsh(lab.uri, "vol-upload", "--pool", lab.pool, base + ".sha256", str(zeros))
    run, result = converge()
    assert run.rc == 0, run
    # Verified once for the set, before its proxy, which then finds its base sound.
    (image,) = result["images"]
    assert image["actions"][0].startswith("verify base volume %s" % base), result
    (entry,) = result["proxies"]
    assert entry["actions"] == [], result
    assert _virsh(lab.uri, "vol-download", "--pool", lab.pool, base + ".sha256", "/dev/stdout").decode() == sha
    run, result = converge()
    assert run.rc == 0 and not result["changed"], run


def test_a_base_whose_content_changed_under_a_proxy_fails_naming_it_and_nothing_is_deleted(lab, proxy, tmp_path):
    converge, base, _sha = proxy
    before = _virsh(lab.uri, "vol-list", lab.pool).decode().split()
    _virsh(lab.uri, "vol-delete", "--pool", lab.pool, base + ".sha256")
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x5a" * 65536)
    _virsh(lab.uri, "vol-upload", "--pool", lab.pool, base, str(garbage))
    run, result = converge()
    assert run.rc != 0, run
    assert "base volume '%s'" % base in result["msg"] and "content changed" in result["msg"], result["msg"]
    assert "'%s.qcow2'" % VM in result["msg"], result["msg"]
    # Names and paths: every volume but the marker deleted by hand is still there.
    assert _virsh(lab.uri, "vol-list", lab.pool).decode().split() == [
        word for word in before if not word.endswith(base + ".sha256")]
    assert VM in _virsh(lab.uri, "list", "--all", "--name").decode()


def test_a_base_deleted_under_its_overlay_is_fetched_again(lab, proxy):
    converge, base, _sha = proxy
    _virsh(lab.uri, "vol-delete", "--pool", lab.pool, base)
    run, result = converge()
    assert run.rc == 0, run
    volumes = _virsh(lab.uri, "vol-list", lab.pool).decode()
    assert base in volumes and VM + ".qcow2" in volumes
    run, result = converge()
    assert run.rc == 0 and not result["changed"], run


def test_an_owner_edited_by_hand_puts_the_proxy_out_of_reach(lab, proxy):
    converge, _base, _sha = proxy
    xml = _virsh(lab.uri, "dumpxml", "--inactive", VM).decode()
    assert ">%s<" % OWNER in xml
    _virsh(lab.uri, "define", "/dev/stdin", input=xml.replace(">%s<" % OWNER, ">someone-else<").encode())
    # Not listed any more, with GC on: it is another owner's now and stays.
    run, result = converge(proxies=())
    assert run.rc == 0, run
    assert [entry["name"] for entry in result["foreign"]] == [VM], result
    assert VM in _virsh(lab.uri, "list", "--all", "--name").decode()
    # Listed again: left alone, not replaced or adopted.
    run, result = converge()
    (entry,) = result["proxies"]
    assert entry["outcome"] == "left alone (another owner)", result
    assert "someone-else" in _virsh(lab.uri, "dumpxml", "--inactive", VM).decode()
