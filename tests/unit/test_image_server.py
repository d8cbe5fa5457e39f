# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The test image server answers as its Routes say; the download tests rely on each of these."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading

import pytest
import requests

from ansible_collections.egress_proxies.kvm.tests.unit.image_server import ImageServer

BODY = bytes(range(256)) * 4096  # 1 MiB: several chunks


@pytest.fixture
def server():
    with ImageServer() as srv:
        yield srv


def test_a_file_is_served_whole_and_by_range(server, tmp_path):
    source = tmp_path / "image.qcow2"
    source.write_bytes(BODY)
    url = server.serve("/image.qcow2", str(source))
    with requests.Session() as session:
        head = session.get(url, headers={"Range": "bytes=0-99"})
        whole = session.get(url)
    assert (head.status_code, head.headers["Content-Range"], head.content) == (206, "bytes 0-99/%d" % len(BODY), BODY[:100])
    assert (whole.status_code, whole.headers["Content-Length"], whole.content) == (200, str(len(BODY)), BODY)
    assert server.hit_count("/image.qcow2") == 2
    assert server.ranges_asked("/image.qcow2") == ["bytes=0-99", None]
    assert requests.get(server.url("/missing")).status_code == 404


def test_a_held_download_waits_for_the_release(server):
    url = server.add("/image.qcow2", BODY)
    hold = server.hold("/image.qcow2", after_bytes=300000)
    received = []
    client = threading.Thread(target=lambda: received.append(requests.get(url).content))
    client.start()
    assert hold.reached.wait(10)
    assert received == []
    hold.release.set()
    client.join(10)
    assert received == [BODY]


def test_a_cut_connection_leaves_the_body_incomplete(server):
    url = server.add("/image.qcow2", BODY, cut_after=1000)
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        requests.get(url)


def test_without_content_length_the_body_ends_with_the_connection(server):
    answer = requests.get(server.add("/image.qcow2", BODY, content_length=False))
    assert "Content-Length" not in answer.headers and answer.content == BODY
