"""The destination policy attacked through a real squid (issue 40, items 0 and 4): the role's squid.conf, squid 5.7.

squid, a stand-in DNS server and the origins run in a network namespace of the test's (tests/integration/squid_netns.py),
which takes root but no lab: the machine's lane. Each case asks with GET and with CONNECT.

- A name of several addresses: squid's dst acl matches when any one address does, and squid then connects to them in
  DNS order. With the role doc's worked example (a name, a domain and the address 10.30.4.20 allowed) and with
  93.184.216.0/24 allowed, a name with an allowed address and an internal or an unlisted one, in either order, is
  refused, and no origin gets the request; a name allowed by name is refused when one of its addresses is internal.
  The legitimate requests still pass: an allowed name, an allowed address, a name resolving into the allowed networks.
- IPv6 ranges that carry or reach IPv4 (NAT64, 6to4, Teredo, IPv4-compatible, site-local) are refused; a NAT64
  address carrying a public IPv4 address passes (an IPv6-only proxy behind DNS64), one carrying an allowed address too.
- A hostile client's spellings of an internal address (IPv4-mapped IPv6, NAT64 with a dotted quad, hexadecimal,
  decimal, octal, short forms, localhost, a public name as the URL's user part) and of a denied name (trailing dot,
  capitals) are refused: squid judges the address it connects to, however the host is written; what squid takes for
  a name that does not resolve (an address with a zone) reaches nothing.
"""

import pytest

from tests.integration.squid_netns import squid_namespace
from tests.unit.role_templates import SQUID_CONF, policy_files, role_set_args

pytestmark = pytest.mark.integration

ENTRY = {"name": "egress-1", "address": "198.51.100.5/24", "dns": ["127.0.0.1"]}
BASE = {"egress_proxy_bridge": "br0", "egress_proxy_allowed_clients": ["127.0.0.1"], "egress_proxy_metrics": False,
        "egress_proxy_image": {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"}}
# The allowlist of docs/role-egress_proxy.md's worked example: a name, a domain and an internal mirror by address.
WORKED_EXAMPLE = ["mirror.example.org", ".debian.org", "10.30.4.20"]
PUBLIC_NETWORK = ["93.184.216.0/24"]
DENIED_NAME = "secret.example.com"
RECORDS = {
    # Worked example: not allowed by name, so judged by address.
    "internal-second.example": ["10.30.4.20", "10.0.0.5"],
    "internal-first.example": ["10.0.0.5", "10.30.4.20"],
    "internal-mirror.example": ["10.30.4.20"],
    # Allowed by name, one address internal.
    "deb.debian.org": ["93.184.216.99", "169.254.169.254"],
    "mirror.example.org": ["93.184.216.99"],
    # 93.184.216.0/24 allowed.
    "metadata-second.example": ["93.184.216.99", "169.254.169.254"],
    "metadata-first.example": ["169.254.169.254", "93.184.216.99"],
    "unlisted-second.example": ["93.184.216.99", "8.8.4.4"],
    "unlisted-first.example": ["8.8.4.4", "93.184.216.99"],
    "www.example": ["93.184.216.99"],
    # What a DNS64 resolver answers for an IPv4-only name: the public one, and one resolving to 10.0.0.5.
    "nat64-public.example": ["64:ff9b::5db8:d863"],
    "nat64-internal.example": ["64:ff9b::a00:5"],
    DENIED_NAME: ["93.184.216.99"],
}
ADDRESSES = ["10.0.0.5", "10.30.4.20", "169.254.169.254", "93.184.216.99", "8.8.4.4", "64:ff9b::a00:5",
             "64:ff9b::5db8:d863", "2002:a00:5::1", "2001:0:a00:5::1", "fec0::5", "::a00:5", "2606:2800:220:1::68"]


def squid_conf(**overrides):
    (proxy,) = role_set_args([dict(ENTRY)], **dict(BASE, **overrides))["proxies"]
    return policy_files(proxy)[SQUID_CONF]["content"]


def answers(namespace, hosts):
    """{(host, "GET" or "CONNECT"): (status, the address an origin was reached on or None)} for each host, GET on
    port 80 and a CONNECT to port 443, each request's path naming it."""
    found = {}
    for host in hosts:
        for method, tunnel in (("GET", False), ("CONNECT", True)):
            status, body = namespace.get(host, method.lower(), tunnel=tunnel)
            found[(host, method)] = (status, body and body["reached"])
    return found


def both(hosts, answer):
    return {(host, method): answer for host in hosts for method in ("GET", "CONNECT")}


def refused_and_unreached(namespace, hosts):
    """Each of ``hosts`` is refused (403) with GET and CONNECT, and no origin got a request for it."""
    found = answers(namespace, hosts)
    assert found == both(hosts, (403, None)), {key: value for key, value in found.items() if value != (403, None)}
    reached = [line for line in namespace.reached().splitlines() if line.startswith("reached")]
    assert reached == [], reached


def passed(namespace, hosts, reached):
    found = answers(namespace, hosts)
    assert found == both(hosts, (200, reached)), found


def test_a_name_with_an_internal_address_beside_an_allowed_one_is_refused_in_either_dns_order():
    conf = squid_conf(egress_proxy_allowed_destinations=WORKED_EXAMPLE)
    with squid_namespace(conf, RECORDS, ADDRESSES) as namespace:
        # An allowed name as the URL's user part, before the host squid goes to.
        refused_and_unreached(namespace, ["internal-second.example", "internal-first.example", "deb.debian.org",
                                          "10.0.0.5", "www.example", "93.184.216.99", "mirror.example.org@10.0.0.5"])
        passed(namespace, ["mirror.example.org"], "::ffff:93.184.216.99")
        passed(namespace, ["10.30.4.20", "internal-mirror.example"], "::ffff:10.30.4.20")


def test_a_name_with_an_unlisted_or_internal_address_beside_an_allowed_network_is_refused():
    conf = squid_conf(egress_proxy_allowed_destinations=PUBLIC_NETWORK)
    with squid_namespace(conf, RECORDS, ADDRESSES) as namespace:
        refused_and_unreached(namespace, ["metadata-second.example", "metadata-first.example", "unlisted-second.example",
                                          "unlisted-first.example", "8.8.4.4", "nat64-internal.example"])
        passed(namespace, ["www.example", "93.184.216.99"], "::ffff:93.184.216.99")
        # Behind DNS64: the NAT64 address carrying an allowed address is allowed with it.
        passed(namespace, ["nat64-public.example", "[64:ff9b::5db8:d863]"], "64:ff9b::5db8:d863")


def test_ipv6_ranges_that_carry_or_reach_ipv4_and_other_spellings_of_an_internal_address_are_refused():
    conf = squid_conf(egress_proxy_denied_destinations=[DENIED_NAME])
    with squid_namespace(conf, RECORDS, ADDRESSES) as namespace:
        refused_and_unreached(namespace, [
            "[64:ff9b::a00:5]", "[2002:a00:5::1]", "[2001:0:a00:5::1]", "[fec0::5]", "[::a00:5]", "nat64-internal.example",
            "[::ffff:10.0.0.5]", "[::ffff:a00:5]", "167772165", "0x0a000005", "012.0.0.5", "10.5", "10.0.5",
            "[64:ff9b::10.0.0.5]", "[0:0:0:0:0:ffff:7f00:1]", "2130706433", "127.1", "0", "[::]", "localhost",
            "metadata-second.example", DENIED_NAME, DENIED_NAME + ".", "SECRET.Example.COM."])
        # An address with a zone, and a user part in CONNECT's host, are names to squid, which resolve to nothing: it
        # answers an error and connects nowhere.
        found = answers(namespace, ["[fe80::1%25lo]", "www.example@10.0.0.5"])
        assert [status for status, _reached in found.values() if status not in (403, 500, 502, 503)] == [], found
        assert "reached" not in namespace.reached(), namespace.reached()
        # No allowlist: public destinations pass, over NAT64 too.
        passed(namespace, ["93.184.216.99", "www.example"], "::ffff:93.184.216.99")
        passed(namespace, ["nat64-public.example", "[64:ff9b::5db8:d863]"], "64:ff9b::5db8:d863")
        passed(namespace, ["[2606:2800:220:1::68]"], "2606:2800:220:1::68")
