# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Every version_added in the plugins' documentation names a version the collection has: one the changelog records
as released, or the version galaxy.yml names (the one in development). ansible-doc shows it to users."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import yaml

from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import REPO_ROOT

VERSION_ADDED = re.compile(r"^\s*version_added:\s*['\"]?([^'\"\s]+)", re.M)


def load(*path):
    with open(os.path.join(REPO_ROOT, *path)) as handle:
        return yaml.safe_load(handle)


def test_every_version_added_is_a_version_the_changelog_or_galaxy_yml_names():
    known = {load("galaxy.yml")["version"]} | set(load("changelogs", "changelog.yaml").get("releases") or {})
    found = {}
    for directory, _dirs, files in os.walk(os.path.join(REPO_ROOT, "plugins")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path) as handle:
                    for version in VERSION_ADDED.findall(handle.read()):
                        found.setdefault(version, []).append(os.path.relpath(path, REPO_ROOT))
    assert {version: paths for version, paths in found.items() if version not in known} == {}
