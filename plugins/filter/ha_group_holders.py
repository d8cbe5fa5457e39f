# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii

from ansible_collections.egress_proxies.kvm.plugins.filter.metrics_pages import metrics_pages
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import HaGroupError
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.metrics_targets import checked_groups

DOCUMENTATION = r"""
name: ha_group_holders
short_description: Which member of each HA group holds its client address, from what its metrics page answered
version_added: 0.1.0
description:
  - Reads the output of playbooks/status.yml's fetch of each HA group's metrics page on its client address, one line
    per page C(URL PAGE STATUS EXIT HEADERS), that is the URL asked for (C(http://ADDRESS:PORT/metrics)), the page's
    first bytes in base64, curl's HTTP status and exit code (as P(egress_proxies.kvm.metrics_pages#filter) reads them),
    and the response's headers in base64.
  - squid adds the name of its proxy to every answer (C(X-Egress-Proxy)); the member that answered on the address is
    the one that holds it. Whatever answers there is read as untrusted text, within bounds; its header is believed
    only when it is exactly one of the group's member names, else the holder is V(unknown).
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, reads, page_bytes, header_bytes
options:
  _input:
    description:
      - The HA groups, C(egress_proxy_ha_groups) of the egress_proxy role, checked as the role checks them.
    type: list
    elements: dict
    required: true
  reads:
    description: The fetch's standard output by the inventory name of the hypervisor it ran on.
    type: dict
    required: true
  page_bytes:
    description:
      - The most bytes of a page that are read; the fetch hands over one byte more, so that a longer page is seen.
    type: int
    default: 65536
  header_bytes:
    description:
      - The most bytes of the headers that are read; the fetch hands over one byte more. Longer headers name no holder.
    type: int
    default: 8192
"""

EXAMPLES = r"""
- name: Show which member holds each group's address
  ansible.builtin.debug:
    msg: "{{ egress_proxy_ha_groups | egress_proxies.kvm.ha_group_holders({inventory_hostname: fetched.stdout}) }}"
"""

RETURN = r"""
_value:
  description:
    - C(groups), one per group in the variable's order, each C(group) (its name), C(address), C(members), C(url)
      (V(null) when no hypervisor read it), C(answer) (as P(egress_proxies.kvm.metrics_pages#filter) says it, V(null)
      when not read), C(holder) (a member's name, V(unknown), or V(null) without an answer) and C(read_from) (the
      hypervisor whose reading it is, the first by name that got an answer, else the first that read it).
    - C(error), why no group is shown (a bad C(egress_proxy_ha_groups), naming the entry), else V(null).
  type: dict
  sample:
    groups:
      - {"group": "office", "address": "198.18.40.10", "members": ["egress-a", "egress-b"],
         "url": "http://198.18.40.10:9301/metrics", "answer": "up", "holder": "egress-a", "read_from": "hv1"}
    error: null
"""


# squid adds its proxy's name to every answer; whatever answers on a group's address may be anything on the segment, so
# the name is believed only when it is one of the group's members, read within a bound.
HEADER = "x-egress-proxy"
# squid's headers of a metrics page are about 300 bytes; more than this is not squid's answer.
HEADER_BYTES = 8192
UNKNOWN = "unknown"
# What metrics_pages says of an address where nothing answered: no headers, no holder to name.
SILENT = ("no answer",)


def _holder(encoded, members, header_bytes):
    """The member named by the X-Egress-Proxy header of the headers curl dumped (``encoded``, base64), or UNKNOWN: no
    such header, several that differ, a name that is no member's, headers longer than ``header_bytes``."""
    try:
        headers = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return UNKNOWN
    if len(headers) > header_bytes:
        return UNKNOWN
    names = set()
    for line in headers.decode("ascii", errors="replace").split("\n"):
        field, colon, value = line.partition(":")
        if colon and field.lower() == HEADER:
            names.add(value.strip(" \t\r"))
    return names.pop() if len(names) == 1 and names <= set(members) else UNKNOWN


def _reading(line, members, page_bytes, header_bytes):
    """{answer, holder} of one line of status.yml's read of a group's address: ``URL PAGE STATUS EXIT HEADERS``."""
    fields = line.split(" ")
    page = metrics_pages(" ".join(fields[:4]), page_bytes).get(fields[0]) if len(fields) == 5 else None
    if page is None:
        return {"answer": "unreadable", "holder": None}
    if page["answer"] in SILENT:
        return {"answer": page["answer"], "holder": None}
    return {"answer": page["answer"], "holder": _holder(fields[4], members, header_bytes)}


def _address_of(url):
    """The address of a URL status.yml read (``http://ADDRESS:PORT/metrics``), else None."""
    if not url.startswith("http://") or not url.endswith("/metrics"):
        return None
    return url[len("http://"):].rsplit(":", 1)[0]


def ha_group_holders(groups, reads, page_bytes=65536, header_bytes=HEADER_BYTES):
    """Each group's reading of its address: ``groups`` are egress_proxy_ha_groups, ``reads`` {hypervisor: the output of
    status.yml's read there} (lines ``URL PAGE STATUS EXIT HEADERS``). Returns {"groups": [{group, address, members,
    url, answer, holder, read_from}], "error"}: one entry per group, in the variable's order, with the reading of the first
    hypervisor (by name) that got an answer there, else of the first that read it; answer and read_from None where no
    hypervisor read it (none runs a member). holder is a member's name, "unknown" (an answer that names no member), or
    None (no answer). error is why no group can be shown (a bad egress_proxy_ha_groups), else None."""
    try:
        parsed = checked_groups(groups)
    except HaGroupError as error:
        return {"groups": [], "error": str(error)}
    readings = {}
    for hypervisor in sorted(reads or {}):
        for line in (reads[hypervisor] or "").split("\n"):
            url = line.split(" ")[0]
            if url:
                readings.setdefault(_address_of(url), []).append((hypervisor, url, line))
    shown = []
    for group in parsed:
        address = str(group["address"])
        found = [dict(_reading(line, group["members"], int(page_bytes), int(header_bytes)), url=url, read_from=hypervisor)
                 for hypervisor, url, line in readings.get(address, [])]
        answered = [reading for reading in found if reading["answer"] not in SILENT] or found or [
            {"url": None, "read_from": None, "answer": None, "holder": None}]
        shown.append(dict(answered[0], group=group["name"], address=address, members=list(group["members"])))
    return {"groups": shown, "error": None}


class FilterModule:
    def filters(self):
        return {"ha_group_holders": ha_group_holders}
