"""Who may use the proxy, attacked through a real squid: the role's squid.conf, squid 5.7.

squid keeps an IPv4 address in its IPv4-mapped IPv6 form (::ffff:a.b.c.d) and reads 0.0.0.0/0 as its "all", so a src
acl written as the user wrote it admits others: allowed_clients 0.0.0.0/0 admitted every IPv6 client, an IPv6 network
covering ::ffff:0:0/96 (::/1, ::/8) every IPv4 client, and ::/0 none. squid and an
origin run in a network namespace of the test's (tests/integration/squid_netns.py); each client is an address of its
loopback the request leaves from, asking with GET and with CONNECT. Each list admits its own clients and refuses the
others, and no origin gets a refused client's request.
"""

import pytest

from tests.integration.squid_netns import squid_namespace
from tests.integration.test_squid_destinations import squid_conf

pytestmark = pytest.mark.integration

ORIGIN = "93.184.216.99"
IPV4_CLIENT = "127.0.0.2"
IPV6_CLIENT = "2001:db8:5::5"
# A client inside ::/8, which holds the IPv4-mapped range.
LOW_IPV6_CLIENT = "ff::5"
ADDRESSES = [ORIGIN, IPV6_CLIENT, LOW_IPV6_CLIENT]
# allowed_clients: (the clients it admits, the clients it refuses).
CASES = {
    "every IPv4 address": (["0.0.0.0/0"], [IPV4_CLIENT], [IPV6_CLIENT, LOW_IPV6_CLIENT]),
    "the lower half of IPv6": (["::/1"], [IPV6_CLIENT, LOW_IPV6_CLIENT], [IPV4_CLIENT]),
    "an IPv6 /8 holding the IPv4-mapped range": (["::/8"], [LOW_IPV6_CLIENT], [IPV4_CLIENT, IPV6_CLIENT]),
    "IPv4 loopback written IPv4-mapped": (["::ffff:127.0.0.0/104"], [IPV4_CLIENT], [IPV6_CLIENT, LOW_IPV6_CLIENT]),
    "every IPv6 address": (["::/0"], [IPV6_CLIENT, LOW_IPV6_CLIENT], [IPV4_CLIENT]),
    "an address and a network": ([IPV4_CLIENT, "2001:db8:5::/64"], [IPV4_CLIENT, IPV6_CLIENT], ["127.0.0.3", LOW_IPV6_CLIENT]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_allowed_clients_admit_exactly_the_clients_written(case):
    clients, admitted, refused = CASES[case]
    with squid_namespace(squid_conf(egress_proxy_allowed_clients=clients), {}, ADDRESSES) as namespace:
        found = {(source, method): namespace.get(ORIGIN, "%s-%s" % (source, method),
                                                 tunnel=method == "CONNECT", source=source)
                 for source in admitted + refused for method in ("GET", "CONNECT")}
        statuses = {key: (status, body and body["reached"]) for key, (status, body) in found.items()}
        expected = {(source, method): (200, "::ffff:" + ORIGIN) if source in admitted else (403, None)
                    for source in admitted + refused for method in ("GET", "CONNECT")}
        assert statuses == expected, {key: value for key, value in statuses.items() if value != expected[key]}
        reached = [line for line in namespace.reached().splitlines() if line.startswith("reached")]
        assert sorted(reached) == sorted("reached ::ffff:%s /%s-%s" % (ORIGIN, source, method)
                                         for source in admitted for method in ("GET", "CONNECT")), reached
