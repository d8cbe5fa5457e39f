# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""read_each: the inventory plugin's hypervisors read at once, reported in their order, errors kept apart.

The reads are synchronised with events and barriers, never with sleeps: a
barrier that the reads can only pass together proves they overlap, and its
timeout turns a sequential implementation into a failure instead of a hang.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import NotFoundError, TransientError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.inventory import read_each

# Long enough for any machine to start a thread; only reached when the reads do not overlap.
GIVE_UP = 30


def test_results_come_in_the_order_of_the_items_whatever_order_the_reads_finish_in():
    finished = []
    turn = {item: threading.Event() for item in "abc"}

    def read(item):
        # c finishes first, then b, then a.
        turn[item].wait(GIVE_UP)
        finished.append(item)
        following = {"c": "b", "b": "a"}.get(item)
        if following:
            turn[following].set()
        return item.upper()

    turn["c"].set()
    assert read_each(read, list("abc")) == [("A", None), ("B", None), ("C", None)]
    assert finished == ["c", "b", "a"]


def test_the_reads_overlap():
    together = threading.Barrier(3, timeout=GIVE_UP)

    def read(item):
        together.wait()  # raises BrokenBarrierError if the three are not in flight at once
        return item

    assert read_each(read, [1, 2, 3]) == [(1, None), (2, None), (3, None)]


def test_at_most_max_parallel_reads_run_at_once():
    lock = threading.Lock()
    running = []
    peak = []
    first_two = threading.Barrier(2, timeout=GIVE_UP)

    def read(item):
        with lock:
            running.append(item)
            peak.append(len(running))
        if item < 2:
            first_two.wait()
        with lock:
            running.remove(item)
        return item

    assert [result for result, _error in read_each(read, list(range(6)), max_parallel=2)] == list(range(6))
    assert max(peak) == 2


def test_a_kvm_error_is_that_items_error_and_the_others_are_still_read():
    unreachable = TransientError("connecting to hypervisor nas2 failed: No route to host")
    read_items = []

    def read(item):
        read_items.append(item)
        if item == "nas2":
            raise unreachable
        return item + " listed"

    results = read_each(read, ["nas1", "nas2", "nas3"])
    assert results == [("nas1 listed", None), (None, unreachable), ("nas3 listed", None)]
    assert sorted(read_items) == ["nas1", "nas2", "nas3"]


def test_each_failing_item_keeps_its_own_error():
    failures = {"a": NotFoundError("a is gone"), "c": TransientError("c timed out")}

    def read(item):
        if item in failures:
            raise failures[item]
        return item

    assert read_each(read, list("abc")) == [(None, failures["a"]), ("b", None), (None, failures["c"])]


def test_a_bug_is_raised_after_every_read_has_finished():
    finished = []
    bug_raised = threading.Event()

    def read(item):
        if item == "buggy":
            bug_raised.set()
            raise KeyError("a bug, not a hypervisor failure")
        bug_raised.wait(GIVE_UP)
        finished.append(item)
        return item

    with pytest.raises(KeyError, match="a bug"):
        read_each(read, ["before", "buggy", "after"])
    assert sorted(finished) == ["after", "before"]


def test_one_item_is_read_in_the_calling_thread():
    threads = []

    def read(item):
        threads.append(threading.current_thread())
        return item

    assert read_each(read, ["only"]) == [("only", None)]
    assert threads == [threading.current_thread()]
    assert read_each(read, []) == []
