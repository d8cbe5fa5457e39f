"""The execution environment: ansible-builder reads the installed collection's requirements and makes a build context.

The image itself is not built: its base image comes from a registry these machines cannot reach.
"""

import ast
import os
import subprocess
import sys

import yaml

from tests.integration import collection_artifact

VENV_BIN = os.path.join(collection_artifact.REPO_ROOT, ".venv", "bin")
SAMPLE = os.path.join(collection_artifact.REPO_ROOT, "docs", "execution-environment.yml")
# The pip distribution of each third-party module the plugins import.
# libvirt_qemu (the guest agent's passthrough) ships in libvirt-python beside libvirt.
DISTRIBUTIONS = {"libvirt": "libvirt-python", "libvirt_qemu": "libvirt-python", "lxml": "lxml", "pycdlib": "pycdlib",
                 "requests": "requests"}
# libvirt-python links against libvirt's client library; pip builds it with libvirt's headers,
# pkg-config, a compiler and Python's headers: one line for Debian-like and one for RPM-based images.
SYSTEM = [
    "libvirt-dev [platform:dpkg compile]", "libvirt-devel [platform:rpm compile]",
    "pkg-config [platform:dpkg compile]", "pkgconf-pkg-config [platform:rpm compile]", "gcc [compile]",
    "python3-dev [platform:dpkg compile]", "python3-devel [platform:rpm compile]",
    "libvirt0 [platform:dpkg]", "libvirt-libs [platform:rpm]",
]


def _builder(*args, cwd=None):
    completed = subprocess.run([os.path.join(VENV_BIN, "ansible-builder")] + list(args), capture_output=True,
                               text=True, check=False, timeout=300, cwd=cwd)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout


def _third_party_imports():
    """Top-level modules the installed plugins import (directly, or through optional_import or lazy_import) that neither
    Python nor Ansible provides."""
    found = set()
    for directory, _dirs, files in os.walk(os.path.join(collection_artifact.INSTALLED, "plugins")):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(directory, name)) as handle:
                    tree = ast.parse(handle.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        found.update(alias.name.split(".")[0] for alias in node.names)
                    elif isinstance(node, ast.ImportFrom) and node.level == 0:
                        found.add(node.module.split(".")[0])
                    elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("optional_import", "lazy_import")
                          and isinstance(node.args[0], ast.Constant)):
                        # optional_import("lxml.etree", ...), lazy_import("pycdlib", ...): the guarded imports of
                        # optional libraries, the lazy ones imported at their first use.
                        found.add(node.args[0].value.split(".")[0])
    return sorted(found - set(sys.stdlib_module_names) - {"ansible", "ansible_collections", "__future__"})


def _requirement_name(line):
    return line.split("#")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()


def test_introspect_lists_exactly_the_python_and_system_requirements():
    listed = yaml.safe_load(_builder("introspect", "--sanitize", collection_artifact.COLLECTIONS_DIR))
    python = [line.split("#")[0].strip() for line in listed["python"]]
    assert sorted(_requirement_name(line) for line in python) == sorted({DISTRIBUTIONS[name] for name in _third_party_imports()})
    assert all(line.endswith("# from collection egress_proxies.kvm") for line in listed["python"] + listed["system"])
    assert [line.split("#")[0].strip() for line in listed["system"]] == SYSTEM


def test_create_makes_a_build_context_that_installs_the_collection(tmp_path):
    context = tmp_path / "context"
    _builder("create", "-f", SAMPLE, "--context", str(context), "--output-filename", "Containerfile")
    containerfile = (context / "Containerfile").read_text()
    # ansible-builder names the base image once, as a build argument, and builds FROM it.
    assert 'ARG EE_BASE_IMAGE="quay.io/centos/centos:stream9"' in containerfile
    assert "FROM $EE_BASE_IMAGE" in containerfile
    assert "ansible-galaxy collection install" in containerfile and "introspect" in containerfile
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert requirements == {"collections": [{"name": "egress_proxies.kvm"}]}
