# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_seed's task: the seed's files rendered (which checks them), then the seed volume kept or removed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import replace

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import validate_pool_name, validate_vm_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT, STATE_PRESENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.task import Task
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import PYCDLIB_REQUIREMENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.nocloud import seed_files
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.seed import ensure_seed, seed_removal


class SeedTask(Task):
    """One kvm_seed task: the seed of VM ``name`` in pool ``pool`` holding exactly the given files, or removed."""

    requirements = (PYCDLIB_REQUIREMENT,)

    def __init__(self, kvm):
        super().__init__(kvm)
        self.files = None

    def validate(self):
        params = self.params
        validate_vm_name(params["name"])
        validate_pool_name(params["pool"])
        network_config = params["network_config"]
        if network_config is not None and not isinstance(network_config, (str, dict)):
            raise ValidationError("network_config must be a YAML string or a dictionary, got %s" % type(network_config).__name__)
        if params["state"] == STATE_PRESENT:
            self.files = seed_files(params["name"], params["user_data"], params["meta_data"], params["vendor_data"],
                                    network_config)

    def run(self, hypervisor):
        params, check_mode = self.params, self.kvm.check_mode
        if params["state"] == STATE_ABSENT:
            return seed_removal(hypervisor, params["pool"], params["name"], check_mode)
        result = ensure_seed(hypervisor, params["pool"], params["name"], self.files, check_mode=check_mode)
        return replace(result, diff_content=params["diff_content"])
