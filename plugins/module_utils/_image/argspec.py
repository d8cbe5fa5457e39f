# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_base_image's argument spec, and the image options kvm_proxy shares, built from the constants the image flow uses."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import DEFAULT_DISK_FORMAT, DEFAULT_POOL, DISK_FORMATS
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import PRESENCE_STATES, STATE_PRESENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.options import download_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.spec import MAX_DISK_SIZE_GB

# Removing an image needs only its name (and checksum): the URL is asked for where it is fetched.
KVM_BASE_IMAGE_REQUIRED_IF = [("state", STATE_PRESENT, ("url",))]


def image_options():
    """The image a module caches: its cache name, URL, checksum and format."""
    return dict(
        name=dict(type="str", required=True),
        url=dict(type="str", required=True),
        checksum=dict(type="str"),
        format=dict(type="str", choices=list(DISK_FORMATS), default=DEFAULT_DISK_FORMAT),
    )


def kvm_base_image_argument_spec():
    spec = image_options()
    spec["url"] = dict(type="str")  # KVM_BASE_IMAGE_REQUIRED_IF
    spec.update(
        pool=dict(type="str", default=DEFAULT_POOL),
        state=dict(type="str", choices=list(PRESENCE_STATES), default=STATE_PRESENT),
        prune=dict(type="bool", default=False),
        departing_volumes=dict(type="list", elements="str", default=[]),
        max_virtual_size_gb=dict(type="int", default=MAX_DISK_SIZE_GB),
    )
    spec.update(download_argument_spec())
    return spec
