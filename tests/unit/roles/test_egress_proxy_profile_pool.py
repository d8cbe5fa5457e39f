# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A profile's egress address from the outside pool (issue 43 item 1, ``egress_address: pool``), as the role renders it.

The allocation (tests/unit/plugins/plugin_utils/test_egress_pool.py) gives the address; from there on it is checked and
rendered as a hand-given one (the role's path: proxy_instances, the templates, proxy_set_args), and the policy names it
for the domain's metadata to record (policy.pooled_addresses).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_instances import proxy_instances
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import member_view
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import (
    EGRESS_ADDRESSES,
    SQUID_CONF,
    policy_files,
    role_set_args,
    role_variables,
    squid_parsed,
)
from ansible_collections.egress_proxies.kvm.tests.unit.roles.test_egress_proxy_profiles import (
    BACKUP,
    BASE,
    CI,
    ENTRY,
    HA_FOUND,
    HA_GROUPS,
    USERS,
)

POOL_OUTSIDE = {"gateway": "203.0.113.1", "prefix": "203.0.113.0/24", "pool": ["203.0.113.100-203.0.113.120"]}
# The allocation's for hv1 (tasks/pool.yml): egress-1 keeps its own outside.address (ENTRY's), backup's from the pool.
ALLOCATED = {"egress-1": {"profiles": {"backup": {"egress_address": "203.0.113.100"}}}}
PROFILES = [dict(CI, egress_address="203.0.113.11"), dict(BACKUP, egress_address="pool")]


def proxy(profiles=None, allocated=None, **overrides):
    """kvm_proxy_set's proxy for ENTRY with BASE, USERS, the pooled outside and ``overrides``."""
    variables = {**BASE, "egress_proxy_users": USERS, "egress_proxy_outside": POOL_OUTSIDE,
                 "egress_proxy_profiles": PROFILES if profiles is None else profiles,
                 "egress_proxy__pool_addresses": ALLOCATED if allocated is None else allocated, **overrides}
    (converged,) = role_set_args([dict(ENTRY)], **variables)["proxies"]
    return converged


def test_a_pooled_profile_address_renders_exactly_as_a_hand_given_one_and_squid_accepts_it(tmp_path):
    pooled = proxy()
    # The same address given by hand, on a pool that does not hold it (a pool's address cannot be given by hand).
    by_hand = proxy(profiles=[PROFILES[0], dict(BACKUP, egress_address="203.0.113.100")], allocated={},
                    egress_proxy_outside=dict(POOL_OUTSIDE, pool=["203.0.113.101-203.0.113.120"]))
    assert pooled["policy"].pop("pooled_addresses") == {"backup": {"egress_address": "203.0.113.100"}}
    assert pooled == by_hand
    files = policy_files(pooled)
    assert "tcp_outgoing_address 203.0.113.100 profile_backup" in squid_parsed(files[SQUID_CONF]["content"], tmp_path)
    assert files[EGRESS_ADDRESSES]["content"] == "203.0.113.11/24 nic1\n203.0.113.100/24 nic1\n"


def test_a_policy_without_pooled_profile_addresses_names_none():
    """Its digest and its domain's metadata stay what they were: no proxy is touched by the upgrade."""
    assert "pooled_addresses" not in proxy(profiles=[PROFILES[0]])["policy"]
    assert "pooled_addresses" not in proxy(profiles=[])["policy"]


def test_role_wide_profiles_give_each_proxy_its_own_pooled_address():
    allocated = {"egress-1": {"profiles": {"backup": {"egress_address": "203.0.113.100"}}},
                 "egress-2": {"address": "203.0.113.101/24", "profiles": {"backup": {"egress_address": "203.0.113.102"}}}}
    variables = role_variables(**{**BASE, "egress_proxy_users": USERS, "egress_proxy_outside": POOL_OUTSIDE,
                                  "egress_proxy_profiles": [dict(BACKUP, egress_address="pool")],
                                  "egress_proxy__pool_addresses": allocated})
    second = {"name": "egress-2", "address": "198.51.100.6/24", "outside": {"bridge": "br1"}}
    instances = proxy_instances([dict(ENTRY), second], variables)
    assert [(instance["outside"].get("address"), instance["profiles"][0]["egress_address"], instance["pooled_addresses"])
            for instance in instances] == [
        ("203.0.113.5/24", "203.0.113.100", {"backup": {"egress_address": "203.0.113.100"}}),
        ("203.0.113.101/24", "203.0.113.102", {"backup": {"egress_address": "203.0.113.102"}})]


def refusal(**overrides):
    with pytest.raises(AnsibleFilterError) as refused:
        proxy(**overrides)
    message = str(refused.value)
    assert "egress-1 on hv1" in message, message
    return message


@pytest.mark.parametrize("overrides, words", [
    # No pool on the hypervisor: the allocation did not run, and pool is left as given.
    ({"egress_proxy_outside": {"gateway": "203.0.113.1"}, "allocated": {}},
     "profiles[1] (backup).egress_address is pool, but the proxy's hypervisor has no egress_proxy_outside.pool to "
     "give the profile an address of: give the pool, or the profile an address of its own"),
    ({"profiles": [dict(BACKUP, egress_address="Pool")]},
     "profiles[0] (backup).egress_address 'Pool' is not an IPv4 address (without a prefix length: it takes the egress "
     "NIC's) or pool (one more address of egress_proxy_outside.pool)"),
    ({"profiles": [dict(BACKUP, egress_address6="pool\n")]}, "profiles[0] (backup).egress_address6 'pool\\n' is not an "
                                                             "IPv6 address"),
    # What the allocation gives goes through every check of a hand-given address: one of another profile...
    ({"profiles": [dict(CI, egress_address="203.0.113.100"), dict(BACKUP, egress_address="pool")]},
     "profiles[0] (ci).egress_address 203.0.113.100 is in egress_proxy_outside.pool"),
    # ...or one outside the egress NIC's segment.
    ({"allocated": {"egress-1": {"profiles": {"backup": {"egress_address": "198.51.100.100"}}}}},
     "profiles[1] (backup).egress_address 198.51.100.100 is not a host address of 203.0.113.0/24"),
], ids=["no pool", "Pool", "pool and a line feed", "another profile's", "outside the segment"])
def test_a_bad_pool_is_refused_naming_the_profile_and_the_key(overrides, words):
    message = refusal(**overrides)
    assert words in message, message


def test_an_ha_members_pooled_profile_address_counts_among_its_profile_addresses():
    groups = [{"name": "office", "address": "198.51.100.10", "members": ["egress-1", "egress-2"]}]
    entry = dict(ENTRY, profiles=[dict(BACKUP, egress_address="pool")])
    (view,) = member_view([entry], groups, {"egress_proxy__pool_addresses": ALLOCATED}, "hv1")
    assert (view["outside_address"], view["profile_addresses"]) == ("203.0.113.5/24", ["203.0.113.100"])


def test_an_ha_members_policy_names_its_group_and_its_profiles_pooled_addresses():
    policy = proxy(egress_proxy_ha_groups=HA_GROUPS, egress_proxy__ha=HA_FOUND)["policy"]
    assert (policy["group"]["name"], policy["pooled_addresses"]) == (
        "office", {"backup": {"egress_address": "203.0.113.100"}})
