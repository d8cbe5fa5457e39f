# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The clocks every wait reads, and the one loop every wait runs.

A wait asks again and again until what it waits for is there or its
deadline passes: a proxy's address, its guest agent, its first boot, a
program in the guest, a shutdown, a lock. Each one loops through ``polls``
on the clock and sleep of a Timing, which tests replace with fakes, so
nothing really waits::

    for _attempt in polls(timing.deadline(seconds), timing.sleep, pause):
        if ready():
            return ...
    raise TransientError("... within %d s" % seconds)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import time
from dataclasses import dataclass
from typing import Any


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


@dataclass(frozen=True)
class Timing:
    """``clock`` gives the aware UTC time recorded as createdAt; ``sleep`` and ``monotonic`` drive the waits.

    Tests pass fakes, so nothing really waits.
    """

    clock: Any = utcnow
    sleep: Any = time.sleep
    monotonic: Any = time.monotonic

    def deadline(self, seconds):
        """A Deadline of ``seconds`` on this Timing's monotonic clock."""
        return Deadline(seconds, self.monotonic)


class Deadline:
    """``seconds`` on the clock ``monotonic``, counted from the first wait that polls it.

    Every later wait given the same Deadline gets what is left: waits in a
    row take ``seconds`` in all, not ``seconds`` each.
    """

    def __init__(self, seconds, monotonic):
        self.seconds = seconds
        self.monotonic = monotonic
        self._ends = None

    def start(self):
        """Start counting, unless a wait already did."""
        if self._ends is None:
            self._ends = self.monotonic() + self.seconds

    def passed(self):
        self.start()
        return self.monotonic() >= self._ends


def polls(deadline, sleep, pause, max_pause=None):
    """Yield at once, then again after each pause, until ``deadline`` has passed: the collection's one deadline loop.

    ``deadline`` is a Deadline (or anything with ``start()`` and
    ``passed()``). The caller's loop body asks, and returns when what it
    waits for is there; the code after the loop is what happens at the
    deadline. A body that raises ends the wait with its error. ``sleep``
    pauses ``pause`` seconds; with ``max_pause`` the pause doubles up to
    it (backoff). The body runs at least once, even past the deadline.
    """
    deadline.start()
    while True:
        yield
        if deadline.passed():
            return
        sleep(pause)
        if max_pause is not None:
            pause = min(pause * 2, max_pause)
