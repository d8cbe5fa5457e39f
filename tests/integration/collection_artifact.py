"""The collection as users get it: `ansible-galaxy collection build` of this checkout, installed from the tarball.

Every integration test runs the collection from here, not from the checkout, so a file that
galaxy.yml's build_ignore leaves out (or that the build misses) fails the tests that use it.
"""

import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARTIFACT_DIR = os.path.join(REPO_ROOT, "build", "artifact")
# The tarball of the last build, for tests that install it themselves (an AWX project's requirements.yml).
TARBALL = os.path.join(ARTIFACT_DIR, "egress_proxies-kvm.tar.gz")
# A collections path holding nothing but the installed tarball: a symlink to installed-<content key>/,
# switched at once, so a run that started on the previous content keeps a complete tree.
COLLECTIONS_DIR = os.path.join(ARTIFACT_DIR, "collections")
INSTALLED = os.path.join(COLLECTIONS_DIR, "ansible_collections", "egress_proxies", "kvm")
_GALAXY = os.path.join(REPO_ROOT, ".venv", "bin", "ansible-galaxy")


def _galaxy(*args, collections_path):
    # Nothing but collections_path: a copy found elsewhere (PYTHONPATH's build/collections, the unit
    # tests' link to the checkout) would make an install a no-op.
    env = dict(os.environ, ANSIBLE_NOCOLOR="true", ANSIBLE_COLLECTIONS_PATH=collections_path,
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false")
    env.pop("PYTHONPATH", None)
    completed = subprocess.run([_GALAXY, "collection"] + list(args), capture_output=True, text=True, env=env,
                               cwd=REPO_ROOT, check=False)
    if completed.returncode:
        raise RuntimeError("ansible-galaxy collection %s failed (rc %d):\n%s%s" % (
            " ".join(args), completed.returncode, completed.stdout, completed.stderr))


def _content_key(tarball):
    """sha256 of the artifact's FILES.json: the checksum of every file in it, unlike the tarball's mtimes."""
    with tarfile.open(tarball) as archive:
        return hashlib.sha256(archive.extractfile("FILES.json").read()).hexdigest()[:16]


def _build(into):
    _galaxy("build", "--output-path", into, REPO_ROOT, collections_path=into)
    (name,) = os.listdir(into)
    return os.path.join(into, name)


def install():
    """Build the checkout as it is now and install the tarball into COLLECTIONS_DIR, unless that content is there."""
    os.makedirs(ARTIFACT_DIR, exist_ok=True)
    # Test sessions of several people may start at once in one checkout.
    with open(os.path.join(ARTIFACT_DIR, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with tempfile.TemporaryDirectory(dir=ARTIFACT_DIR) as scratch:
            built = _build(scratch)
            key = _content_key(built)
            os.replace(built, TARBALL)
        installed = "installed-" + key
        if not os.path.isdir(os.path.join(ARTIFACT_DIR, installed, "ansible_collections")):
            target = os.path.join(ARTIFACT_DIR, installed)
            shutil.rmtree(target, ignore_errors=True)
            _galaxy("install", "--offline", "-p", target, TARBALL, collections_path=target)
            if not os.path.isdir(os.path.join(target, "ansible_collections", "egress_proxies", "kvm")):
                raise RuntimeError("ansible-galaxy collection install put nothing into %s" % target)
        previous = os.readlink(COLLECTIONS_DIR) if os.path.islink(COLLECTIONS_DIR) else None
        if previous != installed:
            link = COLLECTIONS_DIR + ".new"
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(installed, link)
            os.replace(link, COLLECTIONS_DIR)
        for name in os.listdir(ARTIFACT_DIR):
            if name.startswith("installed-") and name not in (installed, previous):
                shutil.rmtree(os.path.join(ARTIFACT_DIR, name))
    return TARBALL
