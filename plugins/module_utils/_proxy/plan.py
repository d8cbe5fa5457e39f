# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A proxy's steps: a pure function from the request and the observation (with its verdict) to an immutable Plan.

The Plan is _common.plan's: ordered Steps (an operation, the action the
result lists, the handle it acts on) and the Outcome they lead to. The order
and its reasons, ported from the reference provider's lessons:

- A kept domain gets only its running state, autostart flag and (when
  adopted) owner made right; its volumes are never touched. A stopped VM
  whose seed was cut short or overwritten gets it written again before it
  starts.
- A replacement first fetches and checks everything the new VM needs (the
  base image is content-addressed, so fetching never disturbs the old VM's
  base), and only then removes the old VM.
- Removal (for a replacement too) stops the VM gracefully first (ACPI, then a
  hard stop after shutdown_timeout), so its squid can finish what it serves;
  then it deletes the overlay and seed, and undefines the domain last: a run
  cut off half-way still finds the domain next time and finishes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass, field
from typing import Any, Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import overlay_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.plan import Plan, Step
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_PRESENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import (
    VIR_DOMAIN_BLOCKED,
    VIR_DOMAIN_RUNNING,
    VIR_DOMAIN_SHUTDOWN,
    VIR_DOMAIN_SHUTOFF,
    is_active,
    libvirt_state_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import GIB
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.verdict import (
    CLEAN,
    KEEP,
    LEAVE,
    REMOVE,
    REPLACE,
    left_alone,
    left_as_it_was,
)

# The operations of a proxy's steps (what carries a step out, _proxy.execute).
FETCH = "fetch"
VERIFY = "verify"
CREATE_VOLUME = "create volume"
WRITE = "write"
DEFINE = "define"
START = "start"
SHUTDOWN = "shutdown"
DESTROY = "destroy"
UNDEFINE = "undefine"
AUTOSTART = "autostart"
RECORD = "record"
DELETE = "delete"
APPLY = "apply"
RELEASE = "release"

# The actions, as the result's ``actions`` lists them (and the modules' RETURN documents them).
FETCH_IMAGE = "fetch base image"
VERIFY_IMAGE = "verify base image"
CREATE_OVERLAY = "create overlay"
DELETE_OVERLAY = "delete overlay"
WRITE_SEED = "write seed"
DELETE_SEED = "delete seed"
DEFINE_DOMAIN = "define domain"
START_DOMAIN = "start domain"
SHUTDOWN_DOMAIN = "shutdown domain"
DESTROY_DOMAIN = "destroy domain"
UNDEFINE_DOMAIN = "undefine domain"
ENABLE_AUTOSTART = "enable autostart"
DISABLE_AUTOSTART = "disable autostart"
RECORD_OWNER = "record owner"
APPLY_POLICY = "apply policy"
RELEASE_SERVICE = "release service"
# Once one of these ran, a replacement can no longer say it left the old VM as it was.
REMOVAL_ACTIONS = frozenset((SHUTDOWN_DOMAIN, DESTROY_DOMAIN, DELETE_OVERLAY, DELETE_SEED, UNDEFINE_DOMAIN))

# States in which an ACPI shutdown request reaches a guest that will act on it.
SHUTTING_DOWN = (VIR_DOMAIN_RUNNING, VIR_DOMAIN_BLOCKED, VIR_DOMAIN_SHUTDOWN)


@dataclass(frozen=True)
class Outcome:
    """What a proxy's steps come to, as planning tells it; carrying them out completes it (_proxy.execute).

    ``uid`` is None for a new VM until it is defined (a random one is chosen
    then); ``dom`` is the domain the steps defined or last acted on; ``base``
    the image the overlay backs onto (what a fetch put in the pool).
    """

    verdict: Any  # _proxy.verdict.Verdict
    uid: Optional[str]
    spec: Optional[dict] = None
    digest: Optional[str] = None
    base: Any = None  # _proxy.observe.BaseImage of a VM that is built
    replacing: Any = None  # the DomainObservation a replacement removes
    warnings: tuple = ()
    dom: Any = None
    policy_digest: Optional[str] = None  # the policy the VM holds once the steps ran (None: none recorded)
    policy_paths: tuple = ()  # the policy files an apply writes
    policy_drift: tuple = ()  # the policy files found changed in the guest (by hand: its recorded policy is current)
    actions: list = field(default_factory=list)

    @property
    def kept(self):
        return self.verdict.kind in (KEEP, LEAVE)


def plan(request, observation):
    """The Plan for ``request`` given ``observation`` and its verdict; raises what the request cannot get past."""
    domain, verdict = observation.domain, observation.verdict
    if verdict.kind in (REMOVE, CLEAN):
        return Plan.of(_removal(request, domain, observation.own_volumes), Outcome(verdict, None))
    if verdict.kind == LEAVE:
        metadata = domain.metadata
        return Plan.of((), Outcome(verdict, metadata.uid if metadata else None, observation.spec, observation.digest,
                                   warnings=(left_alone(request, domain, verdict),),
                                   policy_digest=metadata.policy_digest if metadata else None))
    if verdict.kind == KEEP:
        return _keep(request, observation, verdict)
    return _build(request, observation, verdict)


def _keep(request, observation, verdict):
    domain = observation.domain
    steps = []
    uid = domain.metadata.uid
    if verdict.adopt:
        uid = request.uid
        steps.append(Step(RECORD, RECORD_OWNER, domain))
    if observation.base_unverified:
        # Without its marker the base is trusted by no run: a replacement or a new VM on it would fetch again.
        steps.append(Step(VERIFY, VERIFY_IMAGE))
    # Written while the VM is off: before it starts (booted from a broken seed it would come up without its
    # cloud-init data), or once it is stopped.
    write_seed = [Step(WRITE, WRITE_SEED)] if observation.seed_stale else []
    state = domain.state
    if request.state == STATE_PRESENT:
        steps += write_seed
        if state == VIR_DOMAIN_SHUTOFF:
            steps.append(Step(START, START_DOMAIN, domain.handle))
        elif not is_active(state):
            raise PermanentError(
                "domain '%s' is in state %s and kvm_proxy only starts domains that are shut off; resume it (virsh "
                "resume) or stop it (virsh destroy) and run the task again" % (request.name, libvirt_state_name(state)))
    elif state in SHUTTING_DOWN:
        steps += _release(request, domain) + [Step(SHUTDOWN, SHUTDOWN_DOMAIN, domain.handle)] + write_seed
    elif state != VIR_DOMAIN_SHUTOFF:
        # Paused, suspended, crashed: a guest in those states cannot act on an ACPI request.
        steps += [Step(DESTROY, DESTROY_DOMAIN, domain.handle)] + write_seed
    else:
        steps += write_seed
    if domain.autostart != request.autostart:
        steps.append(Step(AUTOSTART, ENABLE_AUTOSTART if request.autostart else DISABLE_AUTOSTART, domain.handle))
    paths, drift, warning = _policy(request, observation, started=any(step.operation == START for step in steps))
    if paths:
        steps.append(Step(APPLY, APPLY_POLICY, domain))
    return Plan.of(steps, Outcome(verdict, uid, observation.spec, observation.digest,
                                  warnings=(warning,) if warning else (), policy_paths=paths, policy_drift=drift,
                                  policy_digest=request.policy_digest if paths else domain.metadata.policy_digest))


def _policy(request, observation, started):
    """(the policy files a kept VM gets written, those of them changed by hand in the guest, a warning or None).

    A VM that does not hold the request's policy gets every file, and its
    service reloaded, even where the guest's copy matches: a run cut off
    between the files and the reload left them so. A stopped one gets them
    once this run started it. One that holds it gets the files changed in
    the guest since.
    """
    policy = request.policy
    if policy is None or request.state != STATE_PRESENT:
        return (), (), None
    current = observation.domain.metadata.policy_digest == request.policy_digest
    everything = tuple(f.path for f in policy.files)
    guest = observation.guest_policy
    if guest is None:
        return (everything if started and not current else ()), (), None
    if guest.unavailable is not None:
        # Said either way, so a check-mode run names a proxy whose agent is silent or breaks the protocol: the apply
        # of one that must get the policy then fails naming it.
        warning = ("the policy files of domain '%s' could not be read back, so whether they were changed in the "
                   "guest is unknown: %s" % (request.name, guest.unavailable))
        return ((), (), warning) if current else (everything, (), warning)
    if not current:
        return everything, (), None  # written once the first boot is over, when it is still going on
    drifted = guest.drifted(policy)  # none while the first boot writes the seed's files
    return drifted, drifted, None


def _release(request, domain):
    """The step that lets a running guest release its service (policy.release) before it is shut down; none when the
    request gives no such program."""
    if request.policy is None or not request.policy.release:
        return []
    return [Step(RELEASE, RELEASE_SERVICE, domain)]


def _removal(request, domain, volumes):
    steps = []
    if domain is not None and domain.state in SHUTTING_DOWN:
        # A graceful stop lets the proxy's squid finish the connections it holds (shutdown_lifetime) before the VM
        # goes: a hard stop would cut every one of them.
        steps += _release(request, domain) + [Step(SHUTDOWN, SHUTDOWN_DOMAIN, domain.handle)]
    elif domain is not None and domain.state != VIR_DOMAIN_SHUTOFF:
        steps.append(Step(DESTROY, DESTROY_DOMAIN, domain.handle))  # paused, crashed, ...: no guest to act on ACPI
    overlay = overlay_volume_name(request.name)
    for volume in volumes:
        steps.append(Step(DELETE, DELETE_OVERLAY if volume.name == overlay else DELETE_SEED, volume.handle))
    if domain is not None:
        steps.append(Step(UNDEFINE, UNDEFINE_DOMAIN, domain.handle))
    return steps


def _overlay_fits(request, build):
    """Whether the existing overlay is the one this spec would create: qcow2 on this base, this size.

    A fetch rewrites the base, so an overlay made before it is stale whatever it says.
    """
    _handle, info = build.overlay
    return (not build.fetch and info.disk_format == "qcow2" and info.backing_path == build.base.path
            and info.capacity_bytes == request.disk_bytes)


def check_disk_size(request, base):
    if base.size is not None and base.size > request.disk_bytes:
        raise ValidationError(
            "disk_size_gb %d is smaller than the %s bytes (%.1f GiB) of base image '%s'; the VM's disk must be at "
            "least as large as its image" % (request.disk_size_gb, base.size, base.size / float(GIB), base.volume))


def _build(request, observation, verdict):
    """Build the VM; a replacement removes the old one only after what the new one needs is settled."""
    domain, build = observation.domain, observation.build
    replacing = domain if verdict.kind == REPLACE else None
    try:
        check_disk_size(request, build.base)
    except ValidationError as error:
        raise error.after(left_as_it_was(error.message, request.name, replacing), []) from error
    warnings = tuple(
        "volume '%s' of domain '%s' is missing from storage pool '%s' (deleted outside this collection?); the VM cannot "
        "boot without it and is rebuilt" % (volume, request.name, pool) for pool, volume in observation.missing_disks)
    uid = request.uid
    if uid is None and domain is not None and domain.managed:
        uid = domain.metadata.uid  # the owner stays across a replacement
    steps = [Step(FETCH, FETCH_IMAGE)] if build.fetch else []
    if replacing is not None:
        steps += _removal(request, domain, observation.own_volumes)
    if build.overlay is None or not _overlay_fits(request, build):
        if build.overlay is not None:
            steps.append(Step(DELETE, DELETE_OVERLAY, build.overlay[0]))
        steps.append(Step(CREATE_VOLUME, CREATE_OVERLAY))
    if not build.seed_current:
        steps.append(Step(WRITE, WRITE_SEED))
    steps.append(Step(DEFINE, DEFINE_DOMAIN))
    if request.state == STATE_PRESENT:
        steps.append(Step(START, START_DOMAIN))
    # A newly defined domain does not autostart.
    if request.autostart:
        steps.append(Step(AUTOSTART, ENABLE_AUTOSTART))
    if verdict.unreachable is not None:
        warnings += ("domain '%s' is replaced (on_unreachable_agent=replace): its policy could not be read back or "
                     "applied, %s" % (request.name, verdict.unreachable),)
    return Plan.of(steps, Outcome(verdict, uid, observation.spec, observation.digest, base=build.base,
                                  replacing=replacing, warnings=warnings, policy_digest=request.policy_digest))
