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
