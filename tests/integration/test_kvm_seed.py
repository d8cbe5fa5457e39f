"""kvm_seed on the real lab: libvirtd's storage pool, libvirt's upload and download streams.

Modules run through ansible-playbook on /usr/bin/python3 (Debian's python3-libvirt 9.0 and
python3-pycdlib 1.12), as on a real hypervisor. What the module wrote is read back through
libvirt and parsed by readers that are not the module's: genisoimage's isoinfo (Rock Ridge,
Joliet and plain ISO 9660 names) and util-linux's blkid (the label cloud-init looks for).
cloud-init itself reading the seed inside a booted guest is the end-to-end tests' job.
"""

import json
import os
import subprocess

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import NotFoundError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import (
    VolumeSpec,
    build_volume_xml,
    parse_volume_xml,
)
from tests.integration import lab_objects

pytestmark = pytest.mark.integration

PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks")
NAME = "eptest-seed"
VOLUME = NAME + "-seed.iso"
SECRET = "s3cr3t-7d41e2b9"
USER_DATA = """#cloud-config
hostname: eptest-seed
chpasswd:
  expire: false
  users:
    - {name: debian, password: %s, type: text}
write_files:
  - path: /etc/eptest
    content: "written from the seed\\n"
""" % SECRET
CHANGED_USER_DATA = USER_DATA.replace("written from the seed", "written from the changed seed")
DEFAULT_VENDOR_DATA = {"packages": ["qemu-guest-agent"], "runcmd": [["systemctl", "enable", "--now", "qemu-guest-agent"]]}
# What Ansible adds to a result that has a "path" key, from a stat of that path on the host running the module.
FILE_STAT_KEYS = {"path", "uid", "gid", "owner", "group", "mode", "state"}


@pytest.fixture(autouse=True)
def clean(lab_cleanup):
    """No domain of the seed's name nor seed volume before a test, nor after it."""
    lab_cleanup(domains=[NAME], volumes=[VOLUME])


@pytest.fixture
def task(lab, run_playbook):
    """task(check=False, diff=False, **options) -> (kvm_seed result dict, the whole run's stdout)."""

    def run(check=False, diff=False, **options):
        extra = {"uri": lab.uri, "pool": lab.pool, "seed_name": NAME, "check": check, "diff": diff}
        extra.update(options)
        played = run_playbook(os.path.join(PLAYBOOKS, "kvm_seed_task.yml"), extra_vars=extra)
        assert played.result is not None, played
        return played.task_results("Show the result")[0]["kvm_seed_result"], played.stdout

    return run


def volume_bytes(hypervisor, lab):
    """The seed volume's bytes, downloaded through libvirt."""
    vol = hypervisor.lookup_volume(hypervisor.lookup_pool(lab.pool), VOLUME)
    return b"".join(hypervisor.download_volume(vol))


def isoinfo(image_path, *args):
    return subprocess.run(["isoinfo", "-i", image_path] + list(args), capture_output=True, check=True).stdout


def read_with_isoinfo(image_path, extension):
    """{name: bytes} of the root directory as isoinfo sees it with -R (Rock Ridge) or -J (Joliet)."""
    listing = isoinfo(image_path, extension, "-f").decode("utf-8").split()
    return {path.lstrip("/"): isoinfo(image_path, extension, "-x", path) for path in listing}


def second_reader(tmp_path, image):
    """What other ISO readers find in the image: label, Rock Ridge files, Joliet files, plain names."""
    path = tmp_path / "seed.iso"
    path.write_bytes(image)
    label = subprocess.run(["blkid", "-p", "-o", "value", "-s", "LABEL", str(path)], capture_output=True, text=True,
                           check=True).stdout.strip()
    descriptor = isoinfo(str(path), "-d").decode("utf-8")
    assert "Volume id: cidata" in descriptor
    assert "Rock Ridge signatures" in descriptor and "Joliet with UCS level 3 found" in descriptor
    plain = sorted(isoinfo(str(path), "-f").decode("ascii").split())
    return label, read_with_isoinfo(str(path), "-R"), read_with_isoinfo(str(path), "-J"), plain


def test_check_real_idempotent_then_one_file_changed(lab, hypervisor, run_playbook, tmp_path):
    played = run_playbook(os.path.join(PLAYBOOKS, "kvm_seed.yml"), extra_vars={
        "uri": lab.uri, "pool": lab.pool, "pool_dir": lab.pool_dir, "seed_name": NAME,
        "user_data": USER_DATA, "changed_user_data": CHANGED_USER_DATA,
    })
    assert played.rc == 0, played
    # user-data holds a password: no result, diff or invocation shows it.
    assert SECRET not in played.stdout and "chpasswd" not in played.stdout

    image = volume_bytes(hypervisor, lab)
    vol = hypervisor.lookup_volume(hypervisor.lookup_pool(lab.pool), VOLUME)
    info = parse_volume_xml(hypervisor.volume_xml(vol))
    # Created raw; libvirt's directory pool probes the content and then reports an ISO image as "iso".
    assert (info.disk_format, info.capacity_bytes) == ("iso", len(image))
    assert played.task_results("Write the seed")[0]["size"] == len(image)

    label, rock_ridge, joliet, plain = second_reader(tmp_path, image)
    assert label == "cidata"
    assert rock_ridge == joliet
    assert sorted(rock_ridge) == ["meta-data", "user-data", "vendor-data"]
    assert rock_ridge["user-data"] == CHANGED_USER_DATA.encode("utf-8")
    assert yaml.safe_load(rock_ridge["meta-data"]) == {"instance-id": NAME, "local-hostname": NAME}
    assert yaml.safe_load(rock_ridge["vendor-data"]) == DEFAULT_VENDOR_DATA
    assert plain == ["/META_DATA.;1", "/USER_DATA.;1", "/VENDOR_DATA.;1"]


def _write_prefix(hypervisor, lab, image, length):
    """Leave the volume as an upload cut off after ``length`` bytes leaves it: full size, zeros after the cut."""
    pool = hypervisor.lookup_pool(lab.pool)
    lab_objects.delete_volume(hypervisor, pool, VOLUME)
    vol = hypervisor.create_volume(pool, build_volume_xml(VolumeSpec(VOLUME, len(image), "raw")))
    hypervisor.upload_volume(vol, [image[:length]])
    written = volume_bytes(hypervisor, lab)
    assert len(written) == len(image) and written[:length] == image[:length] and written != image


@pytest.mark.parametrize("cut, before_state, reason", [
    (34 * 1024, "unreadable", "is not a readable seed: no ISO 9660 volume descriptor"),
    (48 * 1024, "present", "differ: meta-data, user-data, vendor-data"),
])
def test_a_seed_cut_off_mid_upload_is_rebuilt(lab, hypervisor, task, tmp_path, cut, before_state, reason):
    created, _stdout = task(user_data=USER_DATA)
    assert created["changed"], created
    image = volume_bytes(hypervisor, lab)
    _write_prefix(hypervisor, lab, image, cut)

    predicted, _stdout = task(user_data=USER_DATA, check=True, diff=True)
    assert predicted["changed"], predicted
    assert reason in predicted["reason"]
    assert predicted["diff"]["before"]["state"] == before_state
    assert predicted["actions"][0] == "delete volume " + VOLUME

    repaired, _stdout = task(user_data=USER_DATA, diff=True)
    assert repaired["changed"] and repaired["actions"] == predicted["actions"], repaired
    label, rock_ridge, _joliet, _plain = second_reader(tmp_path, volume_bytes(hypervisor, lab))
    assert label == "cidata" and rock_ridge["user-data"] == USER_DATA.encode("utf-8")

    again, _stdout = task(user_data=USER_DATA, diff=True)
    assert not again["changed"] and again["diff"]["before"] == again["diff"]["after"], again


def test_diff_content_shows_changed_lines_only_when_asked(lab, hypervisor, task):
    network_config = {"version": 2, "ethernets": {"primary": {"match": {"name": "en*"}, "dhcp4": True}}}
    created, _stdout = task(user_data=USER_DATA, meta_data={"role": "egress"}, network_config=network_config)
    assert created["changed"] and [f["name"] for f in created["files"]][-1] == "network-config", created

    changed = dict(user_data=CHANGED_USER_DATA, meta_data={"role": "egress-2"}, network_config=network_config)
    hidden, stdout = task(check=True, diff=True, **changed)
    assert hidden["changed"] and hidden["changed_files"] == ["meta-data", "user-data"], hidden
    assert "prepared" not in hidden["diff"]
    assert SECRET not in stdout and "written from" not in stdout

    shown, stdout = task(check=True, diff=True, diff_content=True, **changed)
    prepared = shown["diff"]["prepared"]
    assert '-    content: "written from the seed\\n"\n+    content: "written from the changed seed\\n"\n' in prepared
    assert '-  "role": "egress"\n+  "role": "egress-2"\n' in prepared
    assert "network-config" not in prepared and "vendor-data" not in prepared
    # Nothing was written in check mode.
    assert b"written from the seed" in volume_bytes(hypervisor, lab)


def test_absent_check_real_idempotent(lab, hypervisor, task):
    task(user_data=USER_DATA)
    predicted, _stdout = task(seed_state="absent", check=True, diff=True)
    assert predicted["changed"] and predicted["actions"] == ["delete volume " + VOLUME], predicted
    assert predicted["diff"]["before"]["state"] == "present" and predicted["diff"]["after"]["state"] == "absent"
    assert volume_bytes(hypervisor, lab)

    removed, _stdout = task(seed_state="absent", diff=True)
    assert removed["changed"], removed
    with pytest.raises(NotFoundError):
        hypervisor.lookup_volume(hypervisor.lookup_pool(lab.pool), VOLUME)

    for check in (True, False):
        again, _stdout = task(seed_state="absent", check=check, diff=True)
        assert not again["changed"] and again["diff"]["before"] == again["diff"]["after"], again


def test_absent_refuses_the_seed_of_a_defined_domain_and_keeps_both(lab, hypervisor, task):
    created, _stdout = task(user_data=USER_DATA)
    assert created["changed"], created
    # Defined, never started: the seed as a cdrom of the pool, as kvm_proxy attaches it.
    hypervisor.define_domain(
        "<domain type='%s'><name>%s</name><memory unit='MiB'>128</memory><vcpu>1</vcpu>"
        "<os><type arch='x86_64' machine='q35'>hvm</type></os><devices>"
        "<disk type='volume' device='cdrom'><driver name='qemu' type='raw'/><source pool='%s' volume='%s'/>"
        "<target dev='sda' bus='scsi'/><readonly/></disk><controller type='scsi' index='0' model='virtio-scsi'/>"
        "</devices></domain>" % (lab.virt_type, NAME, lab.pool, VOLUME))
    image = volume_bytes(hypervisor, lab)

    for check in (True, False):
        refused, _stdout = task(seed_state="absent", check=check)
        assert refused["failed"] and not refused.get("changed"), refused
        assert refused["error_kind"] == "permanent"
        assert "cannot delete seed volume '%s' in pool '%s': it is a disk of domain '%s'" % (
            VOLUME, lab.pool, NAME) in refused["msg"]
    hypervisor.lookup_domain(NAME)
    assert volume_bytes(hypervisor, lab) == image


def test_missing_pool_fails_clearly(lab, task):
    failed, _stdout = task(pool="eptest-no-such-pool", user_data=USER_DATA)
    assert failed["failed"], failed
    assert "storage pool 'eptest-no-such-pool'" in failed["msg"] and lab.uri in failed["msg"]
    assert failed["error_kind"] == "not_found"
    assert json.dumps(failed).count(SECRET) == 0


def test_cloud_config_dictionaries_are_written_as_cloud_config_documents(lab, hypervisor, task, tmp_path):
    user_data = {"hostname": NAME, "users": ["default"], "write_files": [{"path": "/etc/eptest", "content": "from a dict\n"}],
                 "chpasswd": {"expire": False, "users": [{"name": "debian", "password": SECRET, "type": "text"}]}}
    vendor_data = {"packages": ["qemu-guest-agent"], "package_update": False}
    created, stdout = task(user_data=user_data, vendor_data=vendor_data)
    assert created["changed"] and created["previous_state"] == "absent", created
    # The user-data's values ("default", the VM's name) are not masked in the result, nor is the secret shown.
    assert created["volume"] == VOLUME and created["volume_path"] == lab.pool_dir + "/" + VOLUME
    assert SECRET not in stdout and "chpasswd" not in stdout

    label, rock_ridge, joliet, _plain = second_reader(tmp_path, volume_bytes(hypervisor, lab))
    assert label == "cidata" and rock_ridge == joliet
    for name, expected in (("user-data", user_data), ("vendor-data", vendor_data)):
        assert rock_ridge[name].startswith(b"#cloud-config\n"), rock_ridge[name][:40]
        assert yaml.safe_load(rock_ridge[name]) == expected

    # The same dictionaries with their keys in another order are the same documents.
    reordered = dict(user_data=dict(reversed(list(user_data.items()))), vendor_data=dict(reversed(list(vendor_data.items()))))
    again, _stdout = task(diff=True, **reordered)
    assert not again["changed"] and again["diff"]["before"] == again["diff"]["after"], again


def test_the_result_describes_the_volume_not_a_local_file(lab, hypervisor, task):
    created, _stdout = task(user_data=USER_DATA)
    assert created["changed"], created
    old_size = len(volume_bytes(hypervisor, lab))

    # In check mode the volume still holds the old seed: a stat of its file would report the old size.
    larger = USER_DATA + "".join("# padding line %d\n" % number for number in range(3000))
    predicted, _stdout = task(user_data=larger, check=True)
    assert predicted["changed"] and not FILE_STAT_KEYS & set(predicted), predicted
    new_size = predicted["size"]
    assert new_size > old_size and predicted["actions"][1] == "create volume %s (%d bytes)" % (VOLUME, new_size)
    assert predicted["volume_path"] == lab.pool_dir + "/" + VOLUME

    written, _stdout = task(user_data=larger)
    assert written["size"] == new_size == len(volume_bytes(hypervisor, lab)), written
    assert not FILE_STAT_KEYS & set(written)
