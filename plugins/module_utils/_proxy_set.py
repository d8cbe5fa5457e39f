# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One hypervisor's whole desired set of proxies in one call: the flow behind kvm_proxy_set.

Every proxy goes through kvm_proxy's own observe and plan (_proxy.py), all of
them before anything changes, so check mode predicts the whole set. Then:

- proxies that are created, started, stopped or removed go first, side by
  side; their addresses are awaited together, under one deadline;
- with ``wait_for_ip``, replacements of running proxies roll, at most
  ``max_unavailable`` at a time: the next starts only when the previous ones have an address (and answer on
  ``wait_for_port`` when given). One that does not come up in time stops the
  roll and the task fails naming the proxies still on their old VM, which keep
  running;
- garbage collection, with the reference's rules: a managed domain recorded
  with this set's owner, not in the set, created longer ago than the grace
  period, is removed with its overlay and seed. Unmanaged domains and other
  owners' are never touched and are reported as foreign. A hypervisor that
  cannot be listed fails before anything is removed; a domain that cannot be
  read is skipped, and the sweep goes on.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._addresses import domain_ipv4
from ansible_collections.egress_proxies.kvm.plugins.module_utils._domain_xml import parse_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._errors import KvmError, TransientError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._inventory import resolve_host
from ansible_collections.egress_proxies.kvm.plugins.module_utils._names import format_domain_id
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy import ProxyManager
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy_execute import POLL_INTERVAL
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy_observe import SharedImages
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy_plan import (
    CLEAN,
    CREATE,
    KEEP,
    LEAVE,
    REMOVE,
    REPLACE,
    plan,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy_request import (
    DEFAULT_WAIT_TIMEOUT,
    STATE_ABSENT,
    STATE_PRESENT,
    ProxyRequest,
    utcnow,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._state import is_active

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
    wait_for_ip: bool = False
    wait_timeout: int = DEFAULT_WAIT_TIMEOUT

    @classmethod
    def from_params(cls, params):
        """Validate everything before any connection; a proxy's error names its entry."""
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
                proxies.append(ProxyRequest.from_params(dict(shared, **given, wait_for_ip=False)))
            except ValidationError as error:
                raise ValidationError("%s: %s" % (label, error.message)) from error
        if params["gc"] and not params["uid"]:
            raise ValidationError("gc needs uid: garbage collection removes only the proxies recorded with this owner")
        _whole_number("gc_grace_period", params["gc_grace_period"], 0)
        _whole_number("max_unavailable", params["max_unavailable"], 1)
        if params["wait_for_port"] is not None:
            _whole_number("wait_for_port", params["wait_for_port"], 1, 65535)
        return cls(proxies=tuple(proxies), uid=params["uid"], pool=params["pool"], gc=params["gc"],
                   gc_grace_period=params["gc_grace_period"], max_unavailable=params["max_unavailable"],
                   wait_for_port=params["wait_for_port"], wait_for_ip=params["wait_for_ip"],
                   wait_timeout=params["wait_timeout"])


@dataclass
class Member:
    """One proxy of the run: its manager, what it found, its plan and its execution."""

    manager: ProxyManager
    observation: object
    plan: object
    execution: object = None

    @property
    def rolls(self):
        """A replacement of a running VM: its egress is down until the new one is up."""
        domain = self.observation.domain
        return self.plan.verdict.kind == REPLACE and domain is not None and is_active(domain.state)


class SetManager:
    """Plan and carry out one kvm_proxy_set task. ``options`` go to each ProxyManager (clock, sleep, http, locks)."""

    def __init__(self, hypervisor, request, check_mode=False, **options):
        self.hv = hypervisor
        self.request = request
        self.check_mode = check_mode
        self.options = dict(options, shared_images=SharedImages())
        self.host = None
        self.foreign = []
        self.spared = []

    def run(self):
        self.host = resolve_host(self.hv, next((p.host for p in self.request.proxies if p.host), None))
        # One listing for the whole set: each proxy's domain is found in it, and GC sweeps it. A hypervisor that
        # cannot be listed fails here, before anything changes.
        listed = {self.hv.domain_name(dom): dom for dom in self.hv.list_domains()}
        members = [self._member(proxy, listed) for proxy in self.request.proxies]
        removals = [self._member(proxy, listed) for proxy in self._sweep(listed)] if self.request.gc else []
        if not self.check_mode:
            self._execute(members, removals)
        results = [self._report(member) for member in members]
        removed = [self._report(member) for member in removals]
        return {
            "changed": any(r["changed"] for r in results + removed),
            "host": self.host,
            "proxies": results,
            "removed": removed,
            "foreign": self.foreign,
            "spared": self.spared,
            "diff": {"before": {r["name"]: r["diff"]["before"] for r in results + removed},
                     "after": {r["name"]: r["diff"]["after"] for r in results + removed}},
        }

    def _member(self, proxy, listed):
        manager = ProxyManager(self.hv, replace(proxy, host=self.host), check_mode=self.check_mode, **self.options)
        observation = manager.observe(listed)
        planned = plan(manager.request, observation)
        return Member(manager, observation, planned, manager.execution(planned, observation))

    def _sweep(self, listed):
        """Removal requests for this owner's domains that nothing desires any more and that are past the grace period."""
        desired = {proxy.name for proxy in self.request.proxies}
        now = self.options.get("clock", utcnow)()
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
            elif now - metadata.created_at >= grace:
                removable.append(ProxyRequest(name=name, state=STATE_ABSENT, uid=self.request.uid, pool=self.request.pool))
            else:
                self.spared.append({"name": name, "reason": "created less than gc_grace_period (%d s) ago" % (
                    self.request.gc_grace_period)})
        return removable

    def _execute(self, members, removals):
        done = []
        try:
            self._run_together([m for m in members if not m.rolls] + removals, done)
            self._await([m for m in members if not m.rolls and m.plan.steps])
            rolling = [m for m in members if m.rolls]
            while rolling:
                batch, rolling = rolling[:self.request.max_unavailable], rolling[self.request.max_unavailable:]
                self._run_together(batch, done)
                try:
                    self._await(batch)
                except KvmError as error:
                    raise error.after("%s; the roll stopped: %s still run%s their old VM" % (
                        error.message, ", ".join(m.manager.request.name for m in rolling) or "no other proxy",
                        "s" if len(rolling) == 1 else ""), done) from error
        except KvmError as error:
            if error.completed_actions is None:
                error = error.after(error.message, done)
            raise error

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
        """Wait, under one deadline, until every started proxy of ``members`` has an IPv4 (and answers on the port).

        Without wait_for_ip nothing is awaited, so replacements do not roll: nothing tells when one is up.
        """
        if not self.request.wait_for_ip:
            return
        timing = members[0].manager.timing if members else None
        pending = {m.manager.request.name: m for m in members
                   if m.manager.request.state == STATE_PRESENT and m.plan.verdict.kind not in (LEAVE, REMOVE, CLEAN)}
        if not pending:
            return
        deadline = timing.monotonic() + self.request.wait_timeout
        while pending:
            for name, member in list(pending.items()):
                dom = member.execution.dom or member.observation.domain.handle
                macs = parse_domain_xml(self.hv.domain_xml(dom)).macs()
                lookup = domain_ipv4(self.hv, dom, mac=macs[0] if macs else None)
                if lookup.ip is not None and self._answers(lookup.ip):
                    del pending[name]
            if pending and timing.monotonic() >= deadline:
                raise TransientError("%s got no routable IPv4%s within wait_timeout (%d s)" % (
                    ", ".join(sorted(pending)), " answering on port %d" % self.request.wait_for_port
                    if self.request.wait_for_port else "", self.request.wait_timeout))
            if pending:
                timing.sleep(POLL_INTERVAL)

    def _answers(self, ip):
        if self.request.wait_for_port is None:
            return True
        try:
            socket.create_connection((ip, self.request.wait_for_port), timeout=POLL_INTERVAL).close()
        except OSError:
            return False
        return True

    def _report(self, member):
        result = member.manager.report(self.host, member.observation, member.plan, member.execution, wait=False)
        kind = member.plan.verdict.kind
        if kind == KEEP:
            result["outcome"] = "updated" if member.plan.steps else "unchanged"
        elif kind == CLEAN:
            result["outcome"] = "cleaned" if member.plan.steps else "absent"
        else:
            result["outcome"] = _OUTCOMES[kind]
        result["id"] = format_domain_id(self.host, member.manager.request.name)
        return result


def _attempt(member):
    """Run one member's plan; the KvmError it raised, or None."""
    try:
        member.execution.run()
    except KvmError as error:
        return error
    return None
