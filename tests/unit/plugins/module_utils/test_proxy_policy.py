# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A proxy's policy over the fake: in the seed of a new VM, applied in place to a running one, drift repaired."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import email
import hashlib
import json

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.ha_group import HaGroup
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.pooled_addresses import PooledAddresses
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.policy import _STAGE, BOOT_FINISHED, SHELL, Policy
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import format_rfc3339
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy import plan as steps
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import ProxyRequest
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.nocloud import USER_DATA as USER_DATA_FILE
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import RUNNING, SHUTOFF, FakeFile
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import (
    CREATE,
    NOW,
    USER_DATA,
    domain_of,
    params,
    ready_host,
)
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy_set import lease_all, set_request

SQUID_CONF = "http_port 3128\nhttp_access deny all\n"
USERS = "alice:$6$rounds=100000$salt$hash\n"
NAMES = ["proxy-a", "proxy-b"]
CREATED_BEFORE = datetime.timedelta(hours=1)  # running_set's proxies: their first boot long over


def policy(conf=SQUID_CONF, users=USERS, **changes):
    value = {"files": [{"path": "/etc/squid/squid.conf", "content": conf},
                       {"path": "/etc/squid/egress-users", "secret_content": users, "group": "proxy", "mode": "0640"}],
             "validate": ["/usr/sbin/squid", "-k", "parse"], "reload": ["/usr/sbin/squid", "-k", "reconfigure"]}
    value.update(changes)
    return value


def squid(refuse=None):
    """A fake squid: ``-k parse`` fails when squid.conf holds ``refuse``; every run is logged by the guest."""
    def program(argv, guest):
        if argv[1:] == ["-k", "parse"] and refuse and refuse.encode() in guest.files["/etc/squid/squid.conf"].content:
            return 1, b"", b"FATAL: Bungled squid.conf line 2: " + refuse.encode()
        return 0, b"", b""
    return program


def running_set(converge, **changes):
    """Two proxies created with the policy an hour ago, running, their guests holding what the seed wrote."""
    hv = ready_host()
    converge(hv, set_request(NAMES, policy=policy(), **changes), clock=lambda: NOW - CREATED_BEFORE)
    for name in NAMES:
        dom = hv.domains[name]
        for entry in Policy.from_params(policy()).files:
            dom.guest.files[entry.path] = FakeFile(entry.content, entry.owner, entry.group, entry.mode)
        dom.guest.programs["/usr/sbin/squid"] = squid()
    lease_all(hv)
    return hv


def test_a_new_vm_gets_the_policy_in_its_seed_and_records_its_digest(converge):
    hv = ready_host()
    result = converge(hv, set_request(NAMES, policy=policy()))
    assert [p["actions"] for p in result["proxies"]] == [CREATE, CREATE]
    digest = Policy.from_params(policy()).digest()
    assert [p["policy_digest"] for p in result["proxies"]] == [digest, digest]
    assert domain_of(hv, "proxy-a").metadata.policy_digest == digest
    files = ProxyRequest.from_params(params(policy=policy())).seed_files()
    message = email.message_from_bytes(files[USER_DATA_FILE])
    parts = [part for part in message.walk() if not part.is_multipart()]
    assert parts[0].get_payload(decode=True).decode() == USER_DATA
    config = parts[1].get_payload(decode=True).decode()
    assert parts[1]["Merge-Type"] == "list(append)+dict(recurse_array)+str()"
    assert config.startswith("#cloud-config\n") and '"path": "/etc/squid/squid.conf"' in config
    assert '"owner": "root:proxy"' in config and '"permissions": "0640"' in config and '"defer": true' in config


def test_a_policy_change_is_applied_in_place_never_replacing(converge):
    hv = running_set(converge)
    uuids = {name: hv.domains[name] for name in NAMES}
    changed = policy(conf=SQUID_CONF + "acl denied dstdomain -n .example.com\n")
    result = converge(hv, set_request(NAMES, policy=changed))
    assert [(p["outcome"], p["actions"]) for p in result["proxies"]] == [("updated", [steps.APPLY_POLICY])] * 2
    for name in NAMES:
        dom = hv.domains[name]
        assert dom is uuids[name] and dom.state == RUNNING
        assert dom.guest.files["/etc/squid/squid.conf"].content == changed["files"][0]["content"].encode()
        assert not [path for path in dom.guest.files if path.endswith((".kvm-new", ".kvm-old"))]
        assert dom.guest.ran[-1] == ["/usr/sbin/squid", "-k", "reconfigure"]
        assert domain_of(hv, name).metadata.policy_digest == Policy.from_params(changed).digest()
    diff = result["diff"]
    assert diff["before"]["proxy-a"]["policy"]["/etc/squid/squid.conf"] == SQUID_CONF
    assert diff["after"]["proxy-a"]["policy"]["/etc/squid/squid.conf"] == changed["files"][0]["content"]
    # The users' hashes never show: a secret file is its digest only.
    assert USERS not in repr(diff) and diff["after"]["proxy-a"]["policy"]["/etc/squid/egress-users"].startswith(
        "(secret, sha256 ")
    again = converge(hv, set_request(NAMES, policy=changed))
    assert again["changed"] is False


def test_a_file_edited_in_the_guest_is_drift_check_mode_reports_and_the_run_restores(run, converge):
    hv = running_set(converge)
    guest = hv.domains["proxy-b"].guest
    guest.files["/etc/squid/squid.conf"].content += b"http_access allow all\n"
    predicted = run(hv, set_request(NAMES, policy=policy()), check_mode=True)
    assert [p["policy_drift"] for p in predicted["proxies"]] == [[], ["/etc/squid/squid.conf"]]
    assert predicted["proxies"][1]["actions"] == [steps.APPLY_POLICY] and predicted["proxies"][0]["actions"] == []
    result = converge(hv, set_request(NAMES, policy=policy()))
    assert guest.files["/etc/squid/squid.conf"].content == SQUID_CONF.encode()
    # Only the drifted file is written; the users' file is left as it is.
    staged = [argv[4:] for argv in guest.ran if argv[:3] == [SHELL, "-c", _STAGE]][0]
    assert staged == ["root:root", "0644", "/etc/squid/squid.conf.kvm-new"]
    assert result["proxies"][1]["policy_drift"] == ["/etc/squid/squid.conf"]


def test_a_policy_its_validate_refuses_leaves_the_old_files_in_place(converge):
    hv = running_set(converge)
    for name in NAMES:
        hv.domains[name].guest.programs["/usr/sbin/squid"] = squid(refuse="bogus_directive")
    with pytest.raises(errors.PermanentError) as raised:
        converge(hv, set_request(NAMES, policy=policy(conf=SQUID_CONF + "bogus_directive on\n")))
    assert "FATAL: Bungled squid.conf line 2: bogus_directive" in raised.value.message
    assert "proxy 'proxy-a'" in raised.value.message and "proxy 'proxy-b'" in raised.value.message
    for name in NAMES:
        guest = hv.domains[name].guest
        assert guest.files["/etc/squid/squid.conf"].content == SQUID_CONF.encode()
        assert "/etc/squid/squid.conf.kvm-old" not in guest.files
        assert ["/usr/sbin/squid", "-k", "reconfigure"] not in guest.ran[-3:]
        assert domain_of(hv, name).metadata.policy_digest == Policy.from_params(policy()).digest()


def test_an_agent_that_does_not_answer_fails_naming_the_proxy_after_the_others_got_it(converge):
    hv = running_set(converge)
    hv.domains["proxy-b"].agent_error = errors.VIR_ERR_AGENT_UNRESPONSIVE
    changed = policy(conf=SQUID_CONF + "# changed\n")
    with pytest.raises(errors.TransientError) as raised:
        converge(hv, set_request(NAMES, policy=changed))
    assert "proxy 'proxy-b'" in raised.value.message and "on_unreachable_agent=replace" in raised.value.message
    assert "proxy-a" not in raised.value.message.split("proxy 'proxy-b'")[0]
    assert hv.domains["proxy-a"].guest.files["/etc/squid/squid.conf"].content == changed["files"][0]["content"].encode()
    assert raised.value.completed_actions == ["proxy-a: " + steps.APPLY_POLICY]


@pytest.mark.parametrize("on_unreachable_agent", ["fail", "replace"])
def test_an_agent_that_does_not_answer_with_a_current_policy_only_warns(run, converge, on_unreachable_agent):
    hv = running_set(converge)
    hv.domains["proxy-b"].agent_error = errors.VIR_ERR_AGENT_UNRESPONSIVE
    result = run(hv, set_request(NAMES, policy=policy(), on_unreachable_agent=on_unreachable_agent))
    assert result["changed"] is False
    assert "could not be read back" in result["proxies"][1]["warnings"][0]


def created_seconds_ago(converge, seconds):
    """running_set's proxies, proxy-b created ``seconds`` before NOW, its first boot going on, its agent silent."""
    hv = running_set(converge)
    dom = hv.domains["proxy-b"]
    dom.xml = dom.xml.replace(">%s<" % format_rfc3339(NOW - CREATED_BEFORE),
                              ">%s<" % format_rfc3339(NOW - datetime.timedelta(seconds=seconds)))
    assert domain_of(hv, "proxy-b").metadata.created_at == NOW - datetime.timedelta(seconds=seconds)
    del dom.guest.files[BOOT_FINISHED]
    dom.agent_error = errors.VIR_ERR_AGENT_UNRESPONSIVE
    return hv


def test_a_proxy_created_within_its_wait_timeout_whose_agent_is_silent_gets_a_change_once_its_first_boot_is_over(
        run, converge, fake_time):
    """A run right after the one that created it: many images start their agent at the end of the first boot. It is
    not warned about; the run waits for it, within its wait_timeout, as for a proxy it started."""
    hv = created_seconds_ago(converge, 30)
    dom = hv.domains["proxy-b"]
    started = fake_time.now

    def boot_ends(_slept):
        if fake_time.now - started >= 40:
            dom.agent_error = None
            dom.guest.files[BOOT_FINISHED] = FakeFile(b"done\n")
    fake_time.on_sleep = boot_ends
    changed = policy(conf=SQUID_CONF + "# changed during the first boot\n")
    result = converge(hv, set_request(NAMES, policy=changed))
    assert [(p["outcome"], p["actions"]) for p in result["proxies"]] == [("updated", [steps.APPLY_POLICY])] * 2
    assert hv.domains["proxy-b"] is dom and "warnings" not in result["proxies"][1]
    assert dom.guest.files["/etc/squid/squid.conf"].content.endswith(b"boot\n")
    assert 40 <= fake_time.now - started <= 60


def test_with_on_unreachable_agent_replace_a_new_proxy_whose_agent_is_silent_is_replaced_as_asked(converge):
    hv = created_seconds_ago(converge, 30)
    old = hv.domains["proxy-b"]
    result = converge(hv, set_request(NAMES, policy=policy(conf="# changed\n"), on_unreachable_agent="replace",
                                      wait_for_ip=False))
    assert [p["outcome"] for p in result["proxies"]] == ["updated", "replaced"]
    assert hv.domains["proxy-b"] is not old


@pytest.mark.parametrize("seconds, message", [
    (30, "the guest agent of domain 'proxy-b' did not answer within 60 s"),
    (61, "the guest agent of domain 'proxy-b' did not answer"),
])
def test_a_silent_agent_fails_naming_the_proxy_at_the_end_of_its_wait_timeout_or_at_once_once_that_is_over(
        converge, fake_time, seconds, message):
    hv = created_seconds_ago(converge, seconds)
    started = fake_time.now
    with pytest.raises(errors.TransientError) as raised:
        converge(hv, set_request(NAMES, policy=policy(conf="# changed\n"), wait_timeout=60))
    assert message in raised.value.message and "it still enforces the policy it had" in raised.value.message
    assert fake_time.now - started == (60 if seconds < 60 else 0), fake_time.now - started


def test_an_owner_the_guest_lacks_fails_before_any_file_moved(converge):
    hv = running_set(converge)
    changed = policy(conf=SQUID_CONF + "# changed\n")
    changed["files"][1]["group"] = "squid"
    with pytest.raises(errors.PermanentError) as raised:
        converge(hv, set_request(NAMES, policy=changed))
    assert "chown: invalid group: 'root:squid'" in raised.value.message
    guest = hv.domains["proxy-a"].guest
    assert guest.files["/etc/squid/squid.conf"].content == SQUID_CONF.encode()


def test_a_proxy_stopped_after_an_in_place_change_gets_its_seed_once_it_is_off(converge):
    hv = running_set(converge)
    changed = policy(conf=SQUID_CONF + "# changed\n")
    converge(hv, set_request(NAMES, policy=changed))
    stopped = converge(hv, set_request(NAMES, policy=changed, state="stopped"))
    assert stopped["proxies"][0]["actions"] == [steps.SHUTDOWN_DOMAIN, steps.WRITE_SEED]
    assert "policy" not in stopped["diff"]["after"]["proxy-a"] or (
        stopped["diff"]["after"]["proxy-a"]["policy"] == stopped["diff"]["before"]["proxy-a"]["policy"])
    assert converge(hv, set_request(NAMES, policy=changed, state="stopped"))["changed"] is False


def test_on_unreachable_agent_replace_replaces_a_proxy_that_cannot_get_its_new_policy(converge):
    hv = running_set(converge, wait_for_ip=False)
    old = hv.domains["proxy-b"]
    old.agent_error = errors.VIR_ERR_AGENT_UNRESPONSIVE
    changed = policy(conf=SQUID_CONF + "# changed\n")
    result = converge(hv, set_request(NAMES, policy=changed, on_unreachable_agent="replace"))
    assert [p["outcome"] for p in result["proxies"]] == ["updated", "replaced"]
    assert hv.domains["proxy-b"] is not old
    assert "on_unreachable_agent=replace" in result["proxies"][1]["warnings"][0]


def test_a_stopped_proxy_started_later_gets_the_current_policy_before_it_counts_as_up(converge):
    hv = running_set(converge)
    hv.domains["proxy-a"].state = SHUTOFF
    changed = policy(conf=SQUID_CONF + "# changed while it was off\n")
    result = converge(hv, set_request(NAMES, policy=changed))
    assert result["proxies"][0]["actions"] == [steps.WRITE_SEED, steps.START_DOMAIN, steps.APPLY_POLICY]
    assert hv.domains["proxy-a"].guest.files["/etc/squid/squid.conf"].content.endswith(b"off\n")


def test_a_machine_change_still_replaces(converge):
    hv = running_set(converge)
    result = converge(hv, set_request(NAMES, policy=policy(), memory_mib=4096))
    assert [p["outcome"] for p in result["proxies"]] == ["replaced", "replaced"]


def test_the_policy_is_not_part_of_the_spec():
    one = ProxyRequest.from_params(params(policy=policy()))
    other = ProxyRequest.from_params(params(policy=policy(conf="http_port 8080\n")))
    assert one.spec() == other.spec() == ProxyRequest.from_params(params()).spec()
    assert one.policy_digest != other.policy_digest


@pytest.mark.parametrize("change, message", [
    ({"files": []}, "policy.files must list at least one file"),
    ({"files": [{"path": "etc/squid.conf", "content": "x"}]}, "policy.files[0].path 'etc/squid.conf' is not an absolute"),
    ({"files": [{"path": "/etc/../shadow", "content": "x"}]}, "no . or .. component"),
    ({"files": [{"path": "/etc/a b", "content": "x"}]}, "is not an absolute path"),
    ({"files": [{"path": "/etc/x\n", "content": "x"}]}, "is not an absolute path"),
    ({"files": [{"path": "/etc/x", "content": "a\x00b"}]}, "policy.files[0].content holds binary data"),
    ({"files": [{"path": "/etc/x", "content": "x", "owner": "root;rm"}]}, "policy.files[0].owner"),
    ({"files": [{"path": "/etc/x", "content": "x", "mode": "644\n"}]}, "policy.files[0].mode"),
    ({"files": [{"path": "/etc/x", "content": "x"}, {"path": "/etc/x", "content": "y"}]}, "appears more than once"),
    ({"files": [{"path": "/etc/x"}]}, "needs one of content and secret_content"),
    ({"reload": ["squid", "-k\nreconfigure"]}, "policy.reload[1] holds a control character"),
])
def test_bad_policies_are_refused_naming_the_entry(change, message):
    with pytest.raises(ValidationError) as raised:
        ProxyRequest.from_params(params(policy=dict(policy(), **change)))
    assert message in raised.value.message


GROUP = {"name": "demo", "address": "198.18.40.10", "address6": "2001:db8:40::10"}
POOLED = {"backup": {"egress_address": "203.0.113.12"},
          "ci": {"egress_address": "203.0.113.11", "egress_address6": "2001:db8:20::11"}}


@pytest.mark.parametrize("option, value, message", [
    ("group", dict(GROUP, name="Demo"), "policy.group.name 'Demo' is not 1-15 lowercase letters"),
    ("group", dict(GROUP, name="a" * 16), "policy.group.name"),
    ("group", dict(GROUP, name="demo\n"), "policy.group.name 'demo\\n'"),
    ("group", dict(GROUP, address="198.18.40.10\n"), "policy.group.address '198.18.40.10\\n' is not an IPv4 address"),
    ("group", dict(GROUP, address=" 198.18.40.10"), "policy.group.address ' 198.18.40.10' is not an IPv4 address"),
    ("group", dict(GROUP, address="198.18.40.10/24"), "policy.group.address '198.18.40.10/24' is not an IPv4 address"),
    ("group", dict(GROUP, address="\uff11\uff19\uff18.18.40.10"), "policy.group.address '\uff11"),
    ("group", dict(GROUP, address="2001:db8:40::10"), "policy.group.address '2001:db8:40::10' is not an IPv4 address"),
    ("group", dict(GROUP, address="127.0.0.1"), "policy.group.address 127.0.0.1 is not an address clients reach"),
    ("group", dict(GROUP, address=None), "policy.group.address None is not an IPv4 address"),
    ("group", dict(GROUP, address6="2001:db8:40::10%eth0"), "policy.group.address6 '2001:db8:40::10%eth0' is not an IPv6"),
    ("group", dict(GROUP, address6="fe80::1"), "policy.group.address6 fe80::1 is not an address clients reach"),
    ("group", dict(GROUP, address6="2001:db8:40::10/64"), "policy.group.address6 '2001:db8:40::10/64'"),
    ("group", dict(GROUP, address6="２001:db8::1"), "policy.group.address6 '２001:db8::1'"),
    ("group", dict(GROUP, vip="198.18.40.10"), "policy.group has unknown keys 'vip'"),
    ("group", "demo", "policy.group must be a dictionary"),
    ("pooled_addresses", {"Backup": {"egress_address": "203.0.113.12"}}, "policy.pooled_addresses['Backup']: the key is not a profile's name"),
    ("pooled_addresses", {"a" * 33: {"egress_address": "203.0.113.12"}}, "the key is not a profile's name"),
    ("pooled_addresses", {"backup\n": {"egress_address": "203.0.113.12"}}, "policy.pooled_addresses['backup\\n']"),
    ("pooled_addresses", {"backup": {"egress_address": "203.0.113.12/24"}},
     "policy.pooled_addresses['backup'].egress_address '203.0.113.12/24' is not an IPv4 address"),
    ("pooled_addresses", {"backup": {"egress_address": "2001:db8::12"}}, "egress_address '2001:db8::12' is not an IPv4 address"),
    ("pooled_addresses", {"backup": {"egress_address6": "2001:db8::12%eth0"}}, "egress_address6 '2001:db8::12%eth0' is not an IPv6"),
    ("pooled_addresses", {"backup": {"egress_address": "\uff12\uff10\uff13.0.113.12"}}, "egress_address '\uff12"),
    ("pooled_addresses", {"backup": {"egress_address": None}}, "egress_address None is not an IPv4 address"),
    ("pooled_addresses", {"backup": {"address": "203.0.113.12"}}, "must be a dictionary of egress_address, egress_address6 or both"),
    ("pooled_addresses", {"backup": {}}, "policy.pooled_addresses['backup'] {} must be a dictionary of egress_address"),
    ("pooled_addresses", {"backup": "203.0.113.12"}, "policy.pooled_addresses['backup'] '203.0.113.12' must be a dictionary"),
])
def test_a_bad_group_or_pooled_addresses_are_refused_naming_the_option(option, value, message):
    with pytest.raises(ValidationError) as raised:
        ProxyRequest.from_params(params(policy=policy(**{option: value})))
    assert message in raised.value.message


def test_the_group_is_normalised_and_covered_by_the_digest_a_policy_without_one_keeps_its_own():
    plain = Policy.from_params(policy())
    # The digest a policy had before groups existed: its files alone.
    files = [{"path": f.path, "owner": f.owner, "group": f.group, "mode": f.mode, "sha256": f.sha256}
             for f in sorted(plain.files, key=lambda f: f.path)]
    assert plain.group is None and plain.digest() == hashlib.sha256(
        json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    member = Policy.from_params(policy(group=dict(GROUP, address6="2001:DB8:40:0::10")))
    assert member.group == HaGroup("demo", "198.18.40.10", "2001:db8:40::10")
    assert member.digest() == Policy.from_params(policy(group=GROUP)).digest() != plain.digest()
    assert member.digest() != Policy.from_params(policy(group=dict(GROUP, address="198.18.40.20"))).digest()
    assert member.digest() != Policy.from_params(policy(group=dict(GROUP, address6=None))).digest()
    assert Policy.from_params(policy(group=None)) == plain


@pytest.mark.parametrize("option, values, attribute, value_class", [
    ("group", (GROUP, dict(GROUP, address="198.18.40.20", address6=None), None), "ha_group_json", HaGroup),
    ("pooled_addresses", ({"backup": {"egress_address": "203.0.113.12"}}, {"backup": {"egress_address": "203.0.113.13"}},
                          None), "pooled_addresses_json", PooledAddresses),
], ids=["joining, moving and leaving a group", "pooled addresses given, changed and dropped"])
def test_a_recorded_part_of_the_policy_is_applied_in_place_and_recorded(
        run, converge, option, values, attribute, value_class):
    hv = running_set(converge)
    uuids = {name: hv.domains[name] for name in NAMES}
    assert getattr(domain_of(hv, "proxy-a").metadata, attribute) is None
    for value in values:
        requested = policy(**{option: value})
        predicted = run(hv, set_request(NAMES, policy=requested), check_mode=True)
        assert [p["actions"] for p in predicted["proxies"]] == [[steps.APPLY_POLICY]] * 2
        result = converge(hv, set_request(NAMES, policy=requested))
        assert [(p["outcome"], p["actions"]) for p in result["proxies"]] == [("updated", [steps.APPLY_POLICY])] * 2
        for name in NAMES:
            assert hv.domains[name] is uuids[name] and hv.domains[name].state == RUNNING
            metadata = domain_of(hv, name).metadata
            assert metadata.policy_digest == Policy.from_params(requested).digest()
            assert value_class.from_recorded(getattr(metadata, attribute)) == value_class.from_params(value)
        assert converge(hv, set_request(NAMES, policy=requested))["changed"] is False


def test_a_new_member_records_its_group_from_its_definition(converge):
    hv = ready_host()
    converge(hv, set_request(NAMES, policy=policy(group=GROUP)))
    assert domain_of(hv, "proxy-a").metadata.ha_group_json == (
        '{"address":"198.18.40.10","address6":"2001:db8:40::10","name":"demo"}')


def test_the_pooled_addresses_are_normalised_and_covered_by_the_digest_a_policy_without_them_keeps_its_own():
    plain = Policy.from_params(policy())
    written = dict(POOLED, ci={"egress_address": "203.0.113.11", "egress_address6": "2001:DB8:20:0::11"})
    pooled = Policy.from_params(policy(pooled_addresses=written))
    assert pooled.pooled_addresses.as_dict() == POOLED
    assert pooled.digest() == Policy.from_params(policy(pooled_addresses=POOLED)).digest() != plain.digest()
    assert pooled.digest() != Policy.from_params(policy(pooled_addresses=dict(
        POOLED, backup={"egress_address": "203.0.113.13"}))).digest()
    assert Policy.from_params(policy(pooled_addresses={})) == Policy.from_params(policy(pooled_addresses=None)) == plain
    # Beside a group, each is covered on its own.
    member = Policy.from_params(policy(group=GROUP))
    assert Policy.from_params(policy(group=GROUP, pooled_addresses=POOLED)).digest() not in (member.digest(), pooled.digest())


def test_a_new_or_replaced_vm_records_its_pooled_addresses_from_its_definition(converge):
    hv = ready_host()
    converge(hv, set_request(NAMES, policy=policy(pooled_addresses=POOLED)))
    recorded = ('{"backup":{"egress_address":"203.0.113.12"},'
                '"ci":{"egress_address":"203.0.113.11","egress_address6":"2001:db8:20::11"}}')
    assert domain_of(hv, "proxy-a").metadata.pooled_addresses_json == recorded
    result = converge(hv, set_request(NAMES, policy=policy(pooled_addresses=POOLED), memory_mib=4096))
    assert [p["outcome"] for p in result["proxies"]] == ["replaced", "replaced"]
    assert domain_of(hv, "proxy-a").metadata.pooled_addresses_json == recorded


def test_multipart_user_data_cannot_carry_a_policy():
    mime = 'Content-Type: multipart/mixed; boundary="x"\nMIME-Version: 1.0\n\n--x--\n'
    with pytest.raises(ValidationError) as raised:
        ProxyRequest.from_params(params(policy=policy(), user_data=mime))
    assert "MIME multi-part" in raised.value.message


def test_the_seed_is_the_same_bytes_for_the_same_request():
    first = ProxyRequest.from_params(params(policy=policy())).seed_files()
    assert first == ProxyRequest.from_params(params(policy=policy())).seed_files()
    assert first != ProxyRequest.from_params(params(policy=policy(users="bob:x\n"))).seed_files()


def test_a_proxy_still_in_its_first_boot_is_no_drift_and_gets_a_change_once_the_boot_is_over(run, converge, fake_time):
    hv = running_set(converge)
    guests = [hv.domains[name].guest for name in NAMES]
    for guest in guests:
        del guest.files[BOOT_FINISHED]
        guest.files["/etc/squid/squid.conf"].content = b"# the image's own, until cloud-init writes the seed's\n"
    assert run(hv, set_request(NAMES, policy=policy()))["changed"] is False

    def boot_ends(slept):
        if slept == 5:
            for guest in guests:
                guest.files[BOOT_FINISHED] = FakeFile(b"done\n")
    fake_time.on_sleep = boot_ends
    changed = policy(conf=SQUID_CONF + "# changed during the first boot\n")
    result = run(hv, set_request(NAMES, policy=changed))
    assert [p["actions"] for p in result["proxies"]] == [[steps.APPLY_POLICY]] * 2
    assert all(guest.files["/etc/squid/squid.conf"].content.endswith(b"boot\n") for guest in guests)


def test_a_first_boot_that_does_not_end_in_time_fails_naming_the_proxy(converge):
    hv = running_set(converge)
    del hv.domains["proxy-a"].guest.files[BOOT_FINISHED]
    with pytest.raises(errors.TransientError) as raised:
        converge(hv, set_request(NAMES, policy=policy(conf="# changed\n"), wait_timeout=20))
    assert "the first boot of domain 'proxy-a' (cloud-init) did not finish within 20 s" in raised.value.message


@pytest.mark.parametrize("agent_answers, boot_ends, message", [
    (10, 20, "proxy-a got no routable IPv4 within wait_timeout (30 s)"),
    (20, 45, "the first boot of domain 'proxy-a' (cloud-init) did not finish within 30 s"),
])
def test_wait_timeout_bounds_the_agent_the_first_boot_and_the_address_together(run, converge, fake_time, agent_answers,
                                                                               boot_ends, message):
    """A proxy this run starts is waited on for its agent, its first boot, then its address: one wait_timeout for the
    three, counted from the first wait (before: each wait had its own, up to three times wait_timeout)."""
    hv = running_set(converge)
    dom = hv.domains["proxy-a"]
    dom.state = SHUTOFF
    dom.addresses.clear()
    dom.agent_error = errors.VIR_ERR_AGENT_UNRESPONSIVE
    del dom.guest.files[BOOT_FINISHED]
    started = fake_time.now

    def comes_up(_slept):
        if fake_time.now - started >= agent_answers:
            dom.agent_error = None
        if fake_time.now - started >= boot_ends:
            dom.guest.files[BOOT_FINISHED] = FakeFile(b"done\n")
    fake_time.on_sleep = comes_up
    with pytest.raises(errors.TransientError) as raised:
        run(hv, set_request(NAMES, policy=policy(conf=SQUID_CONF + "# changed\n"), wait_for_ip=True, wait_timeout=30))
    assert message in raised.value.message
    assert fake_time.now - started <= 30 + 1


HAND_OVER = "/usr/local/lib/egress-proxy/hand-over"


def hand_over(exitcode=0, said=b""):
    """A fake hand-over program that exits ``exitcode`` after writing ``said`` on stderr."""
    def program(_argv, _guest):
        return exitcode, b"", said
    return program


def releasing(**changes):
    return policy(release=[HAND_OVER, "198.18.40.10", "3128"], **changes)


def test_a_running_proxy_releases_its_service_before_it_is_stopped_or_replaced(run, converge):
    hv = running_set(converge)
    for name in NAMES:
        hv.domains[name].guest.programs[HAND_OVER] = hand_over()
    predicted = run(hv, set_request(NAMES, policy=releasing(), state="stopped"), check_mode=True)
    assert predicted["proxies"][0]["actions"] == [steps.RELEASE_SERVICE, steps.SHUTDOWN_DOMAIN]
    assert [HAND_OVER, "198.18.40.10", "3128"] not in hv.domains["proxy-a"].guest.ran
    result = converge(hv, set_request(NAMES, policy=releasing(), state="stopped"))
    assert result["proxies"][0]["actions"] == predicted["proxies"][0]["actions"]
    assert hv.domains["proxy-a"].guest.ran[-1] == [HAND_OVER, "198.18.40.10", "3128"]
    hv = running_set(converge)
    for name in NAMES:
        hv.domains[name].guest.programs[HAND_OVER] = hand_over()
    old = hv.domains["proxy-a"].guest
    replaced = converge(hv, set_request(NAMES, policy=releasing(), memory_mib=4096))
    assert replaced["proxies"][0]["actions"][:2] == [steps.RELEASE_SERVICE, steps.SHUTDOWN_DOMAIN]
    assert old.ran[-1] == [HAND_OVER, "198.18.40.10", "3128"]


def test_a_release_the_guest_refuses_leaves_the_proxy_running_and_names_it(converge):
    hv = running_set(converge)
    hv.domains["proxy-a"].guest.programs[HAND_OVER] = hand_over()
    hv.domains["proxy-b"].guest.programs[HAND_OVER] = hand_over(1, b"no other member answers on 198.18.40.10:3128")
    old = hv.domains["proxy-b"]
    with pytest.raises(errors.PermanentError) as raised:
        converge(hv, set_request(NAMES, policy=releasing(), memory_mib=4096))
    message = raised.value.message
    assert "proxy 'proxy-b'" in message and "no other member answers on 198.18.40.10:3128" in message
    assert "was not shut down" in message
    assert hv.domains["proxy-b"] is old and old.state == RUNNING


def test_a_proxy_whose_agent_does_not_answer_is_stopped_without_its_release_with_a_warning(converge):
    hv = running_set(converge)
    hv.domains["proxy-b"].agent_error = errors.VIR_ERR_AGENT_UNRESPONSIVE
    hv.domains["proxy-a"].guest.programs[HAND_OVER] = hand_over()
    result = converge(hv, set_request(NAMES, policy=releasing(), state="stopped"))
    assert result["proxies"][1]["actions"][:2] == [steps.RELEASE_SERVICE, steps.SHUTDOWN_DOMAIN]
    assert hv.domains["proxy-b"].state == SHUTOFF
    assert any("without releasing its service first" in warning for warning in result["proxies"][1]["warnings"])


def test_without_a_release_program_nothing_runs_before_the_shutdown(converge):
    hv = running_set(converge)
    stopped = converge(hv, set_request(NAMES, policy=policy(), state="stopped"))
    assert stopped["proxies"][0]["actions"] == [steps.SHUTDOWN_DOMAIN]


@pytest.mark.parametrize("releases", [True, False])
def test_a_replaced_member_of_a_group_counts_as_up_once_its_first_boot_is_over(converge, fake_time, releases):
    """A member (its policy releases the service) takes the group's address only once its first boot has started
    keepalived: the roll goes on to the next member, whose hand-over needs one to take it, only then. A proxy in no
    group counts as up with its address."""
    hv = running_set(converge)
    for name in NAMES:
        hv.domains[name].guest.programs[HAND_OVER] = hand_over()
    old = dict(hv.domains)
    booting_since, released_at = {}, {}
    define = hv.define_domain

    def define_booting(xml):
        dom = define(xml)
        if dom is not old.get(dom.name) and dom.name not in booting_since:
            del dom.guest.files[BOOT_FINISHED]
            booting_since[dom.name] = fake_time.now
        return dom
    hv.define_domain = define_booting

    def boots(_slept):
        lease_all(hv)
        for name, since in booting_since.items():
            if fake_time.now - since >= 40:
                hv.domains[name].guest.files[BOOT_FINISHED] = FakeFile(b"done\n")
    fake_time.on_sleep = boots

    def hand_over_of_b(_argv, _guest):
        released_at["proxy-b"] = fake_time.now
        return 0, b"", b""
    old["proxy-b"].guest.programs[HAND_OVER] = hand_over_of_b
    result = converge(hv, set_request(NAMES, policy=releasing() if releases else policy(), memory_mib=4096,
                                      wait_for_ip=True, wait_timeout=120))
    assert [p["outcome"] for p in result["proxies"]] == ["replaced", "replaced"]
    if releases:
        assert released_at["proxy-b"] >= booting_since["proxy-a"] + 40
    else:
        assert "proxy-b" not in released_at and fake_time.now - booting_since["proxy-a"] < 40


def test_a_replaced_member_whose_agent_breaks_the_protocol_stops_the_roll_naming_it_and_the_way_out(converge, fake_time):
    """The next member's hand-over would find nobody to take the address: the roll stops at the first."""
    hv = running_set(converge)
    for name in NAMES:
        hv.domains[name].guest.programs[HAND_OVER] = hand_over()
    old = dict(hv.domains)
    define = hv.define_domain

    def define_garbled(xml):
        dom = define(xml)
        if dom is not old.get(dom.name):
            dom.guest.hostile["guest-ping"] = lambda _arguments, _reply: "garbage"
        return dom
    hv.define_domain = define_garbled
    fake_time.on_sleep = lambda _slept: lease_all(hv)
    with pytest.raises(errors.KvmError) as raised:
        converge(hv, set_request(NAMES, policy=releasing(), memory_mib=4096, wait_for_ip=True, wait_timeout=120))
    message = raised.value.message
    assert "proxy-a" in message and "on_unreachable_agent=replace" in message, message
    assert hv.domains["proxy-b"] is old["proxy-b"] and old["proxy-b"].state == RUNNING
