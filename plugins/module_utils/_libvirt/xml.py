# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""lxml behind the optional-import guard, and the XML helpers every builder shares.

``LXML_REQUIREMENT`` is what the module wrapper and the inventory plugin check
before calling any builder or reader.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.imports import lazy_import
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import ascii_decimal

etree, LXML_REQUIREMENT = lazy_import("lxml.etree", "lxml", "python3-lxml on Debian/Ubuntu/RHEL, lxml from PyPI")


# libvirt's scaled integers (docs: "formatdomain.html#memory-allocation"):
# the single letters are powers of 1024, the *B forms powers of 1000.
_UNIT_FACTORS = {
    "b": 1, "bytes": 1,
    "k": 1024, "kib": 1024, "kb": 1000,
    "m": 1024 ** 2, "mib": 1024 ** 2, "mb": 1000 ** 2,
    "g": 1024 ** 3, "gib": 1024 ** 3, "gb": 1000 ** 3,
    "t": 1024 ** 4, "tib": 1024 ** 4, "tb": 1000 ** 4,
    "p": 1024 ** 5, "pib": 1024 ** 5, "pb": 1000 ** 5,
    "e": 1024 ** 6, "eib": 1024 ** 6, "eb": 1000 ** 6,
}


# XML 1.0 cannot carry control characters, surrogates or U+FFFE/U+FFFF.
_NOT_XML_TEXT = re.compile("[\x00-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def is_value_text(text):
    """True when ``text`` can be an element's text that child_text reads back exactly.

    Non-empty, XML-compatible, and without surrounding whitespace (which
    child_text strips, as pretty-printed XML from a hypervisor needs).
    """
    return isinstance(text, str) and bool(text) and text == text.strip() and not _NOT_XML_TEXT.search(text)


def parse_xml(text, what):
    """Parse ``text`` (str or bytes) into an element; ``what`` names it in errors.

    Entities are not resolved and nothing is fetched from the network: the
    text may come from a hypervisor we do not control.
    """
    if isinstance(text, str):
        # lxml refuses str input that carries an encoding declaration.
        text = text.encode("utf-8")
    parser = etree.XMLParser(resolve_entities=False, no_network=True, remove_comments=True)
    try:
        return etree.fromstring(text, parser)
    except etree.XMLSyntaxError as exc:
        raise PermanentError("%s is not well-formed XML: %s" % (what, exc)) from exc


def to_string(element):
    """Serialise ``element`` as a str without an XML declaration."""
    return etree.tostring(element, encoding="unicode")


def scaled_bytes(element, what):
    """Return the byte count of a libvirt scaled integer element (``unit`` attribute, bytes when absent)."""
    text = (element.text or "").strip()
    unit = element.get("unit", "bytes")
    factor = _UNIT_FACTORS.get(unit.lower())
    count = ascii_decimal(text)
    if factor is None or count is None:
        raise PermanentError("%s has an unreadable size %r with unit %r" % (what, text, unit))
    return count * factor


def child_text(element, tag):
    """Stripped text of the first child ``tag`` of ``element``, or None when it is absent or empty."""
    child = element.find(tag)
    if child is None or child.text is None:
        return None
    return child.text.strip() or None
