# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Egress address pools: parsing, the checks of pools and hand-given addresses, and the fleet's allocation.

The allocation is run as the role runs it, once over the play's hypervisors, each with its variables and the
listing of its domains with their recorded egress addresses; a run's result becomes the next run's listing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import control_character
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_pool import PoolError, fleet_allocation, parse_pool, pool_view

OUTSIDE = {"bridge": "br1", "gateway": "198.18.21.1"}


def hypervisor(name, pool, instances, proxies=(), prefix=None, state="present", prefix6=None):
    outside = dict(OUTSIDE, pool=pool)
    if prefix is not None:
        outside["prefix"] = prefix
    if prefix6 is not None:
        outside["prefix6"] = prefix6
    return {"name": name, "outside": outside, "state": state, "instances": instances, "proxies": list(proxies)}


def proxies(*names):
    return [{"name": name} for name in names]


def listing(allocation, host):
    """kvm_proxy_info's listing of ``host`` once the proxies of ``allocation`` run there (their address recorded)."""
    return [{"name": name, "egress_address": address.partition("/")[0]}
            for name, address in sorted(allocation[host].items())]


def allocated(hypervisors, fleet=None, field="address"):
    """fleet_allocation's addresses of one family (``field``: address or address6), by hypervisor and proxy."""
    return {host: {proxy: fields[field] for proxy, fields in proxies.items() if field in fields}
            for host, proxies in fleet_allocation(hypervisors, fleet).items()}


def refusal(hypervisors, fleet=None):
    with pytest.raises(PoolError) as caught:
        fleet_allocation(hypervisors, fleet)
    return caught.value.message


# --- parsing ---------------------------------------------------------------------------------------------------


def test_entries_of_every_kind_are_sorted_by_address():
    pool = parse_pool(["198.18.21.40", "2001:db8:0:7::/64", "198.18.21.10-198.18.21.20", "198.18.21.64/30"], "hv1")
    assert [(str(entry.first), str(entry.last), entry.prefix_length) for entry in pool] == [
        ("198.18.21.10", "198.18.21.20", None), ("198.18.21.40", "198.18.21.40", None),
        # An IPv4 prefix without its network and broadcast address; an IPv6 one without its subnet-router anycast.
        ("198.18.21.65", "198.18.21.66", 30), ("2001:db8:0:7::1", "2001:db8:0:7:ffff:ffff:ffff:ffff", 64)]


def test_a_31_and_a_32_give_every_address():
    pool = parse_pool(["198.18.21.0/31", "198.18.21.8/32"], "hv1")
    assert [entry.size for entry in pool] == [2, 1]


@pytest.mark.parametrize("text, says", [
    ("198.18.21.20-198.18.21.10", "runs backwards; write it lowest first: 198.18.21.10-198.18.21.20"),
    ("198.18.21.5/24", "host bits set: did you mean 198.18.21.0/24?"),
    ("198.18.21.1-2001:db8::1", "not a range of two IPv4 or two IPv6 addresses"),
    ("198.18.21.1-", "not a range"),
    ("198.18.21.0/33", "is not a prefix"),
    ("egress.example", "is not an IPv4 or IPv6 address"),
    (42, "is not text"),
])
def test_a_wrong_entry_is_refused_naming_it(text, says):
    message = refusal([hypervisor("hv1", ["198.18.21.100", text], proxies("a"), prefix="198.18.21.0/24")])
    assert message.startswith("egress_proxy_outside.pool[1] of hv1: ")
    assert says in message


# Line breaks for a YAML or network-config reader, a comment, quotes, blanks, other scripts' digits, an IPv6 scope
# (ipaddress takes any text after %), an endless value: each inside an otherwise valid entry.
HOSTILE = ["\n", "\r", "\x00", "\u2028", "\u0085", "%1", "%eth0\n", "#", '"', "'", " ", "\t", "\u00b2",
           "\u0668\u0660", "\uff18\uff10", "9" * 5000]
SHAPES = [lambda text: "198.18.21.10" + text, lambda text: text + "198.18.21.10",
          lambda text: "198.18.21.10-198.18.21.20" + text, lambda text: "198.18.21.10" + text + "-198.18.21.20",
          lambda text: "198.18.21.0/24" + text, lambda text: "2001:db8::" + text + "/64",
          lambda text: "fe80::1" + text + "-fe80::9"]


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_hostile_text_in_an_entry_is_refused_naming_it(text, shape):
    message = refusal([hypervisor("hv1", [SHAPES[shape](text)], proxies("a"))])
    assert message.startswith("egress_proxy_outside.pool[0] of hv1: ")
    # The entry quoted, cut and with its control characters escaped: the message itself holds none, and stays short.
    assert control_character(message) is None
    assert len(message) < 400


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_in_the_prefix_is_refused_naming_it(text):
    message = refusal([hypervisor("hv1", ["198.18.21.10"], proxies("a"), prefix="198.18.21.0/24" + text)])
    assert message.startswith("egress_proxy_outside.prefix of hv1: ")


def test_overlapping_entries_are_refused_naming_both():
    message = refusal([hypervisor("hv1", ["198.18.21.0/28", "198.18.21.30", "198.18.21.10-198.18.21.20"],
                                  proxies("a"))])
    assert message == ("egress_proxy_outside.pool[0] of hv1 (198.18.21.0/28) and egress_proxy_outside.pool[2] of hv1 "
                       "(198.18.21.10-198.18.21.20) overlap; give each address of the pool once")


def test_an_empty_pool_entry_list_is_no_pool():
    assert allocated([hypervisor("hv1", [], [])]) == {"hv1": {}}


def test_a_range_needs_the_nic_prefix_for_its_prefix_length():
    message = refusal([hypervisor("hv1", ["198.18.21.10-198.18.21.20"], proxies("a"))])
    assert message.startswith("egress_proxy_outside.pool[0] of hv1: 198.18.21.10-198.18.21.20 gives its addresses no "
                              "prefix length; give egress_proxy_outside.prefix of hv1")


def test_a_pool_with_no_address_in_the_nic_prefix_is_refused():
    message = refusal([hypervisor("hv1", ["198.18.22.10-198.18.22.20"], proxies("a"), prefix="198.18.21.0/24")])
    assert "has no IPv4 address inside egress_proxy_outside.prefix 198.18.21.0/24" in message


# --- hand-given addresses and other pools ----------------------------------------------------------------------


def test_a_pool_address_given_by_hand_is_refused_naming_the_proxy_variable():
    instances = [{"name": "a"}, {"name": "b"}, {"name": "c", "outside": {"address": "198.18.21.12/24"}}]
    message = refusal([hypervisor("hv1", ["198.18.21.10-198.18.21.20"], instances, prefix="198.18.21.0/24")])
    assert message.startswith('egress_proxy_instances[2].outside.address of "c" on hv1: 198.18.21.12 is in '
                              "egress_proxy_outside.pool[0] of hv1 (198.18.21.10-198.18.21.20)")


def test_another_hypervisors_pool_counts_too_and_fleet_entries_are_named_as_such():
    fleet = [{"name": "x", "hypervisor": "hv1"}, {"name": "y", "hypervisor": "hv2", "outside": {"address": "198.18.21.11/24"}}]
    message = refusal([hypervisor("hv1", ["198.18.21.10-198.18.21.20"], [], prefix="198.18.21.0/24"),
                       {"name": "hv2", "outside": dict(OUTSIDE), "state": "present", "instances": [], "proxies": []}],
                      fleet)
    assert message.startswith('egress_proxy_fleet[1].outside.address of "y" on hv2: 198.18.21.11 is in '
                              "egress_proxy_outside.pool[0] of hv1")


def test_a_hand_given_address_outside_the_nic_prefix_is_refused():
    instances = [{"name": "a"}, {"name": "b", "outside": {"address": "198.18.22.5/24"}}]
    message = refusal([hypervisor("hv1", ["198.18.21.10-198.18.21.20"], instances, prefix="198.18.21.0/24")])
    assert message == ('egress_proxy_instances[1].outside.address of "b" on hv1: 198.18.22.5 is outside '
                       "egress_proxy_outside.prefix 198.18.21.0/24, the outside NIC's segment")


def test_a_removed_proxys_hand_given_address_is_not_checked():
    instances = [{"name": "a"}, {"name": "b", "state": "absent", "outside": {"address": "198.18.21.10/24"}}]
    assert allocated([hypervisor("hv1", ["198.18.21.10-198.18.21.20"], instances, prefix="198.18.21.0/24")]) == {
        "hv1": {"a": "198.18.21.10/24"}}


def test_overlapping_pools_that_differ_are_refused_and_the_same_pool_is_shared():
    one = hypervisor("hv1", ["198.18.21.10-198.18.21.20"], proxies("a"), prefix="198.18.21.0/24")
    other = hypervisor("hv2", ["198.18.21.15-198.18.21.30"], proxies("b"), prefix="198.18.21.0/24")
    assert refusal([one, other]) == (
        "egress_proxy_outside.pool[0] of hv1 (198.18.21.10-198.18.21.20) and egress_proxy_outside.pool[0] of hv2 "
        "(198.18.21.15-198.18.21.30) overlap, and the two pools differ: give hypervisors that share addresses the "
        "same pool, or pools with no address in common")
    shared = hypervisor("hv2", ["198.18.21.10-198.18.21.20"], proxies("b"), prefix="198.18.21.0/24")
    assert allocated([one, shared]) == {"hv1": {"a": "198.18.21.10/24"}, "hv2": {"b": "198.18.21.11/24"}}


# --- allocation ------------------------------------------------------------------------------------------------


def fleet(pool=("198.18.21.10-198.18.21.20",), hv1=("a", "b", "c"), hv2=("d", "e"), listed=None):
    listed = listed or {}
    return [hypervisor("hv1", list(pool), proxies(*hv1), listed.get("hv1", ()), prefix="198.18.21.0/24"),
            hypervisor("hv2", list(pool), proxies(*hv2), listed.get("hv2", ()), prefix="198.18.21.0/24")]


def test_new_proxies_get_unique_addresses_across_hypervisors_in_the_plays_order():
    assert allocated(fleet()) == {
        "hv1": {"a": "198.18.21.10/24", "b": "198.18.21.11/24", "c": "198.18.21.12/24"},
        "hv2": {"d": "198.18.21.13/24", "e": "198.18.21.14/24"}}


def test_recorded_addresses_are_kept_and_new_proxies_take_free_ones_around_them():
    first = allocated(fleet())
    listed = {"hv1": listing(first, "hv1"), "hv2": listing(first, "hv2")}
    # Every hypervisor's list grows by one proxy whose name sorts first: nobody's address moves.
    second = allocated(fleet(hv1=("0-new", "a", "b", "c"), hv2=("0-new", "d", "e"), listed=listed))
    assert second == {"hv1": dict(first["hv1"], **{"0-new": "198.18.21.15/24"}),
                      "hv2": dict(first["hv2"], **{"0-new": "198.18.21.16/24"})}


def test_a_replaced_proxy_keeps_its_address_while_its_domain_records_it():
    first = allocated(fleet())
    listed = {"hv1": listing(first, "hv1"), "hv2": listing(first, "hv2")}
    # A replacement records the address given to it again: the run after it sees the same listing.
    assert allocated(fleet(listed=listed)) == first


def test_an_address_frees_once_no_domain_records_it():
    first = allocated(fleet())
    listed = {"hv1": listing(first, "hv1"), "hv2": listing(first, "hv2")}
    # b is removed (state absent, or dropped from the list for the garbage collection): its domain still records
    # 198.18.21.11 in the run that removes it, so a new proxy in that run does not get it...
    removing = fleet(hv1=("a", "c"), hv2=("d", "e", "f"), listed=listed)
    assert allocated(removing)["hv2"]["f"] == "198.18.21.15/24"
    # ...and once the listing no longer has b, the next new proxy gets it.
    listed["hv1"] = [proxy for proxy in listed["hv1"] if proxy["name"] != "b"]
    listed["hv2"].append({"name": "f", "egress_address": "198.18.21.15"})
    assert allocated(fleet(hv1=("a", "c"), hv2=("d", "e", "f", "g"), listed=listed))["hv2"]["g"] == "198.18.21.11/24"


def test_a_recorded_address_the_pool_no_longer_holds_is_given_up():
    listed = {"hv1": [{"name": "a", "egress_address": "198.18.21.99"}]}
    assert allocated(fleet(hv1=("a",), hv2=(), listed=listed)) == {"hv1": {"a": "198.18.21.10/24"}, "hv2": {}}


def test_an_address_recorded_twice_stays_with_the_first_and_the_other_proxy_gets_a_new_one():
    listed = {"hv1": [{"name": "a", "egress_address": "198.18.21.12"}],
              "hv2": [{"name": "d", "egress_address": "198.18.21.12"}]}
    assert allocated(fleet(hv1=("a",), hv2=("d",), listed=listed)) == {
        "hv1": {"a": "198.18.21.12/24"}, "hv2": {"d": "198.18.21.10/24"}}


def test_a_proxy_with_its_own_address_takes_none_and_stopped_ones_get_one():
    instances = [{"name": "a", "state": "stopped"}, {"name": "b", "outside": {"address": "198.18.21.5/24"}},
                 {"name": "c", "state": "absent"}]
    assert allocated([hypervisor("hv1", ["198.18.21.10-198.18.21.20"], instances, prefix="198.18.21.0/24")]) == {
        "hv1": {"a": "198.18.21.10/24"}}


def test_each_hypervisor_draws_inside_its_own_prefix_from_one_shared_pool():
    pool = ["198.18.21.100-198.18.21.101", "198.18.22.100-198.18.22.102"]
    assert allocated([hypervisor("hv1", pool, proxies("a", "b"), prefix="198.18.21.0/24"),
                      hypervisor("hv2", pool, proxies("c", "d"), prefix="198.18.22.0/24")]) == {
        "hv1": {"a": "198.18.21.100/24", "b": "198.18.21.101/24"},
        "hv2": {"c": "198.18.22.100/24", "d": "198.18.22.101/24"}}


def test_a_prefix_entry_gives_its_own_length_without_a_nic_prefix():
    assert allocated([hypervisor("hv1", ["198.18.21.64/29"], proxies("a", "b"))]) == {
        "hv1": {"a": "198.18.21.65/29", "b": "198.18.21.66/29"}}


def test_a_pool_too_small_fails_naming_how_many_are_missing():
    message = refusal(fleet(pool=["198.18.21.10-198.18.21.13"], hv1=("a", "b", "c"), hv2=("d", "e", "f")))
    assert message == (
        "The egress address pools are too small, 2 addresses missing: egress_proxy_outside.pool of hv2 inside "
        "198.18.21.0/24 has 1 free IPv4 address for 3 new proxies: 2 missing (none for e, f). Add addresses to the pool, or "
        "give fewer proxies an address from it; nothing was changed.")


def test_a_large_shortage_names_the_first_proxies_and_counts_the_rest():
    message = refusal([hypervisor("hv1", ["198.18.21.10"], proxies(*("p%03d" % index for index in range(200))),
                                  prefix="198.18.21.0/24")])
    assert "199 missing (none for p001, p002, p003, p004, p005, p006, p007, p008, p009, p010 and 189 more)" in message
    assert len(message) < 500


def test_held_addresses_count_against_the_pool():
    listed = {"hv1": [{"name": "old", "egress_address": "198.18.21.10"}]}
    message = refusal(fleet(pool=["198.18.21.10-198.18.21.11"], hv1=("a", "b"), hv2=(), listed=listed))
    assert "has 1 free IPv4 address for 2 new proxies: 1 missing (none for b)" in message


def test_one_address_per_proxy_from_a_64_without_listing_it():
    pool = ["2001:db8:0:7::/64"]
    hosts = [{"name": "hv%d" % number, "outside": {"network": "uplink", "pool": pool}, "state": "present",
              "instances": proxies(*("p%02d" % index for index in range(20))), "proxies": []} for number in (1, 2)]
    allocation = allocated(hosts, field="address6")
    addresses = [ipaddress.ip_interface(address) for host in allocation.values() for address in host.values()]
    assert len(set(addresses)) == 40
    assert {str(address.network) for address in addresses} == {"2001:db8:0:7::/64"}
    assert str(min(addresses).ip) == "2001:db8:0:7::1"


DUAL = ["198.18.21.10-198.18.21.11", "2001:db8:21::100-2001:db8:21::1ff"]


def test_a_dual_stack_pool_gives_each_proxy_one_address_of_each_family_it_lacks():
    instances = [{"name": "a"}, {"name": "b", "outside": {"address": "198.18.21.5/24"}},
                 {"name": "c", "outside": {"address6": "2001:db8:21::5/64"}}]
    hosts = [hypervisor("hv1", DUAL, instances, prefix="198.18.21.0/24", prefix6="2001:db8:21::/64")]
    assert fleet_allocation(hosts) == {"hv1": {"a": {"address": "198.18.21.10/24", "address6": "2001:db8:21::100/64"},
                                               "b": {"address6": "2001:db8:21::101/64"},
                                               "c": {"address": "198.18.21.11/24"}}}
    # The listing gives both recorded addresses back: each kept, family by family.
    listed = [{"name": "a", "egress_address": "198.18.21.11", "egress_address6": "2001:db8:21::107"}]
    hosts = [hypervisor("hv1", DUAL, proxies("a", "d"), listed, prefix="198.18.21.0/24", prefix6="2001:db8:21::/64")]
    assert fleet_allocation(hosts) == {"hv1": {"a": {"address": "198.18.21.11/24", "address6": "2001:db8:21::107/64"},
                                               "d": {"address": "198.18.21.10/24", "address6": "2001:db8:21::100/64"}}}


def test_an_own_ipv6_address_in_the_pool_or_outside_prefix6_is_refused_naming_address6():
    in_pool = [{"name": "a"}, {"name": "b", "outside": {"address6": "2001:db8:21::109/64"}}]
    assert refusal([hypervisor("hv1", DUAL, in_pool, prefix="198.18.21.0/24", prefix6="2001:db8:21::/64")]).startswith(
        'egress_proxy_instances[1].outside.address6 of "b" on hv1: 2001:db8:21::109 is in egress_proxy_outside.pool[1]')
    outside = [{"name": "a"}, {"name": "b", "outside": {"address6": "2001:db8:99::9/64"}}]
    assert "is outside egress_proxy_outside.prefix6 2001:db8:21::/64" in refusal(
        [hypervisor("hv1", ["198.18.21.10"], outside, prefix="198.18.21.0/24", prefix6="2001:db8:21::/64")])


@pytest.mark.parametrize("key, text, says", [
    ("prefix", "2001:db8:21::/64", "egress_proxy_outside.prefix of hv1: '2001:db8:21::/64' is not an IPv4 network"),
    ("prefix6", "198.18.21.0/24", "egress_proxy_outside.prefix6 of hv1: '198.18.21.0/24' is not an IPv6 network"),
])
def test_each_segment_has_its_family(key, text, says):
    host = hypervisor("hv1", DUAL, proxies("a"))
    host["outside"][key] = text
    assert refusal([host]).startswith(says)


def test_an_ipv6_range_needs_prefix6():
    message = refusal([hypervisor("hv1", ["2001:db8:21::10-2001:db8:21::20"], proxies("a"), prefix="198.18.21.0/24")])
    assert "no prefix length; give egress_proxy_outside.prefix6 of hv1" in message


def test_the_last_address_of_the_ipv6_space_is_given_without_overflow():
    pool = ["ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"]
    listed = [{"name": "old", "egress_address": "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"}]
    allocation = allocated([hypervisor("hv1", pool, proxies("a"), listed, prefix6="ffff:ffff:ffff:ffff::/64")],
                           field="address6")
    assert allocation == {"hv1": {"a": "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/64"}}
    message = refusal([hypervisor("hv1", pool, proxies("a", "b"), listed, prefix6="ffff:ffff:ffff:ffff::/64")])
    assert "1 address missing" in message


# --- a profile's egress address from the pool (egress_address: pool) ------------------------------------------------


def pooled(*names, field="egress_address"):
    """Profiles ``names`` each asking the pool for its ``field``."""
    return [{"name": name, "users": ["alice"], field: "pool"} for name in names]


def with_profiles(name, *profiles, **entry):
    return dict(entry, name=name, profiles=list(profiles))


def profile_addresses(hypervisors):
    """fleet_allocation's profile addresses, by hypervisor, proxy and profile; proxies without any left out."""
    return {host: {proxy: fields["profiles"] for proxy, fields in given.items() if "profiles" in fields}
            for host, given in fleet_allocation(hypervisors).items()}


def recorded(allocation, host):
    """kvm_proxy_info's listing of ``host`` once the proxies and profiles of ``allocation`` run there: each domain
    records its own egress addresses and its profiles' pooled ones."""
    return [{"name": name, "egress_address": fields["address"].partition("/")[0],
             "pooled_addresses": fields.get("profiles", {})} for name, fields in sorted(allocation[host].items())]


def profiled_fleet(listed=None, hv1_extra=(), hv2_extra=()):
    """Two hypervisors of one pool: on hv1 a with the profiles backup and ci from the pool and b with none; on hv2 d,
    whose profiles are its hypervisor's egress_proxy_profiles (backup from the pool)."""
    listed = listed or {}
    hv1 = hypervisor("hv1", ["198.18.21.10-198.18.21.20"],
                     [with_profiles("a", *pooled("backup", "ci")), {"name": "b"}] + list(hv1_extra),
                     listed.get("hv1", ()), prefix="198.18.21.0/24")
    hv2 = hypervisor("hv2", ["198.18.21.10-198.18.21.20"], [{"name": "d"}] + list(hv2_extra), listed.get("hv2", ()),
                     prefix="198.18.21.0/24")
    hv2["profiles"] = pooled("backup")
    return [hv1, hv2]


def test_a_profile_asking_for_the_pool_gets_one_more_address_after_the_proxies_own():
    allocation = fleet_allocation(profiled_fleet())
    assert allocation == {
        "hv1": {"a": {"address": "198.18.21.10/24", "profiles": {"backup": {"egress_address": "198.18.21.13"},
                                                                 "ci": {"egress_address": "198.18.21.14"}}},
                "b": {"address": "198.18.21.11/24"}},
        # egress_proxy_profiles give each proxy of the hypervisor its own address.
        "hv2": {"d": {"address": "198.18.21.12/24", "profiles": {"backup": {"egress_address": "198.18.21.15"}}}}}


def test_a_profiles_address_is_kept_across_runs_and_replacements_and_held_from_new_proxies():
    first = fleet_allocation(profiled_fleet())
    listed = {"hv1": recorded(first, "hv1"), "hv2": recorded(first, "hv2")}
    # A new proxy whose name sorts first, with a profile of its own from the pool: nobody's address moves.
    second = fleet_allocation(profiled_fleet(listed, hv1_extra=[with_profiles("0-new", *pooled("backup"))]))
    assert second["hv1"]["a"] == first["hv1"]["a"] and second["hv2"] == first["hv2"]
    assert second["hv1"]["0-new"] == {"address": "198.18.21.16/24",
                                      "profiles": {"backup": {"egress_address": "198.18.21.17"}}}


def test_a_profiles_address_frees_once_no_domain_records_it():
    first = fleet_allocation(profiled_fleet())
    listed = {"hv1": recorded(first, "hv1"), "hv2": recorded(first, "hv2")}
    # a's ci no longer asks for a pooled address (or is gone): its domain still records 198.18.21.14 in the run that
    # applies that, so a new proxy in that run does not get it...
    hv1 = [with_profiles("a", *pooled("backup")), {"name": "b"}, {"name": "c"}]
    dropping = profiled_fleet(listed)
    dropping[0]["instances"] = hv1
    assert fleet_allocation(dropping)["hv1"]["c"] == {"address": "198.18.21.16/24"}
    # ...and once the domain records it no longer (its policy applied without it), the next new proxy gets it.
    listed["hv1"][0]["pooled_addresses"] = {"backup": {"egress_address": "198.18.21.13"}}
    listed["hv1"].append({"name": "c", "egress_address": "198.18.21.16"})
    freed = profiled_fleet(listed)
    freed[0]["instances"] = hv1 + [{"name": "e"}]
    assert fleet_allocation(freed)["hv1"]["e"] == {"address": "198.18.21.14/24"}


def test_a_domain_gone_frees_its_profiles_addresses():
    first = fleet_allocation(profiled_fleet())
    listed = {"hv1": recorded(first, "hv1"), "hv2": []}  # d's domain is gone, removed in an earlier run
    again = profiled_fleet(listed)
    again[1]["instances"] = [{"name": "f"}]
    assert fleet_allocation(again)["hv2"] == {
        "f": {"address": "198.18.21.12/24", "profiles": {"backup": {"egress_address": "198.18.21.15"}}}}


def test_a_profiles_recorded_address_is_held_by_the_first_domain_that_records_it():
    """Two domains record one address (edited by hand): for two profiles, the one earlier in the play keeps it; for a
    proxy and a profile, the proxy (a new outside address would replace its VM, a profile's changes in place)."""
    listed = {"hv1": [{"name": "a", "egress_address": "198.18.21.10",
                       "pooled_addresses": {"backup": {"egress_address": "198.18.21.19"}}}],
              "hv2": [{"name": "d", "egress_address": "198.18.21.18",
                       "pooled_addresses": {"backup": {"egress_address": "198.18.21.19"}}}]}
    allocation = fleet_allocation(profiled_fleet(listed))
    assert allocation["hv1"]["a"]["profiles"]["backup"] == {"egress_address": "198.18.21.19"}
    assert allocation["hv2"]["d"] == {"address": "198.18.21.18/24",
                                      "profiles": {"backup": {"egress_address": "198.18.21.13"}}}
    listed["hv2"][0]["egress_address"] = "198.18.21.19"
    allocation = fleet_allocation(profiled_fleet(listed))
    assert allocation["hv2"]["d"]["address"] == "198.18.21.19/24"
    assert allocation["hv1"]["a"]["profiles"]["backup"] == {"egress_address": "198.18.21.12"}


@pytest.mark.parametrize("record", [
    {"backup": {"egress_address": "198.18.21.99"}},  # no longer in the pool
    {"backup": {"egress_address": "198.18.21.10"}},  # the proxy's own
    {"backup": {"egress_address": "198.18.21.12/24"}},  # not what the collection writes
    {"backup": {"egress_address": "198.18.21.12\n"}},
    {"backup": "198.18.21.12"},
    "198.18.21.12",
], ids=["outside the pool", "the proxy's own", "with a prefix", "a line feed", "not a mapping", "not a mapping at all"])
def test_a_profiles_record_that_the_pool_cannot_give_or_that_is_edited_is_given_up(record):
    listed = {"hv1": [{"name": "a", "egress_address": "198.18.21.10", "pooled_addresses": record}]}
    allocation = fleet_allocation(profiled_fleet(listed))
    assert allocation["hv1"]["a"]["profiles"]["backup"]["egress_address"] not in ("198.18.21.99", "198.18.21.10")
    addresses = [fields[key] for given in allocation.values() for fields in given.values()
                 for key in ("address",) if key in fields]
    addresses = [address.partition("/")[0] for address in addresses] + [
        address for given in allocation.values() for fields in given.values()
        for profile in fields.get("profiles", {}).values() for address in profile.values()]
    assert len(addresses) == len(set(addresses)) == 6


def test_a_profile_takes_its_address_in_its_proxys_segment():
    """Without egress_proxy_outside.prefix a pool of two prefixes gives each proxy one of either; a profile joins its
    proxy's segment, whose hand-given address may lie in the other, even where a lower address is free."""
    pool = ["198.18.21.64/29", "198.18.22.64/29"]
    instances = [with_profiles("a", *pooled("backup")),
                 with_profiles("c", *pooled("backup"), outside={"address": "198.18.22.5/24"})]
    assert fleet_allocation([hypervisor("hv1", pool, instances)]) == {"hv1": {
        "a": {"address": "198.18.21.65/29", "profiles": {"backup": {"egress_address": "198.18.21.66"}}},
        "c": {"profiles": {"backup": {"egress_address": "198.18.22.65"}}}}}
    # a and b fill their /30: a's profile gets none there, though the other segment has free addresses.
    message = refusal([hypervisor("hv1", ["198.18.21.64/30", "198.18.22.64/29"], instances + [{"name": "b"}])])
    assert "egress_proxy_outside.pool of hv1 has 0 free addresses in 198.18.21.64/30, the egress NIC's segment, for 1 " \
           "profiles: 1 missing (none for egress_proxy_instances[0].profiles[0] (backup).egress_address of a)" in message


def test_ipv4_and_ipv6_profile_addresses_each_come_from_their_family():
    instances = [with_profiles("a", {"name": "backup", "clients": ["10.0.0.0/8"], "egress_address": "pool",
                                     "egress_address6": "pool"}, *pooled("ci", field="egress_address6"))]
    allocation = fleet_allocation([hypervisor("hv1", DUAL, instances, prefix="198.18.21.0/24",
                                              prefix6="2001:db8:21::/64")])
    assert allocation == {"hv1": {"a": {"address": "198.18.21.10/24", "address6": "2001:db8:21::100/64", "profiles": {
        "backup": {"egress_address": "198.18.21.11", "egress_address6": "2001:db8:21::101"},
        "ci": {"egress_address6": "2001:db8:21::102"}}}}}


def test_a_profile_of_a_removed_proxy_takes_none_and_hand_given_ones_are_no_concern():
    instances = [with_profiles("a", *pooled("backup"), state="absent"),
                 with_profiles("b", {"name": "ci", "users": ["alice"], "egress_address": "198.18.21.30"})]
    assert profile_addresses([hypervisor("hv1", ["198.18.21.10-198.18.21.20"], instances, prefix="198.18.21.0/24")]) \
        == {"hv1": {}}


def test_a_pool_too_small_for_the_profiles_fails_naming_how_many_are_missing():
    message = refusal([hypervisor("hv1", ["198.18.21.10-198.18.21.13"],
                                  [with_profiles("a", *pooled("backup", "ci", "lab")), with_profiles("b", *pooled("ci"))],
                                  prefix="198.18.21.0/24")])
    assert message == (
        "The egress address pools are too small for the profiles that ask for an address of them, 2 addresses "
        "missing: egress_proxy_outside.pool of hv1 has 2 free addresses in 198.18.21.0/24, the egress NIC's segment, "
        "for 4 profiles: 2 missing (none for egress_proxy_instances[0].profiles[2] (lab).egress_address of a, "
        "egress_proxy_instances[1].profiles[0] (ci).egress_address of b). Add addresses to the pool, or give fewer "
        "profiles an address from it; nothing was changed.")


def test_a_profile_asking_for_a_family_the_pool_lacks_is_refused_naming_the_key():
    hv2 = hypervisor("hv2", ["198.18.21.10-198.18.21.20"], [{"name": "d"}], prefix="198.18.21.0/24")
    hv2["profiles"] = [{"name": "ci", "users": ["alice"]}] + pooled("backup", field="egress_address6")
    assert refusal([hv2]) == (
        "egress_proxy_profiles[1] (backup).egress_address6 of d on hv2 is pool, but egress_proxy_outside.pool of hv2 has "
        "no IPv6 address: add IPv6 addresses to the pool, or give the profile an address of its own")
    fleet_entry = with_profiles("f", {"name": "ci"}, *pooled("backup", field="egress_address6"), hypervisor="hv2")
    assert refusal([hypervisor("hv2", ["198.18.21.10"], [], prefix="198.18.21.0/24")], fleet=[fleet_entry]).startswith(
        "egress_proxy_fleet[0].profiles[1] (backup).egress_address6 of f on hv2 is pool, but")


def test_a_profile_whose_proxy_has_no_outside_address_of_its_family_is_refused():
    """A proxy without its own outside address of the profile's family gets one from the pool, so only an own address
    without its prefix length (kvm_proxy_set's check refuses it too) leaves it without a segment."""
    instances = [with_profiles("a", *pooled("backup"), outside={"address": "198.18.21.5"})]
    assert refusal([hypervisor("hv1", ["198.18.21.10"], instances, prefix="198.18.21.0/24")]) == (
        "egress_proxy_instances[0].profiles[0] (backup).egress_address of a on hv1 is pool, but the outside NIC has no "
        "IPv4 address with its prefix length (outside.address, or one from egress_proxy_outside.pool) whose segment the "
        "address joins")


@pytest.mark.parametrize("profiles", [
    "pool",
    ["pool", None, 42],
    [{"name": 42, "egress_address": "pool"}],
    [{"name": "backup", "egress_address": "Pool"}, {"name": "ci", "egress_address": "pool\n"},
     {"name": "lab", "egress_address": ["pool"]}, {"name": "web", "egress_address6": " pool"}],
])
def test_profiles_that_are_not_asking_for_the_pool_in_its_words_take_nothing(profiles):
    """Not the allocation's to refuse: the role's check of the profiles names each (squid_conf)."""
    instances = [{"name": "a", "profiles": profiles}]
    assert profile_addresses([hypervisor("hv1", ["198.18.21.10-198.18.21.20"], instances, prefix="198.18.21.0/24")]) \
        == {"hv1": {}}


def test_the_view_keeps_of_a_profile_its_name_and_egress_addresses_alone():
    secret = {"name": "ci", "users": ["alice"], "clients": ["10.0.0.0/8"], "egress_address": "pool",
              "allowed_destinations": ["internal.example"]}
    view = pool_view([{"name": "a", "profiles": [secret, "junk"], "users": [{"name": "alice", "password": "s3cret"}]},
                      {"name": "b"}], {"pool": ["198.18.21.10"]}, "present", [secret])
    assert view["instances"] == [
        {"name": "a", "state": None, "outside": {"address": None, "address6": None},
         "profiles": [{"name": "ci", "egress_address": "pool", "egress_address6": None}, None]},
        {"name": "b", "state": None, "outside": {"address": None, "address6": None}}]
    assert view["profiles"] == [{"name": "ci", "egress_address": "pool", "egress_address6": None}]
    assert "alice" not in repr(view) and "internal.example" not in repr(view)
