# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A set defines no proxy with a static egress address another domain of the hypervisor records (issue 40 item 3):
two runs of one pool at once allocate from listings taken before either defined anything."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
from xml.sax.saxutils import escape

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import MUTATING, ready_host
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy_set import set_request


def two_nics(name, address=None, address6=None):
    outside = {"bridge": "br1", "role": "outside", "gateway": "198.18.21.1", "address": address}
    if address6:
        outside.update(address6=address6, gateway6="2001:db8:21::1")
    return {"name": name, "interfaces": [{"bridge": "br0", "role": "inside"}, outside]}


def a_set(*proxies, **changes):
    return set_request(list(proxies), bridge=None, gc=False, **changes)


@pytest.mark.parametrize("address, address6, field, held", [
    ("198.18.21.10/24", None, "address", "198.18.21.10"),
    ("198.18.21.11/24", "2001:db8:21::10/64", "address6", "2001:db8:21::10"),
], ids=["IPv4", "IPv6"])
def test_a_proxy_whose_egress_address_another_domain_records_is_refused_before_anything(
        run, address, address6, field, held):
    hv = ready_host()
    run(hv, a_set(two_nics("proxy-a", "198.18.21.10/24", "2001:db8:21::10/64")))
    before = len(hv.calls)
    for check_mode in (True, False):
        with pytest.raises(errors.ValidationError) as raised:
            run(hv, a_set(two_nics("proxy-b", address, address6)), check_mode=check_mode)
        assert raised.value.message == (
            "proxies[0] (proxy-b): its egress address %s (outside.%s) is recorded by domain 'proxy-a' on this "
            "hypervisor, so two proxies would send from one address: another run of the same pool defined it after "
            "this run's allocation listed the domains (runs that share a pool must not overlap). The proxy was not "
            "defined, and no proxy of the set was touched; run again to get a free address" % (held, field))
    assert not MUTATING.intersection(hv.calls[before:]), hv.calls[before:]
    assert sorted(hv.domains) == ["proxy-a"]


def test_a_proxy_keeps_its_own_address_and_another_address_is_free(run):
    hv = ready_host()
    run(hv, a_set(two_nics("proxy-a", "198.18.21.10/24")))
    result = run(hv, a_set(two_nics("proxy-a", "198.18.21.10/24", "2001:db8:21::10/64"), two_nics("proxy-b", "198.18.21.11/24")))
    assert [proxy["outcome"] for proxy in result["proxies"]] == ["replaced", "created"]


@pytest.mark.parametrize("forged", ["198.18.21.10\nacl all src all", "198.18.21.010", ["198.18.21.10/24"], "198.18.21.10/24/8"])
def test_a_forged_address_in_another_domains_metadata_holds_nothing(run, forged):
    """The metadata is anyone's with libvirt access: only a recorded address that parses as one holds it."""
    hv = ready_host()
    run(hv, a_set(two_nics("proxy-a", "198.18.21.20/24")))
    dom = hv.domains["proxy-a"]
    recorded = '"address":"198.18.21.20/24"'
    assert recorded in dom.xml
    dom.xml = dom.xml.replace(recorded, '"address":' + escape(json.dumps(forged)))
    result = run(hv, a_set(two_nics("proxy-b", "198.18.21.10/24")))
    assert [proxy["outcome"] for proxy in result["proxies"]] == ["created"]


POLICY = {"files": [{"path": "/etc/squid/squid.conf", "content": "http_port 3128\n"}]}


def pooled_policy(**addresses):
    """A policy whose profiles took ``addresses`` ({profile: IPv4}) from the pool."""
    return dict(POLICY, pooled_addresses={profile: {"egress_address": address} for profile, address in addresses.items()})


@pytest.mark.parametrize("held_by", ["an egress address", "a profile's pooled address"])
def test_a_profiles_pooled_address_another_domain_records_is_refused_before_anything(run, held_by):
    hv = ready_host()
    if held_by == "an egress address":
        run(hv, a_set(two_nics("proxy-a", "198.18.21.10/24")))
    else:
        run(hv, a_set(dict(two_nics("proxy-a", "198.18.21.12/24"), policy=pooled_policy(ci="198.18.21.10"))))
    run(hv, a_set(dict(two_nics("proxy-b", "198.18.21.11/24"), policy=POLICY)))
    before = len(hv.calls)
    # proxy-b's policy to be applied in place (a KEEP), and proxy-c to be created: each with a pooled address held.
    for proxy in (dict(two_nics("proxy-b", "198.18.21.11/24"), policy=pooled_policy(backup="198.18.21.10")),
                  dict(two_nics("proxy-c", "198.18.21.13/24"), policy=pooled_policy(backup="198.18.21.10"))):
        for check_mode in (True, False):
            with pytest.raises(errors.ValidationError) as raised:
                run(hv, a_set(proxy), check_mode=check_mode)
            assert raised.value.message == (
                "proxies[0] (%s): the egress address 198.18.21.10 of its profile backup (policy.pooled_addresses, "
                "egress_address) is recorded by domain 'proxy-a' on this hypervisor, so two proxies would send from "
                "one address: another run of the same pool gave it after this run's allocation listed the domains "
                "(runs that share a pool must not overlap). No proxy of the set was touched; run again to get a free "
                "address" % proxy["name"])
    assert not MUTATING.intersection(hv.calls[before:]), hv.calls[before:]
    assert sorted(hv.domains) == ["proxy-a", "proxy-b"]


def test_a_proxy_whose_egress_address_another_domains_profile_records_is_refused(run):
    hv = ready_host()
    run(hv, a_set(dict(two_nics("proxy-a", "198.18.21.12/24"), policy=pooled_policy(ci="198.18.21.10"))))
    with pytest.raises(errors.ValidationError) as raised:
        run(hv, a_set(two_nics("proxy-b", "198.18.21.10/24")))
    assert raised.value.message.startswith("proxies[0] (proxy-b): its egress address 198.18.21.10 (outside.address) is "
                                           "recorded by domain 'proxy-a' on this hypervisor")


def test_a_proxy_keeps_the_pooled_addresses_its_own_domain_records(run):
    hv = ready_host()
    run(hv, a_set(dict(two_nics("proxy-a", "198.18.21.12/24"), policy=pooled_policy(ci="198.18.21.10"))))
    again = run(hv, a_set(dict(two_nics("proxy-a", "198.18.21.12/24"), policy=pooled_policy(ci="198.18.21.10")),
                          dict(two_nics("proxy-b", "198.18.21.11/24"), policy=pooled_policy(ci="198.18.21.14"))))
    # Not refused for its own addresses (the fake guest holds no policy file: its policy is written again).
    assert [proxy["outcome"] for proxy in again["proxies"]] == ["updated", "created"]
    # A replacement records the same addresses again: its old domain's are its own.
    replaced = run(hv, a_set(dict(two_nics("proxy-a", "198.18.21.12/24"), policy=pooled_policy(ci="198.18.21.10"),
                                  memory_mib=1024)))
    assert [proxy["outcome"] for proxy in replaced["proxies"]] == ["replaced"]
