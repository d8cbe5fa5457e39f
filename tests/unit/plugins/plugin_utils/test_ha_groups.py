# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""HA groups: the text checks of every field, the refusals of issue 42's item 6, the VRRP ids, and keepalived.conf
as keepalived 2.2's own config test reads it, with the files it includes and runs at their paths in the guest.

keepalived's config test looks for the interfaces, the included files and the health script (its owner and mode:
enable_script_security), so it runs in private network and mount namespaces of its own: veths named as the guest
names its NICs, and tmpfs over /etc/keepalived, /etc/squid and /usr/local/lib, where the policy's files are written.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import ipaddress
import json
import os
import shutil
import subprocess

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.ha_group import HaGroup
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.policy import Policy
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import (
    HAND_OVER_PATH,
    HEALTH_SCRIPT_PATH,
    KEEPALIVED_CONF_PATH,
    RELOAD_HAND_OVERS,
    SYSCTL_PATH,
    HaGroupError,
    fleet_groups,
    fleet_listings,
    instance_groups,
    keepalived_conf,
    member_policy,
    member_view,
    parse_groups,
    policy_group,
    release_argv,
    resolve_groups,
    vrrp_id,
)

UID = "egress_proxies.kvm.egress_proxy"
OFFICE = {"name": "office", "address": "198.18.40.10", "members": ["egress-a", "egress-b"]}
A = {"name": "egress-a", "address": "198.18.40.11/24", "address6": "2001:db8:40::11/64",
     "outside": {"address": "198.18.41.11/24", "address6": "2001:db8:41::11/64"}}
B = {"name": "egress-b", "address": "198.18.40.12/24", "address6": "2001:db8:40::12/64",
     "outside": {"address": "198.18.41.12/24", "address6": "2001:db8:41::12/64"}}
C = {"name": "egress-c", "address": "198.18.40.13/24"}
D = {"name": "egress-d", "address": "198.18.40.14/24"}
SETTINGS = {"egress_proxy_port": 3128, "egress_proxy_state": "present"}


def listings(groups, *hypervisors):
    """member_view of each hypervisor: ``hypervisors`` are (name, entries)."""
    return [member_view(entries, groups, SETTINGS, name) for name, entries in hypervisors]


def resolved(groups, *hypervisors):
    """resolve_groups over the listings of ``hypervisors`` (default: egress-a on hv1, egress-b and egress-c on hv2)."""
    hypervisors = hypervisors or (("hv1", [A]), ("hv2", [B, C, D]))
    found = fleet_groups(groups, listings(groups, *hypervisors), UID)
    if found["problems"]:
        raise HaGroupError(found["problems"])
    return found["groups"]


def refused(groups, *hypervisors):
    """The sentences the groups are refused with."""
    with pytest.raises(HaGroupError) as error:
        resolved(groups, *hypervisors)
    return str(error.value)


def test_a_group_resolves_with_derived_id_and_priorities_by_order():
    (group,) = resolved([dict(OFFICE, members=["egress-a", "egress-b", "egress-c"])])
    assert group["name"] == "office" and group["segment"] == "198.18.40.0/24" and group["port"] == 3128
    assert group["address"] == "198.18.40.10/24" and group["address6"] is None
    assert [(member["name"], member["hypervisor"], member["address"], member["priority"]) for member in group["members"]] == [
        ("egress-a", "hv1", "198.18.40.11", 200), ("egress-b", "hv2", "198.18.40.12", 190),
        ("egress-c", "hv2", "198.18.40.13", 180)]
    digest = hashlib.sha256(b"egress_proxies.kvm.egress_proxy\x00198.18.40.0/24\x00office").hexdigest()
    assert group["vrrp_id"] == 1 + int(digest, 16) % 255


def test_given_priorities_and_id_are_kept_and_the_others_follow_the_order():
    (group,) = resolved([dict(OFFICE, priorities={"egress-b": "250"}, vrrp_id=7)])
    assert [member["priority"] for member in group["members"]] == [200, 250]
    assert group["vrrp_id"] == 7


def test_the_vrrp_id_is_stable_within_range_and_depends_on_owner_segment_and_name():
    ids = {vrrp_id(uid, segment, name) for uid in ("a", "b") for segment in ("198.18.40.0/24", "198.18.50.0/24")
           for name in ("office", "lab")}
    assert len(ids) > 4 and all(1 <= found <= 255 for found in ids)
    assert vrrp_id("a", "198.18.40.0/24", "office") == vrrp_id("a", "198.18.40.0/24", "office")
    assert {vrrp_id(UID, "198.18.40.0/24", "g%d" % index) for index in range(2000)} == set(range(1, 256))


def test_an_instance_carries_its_source_peers_priority_and_addresses():
    groups = [dict(OFFICE, address6="2001:db8:40::10")]
    found = fleet_groups(groups, listings(groups, ("hv1", [A]), ("hv2", [B])), UID)
    (member,) = instance_groups(found["groups"], "egress-a")
    assert member["peers"] == ["198.18.40.12"] and member["source"] == "198.18.40.11" and member["priority"] == 200
    assert member["address6"] == "2001:db8:40::10/64"
    assert instance_groups(found["groups"], "egress-c") == []


# Hostile text in every field: each refused as text, naming the field, before anything parses it.
HOSTILE = {
    "a line feed": "198.18.40.10\n",
    "a line feed inside": "198.18.40.10\nvirtual_ipaddress",
    "a blank": "198.18.40.10 ",
    "fullwidth digits": "\uff11\uff19\uff18.18.40.10",
    "Arabic-Indic digits": "\u0661\u0669\u0668.18.40.10",
    "a prefix": "198.18.40.10/24",
    "a NUL": "198.18.40.10\x00",
}
HOSTILE6 = {
    "a scope id": "2001:db8:40::10%nic0",
    "a line feed": "2001:db8:40::10\n",
    "a blank": "2001:db8:40:: 10",
    "Arabic-Indic digits": "2001:db8:40::\u0661\u0660",
    "a prefix": "2001:db8:40::10/64",
}


@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
@pytest.mark.parametrize("field", ["address", "egress_address"])
def test_hostile_text_in_an_ipv4_field_is_refused_naming_it(field, value):
    group = dict(OFFICE, egress_follows=True, egress_address="198.18.41.10")
    group[field] = value
    with pytest.raises(HaGroupError) as error:
        parse_groups([group])
    assert "egress_proxy_ha_groups[0].%s " % field in str(error.value) and "is not an IPv4 address" in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("value", list(HOSTILE6.values()), ids=list(HOSTILE6))
@pytest.mark.parametrize("field", ["address6", "egress_address6"])
def test_hostile_text_in_an_ipv6_field_is_refused_naming_it(field, value):
    group = dict(OFFICE, address6="2001:db8:40::10", egress_follows=True, egress_address6="2001:db8:41::10")
    group[field] = value
    with pytest.raises(HaGroupError) as error:
        parse_groups([group])
    assert "egress_proxy_ha_groups[0].%s " % field in str(error.value) and "is not an IPv6 address" in str(error.value)


def test_python_alone_would_take_a_scope_id_into_keepalived_conf():
    """The attack the text check stops: ipaddress parses an IPv6 address with a scope id."""
    assert str(ipaddress.ip_address("2001:db8:40::10%nic0")) == "2001:db8:40::10%nic0"


@pytest.mark.parametrize("field, value, said", [
    ("name", "office\nvrrp_instance", "is not 1-15 lowercase letters"),
    ("name", "Office", "is not 1-15 lowercase letters"),
    ("name", "a-name-of-16-chr", "is not 1-15 lowercase letters"),
    ("name", "\uff4f\uff46\uff46", "is not 1-15 lowercase letters"),
    ("members", ["egress-a", "egress-b\n"], "not proxy names"),
    ("members", ["egress-a", "egress b"], "not proxy names"),
    ("members", "egress-a,egress-b", "must be a list"),
    ("priorities", {"egress-a": "\u0662\u0660\u0660"}, "is not a priority"),
    ("priorities", {"egress-a": "200\n"}, "is not a priority"),
    ("priorities", {"egress-a": 255}, "is not a priority"),
    ("priorities", {"egress-a": True}, "is not a priority"),
    ("priorities", {"egress-z": 100}, "which is not in members"),
    ("vrrp_id", "\uff15\uff11", "is not a VRRP id"),
    ("vrrp_id", "51 ", "is not a VRRP id"),
    ("vrrp_id", 0, "is not a VRRP id"),
    ("vrrp_id", 256, "is not a VRRP id"),
    ("egress_follows", "sometimes", "is not a boolean"),
    ("egress_follows", "true\n", "is not a boolean"),
    ("unknown", 1, "has unknown keys 'unknown'"),
])
def test_hostile_or_wrong_values_are_refused_naming_the_field(field, value, said):
    group = dict(OFFICE)
    group[field] = value
    with pytest.raises(HaGroupError) as error:
        parse_groups([group])
    message = str(error.value)
    assert said in message and ("egress_proxy_ha_groups[0].%s" % field in message or field == "unknown")


@pytest.mark.parametrize("password", ["secret", "", None, "a\nb"])
def test_a_password_is_refused_by_name_without_showing_it(password):
    """VRRP version 3 has no authentication: a group that still gives a password is told so, its value not shown."""
    with pytest.raises(HaGroupError) as error:
        parse_groups([dict(OFFICE, password=password)])
    message = str(error.value)
    assert message == ("egress_proxy_ha_groups[0].password: groups take no password any more (VRRP version 3 has no "
                       "authentication; the members accept advertisements from each other's addresses alone): remove "
                       "the key.")


# The refusals of issue 42's item 6, each naming the entry.
def test_an_address_outside_the_members_segment_is_refused():
    message = refused([dict(OFFICE, address="198.18.50.10")])
    assert "egress_proxy_ha_groups[0].address 198.18.50.10 is not a host address of the members' segment 198.18.40.0/24" in message


@pytest.mark.parametrize("address", ["198.18.40.0", "198.18.40.255"])
def test_the_segments_network_or_broadcast_address_is_refused(address):
    assert "egress_proxy_ha_groups[0].address %s is not a host address" % address in refused([dict(OFFICE, address=address)])


@pytest.mark.parametrize("address, proxy", [("198.18.40.11", "egress-a"), ("198.18.40.13", "egress-c")])
def test_an_address_equal_to_a_members_or_another_proxys_is_refused(address, proxy):
    groups = [dict(OFFICE, address=address), dict(OFFICE, name="lab", address="198.18.40.20", members=["egress-c", "egress-d"])]
    message = refused(groups)
    assert "egress_proxy_ha_groups[0].address %s is a static address of the proxy %s" % (address, proxy) in message


def test_an_address_equal_to_another_groups_is_refused():
    groups = [OFFICE, dict(OFFICE, name="lab", members=["egress-c", "egress-d"])]
    message = refused(groups)
    assert "egress_proxy_ha_groups[1].address 198.18.40.10 is egress_proxy_ha_groups[0].address too" in message


def test_an_ipv6_address_equal_to_another_groups_is_refused():
    groups = [dict(OFFICE, address6="2001:db8:40::10"),
              dict(OFFICE, name="lab", address="198.18.40.20", address6="2001:db8:40::10", members=["egress-c", "egress-d"])]
    c6, d6 = dict(C, address6="2001:db8:40::13/64"), dict(D, address6="2001:db8:40::14/64")
    message = refused(groups, ("hv1", [A]), ("hv2", [B, c6, d6]))
    assert "egress_proxy_ha_groups[1].address6 2001:db8:40::10 is egress_proxy_ha_groups[0].address6 too" in message


def test_members_on_different_segments_are_refused():
    other = dict(B, address="198.18.50.12/24")
    message = refused([OFFICE], ("hv1", [A]), ("hv2", [other]))
    assert ("egress_proxy_ha_groups[0].members: the members are on different segments (egress-a address 198.18.40.0/24, "
            "egress-b address 198.18.50.0/24)") in message


def test_a_group_of_one_is_refused():
    assert "egress_proxy_ha_groups[0].members lists 1 proxy: a group needs at least two members" in refused(
        [dict(OFFICE, members=["egress-a"])])


def test_a_member_listed_twice_is_refused():
    assert "egress_proxy_ha_groups[0].members lists egress-a more than once" in refused(
        [dict(OFFICE, members=["egress-a", "egress-a"])])


def test_a_member_in_two_groups_on_one_segment_is_refused():
    groups = [OFFICE, dict(OFFICE, name="lab", address="198.18.40.20", members=["egress-b", "egress-c"])]
    message = refused(groups)
    assert ("egress_proxy_ha_groups[1].members: egress-b is in egress_proxy_ha_groups[0] too, on one segment "
            "(198.18.40.0/24)") in message


def test_an_unknown_member_is_refused():
    message = refused([dict(OFFICE, members=["egress-a", "egress-z"])])
    assert "egress_proxy_ha_groups[0].members: egress-z is not a proxy listed to exist" in message


def test_a_member_listed_only_as_absent_is_unknown():
    message = refused([OFFICE], ("hv1", [A]), ("hv2", [dict(B, state="absent")]))
    assert "egress-b is not a proxy listed to exist" in message


def test_a_member_listed_on_two_hypervisors_is_refused():
    message = refused([OFFICE], ("hv1", [A, B]), ("hv2", [B]))
    assert "egress_proxy_ha_groups[0].members: egress-b is listed to exist on hv1 and hv2; a member is one proxy" in message


def test_a_member_without_a_static_inside_address_is_refused():
    message = refused([OFFICE], ("hv1", [A]), ("hv2", [{"name": "egress-b"}]))
    assert "egress_proxy_ha_groups[0].members: egress-b has no static inside address" in message


def test_a_member_without_address6_in_a_dual_stack_group_is_refused():
    message = refused([dict(OFFICE, address6="2001:db8:40::10")], ("hv1", [A]), ("hv2", [dict(B, address6="")]))
    assert "egress_proxy_ha_groups[0].address6: egress-b has no static inside address6" in message


def test_members_on_different_ports_are_refused():
    views = [member_view([A], [OFFICE], SETTINGS, "hv1"), member_view([B], [OFFICE], dict(SETTINGS, egress_proxy_port=3129), "hv2")]
    found = fleet_groups([OFFICE], views, UID)
    assert "the members listen on different ports (egress-a 3128, egress-b 3129)" in " ".join(found["problems"])


@pytest.mark.parametrize("other, refused_with", [
    ({"egress_proxy_metrics": True, "egress_proxy_metrics_port": 9302}, "egress-a 9301, egress-b 9302"),
    ({"egress_proxy_metrics": "yes", "egress_proxy_metrics_port": 9301}, None),
    # Metrics off on one hypervisor, or not known (one outside the play whose inventory does not say): not compared.
    ({"egress_proxy_metrics": False, "egress_proxy_metrics_port": 9302}, None),
    ({}, None),
])
def test_members_serving_metrics_on_different_ports_are_refused(other, refused_with):
    """The group's metrics target scrapes the group's address on one port, whichever member holds it."""
    metrics = dict(SETTINGS, egress_proxy_metrics=True, egress_proxy_metrics_port=9301)
    views = [member_view([A], [OFFICE], metrics, "hv1"), member_view([B], [OFFICE], dict(SETTINGS, **other), "hv2")]
    assert views[0][0]["metrics_port"] == 9301
    found = fleet_groups([OFFICE], views, UID)
    if refused_with is None:
        assert found["problems"] == []
    else:
        assert found["problems"] == [
            "egress_proxy_ha_groups[0].members: the members serve their metrics on different ports "
            "(egress_proxy_metrics_port: %s); the group's metrics target scrapes the group's address on one port, so "
            "give their hypervisors one egress_proxy_metrics_port." % refused_with]


def test_two_groups_on_one_segment_with_one_id_are_refused_naming_both():
    lab = dict(OFFICE, name="lab", address="198.18.40.20", members=["egress-c", "egress-d"], vrrp_id=51)
    groups = [dict(OFFICE, vrrp_id=51), lab]
    message = refused(groups)
    assert ("egress_proxy_ha_groups[0] (office) and egress_proxy_ha_groups[1] (lab) are on one segment (198.18.40.0/24) "
            "with one VRRP id, 51: set vrrp_id on one of them") in message


def test_two_derived_ids_that_collide_are_refused_and_a_given_id_resolves_it():
    segment = "198.18.40.0/24"
    first = vrrp_id(UID, segment, "office")
    other = next("g%d" % index for index in range(10000) if vrrp_id(UID, segment, "g%d" % index) == first)
    groups = [OFFICE, dict(OFFICE, name=other, address="198.18.40.20", members=["egress-c", "egress-d"])]
    assert "with one VRRP id, %d: set vrrp_id" % first in refused(groups)
    groups[1]["vrrp_id"] = 1 + first % 255
    assert [group["vrrp_id"] for group in resolved(groups)] == [first, 1 + first % 255]


def test_groups_on_different_segments_may_share_an_id():
    lab = dict(OFFICE, name="lab", address="198.18.50.10", members=["egress-e", "egress-f"], vrrp_id=51)
    groups = [dict(OFFICE, vrrp_id=51), lab]
    e, f = {"name": "egress-e", "address": "198.18.50.11/24"}, {"name": "egress-f", "address": "198.18.50.12/24"}
    assert len(resolved(groups, ("hv1", [A, e]), ("hv2", [B, f]))) == 2


def test_two_groups_with_one_name_are_refused():
    groups = [OFFICE, dict(OFFICE, address="198.18.40.20", members=["egress-c", "egress-d"])]
    assert 'egress_proxy_ha_groups[1].name "office" is the name of egress_proxy_ha_groups[0] too' in refused(groups)


def test_an_egress_address_needs_egress_follows_and_the_reverse():
    assert "egress_proxy_ha_groups[0].egress_address is given without egress_follows" in refused(
        [dict(OFFICE, egress_address="198.18.41.10")])
    assert "egress_proxy_ha_groups[0].egress_follows is true but neither egress_address nor egress_address6" in refused(
        [dict(OFFICE, egress_follows=True)])


def test_egress_follows_needs_an_outside_address_on_every_member_in_the_outside_network():
    group = dict(OFFICE, egress_follows=True, egress_address="198.18.41.10")
    assert "egress_proxy_ha_groups[0].egress_address: egress-b has no outside NIC with a static address" in refused(
        [group], ("hv1", [A]), ("hv2", [dict(B, outside={})]))
    assert ("egress_proxy_ha_groups[0].egress_address 198.18.42.10 is not a host address of the members' outside "
            "network 198.18.41.0/24") in refused([dict(group, egress_address="198.18.42.10")])
    assert "egress_proxy_ha_groups[0].egress_address 198.18.41.12 is a static address of the proxy egress-b" in refused(
        [dict(group, egress_address="198.18.41.12")])


def test_a_group_address_that_is_a_members_profile_egress_address_is_refused():
    """A profile's egress address goes on its proxy's NIC: keepalived giving it to the group's holder too would put one
    address on two NICs."""
    group = dict(OFFICE, egress_follows=True, egress_address="198.18.41.30")
    profiles = [{"name": "ci", "clients": ["198.18.40.0/24"], "egress_address": "198.18.41.30"}]
    message = refused([group], ("hv1", [A]), ("hv2", [dict(B, profiles=profiles)]))
    assert ("egress_proxy_ha_groups[0].egress_address 198.18.41.30 is the egress address of a profile of the proxy "
            "egress-b; give the group an address of its own") in message, message
    # The role-wide profiles, where the member has none of its own.
    views = [member_view([A], [group], SETTINGS, "hv1"),
             member_view([B], [group], dict(SETTINGS, egress_proxy_profiles=profiles), "hv2")]
    assert views[1][0]["profile_addresses"] == ["198.18.41.30"]


def test_an_outside_address_from_a_pool_counts():
    group = dict(OFFICE, egress_follows=True, egress_address="198.18.41.10")
    pooled = dict(SETTINGS, egress_proxy_outside={"bridge": "br1", "pool": ["198.18.41.100-198.18.41.120"]},
                  egress_proxy__pool_addresses={"egress-b": {"address": "198.18.41.100/24"}})
    views = [member_view([A], [group], SETTINGS, "hv1"), member_view([dict(B, outside={})], [group], pooled, "hv2")]
    (found,) = fleet_groups([group], views, UID)["groups"]
    assert found["egress_address"] == "198.18.41.10/24"


def test_a_member_on_a_hypervisor_outside_the_play_is_found_through_its_inventory():
    hostvars = {"hv1": {"egress_proxy__ha_view": member_view([A], [OFFICE], SETTINGS, "hv1")},
                # outside the play: no view (or a stale one), its inventory's role-wide address, a fleet entry
                "hv2": {"egress_proxy__ha_view": [], "egress_proxy_address": "198.18.40.12/24"},
                "hv3": {"egress_proxy_instances": [C]}}
    fleet = [{"name": "egress-b", "hypervisor": "hv2"}]
    found = fleet_groups([OFFICE], fleet_listings([OFFICE], hostvars, ["hv1"], ["hv1", "hv2", "hv3"], fleet), UID)
    assert found["problems"] == [] and found["spans_hypervisors"]
    assert [(member["name"], member["hypervisor"], member["address"]) for member in found["groups"][0]["members"]] == [
        ("egress-a", "hv1", "198.18.40.11"), ("egress-b", "hv2", "198.18.40.12")]


def test_a_group_on_one_hypervisor_does_not_span():
    groups = [OFFICE]
    assert not fleet_groups(groups, listings(groups, ("hv1", [A, B])), UID)["spans_hypervisors"]


def test_no_groups_mean_nothing_to_check():
    assert parse_groups([]) == [] and parse_groups(None) == []
    assert resolve_groups([], {}, UID) == []


# keepalived.conf, and keepalived's own config test on it.
def member_policies(groups, hypervisors, outside=False):
    """{name: (instance, member_policy)} for every member of ``groups``."""
    found = fleet_groups(groups, listings(groups, *hypervisors), UID)
    assert found["problems"] == [], found["problems"]
    squid = {"files": [{"path": "/etc/squid/squid.conf", "content": "http_port 3128\n"}],
             "validate": ["/usr/sbin/squid", "-k", "parse"], "reload": ["/bin/systemctl", "reload-or-restart", "squid"]}
    policies = {}
    for _hypervisor, entries in hypervisors:
        for entry in entries:
            member = instance_groups(found["groups"], entry["name"])
            if member:
                instance = {"name": entry["name"], "ha": member, "outside": entry.get("outside") if outside else {},
                            "port": 3128}
                policies[entry["name"]] = (instance, member_policy(instance, squid))
    return policies


SHAPES = {
    "IPv4": ([OFFICE], (("hv1", [A]), ("hv2", [B, C])), False),
    "dual-stack": ([dict(OFFICE, address6="2001:db8:40::10")], (("hv1", [A]), ("hv2", [B])), False),
    "two groups": ([OFFICE, dict(OFFICE, name="lab", address="198.18.40.20", members=["egress-c", "egress-d"])],
                   (("hv1", [A, C]), ("hv2", [B, D])), False),
    "egress_follows": ([dict(OFFICE, address6="2001:db8:40::10", egress_follows=True, egress_address="198.18.41.10",
                             egress_address6="2001:db8:41::10")], (("hv1", [A]), ("hv2", [B])), True),
}


def keepalived_test(files, argv):
    """``argv`` run where the guest's files are: private network and mount namespaces, veths nic0 and nic1,
    tmpfs over /etc/keepalived, /etc/squid and /usr/local/lib holding ``files`` ({path: (content, mode)})."""
    script = ["set -e", "ip link add nic0 type veth peer name nic0-peer", "ip link add nic1 type veth peer name nic1-peer"]
    for directory in ("/etc/keepalived", "/etc/squid", "/usr/local/lib"):
        script.append("mkdir -p %s && mount -t tmpfs tmpfs %s" % (directory, directory))
    script.append('python3 -c "$1"')
    script.append('shift; exec "$@"')
    writer = ("import json, os\nfor path, (content, mode) in json.loads(%r).items():\n"
              "    os.makedirs(os.path.dirname(path), exist_ok=True)\n"
              "    open(path, 'w').write(content)\n    os.chmod(path, int(mode, 8))\n" % json.dumps(files))
    return subprocess.run(["unshare", "--net", "--mount", "sh", "-c", "\n".join(script), "sh", writer] + list(argv),
                          capture_output=True, text=True, timeout=60, check=False)


def guest_files(policy):
    return {entry["path"]: (entry.get("content") or entry.get("secret_content"), entry.get("mode", "0644"))
            for entry in policy["files"]}


def keepalived_argv(policy):
    """The keepalived part of the member's validate: the command after squid's."""
    script = policy["validate"][2]
    assert script.startswith('set -e; "$@"; /usr/sbin/keepalived ')
    return script[len('set -e; "$@"; '):].split()


needs_keepalived = pytest.mark.skipif(shutil.which("keepalived") is None and not os.path.exists("/usr/sbin/keepalived"),
                                      reason="keepalived is not installed (scripts/bootstrap installs it)")


@needs_keepalived
@pytest.mark.parametrize("shape", list(SHAPES))
def test_keepalived_reads_every_members_configuration_with_its_includes_and_scripts(shape):
    groups, hypervisors, outside = SHAPES[shape]
    for name, (_instance, policy) in member_policies(groups, hypervisors, outside).items():
        completed = keepalived_test(guest_files(policy), keepalived_argv(policy))
        assert completed.returncode == 0, (name, completed.stdout + completed.stderr)
        assert completed.stderr == "", (name, completed.stderr)


@needs_keepalived
def test_keepalived_reads_two_instances_in_one_configuration():
    groups, hypervisors, _outside = SHAPES["two groups"]
    found = fleet_groups(groups, listings(groups, *hypervisors), UID)["groups"]
    both = instance_groups(found, "egress-a") + [dict(instance_groups(found, "egress-c")[0], source="198.18.40.11")]
    files = {KEEPALIVED_CONF_PATH: (keepalived_conf("egress-a", both), "0644")}
    (_instance, policy) = member_policies(groups, hypervisors)["egress-a"]
    files.update((path, value) for path, value in guest_files(policy).items() if path.startswith("/usr/local/lib/"))
    completed = keepalived_test(files, keepalived_argv(policy))
    assert completed.returncode == 0 and completed.stderr == "", completed.stderr
    assert keepalived_conf("egress-a", both).count("vrrp_instance ") == 2


@needs_keepalived
@pytest.mark.parametrize("broken, said", [
    ("VRRP version 2", "VRRPv2 advertisement interval 0.500000s must be an integer"),
    ("an authentication block", "VRRP version 3 does not support authentication"),
    ("writable health script", "insecure"),
    ("no inside NIC", "interface nic7"),
])
def test_keepalived_config_test_fails_the_validate_on_what_it_refuses(broken, said):
    """The validate can fail: each of these makes keepalived's config test exit non-zero (version 2 counts the
    advertisement interval in whole seconds; version 3 has no authentication)."""
    (_instance, policy) = member_policies([OFFICE], (("hv1", [A]), ("hv2", [B])))["egress-a"]
    files = guest_files(policy)
    argv = keepalived_argv(policy)
    conf = files[KEEPALIVED_CONF_PATH][0]
    if broken == "VRRP version 2":
        files[KEEPALIVED_CONF_PATH] = (conf.replace("    vrrp_version 3\n", ""), "0644")
    elif broken == "an authentication block":
        files[KEEPALIVED_CONF_PATH] = (conf.replace("    advert_int 0.5\n", "    advert_int 0.5\n    authentication {\n"
                                                    "        auth_type PASS\n        auth_pass secret\n    }\n"), "0644")
    elif broken == "writable health script":
        files[HEALTH_SCRIPT_PATH] = (files[HEALTH_SCRIPT_PATH][0], "0777")
    else:
        files[KEEPALIVED_CONF_PATH] = (files[KEEPALIVED_CONF_PATH][0].replace("interface nic0", "interface nic7")
                                       .replace("dev nic0", "dev nic7"), "0644")
    completed = keepalived_test(files, argv)
    assert completed.returncode != 0 and said in completed.stderr, completed.stderr


def test_keepalived_conf_is_byte_stable_and_says_what_the_design_says():
    groups = [dict(OFFICE, address6="2001:db8:40::10", egress_follows=True, egress_address="198.18.41.10")]
    first = member_policies(groups, (("hv1", [A]), ("hv2", [B])), outside=True)
    again = member_policies(groups, (("hv1", [A]), ("hv2", [B])), outside=True)
    assert first == again
    conf = guest_files(first["egress-b"][1])[KEEPALIVED_CONF_PATH][0]
    instance = conf.split("vrrp_instance office {\n", 1)[1]
    assert instance.split("    virtual_router_id")[0] == (
        "    state BACKUP\n    nopreempt\n    interface nic0\n    unicast_src_ip 198.18.40.12\n"
        "    unicast_peer {\n        198.18.40.11\n    }\n    check_unicast_src\n")
    assert "    priority 190\n    advert_int 0.5\n    track_script {\n        egress_squid\n    }\n" in instance
    assert ("    virtual_ipaddress {\n        198.18.40.10/24 dev nic0\n        198.18.41.10/24 dev nic1\n    }\n"
            "    virtual_ipaddress_excluded {\n        2001:db8:40::10/64 dev nic0\n    }\n") in instance
    assert ('vrrp_script egress_squid {\n    script "/usr/local/lib/egress-proxy/squid-answers 13129"\n    interval 2\n'
            "    timeout 3\n    fall 3\n    rise 2\n    init_fail\n}\n") in conf
    assert "    router_id egress-b\n    vrrp_version 3\n    script_user root\n    enable_script_security\n" in conf
    assert "authentication" not in conf and "include" not in conf


def test_the_members_validate_and_reload_wrap_squids_in_one_shell_of_fixed_text():
    (_instance, policy) = member_policies([OFFICE], (("hv1", [A]), ("hv2", [B])), outside=True)["egress-a"]
    assert policy["validate"] == [
        "/bin/sh", "-c", 'set -e; "$@"; /usr/sbin/keepalived --config-test --all-config '
        "--use-file=/etc/keepalived/keepalived.conf", "sh", "/usr/sbin/squid", "-k", "parse"]
    assert policy["reload"] == [
        "/bin/sh", "-c", 'set -e; /usr/sbin/sysctl --quiet --load=%s; %s "$@"; /bin/systemctl reload-or-restart '
        "keepalived" % (SYSCTL_PATH, RELOAD_HAND_OVERS), "sh", HAND_OVER_PATH, "198.18.40.10", "198.18.40.12", "--",
        "/bin/systemctl", "reload-or-restart", "squid"]
    assert policy["release"] == release_argv([{"address": "198.18.40.10/24", "peers": ["198.18.40.12"]}])
    paths = [entry["path"] for entry in policy["files"]]
    assert paths == ["/etc/squid/squid.conf", KEEPALIVED_CONF_PATH, HEALTH_SCRIPT_PATH, HAND_OVER_PATH, SYSCTL_PATH]
    modes = {entry["path"]: entry.get("mode") for entry in policy["files"]}
    assert modes[HEALTH_SCRIPT_PATH] == modes[HAND_OVER_PATH] == "0755"
    # Without an outside NIC squid listens on every address: no sysctl.
    (_instance, policy) = member_policies([OFFICE], (("hv1", [A]), ("hv2", [B])))["egress-a"]
    assert SYSCTL_PATH not in [entry["path"] for entry in policy["files"]]
    assert policy["reload"][2] == 'set -e; %s "$@"; /bin/systemctl reload-or-restart keepalived' % RELOAD_HAND_OVERS


def test_the_policy_is_what_the_module_accepts():
    for _name, (_instance, policy) in member_policies(*SHAPES["egress_follows"]).items():
        checked = Policy.from_params(policy)
        assert [policy_file.secret for policy_file in checked.files].count(True) == 0
        assert list(checked.release) == policy["release"]
        assert checked.group == HaGroup("office", "198.18.40.10", "2001:db8:40::10")


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_members_policy_names_its_one_group_without_prefix_lengths(shape):
    groups, hypervisors, outside = SHAPES[shape]
    for name, (instance, policy) in member_policies(groups, hypervisors, outside).items():
        (group,) = instance["ha"]
        assert policy["group"] == {"name": group["name"], "address": group["address"].split("/")[0],
                                   "address6": group["address6"].split("/")[0] if group["address6"] else None}, name


def test_a_member_in_two_groups_is_refused_rather_than_naming_one():
    groups, hypervisors, _outside = SHAPES["two groups"]
    found = fleet_groups(groups, listings(groups, *hypervisors), UID)["groups"]
    both = instance_groups(found, "egress-a") + instance_groups(found, "egress-c")
    with pytest.raises(HaGroupError) as raised:
        policy_group(both)
    assert str(raised.value) == "egress_proxy_ha_groups puts a proxy in 2 groups (office, lab); a proxy is in one group."


# policy.release: the hand-over, run by the module through the guest agent before the VM is shut down.
def run_release(argv, script):
    """``argv`` (release_argv's) run by /bin/sh with the hand-over script at ``script`` instead of HAND_OVER_PATH."""
    assert argv[4] == HAND_OVER_PATH
    return subprocess.run(argv[:4] + [str(script)] + argv[5:], capture_output=True, text=True, timeout=10, check=False)


def test_the_release_hands_each_groups_address_over_to_its_peers():
    (instance, policy) = member_policies(*SHAPES["IPv4"])["egress-a"]
    assert instance["ha"][0]["address"] == "198.18.40.10/24"
    assert policy["release"] == ["/bin/sh", "-c", policy["release"][2], "sh", HAND_OVER_PATH, "198.18.40.10",
                                 "198.18.40.12"]
    # Fixed text: every value is an argument.
    assert "198.18" not in policy["release"][2] and HAND_OVER_PATH not in policy["release"][2]
    (_instance, policy) = member_policies(*SHAPES["two groups"])["egress-c"]
    assert policy["release"][4:] == [HAND_OVER_PATH, "198.18.40.20", "198.18.40.14"]


def test_the_release_runs_the_hand_over_for_every_group_in_turn_and_stops_at_a_refusal(tmp_path):
    script = tmp_path / "hand-over"
    calls = tmp_path / "calls"
    script.write_text("#!/bin/sh\necho \"$# $*\" >> %s\n[ \"$1\" != 198.18.50.10 ] || { echo refused; exit 3; }\n" % calls)
    script.chmod(0o755)
    groups = [{"address": "198.18.40.10/24", "peers": ["198.18.40.12", "198.18.40.13"]},
              {"address": "198.18.60.10/24", "peers": ["198.18.60.12"]}]
    completed = run_release(release_argv(groups), script)
    assert completed.returncode == 0 and calls.read_text() == (
        "3 198.18.40.10 198.18.40.12 198.18.40.13\n2 198.18.60.10 198.18.60.12\n")
    calls.unlink()
    groups = [{"address": "198.18.50.10/24", "peers": ["198.18.50.12"]}, {"address": "198.18.60.10/24", "peers": ["198.18.60.12"]}]
    completed = run_release(release_argv(groups), script)
    assert (completed.returncode, completed.stdout) == (3, "refused\n")
    assert calls.read_text() == "2 198.18.50.10 198.18.50.12\n"


@pytest.mark.parametrize("refusal", [0, 1])
def test_a_members_reload_hands_each_address_over_first_and_reloads_when_the_hand_over_refuses(tmp_path, refusal):
    script = tmp_path / "hand-over"
    calls = tmp_path / "calls"
    script.write_text("#!/bin/sh\necho \"$*\" >> %s\nexit %d\n" % (calls, refusal))
    script.chmod(0o755)
    completed = subprocess.run(
        ["/bin/sh", "-c", 'set -e; %s "$@"' % RELOAD_HAND_OVERS, "sh", str(script), "198.18.40.10",
         "198.18.40.12,198.18.40.13", "198.18.60.10", "198.18.60.12", "--", "echo", "reloaded"],
        capture_output=True, text=True, timeout=10, check=False)
    assert (completed.returncode, completed.stdout) == (0, "reloaded\n")
    assert calls.read_text() == ("--within 10 198.18.40.10 198.18.40.12 198.18.40.13\n"
                                 "--within 10 198.18.60.10 198.18.60.12\n")


@pytest.mark.parametrize("present", [False, True])
def test_the_release_of_a_guest_without_an_executable_hand_over_succeeds_saying_so(tmp_path, present):
    """A proxy that is becoming a member has its old policy, without the script, when the run replaces it."""
    script = tmp_path / "hand-over"
    if present:
        script.write_text("#!/bin/sh\nexit 1\n")
        script.chmod(0o644)
    completed = run_release(release_argv([{"address": "198.18.40.10/24", "peers": ["198.18.40.12"]}]), script)
    assert completed.returncode == 0
    assert completed.stdout == "no hand-over script at %s: this proxy holds no group address\n" % script
