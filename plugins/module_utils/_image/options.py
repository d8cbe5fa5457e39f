# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""How images are downloaded and waited for: the download options of every module that caches images, as one value.

Built once from a module's parameters and validated there, then passed
whole to the image cache (_image.cache, _image.removal, the proxy's image
source). It imports no HTTP library, so a controller-side filter can
validate the same options::

    options = DownloadOptions.from_params(params)   # ValidationError for values that could never work
    options.require_ca_path()                        # on the module's host only: ca_path names a file there
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
from dataclasses import dataclass
from typing import Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.locks import DEFAULT_LOCK_TIMEOUT

DEFAULT_TIMEOUT = 60
DEFAULT_RETRIES = 3
DEFAULT_BACKOFF = 2.0


def download_argument_spec():
    """The download options of every module that caches images (docs: the image_download doc fragment)."""
    return dict(
        validate_certs=dict(type="bool", default=True),
        ca_path=dict(type="path"),
        timeout=dict(type="int", default=DEFAULT_TIMEOUT),
        retries=dict(type="int", default=DEFAULT_RETRIES),
        lock_timeout=dict(type="int", default=DEFAULT_LOCK_TIMEOUT),
    )


@dataclass(frozen=True)
class DownloadOptions:
    """The options of download_argument_spec, checked when built.

    ``timeout`` is each HTTP request's, ``retries`` how many more attempts a
    failure worth retrying gets (sleeping ``backoff`` seconds, doubling: not
    an option, tests make it 0), ``ca_path`` a CA bundle on the module's host
    trusted instead of the system's, ``lock_timeout`` how long to wait for
    another run's lock on the same volume.
    """

    timeout: int = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    validate_certs: bool = True
    ca_path: Optional[str] = None
    lock_timeout: int = DEFAULT_LOCK_TIMEOUT
    backoff: float = DEFAULT_BACKOFF

    def __post_init__(self):
        for option in ("timeout", "lock_timeout"):
            value = getattr(self, option)
            if value <= 0:
                raise ValidationError("%s must be a positive number of seconds, got %d" % (option, value))
        if self.retries < 0:
            raise ValidationError("retries must be 0 or more, got %d" % self.retries)

    @classmethod
    def from_params(cls, params):
        """The options of a module's parameters (an option left out or None takes its default)."""
        given = {option: params.get(option) for option in download_argument_spec()}
        return cls(**{option: value for option, value in given.items() if value is not None})

    def require_ca_path(self):
        """Refuse a ``ca_path`` that is not on this host: a download would fail on it, and a cached image hide it."""
        if self.ca_path is not None and not os.path.exists(self.ca_path):
            raise ValidationError("ca_path %s does not exist on the host that runs the module; give the path of a CA "
                                  "certificate bundle (PEM) there" % self.ca_path)
        return self


# What a caller that gives no options gets: each option's default.
DEFAULT_DOWNLOAD_OPTIONS = DownloadOptions()
