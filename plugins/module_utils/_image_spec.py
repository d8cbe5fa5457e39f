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

from ansible_collections.egress_proxies.kvm.plugins.module_utils._errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._names import validate_disk_format, validate_image_name

SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


def check_http_url(url, what):
    """``url`` when it is an http(s) URL with a host; a ValidationError naming ``what`` otherwise."""
    if not isinstance(url, str):
        raise ValidationError("%s %r is not an http(s) URL" % (what, url))
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError("%s %r is not an http(s) URL: only http:// and https:// are supported" % (what, url))
    return url


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
    format: str = "qcow2"

    def __post_init__(self):
        validate_image_name(self.name)
        validate_disk_format(self.format)
        if self.url is not None:
            check_http_url(self.url, "url")
        if self.checksum is not None:
            algorithm, _sep, value = self.checksum.partition(":") if isinstance(self.checksum, str) else ("", "", "")
            if algorithm.lower() != "sha256" or not value:
                raise ValidationError(
                    "checksum %r is not supported: use sha256:<64 hex digits> or sha256:<http(s) URL of a "
                    "SHA256SUMS file>" % (self.checksum,))
            if not SHA256_HEX.fullmatch(value):
                check_http_url(value, "checksum file URL")
                if self.url is None:
                    raise ValidationError("checksum %r names a SHA256SUMS file; url is needed to find the image's "
                                          "entry in it" % (self.checksum,))

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
            raise ValidationError("image %r needs a url to be cached" % (self.name,))
