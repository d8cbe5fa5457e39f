# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_proxy_info's task: the listing (_proxy.inventory) on the hypervisor (_common.task).

Apart from _proxy.task on purpose: Ansible ships a module with every
module_util its imports reach, and Python runs them all before the task
starts. Reading the hypervisor needs neither the converge's flow nor the
image cache (requests) nor the seed builder (pycdlib).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import validate_host_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.task import Task
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.inventory import get_proxy, list_proxies, resolve_host


# Here, not in _proxy.argspec: that one reaches the converge's request and its option groups.
def kvm_proxy_info_argument_spec():
    return dict(
        name=dict(type="str"),
        uid=dict(type="str"),
        include_unmanaged=dict(type="bool", default=False),
        host=dict(type="str"),
    )


class ProxyInfoTask(Task):
    """kvm_proxy_info's task: reads the hypervisor; changes nothing."""

    def validate(self):
        if self.params["host"] is not None:
            validate_host_name(self.params["host"])
        if self.params["name"] is not None and not self.params["name"]:
            raise ValidationError("name must not be empty; leave it out to list every proxy")

    def run(self, hypervisor):
        params = self.params
        host = resolve_host(hypervisor, params["host"])
        if params["name"] is not None:
            entry = get_proxy(hypervisor, host, params["name"], uid=params["uid"])
            return dict(changed=False, host=host, found=entry is not None, proxies=[] if entry is None else [entry])
        proxies, warnings = list_proxies(hypervisor, host, uid=params["uid"], include_unmanaged=params["include_unmanaged"])
        return dict(changed=False, host=host, found=bool(proxies), proxies=proxies, warnings=warnings)
