# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_proxy's decisions: a pure function from the request and the observation to an immutable plan.

The order and its reasons, ported from the reference provider's lessons:

- A domain built from the same spec stays: only its running state, autostart
  flag and (when adopted) owner are made right; its volumes are never touched.
- A domain that differs has drifted: it is replaced (these are stateless
  proxies), or with on_drift=ignore left alone and reported drifted. A
  stopped VM whose own disk is gone cannot boot and is rebuilt; one whose
  seed was cut short or overwritten gets it written again before it starts.
- A replacement first fetches and checks everything the new VM needs (the
  base image is content-addressed, so fetching never disturbs the old VM's
  base), and only then removes the old VM.
- Removal (for a replacement too) stops the VM gracefully first (ACPI, then a
  hard stop after shutdown_timeout), so its squid can finish what it serves;
  then it deletes the overlay and seed, and undefines the domain last: a run
  cut off half-way still finds the domain next time and finishes.
- A stopped VM whose seed is gone gets it written again (it holds only the
  request's data); one whose disk is gone is rebuilt, and reported drifted:
  a rebuild is never reported as no drift.
- A domain this collection did not create, or one recorded with another owner,
  is refused for replacement and deletion unless forced or adopted; another
  owner's VM that already matches is reported and left exactly as it is, and
  so is one a set (leave_others) was asked to remove.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass
from typing import Any, Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import overlay_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import INSTANCE_TAG, METADATA_URI
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import (
    VIR_DOMAIN_BLOCKED,
    VIR_DOMAIN_RUNNING,
    VIR_DOMAIN_SHUTDOWN,
    VIR_DOMAIN_SHUTOFF,
    is_active,
    libvirt_state_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import (
    ADOPT_ANY,
    GIB,
    ON_DRIFT_IGNORE,
    STATE_ABSENT,
    STATE_PRESENT,
)

# The names of the actions, as the result's ``actions`` lists them.
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
# Once one of these ran, a replacement can no longer say it left the old VM as it was.
REMOVAL_ACTIONS = frozenset((SHUTDOWN_DOMAIN, DESTROY_DOMAIN, DELETE_OVERLAY, DELETE_SEED, UNDEFINE_DOMAIN))

# States in which an ACPI shutdown request reaches a guest that will act on it.
SHUTTING_DOWN = (VIR_DOMAIN_RUNNING, VIR_DOMAIN_BLOCKED, VIR_DOMAIN_SHUTDOWN)

# How a task relates to an existing domain of its name.
OWN = "own"  # recorded with this task's uid, or the task gives none
ADOPTABLE = "adoptable"  # recorded with a uid listed in adopt_uids
FOREIGN = "foreign"  # recorded with another uid
UNMANAGED = "unmanaged"  # not created by this collection

# What happens to the VM.
CREATE = "create"  # none exists: build it
CLEAN = "clean"  # none exists and none is wanted: delete volumes a dead run left
REMOVE = "remove"
KEEP = "keep"  # it stays; state, autostart and owner are made right
LEAVE = "leave"  # another owner's matching VM, or another's (or nobody's) a set removes: reported, not touched
REPLACE = "replace"


@dataclass(frozen=True)
class Verdict:
    kind: str
    drifted: bool = False
    adopt: bool = False


@dataclass(frozen=True)
class Observation:
    """Everything the planner reads, gathered by _proxy.py through _proxy_observe.py."""

    domain: Any = None  # DomainObservation or None
    spec: Optional[dict] = None  # the request's spec (None for state absent)
    digest: Optional[str] = None
    own_volumes: tuple = ()  # OwnVolume found by name, for removal
    missing_disks: tuple = ()  # (pool, volume) of the domain's disks that are gone
    build: Any = None  # BuildObservation when the VM is built
    seed_stale: bool = False  # a kept, stopped VM's seed does not hold exactly its files (truncated, overwritten)
    base_unverified: bool = False  # a kept VM's base has a missing or wrong marker (the image cache hashes it again)


@dataclass(frozen=True)
class Step:
    action: str
    target: Any = None  # the handle the step acts on, when it acts on one it was planned for


@dataclass(frozen=True)
class Plan:
    """The ordered steps, and what the result and diff say about them."""

    steps: tuple
    verdict: Verdict
    uid: Optional[str]  # None: a new VM whose random uid is chosen when it is defined
    spec: Optional[dict] = None
    digest: Optional[str] = None
    base: Any = None  # BaseImage of a VM that is built
    replacing: Any = None  # the DomainObservation a replacement removes
    warnings: tuple = ()

    @property
    def actions(self):
        return [step.action for step in self.steps]

    @property
    def kept(self):
        return self.verdict.kind in (KEEP, LEAVE)


def ownership(request, domain):
    """How this task relates to ``domain``: OWN, ADOPTABLE, FOREIGN or UNMANAGED."""
    if not domain.managed:
        return UNMANAGED
    owner = domain.metadata.uid
    if request.uid is None or owner == request.uid:
        return OWN
    if ADOPT_ANY in request.adopt_uids or owner in request.adopt_uids:
        return ADOPTABLE
    return FOREIGN


def _ownership_problem(request, domain, owner):
    if owner == UNMANAGED:
        return ("domain '%s' exists but was not created by egress_proxies.kvm (it has no managed <%s> element in "
                "namespace %s)" % (request.name, INSTANCE_TAG, METADATA_URI))
    if owner == FOREIGN:
        return "domain '%s' is owned by uid '%s', not by this task's uid '%s'" % (request.name, domain.metadata.uid, request.uid)
    return None


def _refusal(problem, what, foreign_uid):
    adopt = ""
    if foreign_uid is not None:
        adopt = ", add '%s' to adopt_uids to take it over (%s)" % (
            foreign_uid, "and delete it" if what == "delete" else "it is replaced when its spec differs")
    return PermanentError(
        "%s; refusing to %s it. Nothing was changed. Choose another name, remove the domain yourself%s, or set "
        "force=true to let this task %s it" % (problem, what, adopt, what))


def assess(request, digest, domain, missing=()):
    """What happens to the VM; raises the refusal when this task may not touch the domain it found."""
    if domain is None:
        return Verdict(CLEAN if request.state == STATE_ABSENT else CREATE)
    owner = ownership(request, domain)
    problem = _ownership_problem(request, domain, owner)
    what = "delete" if request.state == STATE_ABSENT else "replace"
    matches = domain.managed and domain.metadata.spec_digest == digest
    if problem is not None and not request.force and (
            request.leave_others if what == "delete" else owner == FOREIGN and matches and not missing):
        return Verdict(LEAVE)
    if problem is not None and not request.force:
        raise _refusal(problem, what, domain.metadata.uid if owner == FOREIGN else None)
    if what == "delete":
        return Verdict(REMOVE)
    if problem is None and not missing and (matches or request.on_drift == ON_DRIFT_IGNORE):
        return Verdict(KEEP, drifted=not matches, adopt=owner == ADOPTABLE)
    # A VM whose disk is gone is rebuilt like a drifted one, and says so.
    return Verdict(REPLACE, drifted=problem is None and (not matches or bool(missing)))


def disks_matter(verdict, domain):
    """Whether the domain's disks must be looked for: a running VM holds them open and keeps working."""
    return verdict.kind in (KEEP, LEAVE) and not is_active(domain.state)


def left_alone(request, domain):
    """Why ``domain``, which the verdict LEAVE spares, was left as it is, and how a user would make the task act on it."""
    if request.state != STATE_ABSENT:
        return ("domain '%s' matches this task's spec but is owned by uid '%s', not '%s'; it was left as it is (state "
                "and autostart included). Add '%s' to adopt_uids to take it over" % (
                    request.name, domain.metadata.uid, request.uid, domain.metadata.uid))
    if ownership(request, domain) == FOREIGN:
        return ("domain '%s' is owned by uid '%s', not by this task's uid '%s'; it was left as it is, not removed. Add "
                "'%s' to adopt_uids, or set force=true, to remove it" % (
                    request.name, domain.metadata.uid, request.uid, domain.metadata.uid))
    return ("domain '%s' was not created by egress_proxies.kvm; it was left as it is, not removed. Remove it yourself, "
            "or set force=true to let this task remove it" % request.name)


def left_as_it_was(message, name, replacing, attempted=()):
    """``message``, saying so when a replacement failed before it touched the VM it replaces."""
    if replacing is None or REMOVAL_ACTIONS.intersection(attempted):
        return message
    return "%s; domain '%s' was left as it was (%s) and still needs replacing" % (
        message, name, libvirt_state_name(replacing.state))


def plan(request, observation):
    """The Plan for ``request`` given ``observation``; raises what the request cannot get past."""
    domain = observation.domain
    verdict = assess(request, observation.digest, domain, observation.missing_disks)
    if verdict.kind in (REMOVE, CLEAN):
        return Plan(_removal(request, domain, observation.own_volumes), verdict, None)
    if verdict.kind == LEAVE:
        return Plan((), verdict, domain.metadata.uid if domain.metadata else None, observation.spec, observation.digest,
                    warnings=(left_alone(request, domain),))
    if verdict.kind == KEEP:
        return _keep(request, observation, verdict)
    return _build(request, observation, verdict)


def _keep(request, observation, verdict):
    domain = observation.domain
    steps = []
    uid = domain.metadata.uid
    if verdict.adopt:
        uid = request.uid
        steps.append(Step(RECORD_OWNER, domain))
    if observation.base_unverified:
        # Without its marker the base is trusted by no run: a replacement or a new VM on it would fetch again.
        steps.append(Step(VERIFY_IMAGE))
    if observation.seed_stale:
        # Written before the VM starts: booted from a broken seed it would come up without its cloud-init data.
        steps.append(Step(WRITE_SEED))
    state = domain.state
    if request.state == STATE_PRESENT:
        if state == VIR_DOMAIN_SHUTOFF:
            steps.append(Step(START_DOMAIN, domain.handle))
        elif not is_active(state):
            raise PermanentError(
                "domain '%s' is in state %s and kvm_proxy only starts domains that are shut off; resume it (virsh "
                "resume) or stop it (virsh destroy) and run the task again" % (request.name, libvirt_state_name(state)))
    elif state in SHUTTING_DOWN:
        steps.append(Step(SHUTDOWN_DOMAIN, domain.handle))
    elif state != VIR_DOMAIN_SHUTOFF:
        # Paused, suspended, crashed: a guest in those states cannot act on an ACPI request.
        steps.append(Step(DESTROY_DOMAIN, domain.handle))
    if domain.autostart != request.autostart:
        steps.append(Step(ENABLE_AUTOSTART if request.autostart else DISABLE_AUTOSTART, domain.handle))
    return Plan(tuple(steps), verdict, uid, observation.spec, observation.digest)


def _removal(request, domain, volumes):
    steps = []
    if domain is not None and domain.state in SHUTTING_DOWN:
        # A graceful stop lets the proxy's squid finish the connections it holds (shutdown_lifetime) before the VM
        # goes: a hard stop would cut every one of them.
        steps.append(Step(SHUTDOWN_DOMAIN, domain.handle))
    elif domain is not None and domain.state != VIR_DOMAIN_SHUTOFF:
        steps.append(Step(DESTROY_DOMAIN, domain.handle))  # paused, crashed, ...: no guest to act on ACPI
    overlay = overlay_volume_name(request.name)
    for volume in volumes:
        steps.append(Step(DELETE_OVERLAY if volume.name == overlay else DELETE_SEED, volume.handle))
    if domain is not None:
        steps.append(Step(UNDEFINE_DOMAIN, domain.handle))
    return tuple(steps)


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
    try:
        check_disk_size(request, build.base)
    except ValidationError as error:
        raise error.after(left_as_it_was(error.message, request.name, domain if verdict.kind == REPLACE else None),
                          []) from error
    warnings = tuple(
        "volume '%s' of domain '%s' is missing from storage pool '%s' (deleted outside this collection?); the VM cannot "
        "boot without it and is rebuilt" % (volume, request.name, pool) for pool, volume in observation.missing_disks)
    uid = request.uid
    if uid is None and domain is not None and domain.managed:
        uid = domain.metadata.uid  # the owner stays across a replacement
    steps = [Step(FETCH_IMAGE)] if build.fetch else []
    if verdict.kind == REPLACE:
        steps += _removal(request, domain, observation.own_volumes)
    if build.overlay is None or not _overlay_fits(request, build):
        if build.overlay is not None:
            steps.append(Step(DELETE_OVERLAY, build.overlay[0]))
        steps.append(Step(CREATE_OVERLAY))
    if not build.seed_current:
        steps.append(Step(WRITE_SEED))
    steps.append(Step(DEFINE_DOMAIN))
    if request.state == STATE_PRESENT:
        steps.append(Step(START_DOMAIN))
    # A newly defined domain does not autostart.
    if request.autostart:
        steps.append(Step(ENABLE_AUTOSTART))
    return Plan(tuple(steps), verdict, uid, observation.spec, observation.digest, base=build.base,
                replacing=domain if verdict.kind == REPLACE else None, warnings=warnings)
