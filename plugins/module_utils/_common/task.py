# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one shape of every module's task, and so of every module's ``main()``::

    class BaseImageTask(Task):
        requirements = (REQUESTS_REQUIREMENT,)
        required_if = [...]

        def validate(self): ...            # the parameters checked, before any connection
        def run(self, hypervisor): ...     # the flow on the hypervisor: a _common.plan.Result or a result dict

    def main():
        BaseImageTask.main(ARGUMENT_SPEC)

A subclass names what the module needs besides libvirt and lxml, and the
constraints between its options that Ansible checks; the base builds the
module, validates, connects, runs and turns the flow's result into the
module's return, or the flow's typed error into a failed task.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.argspec import open_timeout
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.module import KvmModule
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.plan import Result
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import Hypervisor


class Task:
    """One module's task on one hypervisor. ``kvm`` is the module's _common.module.KvmModule.

    ``requirements`` lists (library, how to install it, import traceback or
    None) for the optional libraries the module needs besides libvirt and
    lxml; ``mutually_exclusive`` and ``required_if`` are AnsibleModule's.
    """

    requirements = ()
    mutually_exclusive = []
    required_if = []

    def __init__(self, kvm):
        self.kvm = kvm
        self.params = kvm.params

    @classmethod
    def main(cls, argument_spec):
        """Run the module: ``validate()`` before connecting, then ``run(hypervisor)``; exit with its result."""
        kvm = KvmModule(argument_spec, requirements=cls.requirements, mutually_exclusive=cls.mutually_exclusive,
                        required_if=cls.required_if)
        task = cls(kvm)
        try:
            timeout = open_timeout(kvm.params)
            task.validate()
            # A failed open names the hypervisor as the task's ids do (host), when the module has that option.
            with Hypervisor.open(kvm.params["uri"], timeout, kvm.params.get("host")) as hypervisor:
                result = task.returned(task.run(hypervisor))
        except KvmError as error:
            kvm.fail(error)
        else:
            kvm.module.exit_json(**result)

    def validate(self):
        """Refuse parameters the flow cannot work with (a ValidationError), before any connection is opened."""
        raise NotImplementedError

    def run(self, hypervisor):
        """The flow on ``hypervisor``: a _common.plan.Result, or the module's result dict."""
        raise NotImplementedError

    def returned(self, result):
        """What the module exits with: a Result's dict (its diff in diff mode), its warnings shown (KvmModule.result)."""
        if isinstance(result, Result):
            result = result.module_result(self.kvm.diff_mode)
        return self.kvm.result(result)
