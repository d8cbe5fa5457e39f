# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One egress-proxy VM made present, stopped or absent: the flow behind kvm_proxy.

Public API::

    request = ProxyRequest.from_params(params)      # _proxy_request; raises ValidationError
    result = ProxyManager(hypervisor, request, check_mode=False).run()   # the module's result dict

The flow observes (_proxy_observe: read-only), plans (_proxy_plan: a pure
function of the request and the observation, giving an immutable Plan), then
executes the plan (_proxy_execute) unless in check mode. So check mode
reports exactly the actions a real run would take, from the same code.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import (
    format_domain_id,
    overlay_volume_name,
    seed_volume_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.addresses import Awaited, await_ipv4
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import parse_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import (
    VIR_DOMAIN_SHUTOFF,
    is_active,
    libvirt_state_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.execute import Execution, Timing
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.interfaces import describe_interfaces
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.inventory import inspect_domain, resolve_host
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.observe import (
    ImageSource,
    missing_disks,
    observe_build,
    observe_domain,
    own_volumes,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.plan import (
    CLEAN,
    CREATE,
    KEEP,
    LEAVE,
    REMOVE,
    REPLACE,
    Observation,
    assess,
    disks_matter,
    left_as_it_was,
    plan,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import (
    STATE_ABSENT,
    STATE_PRESENT,
    STATE_STOPPED,
    base_volume_of,
    spec_digest,
    utcnow,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.seed import ensure_seed

_DESCRIBED = ("state", "libvirt_state", "ip", "ip_sources", "uid", "created_at", "spec_digest", "autostart",
              "interfaces", "egress_ip")


class ProxyManager:
    """Plan and carry out one kvm_proxy task on one hypervisor.

    ``clock`` returns the aware UTC time recorded as createdAt; ``sleep`` and
    ``monotonic`` drive the shutdown and wait_for_ip polls (tests pass fakes
    so nothing really waits). ``http`` is handed to the image cache;
    ``shared_images`` (a _proxy_observe.SharedImages) shares its answers with the other proxies of a set.
    """

    def __init__(self, hypervisor, request, check_mode=False, clock=utcnow, sleep=time.sleep,
                 monotonic=time.monotonic, http=None, lock_dir=None, shared_images=None):
        self.hv = hypervisor
        self.request = request
        self.check_mode = check_mode
        self.timing = Timing(clock, sleep, monotonic)
        self.images = ImageSource(hypervisor, request, http=http, lock_dir=lock_dir, shared=shared_images)

    def run(self):
        host = resolve_host(self.hv, self.request.host)
        observation = self.observe()
        planned = plan(self.request, observation)
        execution = self.execution(planned, observation)
        if not self.check_mode:
            execution.run()
        return self.report(host, observation, planned, execution)

    def execution(self, planned, observation):
        """The Execution of ``planned``, ready to run."""
        return Execution(self.hv, self.request, planned, self.images, self.timing,
                         pool=observation.build.pool if observation.build is not None else None)

    def report(self, host, observation, planned, execution, wait=True):
        """The module's result for the run (waiting for the address first when the request asks and ``wait``)."""
        request = self.request
        result = {
            "changed": bool(planned.steps),
            "actions": planned.actions,
            "drifted": planned.verdict.drifted,
            "name": request.name,
            "host": host,
            "id": format_domain_id(host, request.name),
            "volumes": _volumes(request, planned, observation),
        }
        try:
            result.update(self._describe(host, observation.domain, planned, execution, wait))
        except KvmError as error:
            # wait_for_ip gave up after the VM was built: the steps still happened.
            raise error.after(error.message, planned.actions) from error
        result["diff"] = _diff(request, planned, observation.domain, execution.uid)
        warnings = list(planned.warnings) + execution.warnings
        if warnings:
            result["warnings"] = warnings
        return result

    def observe(self, listed=None):
        """Everything the plan needs, read once; what is read depends on what the domain already is.

        ``listed`` ({name: handle}) is a set's listing of every domain: the domain is found there, not looked up.
        """
        request = self.request
        domain = observe_domain(self.hv, request.name, listed)
        spec = digest = probe = None
        if request.state != STATE_ABSENT:
            # A checksum given as a SHA256SUMS URL counts by the digest it lists now: a new release
            # there is drift, so a fleet converges on one image.
            if request.image is not None and request.image.checksum_url is not None:
                probe = self.images.ensure(check_mode=True)
            spec = request.spec(probe.sha256 if probe is not None else None)
            digest = spec_digest(spec)
        verdict = assess(request, digest, domain)
        missing = missing_disks(self.hv, domain) if request.state != STATE_ABSENT and disks_matter(verdict, domain) else ()
        if verdict.kind == KEEP and not verdict.drifted:
            # A seed holds nothing but the request's data: a gone one is written again (seed_stale below) and the
            # disk kept. Only a gone disk needs a new VM.
            missing = tuple(disk for disk in missing if disk != (request.pool, seed_volume_name(request.name)))
        if missing:
            verdict = assess(request, digest, domain, missing)
        kept = verdict.kind == KEEP and not verdict.drifted
        # A kept VM's base is checked too (once per set, the answer shared): a marker gone or overwritten is trusted
        # by no later run. Without a checksum there is nothing to check it against.
        base_unverified = False
        if kept and request.image is not None and request.image.checksum:
            probe = probe or self.images.ensure(check_mode=True)
            base_unverified = probe.changed
        # A stopped VM boots from its seed next: one cut short or overwritten is written again first. A running
        # one read it when it booted.
        seed_stale = kept and not is_active(domain.state) and ensure_seed(
            self.hv, request.pool, request.name, request.seed_files(), check_mode=True).changed
        own = own_volumes(self.hv, request, domain) if verdict.kind in (REMOVE, CLEAN, REPLACE) else ()
        build = None
        if verdict.kind in (CREATE, REPLACE):
            try:
                build = observe_build(self.hv, request, self.images, probe,
                                      {volume.name for volume in own if volume.pool == request.pool})
            except KvmError as error:
                raise error.after(left_as_it_was(error.message, request.name, domain if verdict.kind == REPLACE else None),
                                  []) from error
        return Observation(domain=domain, spec=spec, digest=digest, own_volumes=own, missing_disks=missing, build=build,
                           seed_stale=seed_stale, base_unverified=base_unverified)

    def awaited(self, dom, info):
        """The proxy as the address wait (_addresses.await_ipv4) knows it; ``info`` is its domain's parsed XML."""
        macs = info.macs()
        return Awaited(self.request.name, dom, macs[0] if macs else None, self.request.interfaces[0].source)

    def _describe(self, host, domain, planned, execution, wait):
        """state, ip, uid, created_at, spec_digest, mac and autostart of the domain as the run leaves it.

        In check mode this is the domain as it is now (nothing ran; a VM to be
        replaced included), or the prediction for one that would be created.
        """
        request = self.request
        absent = dict.fromkeys(("state", "libvirt_state", "ip", "egress_ip", "uid", "created_at", "spec_digest", "mac",
                                "autostart"))
        absent.update(ip_sources={}, interfaces=[])
        if request.state == STATE_ABSENT and planned.verdict.kind != LEAVE:
            return absent
        if self.check_mode:
            if domain is None:
                interfaces = describe_interfaces(request.interfaces, [nic.role for nic in request.interfaces], {})
                absent.update(uid=planned.uid, spec_digest=planned.digest, mac=request.interfaces[0].mac,
                              autostart=request.autostart, interfaces=interfaces)
                return absent
            return _entry(self.hv, host, domain.handle, domain.info, domain.metadata.uid if domain.metadata else None)
        # A kept domain's definition did not change; a new one's XML carries the MAC libvirt chose.
        dom = domain.handle if planned.kept else execution.dom
        info = domain.info if planned.kept else parse_domain_xml(self.hv.domain_xml(dom))
        if wait and request.wait_for_ip and request.state == STATE_PRESENT and planned.verdict.kind != LEAVE:
            await_ipv4(self.hv, [self.awaited(dom, info)], request.wait_timeout, self.timing)
        # An adopted domain's new owner is in its metadata, not in the XML read before.
        return _entry(self.hv, host, dom, info, execution.uid)


def _entry(hypervisor, host, dom, info, uid):
    entry = inspect_domain(hypervisor, dom, host, info)
    described = {key: entry[key] for key in _DESCRIBED}
    described["uid"] = uid
    described["mac"] = entry["macs"][0] if entry["macs"] else None
    return described


def _volumes(request, planned, observation):
    """Names of the VM's volumes, in the pool they were found in for a removal.

    The base is null when only a download would tell (checksum given as a URL).
    """
    domain = observation.domain
    found = [volume.pool for volume in observation.own_volumes]
    pool = found[0] if request.state == STATE_ABSENT and found else request.pool
    if planned.base is not None:
        base = planned.base.volume
    elif planned.kept and planned.verdict.drifted:
        base = base_volume_of((domain.spec or {}).get("image"))
    elif planned.spec is not None:
        base = base_volume_of(planned.spec["image"])
    else:
        base = None
    return {"pool": pool, "overlay": overlay_volume_name(request.name), "seed": seed_volume_name(request.name),
            "base": base}


def _diff_state(state):
    """A domain's state as the diff shows it: present, stopped, or libvirt's name (paused, crashed, ...)."""
    if is_active(state):
        return STATE_PRESENT
    if state == VIR_DOMAIN_SHUTOFF:
        return STATE_STOPPED
    return libvirt_state_name(state)


def _diff(request, planned, domain, uid):
    before = {"state": STATE_ABSENT}
    if domain is not None:
        metadata = domain.metadata
        before = {
            "state": _diff_state(domain.state),
            "managed": domain.managed,
            "uid": metadata.uid if metadata is not None else None,
            "spec_digest": metadata.spec_digest if metadata is not None else None,
            "spec": domain.spec,
            "autostart": domain.autostart,
        }
    if planned.verdict.kind == LEAVE:
        after = dict(before)
    elif request.state == STATE_ABSENT:
        after = {"state": STATE_ABSENT}
    elif planned.kept:
        after = dict(before, state=request.state, autostart=request.autostart, uid=planned.uid)
    else:
        after = {
            "state": request.state,
            "managed": True,
            "uid": uid,
            "spec_digest": planned.digest,
            "spec": planned.spec,
            "autostart": request.autostart,
        }
    return {"before": before, "after": after}
