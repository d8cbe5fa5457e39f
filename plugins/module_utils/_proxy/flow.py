# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one flow of kvm_proxy and kvm_proxy_set: a single proxy is a set of one.

Public API::

    result = run_proxy(hypervisor, ProxyRequest.from_params(params), check_mode)   # a _proxy.result.ProxyResult
    result = run_set(hypervisor, SetRequest.from_params(params), check_mode)       # a _proxy.result.SetResult

A set first makes ready, once, each image its proxies to run (or to keep
stopped) build from (_image.cache.ensure_image; in check mode, predicted),
and with ``image_prune`` removes that image's older cached copies no volume
uses: a wrong URL or checksum fails the set before any proxy is looked at,
and the proxies then find their image ready. kvm_proxy's one proxy fetches
its image as a step of its own plan.

Every proxy is observed (_proxy.observe, read-only) and planned (_proxy.plan,
a pure function giving an immutable Plan) before anything changes, so check
mode predicts the whole set from the same code. Then, unless in check mode:

- proxies that are created, started, stopped or removed go first, side by
  side (with the garbage collection, _proxy.sweep, of proxies that are not
  running); their addresses are awaited together (_libvirt.addresses.await_ipv4),
  each proxy within its wait_timeout, one Deadline for every wait on it in the
  run (its agent and first boot before a policy apply, then its address);
- then what takes capacity away rolls, at most ``max_unavailable`` at a time:
  replacements of running proxies first, then the garbage collection of
  running ones. With ``wait_for_ip`` the next batch starts only when the
  previous one's replacements have an address (and answer on
  ``wait_for_port`` when given). One that does not come up in time, or a new
  proxy that fails, stops the roll and the task fails naming the proxies still
  on their old VM and the unlisted ones still running: none of them is touched;
- a listed proxy to remove that another owner (or nobody) created is left
  and reported (outcome ``left alone ...``, with the reason), not refused.

Each proxy's result and diff is _proxy.result's. kvm_proxy's set of one
(SetRequest.of_one) has no garbage collection and nothing to roll: its
domain is looked up by name, its messages do not repeat its name, and its
address is awaited whenever it should run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT, STATE_PRESENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import quoted
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.timing import Timing
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.agent import UNUSABLE_AGENT, GuestAgent, GuestBudget
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.policy import await_booted
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.removal import prune_images
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.addresses import Awaited, await_ipv4
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import parse_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import is_active
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.execute import agent_failure, carry_out
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.inventory import resolve_host
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.observe import ImageSource, Listing, SharedImages, observe_proxy
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.plan import plan
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import SetRequest
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.result import ProxyResult, SetResult, describe_proxy
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.sweep import Sweep, sweep
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.verdict import CLEAN, LEAVE, REMOVE, REPLACE

# Proxies built or removed at once. Starting and stopping a VM is mostly
# libvirtd's and QEMU's time (about 1 s and 2 s each under TCG here); libvirtd
# serves concurrent calls on one connection and the binding releases the GIL.
WORKERS = 8


def run_proxy(hypervisor, request, check_mode=False, **options):
    """kvm_proxy's flow: ``request`` (a ProxyRequest) as a set of one; its ProxyResult. ``options``: see ProxyFlow."""
    return ProxyFlow(hypervisor, SetRequest.of_one(request), check_mode, **options).run().proxies[0]


def run_set(hypervisor, request, check_mode=False, **options):
    """kvm_proxy_set's flow: ``request`` (a SetRequest); its SetResult. ``options``: see ProxyFlow."""
    return ProxyFlow(hypervisor, request, check_mode, **options).run()


@dataclass(eq=False)
class Member:
    """One proxy of the run: its request, what was found, its plan, and the outcome so far."""

    request: Any  # _proxy.request.ProxyRequest
    label: Optional[str]  # how a message names it; None for kvm_proxy's one proxy
    images: Any  # its _proxy.observe.ImageSource
    observation: Any
    plan: Any
    outcome: Any  # the plan's Outcome, completed once its steps ran
    guest_budget: Any  # its _guest.agent.GuestBudget: one for all its guest agent exchanges in the run
    wait: Any  # its wait_timeout, a _common.timing.Deadline: one for every wait on it in the run, from the first
    settled: Any = None

    @property
    def serving(self):
        """Whether its domain runs: a proxy that may hold connections and whose removal takes capacity away."""
        domain = self.observation.domain
        return domain is not None and is_active(domain.state)

    @property
    def rolls(self):
        """A replacement of a running VM: its egress is down until the new one is up."""
        return self.outcome.verdict.kind == REPLACE and self.serving

    @property
    def awaited(self):
        """Whether its address is awaited: it should run, and (in a set) this run created, replaced or started it."""
        return (self.request.state == STATE_PRESENT and (self.label is None or bool(self.plan.steps))
                and self.outcome.verdict.kind not in (LEAVE, REMOVE, CLEAN))

    def labelled(self, text, who=None):
        """``text`` about this proxy in a set's message or actions, after ``who`` (its name); as is for kvm_proxy's."""
        return text if self.label is None else "%s: %s" % (who or self.request.name, text)

    def settle(self, hypervisor):
        """(handle, DomainInfo) of its domain as the run leaves it; read once.

        A kept domain's definition did not change; a new one's XML carries the MAC libvirt chose.
        """
        if self.settled is None:
            domain = self.observation.domain
            if self.outcome.kept:
                self.settled = (domain.handle, domain.info)
            else:
                self.settled = (self.outcome.dom, parse_domain_xml(hypervisor.domain_xml(self.outcome.dom)))
        return self.settled


class ProxyFlow:
    """Plan and carry out one hypervisor's SetRequest.

    ``timing`` (a _common.timing.Timing; the real clocks when None) drives
    createdAt, the shutdown and address polls; ``http`` and ``lock_dir`` go to the image
    cache, whose answers the proxies share (SharedImages).
    """

    def __init__(self, hypervisor, request, check_mode=False, timing=None, http=None, lock_dir=None):
        self.hv = hypervisor
        self.request = request
        self.check_mode = check_mode
        self.timing = timing if timing is not None else Timing()
        self.image_options = dict(http=http, lock_dir=lock_dir, shared=SharedImages())
        self.host = None

    def run(self):
        request = self.request
        self.host = resolve_host(self.hv, next((proxy.host for proxy in request.proxies if proxy.host), None))
        images = () if request.single else self._ready_images()
        # One listing for the whole set: each proxy's domain is found in it, and GC sweeps it; each domain's XML is
        # read once. A hypervisor that cannot be listed fails here, before anything changes. kvm_proxy looks its one
        # domain up by name.
        listed = None if request.single else Listing(self.hv)
        # Observed side by side: a running proxy's policy is read back through its own guest agent, tens of
        # milliseconds each, which one proxy after another would add up over a set.
        with ThreadPoolExecutor(max_workers=min(WORKERS, len(request.proxies) or 1)) as workers:
            members = list(workers.map(
                lambda indexed: self._member(indexed[1], listed, None if request.single else "proxies[%d] (%s)" % (
                    indexed[0], indexed[1].name)),
                enumerate(request.proxies)))
        found = sweep(request, listed, self.timing.clock()) if request.gc else Sweep()
        removals = [self._member(proxy, listed, "unlisted proxy '%s' (garbage collection)" % proxy.name)
                    for proxy in found.removals]
        done = []
        if not self.check_mode:
            self._execute(members, removals, done)
        try:
            proxies = tuple(self._result(member) for member in members)
            removed = tuple(self._result(member) for member in removals)
        except KvmError as error:
            # Describing the domains failed after the steps: they still happened.
            raise error.after(error.message, done) from error
        return SetResult(self.host, proxies, removed, found.foreign, found.spared, found.warnings, images)

    def _ready_images(self):
        """Each image the set's proxies to run or keep stopped build from, made ready (in check mode, predicted)
        once, before any proxy is observed; with image_prune its other cached copies that no volume uses removed.

        The proxy with the largest disk bounds the image's virtual size. An image that cannot be made ready fails
        the set, naming the option that gives it; no proxy was looked at yet.
        """
        users = {}
        for index, proxy in enumerate(self.request.proxies):
            if proxy.state != STATE_ABSENT and proxy.image is not None:
                users.setdefault((proxy.pool, proxy.image, proxy.download), []).append((index, proxy))
        results = []
        for image, using in users.items():
            source = ImageSource(self.hv, max(using, key=lambda entry: entry[1].disk_bytes)[1], **self.image_options)
            try:
                result = source.ensure(self.check_mode)
            except KvmError as error:
                option = _image_option(using, len(self.request.proxies))
                raise error.after("%s: %s. No proxy was touched" % (option, error.message),
                                  error.completed_actions or []) from error
            self.image_options["shared"].made_ready(image, result)
            results.append(result)
        if self.request.image_prune:
            made_ready = list(zip(users, results))
            results = [replace(result, pruned=self._prune(image, made_ready)) for image, result in made_ready]
        return tuple(results)

    def _prune(self, image, made_ready):
        """The prune of the other cached copies of ``image``'s name in its pool, keeping every copy of the name the set
        made ready (``made_ready``: (image, ImageResult) pairs): a proxy of its own may name another release."""
        pool, spec, download = image
        keep = tuple(ready.volume for (other_pool, other, _options), ready in made_ready
                     if other_pool == pool and other.name == spec.name)
        return prune_images(self.hv, pool, spec.name, keep=keep, check_mode=self.check_mode,
                            lock_timeout=download.lock_timeout, lock_dir=self.image_options["lock_dir"])

    def _member(self, proxy, listed, label):
        """The proxy observed and planned; an error says which entry (``label``) it is about."""
        images = ImageSource(self.hv, proxy, **self.image_options)
        guest_budget = GuestBudget.of_proxy(proxy.wait_timeout, self.timing.monotonic)
        try:
            observation = observe_proxy(self.hv, proxy, images, listed, guest_budget=guest_budget,
                                        now=self.timing.clock())
            planned = plan(proxy, observation)
        except KvmError as error:
            if label is None:
                raise
            raise error.after("%s: %s" % (label, error.message), error.completed_actions or []) from error
        return Member(proxy, label, images, observation, planned, planned.result, guest_budget,
                      self.timing.deadline(proxy.wait_timeout))

    def _execute(self, members, removals, done):
        """First what adds capacity or costs none, awaited; then what takes capacity away, ``max_unavailable`` at a time.

        A running proxy that garbage collection removes takes capacity away like a replacement: it goes last, once
        the proxies that take its place are up, so a set whose new proxies fail keeps its old ones running. A set of
        one has no other proxy to keep serving while it is replaced: nothing rolls.
        """
        rolling = [] if self.request.single else [m for m in members if m.rolls] + [m for m in removals if m.serving]
        try:
            self._run_together([m for m in members + removals if m not in rolling], done)
            self._await([m for m in members if m.awaited and m not in rolling])
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
            errors = list(workers.map(self._attempt, busy))
        failed = []
        for member, error in zip(busy, errors):
            actions = member.plan.actions if error is None else error.completed_actions or []
            done.extend(member.labelled(action) for action in actions)
            if error is not None:
                failed.append(member.labelled(error.message, "proxy '%s'" % member.request.name))
        first = next((error for error in errors if error is not None), None)
        if first is not None:
            raise first.after("; ".join(failed), done) from first

    def _attempt(self, member):
        """Carry out one member's plan; the KvmError it raised, or None."""
        pool = member.observation.build.pool if member.observation.build is not None else None
        try:
            member.outcome = carry_out(self.hv, member.request, member.plan, member.images, self.timing, pool,
                                       member.guest_budget, member.wait)
        except KvmError as error:
            return error
        return None

    def _await(self, members):
        """Wait until every proxy of ``members`` has its address (and answers on the port): its first NIC's IPv4, or
        IPv6 when that NIC is IPv6-only, and a member of an HA group its first boot over too; each within its
        wait_timeout, counted from its first wait in the run (its agent and first boot before a policy was applied) or
        from now.

        Without wait_for_ip nothing is awaited, so replacements do not roll: nothing tells when one is up.
        """
        if not self.request.wait_for_ip or not members:
            return
        awaited = []
        for member in members:
            dom, info = member.settle(self.hv)
            macs = info.macs()
            first = member.request.interfaces[0]
            awaited.append(Awaited(member.request.name, dom, macs[0] if macs else None, first.source, member.wait,
                                   first.wanted))
        await_ipv4(self.hv, awaited, self.timing, self.request.wait_for_port)
        # A proxy that releases its service before a shutdown (an HA group's member) can take the group's address only
        # once its first boot has started keepalived, which comes after squid answers: until then another member's
        # hand-over would find nobody to give the address to, so it counts as up only then.
        for member in members:
            if member.request.policy is not None and member.request.policy.release:
                agent = GuestAgent(self.hv, member.settle(self.hv)[0], member.request.name, self.timing,
                                   member.guest_budget)
                try:
                    await_booted(agent, member.wait, booting=True)
                except UNUSABLE_AGENT as error:
                    raise agent_failure(error) from error

    def _result(self, member):
        # A proxy the run did not touch is described as observed: its state and autostart are not asked again.
        settle = None if self.check_mode or not member.plan.steps else lambda: member.settle(self.hv)
        described = describe_proxy(self.hv, self.host, member.request, member.observation, member.outcome, settle)
        return ProxyResult(member.request, self.host, member.observation, member.plan, member.outcome, described)


def _image_option(using, count):
    """The option that gives the image ``using`` ((index, ProxyRequest) of its proxies) build from, for its failure."""
    name = quoted(using[0][1].image.name)
    if len(using) == count:
        return "image %s (option image)" % name
    return "image %s (of %s)" % (name, ", ".join("proxies[%d] (%s)" % (index, proxy.name) for index, proxy in using))


def _untouched(rolling, members):
    """The end of a failed run's message: the proxies it did not replace and the unlisted ones it did not remove."""
    replacing = [m.request.name for m in rolling if m in members]
    unlisted = [m.request.name for m in rolling if m not in members]
    parts = []
    if replacing:
        parts.append("%s still run%s on the old VM" % (", ".join(replacing), "s" if len(replacing) == 1 else ""))
    if unlisted:
        parts.append("%s, no longer listed, still run%s: garbage collection removes a running proxy only once the new "
                     "ones are up" % (", ".join(unlisted), "s" if len(unlisted) == 1 else ""))
    return "; the roll stopped: %s" % "; ".join(parts) if parts else ""
