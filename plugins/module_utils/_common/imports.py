# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The optional-import guard, written once.

A module_utils file that needs a library the hypervisor may lack imports it
through ``optional_import`` and exports the requirement triple it returns;
KvmModule checks the triples before a module runs, so a missing library
fails the task with the package to install instead of an ImportError::

    requests, REQUESTS_REQUIREMENT = lazy_import(
        "requests", "requests", "python3-requests on Debian/Ubuntu/RHEL, requests from PyPI")

``lazy_import`` is the same guard without the import: a library only some
tasks use (pycdlib to build a seed, requests to download an image) is looked
for when the module starts, so a missing one still fails the task up front,
and imported at its first use. A no-op task of kvm_proxy_info or kvm_proxy_set
never pays for it (bench/b10_module_start.py measures the start).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import importlib.util
import traceback


def optional_import(module_name, library, install_hint):
    """Import ``module_name`` if it is installed: (the module or None, (library, install hint, traceback or None))."""
    try:
        return importlib.import_module(module_name), (library, install_hint, None)
    except ImportError:
        return None, (library, install_hint, traceback.format_exc())


class _LazyModule:
    """A module imported at the first attribute read from it (its name, then sys.modules' copy)."""

    def __init__(self, module_name):
        self.__dict__["_module_name"] = module_name

    def __getattr__(self, name):
        return getattr(importlib.import_module(self._module_name), name)

    def __repr__(self):
        return "<lazy module %r>" % self._module_name


def lazy_import(module_name, library, install_hint):
    """``optional_import`` without importing: (a lazy stand-in for the module or None, the requirement triple).

    Whether the library is installed is looked up without running it
    (importlib.util.find_spec); only a missing one is imported here, for the
    traceback the task reports.
    """
    try:
        found = importlib.util.find_spec(module_name) is not None
    except ImportError:  # a dotted name whose package is missing
        found = False
    if not found:
        return optional_import(module_name, library, install_hint)
    return _LazyModule(module_name), (library, install_hint, None)
