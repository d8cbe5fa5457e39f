# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The role's allocation over the play as tasks/pool.yml runs it: each hypervisor's view (egress_pool_view) and
listing (kvm_proxy_info) read through hostvars, the inventory's other hypervisors through their own variables."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.filter.egress_addresses import egress_addresses
from ansible_collections.egress_proxies.kvm.plugins.filter.egress_pool_view import egress_pool_view

POOL = ["198.18.21.10-198.18.21.12"]
OUTSIDE = {"bridge": "br1", "prefix": "198.18.21.0/24", "pool": POOL}


def host(instances, proxies=None):
    """A hypervisor's hostvars after tasks/pool.yml's first two tasks; proxies None: its listing failed."""
    listing = {"failed": True, "msg": "libvirt did not answer"} if proxies is None else {"proxies": proxies}
    return {"egress_proxy__pool_view": egress_pool_view(instances, OUTSIDE, "present"),
            "egress_proxy__pool_listing": listing, "egress_proxy_outside": OUTSIDE}


def test_the_play_gets_unique_addresses_and_the_view_keeps_no_password():
    users = [{"name": "alice", "password": "s3cret"}]
    hostvars = {"hv1": host([{"name": "a", "users": users}, {"name": "b"}], [{"name": "b", "egress_address": "198.18.21.12"}]),
                "hv2": host([{"name": "c"}], [])}
    assert "s3cret" not in repr(hostvars["hv1"]["egress_proxy__pool_view"])
    assert egress_addresses(["hv1", "hv2"], hostvars, [], ["hv1", "hv2"]) == {
        "hv1": {"a": {"address": "198.18.21.10/24"}, "b": {"address": "198.18.21.12/24"}},
        "hv2": {"c": {"address": "198.18.21.11/24"}}}


@pytest.mark.parametrize("hosts, play", [
    ({"hv1": host([{"name": "a"}], []), "hv2": host([{"name": "c"}])}, ["hv1", "hv2"]),
    ({"hv1": host([{"name": "a"}], []), "hv2": {"egress_proxy_outside": OUTSIDE}}, ["hv1"]),
], ids=["listing failed", "not in the play"])
def test_a_pool_shared_with_a_hypervisor_not_listed_is_refused(hosts, play):
    with pytest.raises(AnsibleFilterError) as raised:
        egress_addresses(play, hosts, [], sorted(hosts))
    assert raised.value.message.startswith("egress_proxy_outside.pool of hv1 shares addresses with "
                                           "egress_proxy_outside.pool of hv2, whose proxies were not listed")


def test_an_inventory_host_without_a_pool_is_no_concern():
    hostvars = {"hv1": host([{"name": "a"}], []), "hv3": {}}
    assert egress_addresses(["hv1"], hostvars, [], ["hv1", "hv3"]) == {"hv1": {"a": {"address": "198.18.21.10/24"}}}


def grouped(variables, *groups):
    """A host's hostvars with its inventory groups (the magic group_names)."""
    return dict(variables, group_names=list(groups))


def hidden(instances, proxies=None):
    """A hypervisor of the play whose pool came from the play's vars: its view has it, its hostvars do not."""
    variables = host(instances, proxies)
    del variables["egress_proxy_outside"]
    return variables


@pytest.mark.parametrize("hv1, hv2, words", [
    (hidden([{"name": "a"}], []), {},
     ["is not an inventory variable (set in the play's vars:), so the same play would give it to hv2 too"]),
    (host([{"name": "a"}], []), {}, ["the inventory shows hv2 no egress_proxy_outside.pool"]),
    (hidden([{"name": "a"}], []), {"egress_proxy_outside": OUTSIDE},
     ["is not an inventory variable (set in the play's vars:)"]),
], ids=["play vars", "include_vars on the play's hosts only", "play vars over an inventory pool"])
def test_a_pool_not_shown_for_a_hypervisor_outside_the_play_is_refused(hv1, hv2, words):
    """Issue 40 item 3: --limit hv1 with the pool in the play's vars: (or include_vars, which hostvars show for the
    hosts that ran it only) gave hv1's proxy the address hv2's proxy already had; hv2 shares the group hypervisors."""
    hostvars = {"hv1": grouped(hv1, "hypervisors"), "hv2": grouped(hv2, "hypervisors"), "prometheus": grouped({}, "monitoring")}
    with pytest.raises(AnsibleFilterError) as raised:
        egress_addresses(["hv1"], hostvars, [], ["hv1", "hv2", "prometheus"])
    message = raised.value.message
    assert message.startswith("egress_proxy_outside.pool of hv1 cannot be proven unique: hv2, in group hypervisors "
                              "with hv1, was not listed in this run (outside the play: --limit, a sliced AWX job or a "
                              "play on other hosts; or unreachable, or failed before its listing)"), message
    assert all(word in message for word in words), message
    assert message.endswith("without --limit or job slicing. Nothing was changed."), message


@pytest.mark.parametrize("play, hv2", [
    (["hv1", "hv2"], {}),  # both in the play: both listed
    (["hv1"], {"egress_proxy_outside": {"bridge": "br1", "pool": ["198.18.22.10"]}}),  # its own pool, shown
], ids=["no hypervisor outside the play", "the other pool is shown and apart"])
def test_a_pool_provable_unique_is_allocated(play, hv2):
    hostvars = {"hv1": grouped(hidden([{"name": "a"}], []) if len(play) == 2 else host([{"name": "a"}], []), "hypervisors"),
                "hv2": grouped(host([], []) if len(play) == 2 else hv2, "hypervisors"),
                "prometheus": grouped({}, "monitoring")}
    assert egress_addresses(play, hostvars, [], ["hv1", "hv2", "prometheus"])["hv1"] == {"a": {"address": "198.18.21.10/24"}}


def test_a_hypervisor_of_the_play_that_failed_before_its_listing_is_not_given_away():
    """Hunt on item 3: hv2 unreachable (no view, no listing) while the pool is in the play's vars: its hostvars show no
    pool, so the allocation would have handed out the addresses its proxies hold."""
    hostvars = {"hv1": grouped(hidden([{"name": "a"}], []), "hypervisors"), "hv2": grouped({}, "hypervisors")}
    with pytest.raises(AnsibleFilterError) as raised:
        egress_addresses(["hv1", "hv2"], hostvars, [], ["hv1", "hv2"])
    assert raised.value.message.startswith("egress_proxy_outside.pool of hv1 cannot be proven unique: hv2, in group "
                                           "hypervisors with hv1, was not listed in this run"), raised.value.message


def test_profiles_get_their_addresses_through_the_views_and_keep_them_by_the_listing():
    """A profile's pool comes through the view: the instance's own profiles, else the hypervisor's
    egress_proxy_profiles; the listing's pooled_addresses keep them."""
    backup = {"name": "backup", "clients": ["10.20.7.0/24"], "egress_address": "pool"}
    hv1 = host([{"name": "a", "profiles": [backup]}, {"name": "b"}],
               [{"name": "a", "egress_address": "198.18.21.10",
                 "pooled_addresses": {"backup": {"egress_address": "198.18.21.12"}}}])
    assert "10.20.7.0" not in repr(hv1["egress_proxy__pool_view"])
    assert egress_addresses(["hv1"], {"hv1": hv1}, [], ["hv1"]) == {"hv1": {
        "a": {"address": "198.18.21.10/24", "profiles": {"backup": {"egress_address": "198.18.21.12"}}},
        "b": {"address": "198.18.21.11/24"}}}
    # The pool has three addresses: b's profile from egress_proxy_profiles (web) finds none.
    hv1["egress_proxy__pool_view"] = egress_pool_view([{"name": "a", "profiles": [backup]}, {"name": "b"}], OUTSIDE,
                                                      "present", [dict(backup, name="web")])
    with pytest.raises(AnsibleFilterError) as raised:
        egress_addresses(["hv1"], {"hv1": hv1}, [], ["hv1"])
    assert "1 address missing" in raised.value.message
    assert "(none for egress_proxy_profiles[0] (web).egress_address of b)" in raised.value.message
