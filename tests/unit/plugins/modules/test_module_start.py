# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The module's start (issue 28): a module imports only what its tasks need, the rest at first use.

Each module is imported in a fresh interpreter, as AnsiballZ runs it. Its
imports are its payload too: Ansible ships the module_utils the module's
imports reach, so kvm_proxy_info's must not reach the converge, the image
cache or the seed builder. bench/b10_module_start.py measures what this saves.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import subprocess
import sys

import pytest

MODULES = ("kvm_proxy_info", "kvm_proxy", "kvm_proxy_set", "kvm_seed", "kvm_base_image")
# Imported when a task uses them: to build a seed, to download an image, for a guest agent call, to read XML.
LAZY = ("pycdlib", "requests", "libvirt_qemu", "lxml.etree")
REPORT = """
import json, sys
import ansible_collections.egress_proxies.kvm.plugins.modules.%s
print(json.dumps(sorted(sys.modules)))
"""


def imported_by(module):
    out = subprocess.run([sys.executable, "-c", REPORT % module], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))


@pytest.mark.parametrize("module", MODULES)
def test_importing_a_module_leaves_the_libraries_a_task_may_not_need_unimported(module):
    imported = imported_by(module)
    assert [library for library in LAZY if library in imported] == []


def test_kvm_proxy_info_reaches_only_the_listing():
    prefix = "ansible_collections.egress_proxies.kvm.plugins.module_utils."
    reached = {name[len(prefix):] for name in imported_by("kvm_proxy_info") if name.startswith(prefix)}
    assert not {name for name in reached if name.startswith(("_image", "_seed", "_guest"))}
    assert not reached & {"_proxy.task", "_proxy.flow", "_proxy.request", "_proxy.argspec", "_proxy.observe"}
    assert {"_proxy.info", "_proxy.inventory", "_libvirt.hypervisor"} <= reached


def test_a_seed_still_builds_with_pycdlib_imported_at_first_use():
    # pycdlib's stand-in imports it when the builder first reads from it.
    from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed import iso9660

    assert iso9660.PYCDLIB_REQUIREMENT[2] is None
    assert iso9660.pycdlib.PyCdlib is sys.modules["pycdlib"].PyCdlib
