"""kvm_base_image on the real lab: libvirtd, the lab's HTTP mirror, and HTTP servers the tests control.

Modules run through ansible-playbook on /usr/bin/python3 (Debian's python3-libvirt 9.0 and
python3-requests 2.28), as on a real hypervisor. The tests' shared ImageServer
(tests/unit/image_server.py), started here, makes the interesting moments deterministic: it counts
requests, answers "Range: bytes=0-N" as mirrors do, and can hold a response after a given number of
bytes until the test releases it (to kill the module mid-upload, or to make two runs overlap).
"""

import json
import os
import signal
import subprocess
import threading
import time
import uuid

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import (
    VolumeSpec,
    build_volume_xml,
    parse_volume_xml,
)
from tests.integration import lab_objects
from tests.lab import config
from tests.lab.images import sha256_file
from tests.unit.image_server import ImageServer

pytestmark = pytest.mark.integration

PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks")
RHYTHM = os.path.join(PLAYBOOKS, "kvm_base_image.yml")
TASK = os.path.join(PLAYBOOKS, "kvm_base_image_task.yml")
# Every volume these tests make starts like this; `scripts/lab down` and the fixture remove them.
BASE_PREFIX = "base-eptest-img"
OVERLAY = "eptest-img-vm.qcow2"
MODULE_PROCESS = "AnsiballZ_kvm_base_image"


def qemu_img_info(path):
    completed = subprocess.run(["qemu-img", "info", "-U", "--output=json", path], capture_output=True, text=True,
                               check=True)
    return json.loads(completed.stdout)


@pytest.fixture
def server():
    with ImageServer() as srv:
        yield srv


@pytest.fixture(scope="session")
def sources(lab, tmp_path_factory):
    """Local images: the lab's tiny qcow2, a different small one, a bigger one to kill uploads in, and
    images that are not self-contained: qcow2 with a backing file, qcow2 with an external data file,
    and QED with a backing file (which only libvirt's probe after the upload reads)."""
    directory = tmp_path_factory.mktemp("kvm-base-image-sources")
    made = {"v1": lab.images[config.TINY_QCOW2]["path"]}
    for name, megabytes in (("v2", 2), ("big", 24)):
        raw = str(directory / (name + ".raw"))
        with open(raw, "wb") as handle:
            handle.write(os.urandom(megabytes * 1024 * 1024))
        made[name] = str(directory / (name + ".qcow2"))
        subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, made[name]], check=True)
        os.unlink(raw)
    for name, options in (("backing", ["-f", "qcow2", "-b", "/etc/hostname", "-F", "raw"]),
                          ("data-file", ["-f", "qcow2", "-o", "data_file=%s" % (directory / "data.raw")]),
                          ("qed-backing", ["-f", "qed", "-b", "/etc/hostname", "-F", "raw"])):
        made[name] = str(directory / name)
        subprocess.run(["qemu-img", "create", "-q"] + options + [made[name]] + ([] if "-b" in options else ["1G"]),
                       check=True)
    return {name: {"path": path, "sha256": sha256_file(path), "size": os.path.getsize(path),
                   "virtual_size": qemu_img_info(path)["virtual-size"]}
            for name, path in made.items()}


def _remove_test_volumes(hypervisor, pool):
    # Overlays first: they are what keeps a base in use.
    names = sorted((hypervisor.volume_name(v) for v in hypervisor.list_volumes(pool)),
                   key=lambda name: not name.startswith("eptest-img-"))
    for name in names:
        if name.startswith((BASE_PREFIX, "eptest-img-")):
            lab_objects.delete_volume(hypervisor, pool, name)


@pytest.fixture(autouse=True)
def clean_test_volumes(lab, hypervisor):
    """No volume of these tests (a name starting with a test prefix) before a test, nor after it."""
    pool = hypervisor.lookup_pool(lab.pool)
    _remove_test_volumes(hypervisor, pool)
    yield
    _remove_test_volumes(hypervisor, pool)


def image_volumes(hypervisor, lab, image):
    pool = hypervisor.lookup_pool(lab.pool)
    prefix = "base-%s" % image
    return sorted(n for n in (hypervisor.volume_name(v) for v in hypervisor.list_volumes(pool)) if n.startswith(prefix))


def volume_name(image, sha):
    return "base-%s-%s.qcow2" % (image, sha[:16])


@pytest.fixture
def task(lab, run_playbook):
    """task(image_name, **options) -> the kvm_base_image result dict, failures included."""

    def run(image_name, check=False, diff=False, **options):
        extra = {"uri": lab.uri, "pool": lab.pool, "image_name": image_name, "check": check, "diff": diff}
        extra.update(("image_" + key, value) for key, value in options.items())
        played = run_playbook(TASK, extra_vars=extra)
        assert played.result is not None, played
        return played.task_results("Show the result")[0]["kvm_base_image_result"]

    return run


def module_processes():
    """Pids of processes started from this test process that run kvm_base_image."""
    me = str(os.getpid())
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as handle:
                if MODULE_PROCESS.encode() not in handle.read():
                    continue
            ancestor = pid
            while ancestor not in ("0", "1", me):
                with open("/proc/%s/stat" % ancestor) as handle:
                    ancestor = handle.read().rsplit(")", 1)[1].split()[1]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if ancestor == me:
            found.append(int(pid))
    return found


def wait_for(predicate, what, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(0.1)


def in_background(function, *args, **kwargs):
    outcome = {}

    def target():
        outcome["result"] = function(*args, **kwargs)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def mirror_requests(token):
    with open(config.MIRROR_LOGFILE) as log:
        return [line for line in log if token in line]


def test_fetch_from_the_mirror_check_real_idempotent(lab, hypervisor, run_playbook):
    """Fresh fetch of the lab's bootable image, then re-runs that send no request for it to the mirror."""
    image = lab.images[config.GUEST_IMAGE]
    token = uuid.uuid4().hex
    played = run_playbook(RHYTHM, extra_vars={
        "uri": lab.uri, "pool": lab.pool, "pool_dir": lab.pool_dir, "image_name": "eptest-img",
        # The query string lets this test find its own requests in the shared mirror's log.
        "image_url": "%s?eptest=%s" % (image["url"], token),
        "image_checksum": "sha256:%sSHA256SUMS" % lab.mirror_url,
        "expected_sha256": image["sha256"], "expected_size": image["size"],
        "expected_virtual_size": qemu_img_info(image["path"])["virtual-size"],
    })
    assert played.rc == 0, played

    # Four runs: check mode reads the header (the mirror ignores Range and answers 200; only the
    # first bytes are read), the real run downloads, the idempotent runs send nothing.
    requests = mirror_requests(token)
    assert len(requests) == 2, requests
    for request in requests:
        assert '"GET /%s?eptest=%s HTTP/1.1" 200' % (config.GUEST_IMAGE, token) in request

    result = played.task_results("Cache the image")[0]
    volume = volume_name("eptest-img", image["sha256"])
    assert image_volumes(hypervisor, lab, "eptest-img") == [volume, volume + ".sha256"]
    # Byte for byte the published image, so qemu-img reads the same disk.
    assert sha256_file(result["volume_path"]) == image["sha256"]
    cached, source = qemu_img_info(result["volume_path"]), qemu_img_info(image["path"])
    for key in ("format", "virtual-size", "cluster-size", "format-specific"):
        assert cached.get(key) == source.get(key), key
    assert result["size"] == source["virtual-size"]
    # libvirt itself reads it as the qcow2 it is, with the image's virtual size.
    pool = hypervisor.lookup_pool(lab.pool)
    info = parse_volume_xml(hypervisor.volume_xml(hypervisor.lookup_volume(pool, volume)))
    assert (info.disk_format, info.capacity_bytes, info.path) == ("qcow2", source["virtual-size"], result["volume_path"])
    marker = hypervisor.lookup_volume(pool, volume + ".sha256")
    assert b"".join(hypervisor.download_volume(marker)) == image["sha256"].encode("ascii")


def test_checksum_change_keeps_the_base_an_overlay_uses(lab, hypervisor, server, sources, task):
    image = "eptest-img-cs"
    url = server.serve("/cloud/image.qcow2", sources["v1"]["path"])
    old = volume_name(image, sources["v1"]["sha256"])
    new = volume_name(image, sources["v2"]["sha256"])
    first = task(image, url=url, checksum="sha256:" + sources["v1"]["sha256"])
    assert (first["changed"], first["volume"]) == (True, old), first

    # A VM disk backing onto the base, as kvm_proxy makes it; libvirt reports the backing store.
    pool = hypervisor.lookup_pool(lab.pool)
    hypervisor.create_volume(pool, build_volume_xml(VolumeSpec(OVERLAY, 1 << 30, "qcow2", first["volume_path"], "qcow2")))
    assert parse_volume_xml(hypervisor.volume_xml(hypervisor.lookup_volume(pool, OVERLAY))).backing_path == first["volume_path"]

    # Upstream publishes a new release at the same URL.
    server.serve("/cloud/image.qcow2", sources["v2"]["path"])
    options = dict(url=url, checksum="sha256:" + sources["v2"]["sha256"], prune=True)
    predicted = task(image, check=True, diff=True, **options)
    second = task(image, diff=True, **options)
    for result in (predicted, second):
        assert (result["changed"], result["downloaded"], result["volume"]) == (True, True, new), result
        assert result["removed"] == [] and result["kept"] == [{"volume": old, "used_by": [OVERLAY], "used_by_domains": []}]
        assert result["diff"]["before"] == {"volume": new, "sha256": None, "state": "absent", "bases": [old]}
        assert result["diff"]["after"]["bases"] == sorted([old, new])
    assert image_volumes(hypervisor, lab, image) == sorted([old, old + ".sha256", new, new + ".sha256"])
    assert sha256_file(first["volume_path"]) == sources["v1"]["sha256"]  # the overlay's base is untouched
    assert sha256_file(second["volume_path"]) == sources["v2"]["sha256"]

    # Removing the old release fails, names the overlay and removes nothing.
    refused = task(image, state="absent", checksum="sha256:" + sources["v1"]["sha256"])
    assert refused.get("failed") is True, refused
    assert "'%s'" % OVERLAY in refused["msg"] and old in refused["msg"]
    assert refused["error_kind"] == "permanent"
    assert old in image_volumes(hypervisor, lab, image)

    # Once the VM's disk is gone, prune removes the old base.
    hypervisor.delete_volume(hypervisor.lookup_volume(pool, OVERLAY))
    pruned = task(image, diff=True, **options)
    assert (pruned["changed"], pruned["downloaded"], pruned["removed"], pruned["kept"]) == (True, False, [old], [])
    assert image_volumes(hypervisor, lab, image) == [new, new + ".sha256"]
    assert task(image, **options)["changed"] is False

    # state=absent without a checksum removes every copy: check mode, real, then idempotent.
    gone_check = task(image, state="absent", check=True, diff=True)
    gone = task(image, state="absent", diff=True)
    for result in (gone_check, gone):
        assert (result["changed"], result["removed"]) == (True, [new])
        assert result["diff"] == {"before": {"bases": [new]}, "after": {"bases": []}}
    assert image_volumes(hypervisor, lab, image) == []
    assert task(image, state="absent")["changed"] is False


def test_sigkill_mid_upload_then_rerun_repairs(lab, hypervisor, server, sources, task):
    image = "eptest-img-kill"
    big = sources["big"]
    url = server.serve("/big.qcow2", big["path"])
    volume = volume_name(image, big["sha256"])
    path = os.path.join(lab.pool_dir, volume)
    hold = server.hold("/big.qcow2", after_bytes=big["size"] // 2)

    thread, outcome = in_background(task, image, url=url, checksum="sha256:" + big["sha256"])
    wait_for(hold.reached.is_set, "the server to send half the image")
    # The module has streamed data into the volume through libvirt: it is mid-upload.
    wait_for(lambda: os.path.exists(path) and os.stat(path).st_blocks * 512 >= 4 * 1024 * 1024,
             "4 MiB of the upload to reach %s" % path)
    victims = module_processes()
    assert victims, "no kvm_base_image process found"
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    hold.release.set()
    thread.join(300)
    killed = outcome["result"]
    assert killed.get("failed") is True, killed
    # What the killed run left: a base without its marker.
    assert image_volumes(hypervisor, lab, image) == [volume]

    repaired = task(image, url=url, checksum="sha256:" + big["sha256"], diff=True)
    assert (repaired["changed"], repaired["downloaded"]) == (True, True), repaired
    assert repaired["actions"][0] == "delete leftover base volume %s" % volume
    assert repaired["diff"]["before"] == {"volume": volume, "sha256": None, "state": "incomplete"}
    assert image_volumes(hypervisor, lab, image) == [volume, volume + ".sha256"]
    assert sha256_file(repaired["volume_path"]) == big["sha256"]
    assert server.hit_count("/big.qcow2") == 2


def test_two_concurrent_runs_download_once(lab, hypervisor, server, sources, task):
    image = "eptest-img-conc"
    source = sources["v2"]
    url = server.serve("/image.qcow2", source["path"])
    # The first request is held until both module processes are running, so the runs overlap.
    hold = server.hold("/image.qcow2", after_bytes=0)
    options = dict(url=url, checksum="sha256:" + source["sha256"])

    runs = [in_background(task, image, **options) for _run in range(2)]
    wait_for(hold.reached.is_set, "one run to start downloading")
    wait_for(lambda: len(module_processes()) >= 2, "both runs' module processes")
    time.sleep(1)  # the second run is now waiting on the lock (or still reading the pool)
    hold.release.set()
    results = []
    for thread, outcome in runs:
        thread.join(300)
        results.append(outcome["result"])

    assert server.hit_count("/image.qcow2") == 1
    assert all(not r.get("failed") for r in results), results
    assert sorted((r["changed"], r["downloaded"]) for r in results) == [(False, False), (True, True)]
    assert {r["volume_path"] for r in results} == {os.path.join(lab.pool_dir, volume_name(image, source["sha256"]))}
    assert len(image_volumes(hypervisor, lab, image)) == 2


def test_http_errors_are_clear_and_leave_nothing(lab, hypervisor, server, sources, task):
    image = "eptest-img-err"
    missing = task(image, url=server.url("/missing.qcow2"))
    assert missing.get("failed") is True
    assert "answered HTTP 404" in missing["msg"] and missing["error_kind"] == "permanent"
    mismatch = task(image, url=server.serve("/v1.qcow2", sources["v1"]["path"]), checksum="sha256:" + "0" * 64)
    assert mismatch.get("failed") is True
    assert "has sha256 %s but the checksum says %s" % (sources["v1"]["sha256"], "0" * 64) in mismatch["msg"]
    assert image_volumes(hypervisor, lab, image) == []


def test_check_mode_reports_the_virtual_size_from_the_header(lab, hypervisor, server, sources, task):
    """A qcow2 image not cached yet: check mode asks for its first bytes only and reports its virtual size."""
    image = "eptest-img-vsize"
    source = sources["v2"]
    url = server.serve("/v2.qcow2", source["path"])
    predicted = task(image, url=url, checksum="sha256:" + source["sha256"], check=True, diff=True)
    assert (predicted.get("failed"), predicted["changed"], predicted["downloaded"]) == (False, True, True), predicted
    assert predicted["size"] == source["virtual_size"] == 2 * 1024 * 1024
    assert predicted["volume_path"] is None
    assert server.ranges_asked("/v2.qcow2") == ["bytes=0-2097151"]  # answered 206: the image was not downloaded
    assert image_volumes(hypervisor, lab, image) == []

    done = task(image, url=url, checksum="sha256:" + source["sha256"])
    assert (done["changed"], done["size"]) == (True, predicted["size"]), done
    assert server.ranges_asked("/v2.qcow2") == ["bytes=0-2097151", None]


def test_an_image_larger_than_any_vm_disk_is_refused_from_its_header(lab, hypervisor, server, task, tmp_path):
    """qemu-img's 1 PiB qcow2 (16 MiB of tables): no VM could have that disk, so it is never cached."""
    image, path = "eptest-img-huge", str(tmp_path / "huge.qcow2")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", path, "1P"], check=True)
    url = server.serve("/huge.qcow2", path)
    sizes = "has a virtual size of %d bytes (1048576 GiB), more than the maximum of %d bytes (65536 GiB) " \
            "(max_virtual_size_gb)" % (1024 ** 5, 65536 * 1024 ** 3)
    for check in (True, False):
        refused = task(image, url=url, check=check)
        assert refused.get("failed") is True and refused["error_kind"] == "invalid_input", refused
        assert "image %s %s" % (url, sizes) in refused["msg"]
    assert server.ranges_asked("/huge.qcow2") == ["bytes=0-2097151", None]
    assert image_volumes(hypervisor, lab, image) == []


@pytest.mark.parametrize("source_name, named", [
    ("backing", "names the backing file '/etc/hostname' in its qcow2 header"),
    ("data-file", "names the external data file '{directory}/data.raw' in its qcow2 header"),
])
def test_an_image_naming_another_file_is_refused_and_leaves_nothing(lab, hypervisor, server, sources, task, source_name,
                                                                    named):
    """Served with its right sha256, such an image would let every VM on it read that file of the hypervisor."""
    image = "eptest-img-" + source_name
    source = sources[source_name]
    named = named.format(directory=os.path.dirname(source["path"]))
    url = server.serve("/%s.qcow2" % source_name, source["path"])
    for check in (True, False):
        refused = task(image, url=url, checksum="sha256:" + source["sha256"], check=check)
        assert refused.get("failed") is True, refused
        assert refused["error_kind"] == "permanent"
        assert refused["msg"].startswith("image %s %s: a base image must be self-contained" % (url, named)), refused
        # No base and no marker: nothing of the image reached the pool.
        assert image_volumes(hypervisor, lab, image) == []
    assert server.ranges_asked("/%s.qcow2" % source_name) == ["bytes=0-2097151", None]


def test_a_backing_store_libvirt_reads_after_the_upload_is_deleted_before_the_marker(lab, hypervisor, server, sources,
                                                                                     task):
    """QED has no qcow2 header, so as format raw it passes the header check; libvirt's probe after the
    upload reads its backing file, and the base is deleted without a marker."""
    image = "eptest-img-qed"
    source = sources["qed-backing"]
    url = server.serve("/disk.img", source["path"])
    refused = task(image, url=url, checksum="sha256:" + source["sha256"], format="raw")
    assert refused.get("failed") is True, refused
    assert refused["msg"].startswith(
        "image %s has the backing store '/etc/hostname' as libvirt reads it in pool '%s': a base image must be "
        "self-contained" % (url, lab.pool)), refused
    assert "base volume '%s' was deleted" % ("base-%s-%s.raw" % (image, source["sha256"][:16])) in refused["msg"]
    assert image_volumes(hypervisor, lab, image) == []


def test_remote_uri_from_the_controller(lab, hypervisor, server, sources, sshd, run_playbook):
    """The same module against qemu+ssh://, as when it runs on the controller with delegate_to: localhost."""
    image = "eptest-img-ssh"
    url = server.serve("/v1.qcow2", sources["v1"]["path"])
    played = run_playbook(TASK, extra_vars={"uri": sshd.uri, "pool": lab.pool, "image_name": image,
                                            "image_url": url, "image_checksum": "sha256:" + sources["v1"]["sha256"]})
    result = played.task_results("Show the result")[0]["kvm_base_image_result"]
    assert (result.get("failed"), result["changed"], result["downloaded"]) == (False, True, True), result
    assert sha256_file(result["volume_path"]) == sources["v1"]["sha256"]
