# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One cloud image as a task names it: its cache name, where it comes from, how to verify it, its disk format."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from dataclasses import dataclass
from typing import Optional
from urllib.parse import unquote, urlsplit

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import (
    DEFAULT_DISK_FORMAT,
    validate_disk_format,
    validate_image_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import ascii_decimal, control_character, quoted

# The largest disk a VM may have, in GiB: kvm_proxy's disk_size_gb is at most this. An image whose
# virtual size is larger fits no VM, so kvm_base_image refuses it from its header by default.
MAX_DISK_SIZE_GB = 64 * 1024
SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
_NOT_HEX = re.compile(r"[^0-9a-fA-F]")
# Hex digits of the digests a mirror may publish, to say which one a checksum of the wrong length is.
DIGEST_HEX_DIGITS = {"md5": 32, "sha1": 40, "sha224": 56, "sha256": 64, "sha384": 96, "sha512": 128}
CHECKSUM_FORMS = "use sha256:<64 hex digits> or sha256:<http(s) URL of a SHA256SUMS file>"


def check_http_url(url, what):
    """``url`` when it is an http(s) URL with a host; a ValidationError naming ``what`` otherwise."""
    if not isinstance(url, str):
        raise ValidationError("%s %s is not an http(s) URL" % (what, quoted(url)))
    # urlsplit drops tabs and line feeds where requests would send them, and
    # the URL is quoted in actions and messages: none of either, nor blanks.
    control = control_character(url) or (None if " " not in url else "a blank at offset %d" % url.index(" "))
    if control is not None:
        raise ValidationError("%s %s has %s; write it percent-encoded (%%20 for a blank)" % (what, quoted(url), control))
    try:
        parts = urlsplit(url)
        port = parts.port  # raises for a port that is not a number
    except ValueError as error:
        raise ValidationError("%s %s is not a URL: %s" % (what, quoted(url), error)) from error
    # int() reads other scripts' digits, which no HTTP client sends as a port.
    if port is not None and ascii_decimal(parts.netloc.rpartition(":")[2]) is None:
        raise ValidationError("%s %s has a port that is not written in ASCII digits" % (what, quoted(url)))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError("%s %s is not an http(s) URL: only http:// and https:// are supported" % (what, quoted(url)))
    return url


def check_checksum(checksum):
    """A ValidationError saying what is wrong with ``checksum`` (not None), unless it is one of CHECKSUM_FORMS.

    A value with a "/" is a URL; anything else is a digest, and is told apart
    from a URL: its length, or its first character that is not a hex digit.
    """
    if not isinstance(checksum, str):
        raise ValidationError("checksum %s is not supported: %s" % (quoted(checksum), CHECKSUM_FORMS))
    algorithm, _sep, value = checksum.partition(":")
    if algorithm.lower() != "sha256" or not value:
        if algorithm.lower() in DIGEST_HEX_DIGITS:
            raise ValidationError("checksum %s is not supported: it is %s, and only sha256 is; %s (sha256sum prints "
                                  "the digest of a file)" % (quoted(checksum), algorithm.lower(), CHECKSUM_FORMS))
        raise ValidationError("checksum %s is not supported: %s" % (quoted(checksum), CHECKSUM_FORMS))
    if "/" in value:
        check_http_url(value, "checksum file URL")
        return
    bad = _NOT_HEX.search(value)
    if bad is not None:
        raise ValidationError("checksum %s: the sha256 digest has %s at offset %d, which is not a hex digit (0-9, a-f); "
                              "%s" % (quoted(checksum), quoted(bad.group()), bad.start(), CHECKSUM_FORMS))
    if len(value) != DIGEST_HEX_DIGITS["sha256"]:
        other = [name for name, digits in DIGEST_HEX_DIGITS.items() if digits == len(value)]
        raise ValidationError("checksum %s: the sha256 digest has %d of 64 hex digits%s; %s" % (
            quoted(checksum), len(value), " (as many as a %s digest)" % other[0] if other else "", CHECKSUM_FORMS))


@dataclass(frozen=True)
class ImageSpec:
    """One cloud image: its cache name, where it comes from, how to verify it, its disk format.

    ``checksum`` is ``sha256:<64 hex>`` (pinned) or ``sha256:<http(s) URL of a
    SHA256SUMS file>`` (the entry for the image URL's file name is used), or
    None. ``url`` may be None only for removal.
    """

    name: str
    url: Optional[str] = None
    checksum: Optional[str] = None
    format: str = DEFAULT_DISK_FORMAT

    def __post_init__(self):
        validate_image_name(self.name)
        validate_disk_format(self.format)
        if self.url is not None:
            check_http_url(self.url, "url")
        if self.checksum is not None:
            check_checksum(self.checksum)
            if self.checksum_url is not None and self.url is None:
                raise ValidationError("checksum %s names a SHA256SUMS file; url is needed to find the image's entry "
                                      "in it" % (quoted(self.checksum),))

    @property
    def pinned_sha256(self):
        """The digest given inline (lowercase), or None."""
        value = self._checksum_value()
        return value.lower() if value is not None and SHA256_HEX.fullmatch(value) else None

    @property
    def checksum_url(self):
        """The URL of the SHA256SUMS file the digest comes from, or None."""
        value = self._checksum_value()
        return value if value is not None and not SHA256_HEX.fullmatch(value) else None

    @property
    def file_name(self):
        """The image's file name as it appears in a SHA256SUMS file."""
        return unquote(urlsplit(self.url).path.rsplit("/", 1)[-1])

    def _checksum_value(self):
        return None if self.checksum is None else self.checksum.partition(":")[2]

    def require_url(self):
        if self.url is None:
            raise ValidationError("image %s needs a url to be cached" % (quoted(self.name),))
