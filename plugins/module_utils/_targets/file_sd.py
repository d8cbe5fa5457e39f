# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The Prometheus file_sd file of the egress proxies: every hypervisor's target groups in one file.

Runs that each converge some of the hypervisors (--limit, AWX job slicing) write the same file at once. Each
replaces the groups of the hypervisors it listed and keeps the others' as the file has them, so the file is read,
joined and written under an flock of a lock file beside it: a run that read the file before another wrote it would
otherwise put back the other's old groups. The file is written beside and renamed into place, so Prometheus never
reads half of it::

    changed, before, after = write_file_sd(path, fresh, inventory_hosts, check_mode=False)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile
from contextlib import contextmanager

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, TransientError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.locks import flock_within

# The order of the file's groups. An HA group's target has no proxy label; two of them under one hypervisor are in
# the order of their group labels.
LABELS = ("hypervisor", "proxy", "owner", "group")
# An HA group's target (its client address, answered by whichever member holds it) is labelled target="group-address".
GROUP_TARGET_LABEL = "target"
GROUP_ADDRESS = "group-address"
# A file_sd file of a large fleet is tens of kilobytes; one larger than this is not ours to rewrite.
MAX_FILE_BYTES = 16 * 1024 * 1024


class TargetsError(PermanentError):
    """A file_sd file the targets cannot be joined with."""


def previous_groups(text):
    """The groups of the file as it is (its text; None when there is none), checked to be a file of ours."""
    if text is None:
        return []
    try:
        previous = json.loads(text)
    except ValueError as error:
        raise TargetsError("it is not JSON (%s)" % error) from None
    if not isinstance(previous, list) or not all(
            isinstance(group, dict) and isinstance(group.get("labels"), dict) and "hypervisor" in group["labels"]
            for group in previous):
        raise TargetsError("it is not a file_sd file of egress proxies (a list of target groups, each with a "
                           "hypervisor label)")
    return previous


def _group_address(group):
    """(owner, group name) of an HA group's target, None for a proxy's."""
    labels = group["labels"]
    return (labels.get("owner"), labels.get("group")) if labels.get(GROUP_TARGET_LABEL) == GROUP_ADDRESS else None


def file_sd(fresh, previous, inventory_hosts):
    """The file_sd groups to write: ``fresh`` ({hypervisor: its groups}) for the hypervisors listed this run, and the
    groups ``previous`` (the file's current text, None when there is none) has for every other hypervisor; with
    ``inventory_hosts`` (a list) only for those of them still in it, so a hypervisor gone from the inventory is gone
    from the file. ``inventory_hosts`` None keeps every other hypervisor's groups: a sliced AWX job's inventory holds
    its own slice only. An HA group's target written this run replaces the one the file has under another hypervisor
    (a run that did not list the hypervisor that wrote it before), so each group has one. Sorted by hypervisor, proxy,
    owner and group, so an unchanged fleet writes the same bytes."""
    written = [group for groups in fresh.values() for group in groups]
    rewritten = {_group_address(group) for group in written} - {None}
    kept = [group for group in previous_groups(previous) if group["labels"]["hypervisor"] not in fresh
            and (inventory_hosts is None or group["labels"]["hypervisor"] in inventory_hosts)
            and _group_address(group) not in rewritten]
    groups = kept + written
    return sorted(groups, key=lambda group: tuple(str(group["labels"].get(label, "")) for label in LABELS))


def render(groups):
    """The file's text: as ansible.builtin.to_nice_json wrote it before this module, so an upgrade changes no byte."""
    return json.dumps(groups, indent=4, sort_keys=True, separators=(",", ": "), ensure_ascii=False) + "\n"


def lock_path(path):
    """The lock file beside ``path``: in the directory the writer may write to anyway."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, ".%s.lock" % name)


@contextmanager
def locked(path, timeout):
    """Hold the flock of ``path``'s lock file (created when missing, left in place) for the read, join and write; a
    run that holds it longer than ``timeout`` seconds makes this one fail, naming the lock file. The kernel drops the
    lock of a run that dies, so no lock outlives its run."""
    name = lock_path(path)
    try:
        # Not through a symlink: in a directory others may write to, one planted there would be opened in its place.
        descriptor = os.open(name, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise PermanentError("cannot open the lock file %s: %s" % (name, error.strerror)) from None
    try:
        try:
            held = flock_within(descriptor, timeout)
        except OSError as error:
            raise PermanentError("cannot lock %s: %s" % (name, error.strerror)) from None
        if not held:
            raise TransientError("another run has held the lock file %s for more than %d seconds (lock_timeout) "
                                 "while it writes the same file; nothing was written" % (name, timeout))
        yield
    finally:
        os.close(descriptor)


def read_text(path):
    """The file's text, None when there is none; bounded: a file larger than MAX_FILE_BYTES is refused."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_FILE_BYTES:
        raise TargetsError("it is larger than %d bytes" % MAX_FILE_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise TargetsError("it is not UTF-8 text") from None


def _replace(path, text, mode):
    """Write ``text`` beside ``path`` and rename it into place."""
    directory = os.path.dirname(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def write_file_sd(path, fresh, inventory_hosts, mode=0o644, check_mode=False, timeout=300):
    """Join ``fresh`` with the file at ``path`` and write it, under the file's lock -> (changed, before, after): the
    texts before (None: no file) and after. In check mode the file is read and joined, not written."""
    with locked(path, timeout) if not check_mode else _unlocked():
        try:
            before = read_text(path)
            after = render(file_sd(fresh, before, inventory_hosts))
        except TargetsError as error:
            raise TargetsError("%s cannot be joined with the scrape targets: %s; nothing was written" % (
                path, error)) from None
        changed = after != before or (before is not None and (os.stat(path).st_mode & 0o7777) != mode)
        if changed and not check_mode:
            _replace(path, after, mode)
    return changed, before, after


@contextmanager
def _unlocked():
    yield
