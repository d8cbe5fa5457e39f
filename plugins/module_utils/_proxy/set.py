# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One hypervisor's whole desired set of proxies in one call: the flow behind kvm_proxy_set.

Every proxy goes through kvm_proxy's own observe and plan (_proxy.py), all of
them before anything changes, so check mode predicts the whole set. Then:

- proxies that are created, started, stopped or removed go first, side by
  side (with the garbage collection of proxies that are not running); their
  addresses are awaited together, under one deadline (_addresses.await_ipv4,
  kvm_proxy's own wait);
- then what takes capacity away rolls, at most ``max_unavailable`` at a time:
  replacements of running proxies first, then the garbage collection of
  running ones. With ``wait_for_ip`` the next batch starts only when the
  previous one's replacements have an address (and answer on
  ``wait_for_port`` when given). One that does not come up in time, or a new
  proxy that fails, stops the roll and the task fails naming the proxies still
  on their old VM and the unlisted ones still running: none of them is touched;
- garbage collection, with the reference's rules: a managed domain recorded
  with this set's owner, not in the set, created longer ago than the grace
  period, is removed with its overlay and seed. Unmanaged domains and other
  owners' are never touched and are reported as foreign. A hypervisor that
  cannot be listed fails before anything is removed; a domain that cannot be
  read is skipped, and the sweep goes on. A createdAt further in the future
  than clock skew explains is corrupt and protects nothing;
- a listed proxy to remove that another owner (or nobody) created is left
  and reported (outcome ``left alone ...``, with the reason), not refused.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import format_domain_id
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.options import DownloadOptions
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.addresses import await_ipv4
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import parse_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import CLOCK_SKEW_TOLERANCE
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import is_active
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.execute import Timing
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.inventory import resolve_host
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.manager import ProxyManager
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.observe import SharedImages
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.plan import (
    CLEAN,
    CREATE,
    KEEP,
    LEAVE,
    REMOVE,
    REPLACE,
    UNMANAGED,
    ownership,
    plan,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import (
    DEFAULT_SHUTDOWN_TIMEOUT,
    DEFAULT_WAIT_TIMEOUT,
    STATE_ABSENT,
    STATE_PRESENT,
    ProxyRequest,
    utcnow,
)

DEFAULT_GC_GRACE_PERIOD = 3600
DEFAULT_MAX_UNAVAILABLE = 1
# Proxies built or removed at once. Starting and stopping a VM is mostly
# libvirtd's and QEMU's time (about 1 s and 2 s each under TCG here); libvirtd
# serves concurrent calls on one connection and the binding releases the GIL.
WORKERS = 8
# Options of the set that are not also a proxy's.
SET_OPTIONS = ("proxies", "gc", "gc_grace_period", "max_unavailable", "wait_for_port")
# A proxy's options that only the set gives: one owner and one hypervisor for all of them, one wait.
SET_WIDE_PROXY_OPTIONS = ("uid", "adopt_uids", "host", "force", "wait_for_ip", "wait_timeout")

# The summary of what happened to a proxy, by the planner's verdict.
_OUTCOMES = {CREATE: "created", REPLACE: "replaced", REMOVE: "removed", LEAVE: "left alone (another owner)"}
# A listed domain to remove that this collection did not create.
LEFT_UNMANAGED = "left alone (unmanaged)"


def _whole_number(option, value, least, most=None):
    if not isinstance(value, int) or isinstance(value, bool) or value < least or (most is not None and value > most):
        bounds = "of at least %d" % least if most is None else "from %d to %d" % (least, most)
        raise ValidationError("%s must be a whole number %s, got %r" % (option, bounds, value))


@dataclass(frozen=True)
class SetRequest:
    """The set as the task asks for it: each proxy a validated ProxyRequest, plus the set's own options."""

    proxies: tuple
    uid: Optional[str]
    pool: str
    gc: bool = True
    gc_grace_period: int = DEFAULT_GC_GRACE_PERIOD
    max_unavailable: int = DEFAULT_MAX_UNAVAILABLE
    wait_for_port: Optional[int] = None
    wait_for_ip: bool = False  # implied by wait_for_port: a port is asked on the address
    wait_timeout: int = DEFAULT_WAIT_TIMEOUT
    shutdown_timeout: int = DEFAULT_SHUTDOWN_TIMEOUT  # the set's own, for the proxies garbage collection stops

    @classmethod
    def from_params(cls, params, download=None):
        """Validate everything before any connection; a proxy's error names its entry.

        ``download`` is the DownloadOptions the task built of ``params``, which every proxy shares (None: built here).
        """
        download = download if download is not None else DownloadOptions.from_params(params)
        shared = {key: value for key, value in params.items() if key not in SET_OPTIONS}
        proxies, names = [], set()
        for index, entry in enumerate(params["proxies"] or []):
            given = {key: value for key, value in (entry or {}).items() if value is not None}
            label = "proxies[%d] (%s)" % (index, given.get("name", "no name"))
            overridden = sorted(set(given) & set(SET_WIDE_PROXY_OPTIONS))
            if overridden:
                raise ValidationError("%s sets %s, which only the set as a whole gives" % (label, ", ".join(overridden)))
            single = [option for option in ("bridge", "network") if shared.get(option) is not None]
            if single and given.get("interfaces"):
                raise ValidationError(
                    "%s sets interfaces while the set gives %s for every proxy; they are mutually exclusive: leave %s "
                    "out of the set and give each proxy its NICs, or drop this proxy's interfaces" % (
                        label, " and ".join(single), " and ".join(single)))
            if given.get("name") in names:
                raise ValidationError("%s: the name appears more than once in proxies" % label)
            names.add(given.get("name"))
            try:
                proxies.append(ProxyRequest.from_params(dict(shared, **given, wait_for_ip=False, leave_others=True),
                                                        download))
            except ValidationError as error:
                raise ValidationError("%s: %s" % (label, error.message)) from error
        if params["gc"] and not params["uid"]:
            raise ValidationError("gc needs uid: garbage collection removes only the proxies recorded with this owner")
        _whole_number("gc_grace_period", params["gc_grace_period"], 0)
        _whole_number("max_unavailable", params["max_unavailable"], 1)
        if params["wait_for_port"] is not None:
            _whole_number("wait_for_port", params["wait_for_port"], 1, 65535)
        # Checked here too: a set with no proxies never validates a ProxyRequest.
        shutdown_timeout = params["shutdown_timeout"]
        _whole_number("shutdown_timeout", shutdown_timeout, 0)
        return cls(proxies=tuple(proxies), uid=params["uid"], pool=params["pool"], gc=params["gc"],
                   gc_grace_period=params["gc_grace_period"], max_unavailable=params["max_unavailable"],
                   wait_for_port=params["wait_for_port"],
                   wait_for_ip=bool(params["wait_for_ip"]) or params["wait_for_port"] is not None,
                   wait_timeout=params["wait_timeout"], shutdown_timeout=shutdown_timeout)


@dataclass(eq=False)
class Member:
    """One proxy of the run: its manager, what it found, its plan and its execution."""

    manager: ProxyManager
    observation: object
    plan: object
    execution: object = None

    @property
    def serving(self):
        """Whether its domain runs: a proxy that may hold connections and whose removal takes capacity away."""
        domain = self.observation.domain
        return domain is not None and is_active(domain.state)

    @property
    def rolls(self):
        """A replacement of a running VM: its egress is down until the new one is up."""
        return self.plan.verdict.kind == REPLACE and self.serving

    @property
    def awaited(self):
        """Whether its address is awaited: it was created, replaced or started by this run."""
        return (self.manager.request.state == STATE_PRESENT and bool(self.plan.steps)
                and self.plan.verdict.kind not in (LEAVE, REMOVE, CLEAN))


class SetManager:
    """Plan and carry out one kvm_proxy_set task. ``options`` go to each ProxyManager (clock, sleep, http, locks)."""

    def __init__(self, hypervisor, request, check_mode=False, **options):
        self.hv = hypervisor
        self.request = request
        self.check_mode = check_mode
        self.options = dict(options, shared_images=SharedImages())
        self.timing = Timing(options.get("clock", utcnow), options.get("sleep", time.sleep),
                             options.get("monotonic", time.monotonic))
        self.host = None
        self.foreign = []
        self.spared = []
        self.warnings = []

    def run(self):
        self.host = resolve_host(self.hv, next((p.host for p in self.request.proxies if p.host), None))
        # One listing for the whole set: each proxy's domain is found in it, and GC sweeps it. A hypervisor that
        # cannot be listed fails here, before anything changes.
        listed = {self.hv.domain_name(dom): dom for dom in self.hv.list_domains()}
        members = [self._member(proxy, listed, "proxies[%d] (%s)" % (index, proxy.name))
                   for index, proxy in enumerate(self.request.proxies)]
        removals = [self._member(proxy, listed, "unlisted proxy '%s' (garbage collection)" % proxy.name)
                    for proxy in self._sweep(listed)] if self.request.gc else []
        if not self.check_mode:
            self._execute(members, removals)
        results = [self._report(member) for member in members]
        removed = [self._report(member) for member in removals]
        result = {
            "changed": any(r["changed"] for r in results + removed),
            "host": self.host,
            "proxies": results,
            "removed": removed,
            "foreign": self.foreign,
            "spared": self.spared,
            "diff": {"before": {r["name"]: r["diff"]["before"] for r in results + removed},
                     "after": {r["name"]: r["diff"]["after"] for r in results + removed}},
        }
        if self.warnings:
            result["warnings"] = self.warnings
        return result

    def _member(self, proxy, listed, label):
        """The proxy observed and planned; an error says which entry (``label``) it is about."""
        manager = ProxyManager(self.hv, replace(proxy, host=self.host), check_mode=self.check_mode, **self.options)
        try:
            observation = manager.observe(listed)
            planned = plan(manager.request, observation)
        except KvmError as error:
            raise error.after("%s: %s" % (label, error.message), error.completed_actions or []) from error
        return Member(manager, observation, planned, manager.execution(planned, observation))

    def _sweep(self, listed):
        """Removal requests for this owner's domains that nothing desires any more and that are past the grace period."""
        desired = {proxy.name for proxy in self.request.proxies}
        now = self.timing.clock()
        grace = datetime.timedelta(seconds=self.request.gc_grace_period)
        removable = []
        for name, dom in sorted(listed.items()):  # by name, so reports keep one order
            if name in desired:
                continue
            try:
                metadata = parse_domain_xml(self.hv.domain_xml(dom)).metadata
            except KvmError as error:
                self.spared.append({"name": name, "reason": error.message})  # one bad domain never wedges the sweep
                continue
            if metadata is None or not metadata.managed or metadata.uid != self.request.uid:
                self.foreign.append({"name": name, "uid": metadata.uid if metadata is not None else None,
                                     "managed": bool(metadata is not None and metadata.managed)})
            elif now - metadata.created_at_as_of(now) >= grace:
                removable.append(ProxyRequest(name=name, state=STATE_ABSENT, uid=self.request.uid, pool=self.request.pool,
                                              shutdown_timeout=self.request.shutdown_timeout))
                if metadata.created_at > now:
                    self.warnings.append("domain '%s' records %s: more than clock skew explains, so it reads as corrupt "
                                         "and did not protect the domain from garbage collection" % (name, _ahead(metadata, now)))
            else:
                reason = "created less than gc_grace_period (%d s) ago" % self.request.gc_grace_period
                if metadata.created_at > now:
                    reason += " (%s: within clock skew, it counts as now)" % _ahead(metadata, now)
                self.spared.append({"name": name, "reason": reason})
        return removable

    def _execute(self, members, removals):
        """First what adds capacity or costs none, awaited; then what takes capacity away, ``max_unavailable`` at a time.

        A running proxy that garbage collection removes takes capacity away like a replacement: it goes last, once
        the proxies that take its place are up, so a set whose new proxies fail keeps its old ones running.
        """
        done = []
        rolling = [m for m in members if m.rolls] + [m for m in removals if m.serving]
        try:
            self._run_together([m for m in members + removals if m not in rolling], done)
            self._await([m for m in members if m.awaited and not m.rolls])
            while rolling:
                batch = rolling[:self.request.max_unavailable]
                self._run_together(batch, done)
                rolling = rolling[len(batch):]
                self._await([m for m in batch if m.awaited])
        except KvmError as error:
            raise error.after(error.message + _untouched(rolling, members), done) from error

    def _run_together(self, members, done):
        """Carry out the members' plans side by side, WORKERS at a time; ``done`` gets their actions in request order.

        Every member runs even when another fails; the error names each proxy that failed, with what it got done.
        """
        busy = [member for member in members if member.plan.steps]
        if not busy:
            return
        with ThreadPoolExecutor(max_workers=min(WORKERS, len(busy))) as workers:
            errors = list(workers.map(_attempt, busy))
        failed = []
        for member, error in zip(busy, errors):
            name = member.manager.request.name
            actions = member.plan.actions if error is None else error.completed_actions or []
            done.extend("%s: %s" % (name, action) for action in actions)
            if error is not None:
                failed.append("proxy '%s': %s" % (name, error.message))
        first = next((error for error in errors if error is not None), None)
        if first is not None:
            raise first.after("; ".join(failed), done) from first

    def _await(self, members):
        """Wait, under one deadline, until every proxy of ``members`` has an IPv4 (and answers on the port).

        Without wait_for_ip nothing is awaited, so replacements do not roll: nothing tells when one is up.
        """
        if not self.request.wait_for_ip or not members:
            return
        awaited = []
        for member in members:
            dom = member.execution.dom or member.observation.domain.handle
            awaited.append(member.manager.awaited(dom, parse_domain_xml(self.hv.domain_xml(dom))))
        await_ipv4(self.hv, awaited, self.request.wait_timeout, self.timing, self.request.wait_for_port)

    def _report(self, member):
        result = member.manager.report(self.host, member.observation, member.plan, member.execution, wait=False)
        kind = member.plan.verdict.kind
        result["reason"] = None
        if kind == KEEP:
            result["outcome"] = "updated" if member.plan.steps else "unchanged"
        elif kind == CLEAN:
            result["outcome"] = "cleaned" if member.plan.steps else "absent"
        elif kind == LEAVE:
            domain = member.observation.domain
            result["outcome"] = LEFT_UNMANAGED if ownership(member.manager.request, domain) == UNMANAGED else _OUTCOMES[kind]
            result["reason"] = member.plan.warnings[0]
        else:
            result["outcome"] = _OUTCOMES[kind]
        result["id"] = format_domain_id(self.host, member.manager.request.name)
        return result


def _untouched(rolling, members):
    """The end of a failed run's message: the proxies it did not replace and the unlisted ones it did not remove."""
    replacing = [m.manager.request.name for m in rolling if m in members]
    unlisted = [m.manager.request.name for m in rolling if m not in members]
    parts = []
    if replacing:
        parts.append("%s still run%s on the old VM" % (", ".join(replacing), "s" if len(replacing) == 1 else ""))
    if unlisted:
        parts.append("%s, no longer listed, still run%s: garbage collection removes a running proxy only once the new "
                     "ones are up" % (", ".join(unlisted), "s" if len(unlisted) == 1 else ""))
    return "; the roll stopped: %s" % "; ".join(parts) if parts else ""


def _ahead(metadata, now):
    """What a createdAt after ``now`` says, for a message."""
    return "createdAt %s, %d s ahead of this host's clock (clock skew up to %d s is allowed)" % (
        metadata.created_at_raw, (metadata.created_at - now).total_seconds(), CLOCK_SKEW_TOLERANCE.total_seconds())


def _attempt(member):
    """Run one member's plan; the KvmError it raised, or None."""
    try:
        member.execution.run()
    except KvmError as error:
        return error
    return None
