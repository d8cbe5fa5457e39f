# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""read_ahead: an image's body received and hashed in a thread, a few chunks ahead of libvirt's stream."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.download import Retryable, read_ahead


def test_every_item_comes_through_in_order():
    assert list(read_ahead(iter(range(100)), depth=3)) == list(range(100))


def test_the_source_runs_in_another_thread():
    threads = []

    def source():
        threads.append(threading.current_thread())
        yield b"chunk"

    assert list(read_ahead(source())) == [b"chunk"]
    assert threads != [threading.current_thread()]


def test_an_error_of_the_source_comes_after_what_it_yielded_before():
    def source():
        yield b"one"
        yield b"two"
        raise Retryable("the mirror ended after 2 of its 3 chunks")

    received = []
    with pytest.raises(Retryable, match="ended after 2"):
        for chunk in read_ahead(source()):
            received.append(chunk)
    assert received == [b"one", b"two"]


def test_a_consumer_that_stops_stops_the_source_and_waits_for_its_thread():
    produced = []

    def source():
        for number in range(10000):
            produced.append(number)
            yield number

    ahead = read_ahead(source(), depth=2)
    assert next(ahead) == 0
    ahead.close()  # what a failed libvirt send does to the generator it was reading
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("image-receive")]
    # The item handed over, the queue's two, and the one the thread held when it saw the stop.
    assert len(produced) <= 4


def test_a_source_that_yields_nothing_ends_at_once():
    assert list(read_ahead(iter(()))) == []
