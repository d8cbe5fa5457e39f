# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What runs where: the listing shared by kvm_proxy_info and the kvm_proxies inventory plugin.

Each domain costs a small constant number of libvirt calls: its XML once
(which carries name, vcpus, memory, disks, NICs and our metadata element, so
the metadata is never fetched separately), its state, its autostart flag,
and one or two address lookups when it is running (each source asked once
for all of its NICs; an HA group's member asks its guest agent first, whether
or not ARP answers, to tell whether it holds the group's address). A domain that is left
out (no metadata of ours, another owner) costs only the XML read.

Partial views are handled as in the reference's ListByTag: a domain that
vanishes mid-listing or cannot be read is skipped with a warning, because
one bad domain must not hide all the others; a hypervisor that cannot be
reached fails the listing, so a cleanup built on it never acts on a
partial view of the fleet. The plugin reads its hypervisors concurrently
(read_each), each on a connection of its own, and reports them in the order
they are configured.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import (
    KvmError,
    NotFoundError,
    TransientError,
    ValidationError,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.ha_group import HaGroup
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import format_domain_id, validate_host_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.pooled_addresses import PooledAddresses
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.addresses import IPV4, ask_agent, nic_addresses
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import parse_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import format_rfc3339, recorded_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import is_active, libvirt_state_name, map_state
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.interfaces import (
    describe_interfaces,
    egress_address,
    recorded_egress_address,
    recorded_roles,
    recorded_wanted,
)

# Hypervisors the inventory plugin reads at once. A read waits mostly on the
# network (an SSH session, libvirt round trips), so threads overlap well; the
# bound keeps a large fleet from opening hundreds of SSH sessions at once.
MAX_PARALLEL_READS = 16


def read_each(read, items, max_parallel=MAX_PARALLEL_READS):
    """``[(result, error)]`` of ``read(item)`` for each item, in the order of ``items``, up to ``max_parallel`` at once.

    A KvmError is the item's ``error`` (its ``result`` None), so one unreachable
    hypervisor neither hides nor stops the others; anything else is a bug and
    is raised, after every read has finished.
    """
    def attempt(item):
        try:
            return read(item), None
        except KvmError as error:
            return None, error

    if len(items) <= 1:
        return [attempt(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(max_parallel, len(items)), thread_name_prefix="kvm-read") as pool:
        futures = [pool.submit(attempt, item) for item in items]
    # Leaving the block waited for every read, so a bug surfaces only once none is still running.
    return [future.result() for future in futures]


def resolve_host(hypervisor, host=None):
    """The hypervisor's name in ids: ``host`` when given (validated), else libvirt's host name."""
    if host is not None:
        return validate_host_name(host)
    return validate_host_name(hypervisor.hostname())


def _domain_id(host, name):
    # Domains made outside this collection may carry names the collection
    # would never create (uppercase, underscores); they get no id, since no
    # module of this collection could act on one.
    try:
        return format_domain_id(host, name)
    except ValidationError:
        return None


def _created_at(metadata):
    if metadata is None or metadata.created_at_raw is None:
        return None
    # A malformed timestamp, or one further in the future than clock skew explains, reads as the oldest possible time,
    # as it does for cleanup; one a little ahead reads as now. So an age computed from it is never negative.
    return format_rfc3339(metadata.created_at_as_of(datetime.datetime.now(datetime.timezone.utc)))


def inspect_domain(hypervisor, dom, host, domain_info=None, status=None, holder=True):
    """Build the entry of one domain.

    ``domain_info`` is the DomainInfo parsed from the domain's XML when the
    caller already read it (list_proxies does, to filter on the metadata);
    otherwise the XML is read here. ``status`` is its ``(state, autostart)``
    when the caller read those since the domain last changed (a proxy's flow
    did, observing it), else they are asked here. ``holder`` False leaves
    ``ha_holder`` None and asks a member's guest agent nothing more (a caller
    that does not report it). Raises the typed error of any failed
    libvirt call (NotFoundError when the domain vanished) and PermanentError
    for unreadable XML or metadata.
    """
    if domain_info is None:
        domain_info = parse_domain_xml(hypervisor.domain_xml(dom))
    metadata = domain_info.metadata
    state, autostart = status if status is not None else (hypervisor.domain_state(dom), hypervisor.domain_autostart(dom))
    macs = domain_info.macs()
    lookups = {}
    ip = ipv6 = None
    ip_sources = {}
    # The roles and static addresses are the ones the VM was created with (its recorded spec); a hand-made domain
    # has no roles, and its NICs are looked up for their IPv4.
    spec = recorded_spec(metadata)
    ha_group = HaGroup.from_recorded(metadata.ha_group_json) if metadata is not None else None
    pooled = PooledAddresses.from_recorded(metadata.pooled_addresses_json) if metadata is not None else None
    ha_holder = None
    if is_active(state):
        # A member's guest agent is asked once, up front: whether it holds its group's address, and the answer the
        # address lookup uses for the agent. A proxy in no group costs nothing more.
        answered = ask_agent(hypervisor, dom) if holder and ha_group is not None else None
        if answered is not None and answered[1] is None:
            ha_holder = ha_group.held_in(answered[0])
        # Every NIC's addresses from the same one or two lookups; `ip` stays the first NIC's (None: any NIC
        # of a domain defined without a MAC): its IPv4, or its IPv6 when it is IPv6-only.
        first = macs[0] if macs else None
        wanted = dict(zip(macs, recorded_wanted(spec, len(macs))))
        lookups = nic_addresses(hypervisor, dom, macs or [first], wanted, answered)
        ip = wanted.get(first, IPV4).address(lookups[first])
        ipv6 = lookups[first].ipv6
        ip_sources = dict(lookups[first].sources)
    interfaces = describe_interfaces(domain_info.nics, recorded_roles(spec, len(domain_info.nics)), lookups)
    return {
        "id": _domain_id(host, domain_info.name),
        "name": domain_info.name,
        "host": host,
        "state": map_state(state, ip),
        "libvirt_state": libvirt_state_name(state),
        "ip": ip,
        "ipv6": ipv6,
        "ip_sources": ip_sources,
        "managed": bool(metadata is not None and metadata.managed),
        "uid": metadata.uid if metadata is not None else None,
        "created_at": _created_at(metadata),
        "spec_digest": metadata.spec_digest if metadata is not None else None,
        "policy_digest": metadata.policy_digest if metadata is not None else None,
        "ha_group": ha_group.as_dict() if ha_group is not None else None,
        "ha_holder": ha_holder,
        "vcpus": domain_info.vcpus,
        "memory_mib": domain_info.memory_mib,
        "disks": [
            {"device": disk.device, "target": disk.target, "pool": disk.pool, "volume": disk.volume, "path": disk.path}
            for disk in domain_info.disks
        ],
        "macs": macs,
        "interfaces": interfaces,
        "egress_ip": egress_address(interfaces),
        "egress_ipv6": egress_address(interfaces, "ipv6"),
        "egress_address": recorded_egress_address(spec),
        "egress_address6": recorded_egress_address(spec, "address6"),
        "pooled_addresses": pooled.as_dict() if pooled is not None else {},
        "autostart": autostart,
    }


def _wanted(metadata, uid, include_unmanaged):
    managed = metadata is not None and metadata.managed
    if uid is not None:
        return managed and metadata.uid == uid
    return managed or include_unmanaged


def get_proxy(hypervisor, host, name, uid=None):
    """The entry of domain ``name``, or None when there is no such domain (or it is not owned by ``uid``).

    Unlike list_proxies, a domain asked for by name is returned whether or
    not this collection manages it (``managed`` tells), and any failure to
    read it fails: the caller asked about this one domain.
    """
    try:
        dom = hypervisor.lookup_domain(name)
        domain_info = parse_domain_xml(hypervisor.domain_xml(dom))
        if not _wanted(domain_info.metadata, uid, include_unmanaged=True):
            return None
        return inspect_domain(hypervisor, dom, host, domain_info)
    except NotFoundError:
        # Absent, or deleted between the lookup and the reads.
        return None


def list_proxies(hypervisor, host, uid=None, include_unmanaged=False):
    """Entries of the domains carrying this collection's metadata, sorted by name, and warnings.

    ``uid`` keeps only the domains of that owner (unmanaged domains have
    none); ``include_unmanaged`` adds every other domain, marked
    ``managed: false``. Returns ``(entries, warnings)``: a domain that
    vanished or could not be read is left out and explained in a warning.
    Raises the typed error when the hypervisor cannot be listed, or stops
    answering while its domains are read.
    """
    entries = []
    warnings = []
    for dom in hypervisor.list_domains():
        name = hypervisor.domain_name(dom)
        try:
            domain_info = parse_domain_xml(hypervisor.domain_xml(dom))
            if not _wanted(domain_info.metadata, uid, include_unmanaged):
                # Decided on the XML alone: other domains cost no further call.
                continue
            entry = inspect_domain(hypervisor, dom, host, domain_info)
        except NotFoundError as error:
            warnings.append("skipped domain '%s' on %s: it disappeared while it was being read (%s)" % (name, host, error.message))
            continue
        except KvmError as error:
            warnings.append("skipped domain '%s' on %s: it could not be read: %s" % (name, host, error.message))
            _ensure_answering(hypervisor, host, name, error)
            continue
        entries.append(entry)
    entries.sort(key=lambda entry: entry["name"])
    return entries, warnings


def _ensure_answering(hypervisor, host, name, domain_error):
    """Raise when the failure on one domain was really the connection dying.

    A broken connection fails every later call too; without this check the
    remaining domains would each be "skipped" and the listing would look
    complete but empty, the partial view a cleanup must never act on.
    """
    try:
        hypervisor.hostname()
    except KvmError as error:
        raise TransientError(
            "hypervisor %s stopped answering while domain '%s' was being read (%s); %s"
            % (host, name, domain_error.message, error.message),
            code=error.code,
            libvirt_message=error.libvirt_message,
        ) from error
