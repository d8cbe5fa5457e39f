# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The egress addresses a pool gave a proxy's profiles (``policy.pooled_addresses``), by profile name.

The egress_proxy role gives a profile that asks for one (``egress_address: pool``) an address of the outside pool,
allocated once for the whole play. Its next run must find which addresses the proxy holds, across replacements too, so
the policy names them and the domain's metadata records them beside the policy's digest (``pooledAddresses``, as
canonical JSON), as it records an HA group (_common.ha_group): kvm_proxy_info reports them, and the allocation keeps
them and gives them to no other proxy. Being part of the policy they are covered by its digest, and a policy without
them keeps the digest, and the domain the metadata, it had before.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from dataclasses import dataclass

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.ha_group import address_text
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.recorded import RecordedAsJson
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import quoted

# A profile's name as the egress_proxy role takes it: a word of squid.conf and part of its acls' names.
PROFILE_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")
# A profile's egress address keys, each with its address family.
EGRESS_FIELDS = (("egress_address", 4), ("egress_address6", 6))
_FIELD_NAMES = tuple(field for field, _version in EGRESS_FIELDS)


@dataclass(frozen=True)
class PooledAddresses(RecordedAsJson):
    """The pooled egress addresses of a proxy's profiles: ``entries`` ((profile, ((field, address), ...)), ...), sorted
    by profile and field, each address normalised and without prefix length."""

    entries: tuple

    @classmethod
    def from_params(cls, params, label="policy.pooled_addresses"):
        """``params`` ({profile: {"egress_address": IPv4, "egress_address6": IPv6}}, or None or {}: none) checked;
        None when it names no address, ValidationError naming the entry at fault."""
        if not params:
            return None
        if not isinstance(params, dict):
            raise ValidationError("%s must be a dictionary of profile names, each with egress_address, "
                                  "egress_address6 or both" % label)
        entries = []
        for profile in sorted(params, key=str):
            where = "%s[%s]" % (label, quoted(profile))
            if not isinstance(profile, str) or not PROFILE_NAME.fullmatch(profile):
                raise ValidationError("%s: the key is not a profile's name (1-32 lowercase letters, digits and -, "
                                      "starting with a letter)" % where)
            addresses = params[profile]
            if not isinstance(addresses, dict) or not addresses or any(key not in _FIELD_NAMES for key in addresses):
                raise ValidationError("%s %s must be a dictionary of egress_address, egress_address6 or both" % (
                    where, quoted(addresses)))
            fields = []
            for field, version in EGRESS_FIELDS:
                if field not in addresses:
                    continue
                address = address_text(addresses[field], version)
                if address is None:
                    raise ValidationError("%s.%s %s is not an IPv%d address (no prefix length, no %%scope, no blank)"
                                          % (where, field, quoted(addresses[field]), version))
                fields.append((field, str(address)))
            entries.append((profile, tuple(fields)))
        return cls(tuple(entries))

    def as_dict(self):
        return {profile: dict(fields) for profile, fields in self.entries}
