"""Peak memory and throughput of kvm_base_image's download, on the local lab.

For each size, a qcow2 image of that size is served by a local HTTP server (a separate process,
sending Content-Length), and a fresh process on the hypervisor's Python (/usr/bin/python3 with
Debian's python3-libvirt and python3-requests, as the module runs there) calls ensure_image into
the lab pool. That process reports its resident memory after imports and its peak (VmHWM) after
the download. Flat memory means the peak does not grow with the image size.

Usage (as root, lab up):  .venv/bin/python bench/bench_image_download.py [SIZE_MIB ...]
Default sizes: 64 256 512. Volumes are removed afterwards; images are generated under $TMPDIR.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from tests.lab import config  # noqa: E402 - needs the sys.path entry above

HYPERVISOR_PYTHON = "/usr/bin/python3"
IMAGE_NAME = "eptest-img-bench"

# Runs in the measured process: only what the module itself would do.
DOWNLOAD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])

def rss_kib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])

from ansible_collections.egress_proxies.kvm.plugins.module_utils import _image_cache as cache
from ansible_collections.egress_proxies.kvm.plugins.module_utils import _image_removal as removal
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image_spec import ImageSpec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt import Hypervisor

uri, pool, url, sha256 = sys.argv[2:6]
with Hypervisor.open(uri) as hypervisor:
    before = rss_kib("VmRSS")
    result = cache.ensure_image(hypervisor, pool, ImageSpec(%r, url, "sha256:" + sha256))
    peak = rss_kib("VmHWM")
    removal.remove_image(hypervisor, pool, ImageSpec(%r))
print(json.dumps({"rss_before_kib": before, "peak_kib": peak, "bytes": result.bytes, "seconds": result.seconds,
                  "downloaded": result.downloaded, "size": result.size}))
""" % (IMAGE_NAME, IMAGE_NAME)

SERVE = r"""
import functools, http.server, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
handler.func.log_message = lambda *args: None
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
print(server.server_port, flush=True)
server.serve_forever()
"""


def make_image(directory, mebibytes):
    """A qcow2 file of about ``mebibytes`` MiB of incompressible data, and its sha256."""
    path = os.path.join(directory, "bench-%d.qcow2" % mebibytes)
    raw = path + ".raw"
    with open(raw, "wb") as handle:
        for _mebibyte in range(mebibytes):
            handle.write(os.urandom(1 << 20))
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, path], check=True)
    os.unlink(raw)
    digest = subprocess.run(["sha256sum", path], capture_output=True, text=True, check=True).stdout.split()[0]
    return path, digest


def collection_path(directory):
    """A directory that makes the checkout importable as ansible_collections.egress_proxies.kvm."""
    link = os.path.join(directory, "collections", "ansible_collections", "egress_proxies", "kvm")
    os.makedirs(os.path.dirname(link))
    os.symlink(REPO_ROOT, link)
    return os.path.join(directory, "collections")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[64, 256, 512], help="image sizes in MiB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-image-") as directory:
        collections = collection_path(directory)
        server = subprocess.Popen([sys.executable, "-c", SERVE, directory], stdout=subprocess.PIPE, text=True)
        try:
            port = int(server.stdout.readline())
            rows = []
            for mebibytes in args.sizes:
                path, digest = make_image(directory, mebibytes)
                url = "http://127.0.0.1:%d/%s" % (port, os.path.basename(path))
                started = time.monotonic()
                completed = subprocess.run(
                    [HYPERVISOR_PYTHON, "-c", DOWNLOAD, collections, config.LIBVIRT_URI, config.POOL_NAME, url, digest],
                    capture_output=True, text=True, check=False)
                if completed.returncode != 0:
                    sys.exit("download of %d MiB failed:\n%s" % (mebibytes, completed.stderr))
                row = json.loads(completed.stdout)
                row.update(image_mib=mebibytes, wall_seconds=time.monotonic() - started)
                rows.append(row)
                os.unlink(path)
        finally:
            server.terminate()
            server.wait()
    print("| image (MiB) | downloaded (bytes) | RSS after imports (MiB) | peak RSS (MiB) | peak - start (MiB) "
          "| download (s) | throughput (MiB/s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print("| %d | %d | %.1f | %.1f | %.1f | %.2f | %.0f |" % (
            row["image_mib"], row["bytes"], row["rss_before_kib"] / 1024, row["peak_kib"] / 1024,
            (row["peak_kib"] - row["rss_before_kib"]) / 1024, row["seconds"],
            row["bytes"] / row["seconds"] / (1 << 20)))


if __name__ == "__main__":
    main()
