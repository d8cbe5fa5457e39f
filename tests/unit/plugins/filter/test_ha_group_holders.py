# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Which member holds an HA group's address, as status.yml reads it (issue 42 item 4): the answer on the address is
untrusted; its X-Egress-Proxy header names the holder only when it is one of the group's members, within a bound.
(tests/unit/test_status_playbook.py reads real answers with the playbook's own curl.)"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64

import pytest

from ansible_collections.egress_proxies.kvm.plugins.filter.ha_group_holders import ha_group_holders

GROUPS = [{"name": "office", "address": "198.18.40.10", "members": ["egress-a", "egress-b"]}]
URL = "http://198.18.40.10:9301/metrics"
PAGE = base64.b64encode(b'squid_up{host="127.0.0.1"} 1\n').decode()


def holder(reads):
    (group,) = ha_group_holders(GROUPS, reads)["groups"]
    return group["answer"], group["holder"], group["read_from"]


@pytest.mark.parametrize("headers, expected", [
    ("HTTP/1.1 200 OK\r\nx-egress-proxy:egress-b \r\n\r\n", "egress-b"),
    ("HTTP/1.1 200 OK\r\nX-Egress-Proxy: egress-a\r\nX-Egress-Proxy: egress-a\r\n\r\n", "egress-a"),
    ("HTTP/1.1 200 OK\r\n\r\n", "unknown"),
    ("HTTP/1.1 200 OK\r\nX-Egress-Proxy: \"egress-a\"\r\n\r\n", "unknown"),
    ("HTTP/1.1 200 OK\r\nX-Egress-Proxy: egress-a, egress-b\r\n\r\n", "unknown"),
    ("HTTP/1.1 200 OK\r\nX-Egress-Proxy : egress-a\r\n\r\n", "unknown"),
    (b"HTTP/1.1 200 OK\r\nX-Egress-Proxy: egress-\xd9\xa1\r\n\r\n", "unknown"),
    ("HTTP/1.1 200 OK\r\nX-Padding: %s\r\nX-Egress-Proxy: egress-a\r\n\r\n" % ("x" * 8192), "unknown"),
    ("not base64!", "unknown"),
], ids=["any case", "twice the same", "none", "quoted", "two in one", "blank before colon", "other digits", "over the bound",
        "not base64"])
def test_only_a_members_name_within_the_bound_is_a_holder(headers, expected):
    encoded = "not-base64!" if headers == "not base64!" else base64.b64encode(
        headers if isinstance(headers, bytes) else headers.encode()).decode()
    assert holder({"hv1": "%s %s 200 0 %s" % (URL, PAGE, encoded)}) == ("up", expected, "hv1")


def test_the_first_hypervisor_that_got_an_answer_is_read_and_a_line_short_is_unreadable():
    answered = "%s %s 403 0 %s" % (URL, "", base64.b64encode(b"HTTP/1.1 403 Forbidden\r\nX-Egress-Proxy: egress-b\r\n\r\n").decode())
    assert holder({"hv1": "%s  000 7 " % URL, "hv2": answered}) == ("refused", "egress-b", "hv2")
    assert holder({"hv2": "%s  000 7 " % URL, "hv3": "%s  000 28 " % URL}) == ("no answer", None, "hv2")
    assert holder({"hv1": "%s %s 200 0" % (URL, PAGE)}) == ("unreadable", None, "hv1")
    # Another address's line, or none: not read.
    assert holder({"hv1": "http://198.18.40.11:9301/metrics %s 200 0 " % PAGE}) == (None, None, None)
