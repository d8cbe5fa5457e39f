# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
from urllib.parse import urlsplit

DOCUMENTATION = r"""
name: verify_expectations
short_description: What playbooks/verify.yml expects of one running proxy
version_added: 0.1.0
description:
  - From the proxy as M(egress_proxies.kvm.kvm_proxy_info) lists it and its inventory entry, what verify.yml asks
    of it and checks.
  - The egress address of each family is the outside address the inventory gives the proxy (C(outside.address),
    C(outside.address6)), else the one its domain records (RV(egress_proxies.kvm.kvm_proxy_info#module:proxies[].egress_address),
    RV(egress_proxies.kvm.kvm_proxy_info#module:proxies[].egress_address6)), so a proxy whose outside address came from
    C(egress_proxy_outside.pool) or is IPv6 alone is proven too; a proxy with neither (its egress NIC on DHCP) is
    expected at the address seen on its egress NIC. When the URL's host is an address, only that family's egress
    address can be seen by it.
  - Every address the listing gives is read as an address (a text that is none is ignored), never as text for a URL.
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
positional: _input, instance, outside, url, port
options:
  _input:
    description: The proxy, an entry of M(egress_proxies.kvm.kvm_proxy_info)'s RV(egress_proxies.kvm.kvm_proxy_info#module:proxies).
    type: dict
    required: true
  instance:
    description:
      - Its entry of C(egress_proxy_instances) or C(egress_proxy_fleet), with C(address), C(address6) (else
        O(inside_address), O(inside_address6)) and C(outside).
    type: dict
    required: true
  outside:
    description: C(egress_proxy_outside), under the entry's own C(outside).
    type: dict
  url:
    description: The URL fetched through the proxy (C(egress_proxy_verify_url)).
    type: str
    required: true
  port:
    description: The port the proxy's squid listens on.
    type: int
    required: true
  inside_address:
    description: C(egress_proxy_address), the inside address of an entry without its own.
    type: str
  inside_address6:
    description: C(egress_proxy_address6), the inside IPv6 address of an entry without its own.
    type: str
"""

EXAMPLES = r"""
- name: What to ask of the proxy and what to expect
  ansible.builtin.debug:
    msg: "{{ proxy | egress_proxies.kvm.verify_expectations(entry, egress_proxy_outside, egress_proxy_verify_url, 3128) }}"
"""

RETURN = r"""
_value:
  description: What verify.yml asks of the proxy and expects.
  type: dict
  contains:
    endpoint:
      description: The proxy's address and port as a URL writes them, an IPv6 address in brackets; V(null) when the
        listing gives no address.
      type: str
      sample: "[2001:db8:11::70]:3128"
    proxy_url:
      description: The URL of the proxy for curl's C(--proxy), C(http://) and RV(_value.endpoint); V(null) when the listing
        gives no address.
      type: str
      sample: http://[2001:db8:11::70]:3128
    outside:
      description:
        - The proxy's outside NIC, its addresses for messages (those the inventory gives it, else those its domain
          records); V(null) for a proxy without one.
      type: str
      sample: 198.18.21.10/24, 2001:db8:21::10/64
    egress:
      description:
        - The addresses the origin may see the request come from (of the URL host's family when it is an address).
      type: list
      elements: str
      sample: [198.18.21.10]
    inside_url:
      description:
        - For a proxy with an outside NIC, the inside network (its address with prefix length) the URL's host is in,
          which squid never reaches from its outside address; V(null) when it is in none.
      type: str
      sample: 198.18.11.50/24
"""


def _address(text):
    """``text`` as an address (a prefix length after a slash dropped), or None when it is none."""
    if not isinstance(text, str) or not text:
        return None
    try:
        address = ipaddress.ip_address(text.split("/", 1)[0])
    except ValueError:
        return None
    # A scope (fe80::1%eth0) names an interface of whoever reads it: no address of a proxy.
    return None if getattr(address, "scope_id", None) else address


def _interface(text):
    """``text`` (an address with its prefix length) as an interface, or None."""
    if not isinstance(text, str) or "/" not in text:
        return None
    try:
        return ipaddress.ip_interface(text)
    except ValueError:
        return None


def _host(url):
    """The URL's host as an address, or None when it is a name (or the URL cannot be read)."""
    try:
        return _address(urlsplit(url).hostname)
    except ValueError:
        return None


def verify_expectations(proxy, instance, outside, url, port, inside_address="", inside_address6=""):
    """{"endpoint", "proxy_url", "outside", "egress", "inside_url"} of ``proxy`` (kvm_proxy_info's entry) for verify.yml."""
    instance = instance or {}
    own_outside = dict(outside or {}, **(instance.get("outside") or {}))
    host = _host(url)

    listed = _address(proxy.get("ip"))
    endpoint = None if listed is None else ("[%s]:%d" if listed.version == 6 else "%s:%d") % (listed, int(port))

    has_outside = any(isinstance(nic, dict) and nic.get("role") == "outside" for nic in proxy.get("interfaces") or []) \
        or any(own_outside.get(key) for key in ("bridge", "network", "address", "address6", "pool"))
    given = [own_outside.get(key) for key in ("address", "address6") if _address(own_outside.get(key)) is not None]
    recorded = [address for address in (_address(proxy.get(key)) for key in ("egress_address", "egress_address6"))
                if address is not None]
    seen = [address for address in (_address(proxy.get(key)) for key in ("egress_ip", "egress_ipv6"))
            if address is not None] or ([listed] if listed is not None else [])
    # Per family: the outside address the inventory gives, else the one the domain records, else the one seen.
    expected = {address.version: address for address in recorded or seen}
    expected.update((address.version, address) for address in (_address(text) for text in given))
    egress = [address for address in expected.values() if host is None or address.version == host.version]
    described = ", ".join(given or [str(address) for address in recorded]) or "its address not known"

    inside = [interface for interface in (_interface(instance.get("address") or inside_address),
                                          _interface(instance.get("address6") or inside_address6))
              if interface is not None]
    inside_url = next((str(interface) for interface in inside
                       if has_outside and host is not None and host.version == interface.version
                       and host in interface.network), None)
    return {"endpoint": endpoint, "proxy_url": None if endpoint is None else "http://" + endpoint,
            "outside": described if has_outside else None,
            "egress": sorted({str(address) for address in egress}), "inside_url": inside_url}


class FilterModule:
    def filters(self):
        return {"verify_expectations": verify_expectations}
