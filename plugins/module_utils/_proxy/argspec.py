# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The modules' argument specs, built from the constants the flows use, so that each default and choice is written once.

The egress_proxy role's meta/argument_specs.yml repeats some of them for its
own variables; tests/unit/test_argument_specs.py checks that it says the same.
kvm_proxy_info's is in _proxy.info: this file reaches the converge's request,
which that module's payload does without.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.argspec import policy_options
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.argspec import image_options
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.options import download_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import CPU_MODES, VIRT_TYPES
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.interfaces import INTERFACE_OPTIONS, LIST_OPTIONS
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import (
    DEFAULT_DISK_SIZE_GB,
    DEFAULT_GC_GRACE_PERIOD,
    DEFAULT_MACHINE,
    DEFAULT_MAX_UNAVAILABLE,
    DEFAULT_MEMORY_MIB,
    DEFAULT_POOL,
    DEFAULT_SHUTDOWN_TIMEOUT,
    DEFAULT_VCPUS,
    DEFAULT_VIRT_TYPE,
    DEFAULT_WAIT_TIMEOUT,
    ON_DRIFT_CHOICES,
    ON_DRIFT_REPLACE,
    ON_UNREACHABLE_AGENT_CHOICES,
    ON_UNREACHABLE_AGENT_FAIL,
    SET_WIDE_PROXY_OPTIONS,
    STATE_PRESENT,
    STATES,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.argspec import cloud_init_options

# The options' relations, beside the specs: the modules (_proxy/task.py) and the controller's filters
# (ArgumentSpecValidator) both read them.
KVM_PROXY_MUTUALLY_EXCLUSIVE = [("bridge", "network"), ("image", "base_volume")]
# The NIC (bridge, network or interfaces) is checked by ProxyRequest, which names the options of a mix.
KVM_PROXY_REQUIRED_IF = [
    ("state", "present", ("image", "base_volume"), True),
    ("state", "stopped", ("image", "base_volume"), True),
]
# Each proxy's own entry may give what the set does not: ProxyRequest checks what each one needs.
KVM_PROXY_SET_MUTUALLY_EXCLUSIVE = KVM_PROXY_MUTUALLY_EXCLUSIVE
KVM_PROXY_SET_REQUIRED_IF = []


def interface_options():
    """One NIC of the ``interfaces`` list: on a bridge or a network, with an optional MAC, role and static address."""
    return {option: dict(type="list", elements="str") if option in LIST_OPTIONS else dict(type="str")
            for option in INTERFACE_OPTIONS}


def kvm_proxy_argument_spec():
    spec = dict(
        name=dict(type="str", required=True),
        state=dict(type="str", choices=list(STATES), default=STATE_PRESENT),
        host=dict(type="str"),
        uid=dict(type="str"),
        adopt_uids=dict(type="list", elements="str", default=[]),
        vcpus=dict(type="int", default=DEFAULT_VCPUS),
        memory_mib=dict(type="int", default=DEFAULT_MEMORY_MIB),
        disk_size_gb=dict(type="int", default=DEFAULT_DISK_SIZE_GB),
        pool=dict(type="str", default=DEFAULT_POOL),
        bridge=dict(type="str"),
        network=dict(type="str"),
        mac=dict(type="str"),
        interfaces=dict(type="list", elements="dict", options=interface_options()),
        image=dict(type="dict", options=image_options()),
        base_volume=dict(type="str"),
        virt_type=dict(type="str", choices=list(VIRT_TYPES), default=DEFAULT_VIRT_TYPE),
        cpu_mode=dict(type="str", choices=list(CPU_MODES)),
        machine=dict(type="str", default=DEFAULT_MACHINE),
        autostart=dict(type="bool", default=True),
        wait_for_ip=dict(type="bool", default=False),
        wait_timeout=dict(type="int", default=DEFAULT_WAIT_TIMEOUT),
        shutdown_timeout=dict(type="int", default=DEFAULT_SHUTDOWN_TIMEOUT),
        on_drift=dict(type="str", choices=list(ON_DRIFT_CHOICES), default=ON_DRIFT_REPLACE),
        policy=dict(type="dict", options=policy_options()),
        on_unreachable_agent=dict(type="str", choices=list(ON_UNREACHABLE_AGENT_CHOICES),
                                  default=ON_UNREACHABLE_AGENT_FAIL),
        force=dict(type="bool", default=False),
    )
    spec.update(cloud_init_options())
    spec.update(download_argument_spec())
    return spec


def kvm_proxy_set_argument_spec():
    """The set's options: kvm_proxy's as defaults for every proxy, and ``proxies`` whose entries may set their own."""
    shared = kvm_proxy_argument_spec()
    del shared["name"]
    per_proxy = {option: {key: value for key, value in spec.items() if key != "default"}
                 for option, spec in shared.items() if option not in SET_WIDE_PROXY_OPTIONS + tuple(download_argument_spec())}
    per_proxy["name"] = dict(type="str", required=True)
    shared.update(
        proxies=dict(type="list", elements="dict", required=True, options=per_proxy),
        gc=dict(type="bool", default=True),
        gc_grace_period=dict(type="int", default=DEFAULT_GC_GRACE_PERIOD),
        max_unavailable=dict(type="int", default=DEFAULT_MAX_UNAVAILABLE),
        wait_for_port=dict(type="int"),
        image_prune=dict(type="bool", default=False),
    )
    return shared
