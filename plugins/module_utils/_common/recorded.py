# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A value of a proxy's policy that the domain's metadata records beside the policy's digest, as canonical JSON."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError


class RecordedAsJson:
    """Read from and written to the metadata: ``from_params`` (the option checked, ValidationError otherwise) and
    ``as_dict`` are the class's own."""

    @classmethod
    def from_recorded(cls, text):
        """The value a domain's metadata records (its JSON text), or None: none recorded, or not what this collection
        writes (edited by hand), which says nothing."""
        if text is None:
            return None
        try:
            return cls.from_params(json.loads(text))
        except (ValueError, ValidationError):
            return None

    def recorded(self):
        """The JSON text the metadata records: sorted keys, no blanks; the same value, the same bytes."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
