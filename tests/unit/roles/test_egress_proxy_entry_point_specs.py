# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Each entry point's argument spec documents every role variable its own task file reads (ansible-doc shows the
spec: a variable missing there is one a user of that entry point cannot find)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import ROLE

# A role variable, not one of the role's own facts (egress_proxy__...).
VARIABLE = re.compile(r"\begress_proxy_[a-z0-9]+(?:_[a-z0-9]+)*\b")


@pytest.mark.parametrize("entry_point", ["destroy", "targets"])
def test_the_entry_points_spec_names_every_variable_its_tasks_read(entry_point):
    with open(os.path.join(ROLE, "tasks", entry_point + ".yml")) as handle:
        read = set(VARIABLE.findall(handle.read()))
    with open(os.path.join(ROLE, "meta", "argument_specs.yml")) as handle:
        options = yaml.safe_load(handle)["argument_specs"][entry_point]["options"]
    assert read - set(options) == set()
