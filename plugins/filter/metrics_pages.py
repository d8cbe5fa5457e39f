# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import re

DOCUMENTATION = r"""
name: metrics_pages
short_description: What the egress proxies' metrics pages say, each read apart from the others
version_added: 0.1.0
description:
  - Reads the output of playbooks/status.yml's fetch of the proxies' metrics pages, one line per page
    C(URL PAGE STATUS EXIT), that is the URL status.yml asked for, the page's first bytes in base64, curl's HTTP status
    (C(000) when there was no answer) and curl's exit code. A page is base64 text in its own line, so nothing on it
    can pass for another page's line.
  - A page is a proxy's own word, read as untrusted text. Only its samples C(squid_up{host="127.0.0.1"}),
    C(squid_client_http_requests_total) and C(egress_proxy_decisions_total) with C(decision="would_deny") (each
    profile's and rule's, written as the decisions' counter writes them) are read; a count that is not a plain non-negative whole number below 2^53 in
    ASCII (V(NaN), V(+Inf), a negative, a fraction, a huge or non-ASCII number), or that the page gives twice
    differently, is unknown. A page longer than O(page_bytes) is not read at all.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, page_bytes
options:
  _input:
    description: The fetch's standard output.
    type: str
    required: true
  page_bytes:
    description:
      - The most bytes of a page that are read; the fetch hands over one byte more, so that a longer page is seen.
    type: int
    default: 65536
"""

EXAMPLES = r"""
- name: Show what each metrics page said
  ansible.builtin.debug:
    msg: "{{ fetched.stdout | egress_proxies.kvm.metrics_pages(65536) }}"
"""

RETURN = r"""
_value:
  description:
    - By URL, C(answer) and C(requests).
    - C(answer) is V(up), V(squid down) (the exporter answers, squid does not), V(exporter down) (squid's 502),
      V(refused) (squid's 403, the reader is not one of the metrics clients), V(no answer), V(unreadable) (a page
      longer than O(page_bytes), cut short, or a line the fetch did not write), or C(HTTP) and the status.
    - C(requests) is the requests squid counted since it started (an integer), or V(null) when the page did not give
      a count that can be believed.
    - C(would_deny) is the requests a policy in report mode forwarded that enforcement would have refused, since squid
      last reconfigured (an integer, the sum over its profiles and rules), or V(null) when the page has no decisions'
      counter (no profile and no report mode) or a count of it cannot be believed.
  type: dict
  sample: {"http://198.18.11.107:9301/metrics": {"answer": "up", "requests": 1234, "would_deny": 0}}
"""

PAGE_BYTES = 65536
# squid's requests since it started, and whether the exporter reaches squid, as the exporter names them.
REQUESTS_SERIES = "squid_client_http_requests_total"
UP_SERIES = 'squid_up{host="127.0.0.1"}'
# The decisions' counter (the role's files/squid_helpers.py): its type line, which a page with the counter has whatever it
# counted, and its would-deny series as it writes them.
DECISIONS_TYPE = "# TYPE egress_proxy_decisions_total counter"
WOULD_DENY_SERIES = re.compile(r'egress_proxy_decisions_total\{decision="would_deny",profile="[a-z0-9_-]{1,64}",'
                               r'rule="[a-z0-9_-]{1,64}"\}\Z')
# A sample's value that can be a count: ASCII digits, a fraction or an exponent, no sign (so no NaN, Inf or negative).
COUNT_TEXT = re.compile(r"[0-9]{1,20}(\.[0-9]{0,20})?([eE]\+?[0-9]{1,3})?\Z")
# Above this a float64 no longer holds every whole number: such a count is not believed.
COUNT_LIMIT = 2 ** 53
STATUS_TEXT = re.compile(r"[0-9]{3}\Z")
ANSWERS = {"000": "no answer", "403": "refused", "502": "exporter down"}
UNREADABLE = {"answer": "unreadable", "requests": None, "would_deny": None}


def _count(text):
    """The whole non-negative number ``text`` says, or None."""
    if not COUNT_TEXT.match(text):
        return None
    value = float(text)
    return int(value) if value < COUNT_LIMIT and value.is_integer() else None


def _sample(lines, series):
    """The count the page's ``lines`` give ``series`` (its name with its labels as the exporter writes them): None
    when they give none, one that is no count, or several that differ. A sample line is the series, its value, and
    an optional timestamp."""
    counts = {_count(fields[1]) for fields in (line.split() for line in lines)
              if len(fields) in (2, 3) and fields[0] == series}
    return counts.pop() if len(counts) == 1 else None


def _would_deny(lines):
    """The would-deny decisions the page's ``lines`` count, over every profile and rule: None without the counter's
    type line, or when one of its series gives no count."""
    if DECISIONS_TYPE not in lines:
        return None
    series = {fields[0] for fields in (line.split() for line in lines)
              if len(fields) in (2, 3) and WOULD_DENY_SERIES.match(fields[0])}
    counts = [_sample(lines, name) for name in series]
    return None if None in counts else sum(counts)


def _page(encoded, status, exit_code, page_bytes):
    if not STATUS_TEXT.match(status):
        return dict(UNREADABLE)
    if status != "200":
        return {"answer": ANSWERS.get(status, "HTTP %s" % status), "requests": None, "would_deny": None}
    # curl did not get the whole page: out of time (28), or head stopped reading a page too long (23).
    if exit_code != "0":
        return dict(UNREADABLE)
    try:
        page = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return dict(UNREADABLE)
    if len(page) > page_bytes:
        return dict(UNREADABLE)
    # Non-ASCII bytes become U+FFFD, which no series name or count matches.
    lines = page.decode("ascii", errors="replace").split("\n")
    return {"answer": "up" if _sample(lines, UP_SERIES) == 1 else "squid down",
            "requests": _sample(lines, REQUESTS_SERIES), "would_deny": _would_deny(lines)}


def metrics_pages(text, page_bytes=PAGE_BYTES):
    """{url: {"answer", "requests", "would_deny"}} of the fetch's output ``text``, a line ``URL PAGE-IN-BASE64 STATUS EXIT`` per page."""
    pages = {}
    for line in (text or "").split("\n"):
        fields = line.split(" ")
        if fields[0]:
            pages[fields[0]] = _page(*fields[1:], page_bytes=int(page_bytes)) if len(fields) == 4 else dict(UNREADABLE)
    return pages


class FilterModule:
    def filters(self):
        return {"metrics_pages": metrics_pages}
