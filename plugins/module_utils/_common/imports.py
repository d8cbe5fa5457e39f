# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The optional-import guard, written once.

A module_utils file that needs a library the hypervisor may lack imports it
through ``optional_import`` and exports the requirement triple it returns;
KvmModule checks the triples before a module runs, so a missing library
fails the task with the package to install instead of an ImportError::

    requests, REQUESTS_REQUIREMENT = optional_import(
        "requests", "requests", "python3-requests on Debian/Ubuntu/RHEL, requests from PyPI")
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import traceback


def optional_import(module_name, library, install_hint):
    """Import ``module_name`` if it is installed: (the module or None, (library, install hint, traceback or None))."""
    try:
        return importlib.import_module(module_name), (library, install_hint, None)
    except ImportError:
        return None, (library, install_hint, traceback.format_exc())
