# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Values checked as text before they are parsed, for the files other programs read (squid.conf, cloud-config, XML).

Python's parsers are generous: ``int()`` takes any Unicode digit (``int('٨٠')``
is 80) while ``str.isdigit()`` also says yes to ``'²'``, which ``int()``
refuses; ``ipaddress`` takes an IPv6 scope id of any characters after ``%``,
line feeds included, and ``str()`` of the result gives them back. So a value
is first checked as text (ASCII digits, no control characters, no blanks),
then parsed, and written in its parsed, normalised form.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError

# 20 digits hold any 64-bit number; a longer run of digits is no count or size anyone means.
MAX_DECIMAL_DIGITS = 20
_ASCII_DECIMAL = re.compile(r"[0-9]{1,%d}" % MAX_DECIMAL_DIGITS)
# Control characters (C0, DEL, and C1, which holds U+0085 NEXT LINE) and the Unicode line and paragraph
# separators: each ends a line for some reader (squid, YAML, a shell) or makes the text binary.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# What an IP address or network is written with; the longest, an IPv4-mapped IPv6 network in full, has 49.
_IP_TEXT = re.compile(r"[0-9A-Fa-f:./]{1,49}")
# How much of a refused value a message quotes: enough to find it, never a whole document.
_QUOTE_CHARS = 60
# A URL's authority, which ends at its path, query or fragment (RFC 3986 3.2), and within a line. Its user
# information (user:password) runs to the authority's last "@", as urllib3 (requests) splits it.
_URL_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#\r\n]*)")
# What a URL's password is shown as, the mark Ansible masks a no_log value with.
HIDDEN = "********"
# Control characters no text file holds (tab, line feed and carriage return are text).
_BINARY = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Each file the collection writes into a guest (a seed's, a policy's) at most 1 MiB: cloud-config, scripts, network
# configuration and policy files are text of a few KiB, the whole seed then stays far below what _seed reads back to
# compare (16 MiB), and a payload larger than this belongs in the image or behind an #include URL.
MAX_FILE_BYTES = 1024 * 1024
_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")


def ascii_decimal(text):
    """The int that ``text`` writes in 1-20 ASCII digits (nothing else: no sign, blank or other script), else None."""
    if not isinstance(text, str) or not _ASCII_DECIMAL.fullmatch(text):
        return None
    return int(text)


def control_character(text):
    """The first control character or line separator in ``text`` as ``U+000A at offset 3``, or None when it has none."""
    found = _CONTROL.search(text)
    if found is None:
        return None
    return "U+%04X at offset %d" % (ord(found.group()), found.start())


def _url_password(authority):
    """The password in a URL's authority (``user:password@host``), None when it has none; and the authority split at it."""
    userinfo, at, host = authority.rpartition("@")
    user, colon, password = userinfo.partition(":")
    return (password or None), user + colon, at + host


def url_passwords(text):
    """The passwords written into the URLs in ``text`` (``https://user:password@host/...``), as they are written."""
    passwords = (_url_password(match.group(1))[0] for match in _URL_AUTHORITY.finditer(text))
    return [password for password in passwords if password is not None]


def without_url_passwords(text):
    """``text`` with the password of each URL in it shown as ********: ``https://user:********@host/...``."""
    def hide(match):
        password, before, after = _url_password(match.group(1))
        if password is None:
            return match.group()
        return match.group()[:match.start(1) - match.start()] + before + HIDDEN + after
    return _URL_AUTHORITY.sub(hide, text)


def quoted(value):
    """``value`` for a message: its repr (control characters escaped, URL passwords hidden), cut after 60 characters.

    A password is hidden before the repr escapes or the cut shortens it, where Ansible could no longer find it. A
    whole number of more than MAX_DECIMAL_DIGITS digits is described, not written: Python refuses to write one of
    more than 4300 digits (ValueError), which a value such as "9" * 5000 becomes once an argument spec makes it an int.
    """
    if isinstance(value, int) and abs(value) >= 10 ** MAX_DECIMAL_DIGITS:
        return "a number of more than %d digits" % MAX_DECIMAL_DIGITS
    shown = repr(without_url_passwords(value) if isinstance(value, str) else value)
    return shown if len(shown) <= _QUOTE_CHARS else shown[:_QUOTE_CHARS] + "..."


def _parsed_ip(text, parse):
    """``parse(text)`` when ``text`` is written with an address's characters only (no scope id, no blank), else None."""
    if not isinstance(text, str) or not _IP_TEXT.fullmatch(text):
        return None
    try:
        return parse(text)
    except ValueError:
        return None


def ip_address(text):
    """``text`` as an IPv4Address or IPv6Address when it is one in plain ASCII (no scope id), else None."""
    return _parsed_ip(text, ipaddress.ip_address)


def ip_network(text):
    """``text`` as an IPv4Network or IPv6Network (no host bits, no scope id, plain ASCII), else None."""
    return _parsed_ip(text, lambda network: ipaddress.ip_network(network, strict=True))


def ipv4_interface(text):
    """``text`` as an IPv4Interface when it is an IPv4 address with its prefix length (198.18.11.50/24), else None."""
    return _parsed_ip(text, ipaddress.IPv4Interface) if "/" in str(text) else None


def ipv4_address(text):
    """``text`` as an IPv4Address when it is one in plain ASCII, else None."""
    return _parsed_ip(text, ipaddress.IPv4Address)


def ipv6_interface(text):
    """``text`` as an IPv6Interface when it is an IPv6 address with its prefix length (2001:db8:11::50/64) in plain
    ASCII (no scope id), else None."""
    return _parsed_ip(text, ipaddress.IPv6Interface) if "/" in str(text) else None


def ipv6_address(text):
    """``text`` as an IPv6Address when it is one in plain ASCII (no scope id), else None."""
    return _parsed_ip(text, ipaddress.IPv6Address)


def normalize_mac(mac):
    """Return ``mac`` in lowercase colon form when it is a unicast MAC address, else raise ValidationError."""
    if not isinstance(mac, str) or not _MAC.fullmatch(mac):
        raise ValidationError("MAC address %s is not valid: use six hex pairs separated by ':', e.g. 52:54:00:12:34:56" % (quoted(mac),))
    mac = mac.lower()
    if int(mac[:2], 16) & 1:
        raise ValidationError("MAC address %r is a multicast address; a NIC needs a unicast one (even first octet)" % (mac,))
    if mac == "00:00:00:00:00:00":
        raise ValidationError("MAC address %r is all zeros; a NIC needs a real address" % (mac,))
    return mac


def text_bytes(value, what):
    """``value`` (text, or bytes that are UTF-8 text) as the bytes of a file for a guest; the messages never quote it.

    The options often hold secrets, so a refusal says where (``what``), never what.
    """
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValidationError("%s is not UTF-8 text (the byte at offset %d cannot be decoded): give text, "
                                  "encoded as UTF-8" % (what, exc.start)) from exc
    if not isinstance(value, str):
        raise ValidationError("%s must be a string, got %s" % (what, type(value).__name__))
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        # Ansible reads a file that is not UTF-8 into text with its bytes as lone surrogates.
        raise ValidationError("%s is not UTF-8 text (the character at offset %d is not a character UTF-8 can "
                              "encode, as when a file in another encoding or a binary file is read): give text, "
                              "encoded as UTF-8" % (what, exc.start)) from exc
    binary = _BINARY.search(value)
    if binary is not None:
        raise ValidationError("%s holds binary data (the control character U+%04X at offset %d): a seed file must "
                              "be text" % (what, ord(binary.group()), binary.start()))
    return within_file_limit(data, what)


def within_file_limit(data, what):
    """``data`` (bytes) when a file for a guest may hold them (MAX_FILE_BYTES), else ValidationError naming ``what``."""
    if len(data) > MAX_FILE_BYTES:
        raise ValidationError("%s is %d bytes, more than the %d bytes (1 MiB) a seed file may hold: keep large "
                              "content in the image, or let cloud-init fetch it (#include URL)"
                              % (what, len(data), MAX_FILE_BYTES))
    return data
