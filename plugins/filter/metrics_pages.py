# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.metrics_targets import metrics_pages as read_pages

DOCUMENTATION = r"""
name: metrics_pages
short_description: What the egress proxies' metrics pages say, from one curl that fetched them all
version_added: 0.5.0
description:
  - Reads the output of one C(curl) that fetched several proxies' metrics pages, each page followed by a line
    C(@@egress-proxy-metrics URL STATUS) (C(curl --write-out)), as playbooks/status.yml runs it.
  - For each URL, whether the page answered and the requests squid counted since it started.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input
options:
  _input:
    description: curl's standard output.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Show what each metrics page said
  ansible.builtin.debug:
    msg: "{{ fetched.stdout | egress_proxies.kvm.metrics_pages }}"
"""

RETURN = r"""
_value:
  description:
    - By URL, C(answer) (V(up), V(squid down), V(exporter down) for squid's 502, V(refused) for squid's 403,
      V(no answer), or C(HTTP) and the status) and C(requests) (an integer, or V(null) when the page did not give it).
  type: dict
"""


def metrics_pages(text):
    """{url: {"answer", "requests"}} of the pages in ``text``."""
    return read_pages(text)


class FilterModule:
    def filters(self):
        return {"metrics_pages": metrics_pages}
