"""The images the mirror serves, built into the cache dir and rebuilt only when their recipe changes."""

import hashlib
import os
import subprocess
import time

from tests.lab import config
from tests.lab.shell import LabError, report, run, write_if_changed

RECIPE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build_guest_image.sh")
RECIPE_STAMP = os.path.join(config.CACHE_DIR, "%s.recipe-sha256" % config.GUEST_IMAGE)
BUILD_DIR = os.path.join(config.CACHE_DIR, "build")
DEB_CACHE = os.path.join(config.CACHE_DIR, "debs")
TINY_QCOW2_SIZE = "64M"
TINY_RAW_SIZE = 256 * 1024


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def recipe_sha256():
    return sha256_file(RECIPE)


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def guest_image_current():
    image = os.path.join(config.MIRROR_DIR, config.GUEST_IMAGE)
    stamp = _read(RECIPE_STAMP)
    return os.path.exists(image) and stamp is not None and stamp.decode().strip() == recipe_sha256()


def tiny_raw_content():
    """Deterministic, incompressible bytes: a SHA-256 counter stream."""
    blocks = (hashlib.sha256(b"egress-lab tiny.raw %d" % index).digest()
              for index in range(TINY_RAW_SIZE // 32))
    return b"".join(blocks)


def ensure_images():
    os.makedirs(config.MIRROR_DIR, exist_ok=True)
    actions = []
    if not guest_image_current():
        report("building %s (recipe changed or missing; takes a few minutes)" % config.GUEST_IMAGE)
        started = time.monotonic()
        build = subprocess.run([RECIPE, os.path.join(config.MIRROR_DIR, config.GUEST_IMAGE), BUILD_DIR, DEB_CACHE],
                               check=False)
        if build.returncode != 0:
            raise LabError("building %s failed (rc=%d); its output is above" % (config.GUEST_IMAGE, build.returncode))
        write_if_changed(RECIPE_STAMP, (recipe_sha256() + "\n").encode())
        actions.append("built %s in %.0fs" % (config.GUEST_IMAGE, time.monotonic() - started))
    tiny_qcow2 = os.path.join(config.MIRROR_DIR, config.TINY_QCOW2)
    if not os.path.exists(tiny_qcow2):
        run(["qemu-img", "create", "-q", "-f", "qcow2", tiny_qcow2 + ".partial", TINY_QCOW2_SIZE])
        os.replace(tiny_qcow2 + ".partial", tiny_qcow2)
        actions.append("created %s" % config.TINY_QCOW2)
    if write_if_changed(os.path.join(config.MIRROR_DIR, config.TINY_RAW), tiny_raw_content()):
        actions.append("wrote %s" % config.TINY_RAW)
    sums = "".join("%s  %s\n" % (sha256_file(os.path.join(config.MIRROR_DIR, name)), name)
                   for name in config.MIRROR_IMAGES)
    if write_if_changed(os.path.join(config.MIRROR_DIR, config.SHA256SUMS), sums.encode()):
        actions.append("wrote %s" % config.SHA256SUMS)
    for action in actions:
        report(action)
    return actions


def image_info():
    """{name: {"url", "sha256", "size", "path"}} for every image on the mirror, from SHA256SUMS."""
    info = {}
    with open(os.path.join(config.MIRROR_DIR, config.SHA256SUMS)) as handle:
        for line in handle:
            digest, name = line.split()
            path = os.path.join(config.MIRROR_DIR, name)
            info[name] = {"url": config.MIRROR_URL + name, "sha256": digest,
                          "size": os.path.getsize(path), "path": path}
    return info
