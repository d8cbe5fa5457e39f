# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one poll loop on a fake clock: when it asks, how long it pauses, a deadline shared by waits in a row, and the
volume lock waiting on the fake clock instead of the real one."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fcntl
import os
import time

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import locks
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import TransientError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.timing import Timing, polls
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import FakeTime


def fake_timing():
    fake = FakeTime()
    return fake, Timing(sleep=fake.sleep, monotonic=fake.monotonic)


def test_a_wait_asks_at_once_then_after_each_pause_until_its_deadline():
    fake, timing = fake_timing()
    asked = [fake.now for _attempt in polls(timing.deadline(3), timing.sleep, 1)]
    assert asked == [1000, 1001, 1002, 1003] and fake.slept == [1, 1, 1]


def test_a_pause_doubles_up_to_its_most():
    fake, timing = fake_timing()
    for _attempt in polls(timing.deadline(2), timing.sleep, 0.25, 1):
        pass
    assert fake.slept == [0.25, 0.5, 1, 1]


def test_a_wait_past_its_deadline_still_asks_once():
    fake, timing = fake_timing()
    deadline = timing.deadline(5)
    deadline.start()
    fake.now += 60
    assert len(list(polls(deadline, timing.sleep, 1))) == 1 and fake.slept == []


def test_waits_in_a_row_on_one_deadline_take_its_seconds_in_all():
    fake, timing = fake_timing()
    deadline = timing.deadline(10)
    for _attempt in polls(deadline, timing.sleep, 1):
        if fake.now >= 1004:
            break
    for _attempt in polls(deadline, timing.sleep, 1):
        pass
    assert fake.now == 1010


def test_the_volume_lock_waits_on_the_fake_clock(tmp_path):
    fake, timing = fake_timing()
    lock_dir = str(tmp_path / "locks")
    with locks.volume_lock("qemu:///system", "default", "base.qcow2", 1, lock_dir):
        pass  # the lock file now exists: another holder takes it
    holder = os.open(locks.lock_path("qemu:///system", "default", "base.qcow2", lock_dir), os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    started = time.monotonic()
    try:
        with pytest.raises(TransientError, match="timed out after 600s waiting for another run"), \
                locks.volume_lock("qemu:///system", "default", "base.qcow2", 600, lock_dir, timing):
            pass
    finally:
        os.close(holder)
    assert 1600 <= fake.now < 1600 + 2 * locks.LOCK_POLL and set(fake.slept) == {locks.LOCK_POLL}
    assert time.monotonic() - started < 30
