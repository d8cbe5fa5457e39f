# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The password of a URL, found as requests reads it and hidden in what a message quotes (issue 31 item 2); a MAC
address checked as text."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import (
    normalize_mac,
    quoted,
    url_passwords,
    without_url_passwords,
)


@pytest.mark.parametrize("text, passwords, shown", [
    ("https://user:s3cret@host/x.qcow2", ["s3cret"], "https://user:********@host/x.qcow2"),
    # The user information runs to the authority's last "@", as urllib3 splits it; the password from the first ":".
    ("http://u:p@ss:w@host:8080/x", ["p@ss:w"], "http://u:********@host:8080/x"),
    ("sha256:https://u:pw%40x@host/SHA256SUMS", ["pw%40x"], "sha256:https://u:********@host/SHA256SUMS"),
    ("qemu+ssh://root:pw@hv1/system", ["pw"], "qemu+ssh://root:********@hv1/system"),
    ("see https://a:1@h/ and http://b:2@h?q", ["1", "2"], "see https://a:********@h/ and http://b:********@h?q"),
    # An "@" after the authority (in the path or query) is no user information.
    ("https://host/a:b@c?x=y:z@w", [], "https://host/a:b@c?x=y:z@w"),
    ("https://user@host/x", [], "https://user@host/x"),
    ("https://user:@host/x", [], "https://user:@host/x"),
    ("https://host:443/x", [], "https://host:443/x"),
    ("user:pw@host", [], "user:pw@host"),
])
def test_a_urls_password_is_found_and_hidden(text, passwords, shown):
    assert url_passwords(text) == passwords
    assert without_url_passwords(text) == shown


def test_quoted_hides_a_password_before_it_escapes_or_cuts():
    password = "it's-a-\\long-" + "x" * 60
    shown = quoted("https://user:%s@images.example/a\nb" % password)
    assert shown == repr("https://user:********@images.example/a\nb")


def test_quoted_describes_a_number_python_would_refuse_to_write():
    # int("9" * 5000) is what an argument spec makes of the text; repr() of it raises ValueError (over 4300 digits).
    assert quoted(int("9" * 20)) == "99999999999999999999"
    assert quoted(10 ** 20) == quoted(-10 ** 4500) == "a number of more than 20 digits"


@given(st.from_regex(r"([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}", fullmatch=True))
def test_normalize_mac_accepts_exactly_unicast_nonzero(mac):
    lowered = mac.lower()
    if int(lowered[:2], 16) & 1 or lowered == "00:00:00:00:00:00":
        with pytest.raises(ValidationError):
            normalize_mac(mac)
    else:
        assert normalize_mac(mac) == lowered
