"""B1: kvm_base_image caching an image from HTTP on 127.0.0.1, beside `virsh vol-upload` and `curl`.

For each size a qcow2 image of incompressible data is served by a local HTTP
server (its own process, sending Content-Length). Timed, on the same file:

- the kvm_base_image task through `ansible localhost` (the module on /usr/bin/python3,
  as on a hypervisor), and an `ansible.builtin.ping` task: module work = task - ping;
- the floor: `virsh vol-create-as` + `virsh vol-upload` of the file into the same pool;
- `curl` of the URL to /dev/null: what the HTTP side alone costs; hashlib's SHA-256 of the file: the hash alone;
- the peak RSS (VmHWM) of a fresh /usr/bin/python3 process running the module's main(),
  the module's code path without Ansible's transport, with its RSS after the imports.

The module's runs and the floor's alternate, each after a sync. Every volume made is deleted after each run. The 4 GiB size runs once, and only when
the pool's file system has room for the image, its cached copy and the floor's copy.
"""

import json
import os
import shutil
import subprocess
import tempfile

from bench._common import HYPERVISOR_PYTHON, PREFIX, RSS_READER, RUN_MODULE, adhoc, ansible_env, config, delete_volumes, figure, repeat, timed, virsh

IMAGE_NAME = PREFIX + "b1"
FLOOR_VOLUME = PREFIX + "b1-floor"
GIB = 1 << 30
MIB = 1 << 20

SERVE = r"""
import functools, http.server, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
handler.func.log_message = lambda *args: None
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
print(server.server_port, flush=True)
server.serve_forever()
"""

HASH = r"""
import hashlib, sys
digest = hashlib.sha256()
with open(sys.argv[1], "rb") as handle:
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        digest.update(chunk)
"""

# Runs in the measured process: the module's main() on the hypervisor's Python, without Ansible's transport.
PEAK_RSS = RSS_READER + RUN_MODULE + r"""
uri, pool, name, url, sha256 = sys.argv[2:7]
module_main("kvm_base_image")
before = rss_kib("VmRSS")
result = run_module("kvm_base_image", dict(uri=uri, pool=pool, name=name, url=url, checksum="sha256:" + sha256))
peak = rss_kib("VmHWM")
print(json.dumps({"rss_before_mib": before / 1024, "peak_mib": peak / 1024, "seconds": result["seconds"],
                  "bytes": result["bytes"]}))
"""


def make_image(directory, mebibytes):
    """A qcow2 file of ``mebibytes`` MiB of incompressible data, and its sha256."""
    path = os.path.join(directory, "bench-%d.qcow2" % mebibytes)
    raw = path + ".raw"
    with open(raw, "wb") as handle:
        for _mebibyte in range(mebibytes):
            handle.write(os.urandom(MIB))
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, path], check=True)
    os.unlink(raw)
    digest = subprocess.run(["sha256sum", path], capture_output=True, text=True, check=True).stdout.split()[0]
    return path, digest


def room_for(mebibytes):
    """Whether the pool's and the temp dir's file systems hold the image three times over, with 2 GiB to spare."""
    need = 3 * mebibytes * MIB + 2 * GIB
    return all(shutil.disk_usage(path).free > need for path in (config.POOL_DIR, tempfile.gettempdir()))


def measure_size(collections, url, path, digest, runs):
    size = os.path.getsize(path)
    env = ansible_env(collections)
    module = adhoc("egress_proxies.kvm.kvm_base_image", "name=%s url=%s checksum=sha256:%s pool=%s format=qcow2"
                   % (IMAGE_NAME, url, digest, config.POOL_NAME))

    def clean():
        delete_volumes(IMAGE_NAME)

    clean()
    # Alternated, each after a sync: the image was just written, and whichever ran first would otherwise share
    # the disk with the page cache's write-back of it (the module did, when all its runs came first).
    task, floor = [], []
    for _run in range(runs):
        os.sync()
        task.append(timed(module, env=env)[0])
        clean()
        os.sync()
        floor_create = timed(["virsh", "-q", "-c", config.LIBVIRT_URI, "vol-create-as", config.POOL_NAME,
                              FLOOR_VOLUME, str(size), "--format", "raw"])[0]
        floor.append(timed(["virsh", "-q", "-c", config.LIBVIRT_URI, "vol-upload", "--pool", config.POOL_NAME,
                            FLOOR_VOLUME, path])[0] + floor_create)
        virsh("vol-delete", FLOOR_VOLUME, "--pool", config.POOL_NAME)
    curl = repeat(runs, ["curl", "-sf", "-o", "/dev/null", url])
    # The hash the module computes over every byte, alone: hashlib on the module's Python, in its chunk size.
    sha256 = repeat(runs, [HYPERVISOR_PYTHON, "-c", HASH, path])
    rss = []
    for _run in range(runs):
        completed = subprocess.run([HYPERVISOR_PYTHON, "-c", PEAK_RSS, collections,
                                    config.LIBVIRT_URI, config.POOL_NAME, IMAGE_NAME, url, digest],
                                   capture_output=True, text=True, check=True)
        rss.append(json.loads(completed.stdout))
        clean()
    return {"bytes": size, "runs": runs, "task": figure(task), "floor": figure(floor), "curl": curl, "sha256": sha256,
            "peak_rss_mib": max(row["peak_mib"] for row in rss),
            "rss_after_imports_mib": max(row["rss_before_mib"] for row in rss),
            "ensure_image_seconds": figure([row["seconds"] for row in rss])}


def run(collections, sizes_mib, runs, big_runs=1):
    """B1's figures for each size (MiB); sizes of 4 GiB or more run ``big_runs`` times."""
    env = ansible_env(collections)
    ping = repeat(runs, adhoc("ansible.builtin.ping", ""), env=env)
    results = {"ping": ping, "sizes": {}, "skipped": {}}
    with tempfile.TemporaryDirectory(prefix="bench-b1-") as directory:
        server = subprocess.Popen([HYPERVISOR_PYTHON, "-c", SERVE, directory], stdout=subprocess.PIPE, text=True)
        try:
            port = int(server.stdout.readline())
            for mebibytes in sizes_mib:
                if not room_for(mebibytes):
                    results["skipped"][str(mebibytes)] = "less than %d MiB free for the image, its cache and the " \
                        "floor's copy" % (3 * mebibytes + 2048)
                    continue
                path, digest = make_image(directory, mebibytes)
                url = "http://127.0.0.1:%d/%s" % (port, os.path.basename(path))
                size_runs = big_runs if mebibytes >= 4096 else runs
                results["sizes"][str(mebibytes)] = measure_size(collections, url, path, digest, size_runs)
                os.unlink(path)
        finally:
            server.terminate()
            server.wait()
            delete_volumes(IMAGE_NAME)
            delete_volumes(FLOOR_VOLUME)
    return results
