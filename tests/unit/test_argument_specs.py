# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The egress_proxy role's argument spec and defaults say what kvm_proxy's say, where they share an option."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.argspec import common_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import DEFAULT_URI
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.argspec import kvm_proxy_argument_spec

ROLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles", "egress_proxy")
PROXY = kvm_proxy_argument_spec()

# Role variable -> the kvm_proxy option it is passed as.
SHARED = {
    "egress_proxy_state": "state",
    "egress_proxy_pool": "pool",
    "egress_proxy_vcpus": "vcpus",
    "egress_proxy_memory_mib": "memory_mib",
    "egress_proxy_disk_size_gb": "disk_size_gb",
    "egress_proxy_virt_type": "virt_type",
    "egress_proxy_autostart": "autostart",
    "egress_proxy_on_drift": "on_drift",
    "egress_proxy_adopt_uids": "adopt_uids",
    "egress_proxy_shutdown_timeout": "shutdown_timeout",
    "egress_proxy_wait_timeout": "wait_timeout",
}


def load(*path):
    with open(os.path.join(ROLE, *path)) as handle:
        return yaml.safe_load(handle)


@pytest.fixture(scope="module")
def role_options():
    return load("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]


@pytest.mark.parametrize("variable", sorted(SHARED))
def test_a_shared_option_has_the_modules_default_and_choices(role_options, variable):
    option, module_option = role_options[variable], PROXY[SHARED[variable]]
    assert option.get("default") == module_option.get("default")
    assert option.get("choices") == module_option.get("choices")
    assert option["type"] == module_option["type"]


def test_the_instance_state_has_the_modules_choices(role_options):
    assert role_options["egress_proxy_instances"]["options"]["state"]["choices"] == PROXY["state"]["choices"]


def test_the_image_format_has_the_modules_choices(role_options):
    assert role_options["egress_proxy_image"]["options"]["format"]["choices"] == PROXY["image"]["options"]["format"]["choices"]


def test_cpu_mode_offers_the_modules_choices_or_empty_for_its_default(role_options):
    assert role_options["egress_proxy_cpu_mode"]["choices"] == [""] + PROXY["cpu_mode"]["choices"]


def test_the_uri_default_is_the_modules(role_options):
    assert role_options["egress_proxy_uri"]["default"] == common_argument_spec()["uri"]["default"] == DEFAULT_URI


def test_the_roles_defaults_are_its_argument_specs_defaults():
    entry_points = load("meta", "argument_specs.yml")["argument_specs"].values()
    options = {variable: option for entry in entry_points for variable, option in entry["options"].items()}
    defaults = load("defaults", "main.yml")
    assert set(defaults) == set(options)
    for variable, option in options.items():
        assert defaults[variable] == option.get("default"), variable
