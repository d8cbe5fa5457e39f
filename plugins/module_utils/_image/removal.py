# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Cached copies of an image removed: kvm_base_image's state=absent, and its prune.

Public API::

    removal = remove_image(hypervisor, pool_name, spec, options, check_mode=False, departing=(volume,))   # state=absent
    removal = prune_images(hypervisor, pool_name, image_name, keep=(volume,), check_mode=False)
    removal.removed, removal.kept, removal.changed, removal.actions, removal.diff(), removal.as_dict()

    # the same, step by step (_common.plan)
    observation = observe_removal(hypervisor, request)
    plan = plan_removal(request, observation)
    removal = plan.result if check_mode else apply_removal(hypervisor, request, observation, plan)

No base that another volume of the pool backs onto is ever removed: removing
the image fails naming the volumes that use it, pruning keeps it and says so.
A real run removes each base under its lock (_common.locks), after reading it again:
a run may have finished that download, or created an overlay on it, since.
``departing`` names the volumes the same run removes first (the proxies a
playbook removes before their image): check mode, which removed nothing,
predicts them gone; the real run's check under the lock counts only what
the pool still holds.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass, field, replace
from typing import Any, Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.locks import DEFAULT_LOCK_TIMEOUT, volume_lock
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import (
    base_volume_name,
    validate_image_name,
    validate_pool_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.plan import Plan, Result, Step, execute
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.download import open_downloader
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.options import DEFAULT_DOWNLOAD_OPTIONS
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.pool import (
    image_volumes,
    in_use_error,
    observe_base,
    with_users,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.storage import require_pool, volume_deleter

DELETE = "delete"


@dataclass(frozen=True)
class RemovalRequest:
    """The cached copies of ``image`` in ``pool`` to remove: ``only`` that base volume (None: every one) but those in ``keep``.

    ``strict`` (state=absent) fails on a base in use before removing
    anything; otherwise (prune) such a base is kept and reported. Volumes
    named in ``departing`` do not count as users.
    """

    pool: str
    image: str
    only: Optional[str] = None
    keep: tuple = ()
    strict: bool = False
    departing: frozenset = frozenset()

    def __post_init__(self):
        validate_image_name(self.image)
        validate_pool_name(self.pool)

    def targets(self, name):
        return (self.only is None or name == self.only) and name not in self.keep


@dataclass(frozen=True)
class RemovalObservation:
    """The pool's handle and its cached copies of the image: {base volume name: _image.pool.CachedBase}.

    Only the copies the request targets have their users read.
    """

    pool: Any
    bases: dict


@dataclass(frozen=True)
class RemovalResult(Result):
    """What remove_image or prune_images removed, and the bases kept because volumes use them.

    ``kept`` lists ``{"volume": base, "used_by": [volume, ...], "used_by_domains": [domain, ...]}``.
    ``bases_before``/``bases_after`` are the image's base volumes in the pool.
    """

    removed: list = field(default_factory=list)
    kept: list = field(default_factory=list)
    actions: list = field(default_factory=list)
    bases_before: list = field(default_factory=list)
    bases_after: list = field(default_factory=list)
    pruning: bool = False

    def diff(self):
        return {"before": {"bases": list(self.bases_before)}, "after": {"bases": list(self.bases_after)}}

    def as_dict(self):
        """The module result; ``kept`` from a prune only (removing the image fails on a base in use instead)."""
        result = {"changed": self.changed, "removed": list(self.removed), "actions": list(self.actions)}
        if self.pruning:
            result["kept"] = [dict(entry) for entry in self.kept]
        return result

    def then(self, other):
        """This result followed by ``other``'s removals and kept bases (of the same pool listing)."""
        removed = self.removed + other.removed
        return replace(self, removed=removed, kept=self.kept + other.kept, actions=self.actions + other.actions,
                       bases_after=[name for name in self.bases_before if name not in removed])


def observe_removal(hypervisor, request):
    """The RemovalObservation for ``request``: the pool's copies of the image, the targeted ones' users."""
    pool = require_pool(hypervisor, request.pool)
    bases = {}
    for name, cached in sorted(image_volumes(hypervisor, pool, request.image).items()):
        bases[name] = with_users(hypervisor, pool, request.pool, cached) if request.targets(name) else cached
    return RemovalObservation(pool, bases)


def plan_removal(request, observation):
    """Delete each targeted copy's marker, then its base (a base without marker is never used as ready).

    Raises PermanentError when ``request.strict`` and a targeted base is in use.
    """
    targets = {name: cached for name, cached in observation.bases.items() if request.targets(name)}
    users = {name: cached.users.without(request.departing) for name, cached in targets.items()}
    in_use = {name: users[name] for name in sorted(targets) if users[name]}
    if request.strict and in_use:
        name = sorted(in_use)[0]
        raise in_use_error(name, request.pool, in_use[name], "cannot remove image")
    steps, removed = [], []
    for name, cached in sorted(targets.items()):
        if name in in_use or not cached.exists:
            continue
        if cached.marker is not None:
            steps.append(Step(DELETE, "delete marker volume %s" % cached.marker_name, cached.marker))
        if cached.base is not None:
            steps.append(Step(DELETE, "delete base volume %s" % name, cached.base))
        removed.append(name)
    return Plan.of(steps, RemovalResult(
        removed=removed, kept=[{"volume": name, "used_by": list(users.volumes), "used_by_domains": list(users.domains)}
                               for name, users in sorted(in_use.items())],
        bases_before=sorted(observation.bases), bases_after=sorted(name for name in observation.bases if name not in removed),
        pruning=not request.strict))


def apply_removal(hypervisor, request, observation, plan, lock_timeout=DEFAULT_LOCK_TIMEOUT, lock_dir=None):
    """Carry out plan_removal's plan: each base under its lock, planned again on what the pool holds then."""
    result = replace(plan.result, removed=[], actions=[], bases_after=list(plan.result.bases_before))
    operations = {DELETE: volume_deleter(hypervisor)}
    # By now the departing volumes are gone, or this base is still in use.
    request = replace(request, departing=frozenset())
    for name in plan.result.removed:
        with volume_lock(hypervisor.uri, request.pool, name, lock_timeout, lock_dir):
            # Re-read under the lock: a run may have finished this download or
            # created an overlay on it while we were looking at other volumes.
            cached = with_users(hypervisor, observation.pool, request.pool, observe_base(hypervisor, observation.pool, name))
            again = plan_removal(request, RemovalObservation(observation.pool, {name: cached}))
            result = result.then(execute(again, operations))
    return result


def remove_image(hypervisor, pool_name, spec, options=DEFAULT_DOWNLOAD_OPTIONS, check_mode=False, http=None,
                 lock_dir=None, departing=()):
    """Remove cached copies of an image (a RemovalResult); fail without removing anything if one is in use.

    ``options`` (an _image.options.DownloadOptions) are for the SHA256SUMS file a checksum may name, and the locks.

    A volume named in ``departing`` (removed by the same run before this) does not count as using a base.

    With a checksum only that content's base is removed (in ``spec.format``);
    without one, every cached base of the image name, whatever its checksum
    or format.
    """
    validate_pool_name(pool_name)
    with open_downloader(options, http) as downloader:
        sha256 = downloader.sha256_of(spec)
    only = base_volume_name(spec.name, spec.format, sha256) if sha256 is not None else None
    request = RemovalRequest(pool_name, spec.name, only=only, strict=True, departing=frozenset(departing))
    return _run(hypervisor, request, check_mode, options.lock_timeout, lock_dir)


def prune_images(hypervisor, pool_name, image, keep=(), check_mode=False, lock_timeout=DEFAULT_LOCK_TIMEOUT,
                 lock_dir=None):
    """Remove the cached copies of ``image`` that no volume uses, except the base volumes in ``keep``.

    Bases in use are kept and reported in ``kept`` with their users.
    """
    return _run(hypervisor, RemovalRequest(pool_name, image, keep=tuple(keep)), check_mode, lock_timeout, lock_dir)


def _run(hypervisor, request, check_mode, lock_timeout, lock_dir):
    observation = observe_removal(hypervisor, request)
    plan = plan_removal(request, observation)
    return plan.result if check_mode else apply_removal(hypervisor, request, observation, plan, lock_timeout, lock_dir)
