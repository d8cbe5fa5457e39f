# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The policy option's argument spec, as _image/argspec.py and _seed/argspec.py keep theirs: the proxy modules share it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def policy_options():
    """The policy option's suboptions, as the modules' argument specs take them."""
    files = dict(
        path=dict(type="str", required=True),
        content=dict(type="str"),
        secret_content=dict(type="str", no_log=True),
        owner=dict(type="str", default="root"),
        group=dict(type="str", default="root"),
        mode=dict(type="str", default="0644"),
    )
    return dict(
        files=dict(type="list", elements="dict", required=True, options=files,
                   mutually_exclusive=[("content", "secret_content")],
                   required_one_of=[("content", "secret_content")]),
        validate=dict(type="list", elements="str"),
        reload=dict(type="list", elements="str"),
        release=dict(type="list", elements="str"),
        group=dict(type="dict", options=dict(
            name=dict(type="str", required=True),
            address=dict(type="str", required=True),
            address6=dict(type="str"),
        )),
        # {profile: {egress_address, egress_address6}}: keyed by the profiles' names, checked by PooledAddresses.
        pooled_addresses=dict(type="dict"),
    )
