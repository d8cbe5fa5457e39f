# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A proxy's plan carried out: the operations of its steps, in the plan's order (_common.plan.execute).

Each operation takes the step's target and the Outcome so far and returns it
completed with what only doing the step tells: the domain it defined or acted
on, the uid chosen for a new VM, the base a fetch put in the pool, a
shutdown's warning. A failed step says how far the run got.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import uuid
from dataclasses import replace

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import (
    VIR_ERR_ARGUMENT_UNSUPPORTED,
    VIR_ERR_INVALID_ARG,
    VIR_ERR_NO_SUPPORT,
    VIR_ERR_OPERATION_INVALID,
    NotFoundError,
    PermanentError,
    TransientError,
    unless_already,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.locks import volume_lock
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import overlay_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.plan import execute
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.timing import polls
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.agent import UNUSABLE_AGENT, GuestAgent
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.policy import (
    apply_policy,
    await_booted,
    read_policy,
    release_service,
)
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
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.storage import find_volume, volume_deleter
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import VolumeSpec, build_volume_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy import plan as steps
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.observe import BaseImage
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import build_metadata_element
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.verdict import left_as_it_was
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.seed import ensure_seed

# Tried in turn: an older libvirt rejects a flag it does not know (NVRAM
# came last, in 1.2.9) with one of _UNSUPPORTED_FLAG_CODES.
UNDEFINE_FLAG_FALLBACKS = (UNDEFINE_ALL, UNDEFINE_MANAGED_SAVE | UNDEFINE_SNAPSHOTS_METADATA, UNDEFINE_MANAGED_SAVE, 0)
_UNSUPPORTED_FLAG_CODES = (VIR_ERR_NO_SUPPORT, VIR_ERR_ARGUMENT_UNSUPPORTED, VIR_ERR_INVALID_ARG)
_AGENT_ADVICE = ("Start or repair its agent, or set on_unreachable_agent=replace to replace a proxy whose agent does not "
                 "answer or breaks the protocol")


def carry_out(hypervisor, request, plan, images, timing, pool, guest_budget, wait):
    """Carry out ``plan``'s steps for ``request``; the Outcome as they leave it.

    ``images`` is the proxy's _proxy.observe.ImageSource (its lock directory
    also guards the overlay's creation); ``pool`` the requested pool's handle,
    to build in (None when nothing is built); ``guest_budget`` the proxy's
    _guest.agent.GuestBudget, what its observation left of it; ``wait`` its
    wait_timeout (a _common.timing.Deadline), shared by every wait on it.
    """
    operations = _Operations(hypervisor, request, images, timing, pool, guest_budget, wait)

    def failed(error, step, done):
        # Everything before this step stays done, and running the task again resumes from here.
        message = "%s failed%s: %s" % (step.action, " after %s" % ", ".join(done) if done else "", error.message)
        touched = steps.REMOVAL_ACTIONS.intersection(done + [step.action])
        return error.after(left_as_it_was(message, request.name, None if touched else plan.result.replacing), done)

    return execute(plan, operations.by_name(), failed)


def agent_failure(error, consequence=""):
    """``error`` (one of UNUSABLE_AGENT) with what it left the proxy in (``consequence``) and what the user can do."""
    return error.after("%s%s. %s" % (error.message, consequence, _AGENT_ADVICE), [])


def _acting_on(target, outcome):
    """The domain a step acts on: the one it was planned for, else the one this run defined."""
    return target if target is not None else outcome.dom


class _Operations:
    """The operations of a proxy's steps; each ``(target, outcome) -> outcome``."""

    def __init__(self, hypervisor, request, images, timing, pool, guest_budget, wait):
        self.hv = hypervisor
        self.request = request
        self.images = images
        self.timing = timing
        self.pool = pool
        self.guest_budget = guest_budget
        self.wait = wait

    def by_name(self):
        return {
            steps.FETCH: self.fetch_image, steps.VERIFY: self.verify_image, steps.CREATE_VOLUME: self.create_overlay,
            steps.WRITE: self.write_seed, steps.DEFINE: self.define, steps.START: self.start,
            steps.AUTOSTART: self.set_autostart, steps.SHUTDOWN: self.shutdown, steps.DESTROY: self.destroy,
            steps.UNDEFINE: self.undefine, steps.DELETE: volume_deleter(self.hv), steps.RECORD: self.record_owner,
            steps.APPLY: self.apply_policy, steps.RELEASE: self.release_service,
        }

    def fetch_image(self, _target, outcome):
        result = self.images.ensure(check_mode=False)
        base = BaseImage(result.volume, result.path, result.format, result.size)
        steps.check_disk_size(self.request, base)
        return replace(outcome, base=base)

    def verify_image(self, _target, outcome):
        self.images.ensure(check_mode=False)
        return outcome

    def create_overlay(self, _target, outcome):
        request, base = self.request, outcome.base
        xml = build_volume_xml(VolumeSpec(name=overlay_volume_name(request.name), capacity_bytes=request.disk_bytes,
                                          disk_format="qcow2", backing_path=base.path, backing_format=base.format))
        # Holding the base's lock while the overlay appears keeps a concurrent
        # prune of the image cache from removing the base in between: prune
        # looks for overlays under the same lock.
        with volume_lock(self.hv.uri, request.pool, base.volume, request.download.lock_timeout,
                         self.images.lock_dir):
            if find_volume(self.hv, self.pool, base.volume) is None:
                raise TransientError(
                    "base volume '%s' disappeared from pool '%s' before the overlay of '%s' was created (removed by "
                    "another task?); run the task again" % (base.volume, request.pool, request.name))
            self.hv.create_volume(self.pool, xml)
        return outcome

    def write_seed(self, _target, outcome):
        ensure_seed(self.hv, self.request.pool, self.request.name, self.request.seed_files(), check_mode=False)
        return outcome

    def define(self, _target, outcome):
        uid = outcome.uid if outcome.uid is not None else str(uuid.uuid4())
        # The seed carries the policy: the VM holds it from its first boot.
        metadata = build_metadata_element(uid, self.timing.clock(), outcome.spec, policy_digest=self.request.policy_digest,
                                          ha_group_json=self.request.ha_group_json,
                                          pooled_addresses_json=self.request.pooled_addresses_json)
        return replace(outcome, uid=uid, dom=self.hv.define_domain(build_domain_xml(self.request.domain_params(metadata))))

    def record_owner(self, domain, outcome):
        """Write this task's uid over the adopted owner's, keeping createdAt, the recorded spec, digest and policy."""
        metadata = domain.metadata
        self._record(domain, outcome.uid, metadata.policy_digest, metadata.ha_group_json, metadata.pooled_addresses_json,
                     live=domain.state != VIR_DOMAIN_SHUTOFF)
        return replace(outcome, dom=domain.handle)

    def _record(self, domain, uid, policy_digest, ha_group_json, pooled_addresses_json, live):
        metadata = domain.metadata
        element = build_metadata_element(uid, metadata.created_at, domain.spec, digest=metadata.spec_digest,
                                         policy_digest=policy_digest, ha_group_json=ha_group_json,
                                         pooled_addresses_json=pooled_addresses_json)
        self.hv.set_domain_metadata(domain.handle, unqualified_xml(element), METADATA_PREFIX, METADATA_URI, live=live)

    def apply_policy(self, domain, outcome):
        """The policy's files written in place through the guest agent, checked, the service reloaded, then recorded.

        A VM this run started, or one that may still be in its first boot, waits for its agent to come up: it
        enforces the policy before it counts as up. A VM whose first boot is still going on waits for it to end. Both
        within the proxy's one wait_timeout (``wait``), which its address wait shares.
        """
        request = self.request
        agent = GuestAgent(self.hv, domain.handle, request.name, self.timing, self.guest_budget)
        booting = steps.START_DOMAIN in outcome.actions or request.may_be_first_booting(domain.metadata,
                                                                                        self.timing.clock())
        try:
            await_booted(agent, self.wait, booting)
        except UNUSABLE_AGENT as error:
            raise agent_failure(error, "; it still enforces the policy it had") from error
        try:
            apply_policy(agent, request.policy, outcome.policy_paths)
        except UNUSABLE_AGENT as error:
            # apply_policy's message says where the files are left.
            raise agent_failure(error) from error
        unchanged = read_policy(agent, request.policy).drifted(request.policy)
        if unchanged:
            raise TransientError("the policy files %s of domain '%s' read back different from what was written "
                                 "(changed in the guest meanwhile?); run the task again" % (", ".join(unchanged),
                                                                                            request.name))
        self._record(domain, outcome.uid, request.policy_digest, request.ha_group_json, request.pooled_addresses_json,
                     live=True)
        return replace(outcome, dom=domain.handle)

    def release_service(self, domain, outcome):
        """The guest's policy.release run while it still serves; a guest whose agent does not answer is shut down
        without it (its service is not serving through it anyway, or cannot be asked), with a warning."""
        agent = GuestAgent(self.hv, domain.handle, self.request.name, self.timing, self.guest_budget)
        try:
            release_service(agent, self.request.policy)
        except UNUSABLE_AGENT as error:
            warning = "domain '%s' is shut down without releasing its service first (policy.release): %s" % (
                self.request.name, error.message)
            return replace(outcome, warnings=outcome.warnings + (warning,))
        return outcome

    def start(self, target, outcome):
        dom = _acting_on(target, outcome)
        # Started by someone else since we looked: that is what we wanted.
        unless_already(VIR_ERR_OPERATION_INVALID, self.hv.start_domain, dom)
        return replace(outcome, dom=dom)

    def set_autostart(self, target, outcome):
        dom = _acting_on(target, outcome)
        self.hv.set_domain_autostart(dom, self.request.autostart)
        return replace(outcome, dom=dom)

    def shutdown(self, target, outcome):
        """ACPI shutdown, then a hard stop when the guest has not powered off within shutdown_timeout."""
        dom = _acting_on(target, outcome)
        unless_already(VIR_ERR_OPERATION_INVALID, self.hv.shutdown_domain, dom)
        for _attempt in polls(self.timing.deadline(self.request.shutdown_timeout), self.timing.sleep, POLL_INTERVAL):
            if self.hv.domain_state(dom) not in steps.SHUTTING_DOWN:
                return replace(outcome, dom=dom)
        warning = ("domain '%s' did not power off within %d s of the ACPI shutdown request and was stopped hard; raise "
                   "shutdown_timeout if the guest needs longer" % (self.request.name, self.request.shutdown_timeout))
        return self.destroy(dom, replace(outcome, warnings=outcome.warnings + (warning,)))

    def destroy(self, target, outcome):
        dom = _acting_on(target, outcome)
        try:
            # Already off (it shut down since we looked): that is what we wanted.
            unless_already(VIR_ERR_OPERATION_INVALID, self.hv.destroy_domain, dom)
        except NotFoundError:
            pass  # undefined meanwhile: nothing left to stop
        return replace(outcome, dom=dom)

    def undefine(self, target, outcome):
        dom = _acting_on(target, outcome)
        for flags in UNDEFINE_FLAG_FALLBACKS:
            try:
                self.hv.undefine_domain(dom, flags)
                break
            except NotFoundError:
                break  # undefined meanwhile
            except PermanentError as error:
                if error.code not in _UNSUPPORTED_FLAG_CODES or flags == 0:
                    raise
        return replace(outcome, dom=dom)
