# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Every option that may carry a secret is no_log in every module that takes it (issue 31 item 2)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._argspec import (
    kvm_proxy_argument_spec,
    kvm_proxy_set_argument_spec,
)
from ansible_collections.egress_proxies.kvm.plugins.modules.kvm_seed import ARGUMENT_SPEC as KVM_SEED_SPEC

SECRET_OPTIONS = ("user_data", "vendor_data")


@pytest.mark.parametrize("module, spec", [
    ("kvm_seed", KVM_SEED_SPEC),
    ("kvm_proxy", kvm_proxy_argument_spec()),
    ("kvm_proxy_set", kvm_proxy_set_argument_spec()),
    ("kvm_proxy_set proxies[]", kvm_proxy_set_argument_spec()["proxies"]["options"]),
])
def test_the_cloud_init_options_are_no_log(module, spec):
    assert [option for option in SECRET_OPTIONS if not spec[option].get("no_log")] == [], module
