# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What kvm_proxy and kvm_proxy_set return: a proxy's result and diff, and the set's.

Both follow _common.plan's result protocol (``actions``, ``changed``,
``as_dict()``, ``diff()``). A proxy's result describes its domain as the run
leaves it (``describe_proxy``); in check mode, as it is now, or as it would
be created.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass
from typing import Any

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import (
    format_domain_id,
    overlay_volume_name,
    seed_volume_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.plan import Result
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT, STATE_PRESENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import (
    VIR_DOMAIN_SHUTOFF,
    is_active,
    libvirt_state_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.interfaces import describe_interfaces, egress_index
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.inventory import inspect_domain
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import STATE_STOPPED, base_volume_of
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.verdict import (
    CLEAN,
    CREATE,
    KEEP,
    LEAVE,
    REMOVE,
    REPLACE,
    UNMANAGED,
)

_DESCRIBED = ("state", "libvirt_state", "ip", "ipv6", "ip_sources", "uid", "created_at", "spec_digest",
              "policy_digest", "autostart", "interfaces", "egress_ip", "egress_ipv6", "egress_address", "egress_address6")

# A set's summary of what happened to a proxy, by its verdict.
_OUTCOMES = {CREATE: "created", REPLACE: "replaced", REMOVE: "removed", LEAVE: "left alone (another owner)"}
# A listed domain to remove that this collection did not create.
LEFT_UNMANAGED = "left alone (unmanaged)"


def describe_proxy(hypervisor, host, request, observation, outcome, settle):
    """state, ip, uid, created_at, spec_digest, mac, autostart and NICs of the domain as the run leaves it.

    ``settle()`` gives ``(handle, DomainInfo)`` of that domain after a run
    that carried out steps. It is None in check mode and when the run had
    nothing to do: then this is the domain as it was observed (a VM to be
    replaced included; its state and autostart are not asked again), or the
    prediction for one that would be created.
    """
    absent = dict.fromkeys(("state", "libvirt_state", "ip", "ipv6", "egress_ip", "egress_ipv6", "egress_address",
                            "egress_address6", "uid", "created_at", "spec_digest", "policy_digest", "mac", "autostart"))
    absent.update(ip_sources={}, interfaces=[])
    if request.state == STATE_ABSENT and outcome.verdict.kind != LEAVE:
        return absent
    domain = observation.domain
    if settle is not None:
        dom, info = settle()
        # An adopted domain's new owner is in its metadata, not in the XML read before.
        return _entry(hypervisor, host, dom, info, outcome.uid)
    if domain is None:
        egress = request.interfaces[egress_index(nic.role for nic in request.interfaces)]
        interfaces = describe_interfaces(request.interfaces, [nic.role for nic in request.interfaces], {})
        absent.update(uid=outcome.uid, spec_digest=outcome.digest, policy_digest=outcome.policy_digest,
                      mac=request.interfaces[0].mac, autostart=request.autostart, interfaces=interfaces,
                      egress_address=egress.ip, egress_address6=egress.ip6)
        return absent
    return _entry(hypervisor, host, domain.handle, domain.info, domain.metadata.uid if domain.metadata else None,
                  (domain.state, domain.autostart))


def _entry(hypervisor, host, dom, info, uid, status=None):
    # Whether a member holds its group's address is kvm_proxy_info's to tell: no agent call for it here.
    entry = inspect_domain(hypervisor, dom, host, info, status, holder=False)
    described = {key: entry[key] for key in _DESCRIBED}
    described["uid"] = uid
    described["mac"] = entry["macs"][0] if entry["macs"] else None
    return described


@dataclass(frozen=True)
class ProxyResult(Result):
    """What kvm_proxy returns for its proxy (and kvm_proxy_set, in ``set_entry``, for each of its proxies)."""

    request: Any  # _proxy.request.ProxyRequest
    host: str
    observation: Any  # _proxy.observe.Observation
    plan: Any  # the _common.plan.Plan of _proxy.plan
    outcome: Any  # its _proxy.plan.Outcome, as the run left it
    described: dict  # describe_proxy's

    @property
    def actions(self):
        return self.plan.actions

    def as_dict(self):
        request = self.request
        result = {
            "changed": self.changed,
            "actions": self.actions,
            "drifted": self.outcome.verdict.drifted,
            "name": request.name,
            "host": self.host,
            "id": format_domain_id(self.host, request.name),
            "volumes": self._volumes(),
            "policy_drift": list(self.outcome.policy_drift),
        }
        result.update(self.described)
        if self.outcome.warnings:
            result["warnings"] = list(self.outcome.warnings)
        return result

    def set_entry(self):
        """kvm_proxy_set's entry for this proxy: the result with its ``outcome`` and the ``reason`` of a left-alone one."""
        entry = self.as_dict()
        verdict = self.outcome.verdict
        entry["reason"] = None
        if verdict.kind == KEEP:
            entry["outcome"] = "updated" if self.changed else "unchanged"
        elif verdict.kind == CLEAN:
            entry["outcome"] = "cleaned" if self.changed else "absent"
        elif verdict.kind == LEAVE:
            entry["outcome"] = LEFT_UNMANAGED if verdict.owner == UNMANAGED else _OUTCOMES[LEAVE]
            entry["reason"] = self.outcome.warnings[0]
        else:
            entry["outcome"] = _OUTCOMES[verdict.kind]
        return entry

    def _volumes(self):
        """Names of the VM's volumes, in the pool they were found in for a removal.

        The base is null when only a download would tell (checksum given as a URL).
        """
        request, planned, observation = self.request, self.plan.result, self.observation
        found = [volume.pool for volume in observation.own_volumes]
        pool = found[0] if request.state == STATE_ABSENT and found else request.pool
        if planned.base is not None:
            base = planned.base.volume
        elif planned.kept and planned.verdict.drifted:
            base = base_volume_of((observation.domain.spec or {}).get("image"))
        elif planned.spec is not None:
            base = base_volume_of(planned.spec["image"])
        else:
            base = None
        return {"pool": pool, "overlay": overlay_volume_name(request.name), "seed": seed_volume_name(request.name),
                "base": base}

    def diff(self):
        request, outcome, domain = self.request, self.outcome, self.observation.domain
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
                "policy_digest": metadata.policy_digest if metadata is not None else None,
            }
        if outcome.verdict.kind == LEAVE:
            after = dict(before)
        elif request.state == STATE_ABSENT:
            after = {"state": STATE_ABSENT}
        elif outcome.kept:
            after = dict(before, state=request.state, autostart=request.autostart, uid=self.plan.result.uid,
                         policy_digest=self.plan.result.policy_digest)
        else:
            after = {
                "state": request.state,
                "managed": True,
                "uid": outcome.uid,
                "spec_digest": outcome.digest,
                "spec": outcome.spec,
                "autostart": request.autostart,
                "policy_digest": outcome.policy_digest,
            }
        self._policy_diff(before, after)
        return {"before": before, "after": after}

    def _policy_diff(self, before, after):
        """The policy files in the diff: as the guest holds them (when read back) and as the VM gets them."""
        policy, guest = self.request.policy, self.observation.guest_policy
        if policy is None or self.request.state == STATE_ABSENT or self.outcome.verdict.kind == LEAVE:
            return
        if guest is not None and guest.unavailable is None:
            before["policy"] = policy.shown(guest.contents)
        # A new VM's seed carries the policy, a kept one gets what this run writes; one that gets nothing keeps its own.
        if not self.outcome.kept or self.outcome.policy_paths:
            after["policy"] = policy.shown(policy.contents())
        elif "policy" in before:
            after["policy"] = before["policy"]


def _diff_state(state):
    """A domain's state as the diff shows it: present, stopped, or libvirt's name (paused, crashed, ...)."""
    if is_active(state):
        return STATE_PRESENT
    if state == VIR_DOMAIN_SHUTOFF:
        return STATE_STOPPED
    return libvirt_state_name(state)


@dataclass(frozen=True)
class SetResult(Result):
    """What kvm_proxy_set returns: each proxy's entry, the garbage collection's removals, and what it did not touch."""

    host: str
    proxies: tuple  # ProxyResult of each proxy, in the request's order
    removed: tuple  # ProxyResult of each proxy the garbage collection removed
    foreign: list
    spared: list
    warnings: list
    images: tuple = ()  # _image.cache.ImageResult of each image the set made ready first (and pruned)

    @property
    def actions(self):
        return ([action for image in self.images for action in image.as_dict()["actions"]]
                + [action for result in self.proxies + self.removed for action in result.actions])

    def as_dict(self):
        result = {
            "changed": self.changed,
            "host": self.host,
            "images": [image.as_dict() for image in self.images],
            "proxies": [proxy.set_entry() for proxy in self.proxies],
            "removed": [proxy.set_entry() for proxy in self.removed],
            "foreign": self.foreign,
            "spared": self.spared,
        }
        if self.warnings:
            result["warnings"] = list(self.warnings)
        return result

    def diff(self):
        diffs = [(proxy.request.name, proxy.diff()) for proxy in self.proxies + self.removed]
        return {"before": {name: diff["before"] for name, diff in diffs},
                "after": {name: diff["after"] for name, diff in diffs}}
