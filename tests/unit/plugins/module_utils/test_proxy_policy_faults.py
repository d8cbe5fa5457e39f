# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A set with a compromised guest, and an in-place apply cut off at each of its steps, over the fake.

The hostile guest is named and bounded while the other proxy converges; an apply that did not validate leaves the
old files in place, or, when the agent is gone for the rollback too, is repaired by the next run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest import policy as guest_policy
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.agent import EXCHANGE_SECONDS, GuestProtocolError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.policy import Policy
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import ADDRESS_SOURCE_AGENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy import plan as steps
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_guest_agent import MAX_ANSWERS, hostile
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import domain_of
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy_policy import (
    NAMES,
    SQUID_CONF,
    policy,
    running_set,
    squid,
)
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy_set import set_request

CONF = "/etc/squid/squid.conf"
CHANGED = policy(conf=SQUID_CONF + "acl denied dstdomain -n .example.com\n")
NEVER_ENDING_READ = {"count": 1, "buf-b64": "", "eof": False}


def digest(value):
    return Policy.from_params(value).digest()


def content(hv, name, path=CONF):
    return hv.domains[name].guest.files[path].content


def leftovers(hv, name):
    return sorted(path for path in hv.domains[name].guest.files if path.endswith(
        (guest_policy.STAGED_SUFFIX, guest_policy.KEPT_SUFFIX)))


# --- a compromised guest in a set ---------------------------------------------------------------------------------

def test_a_hostile_guest_with_a_current_policy_is_named_in_its_result_and_the_set_goes_on(run, converge, fake_time):
    hv = running_set(converge)
    hostile(hv.domains["proxy-b"], "guest-file-read", NEVER_ENDING_READ)
    for check_mode in (True, False):
        result = run(hv, set_request(NAMES, policy=policy()), check_mode=check_mode)
        assert result["changed"] is False and "warnings" not in result["proxies"][0]
        warning = result["proxies"][1]["warnings"][0]
        assert "could not be read back" in warning and "the guest agent of domain 'proxy-b' broke the protocol: " \
            "guest-file-read of /var/lib/cloud/instance/boot-finished answered count 1 with 0 bytes" in warning
    assert hv.domains["proxy-b"].guest.answered < 20 and fake_time.now == 1000


def test_a_hostile_guest_that_answers_an_error_for_its_addresses_is_no_address_and_the_set_goes_on(run, converge):
    hv = running_set(converge)
    hostile(hv.domains["proxy-b"], "guest-file-read", NEVER_ENDING_READ)
    hv.fail("domain_addresses", errors.VIR_ERR_INTERNAL_ERROR, "unable to execute QEMU agent command "
            "'guest-network-get-interfaces': not served here",
            when=lambda dom, source: dom.name == "proxy-b" and source == ADDRESS_SOURCE_AGENT)
    for check_mode in (True, False):
        result = run(hv, set_request(NAMES, policy=policy()), check_mode=check_mode)
        assert [p["outcome"] for p in result["proxies"]] == ["unchanged", "unchanged"]
        assert result["proxies"][1]["ip"] is None and "broke the protocol" in result["proxies"][1]["warnings"][0]
        assert result["proxies"][1]["ip_sources"]["agent"] == "guest agent answered an error (VIR_ERR_INTERNAL_ERROR)"
        assert result["proxies"][0]["ip"] is not None


def test_a_hostile_guest_fails_its_apply_by_name_and_the_other_proxy_converges(run, fake_time):
    hv = running_set(run)
    hostile_dom = hv.domains["proxy-b"]
    hostile(hostile_dom, "guest-file-read", NEVER_ENDING_READ)
    predicted = run(hv, set_request(NAMES, policy=CHANGED), check_mode=True)
    assert [p["actions"] for p in predicted["proxies"]] == [[steps.APPLY_POLICY]] * 2
    assert "the guest agent of domain 'proxy-b' broke the protocol" in predicted["proxies"][1]["warnings"][0]
    with pytest.raises(GuestProtocolError) as raised:
        run(hv, set_request(NAMES, policy=CHANGED))
    message = raised.value.message
    assert message.startswith("proxy 'proxy-b': apply policy failed: the guest agent of domain 'proxy-b' broke the "
                              "protocol: guest-file-read of /var/lib/cloud/instance/boot-finished answered count 1 "
                              "with 0 bytes"), message
    assert "proxy-a" not in message and "on_unreachable_agent=replace" in message
    assert raised.value.completed_actions == ["proxy-a: " + steps.APPLY_POLICY]
    assert content(hv, "proxy-a") == CHANGED["files"][0]["content"].encode()
    assert domain_of(hv, "proxy-a").metadata.policy_digest == digest(CHANGED)
    assert domain_of(hv, "proxy-b").metadata.policy_digest == digest(policy())
    assert content(hv, "proxy-b") == SQUID_CONF.encode()
    assert hostile_dom.guest.answered < 40 and hostile_dom.guest.answered < MAX_ANSWERS and fake_time.now == 1000


def test_a_hostile_guest_that_must_get_a_new_policy_is_replaced_with_on_unreachable_agent_replace(converge):
    hv = running_set(converge, wait_for_ip=False)
    old = hv.domains["proxy-b"]
    hostile(old, "guest-file-read", NEVER_ENDING_READ)
    result = converge(hv, set_request(NAMES, policy=CHANGED, on_unreachable_agent="replace"))
    assert [p["outcome"] for p in result["proxies"]] == ["updated", "replaced"]
    assert hv.domains["proxy-b"] is not old and "broke the protocol" in result["proxies"][1]["warnings"][0]


def test_a_slow_guest_is_bounded_by_its_budget_while_the_other_proxy_converges(run, fake_time):
    hv = running_set(run)
    slow_dom = hv.domains["proxy-b"]

    def never_exits(arguments, honest):
        return {"exited": False}
    slow_dom.guest.hostile["guest-exec-status"] = never_exits
    with pytest.raises(errors.TransientError) as raised:
        run(hv, set_request(NAMES, policy=CHANGED, wait_timeout=30))
    assert "proxy 'proxy-b': apply policy failed: " in raised.value.message
    assert content(hv, "proxy-a") == CHANGED["files"][0]["content"].encode()
    # The recovery's program never exits: given up after EXEC_TIMEOUT, and its rollback within its own grant.
    assert fake_time.now - 1000 <= 30 + EXCHANGE_SECONDS + guest_policy.ROLLBACK_SECONDS


# --- an apply cut off at each step ---------------------------------------------------------------------------------

def script_is(script):
    """A fake failure's predicate: the guest-exec of one of the apply's fixed scripts."""
    return lambda dom, command, arguments: command == "guest-exec" and arguments["arg"][:1] == ["-c"] and (
        arguments["arg"][1] == script)


def program_is(path):
    return lambda dom, command, arguments: command == "guest-exec" and arguments["path"] == path


def file_write(dom, command, arguments):
    return command == "guest-file-write"


STEPS = [
    ("recover", script_is(guest_policy._RECOVER)),
    ("stage", script_is(guest_policy._STAGE)),
    ("write", file_write),
    ("install", script_is(guest_policy._INSTALL)),
    ("validate", program_is("/usr/sbin/squid")),
]


@pytest.mark.parametrize("step, when", STEPS, ids=[entry[0] for entry in STEPS])
@pytest.mark.parametrize("code", [errors.VIR_ERR_AGENT_UNRESPONSIVE, errors.VIR_ERR_INTERNAL_ERROR])
def test_an_apply_cut_off_before_validate_passed_leaves_the_old_files_enforced(run, step, when, code):
    hv = running_set(run)
    hv.fail("guest_change", code=code, times=1, when=lambda dom, command, arguments: dom.name == "proxy-b" and when(
        dom, command, arguments))
    with pytest.raises(errors.KvmError) as raised:
        run(hv, set_request(NAMES, policy=CHANGED))
    assert "proxy 'proxy-b': apply policy failed" in raised.value.message
    if step not in ("recover",):
        assert ("no policy file was moved" if step in ("stage", "write") else
                "the old files are back in place and still enforced") in raised.value.message
    assert content(hv, "proxy-b") == SQUID_CONF.encode() and leftovers(hv, "proxy-b") == []
    assert ["/usr/sbin/squid", "-k", "reconfigure"] not in hv.domains["proxy-b"].guest.ran
    assert domain_of(hv, "proxy-b").metadata.policy_digest == digest(policy())
    assert content(hv, "proxy-a") == CHANGED["files"][0]["content"].encode()


def test_an_install_whose_answer_is_lost_is_rolled_back(run):
    """The install ran in the guest, then the agent went away before its status came back: the files moved."""
    hv = running_set(run)
    guest = hv.domains["proxy-b"].guest
    installing = []

    def lost(dom, command, arguments):
        return dom.name == "proxy-b" and command == "guest-exec-status" and guest.ran[-1][2] == guest_policy._INSTALL \
            and not installing.append(1)
    hv.fail("guest_query", code=errors.VIR_ERR_AGENT_UNRESPONSIVE, times=1, when=lost)
    with pytest.raises(errors.TransientError) as raised:
        run(hv, set_request(NAMES, policy=CHANGED))
    assert installing and "the old files are back in place and still enforced" in raised.value.message
    assert content(hv, "proxy-b") == SQUID_CONF.encode() and leftovers(hv, "proxy-b") == []


@pytest.mark.parametrize("reply", [{"exited": True, "exitcode": "0"}, {"exited": True, "exitcode": 0, "out-data": "@"}])
def test_a_validate_whose_answer_breaks_the_protocol_is_rolled_back(run, reply):
    hv = running_set(run)
    dom = hv.domains["proxy-b"]

    def breaks_on_validate(arguments, honest):
        return reply if dom.guest.ran[-1][0] == "/usr/sbin/squid" else honest
    dom.guest.hostile["guest-exec-status"] = breaks_on_validate
    with pytest.raises(GuestProtocolError) as raised:
        run(hv, set_request(NAMES, policy=CHANGED))
    assert "the old files are back in place and still enforced" in raised.value.message
    assert content(hv, "proxy-b") == SQUID_CONF.encode() and leftovers(hv, "proxy-b") == []
    assert domain_of(hv, "proxy-b").metadata.policy_digest == digest(policy())


def agent_gone_during_validate(hv, name, refuse=None):
    """proxy ``name``'s agent goes away while its validate runs (after the files moved), and stays away."""
    dom = hv.domains[name]
    honest = squid(refuse)

    def validate(argv, guest):
        if argv[1:] == ["-k", "parse"]:
            dom.agent_error = errors.VIR_ERR_AGENT_UNRESPONSIVE
        return honest(argv, guest)
    dom.guest.programs["/usr/sbin/squid"] = validate


@pytest.mark.parametrize("next_policy", [CHANGED, policy()], ids=["the-same-new-policy", "the-old-policy-again"])
def test_an_apply_whose_rollback_cannot_run_is_repaired_by_the_next_run(run, converge, next_policy):
    hv = running_set(converge)
    agent_gone_during_validate(hv, "proxy-b")
    with pytest.raises(errors.TransientError) as raised:
        run(hv, set_request(NAMES, policy=CHANGED))
    assert "putting the old policy files back failed too" in raised.value.message
    assert "the new files, not validated, stay in place but the service was not reloaded" in raised.value.message
    assert content(hv, "proxy-b") == CHANGED["files"][0]["content"].encode()
    # Not recorded: the domain still says it holds the old policy.
    assert domain_of(hv, "proxy-b").metadata.policy_digest == digest(policy())
    # The agent is back: the next run sees the policy not current (or the files drifted) and applies it again.
    dom = hv.domains["proxy-b"]
    dom.agent_error = None
    dom.guest.programs["/usr/sbin/squid"] = squid()
    predicted = run(hv, set_request(NAMES, policy=next_policy), check_mode=True)
    assert predicted["proxies"][1]["actions"] == [steps.APPLY_POLICY]
    converge(hv, set_request(NAMES, policy=next_policy))
    assert content(hv, "proxy-b") == next_policy["files"][0]["content"].encode() and leftovers(hv, "proxy-b") == []
    assert domain_of(hv, "proxy-b").metadata.policy_digest == digest(next_policy)
    assert converge(hv, set_request(NAMES, policy=next_policy))["changed"] is False


def test_after_a_rollback_that_could_not_run_a_refused_policy_brings_back_the_files_enforced_before(run, converge):
    """The kept copy is what was enforced before the apply that never finished, never its unvalidated files."""
    hv = running_set(converge)
    refused = policy(conf=SQUID_CONF + "bogus_directive on\n")
    agent_gone_during_validate(hv, "proxy-b", refuse="bogus_directive")
    with pytest.raises(errors.TransientError):
        run(hv, set_request(NAMES, policy=refused))
    dom = hv.domains["proxy-b"]
    assert content(hv, "proxy-b").endswith(b"bogus_directive on\n")
    dom.agent_error = None
    dom.guest.programs["/usr/sbin/squid"] = squid(refuse="bogus_directive")
    with pytest.raises(errors.PermanentError) as raised:
        run(hv, set_request(NAMES, policy=refused))
    assert "refused the new policy" in raised.value.message
    assert content(hv, "proxy-b") == SQUID_CONF.encode() and leftovers(hv, "proxy-b") == []


@pytest.mark.parametrize("step", ["commit", "reload"])
def test_an_apply_cut_off_after_validate_passed_is_not_recorded_and_the_next_run_finishes_it(run, converge, step):
    hv = running_set(converge)
    when = script_is(guest_policy._COMMIT) if step == "commit" else (
        lambda dom, command, arguments: command == "guest-exec" and arguments["arg"] == ["-k", "reconfigure"])
    hv.fail("guest_change", code=errors.VIR_ERR_AGENT_UNRESPONSIVE, times=1,
            when=lambda dom, command, arguments: dom.name == "proxy-b" and when(dom, command, arguments))
    with pytest.raises(errors.TransientError):
        run(hv, set_request(NAMES, policy=CHANGED))
    assert domain_of(hv, "proxy-b").metadata.policy_digest == digest(policy())
    result = converge(hv, set_request(NAMES, policy=CHANGED))
    assert result["proxies"][1]["actions"] == [steps.APPLY_POLICY]
    guest = hv.domains["proxy-b"].guest
    assert guest.ran[-1] == ["/usr/sbin/squid", "-k", "reconfigure"] and leftovers(hv, "proxy-b") == []
    assert content(hv, "proxy-b") == CHANGED["files"][0]["content"].encode()
    assert domain_of(hv, "proxy-b").metadata.policy_digest == digest(CHANGED)
