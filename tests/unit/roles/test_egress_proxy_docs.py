# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""docs/role-egress_proxy.md shows what the role renders (issue 12 point 8)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import REPO_ROOT, render, role_defaults

# The proxy the sample describes: the role's defaults, one client network.
SAMPLE_PROXY = {"name": "egress-a", "port": 3128, "allowed_clients": ["10.20.0.0/16"], "address": "", "outside": {},
                "metrics": True, "metrics_port": 9301, "metrics_clients": []}


def read(*path):
    with open(os.path.join(*path)) as handle:
        return handle.read()


def rendered_squid_conf():
    return render("squid.conf.j2", dict(role_defaults(), egress_proxy_instance=SAMPLE_PROXY))


def test_the_squid_conf_sample_is_what_the_template_renders():
    section = read(REPO_ROOT, "docs", "role-egress_proxy.md").split("## What runs inside a proxy", 1)[1]
    sample = re.search(r"```\n(.*?)```", section, re.S).group(1)
    assert sample.strip() == rendered_squid_conf().strip()
