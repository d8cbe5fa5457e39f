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

import functools
import ipaddress
import re
from dataclasses import dataclass

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import is_dns_name, validate_vm_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.pooled_addresses import PROFILE_NAME
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import (
    ascii_decimal,
    control_character,
    ip_address,
    ip_network,
    ipv4_address,
    ipv4_interface,
    ipv6_address,
    ipv6_interface,
    quoted,
)
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_pool import POOLED, PoolError, host_addresses, parse_pool
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import (
    HEALTH_PORT,
    INSIDE_NIC,
    OUTSIDE_NIC,
    SYSCTL_PATH,
    listens_nonlocal,
)
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.profile_addresses import PROGRAM_ARGV

MAX_PORT = 65535
# squid's forwarded_for values.
FORWARDED_FOR = ("delete", "on", "off", "transparent", "truncate")
# What deny_internal refuses: every destination address that is not globally routable (the IANA special-purpose
# registries): this network, RFC 1918, shared (CGNAT), loopback, link-local with the cloud metadata address, IETF
# protocol assignments, the documentation and benchmarking ranges, multicast and reserved; IPv6 unspecified, loopback
# and IPv4-compatible (::/96), IPv4-translated (::ffff:0:0:0/96), discard, local-use NAT64 (64:ff9b:1::/48), the IETF
# protocol assignments (2001::/23, Teredo's 2001::/32 in it), documentation (2001:db8::/32, 3fff::/20), 6to4
# (2002::/16), SRv6 (5f00::/16), unique local, link-local, site-local (fec0::/10) and multicast. The well-known NAT64
# prefix 64:ff9b::/96 is judged by the IPv4 address it carries (_squid_networks), so a proxy behind DNS64 still
# reaches public IPv4 destinations; the IPv4-mapped range is judged as IPv4 by squid itself.
INTERNAL_NETWORKS = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24",
    "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4",
    "240.0.0.0/4", "::/96", "::ffff:0:0:0/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32",
    "2002::/16", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
)
# squid keeps an IPv4 address in its IPv4-mapped IPv6 form, so an acl's (src or dst) IPv6 network that covers this range
# matches every IPv4 address, and one inside it matches IPv4 addresses: an IPv6 network stands for IPv6 addresses only.
_IPV4_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
# NAT64's well-known prefix (RFC 6052): its addresses carry an IPv4 address in their last 32 bits, where a DNS64
# resolver sends an IPv6-only proxy to every IPv4 destination.
NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")
_EVERY_ADDRESS = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
# A proxy user's name: a line of squid's password file (name:hash) starts with it, and a client types it.
_USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")
# The hash password_hash.squid_user_hash writes: SHA-512-crypt with its rounds, salt and hash in crypt's alphabet.
_USER_HASH = re.compile(r"\$6\$rounds=[0-9]{4,9}\$[./0-9A-Za-z]{1,16}\$[./0-9A-Za-z]{86}")
# The loopback ports of the metrics: prometheus-squid-exporter listens on the first, and reads squid's cache manager on
# the second, which squid opens for the exporter alone. Neither can be the proxy's port or its metrics port.
EXPORTER_PORT = 19301
MANAGER_PORT = 13128
# With the decisions counted: the counter's page on the loopback (the exporter's, then the counts), which the metrics
# port reaches instead; the counter, squid's log daemon (the role's files/squid_helpers.py), and the log squid hands it,
# a name no file is written to.
DECISIONS_PORT = 19302
COUNTER_PROGRAM = "/usr/local/sbin/egress-proxy-decision-counter"
COUNTED_LOG = "/run/egress-proxy-decisions"
LOOPBACK_PORTS = (EXPORTER_PORT, DECISIONS_PORT, MANAGER_PORT)
# The users' hashes (name:hash a line), and while passwords are rotated the previous ones, which squid's Basic helper
# reads; squid's own helper, and the role's that asks it on both files (files/squid_helpers.py).
USERS_FILE = "/etc/squid/egress-users"
PREVIOUS_USERS_FILE = "/etc/squid/egress-users-previous"
SQUID_NCSA_AUTH = "/usr/lib/squid/basic_ncsa_auth"
EITHER_PROGRAM = "/usr/local/sbin/egress-proxy-basic-auth-either"
SYSLOG_PROTOCOLS = ("udp", "tcp")
# The TLS name check (tls_sni_check): squid built with OpenSSL (its Debian package) peeks at each CONNECT's ClientHello
# and splices the connection (nothing decrypted, no certificate on the proxy) when the request's policy allows its SNI
# by name, else closes it. squid's ssl::server_name takes the CONNECT's host where a ClientHello names no server, so an
# external acl, the role's program (files/squid_helpers.py), tells whether it named one.
SQUID_PACKAGE, TLS_SQUID_PACKAGE = "squid", "squid-openssl"
SNI_PROGRAM = "/usr/local/sbin/egress-proxy-sni-given"
# A policy's modes: enforce refuses what its rules deny; report forwards it, and its access line says would_deny.
ENFORCE, REPORT = "enforce", "report"
MODES = (ENFORCE, REPORT)
# The decisions an access line writes (decision=...), and the profile it names for the default policy (profile=...).
ALLOW, DENY, WOULD_DENY = "allow", "deny", "would_deny"
DEFAULT_POLICY = "default"
# A profile's keys, and its name: a word of squid.conf, part of its acls' names (profile_<name>_...: no underscore,
# so two profiles' acls never share a name) and of every access line it decides.
PROFILE_KEYS = ("name", "users", "clients", "allowed_destinations", "denied_destinations", "deny_internal", "mode",
                "tls_sni_check", "egress_address", "egress_address6")
# A profile's own egress addresses: the key, the address family, how the text is parsed, and the egress NIC's option of
# that family (whose segment the address joins).
_EGRESS_FIELDS = (("egress_address", 4, ipv4_address, "address"), ("egress_address6", 6, ipv6_address, "address6"))
# host:port of the syslog server: an IPv4 address, or an IPv6 one in brackets.
_SYSLOG_SERVER = re.compile(r"(?:\[(?P<ipv6>[^\]]*)\]|(?P<ipv4>[^:\[\]]*)):(?P<port>[^:]*)")


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


# A NIC's static address options, each with how it is parsed and what a message shows as the right form.
_NIC_ADDRESSES = (("address", ipv4_interface, "an IPv4 address with its prefix length, e.g. 198.18.11.50/24"),
                  ("address6", ipv6_interface, "an IPv6 address with its prefix length (no %scope), e.g. 2001:db8:11::50/64"))


def _interfaces(proxy, nic, problems):
    """The static addresses of the inside NIC (``nic`` "") or the outside one (``nic`` "outside."): its
    IPv4Interface and IPv6Interface, IPv4 first, each only when given."""
    options = proxy if not nic else (proxy.get("outside") or {})
    found = []
    for option, parse, form in _NIC_ADDRESSES:
        value = options.get(option)
        if not value:
            continue
        interface = parse(value)
        if interface is None:
            problems.append("%s%s %s is not %s" % (nic, option, quoted(value), form))
        else:
            found.append(interface)
    return found


def _http_port_address(ip):
    """An address as squid's http_port writes it before its port: an IPv6 one in brackets."""
    return "[%s]" % ip if ip.version == 6 else str(ip)


def _client(network):
    """squid's acl src entry for ``network``: a single address without its prefix, the form it is usually given in
    (so the user-data, and with it the proxy, stays what it was)."""
    if network.prefixlen == network.max_prefixlen:
        return str(network.network_address)
    return str(network)


def _clients(networks):
    """The acl src values of ``networks`` (allowed_clients or metrics_clients, ip_network objects): each network in
    the order given, as squid matches exactly its addresses (_squid_matched, _squid_values); a list without 0.0.0.0/0
    or IPv6 networks at or around the IPv4-mapped range is written as given."""
    return _squid_values([matched for network in networks for matched in _squid_matched(network)])


def squid_settings(proxy, safe_ports, connect_ports, forwarded_for=None):
    """What squid.conf gets for ``proxy`` (name, port, allowed_clients, address, outside) and the role's settings.

    Returns ``(settings, problems)``: ``settings`` the values as written, in
    their normalised form (``port`` an int; with an outside NIC
    ``listen_addresses`` the inside addresses as http_port writes them and
    ``outgoing_addresses`` the outside ones, IPv4 first, else both empty;
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
    outside = _interfaces(proxy, "outside.", problems)
    inside = _interfaces(proxy, "", problems)
    # squid adds an implicit IP version test to each tcp_outgoing_address: the IPv4 one serves IPv4 destinations, the
    # IPv6 one IPv6 destinations.
    outgoing_addresses = [str(interface.ip) for interface in outside]
    if outgoing_addresses and not (proxy.get("address") or proxy.get("address6")):
        problems.append("address: the inside NIC needs a static address or address6 (squid listens only there)")
    if forwarded_for is not None and forwarded_for not in FORWARDED_FOR:
        problems.append("egress_proxy_forwarded_for %s is not one of %s" % (quoted(forwarded_for), ", ".join(FORWARDED_FOR)))
    settings = {
        "name": name,
        "port": port,
        "listen_addresses": [_http_port_address(interface.ip) for interface in inside] if outgoing_addresses else [],
        "outgoing_addresses": outgoing_addresses,
        "allowed_clients": _clients(network for network in networks if network is not None),
        "safe_ports": _ports("egress_proxy_safe_ports", safe_ports, problems),
        "connect_ports": _ports("egress_proxy_connect_ports", connect_ports, problems),
        "forwarded_for": forwarded_for,
    }
    settings["dns_nameservers"] = _nameservers(proxy, problems)
    pooled = proxy.get("pooled_addresses") or {}
    egress_nic = _EgressNic(OUTSIDE_NIC, "outside.", outside, inside + outside, _pool(proxy), pooled) \
        if proxy.get("outside") else _EgressNic(INSIDE_NIC, "", inside, inside, _pool(proxy), pooled)
    settings.update(_policy(proxy, [interface.network for interface in inside + outside],
                            [matched for network in networks if network is not None for matched in _squid_matched(network)],
                            egress_nic, problems))
    settings["egress_addresses"] = [address for profile in settings["profiles"] for address in profile["egress_addresses"]]
    settings["tls_sni_checked"] = any(policy["tls_sni_check"] for policy in [settings] + settings["profiles"])
    settings["squid_package"] = TLS_SQUID_PACKAGE if settings["tls_sni_checked"] else SQUID_PACKAGE
    settings["sni_program"] = SNI_PROGRAM
    settings["egress_addresses_program"] = list(PROGRAM_ARGV)
    settings.update(_metrics(proxy, port, settings["allowed_clients"], problems))
    settings.update(_ha(proxy, port, settings["metrics_port"], problems))
    settings["syslog"] = _syslog(proxy.get("syslog"), proxy.get("syslog_protocol") or "udp", problems)
    settings.update(_access_rules(settings))
    # With the decisions on the metrics page, the metrics port reaches the counter, which serves the exporter's page and
    # the counts (files/squid_helpers.py); else the exporter's page as it is.
    settings["decisions_counted"] = bool(settings["decisions"] and settings["metrics_port"])
    settings["page_port"] = DECISIONS_PORT if settings["decisions_counted"] else EXPORTER_PORT
    settings["counter"] = {"program": COUNTER_PROGRAM, "log": COUNTED_LOG}
    return settings, problems


def _metrics(proxy, port, allowed_clients, problems):
    """Where squid serves the exporter's metrics (``metrics_port``, None when off) and to whom (``metrics_clients``:
    the given ones, else the proxy's own clients)."""
    metrics = proxy.get("metrics", False)
    if not isinstance(metrics, bool):
        problems.append("egress_proxy_metrics %s is not a boolean" % quoted(metrics))
        metrics = False
    if port in LOOPBACK_PORTS:
        problems.append("port %d is a loopback port of the metrics (%s); choose another"
                        % (port, ", ".join(str(number) for number in LOOPBACK_PORTS)))
    loopback = {"exporter_port": EXPORTER_PORT, "manager_port": MANAGER_PORT}
    if not metrics:
        return dict(loopback, metrics_port=None, metrics_clients=[])
    metrics_port = _port(proxy.get("metrics_port"))
    if metrics_port is None:
        problems.append("egress_proxy_metrics_port %s is not a port between 1 and %d in ASCII digits"
                        % (quoted(proxy.get("metrics_port")), MAX_PORT))
    elif metrics_port == port or metrics_port in LOOPBACK_PORTS:
        problems.append("egress_proxy_metrics_port %d is %s; choose another" % (
            metrics_port, "the proxy's port" if metrics_port == port else "a loopback port of the metrics"))
    given = proxy.get("metrics_clients") or []
    networks = [ip_network(client) for client in given]
    bad = ["egress_proxy_metrics_clients[%d] %s" % (index, quoted(client))
           for index, (client, network) in enumerate(zip(given, networks)) if network is None]
    if bad:
        problems.append("%s: not an IPv4 or IPv6 address or network (address/prefix, no host bits, no %%scope)" % ", ".join(bad))
    clients = _clients(network for network in networks if network is not None) if given else list(allowed_clients)
    return dict(loopback, metrics_port=metrics_port, metrics_clients=clients)


def _ha(proxy, port, metrics_port, problems):
    """What an HA group's member (``proxy["ha"]``, ha_groups.instance_groups') adds to squid.conf and its user-data:
    ``ha_member``; ``ha_health_port``, the loopback port keepalived's check asks (None for a proxy in no group);
    ``ha_listen_addresses``, the groups' client addresses squid listens on where it listens on named addresses (an
    outside NIC); ``ha_outgoing``, per group whose egress address follows the client address, the acl of the client
    addresses and the egress addresses the requests arriving there leave from; ``ha_sysctl_file``, the sysctl file
    that lets squid listen on those addresses before it holds them (None where squid listens on every address)."""
    groups = proxy.get("ha") or []
    settings = {"ha_member": bool(groups), "ha_health_port": None, "ha_listen_addresses": [], "ha_outgoing": [],
                "ha_sysctl_file": None}
    if not groups:
        return settings
    for option, value in (("port", port), ("egress_proxy_metrics_port", metrics_port)):
        if value == HEALTH_PORT:
            problems.append("%s %d is the loopback port of the HA group's health check; choose another" % (option, value))
    clients = [ipaddress.ip_interface(address).ip for group in groups for address in (group["address"], group["address6"])
               if address]
    settings["ha_health_port"] = HEALTH_PORT
    if listens_nonlocal(proxy):
        settings.update(ha_sysctl_file=SYSCTL_PATH, ha_listen_addresses=[_http_port_address(ip) for ip in clients])
    for group in groups:
        egress = [str(ipaddress.ip_interface(group[field]).ip) for field in ("egress_address", "egress_address6")
                  if group[field]]
        if egress:
            settings["ha_outgoing"].append({
                "acl": "egress_ha_%s" % group["name"], "egress": egress,
                "clients": [str(ipaddress.ip_interface(group[field]).ip) for field in ("address", "address6") if group[field]]})
    return settings


def _syslog(server, protocol, problems):
    """The access log's remote copy as squid's log module writes it (``udp://198.51.100.7:514``), or None."""
    if not server:
        return None
    if protocol not in SYSLOG_PROTOCOLS:
        problems.append("egress_proxy_syslog_protocol %s is not one of %s" % (quoted(protocol), ", ".join(SYSLOG_PROTOCOLS)))
        return None
    found = _SYSLOG_SERVER.fullmatch(server) if isinstance(server, str) else None
    address = found and ip_address(found.group("ipv6") if found.group("ipv6") is not None else found.group("ipv4"))
    port = found and _port(found.group("port"))
    if not address or port is None or (address.version == 6) != (found.group("ipv6") is not None):
        problems.append("egress_proxy_syslog %s is not host:port with an IP address (198.51.100.7:514, "
                        "[2001:db8::7]:514); squid reads the address once, when it loads its configuration" % quoted(server))
        return None
    host = "[%s]" % address if address.version == 6 else str(address)
    return "%s://%s:%d" % (protocol, host, port)


def _nameservers(proxy, problems):
    """The DNS servers squid asks, when the proxy's NICs are static: the outside NIC's, then the inside's, each once.

    cloud-init writes a static NIC's servers for the network stack, which leaves them unapplied on an image without
    resolvconf or systemd-resolved (Debian's ifupdown alone): squid, which resolves every name the policy checks,
    then resolves none. Written into squid.conf, they hold whatever the image does with /etc/resolv.conf. None given
    (DHCP): squid reads the resolver the lease configured.
    """
    servers = []
    for option, given in (("outside.dns", (proxy.get("outside") or {}).get("dns")), ("dns", proxy.get("dns"))):
        for server in given or []:
            address = ip_address(server)
            if address is None:
                problems.append("%s %s is not an IPv4 or IPv6 address" % (option, quoted(server)))
            elif str(address) not in servers:
                servers.append(str(address))
    return servers


def destination(text):
    """One entry of allowed_destinations or denied_destinations as squid matches it: ``("network", "10.0.0.0/8")``
    for an address or CIDR (matched on the address the destination resolves to), ``("domain", ".example.com")`` for
    a host name or a domain with its leading dot (matched on the URL's host, lowercase); None for anything else.

    A name ends in a label that is not all digits, so ``300.1.1.1`` is neither an address nor a name.
    """
    network = ip_network(text)
    if network is not None:
        return "network", _client(network)
    if not isinstance(text, str):
        return None
    name = text[1:] if text.startswith(".") else text
    if not is_dns_name(name) or name.rpartition(".")[2].isdigit():
        return None
    return "domain", text.lower()


def _destinations(variable, entries, problems):
    """(domains, networks) of one destination list, in squid's forms; the names a domain of the list covers left out
    (squid refuses a dstdomain list holding both .example.com and api.example.com)."""
    entries = entries or []
    parsed = [destination(entry) for entry in entries]
    bad = ["%s[%d] %s" % (variable, index, quoted(entry))
           for index, (entry, found) in enumerate(zip(entries, parsed)) if found is None]
    if bad:
        problems.append("%s: neither a host name (api.example.com), a domain with its leading dot (.example.com: it "
                        "and every name under it; write .example.com, not *.example.com), nor an IP address or network "
                        "(address/prefix, no host bits)" % ", ".join(bad))
    domains = sorted({value for kind, value in filter(None, parsed) if kind == "domain"})
    dotted = [domain for domain in domains if domain.startswith(".")]
    kept = [domain for domain in domains
            if not any(domain != other and ("." + domain.lstrip(".")).endswith(other) for other in dotted)]
    return kept, [value for kind, value in filter(None, parsed) if kind == "network"]


def _collapsed(networks):
    """``networks`` (ip_network objects) as the fewest networks covering them, IPv4 first."""
    return [network for version in (4, 6)
            for network in ipaddress.collapse_addresses(n for n in networks if n.version == version)]


def _minus(networks, removed):
    """The addresses of ``networks`` that are in none of ``removed`` (all ip_network objects), collapsed."""
    left = list(networks)
    for cut in removed:
        kept = []
        for network in left:
            if network.version != cut.version or not network.overlaps(cut):
                kept.append(network)
            elif not network.subnet_of(cut):
                kept.extend(network.address_exclude(cut))
        left = kept
    return _collapsed(left)


def _squid_matched(network):
    """``network`` (an ip_network) as the networks that squid's acls (src and dst alike) match with exactly its
    addresses: an IPv6 network inside the IPv4-mapped range is the IPv4 network it maps, one covering that range is the
    rest of it (see _IPV4_MAPPED), any other network itself."""
    if network.version == 6 and network.subnet_of(_IPV4_MAPPED):
        return [ipaddress.ip_network((int(network.network_address) & 0xFFFFFFFF, network.prefixlen - 96))]
    if network.version == 6 and network.supernet_of(_IPV4_MAPPED):
        return sorted(network.address_exclude(_IPV4_MAPPED))
    return [network]


def _squid_networks(networks):
    """The destinations ``networks`` (texts) stand for, as ip_network objects squid's dst acl matches exactly
    (_squid_matched), collapsed. Each IPv4 network brings its image under NAT64_PREFIX, so an address there is judged
    by the IPv4 address it carries, in every list alike.
    """
    matched = _collapsed([found for text in networks for found in _squid_matched(ipaddress.ip_network(text))])
    images = [ipaddress.ip_network((int(NAT64_PREFIX.network_address) | int(network.network_address), 96 + network.prefixlen))
              for network in matched if network.version == 4]
    return _collapsed(matched + images)


def _squid_values(networks):
    """``networks`` (ip_network objects) as src or dst acl values: a single address without its prefix, and 0.0.0.0/0
    as its two halves (squid reads 0.0.0.0/0 as its "all", which matches IPv6 too)."""
    halves = [half for network in networks
              for half in (network.subnets(1) if network.prefixlen == 0 else [network])]
    return [_client(network) for network in halves]


def internal_networks(nic_networks=()):
    """What deny_internal refuses, as squid matches it: INTERNAL_NETWORKS and ``nic_networks`` (the proxy's own
    static NICs'), each IPv4 network with its NAT64 image, collapsed (ip_network objects)."""
    return _squid_networks(list(INTERNAL_NETWORKS) + [str(network) for network in nic_networks])


def is_user_name(name):
    """Whether ``name`` can be a proxy user's name: a line of the password file starts with it (and squid_user_hash
    takes it, which refuses a NUL)."""
    return isinstance(name, str) and _USER_NAME.fullmatch(name) is not None


def _users(users, problems):
    """The users squid authenticates, as ``[{"name", "hash"}]``, and with ``previous_hash`` too a user whose password
    is being rotated; each entry carries hashes (never a password)."""
    names = [user.get("name") if isinstance(user, dict) else None for user in users or []]
    for index, (user, name) in enumerate(zip(users or [], names)):
        if not is_user_name(name):
            problems.append("users[%d].name %s is not 1-64 letters, digits and . _ @ + - (no colon or blank), starting with a letter or digit"
                            % (index, quoted(name)))
        elif names.count(name) > 1 and names.index(name) == index:
            problems.append("users[%d].name %s appears more than once" % (index, quoted(name)))
        elif any(key in user and (not isinstance(user[key], str) or not _USER_HASH.fullmatch(user[key]))
                 for key in ("hash", "previous_hash")) or "hash" not in user:
            problems.append("users[%d] (%s) has no password hash of the role's (the role hashes each password)"
                            % (index, name))
    return [{key: user[key] for key in ("name", "hash", "previous_hash") if key in user} for user in users or []]


def _authentication(users):
    """squid's Basic helper (``auth_program``, its argv) and the users whose previous password it accepts too
    (``rotating_users``): basic_ncsa_auth on the users' file, or while a password is rotated the role's helper that asks
    it on that file, then on the previous passwords' (files/squid_helpers.py)."""
    rotating = [user for user in users if "previous_hash" in user]
    if not rotating:
        return {"auth_program": [SQUID_NCSA_AUTH, USERS_FILE], "rotating_users": []}
    return {"auth_program": [EITHER_PROGRAM, SQUID_NCSA_AUTH, USERS_FILE, PREVIOUS_USERS_FILE], "rotating_users": rotating}


def _destination_policy(label, policy, nic_networks, problems):
    """Where one policy (the proxy's default, or a profile of it: ``label`` "" or "profiles[0] (ci).", what its
    messages name) lets its clients go: the keys of its destination acls.

    squid's dst acl matches when any address a name resolves to matches, and squid then connects to those addresses
    in DNS order. So every address squid may connect to must pass each rule, and each rule is written as a deny
    that any one address sets off: ``internal_networks`` the internal networks not allowed by address,
    ``unlisted_networks`` every address outside the allowed networks (with an allowlist of networks).
    """
    allowed_domains, allowed_networks = _destinations(label + "allowed_destinations", policy.get("allowed_destinations"),
                                                      problems)
    denied_domains, denied_networks = _destinations(label + "denied_destinations", policy.get("denied_destinations"),
                                                    problems)
    deny_internal = policy.get("deny_internal", True)
    if not isinstance(deny_internal, bool):
        problems.append("%sdeny_internal %s is not a boolean" % (label, quoted(deny_internal)))
    allowed = _squid_networks(allowed_networks)
    internal = _minus(internal_networks(nic_networks), allowed) if deny_internal else []
    unlisted = _minus(_squid_networks([str(network) for network in _EVERY_ADDRESS]), allowed) if allowed else []
    return {
        "allowed_domains": allowed_domains,
        "allowed_networks": _squid_values(allowed),
        "denied_domains": denied_domains,
        "denied_networks": _squid_values(_squid_networks(denied_networks)),
        "internal_networks": _squid_values(internal),
        "unlisted_networks": _squid_values(unlisted),
    }


def _mode(label, mode, problems):
    """A policy's mode, MODES' first (enforce) when it is not one of them (after saying so)."""
    if isinstance(mode, str) and mode in MODES:
        return mode
    problems.append("%smode %s is not one of %s" % (label, quoted(mode), ", ".join(MODES)))
    return ENFORCE


def _policy(proxy, nic_networks, client_networks, egress_nic, problems):
    """Who the proxy asks for credentials (``users``) and how (_authentication), and where its clients may go: its
    default policy (the keys of _destination_policy, ``acl_prefix`` "" and ``mode``) and its ``profiles`` (_profiles)."""
    users = _users(proxy.get("users"), problems)
    settings = _destination_policy("", proxy, nic_networks, problems)
    settings.update(_authentication(users))
    settings.update(acl_prefix="", mode=_mode("", proxy.get("mode", ENFORCE), problems), users=users,
                    tls_sni_check=_tls_sni_check("", proxy.get("tls_sni_check", False), settings, problems))
    settings["profiles"] = _profiles(proxy.get("profiles"), nic_networks, [user["name"] for user in users],
                                     client_networks, egress_nic, settings["tls_sni_check"], problems)
    return settings


def _tls_sni_check(label, check, policy, problems):
    """Whether a policy checks its CONNECTs' TLS names (False after saying why when it cannot): the SNI must be allowed
    by name, so a policy that allows destinations by address alone could let no TLS connection through."""
    if not isinstance(check, bool):
        problems.append("%stls_sni_check %s is not a boolean" % (label, quoted(check)))
        return False
    if check and policy["allowed_networks"] and not policy["allowed_domains"]:
        problems.append("%stls_sni_check: %sallowed_destinations allows addresses only, and the check lets a TLS "
                        "connection through only for a server name (SNI) the policy allows by name; add the names, or "
                        "set tls_sni_check false %s" % (label, label, "for this profile" if label else "for the proxy"))
        return False
    return check


def _profile_entries(profiles, problems):
    """(where, profile) of each entry of ``profiles`` that is a mapping of PROFILE_KEYS with a usable name, each name
    once, ``where`` how messages name it ("profiles[0] (ci)"); a sentence in ``problems`` for every other entry."""
    if profiles is None:
        return []
    if not isinstance(profiles, list):
        problems.append("profiles %s is not a list of profiles" % quoted(profiles))
        return []
    names = [profile.get("name") if isinstance(profile, dict) else None for profile in profiles]
    entries = []
    for index, (profile, name) in enumerate(zip(profiles, names)):
        if not isinstance(profile, dict):
            problems.append("profiles[%d] %s is not a mapping (name, users, clients, allowed_destinations, ...)"
                            % (index, quoted(profile)))
            continue
        unknown = sorted(str(key) for key in profile if key not in PROFILE_KEYS)
        if unknown:
            problems.append("profiles[%d] has the unknown keys %s (a profile has %s)"
                            % (index, ", ".join(quoted(key) for key in unknown), ", ".join(PROFILE_KEYS)))
        if not isinstance(name, str) or not PROFILE_NAME.fullmatch(name) or name == DEFAULT_POLICY:
            problems.append("profiles[%d].name %s is not 1-32 lowercase letters, digits and hyphens starting with a "
                            "letter, other than %s (the access lines' name of the default policy)"
                            % (index, quoted(name), DEFAULT_POLICY))
        elif names.count(name) > 1 and names.index(name) != index:
            problems.append("profiles[%d].name %s is the name of profiles[%d] too; give each profile its own"
                            % (index, quoted(name), names.index(name)))
        elif not unknown:
            entries.append(("profiles[%d] (%s)" % (index, name), profile))
    return entries


def _within(network, networks):
    """Whether ``network`` lies inside one of ``networks`` (ip_network objects)."""
    return any(network.version == other.version and network.subnet_of(other) for other in networks)


def _profiles(profiles, nic_networks, user_names, client_networks, egress_nic, tls_sni_check, problems):
    """The proxy's profiles as squid.conf writes them, in their order (a request takes the first whose identity it
    matches): per profile its ``name``, ``acl``, ``acl_prefix``, ``mode`` and ``tls_sni_check`` (the proxy's
    ``tls_sni_check`` unless given), the ``users`` and ``clients`` (acl src values) it applies to, its destination acls
    (_destination_policy, the default policy's own rules) and its ``egress_addresses`` (_egress_addresses)."""
    written = []
    egress_taken = {}
    for where, profile in _profile_entries(profiles, problems):
        label = where + "."
        users = profile.get("users") or []
        if not isinstance(users, list):
            problems.append("%susers %s is not a list of user names" % (label, quoted(users)))
            users = []
        for position, user in enumerate(users):
            if not is_user_name(user):
                problems.append("%susers[%d] %s is not a user's name (1-64 letters, digits and . _ @ + -)"
                                % (label, position, quoted(user)))
            elif user not in user_names:
                problems.append("%susers[%d] %s is not one of the proxy's users (users, egress_proxy_users): a request "
                                "only names a user it authenticated as" % (label, position, quoted(user)))
        clients = profile.get("clients") or []
        if not isinstance(clients, list):
            problems.append("%sclients %s is not a list of addresses or networks" % (label, quoted(clients)))
            clients = []
        networks = []
        for position, client in enumerate(clients):
            network = ip_network(client)
            if network is None:
                problems.append("%sclients[%d] %s is not an IPv4 or IPv6 address or network (address/prefix, no host "
                                "bits, no %%scope)" % (label, position, quoted(client)))
            elif not all(_within(part, client_networks) for part in _squid_matched(network)):
                problems.append("%sclients[%d] %s is not within allowed_clients: the proxy refuses such a client "
                                "before any profile applies" % (label, position, quoted(client)))
            else:
                networks.append(network)
        if not users and not clients:
            problems.append("%s applies to nobody: give it users, clients or both" % where)
        policy = _destination_policy(label, profile, nic_networks, problems)
        # Its requests are those annotated with its name (acl), its acls' names start with acl_prefix.
        policy.update(name=profile["name"], acl="profile_%s" % profile["name"], acl_prefix="profile_%s_" % profile["name"],
                      mode=_mode(label, profile.get("mode", ENFORCE), problems),
                      users=[user for position, user in enumerate(users) if users.index(user) == position],
                      clients=_clients(networks),
                      egress_addresses=_egress_addresses(label, profile, egress_nic, egress_taken, problems))
        policy["tls_sni_check"] = _tls_sni_check(label, profile.get("tls_sni_check", tls_sni_check), policy, problems)
        written.append(policy)
    return written


@dataclass(frozen=True)
class _EgressNic:
    """The NIC a proxy's requests leave from, as a profile's egress addresses need it: its name in the guest, how
    messages name its options ("outside." or ""), its static addresses (ip_interface objects), every static address of
    the proxy, the pool its outside addresses come from (PoolEntry tuple, () without one), and the addresses that pool
    gave the proxy's profiles ({profile: {field: address}})."""

    device: str
    options: str
    interfaces: list
    own: list
    pool: tuple
    pooled: dict


def _pool(proxy):
    """The outside NIC's pool (egress_pool.parse_pool's entries), () without one or when the pool's own check refuses
    it (naming it)."""
    entries = (proxy.get("outside") or {}).get("pool")
    if not entries:
        return ()
    try:
        return parse_pool(entries, proxy.get("name"))
    except PoolError:
        return ()


def _egress_addresses(label, profile, egress_nic, taken, problems):
    """A profile's own egress addresses (egress_address, egress_address6): each {"address", "interface" (with the egress
    NIC's prefix length), "device"}, IPv4 first. Each is a host address of the egress NIC's segment of its family, not
    an address of the proxy's NICs, of the outside pool (another proxy may get it) unless the pool gave it to this
    profile, or of another profile (``taken``: {address: profile label}, filled in). ``pool`` left in place means the
    allocation gave none: the proxy's hypervisor has no pool."""
    found = []
    for field, version, parse, option in _EGRESS_FIELDS:
        text = profile.get(field)
        if text is None or text == "":
            continue
        if text == POOLED:
            problems.append("%s%s is %s, but the proxy's hypervisor has no egress_proxy_outside.pool to give the profile "
                            "an address of: give the pool, or the profile an address of its own" % (label, field, POOLED))
            continue
        address = parse(text)
        if address is None:
            problems.append("%s%s %s is not an IPv%d address (without a prefix length: it takes the egress NIC's) or %s "
                            "(one more address of egress_proxy_outside.pool)" % (label, field, quoted(text), version, POOLED))
            continue
        pooled = egress_nic.pooled.get(profile["name"], {}).get(field) == text
        nic = next((interface for interface in egress_nic.interfaces if interface.version == version), None)
        if nic is None:
            problems.append("%s%s %s: the egress NIC has no static IPv%d address (%s%s, or one from "
                            "egress_proxy_outside.pool), whose segment the address joins"
                            % (label, field, address, version, egress_nic.options, option))
            continue
        network = nic.network
        first, last = host_addresses(network)
        if not first <= address <= last:
            problems.append("%s%s %s is not a host address of %s, the segment of %s%s"
                            % (label, field, address, network, egress_nic.options, option))
        elif any(address == interface.ip for interface in egress_nic.own):
            problems.append("%s%s %s is an address of the proxy's own NICs; give the profile one of its own"
                            % (label, field, address))
        elif not pooled and any(entry.version == version and entry.first <= address <= entry.last
                                for entry in egress_nic.pool):
            problems.append("%s%s %s is in egress_proxy_outside.pool, which gives its addresses to proxies; take it out "
                            "of the pool or give the profile another" % (label, field, address))
        elif str(address) in taken:
            problems.append("%s%s %s is the egress address of %s too; give each profile its own"
                            % (label, field, address, taken[str(address)]))
        else:
            taken[str(address)] = label.rstrip(".")
            found.append({"address": str(address), "interface": "%s/%d" % (address, network.prefixlen),
                          "device": egress_nic.device})
    return found


def _access_rules(settings):
    """squid.conf's http_access rules, in order, as ``http_access`` [{"comment": a line above it or None, "rule":
    what follows http_access}], and the annotate_transaction acls they use: ``profile_selects`` [{"acl", "profile"}]
    and ``decision_marks`` [{"acl", "decision", "rule"}].

    Without profiles, in enforce mode, these are the rules the role has always written. With profiles or report mode,
    every rule that decides a request also annotates it (``decisions``): decision=allow|deny|would_deny and the rule
    (its name here and in _destination_rules), which the access lines write with the profile the request took. A
    profile's rules are the default policy's (_destination_rules), behind the profile's note; the default policy's
    come last, for every request no profile took.
    """
    decisions = bool(settings["profiles"]) or settings["mode"] != ENFORCE or settings["tls_sni_checked"]
    marks = {}

    def mark(decision, rule):
        """The acl that annotates a request with ``decision`` and ``rule`` (as a list, [] when nothing is annotated)."""
        if not decisions:
            return []
        acl = "decision_%s_%s" % (decision, rule)
        marks.setdefault(acl, {"acl": acl, "decision": decision, "rule": rule})
        return [acl]

    rules = []

    def add(action, acls, comment=None):
        rules.append({"comment": comment, "rule": " ".join([action] + acls)})

    def refuse(acls, comment=None):
        """A deny of the clients' port. With the TLS name check, squid 5.7 asserts (and restarts) when http_access
        refuses a CONNECT on a port that peeks without a certificate (it would bump the connection to serve the error
        inside TLS): such a CONNECT is let through, annotated deny, and ssl_bump closes it before anything else. The
        tunnel a splice makes of a CONNECT passes http_access again (egress_tls_peeked), with lookups of its own (a name
        may have rebound to an internal address since): that pass is refused as without the check, which squid answers
        inside the spliced connection, and survives."""
        if settings["tls_sni_checked"]:
            add(ALLOW, ["CONNECT", "!egress_tls_peeked"] + [acl for acl in acls if acl != "CONNECT"], comment)
            comment = None
        add(DENY, acls, comment)

    if settings["ha_health_port"]:
        add(DENY, ["egress_health"])
    if settings["metrics_port"]:
        add(ALLOW, ["egress_metrics", "egress_metrics_clients", "!manager"] + mark(ALLOW, "metrics"))
        add(DENY, ["egress_metrics"] + mark(DENY, "metrics_clients"))
        add(ALLOW, ["egress_manager", "manager", "localhost"] + mark(ALLOW, "manager"))
        add(DENY, ["egress_manager"] + mark(DENY, "manager"))
    add(DENY, ["manager"] + mark(DENY, "manager"), "squid's cache manager (its counters and settings) answers no client.")
    refuse(["!safe_ports"] + mark(DENY, "safe_ports"))
    refuse(["CONNECT", "!connect_ports"] + mark(DENY, "connect_ports"))
    refuse(["!egress_clients"] + mark(DENY, "allowed_clients"))
    if settings["users"]:
        # The annotation comes first: squid asks for credentials only when the deny's last acl is the proxy_auth one.
        add(DENY, mark(DENY, "users") + ["!egress_users"], "A deny ending in proxy_auth answers 407, asking for credentials.")
    selects = []
    if decisions:
        selects = [{"acl": "profile_%s_select" % name, "profile": name}
                   for name in [profile["name"] for profile in settings["profiles"]] + [DEFAULT_POLICY]]
        comment = "The request's profile: the first whose users or clients match, else the default (!all: they only annotate)."
        for profile, select in zip(settings["profiles"], selects):
            for identity in ("users", "clients"):
                if profile[identity]:
                    add(DENY, ["!profile_chosen", profile["acl_prefix"] + identity, select["acl"], "!all"], comment)
                    comment = None
        add(DENY, ["!profile_chosen", selects[-1]["acl"], "!all"], comment)
    for policy, gate in [(profile, profile["acl"]) for profile in settings["profiles"]] + [(settings, None)]:
        for action, acls, comment in _destination_rules(policy, gate, mark):
            (refuse if action == DENY else functools.partial(add, action))(acls, comment)
    ssl_bump = []
    if settings["tls_sni_checked"]:
        # A CONNECT http_access refused (refuse above) is closed at once, unanswered; its line says deny and the rule.
        ssl_bump += ["terminate egress_refused", "peek egress_tls_step1"]
        for profile in settings["profiles"]:
            ssl_bump += _tls_name_rules(profile, profile["acl"], mark)
        ssl_bump += _tls_name_rules(settings, None, mark)
    return {"decisions": decisions, "http_access": rules, "profile_selects": selects, "decision_marks": list(marks.values()),
            "ssl_bump": ssl_bump}


def _tls_name_rules(policy, gate, mark):
    """The ssl_bump rules (what follows ssl_bump) of one policy, after the peek at the ClientHello: ``gate`` the acl of
    the requests it decides (a profile's note) or None (the default policy, last). With its check on, a ClientHello
    without SNI, or with one its denied_destinations name or its allowed_destinations do not, is refused (terminate:
    the client's connection is closed); in report mode spliced, annotated would_deny. A connection spliced on an
    allowed name is annotated egress_tls=spliced: squid writes an access line for the peeked CONNECT and another for
    the tunnel it becomes (its own http_access pass), so that first line is not written and each tunnel has one line
    as without the check; a refused or would-deny one has the first line alone, with its decision."""
    gated = [gate] if gate else []
    spliced = "splice " + " ".join((gated or ["all"]) + ["egress_tls_mark_spliced"])
    if not policy["tls_sni_check"]:
        return [spliced]
    report = policy["mode"] == REPORT
    prefix = policy["acl_prefix"]

    def refuse(acls, rule):
        if report:
            return " ".join(["splice"] + gated + acls + mark(WOULD_DENY, rule))
        return " ".join(["terminate"] + gated + acls + mark(DENY, rule))

    rules = [refuse(["!egress_sni_given"], "tls_sni_missing")]
    if policy["denied_domains"]:
        rules.append(refuse([prefix + "denied_sni"], "tls_sni_denied"))
    if not policy["allowed_domains"]:
        return rules + [spliced]
    return rules + ["splice " + " ".join(gated + [prefix + "allowed_sni", "egress_tls_mark_spliced"]),
                    refuse([] if gate else ["all"], "tls_sni_not_allowed")]


def _destination_rules(policy, gate, mark):
    """The http_access rules of one policy (_destination_policy's acls, named with its ``acl_prefix``) as (action,
    acls, comment): its denials, then its allowlist. ``gate`` the acl of the requests it decides (a profile's note),
    or None (the default policy, last, decides every request that got this far). ``mark`` names the annotation of a
    decision. In report mode a rule that would deny allows, annotated would_deny: the first one that matches is the
    rule enforcement would have refused with, and the request is forwarded; deny_internal refuses in either mode."""
    report = policy["mode"] == REPORT
    prefix = policy["acl_prefix"]
    gated = [gate] if gate else []

    def deny(acls, rule):
        if report:
            return (ALLOW, gated + acls + mark(WOULD_DENY, rule), None)
        return (DENY, gated + acls + mark(DENY, rule), None)

    rules = [deny([prefix + "denied_" + kind], "denied_destinations")
             for kind in ("domains", "networks") if policy["denied_" + kind]]
    if policy["internal_networks"]:
        # Refused in either mode: report mode rolls an allowlist out, it never opens the proxy's inside (the metadata
        # service, the hypervisor's networks) to a client, as smokescreen refuses private addresses in every mode.
        rules.append((DENY, gated + [prefix + "internal_destinations"] + mark(DENY, "deny_internal"), None))
    if not policy["allowed_domains"] and not policy["allowed_networks"]:
        comment = "No allowlist: every destination that nothing above refuses."
        return rules + [(ALLOW, (gated or ["all"]) + mark(ALLOW, "no_allowlist"), comment)]
    if policy["allowed_domains"]:
        rules.append((ALLOW, gated + [prefix + "allowed_domains"] + mark(ALLOW, "allowed_destinations"), None))
    if policy["allowed_networks"]:
        unlisted = ["!" + prefix + "unlisted_networks"] if policy["unlisted_networks"] else []
        rules.append((ALLOW, gated + [prefix + "allowed_networks"] + unlisted + mark(ALLOW, "allowed_destinations"), None))
    return rules + [deny([] if gate else ["all"], "not_allowed")]


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
