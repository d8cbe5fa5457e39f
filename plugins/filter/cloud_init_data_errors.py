# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.nocloud import render_cloud_data

DOCUMENTATION = r"""
name: cloud_init_data_errors
short_description: What the modules would refuse in a user-data or vendor-data value, checked on the controller
version_added: 0.1.0
description:
  - Runs the modules' own check of a user-data or vendor-data value (text or a dictionary) without connecting anywhere,
    and returns the refusal with the value's name in it, never the value.
  - The text must be UTF-8 without control characters (tab, line feed and carriage return aside), at most 1 MiB, and
    start with a line cloud-init acts on, such as C(#cloud-config) or C(#!).
  - The egress_proxy role checks its own user-data and vendor-data with it first, so a file that is not UTF-8 (a
    binary or Latin-1 file read with the file lookup) is named before the role renders the proxies' arguments.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, option
options:
  _input:
    description: The user-data or vendor-data, as a module option would take it.
    type: raw
    required: true
  option:
    description: The name that the refusal gives the value, such as a role variable's.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Refuse user-data cloud-init would ignore
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join('; ') }}"
  vars:
    problems: "{{ lookup('ansible.builtin.file', 'user-data.yml') | egress_proxies.kvm.cloud_init_data_errors('user_data') }}"
"""

RETURN = r"""
_value:
  description: The refusal, one sentence; empty when the modules would write the value.
  type: list
  elements: str
"""


def cloud_init_data_errors(value, option):
    """The modules' refusal of ``value`` as user-data or vendor-data, naming it ``option``: [] when they accept it."""
    try:
        render_cloud_data(value, option)
    except ValidationError as error:
        return [error.message]
    return []


class FilterModule:
    def filters(self):
        return {"cloud_init_data_errors": cloud_init_data_errors}
