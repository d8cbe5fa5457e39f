# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What happens to the VM a task names: how the task relates to the domain found, and the verdict.

Observing reads the domain first and asks for the verdict to know what else
to read (a kept VM's disks, the volumes a removal deletes, what a build
needs); planning turns the verdict into steps. It is decided once, here:

- A domain this collection did not create, or one recorded with another
  owner, is refused for replacement and deletion unless forced or adopted;
  another owner's VM that already matches is reported and left exactly as it
  is, and so is one a set (leave_others) was asked to remove.
- A domain built from the same spec stays (KEEP); one that differs has
  drifted and is replaced, or with on_drift=ignore kept and reported drifted.
  A VM whose disk is gone is rebuilt like a drifted one, and says so.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass
from typing import Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import INSTANCE_TAG, METADATA_URI
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import is_active, libvirt_state_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import ADOPT_ANY, ON_DRIFT_IGNORE

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
    """What happens to the VM; ``owner`` is the task's relation to the domain found (None when there is none)."""

    kind: str
    drifted: bool = False
    adopt: bool = False
    owner: Optional[str] = None
    unreachable: Optional[str] = None  # why a running VM is replaced: its guest agent did not answer (the message)


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
    """The Verdict on ``domain`` (None: there is none); raises the refusal when this task may not touch it.

    ``digest`` is the request's spec digest; ``missing`` the domain's disks that are gone.
    """
    if domain is None:
        return Verdict(CLEAN if request.state == STATE_ABSENT else CREATE)
    owner = ownership(request, domain)
    problem = _ownership_problem(request, domain, owner)
    what = "delete" if request.state == STATE_ABSENT else "replace"
    matches = domain.managed and domain.metadata.spec_digest == digest
    if problem is not None and not request.force and (
            request.leave_others if what == "delete" else owner == FOREIGN and matches and not missing):
        return Verdict(LEAVE, owner=owner)
    if problem is not None and not request.force:
        raise _refusal(problem, what, domain.metadata.uid if owner == FOREIGN else None)
    if what == "delete":
        return Verdict(REMOVE, owner=owner)
    if problem is None and not missing and (matches or request.on_drift == ON_DRIFT_IGNORE):
        return Verdict(KEEP, drifted=not matches, adopt=owner == ADOPTABLE, owner=owner)
    return Verdict(REPLACE, drifted=problem is None and (not matches or bool(missing)), owner=owner)


def disks_matter(verdict, domain):
    """Whether the domain's disks must be looked for: a running VM holds them open and keeps working."""
    return verdict.kind in (KEEP, LEAVE) and not is_active(domain.state)


def left_alone(request, domain, verdict):
    """Why ``domain``, which the verdict LEAVE spares, was left as it is, and how a user would make the task act on it."""
    if request.state != STATE_ABSENT:
        return ("domain '%s' matches this task's spec but is owned by uid '%s', not '%s'; it was left as it is (state "
                "and autostart included). Add '%s' to adopt_uids to take it over" % (
                    request.name, domain.metadata.uid, request.uid, domain.metadata.uid))
    if verdict.owner == FOREIGN:
        return ("domain '%s' is owned by uid '%s', not by this task's uid '%s'; it was left as it is, not removed. Add "
                "'%s' to adopt_uids, or set force=true, to remove it" % (
                    request.name, domain.metadata.uid, request.uid, domain.metadata.uid))
    return ("domain '%s' was not created by egress_proxies.kvm; it was left as it is, not removed. Remove it yourself, "
            "or set force=true to let this task remove it" % request.name)


def left_as_it_was(message, name, replacing):
    """``message``, saying so when a replacement failed before it touched the VM it replaces (``replacing``, or None)."""
    if replacing is None:
        return message
    return "%s; domain '%s' was left as it was (%s) and still needs replacing" % (
        message, name, libvirt_state_name(replacing.state))
