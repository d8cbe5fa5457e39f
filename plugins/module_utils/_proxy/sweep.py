# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_proxy_set's garbage collection: which domains of a hypervisor's listing the set removes, with the reference's rules.

A managed domain recorded with this set's owner, not in the set, created
longer ago than the grace period, is removed with its overlay and seed.
Unmanaged domains and other owners' are never touched and are reported as
foreign. A domain that cannot be read is spared, and the sweep goes on. A
createdAt further in the future than clock skew explains is corrupt and
protects nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
from dataclasses import dataclass, field

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import CLOCK_SKEW_TOLERANCE
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import ProxyRequest


@dataclass
class Sweep:
    """The garbage collection's findings: removal requests, and the domains it leaves with why (result keys)."""

    removals: list = field(default_factory=list)  # ProxyRequest with state absent
    foreign: list = field(default_factory=list)
    spared: list = field(default_factory=list)
    warnings: list = field(default_factory=list)


def sweep(request, listed, now):
    """What garbage collection does with ``listed`` (the set's _proxy.observe.Listing) for the set ``request`` at ``now``."""
    desired = {proxy.name for proxy in request.proxies}
    grace = datetime.timedelta(seconds=request.gc_grace_period)
    found = Sweep()
    for name in sorted(listed.handles):  # by name, so reports keep one order
        if name in desired:
            continue
        try:
            metadata = listed.info(name, "domain XML").metadata
        except KvmError as error:
            found.spared.append({"name": name, "reason": error.message})  # one bad domain never wedges the sweep
            continue
        if metadata is None or not metadata.managed or metadata.uid != request.uid:
            found.foreign.append({"name": name, "uid": metadata.uid if metadata is not None else None,
                                  "managed": bool(metadata is not None and metadata.managed)})
        elif now - metadata.created_at_as_of(now) >= grace:
            found.removals.append(ProxyRequest(name=name, state=STATE_ABSENT, uid=request.uid, pool=request.pool,
                                               shutdown_timeout=request.shutdown_timeout))
            if metadata.created_at > now:
                found.warnings.append("domain '%s' records %s: more than clock skew explains, so it reads as corrupt "
                                      "and did not protect the domain from garbage collection" % (name, _ahead(metadata, now)))
        else:
            reason = "created less than gc_grace_period (%d s) ago" % request.gc_grace_period
            if metadata.created_at > now:
                reason += " (%s: within clock skew, it counts as now)" % _ahead(metadata, now)
            found.spared.append({"name": name, "reason": reason})
    return found


def _ahead(metadata, now):
    """What a createdAt after ``now`` says, for a message."""
    return "createdAt %s, %d s ahead of this host's clock (clock skew up to %d s is allowed)" % (
        metadata.created_at_raw, (metadata.created_at - now).total_seconds(), CLOCK_SKEW_TOLERANCE.total_seconds())
