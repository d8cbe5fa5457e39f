# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The machine-wide lock of one volume, so concurrent runs on one machine change it one at a time.

Parallel playbooks, async tasks and several controllers running a module on
the hypervisor serialise on an flock per (uri, pool, volume) under
/run/lock: the image cache downloads an image once (the second run waits,
then finds it ready), and prune never removes a base while kvm_proxy
creates an overlay on it::

    with volume_lock(uri, pool_name, volume_name, timeout): ...
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import hashlib
import os
import tempfile
from contextlib import contextmanager

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, TransientError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.timing import Timing, polls

DEFAULT_LOCK_TIMEOUT = 3600
LOCK_DIR_NAME = "egress_proxies_kvm-locks"
# How often a lock another run holds is tried again.
LOCK_POLL = 0.2


def default_lock_dir():
    """Where lock files live: /run/lock (tmpfs, shared by every user) or the temp dir."""
    base = "/run/lock" if os.path.isdir("/run/lock") and os.access("/run/lock", os.W_OK | os.X_OK) else tempfile.gettempdir()
    return os.path.join(base, LOCK_DIR_NAME)


def lock_path(uri, pool_name, volume_name, lock_dir=None):
    key = "\n".join((uri, pool_name, volume_name))
    return os.path.join(lock_dir or default_lock_dir(), hashlib.sha256(key.encode("utf-8")).hexdigest() + ".lock")


def _open_lock_file(path):
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        try:
            os.makedirs(directory)
            # Shared by every user that runs the module here (sticky, like /tmp).
            os.chmod(directory, 0o1777)
        except FileExistsError:
            pass
    # Open an existing file without O_CREAT: with fs.protected_regular, O_CREAT
    # on another user's file in a sticky directory fails even when it exists.
    # flock needs no write access, so read-only is enough.
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        pass
    try:
        return os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return os.open(path, os.O_RDONLY)


def flock_within(descriptor, timeout, timing=None):
    """Take the exclusive flock of ``descriptor``, trying again until ``timeout`` seconds passed on ``timing`` (a
    _common.timing.Timing; the real clocks when None): True once held, False while another process still holds it.

    Raises OSError for any failure other than the lock being held.
    """
    timing = timing if timing is not None else Timing()
    for _attempt in polls(timing.deadline(timeout), timing.sleep, LOCK_POLL):
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
    return False


@contextmanager
def volume_lock(uri, pool_name, volume_name, timeout=DEFAULT_LOCK_TIMEOUT, lock_dir=None, timing=None):
    """Hold the machine-wide lock of one volume of one pool of one hypervisor.

    Waits up to ``timeout`` seconds (on ``timing``, see flock_within) for
    another run holding it, then raises TransientError. Lock files are never
    deleted: removing one while another process waits on it would let a
    third process lock a new file beside it. The kernel drops the lock when
    the process dies, however it dies.
    """
    path = lock_path(uri, pool_name, volume_name, lock_dir)
    try:
        fd = _open_lock_file(path)
    except OSError as exc:
        raise PermanentError("cannot open lock file %s for volume '%s': %s" % (path, volume_name, exc.strerror)) from exc
    try:
        try:
            held = flock_within(fd, timeout, timing)
        except OSError as exc:
            raise PermanentError("cannot lock %s for volume '%s': %s" % (path, volume_name, exc.strerror)) from exc
        if not held:
            raise TransientError(
                "timed out after %ss waiting for another run that holds the lock of volume '%s' in pool '%s' "
                "(lock file %s); it is probably still downloading the image, retry later"
                % (timeout, volume_name, pool_name, path))
        yield path
    finally:
        os.close(fd)
