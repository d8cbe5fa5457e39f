# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.argspec import common_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.xml import LXML_REQUIREMENT, etree
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.argspec import (
    KVM_PROXY_SET_MUTUALLY_EXCLUSIVE,
    KVM_PROXY_SET_REQUIRED_IF,
    kvm_proxy_set_argument_spec,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import SetRequest

DOCUMENTATION = r"""
name: kvm_proxy_set_errors
short_description: What kvm_proxy_set would refuse in a set of arguments, checked on the controller
version_added: 0.2.0
description:
  - Runs the validation of M(egress_proxies.kvm.kvm_proxy_set) (its argument spec, then its own checks of every proxy
    and of the set's options) on a dictionary of the module's arguments, without connecting anywhere.
  - The egress_proxy role uses it on the arguments it is about to pass, so bad input fails before the role's first
    task that talks to libvirt, with the module's own message, and the role cannot check less than the module.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
requirements:
  - lxml on the controller (the module's validation builds the VM's XML to check names and text)
positional: _input
options:
  _input:
    description: The arguments of a M(egress_proxies.kvm.kvm_proxy_set) task, as the task would pass them.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse the set before touching the hypervisor
  ansible.builtin.assert:
    that: set_errors | length == 0
    fail_msg: "{{ set_errors | join('; ') }}"
  vars:
    set_errors: "{{ {'uid': 'egress-eu', 'bridge': 'br0', 'proxies': [{'name': 'egress-eu-1', 'memory_mib': 64}]}
                    | egress_proxies.kvm.kvm_proxy_set_errors }}"
"""

RETURN = r"""
_value:
  description: The module's error messages; empty when the module would accept the arguments.
  type: list
  elements: str
"""


def kvm_proxy_set_errors(arguments):
    """The messages kvm_proxy_set would fail with for ``arguments``, before connecting: [] when it accepts them."""
    if etree is None:
        library, hint, _traceback = LXML_REQUIREMENT
        raise AnsibleFilterError("kvm_proxy_set_errors needs the Python library %s on the controller (%s), as the "
                                 "modules need it on the hypervisor" % (library, hint))
    spec = common_argument_spec()
    spec.update(kvm_proxy_set_argument_spec())
    validator = ArgumentSpecValidator(spec, mutually_exclusive=KVM_PROXY_SET_MUTUALLY_EXCLUSIVE,
                                      required_if=KVM_PROXY_SET_REQUIRED_IF)
    checked = validator.validate(dict(arguments))
    if checked.error_messages:
        return list(checked.error_messages)
    params = checked.validated_parameters
    try:
        # The download options too; ca_path names a file on the module's host, so it is not looked for here.
        SetRequest.from_params(params)
    except KvmError as error:
        return [error.message]
    return []


class FilterModule:
    def filters(self):
        return {"kvm_proxy_set_errors": kvm_proxy_set_errors}
