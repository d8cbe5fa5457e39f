# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_proxy's steps carried out in the plan's order."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import uuid
from dataclasses import dataclass
from typing import Any

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import (
    VIR_ERR_ARGUMENT_UNSUPPORTED,
    VIR_ERR_INVALID_ARG,
    VIR_ERR_NO_SUPPORT,
    VIR_ERR_OPERATION_INVALID,
    KvmError,
    NotFoundError,
    PermanentError,
    TransientError,
    unless_already,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.locks import volume_lock
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import overlay_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.addresses import POLL_INTERVAL
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import build_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import (
    UNDEFINE_ALL,
    UNDEFINE_MANAGED_SAVE,
    UNDEFINE_SNAPSHOTS_METADATA,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import (
    METADATA_PREFIX,
    METADATA_URI,
    unqualified_xml,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import VIR_DOMAIN_SHUTOFF
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.storage import delete_volume, find_volume
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import VolumeSpec, build_volume_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.observe import BaseImage
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.plan import (
    CREATE_OVERLAY,
    DEFINE_DOMAIN,
    DELETE_OVERLAY,
    DELETE_SEED,
    DESTROY_DOMAIN,
    DISABLE_AUTOSTART,
    ENABLE_AUTOSTART,
    FETCH_IMAGE,
    RECORD_OWNER,
    SHUTDOWN_DOMAIN,
    SHUTTING_DOWN,
    START_DOMAIN,
    UNDEFINE_DOMAIN,
    VERIFY_IMAGE,
    WRITE_SEED,
    check_disk_size,
    left_as_it_was,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import build_metadata_element
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.seed import ensure_seed

# Tried in turn: an older libvirt rejects a flag it does not know (NVRAM
# came last, in 1.2.9) with one of _UNSUPPORTED_FLAG_CODES.
UNDEFINE_FLAG_FALLBACKS = (UNDEFINE_ALL, UNDEFINE_MANAGED_SAVE | UNDEFINE_SNAPSHOTS_METADATA, UNDEFINE_MANAGED_SAVE, 0)
_UNSUPPORTED_FLAG_CODES = (VIR_ERR_NO_SUPPORT, VIR_ERR_ARGUMENT_UNSUPPORTED, VIR_ERR_INVALID_ARG)


@dataclass(frozen=True)
class Timing:
    """``clock`` gives the aware UTC time recorded as createdAt; ``sleep`` and ``monotonic`` drive the polls."""

    clock: Any
    sleep: Any
    monotonic: Any


class Execution:
    """Runs a Plan's steps in order. What they produce (the defined domain, a generated uid, the fetched base) is kept here.

    ``images`` is the _proxy_observe.ImageSource (its lock settings also guard
    the overlay's creation); ``pool`` the requested pool's handle, to build in.
    """

    def __init__(self, hypervisor, request, plan, images, timing, pool=None):
        self.hv = hypervisor
        self.request = request
        self.plan = plan
        self.images = images
        self.timing = timing
        self.pool = pool
        self.uid = plan.uid
        self.base = plan.base
        self.dom = None
        self.warnings = []
        self._operations = {
            FETCH_IMAGE: self._fetch_image, CREATE_OVERLAY: self._create_overlay, WRITE_SEED: self._write_seed,
            DEFINE_DOMAIN: self._define, START_DOMAIN: self._start, ENABLE_AUTOSTART: self._set_autostart,
            DISABLE_AUTOSTART: self._set_autostart, SHUTDOWN_DOMAIN: self._shutdown, DESTROY_DOMAIN: self._destroy,
            UNDEFINE_DOMAIN: self._undefine, DELETE_OVERLAY: self._delete, DELETE_SEED: self._delete,
            RECORD_OWNER: self._record_owner, VERIFY_IMAGE: self._verify_image,
        }

    def run(self):
        done = []
        for step in self.plan.steps:
            try:
                self._operations[step.action](step.target)
            except KvmError as error:
                # Say how far the run got: everything before this step stays
                # done, and running the task again resumes from here.
                message = "%s failed%s: %s" % (step.action, " after %s" % ", ".join(done) if done else "", error.message)
                raise error.after(left_as_it_was(message, self.request.name, self.plan.replacing, done + [step.action]),
                                  done) from error
            done.append(step.action)
        return self

    def _domain(self, target):
        """The domain a step acts on: the one it was planned for, else the one this run defined."""
        if target is not None:
            self.dom = target
        return self.dom

    def _fetch_image(self, _target):
        result = self.images.ensure(check_mode=False)
        self.base = BaseImage(result.volume, result.path, result.format, result.size)
        check_disk_size(self.request, self.base)

    def _verify_image(self, _target):
        self.images.ensure(check_mode=False)

    def _create_overlay(self, _target):
        request, base = self.request, self.base
        xml = build_volume_xml(VolumeSpec(name=overlay_volume_name(request.name), capacity_bytes=request.disk_bytes,
                                          disk_format="qcow2", backing_path=base.path, backing_format=base.format))
        # Holding the base's lock while the overlay appears keeps a concurrent
        # prune of the image cache from removing the base in between: prune
        # looks for overlays under the same lock.
        with volume_lock(self.hv.uri, request.pool, base.volume, self.images.lock_timeout, self.images.lock_dir):
            if find_volume(self.hv, self.pool, base.volume) is None:
                raise TransientError(
                    "base volume '%s' disappeared from pool '%s' before the overlay of '%s' was created (removed by "
                    "another task?); run the task again" % (base.volume, request.pool, request.name))
            self.hv.create_volume(self.pool, xml)

    def _write_seed(self, _target):
        ensure_seed(self.hv, self.request.pool, self.request.name, self.request.seed_files(), check_mode=False)

    def _define(self, _target):
        if self.uid is None:
            self.uid = str(uuid.uuid4())
        metadata = build_metadata_element(self.uid, self.timing.clock(), self.plan.spec)
        self.dom = self.hv.define_domain(build_domain_xml(self.request.domain_params(metadata)))

    def _record_owner(self, domain):
        """Write this task's uid over the adopted owner's, keeping createdAt and the recorded spec and digest."""
        self.dom = domain.handle
        metadata = domain.metadata
        element = build_metadata_element(self.uid, metadata.created_at, domain.spec, digest=metadata.spec_digest)
        self.hv.set_domain_metadata(domain.handle, unqualified_xml(element), METADATA_PREFIX, METADATA_URI,
                                    live=domain.state != VIR_DOMAIN_SHUTOFF)

    def _start(self, target):
        # Started by someone else since we looked: that is what we wanted.
        unless_already(VIR_ERR_OPERATION_INVALID, self.hv.start_domain, self._domain(target))

    def _set_autostart(self, target):
        self.hv.set_domain_autostart(self._domain(target), self.request.autostart)

    def _shutdown(self, target):
        """ACPI shutdown, then a hard stop when the guest has not powered off within shutdown_timeout."""
        dom = self._domain(target)
        unless_already(VIR_ERR_OPERATION_INVALID, self.hv.shutdown_domain, dom)
        deadline = self.timing.monotonic() + self.request.shutdown_timeout
        while self.hv.domain_state(dom) in SHUTTING_DOWN:
            if self.timing.monotonic() >= deadline:
                self.warnings.append(
                    "domain '%s' did not power off within %d s of the ACPI shutdown request and was stopped hard; raise "
                    "shutdown_timeout if the guest needs longer" % (self.request.name, self.request.shutdown_timeout))
                self._destroy(dom)
                return
            self.timing.sleep(POLL_INTERVAL)

    def _destroy(self, target):
        try:
            # Already off (it shut down since we looked): that is what we wanted.
            unless_already(VIR_ERR_OPERATION_INVALID, self.hv.destroy_domain, self._domain(target))
        except NotFoundError:
            pass  # undefined meanwhile: nothing left to stop

    def _undefine(self, target):
        dom = self._domain(target)
        for flags in UNDEFINE_FLAG_FALLBACKS:
            try:
                self.hv.undefine_domain(dom, flags)
                return
            except NotFoundError:
                return  # undefined meanwhile
            except PermanentError as error:
                if error.code not in _UNSUPPORTED_FLAG_CODES or flags == 0:
                    raise

    def _delete(self, vol):
        delete_volume(self.hv, vol)
