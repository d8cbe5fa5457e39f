# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The tasks of kvm_proxy and kvm_proxy_set: the parameters validated, the flow run (_common.task).

kvm_proxy_info's task is _proxy.info: apart, so that its payload and its start
hold the listing and not the flow, the image cache or the seed builder.
The only proxy files that need Ansible: the flow itself (_proxy.flow) and the
listing (_proxy.inventory) import without it, so their unit tests run on any Python.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.task import Task
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.download import REQUESTS_REQUIREMENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.options import DownloadOptions
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.argspec import (
    KVM_PROXY_MUTUALLY_EXCLUSIVE,
    KVM_PROXY_REQUIRED_IF,
    KVM_PROXY_SET_REQUIRED_IF,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.flow import run_proxy, run_set
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import ProxyRequest, SetRequest
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import PYCDLIB_REQUIREMENT


class ProxyTask(Task):
    """kvm_proxy's task: the module's parameters into a validated request, then the flow on the hypervisor."""

    requirements = (REQUESTS_REQUIREMENT, PYCDLIB_REQUIREMENT)
    mutually_exclusive = KVM_PROXY_MUTUALLY_EXCLUSIVE
    required_if = KVM_PROXY_REQUIRED_IF

    def __init__(self, kvm):
        super().__init__(kvm)
        self.request = None

    def validate(self):
        # ca_path is looked for here, on the module's host, before any connection.
        self.request = ProxyRequest.from_params(self.params, DownloadOptions.from_params(self.params).require_ca_path())

    def run(self, hypervisor):
        return run_proxy(hypervisor, self.request, self.kvm.check_mode)


class ProxySetTask(ProxyTask):
    """kvm_proxy_set's task: the parameters into a validated set request, then the set's flow."""

    required_if = KVM_PROXY_SET_REQUIRED_IF

    def validate(self):
        self.request = SetRequest.from_params(self.params, DownloadOptions.from_params(self.params).require_ca_path())

    def run(self, hypervisor):
        return run_set(hypervisor, self.request, self.kvm.check_mode)

    def returned(self, result):
        result = result.module_result(self.kvm.diff_mode)
        for entry in result["proxies"] + result["removed"]:
            self.kvm.result(entry)  # each proxy's warnings are the task's, before the set's
        return super().returned(result)
