# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a proxy's plan reads from the hypervisor: read-only queries, each answered in a frozen value, and the Observation.

Nothing here changes the hypervisor. The image cache's and the seed's own
check-mode answers are read-only too, so the planner (_proxy.plan) sees
exactly what a real run would act on. ``observe_proxy`` reads the domain,
takes the verdict on it (_proxy.verdict), and reads what that verdict needs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import (
    VIR_ERR_NO_SUPPORT,
    KvmError,
    NotFoundError,
    PermanentError,
    ValidationError,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import overlay_volume_name, seed_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.pooled_addresses import PooledAddresses
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.agent import GuestAgent
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.policy import read_policy
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.cache import ensure_image
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import parse_domain_element
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import recorded_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import (
    VIR_DOMAIN_BLOCKED,
    VIR_DOMAIN_RUNNING,
    is_active,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.storage import (
    find_pool,
    find_volume,
    require_pool,
    volume_info,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.xml import parse_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.interfaces import recorded_egress_address
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import (
    ON_UNREACHABLE_AGENT_REPLACE,
    STATE_STOPPED,
    spec_digest,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.verdict import (
    CLEAN,
    CREATE,
    KEEP,
    REMOVE,
    REPLACE,
    assess,
    disks_matter,
    left_as_it_was,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.seed import ensure_seed


@dataclass(frozen=True)
class DomainObservation:
    """The domain of the task's name as it was found."""

    handle: Any
    info: Any  # _domain_xml.DomainInfo
    spec: Optional[dict]  # the spec recorded in its metadata
    state: int
    autostart: bool

    @property
    def metadata(self):
        return self.info.metadata

    @property
    def managed(self):
        return self.metadata is not None and self.metadata.managed


@dataclass(frozen=True)
class OwnVolume:
    """The VM's overlay or seed, found by its name in a pool."""

    pool: str
    name: str
    handle: Any


@dataclass(frozen=True)
class BaseImage:
    """The base the overlay backs onto. path is None until a fetch puts it in the pool."""

    volume: str
    path: Optional[str]
    format: str
    size: Optional[int]


@dataclass(frozen=True)
class BuildObservation:
    """What building the VM in the requested pool needs to know."""

    pool: Any
    base: BaseImage
    fetch: bool  # the base image is not cached yet
    overlay: Optional[Any]  # (handle, VolumeInfo) of a volume with the overlay's name, or None
    seed_current: bool  # a seed volume with exactly the request's files exists


class Listing:
    """A set's one listing of the hypervisor's domains: ``handles`` ({name: handle}), each domain's XML read once.

    Garbage collection (_proxy.sweep) reads an unlisted domain's XML to decide
    on it; observing the removal it decides on takes that reading from here.
    """

    def __init__(self, hypervisor):
        self.hv = hypervisor
        self.handles = {hypervisor.domain_name(dom): dom for dom in hypervisor.list_domains()}
        self._infos = {}

    def info(self, name, what):
        """The DomainInfo of domain ``name``; ``what`` names its XML in the error of one that cannot be read (not kept)."""
        if name not in self._infos:
            self._infos[name] = parse_domain_element(parse_xml(self.hv.domain_xml(self.handles[name]), what))
        return self._infos[name]


def observe_domain(hypervisor, name, listed=None):
    """The domain called ``name``, or None: found in ``listed`` (a set's one Listing), else looked up by name."""
    what = "the XML of domain '%s'" % name
    if listed is not None:
        dom = listed.handles.get(name)
        if dom is None:
            return None
        info = listed.info(name, what)
    else:
        try:
            dom = hypervisor.lookup_domain(name)
        except NotFoundError:
            return None
        info = parse_domain_element(parse_xml(hypervisor.domain_xml(dom), what))
    return DomainObservation(handle=dom, info=info, spec=recorded_spec(info.metadata),
                             state=hypervisor.domain_state(dom), autostart=hypervisor.domain_autostart(dom))


def missing_disks(hypervisor, domain):
    """(pool, volume) of the domain's pool-backed disks that are gone: a VM without them cannot start again."""
    missing = []
    pools = {}
    for pool_name, volume in domain.info.volumes():
        if pool_name not in pools:
            pools[pool_name] = find_pool(hypervisor, pool_name)
        if pools[pool_name] is None or find_volume(hypervisor, pools[pool_name], volume) is None:
            missing.append((pool_name, volume))
    return tuple(missing)


def own_volumes(hypervisor, request, domain):
    """The VM's overlay and seed, by name, in the pools its disks name and then the requested one.

    Only these names are ever deleted, so never a base image. A run that died
    between creating volumes and defining the domain leaves them behind; they
    are found the same way.
    """
    pool_names = []
    names = (overlay_volume_name(request.name), seed_volume_name(request.name))
    for pool_name, volume in domain.info.volumes() if domain is not None else ():
        if volume in names and pool_name not in pool_names:
            pool_names.append(pool_name)
    if request.pool not in pool_names:
        pool_names.append(request.pool)
    found = []
    for pool_name in pool_names:
        pool = find_pool(hypervisor, pool_name)
        if pool is None:
            continue  # a pool that is gone holds nothing left to clean
        for name in names:
            vol = find_volume(hypervisor, pool, name)
            if vol is not None:
                found.append(OwnVolume(pool_name, name, vol))
    return tuple(found)


def require_nics(hypervisor, request):
    """Every NIC's bridge or network must exist: a missing one fails at start, after define, and no retry helps.

    All of them are looked up before anything is touched, and the message names the option of each missing one.
    """
    missing = []
    for index, interface in enumerate(request.interfaces):
        option = "interfaces[%d]" % index if request.bridge is None and request.network is None else None
        try:
            if interface.bridge is not None:
                hypervisor.lookup_interface(interface.bridge)
            else:
                hypervisor.lookup_network(interface.network)
        except NotFoundError as error:
            if interface.bridge is not None:
                what = ("bridge '%s' (option %s) is not an interface of the hypervisor; create it or name an existing "
                        "bridge" % (interface.bridge, option or "bridge"))
            else:
                what = ("libvirt network '%s' (option %s) is not defined on the hypervisor; define it (virsh "
                        "net-define) or name an existing one" % (interface.network, option or "network"))
            missing.append((what, error))
        except PermanentError as error:
            # A connection without libvirt's interface driver cannot tell; start will.
            if not error.has_code(VIR_ERR_NO_SUPPORT):
                raise
    if missing:
        error = missing[0][1]
        raise PermanentError("%s. Nothing was changed" % "; ".join(what for what, _error in missing), error.code,
                             error.libvirt_message) from error


class SharedImages:
    """The image cache's answers shared by the proxies of one set: each image is checked, and fetched, once per run.

    Asked per proxy, the check cost a SHA256SUMS request and a read of the
    base's marker each time. The lock also makes concurrent creates wait for
    the one fetch instead of starting their own. An image a set made ready
    up front (``made_ready``) is ready for each proxy's check: in check mode
    too, so that the proxies' plans are the real run's.
    """

    def __init__(self):
        self._answers = {}
        self._ready = {}
        self._lock = threading.Lock()

    def answer(self, key, ask):
        with self._lock:
            if key not in self._answers:
                self._answers[key] = ask()
            return self._answers[key]

    def made_ready(self, image, result):
        """Record that ``image`` ((pool, ImageSpec, DownloadOptions)) was made ready, as ``result`` (an ImageResult) says."""
        with self._lock:
            self._ready[image] = result.ready()

    def ready(self, image):
        """The ImageResult of ``image`` once made ready, or None when the set did not make it ready."""
        with self._lock:
            return self._ready.get(image)


@dataclass(frozen=True)
class ImageSource:
    """The image cache as a proxy uses it: the same options for the check-mode answer and the fetch.

    ``shared`` (a SharedImages) answers for every proxy of a set that asks for the same image with the same options.
    """

    hv: Any
    request: Any  # _proxy.request.ProxyRequest
    http: Any = None
    lock_dir: Optional[str] = None
    shared: SharedImages = field(default_factory=SharedImages)

    @property
    def image(self):
        """The image this proxy builds from, as SharedImages keys it: (pool, ImageSpec, DownloadOptions)."""
        return (self.request.pool, self.request.image, self.request.download)

    def ensure(self, check_mode):
        request = self.request
        ready = self.shared.ready(self.image) if check_mode else None
        if ready is not None:
            return ready
        # Planning checks the disk size itself, naming disk_size_gb; the fetch
        # refuses an image that changed since to a larger one before writing it.
        max_virtual_size = None if check_mode else request.disk_bytes

        def ask():
            return ensure_image(self.hv, request.pool, request.image, request.download, check_mode=check_mode,
                                http=self.http, lock_dir=self.lock_dir, max_virtual_size=max_virtual_size)

        return self.shared.answer((request.pool, request.image, request.download, check_mode, max_virtual_size), ask)


def observe_build(hypervisor, request, images, image_probe, deleted):
    """Pool, NIC, base image, overlay and seed for building the VM; raises when the request cannot be built.

    The cheap checks come first. ``images`` is the ImageSource; ``image_probe``
    its check-mode answer when already asked. ``deleted`` names the VM's
    volumes in the requested pool that a replacement deletes first: those are
    created anew, so they are not read.
    """
    pool = require_pool(hypervisor, request.pool)
    require_nics(hypervisor, request)
    if request.image is not None and image_probe is None:
        image_probe = images.ensure(check_mode=True)
    if image_probe is not None:
        base = BaseImage(image_probe.volume, image_probe.path, image_probe.format, image_probe.size)
        fetch = image_probe.changed
    else:
        vol = find_volume(hypervisor, pool, request.base_volume)
        if vol is None:
            raise PermanentError(
                "base volume '%s' is not in storage pool '%s'; cache it first (egress_proxies.kvm.kvm_base_image) or give "
                "image instead of base_volume" % (request.base_volume, request.pool))
        info = volume_info(hypervisor, vol)
        base = BaseImage(request.base_volume, info.path, info.disk_format or "raw", info.capacity_bytes)
        fetch = False
    overlay_name = overlay_volume_name(request.name)
    overlay = None if overlay_name in deleted else find_volume(hypervisor, pool, overlay_name)
    seed_current = seed_volume_name(request.name) not in deleted and not ensure_seed(
        hypervisor, request.pool, request.name, request.seed_files(), check_mode=True).changed
    return BuildObservation(pool=pool, base=base, fetch=fetch,
                            overlay=None if overlay is None else (overlay, volume_info(hypervisor, overlay)),
                            seed_current=seed_current)


@dataclass(frozen=True)
class Observation:
    """Everything the planner reads, gathered by observe_proxy."""

    verdict: Any  # _proxy.verdict.Verdict, with the missing disks counted
    domain: Any = None  # DomainObservation or None
    spec: Optional[dict] = None  # the request's spec (None for state absent)
    digest: Optional[str] = None
    own_volumes: tuple = ()  # OwnVolume found by name, for removal
    missing_disks: tuple = ()  # (pool, volume) of the domain's disks that are gone
    build: Any = None  # BuildObservation when the VM is built
    seed_stale: bool = False  # a kept, stopped VM's seed does not hold exactly its files (truncated, overwritten)
    base_unverified: bool = False  # a kept VM's base has a missing or wrong marker (the image cache hashes it again)
    guest_policy: Any = None  # _guest.policy.GuestPolicy of a kept running VM with a policy: its files as read back


def observe_proxy(hypervisor, request, images, listed=None, *, guest_budget, now):
    """Everything the plan of ``request`` needs, read once; what is read depends on the verdict on its domain.

    ``images`` is the proxy's ImageSource; ``listed`` a set's Listing of every
    domain, in which the domain is found rather than looked up;
    ``guest_budget`` the proxy's _guest.agent.GuestBudget for this run; ``now`` the aware time the run's clock says.
    """
    domain = observe_domain(hypervisor, request.name, listed)
    spec = digest = probe = None
    if request.state != STATE_ABSENT:
        # A checksum given as a SHA256SUMS URL counts by the digest it lists now: a new release
        # there is drift, so a fleet converges on one image.
        if request.image is not None and request.image.checksum_url is not None:
            probe = images.ensure(check_mode=True)
        spec = request.spec(probe.sha256 if probe is not None else None)
        digest = spec_digest(spec)
    verdict = assess(request, digest, domain)
    missing = _missing_disks(hypervisor, request, domain, verdict)
    if missing:
        verdict = assess(request, digest, domain, missing)
    guest_policy = None
    if request.policy is not None and verdict.kind == KEEP and domain.state in (VIR_DOMAIN_RUNNING, VIR_DOMAIN_BLOCKED):
        # Read back on every run: a file edited by hand in the guest is drift, whatever the metadata records.
        # Only reads, never polls (no timing); a guest that breaks the protocol or is too slow reads as unavailable.
        # One that may still be in its first boot is waited for, as one this run starts, rather than warned about.
        guest_policy = read_policy(GuestAgent(hypervisor, domain.handle, request.name, None, guest_budget),
                                   request.policy, booting=request.may_be_first_booting(domain.metadata, now))
        # Replaced only when it must get a policy it does not hold: one that holds it goes on enforcing it.
        if (guest_policy.unavailable is not None and request.on_unreachable_agent == ON_UNREACHABLE_AGENT_REPLACE
                and domain.metadata.policy_digest != request.policy_digest):
            verdict = replace(verdict, kind=REPLACE, unreachable=guest_policy.unavailable)
            guest_policy = None
    kept = verdict.kind == KEEP and not verdict.drifted
    # A kept VM's base is checked too (once per set, the answer shared): a marker gone or overwritten is trusted
    # by no later run. Without a checksum there is nothing to check it against.
    base_unverified = False
    if kept and request.image is not None and request.image.checksum:
        probe = probe or images.ensure(check_mode=True)
        base_unverified = probe.changed
    # A stopped VM boots from its seed next: one cut short or overwritten is written again first. A running
    # one read it when it booted; one this run stops gets it written once it is off (a policy applied in place
    # since it booted is not in its seed), so the next run finds nothing to do.
    seed_stale = kept and (not is_active(domain.state) or request.state == STATE_STOPPED) and ensure_seed(
        hypervisor, request.pool, request.name, request.seed_files(), check_mode=True).changed
    own = own_volumes(hypervisor, request, domain) if verdict.kind in (REMOVE, CLEAN, REPLACE) else ()
    build = None
    if verdict.kind in (CREATE, REPLACE, KEEP) and listed is not None:
        _check_pooled_unique(listed, request, domain, verdict.kind)
    if verdict.kind in (CREATE, REPLACE):
        if listed is not None:
            _check_egress_unique(listed, request.name, spec, domain if verdict.kind == REPLACE else None)
        try:
            build = observe_build(hypervisor, request, images, probe,
                                  {volume.name for volume in own if volume.pool == request.pool})
        except KvmError as error:
            replacing = domain if verdict.kind == REPLACE else None
            raise error.after(left_as_it_was(error.message, request.name, replacing), []) from error
    return Observation(verdict=verdict, domain=domain, spec=spec, digest=digest, own_volumes=own,
                       missing_disks=missing, build=build, seed_stale=seed_stale, base_unverified=base_unverified,
                       guest_policy=guest_policy)


def _check_egress_unique(listed, name, spec, replacing):
    """ValidationError when another domain of the set's listing records the static egress address (IPv4 or IPv6) the
    proxy ``name`` is to be defined with, as its own or as one of its profiles': an allocation from a pool made from a
    listing taken before another run defined its proxy (two runs of one pool at once). Checked before anything is
    defined; a domain being defined by another run after the listing is not seen (docs: runs that share a pool do not
    overlap).

    Every other domain's metadata is read as text (_held_by_others): anyone with libvirt access can edit it, so a
    domain that records no readable address holds none."""
    wanted = {option: recorded_egress_address(spec, option) for option in ("address", "address6")}
    wanted = {option: address for option, address in wanted.items() if address is not None}
    if not wanted:
        return
    for other, held in _held_by_others(listed, name):
        for option, address in wanted.items():
            if address in held:
                raise ValidationError(
                    "its egress address %s (outside.%s) is recorded by domain '%s' on this hypervisor, so two proxies "
                    "would send from one address: another run of the same pool defined it after this run's "
                    "allocation listed the domains (runs that share a pool must not overlap). %s, and no proxy of the "
                    "set was touched; run again to get a free address" % (
                        address, option, other, "The proxy keeps its VM" if replacing is not None else
                        "The proxy was not defined"))


def _held_by_others(listed, name):
    """(domain name, the set of addresses it records) of every domain of the listing but ``name``: its egress addresses
    and its profiles' pooled ones, each read as text (recorded_egress_address, PooledAddresses.from_recorded); a
    domain whose XML cannot be read holds none here (the listing's other readers report it)."""
    for other in sorted(listed.handles):
        if other == name:
            continue
        try:
            info = listed.info(other, "the XML of domain '%s'" % other)
        except KvmError:
            continue
        spec = recorded_spec(info.metadata)
        held = {recorded_egress_address(spec, option) for option in ("address", "address6")} - {None}
        yield other, held | _pooled_addresses(info.metadata)


def _pooled_addresses(metadata):
    """The set of the egress addresses ``metadata`` records for its profiles (none when it records none, or a record
    edited by hand)."""
    pooled = PooledAddresses.from_recorded(metadata.pooled_addresses_json) if metadata is not None else None
    return {address for _profile, fields in (pooled.entries if pooled is not None else ()) for _field, address in fields}


def _check_pooled_unique(listed, request, domain, kind):
    """ValidationError when another domain of the set's listing records an egress address the pool gave one of the
    proxy's profiles (policy.pooled_addresses) and its own domain does not record yet: an allocation made from a
    listing taken before another run recorded it (two runs of one pool at once), as _check_egress_unique refuses it
    for the proxy's own. Costs nothing for a policy without pooled addresses, or whose addresses its domain records."""
    pooled = request.policy.pooled_addresses if request.policy is not None else None
    if pooled is None:
        return
    own = _pooled_addresses(domain.metadata) if domain is not None and kind != CREATE else set()
    wanted = [(profile, key, address) for profile, fields in pooled.entries for key, address in fields
              if address not in own]
    if not wanted:
        return
    for other, held in _held_by_others(listed, request.name):
        for profile, key, address in wanted:
            if address in held:
                raise ValidationError(
                    "the egress address %s of its profile %s (policy.pooled_addresses, %s) is recorded by domain '%s' "
                    "on this hypervisor, so two proxies would send from one address: another run of the same pool "
                    "gave it after this run's allocation listed the domains (runs that share a pool must not "
                    "overlap). No proxy of the set was touched; run again to get a free address" % (
                        address, profile, key, other))


def _missing_disks(hypervisor, request, domain, verdict):
    """The kept domain's disks that are gone, when they matter (see disks_matter)."""
    if request.state == STATE_ABSENT or not disks_matter(verdict, domain):
        return ()
    missing = missing_disks(hypervisor, domain)
    if verdict.kind == KEEP and not verdict.drifted:
        # A seed holds nothing but the request's data: a gone one is written again (seed_stale) and the disk
        # kept. Only a gone disk needs a new VM.
        missing = tuple(disk for disk in missing if disk != (request.pool, seed_volume_name(request.name)))
    return missing
