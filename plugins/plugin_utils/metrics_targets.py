# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The Prometheus scrape targets of the egress proxies: a file_sd file of every metrics endpoint the fleet should have.

Each hypervisor's targets come from the role's instances (what the inventory wants running) and what libvirt lists
(their addresses now); the file joins every hypervisor's. A hypervisor that was not listed this run keeps the targets
the file had for it: an unreachable hypervisor's proxies must go on being scraped (and alerted on), not vanish.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_PRESENT


def _endpoint(address, port):
    host = address.split("/")[0]
    return "[%s]:%d" % (host, port) if ipaddress.ip_address(host).version == 6 else "%s:%d" % (host, port)


def hypervisor_targets(hypervisor, owner, instances, listed):
    """The target groups of one hypervisor: every instance it should run (state present) with metrics on, at the address
    libvirt lists for it, else its static inside address. ``instances`` are the role's (proxy_instances), ``listed``
    the proxies kvm_proxy_info or kvm_proxy_set returned. Returns ``(groups, unaddressed)``: the file_sd groups, and
    the names of the proxies with no address known yet (DHCP, not running), which cannot be targets."""
    addresses = {proxy["name"]: proxy.get("ip") for proxy in listed or []}
    groups, unaddressed = [], []
    for instance in instances:
        if instance["state"] != STATE_PRESENT or not instance.get("metrics"):
            continue
        address = addresses.get(instance["name"]) or instance.get("address")
        if not address:
            unaddressed.append(instance["name"])
            continue
        groups.append({"targets": [_endpoint(address, int(instance["metrics_port"]))],
                       "labels": {"hypervisor": hypervisor, "proxy": instance["name"], "owner": owner}})
    return groups, unaddressed
