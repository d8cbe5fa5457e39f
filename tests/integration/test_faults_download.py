"""Downloads that go wrong for real: the server killed mid-body, a body shorter than its Content-Length,
and the pool's filesystem full mid-download (a small loop-mounted filesystem as a pool of its own).

Each fails naming the URL or the volume and what to do, leaves no marker (so nothing a later run would
trust as a verified image), and the next run with the fault gone caches the image.
test_kvm_base_image.py covers a SIGKILL of the module mid upload and two concurrent downloads.
"""

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import base_volume_name
from tests.lab import config
from tests.unit.image_server import ImageServer

pytestmark = pytest.mark.integration

PREFIX = config.TEST_DOMAIN_PREFIX + "dlfault-"
FULL_POOL = PREFIX + "full"
BIG_MIB = 24

# An HTTP server that announces the whole file, sends half of it, says so on stdout, and then waits
# to be killed: the kill is the fault.
HALF_SERVER = textwrap.dedent("""
    import os, socket, sys
    path = sys.argv[1]
    size = os.path.getsize(path)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _addr = listener.accept()
        request = conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\nContent-Type: application/octet-stream\\r\\n\\r\\n" % size)
        with open(path, "rb") as handle:
            conn.sendall(handle.read(size // 2))
        print("half sent", flush=True)
""")


@pytest.fixture(scope="module")
def big_image(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dlfault")
    raw = directory / "big.raw"
    raw.write_bytes(os.urandom(BIG_MIB * 1024 * 1024))
    return str(raw), hashlib.sha256(raw.read_bytes()).hexdigest()


def _task(tmp_path, lab, run_playbook, pool, name, url, sha256):
    playbook = tmp_path / ("%s.yml" % name)
    options = {"uri": lab.uri, "pool": pool, "name": name, "url": url, "checksum": "sha256:" + sha256,
               "format": "raw", "retries": 0}
    task = {"name": "Cache the image", "ignore_errors": True, "register": "cached",
            "egress_proxies.kvm.kvm_base_image": options}
    playbook.write_text(yaml.safe_dump([{"name": "Cache", "hosts": "localhost", "gather_facts": False, "tasks": [task]}]))
    (result,) = run_playbook(str(playbook)).task_results("Cache the image")
    return result


def _task_into(outcome, *args):
    outcome["result"] = _task(*args)


def _volumes(lab, pool):
    subprocess.run(["virsh", "-q", "-c", lab.uri, "pool-refresh", pool], check=True, capture_output=True)
    listed = subprocess.run(["virsh", "-q", "-c", lab.uri, "vol-list", pool], check=True, capture_output=True,
                            text=True).stdout.split()[0::2]
    return sorted(listed)


def _good_url(big_image):
    """The image served whole: a file server of this test on 127.0.0.1."""
    server = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "0", "--directory",
                               os.path.dirname(big_image[0])], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = server.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (...)"
    port = line.split(" port ")[1].split()[0]
    return server, "http://127.0.0.1:%s/%s" % (port, os.path.basename(big_image[0]))


@pytest.fixture
def clean_pool_volumes(lab, lab_cleanup):
    def clean(name, sha256):
        base = base_volume_name(name, "raw", sha256)
        lab_cleanup(volumes=[base, base + ".sha256"])
        return base
    return clean


def test_a_server_killed_mid_body_fails_clearly_and_the_next_run_caches(lab, big_image, clean_pool_volumes,
                                                                        run_playbook, tmp_path):
    name = PREFIX + "killed"
    base = clean_pool_volumes(name, big_image[1])
    server = subprocess.Popen([sys.executable, "-c", HALF_SERVER, big_image[0]], stdout=subprocess.PIPE, text=True)
    try:
        port = server.stdout.readline().strip()
        url = "http://127.0.0.1:%s/big.raw" % port
        outcome = {}
        runner = threading.Thread(target=_task_into, args=(outcome, tmp_path, lab, run_playbook, lab.pool, name, url,
                                                           big_image[1]))
        runner.start()
        assert server.stdout.readline().strip() == "half sent"
        server.send_signal(signal.SIGKILL)
        runner.join()
    finally:
        server.kill()
        server.wait()
    result = outcome["result"]
    assert result.get("failed"), result
    assert url in result["msg"], result["msg"]
    assert base + ".sha256" not in _volumes(lab, lab.pool)
    good, good_url = _good_url(big_image)
    try:
        again = _task(tmp_path, lab, run_playbook, lab.pool, name, good_url, big_image[1])
    finally:
        good.kill()
        good.wait()
    assert not again.get("failed") and again["changed"], again
    assert {base, base + ".sha256"} <= set(_volumes(lab, lab.pool))


def test_a_body_shorter_than_its_content_length_fails_and_leaves_no_marker(lab, big_image, clean_pool_volumes,
                                                                           run_playbook, tmp_path):
    name = PREFIX + "short"
    base = clean_pool_volumes(name, big_image[1])
    with ImageServer() as server:
        url = server.serve("/big.raw", big_image[0], cut_after=BIG_MIB * 1024 * 1024 // 3)
        result = _task(tmp_path, lab, run_playbook, lab.pool, name, url, big_image[1])
        assert result.get("failed"), result
        assert url in result["msg"], result["msg"]
        assert base + ".sha256" not in _volumes(lab, lab.pool)
        server.routes["/big.raw"].cut_after = None
        again = _task(tmp_path, lab, run_playbook, lab.pool, name, url, big_image[1])
    assert not again.get("failed") and again["changed"], again
    assert {base, base + ".sha256"} <= set(_volumes(lab, lab.pool))


@pytest.fixture
def full_pool(lab, tmp_path):
    """A dir pool of its own on an 8 MiB ext4 filesystem (a loop mount), removed with the filesystem afterwards."""
    image, target = tmp_path / "fs.img", tmp_path / "fs"
    target.mkdir()
    subprocess.run(["truncate", "-s", "8M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(target)], check=True)
    virsh = ["virsh", "-q", "-c", lab.uri]
    try:
        subprocess.run(virsh + ["pool-create-as", FULL_POOL, "dir", "--target", str(target)], check=True,
                       capture_output=True)
        try:
            yield FULL_POOL
        finally:
            for volume in _volumes(lab, FULL_POOL):
                subprocess.run(virsh + ["vol-delete", volume, "--pool", FULL_POOL], check=False, capture_output=True)
            subprocess.run(virsh + ["pool-destroy", FULL_POOL], check=False, capture_output=True)
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_a_pool_whose_filesystem_fills_mid_download_fails_naming_it_and_keeps_no_marker(
        lab, big_image, full_pool, run_playbook, tmp_path):
    name = PREFIX + "nospace"
    with ImageServer() as server:
        url = server.serve("/big.raw", big_image[0])
        result = _task(tmp_path, lab, run_playbook, full_pool, name, url, big_image[1])
    assert result.get("failed"), result
    print("pool full: %s" % result["msg"])
    assert full_pool in result["msg"] or base_volume_name(name, "raw", big_image[1]) in result["msg"], result["msg"]
    assert not [volume for volume in _volumes(lab, full_pool) if volume.endswith(".sha256")]
