# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_seed's argument spec, and the cloud-init options kvm_proxy shares, built from the constants the seed flow uses."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import DEFAULT_POOL
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import PRESENCE_STATES, STATE_PRESENT


def cloud_init_options(user_data_default=None):
    """The seed's files.

    no_log keeps user-data, vendor-data (a bootcmd with a token) and meta-data
    (a token) out of the invocation Ansible returns with -v, out of results
    and messages, and out of the hypervisor's journal; _common.module.KvmModule masks
    a dictionary among them as one document.
    raw, not str: Ansible would turn a dictionary into its Python repr, which
    cloud-init ignores; seed_files writes one as cloud-config.
    """
    user_data = dict(type="raw", no_log=True)
    if user_data_default is not None:
        user_data["default"] = user_data_default
    return dict(
        user_data=user_data,
        vendor_data=dict(type="raw", no_log=True),
        meta_data=dict(type="dict", no_log=True),
        network_config=dict(type="raw"),
    )


def kvm_seed_argument_spec():
    spec = dict(
        name=dict(type="str", required=True),
        pool=dict(type="str", default=DEFAULT_POOL),
        state=dict(type="str", choices=list(PRESENCE_STATES), default=STATE_PRESENT),
        diff_content=dict(type="bool", default=False),
    )
    # A seed always has a user-data file: an empty one when none is given.
    spec.update(cloud_init_options(user_data_default=""))
    return spec
