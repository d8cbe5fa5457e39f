# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The values the egress_proxy role writes into a proxy's squid.conf and user-data, checked as text and normalised.

squid reads its configuration a line at a time and splits each line at
blanks, so one value holding a line feed or a blank writes directives of its
own (``http_access allow all`` before every deny). Each value is therefore
checked as text first (_text), then parsed, and the role's template writes
the parsed form only: the filters squid_settings_errors (the role's check)
and squid_settings (what the template writes) both come from here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import validate_vm_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import (
    ascii_decimal,
    control_character,
    ip_network,
    ipv4_interface,
    quoted,
)

MAX_PORT = 65535
# squid's forwarded_for values.
FORWARDED_FOR = ("delete", "on", "off", "transparent", "truncate")


def _port(value):
    """``value`` (an int, or text of ASCII digits) as a TCP port number, or None."""
    if isinstance(value, bool):
        return None
    number = value if isinstance(value, int) else ascii_decimal(value)
    return number if number is not None and 1 <= number <= MAX_PORT else None


def _port_or_range(value):
    """``value`` as squid writes a port or a range ``low-high``, or None."""
    if not isinstance(value, str):
        port = _port(value)
        return None if port is None else str(port)
    low, separator, high = value.partition("-")
    if not separator:
        port = _port(low)
        return None if port is None else str(port)
    low, high = _port(low), _port(high)
    if low is None or high is None or low > high:
        return None
    return "%d-%d" % (low, high)


def _ports(variable, values, problems):
    if not values:
        problems.append("%s is empty" % variable)
        return []
    written = [_port_or_range(value) for value in values]
    bad = [quoted(value) for value, port in zip(values, written) if port is None]
    if bad:
        problems.append("%s %s are not ports (1-%d in ASCII digits) or ranges such as 1025-65535"
                        % (variable, ", ".join(bad), MAX_PORT))
    return written


def _ip(proxy, option, problems):
    """The address, without its prefix, of the static NIC option (``address`` or ``outside.address``), or None."""
    value = proxy.get(option) if option == "address" else (proxy.get("outside") or {}).get("address")
    if not value:
        return None
    interface = ipv4_interface(value)
    if interface is None:
        problems.append("%s %s is not an IPv4 address with its prefix length, e.g. 198.18.11.50/24" % (option, quoted(value)))
        return None
    return str(interface.ip)


def _client(network):
    """squid's acl src entry for ``network``: a single address without its prefix, the form it is usually given in
    (so the user-data, and with it the proxy, stays what it was)."""
    if network.prefixlen == network.max_prefixlen:
        return str(network.network_address)
    return str(network)


def squid_settings(proxy, safe_ports, connect_ports, forwarded_for=None):
    """What squid.conf gets for ``proxy`` (name, port, allowed_clients, address, outside) and the role's settings.

    Returns ``(settings, problems)``: ``settings`` the values as written, in
    their normalised form (``port`` an int, ``listen_address`` and
    ``outgoing_address`` the addresses with an outside NIC, else None,
    ``allowed_clients`` and the port lists as strings), and ``problems`` one
    sentence per refused value, each quoting the value, cut short and with
    its control characters escaped. ``forwarded_for`` None is not checked.
    """
    problems = []
    try:
        name = validate_vm_name(proxy.get("name"))
    except ValidationError as error:
        problems.append(error.message)
        name = None
    port = _port(proxy.get("port"))
    if port is None:
        problems.append("port %s is not a port between 1 and %d in ASCII digits" % (quoted(proxy.get("port")), MAX_PORT))
    clients = proxy.get("allowed_clients") or []
    if not clients:
        problems.append("allowed_clients is empty (set egress_proxy_allowed_clients, or allowed_clients on the instance)")
    networks = [ip_network(client) for client in clients]
    bad_clients = [quoted(client) for client, network in zip(clients, networks) if network is None]
    if bad_clients:
        problems.append("allowed_clients %s are not IPv4 or IPv6 addresses or networks (address/prefix, no host bits, "
                        "no %%scope)" % ", ".join(bad_clients))
    outgoing_address = _ip(proxy, "outside.address", problems)
    listen_address = _ip(proxy, "address", problems)
    if outgoing_address is not None and not proxy.get("address"):
        problems.append("address: the inside NIC needs a static address (squid listens only there)")
    if forwarded_for is not None and forwarded_for not in FORWARDED_FOR:
        problems.append("egress_proxy_forwarded_for %s is not one of %s" % (quoted(forwarded_for), ", ".join(FORWARDED_FOR)))
    settings = {
        "name": name,
        "port": port,
        "listen_address": listen_address if outgoing_address is not None else None,
        "outgoing_address": outgoing_address,
        "allowed_clients": [_client(network) for network in networks if network is not None],
        "safe_ports": _ports("egress_proxy_safe_ports", safe_ports, problems),
        "connect_ports": _ports("egress_proxy_connect_ports", connect_ports, problems),
        "forwarded_for": forwarded_for,
    }
    return settings, problems


def authorized_keys_problems(keys):
    """One sentence per key of egress_proxy_ssh_authorized_keys that is not one line of text ([] when none).

    The user-data holds each key as a YAML string, which reads back whole, but
    cloud-init writes it as one line of authorized_keys: a line feed (or a
    carriage return, NUL, U+2028...) inside a key writes a line of its own
    there, another key or one with options such as command="...".
    """
    problems = []
    for index, key in enumerate(keys):
        control = control_character(key)
        if control is not None:
            problems.append("egress_proxy_ssh_authorized_keys[%d] %s has the control character %s: a key is one line "
                            "of authorized_keys, so give each key as its own list item" % (index, quoted(key), control))
    return problems
