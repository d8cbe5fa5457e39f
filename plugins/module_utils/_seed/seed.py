# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A VM's cloud-init seed volume, ``<name>-seed.iso``, kept holding exactly its NoCloud files.

Public API (kvm_seed and kvm_proxy call it)::

    files = seed_files(name, user_data, meta_data, vendor_data, network_config)   # _seed.nocloud
    result = ensure_seed(hypervisor, pool_name, name, files, check_mode=False)    # a SeedResult
    removal = seed_removal(hypervisor, pool_name, name, check_mode=False)         # a SeedRemovalResult

    # the same, step by step (_common.plan): observe, plan, then apply unless in check mode
    request = SeedRequest.of(pool_name, name, files)                              # the image built
    plan = plan_seed(request, observe_seed(hypervisor, request))
    result = plan.result if check_mode else apply_seed(hypervisor, request, plan)
    plan = plan_seed_removal(observe_seed_removal(hypervisor, pool_name, name), pool_name)
    result = plan.result if check_mode else apply_seed_removal(hypervisor, plan)

The files are rendered in _seed.nocloud, the image built and read in _seed.iso9660.
The existing volume is read back through libvirt (its capacity, when that
is within the read limit), parsed and compared file by file: the same files
leave it untouched. Different files, or a volume that is not a complete seed
(an upload cut off earlier leaves one), are replaced: delete, create a raw
volume of the image's size, upload. A truncated seed is never kept, since a
VM booted from it would come up without its cloud-init configuration.

A seed that a domain has as a disk is never removed (_libvirt.storage.find_users,
the check that keeps a base image its overlays use): the VM could not start
again, and kvm_proxy would rebuild it on a wiped disk.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError, PermanentError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import seed_volume_name, validate_pool_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.plan import Plan, Result, Step, execute
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT, STATE_PRESENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.storage import (
    VolumeUsers,
    find_pool,
    find_users,
    find_volume,
    require_pool_found,
    volume_deleter,
    volume_info,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import VolumeSpec, build_volume_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import (
    UnreadableSeedError,
    build_iso,
    read_iso,
)

UPLOAD_CHUNK = 256 * 1024
# NoCloud seeds hold a few small text files. A volume larger than this is
# not read into memory at all: it is reported unreadable and replaced.
MAX_SEED_READ = 16 * 1024 * 1024

# What the task found where the seed volume should be: STATE_ABSENT, STATE_PRESENT, or a volume that is no seed.
PREVIOUS_UNREADABLE = "unreadable"

# The operations of the seed's plan steps.
DELETE = "delete"
WRITE = "write"


def file_summary(files):
    """``[{name, sha256, size}]`` for ``{file name: bytes}``, in the files' order."""
    return [{"name": name, "sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
            for name, content in files.items()]


def changed_file_names(current, desired):
    """Names of files added, removed or modified going from ``current`` to ``desired``; sorted."""
    return sorted(name for name in set(current) | set(desired) if current.get(name) != desired.get(name))


def read_limit(image_size):
    """How much of an existing volume is read back: never below twice this task's own image.

    Another ISO writer may pad these very files to more than the image built
    here: a seed of them must always be read back, or a large user-data
    would be rewritten on every run.
    """
    return max(MAX_SEED_READ, 2 * image_size)


@dataclass(frozen=True)
class SeedRequest:
    """The seed to have: volume ``volume`` of pool ``pool`` holding exactly ``files``; ``image`` is built of them."""

    pool: str
    volume: str
    files: dict
    image: bytes

    @classmethod
    def of(cls, pool_name, name, files):
        validate_pool_name(pool_name)
        volume = seed_volume_name(name)
        return cls(pool_name, volume, files, build_iso(files))


@dataclass(frozen=True)
class SeedObservation:
    """The pool's handle (None: no such pool) and what its volume ``volume`` (the seed's name) holds.

    ``vol`` is that volume's handle (None: absent), ``files`` what it was read
    back as (None when absent or unreadable, ``problem`` then says why).
    ``users`` (_libvirt.storage.VolumeUsers) are read for a removal only.
    """

    volume: str
    pool: Any
    vol: Any = None
    path: Optional[str] = None
    capacity: Optional[int] = None
    files: Optional[dict] = None
    problem: Optional[str] = None
    users: VolumeUsers = VolumeUsers()


@dataclass(frozen=True)
class SeedResult(Result):
    """What ensure_seed found and did (or, in check mode, would do).

    ``files`` summarises the desired files, ``current_files`` holds the
    contents read from the volume (None unless ``previous_state`` is
    STATE_PRESENT), for callers that show them on request, and
    ``new_files`` the desired contents. ``changed_files`` compares contents
    when the volume was read, and is every desired file when it was absent
    or unreadable (then nothing is known of what it held). ``reason`` says
    why the volume is (re)written (None when unchanged). With
    ``diff_content`` the diff also shows the changed files' contents.
    """

    volume: str
    # Not "path" in results: Ansible adds a stat of the local file at any result's "path".
    volume_path: Optional[str]
    size: Optional[int]
    previous_state: str
    changed_files: list = field(default_factory=list)
    files: list = field(default_factory=list)
    current_files: Optional[dict] = None
    new_files: dict = field(default_factory=dict)
    reason: Optional[str] = None
    actions: list = field(default_factory=list)
    diff_content: bool = False

    @property
    def previous(self):
        """The summary of the files found on the volume, or None."""
        return None if self.current_files is None else file_summary(self.current_files)

    def as_dict(self):
        return {
            "changed": self.changed,
            "volume": self.volume,
            "volume_path": self.volume_path,
            "size": self.size,
            "previous_state": self.previous_state,
            "changed_files": list(self.changed_files),
            "files": [dict(entry) for entry in self.files],
            "reason": self.reason,
            "actions": list(self.actions),
        }

    def diff(self):
        """``{before, after}``: the volume's state and each file's sha256 and size; contents only with diff_content."""
        before = {"volume": self.volume, "state": self.previous_state}
        if self.current_files is not None:
            before["files"] = _by_name(self.previous)
        diff = {"before": before, "after": {"volume": self.volume, "state": STATE_PRESENT, "files": _by_name(self.files)}}
        if self.diff_content and self.changed:
            diff["prepared"] = content_diff(self.volume, self.current_files or {}, self.new_files)
        return diff


@dataclass(frozen=True)
class SeedRemovalResult(Result):
    """What removing the seed volume found and did; ``reason`` is None when there was nothing to remove."""

    volume: str
    reason: Optional[str] = None
    actions: list = field(default_factory=list)

    def as_dict(self):
        return {"changed": self.changed, "volume": self.volume, "volume_path": None, "reason": self.reason,
                "actions": list(self.actions)}

    def diff(self):
        return {"before": {"volume": self.volume, "state": STATE_PRESENT if self.changed else STATE_ABSENT},
                "after": {"volume": self.volume, "state": STATE_ABSENT}}


def _by_name(summary):
    return {entry["name"]: {"sha256": entry["sha256"], "size": entry["size"]} for entry in summary}


def observe_seed(hypervisor, request):
    """The SeedObservation for ``request``: the volume read back (bounded), parsed, or why it could not be."""
    pool = require_pool_found(hypervisor, request.pool)
    vol = find_volume(hypervisor, pool, request.volume)
    if vol is None:
        return SeedObservation(request.volume, pool)
    info = volume_info(hypervisor, vol)
    capacity, limit = info.capacity_bytes, read_limit(len(request.image))
    found = SeedObservation(request.volume, pool, vol, info.path, capacity)
    if capacity is not None and capacity > limit:
        return replace(found, problem="volume %s is %d bytes, too large for a seed (at most %d bytes are read back)"
                       % (request.volume, capacity, limit))
    data = b"".join(hypervisor.download_volume(vol, limit=capacity if capacity else limit))
    try:
        return replace(found, files=read_iso(data))
    except UnreadableSeedError as exc:
        return replace(found, problem="volume %s is not a readable seed: %s" % (request.volume, exc.message))


def plan_seed(request, observation):
    """Nothing when the volume holds the request's files; else delete it (if there), create and upload the image."""
    volume, vol = request.volume, observation.vol
    result = SeedResult(volume, observation.path, observation.capacity, STATE_PRESENT, files=file_summary(request.files),
                        current_files=observation.files, new_files=request.files)
    if observation.files is not None:
        changed_files = changed_file_names(observation.files, request.files)
        if not changed_files:
            return Plan((), result)
        reason = "files on volume %s differ: %s" % (volume, ", ".join(changed_files))
    else:
        # Absent or unreadable, nothing is known of the old files: every file is new.
        changed_files = sorted(request.files)
        result = replace(result, previous_state=PREVIOUS_UNREADABLE if vol is not None else STATE_ABSENT)
        reason = observation.problem if vol is not None else "volume %s does not exist" % volume
    steps = [Step(DELETE, "delete volume %s" % volume, vol)] if vol is not None else []
    steps.append(Step(WRITE, "create volume %s (%d bytes)" % (volume, len(request.image)), observation.pool,
                      also=("upload seed to volume %s" % volume,)))
    return Plan.of(steps, replace(result, size=len(request.image), changed_files=changed_files, reason=reason))


def observe_seed_removal(hypervisor, pool_name, name):
    """The SeedObservation removal needs: the pool and the volume, if they exist, and who uses it (files are not read)."""
    validate_pool_name(pool_name)
    volume = seed_volume_name(name)
    pool = find_pool(hypervisor, pool_name)
    vol = find_volume(hypervisor, pool, volume) if pool is not None else None
    if vol is None:
        return SeedObservation(volume, pool)
    info = volume_info(hypervisor, vol)
    return SeedObservation(volume, pool, vol, info.path, info.capacity_bytes,
                           users=find_users(hypervisor, pool, pool_name, info))


def plan_seed_removal(observation, pool_name):
    """Delete the seed volume when there is one; a PermanentError naming the domains that use it, before anything is deleted."""
    volume, vol = observation.volume, observation.vol
    if vol is None:
        return Plan((), SeedRemovalResult(volume))
    if observation.users:
        raise PermanentError(
            "cannot delete seed volume '%s' in pool '%s': it is %s, which could not boot without it; remove the VM "
            "first (kvm_proxy state=absent removes a proxy with its seed, virsh undefine another domain), or keep "
            "the seed. Nothing was deleted" % (volume, pool_name, observation.users.describe()))
    return Plan.of([Step(DELETE, "delete volume %s" % volume, vol)],
                   SeedRemovalResult(volume, reason="volume %s exists and state is absent" % volume))


def apply_seed(hypervisor, request, plan):
    """Carry out plan_seed's plan."""
    return execute(plan, {DELETE: volume_deleter(hypervisor),
                          WRITE: lambda pool, result: _write(hypervisor, request, pool, result)})


def apply_seed_removal(hypervisor, plan):
    """Carry out plan_seed_removal's plan."""
    return execute(plan, {DELETE: volume_deleter(hypervisor)})


def _chunks(data):
    view = memoryview(data)
    for start in range(0, len(view), UPLOAD_CHUNK):
        yield view[start:start + UPLOAD_CHUNK]


def _write(hypervisor, request, pool, result):
    """A raw volume holding the request's image; the result with its path."""
    new_vol = hypervisor.create_volume(pool, build_volume_xml(VolumeSpec(request.volume, len(request.image), "raw")))
    try:
        hypervisor.upload_volume(new_vol, _chunks(request.image))
    except KvmError as error:
        # The volume now holds part of a seed. It is removed when the
        # connection still allows it; if not, the next run reads it back,
        # finds it truncated and rebuilds it, so it is never used as is.
        try:
            hypervisor.delete_volume(new_vol)
            fate = "the partial volume was removed"
        except KvmError:
            fate = "the partial volume is left in place and will be rebuilt on the next run"
        raise type(error)(
            "uploading seed volume %s to pool %s failed (%s): %s" % (request.volume, request.pool, fate, error.message),
            code=error.code, libvirt_message=error.libvirt_message) from error
    return replace(result, volume_path=hypervisor.volume_path(new_vol))


def ensure_seed(hypervisor, pool_name, name, files, check_mode=False):
    """Make volume ``<name>-seed.iso`` in pool ``pool_name`` a seed holding exactly ``files`` (a SeedResult).

    In check mode only reads happen and the result predicts the change. A
    missing pool is a NotFoundError that says how to get one.
    """
    request = SeedRequest.of(pool_name, name, files)
    plan = plan_seed(request, observe_seed(hypervisor, request))
    return plan.result if check_mode else apply_seed(hypervisor, request, plan)


def seed_removal(hypervisor, pool_name, name, check_mode=False):
    """Delete volume ``<name>-seed.iso`` (a SeedRemovalResult). A missing pool or volume is nothing to do.

    A seed a domain uses is refused (PermanentError naming it), in check mode too.
    """
    plan = plan_seed_removal(observe_seed_removal(hypervisor, pool_name, name), pool_name)
    return plan.result if check_mode else apply_seed_removal(hypervisor, plan)


def _text(content):
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        return None


def content_diff(volume, current, desired):
    """A unified diff of every file that differs between ``current`` and ``desired`` ({name: bytes})."""
    parts = []
    for name in sorted(set(current) | set(desired)):
        before, after = current.get(name), desired.get(name)
        if before == after:
            continue
        before_text = "" if before is None else _text(before)
        after_text = "" if after is None else _text(after)
        header_before = "/dev/null" if before is None else "%s (before)/%s" % (volume, name)
        header_after = "/dev/null" if after is None else "%s (after)/%s" % (volume, name)
        if before_text is None or after_text is None:
            parts.append("Binary file %s differs\n" % name)
            continue
        lines = difflib.unified_diff(before_text.splitlines(True), after_text.splitlines(True), header_before, header_after)
        parts.append("".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines))
    return "".join(parts)
