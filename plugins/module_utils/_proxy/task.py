# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The tasks of kvm_proxy and kvm_proxy_set: the module set up, its parameters validated, the flow run.

The only proxy file that needs Ansible: the flow itself (_proxy.flow) imports
without it, so its unit tests run on any Python.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.module import KvmModule
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.download import REQUESTS_REQUIREMENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.options import DownloadOptions
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.flow import run_proxy, run_set
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import ProxyRequest, SetRequest
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import PYCDLIB_REQUIREMENT


class ProxyTask:
    """kvm_proxy's task: the module's parameters into a validated request, then the flow on the hypervisor.

    ``kvm`` is the module's _module.KvmModule; ``run_module`` builds it and runs the task.
    """

    requirements = (REQUESTS_REQUIREMENT, PYCDLIB_REQUIREMENT)
    mutually_exclusive = [("bridge", "network"), ("image", "base_volume")]
    # The NIC (bridge, network or interfaces) is checked by ProxyRequest, which names the options of a mix.
    required_if = [
        ("state", "present", ("image", "base_volume"), True),
        ("state", "stopped", ("image", "base_volume"), True),
    ]

    @classmethod
    def run_module(cls, argument_spec):
        kvm = KvmModule(argument_spec, requirements=cls.requirements, mutually_exclusive=cls.mutually_exclusive,
                        required_if=cls.required_if)
        task = cls(kvm)
        kvm.run(task.work, validate=task.validate)

    def __init__(self, kvm):
        self.kvm = kvm
        self.request = None

    def validate(self):
        params = self.kvm.params
        self.request = ProxyRequest.from_params(params, DownloadOptions.from_params(params).require_ca_path())

    def work(self, hypervisor):
        return self.kvm.result(run_proxy(hypervisor, self.request, self.kvm.check_mode).module_result(diff_mode=True))


class ProxySetTask(ProxyTask):
    """kvm_proxy_set's task: the parameters into a validated set request, then the set's flow."""

    # Each proxy's own entry may give what the set does not: ProxyRequest checks what each one needs.
    required_if = []

    def validate(self):
        params = self.kvm.params
        self.request = SetRequest.from_params(params, DownloadOptions.from_params(params).require_ca_path())

    def work(self, hypervisor):
        result = run_set(hypervisor, self.request, self.kvm.check_mode).module_result(diff_mode=True)
        for entry in result["proxies"] + result["removed"]:
            self.kvm.result(entry)  # each proxy's warnings are the task's; the set's diff holds every proxy's
        return self.kvm.result(result)
