# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_base_image's task: its parameters checked, then the image cached (its other copies pruned) or removed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import replace

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import validate_pool_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.task import Task
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.argspec import KVM_BASE_IMAGE_REQUIRED_IF
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.cache import GIB, ensure_image
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.download import REQUESTS_REQUIREMENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.options import DownloadOptions
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.removal import prune_images, remove_image
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.spec import MAX_DISK_SIZE_GB, ImageSpec


class BaseImageTask(Task):
    """One kvm_base_image task: the image and its download options checked, then cached, pruned or removed."""

    requirements = (REQUESTS_REQUIREMENT,)
    required_if = KVM_BASE_IMAGE_REQUIRED_IF

    def __init__(self, kvm):
        super().__init__(kvm)
        self.spec = None
        self.download = None

    def validate(self):
        params = self.params
        self.download = DownloadOptions.from_params(params).require_ca_path()
        if params["prune"] and params["state"] == STATE_ABSENT:
            raise ValidationError("prune applies to state=present; state=absent already removes the image's bases")
        if params["departing_volumes"] and params["state"] != STATE_ABSENT:
            raise ValidationError("departing_volumes applies to state=absent, the removal it is counted for")
        if not 1 <= params["max_virtual_size_gb"] <= MAX_DISK_SIZE_GB:
            raise ValidationError("max_virtual_size_gb must be from 1 to %d (the largest disk_size_gb of a VM), got %d"
                                  % (MAX_DISK_SIZE_GB, params["max_virtual_size_gb"]))
        validate_pool_name(params["pool"])
        self.spec = ImageSpec(name=params["name"], url=params["url"], checksum=params["checksum"], format=params["format"])

    def run(self, hypervisor):
        params, check_mode = self.params, self.kvm.check_mode
        if params["state"] == STATE_ABSENT:
            return remove_image(hypervisor, params["pool"], self.spec, self.download, check_mode=check_mode,
                                departing=params["departing_volumes"])
        image = ensure_image(hypervisor, params["pool"], self.spec, self.download, check_mode=check_mode,
                             max_virtual_size=params["max_virtual_size_gb"] * GIB, size_limit_name="max_virtual_size_gb")
        if not params["prune"]:
            return image
        return replace(image, pruned=prune_images(hypervisor, params["pool"], self.spec.name, keep=(image.volume,),
                                                  check_mode=check_mode, lock_timeout=self.download.lock_timeout))
