# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_proxy_set's flow over the fake: the whole set planned first, garbage collection by owner, the roll."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.addresses import POLL_INTERVAL
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import ADDRESS_SOURCE_AGENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy import plan as steps
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.argspec import kvm_proxy_set_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import SetRequest
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import RUNNING, SHUTOFF
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_image_cache import (
    PROBE_RANGE,
    ImageServer,
    qcow2_image,
)
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import (
    BASE,
    CREATE,
    IMAGE_SHA,
    MARKER,
    MUTATING,
    NEW_BASE,
    NEW_IMAGE,
    NEW_IMAGE_SHA,
    NOW,
    REMOVE_RUNNING,
    UID,
    USER_DATA,
    domain_of,
    hand_made,
    params,
    ready_host,
)

DAY = datetime.timedelta(days=1)


def set_params(names, **changes):
    """The module's parameters with their defaults, as AnsibleModule hands them over."""
    values = {option: spec.get("default") for option, spec in kvm_proxy_set_argument_spec().items()}
    values.update({key: value for key, value in params().items() if key != "name"})
    values["proxies"] = [{"name": name} if isinstance(name, str) else name for name in names]
    values.update(changes)
    return values


def set_request(names, **changes):
    return SetRequest.from_params(set_params(names, **changes))


def lease_all(hv):
    """Give every running domain an address from its guest agent."""
    for number, dom in enumerate(hv.domains.values()):
        mac = domain_of(hv, dom.name).macs()
        dom.addresses[ADDRESS_SOURCE_AGENT] = {
            "eth0": {"hwaddr": mac[0] if mac else None, "addrs": [{"type": 0, "addr": "198.18.0.%d" % (150 + number), "prefix": 24}]}}


def test_a_set_is_created_then_left_alone(converge):
    hv = ready_host()
    result = converge(hv, set_request(["proxy-a", "proxy-b", {"name": "proxy-c", "vcpus": 4}]))
    assert [(p["name"], p["outcome"], p["actions"]) for p in result["proxies"]] == [
        ("proxy-a", "created", CREATE), ("proxy-b", "created", CREATE), ("proxy-c", "created", CREATE)]
    assert domain_of(hv, "proxy-c").vcpus == 4 and domain_of(hv, "proxy-a").vcpus == 2
    assert all(domain_of(hv, name).metadata.uid == UID for name in ("proxy-a", "proxy-b", "proxy-c"))
    assert hv.calls.count("open") == 0 and hv.calls.count("list_domains") == 2
    again = converge(hv, set_request(["proxy-a", "proxy-b", {"name": "proxy-c", "vcpus": 4}]))
    assert again["changed"] is False and {p["outcome"] for p in again["proxies"]} == {"unchanged"}
    # The set's image, checked once for the three: current, so nothing was done to it.
    assert [(image["volume"], image["changed"], image["actions"]) for image in again["images"]] == [(BASE, False, [])]


def test_a_set_that_changes_nothing_asks_each_domain_its_state_and_autostart_once(run):
    hv = ready_host()
    names = ["proxy-a", "proxy-b", "proxy-c"]
    run(hv, set_request(names))
    for check_mode in (True, False):
        before = len(hv.calls)
        result = run(hv, set_request(names), check_mode=check_mode)
        assert result["changed"] is False and [p["state"] for p in result["proxies"]] == ["Provisioning"] * 3
        calls = hv.calls[before:]
        assert calls.count("domain_xml") == calls.count("domain_state") == calls.count("domain_autostart") == 3


def test_a_kept_sets_base_whose_marker_was_overwritten_is_hashed_once_and_marked_again(converge):
    hv = ready_host()
    names = ["proxy-a", "proxy-b"]
    converge(hv, set_request(names))
    hv.volume("default", MARKER).content = bytearray(b"0" * 64)
    before = len(hv.calls)
    result = converge(hv, set_request(names))
    # Once, up front, for the set: the proxies then find their base verified.
    (image,) = result["images"]
    assert result["changed"] is True and image["changed"] is True and image["actions"][0].startswith("verify base volume")
    assert [(p["outcome"], p["actions"]) for p in result["proxies"]] == [("unchanged", [])] * 2
    assert bytes(hv.volume("default", MARKER).content) == IMAGE_SHA.encode("ascii")
    # One marker written for the set, no VM touched.
    assert hv.calls[before:].count("upload_volume") == 1
    assert not {"define_domain", "destroy_domain", "undefine_domain"}.intersection(hv.calls[before:])
    assert converge(hv, set_request(names))["changed"] is False


def new_image(url, checksum=NEW_IMAGE_SHA, **changes):
    return dict(image=dict(name="debian-13", url=url, checksum="sha256:" + checksum), retries=0, **changes)


def test_a_sets_image_that_cannot_be_made_ready_fails_before_any_proxy_is_looked_at(run):
    server = ImageServer()
    try:
        url = server.add("/debian-13-new.qcow2", qcow2_image(b"not the release the checksum names"))
        hv = ready_host()
        run(hv, set_request(["proxy-a", "proxy-b"]))
        volumes, before = sorted(hv.pools["default"].volumes), len(hv.calls)
        with pytest.raises(errors.PermanentError) as raised:
            run(hv, set_request(["proxy-a", "proxy-b", "proxy-c"], **new_image(url)))
        assert raised.value.message.startswith("image 'debian-13' (option image): %s has sha256 " % url), raised.value.message
        assert raised.value.message.endswith("No proxy was touched") and raised.value.completed_actions == []
        # The download was discarded; no domain was listed, let alone changed.
        assert sorted(hv.pools["default"].volumes) == volumes and sorted(hv.domains) == ["proxy-a", "proxy-b"]
        assert not {"list_domains", "define_domain", "destroy_domain", "undefine_domain"}.intersection(hv.calls[before:])
    finally:
        server.close()


def test_a_new_image_is_predicted_then_fetched_once_up_front_and_the_old_one_pruned(converge):
    server = ImageServer()
    try:
        url = server.add("/debian-13-new.qcow2", NEW_IMAGE)
        hv = ready_host()
        # The image of two new proxies (the larger disk bounds its size), with its older copy no volume uses pruned.
        result = converge(hv, set_request(["proxy-a", {"name": "proxy-b", "disk_size_gb": 20}], image_prune=True,
                                          **new_image(url)))
        # Check mode read the header; the real run downloaded once, for both proxies.
        assert server.ranges_asked("/debian-13-new.qcow2") == [PROBE_RANGE, None]
        (image,) = result["images"]
        assert image["volume"] == NEW_BASE and image["downloaded"] is True and image["removed"] == [BASE]
        assert image["actions"][0] == "download %s into volume %s" % (url, NEW_BASE)
        assert "delete base volume %s" % BASE in image["actions"]
        # The proxies found it ready: no fetch of their own, in check mode as in the real run (converge compares them).
        assert [p["actions"] for p in result["proxies"]] == [CREATE, CREATE]
        assert sorted(hv.pools["default"].volumes) == sorted([NEW_BASE, NEW_BASE + ".sha256", "proxy-a.qcow2",
                                                              "proxy-a-seed.iso", "proxy-b.qcow2", "proxy-b-seed.iso"])
        again = converge(hv, set_request(["proxy-a", {"name": "proxy-b", "disk_size_gb": 20}], image_prune=True,
                                         **new_image(url)))
        assert again["changed"] is False and again["images"][0]["removed"] == []
    finally:
        server.close()


def test_a_set_that_only_removes_asks_for_no_image(run):
    hv = ready_host()
    run(hv, set_request(["proxy-a"]))
    # An image no server serves: asked for, it would fail the set.
    result = run(hv, set_request([{"name": "proxy-a", "state": "absent"}], retries=0, image=dict(
        name="debian-13", url="https://images.example/gone.qcow2", checksum="sha256:" + "1" * 64)))
    assert result["images"] == [] and [p["outcome"] for p in result["proxies"]] == ["removed"]


@pytest.mark.parametrize("changes, message", [
    (dict(proxies=[{"name": "proxy-a"}, {"name": "proxy-a"}]), r"proxies\[1\] \(proxy-a\): the name appears more than once"),
    (dict(proxies=[{"name": "proxy-a", "vcpus": 0}]), r"proxies\[0\] \(proxy-a\): vcpus must be"),
    (dict(proxies=[{"name": "proxy-a", "uid": "other"}]), r"proxies\[0\] \(proxy-a\) sets uid, which only the set"),
    (dict(uid=None), "gc needs uid"),
    (dict(gc_grace_period=-1), "gc_grace_period must be a whole number of at least 0"),
    (dict(max_unavailable=0), "max_unavailable must be a whole number of at least 1"),
    (dict(max_unavailable="two"), "max_unavailable must be"),
    (dict(wait_for_port=70000), "wait_for_port must be a whole number from 1 to 65535, got 70000"),
    (dict(proxies=[{"name": "proxy-a", "interfaces": [{"bridge": "br1"}]}]),
     r"proxies\[0\] \(proxy-a\) sets interfaces while the set gives bridge for every proxy; they are mutually exclusive"),
    (dict(bridge=None, network="default", proxies=[{"name": "proxy-a"}, {"name": "proxy-b", "interfaces": [
        {"network": "default"}, {"bridge": "br1"}]}]),
     r"proxies\[1\] \(proxy-b\) sets interfaces while the set gives network for every proxy"),
])
def test_bad_input_is_refused_naming_the_option_and_the_proxy(changes, message):
    with pytest.raises(errors.ValidationError, match=message):
        SetRequest.from_params(set_params(["proxy-a"], **changes))


def test_a_proxy_name_that_is_an_unmanaged_domain_fails_before_anything(run):
    hv = ready_host()
    hand_made(hv)
    name = next(iter(hv.domains))
    with pytest.raises(errors.PermanentError, match="was not created by egress_proxies.kvm"):
        run(hv, set_request(["proxy-a", name]))
    assert not MUTATING.intersection(hv.calls)


def test_gc_removes_this_owners_unlisted_proxies_past_the_grace_period_only(run, converge):
    hv = ready_host()
    run(hv, set_request(["proxy-a", "proxy-b", "proxy-c"]))

    def later():
        return NOW + DAY

    young = converge(hv, set_request(["proxy-a"], gc_grace_period=2 * 86400), clock=later)
    assert young["removed"] == [] and {s["name"] for s in young["spared"]} == {"proxy-b", "proxy-c"}
    result = converge(hv, set_request(["proxy-a"]), clock=later)
    assert [(r["name"], r["outcome"], r["actions"]) for r in result["removed"]] == [
        ("proxy-b", "removed", REMOVE_RUNNING), ("proxy-c", "removed", REMOVE_RUNNING)]
    assert sorted(hv.domains) == ["proxy-a"]


def test_gc_reads_each_domain_xml_once_the_removals_included(run):
    hv = ready_host()
    run(hv, set_request(["proxy-a", "proxy-b", "proxy-c"]))
    for check_mode in (True, False):
        before = len(hv.calls)
        result = run(hv, set_request(["proxy-a"]), check_mode=check_mode, clock=lambda: NOW + DAY)
        assert [r["name"] for r in result["removed"]] == ["proxy-b", "proxy-c"]
        # The sweep's reading of proxy-b and proxy-c is the one their removal is planned on.
        assert hv.calls[before:].count("domain_xml") == 3


def test_gc_never_touches_unmanaged_domains_or_other_owners(run, converge):
    hv = ready_host()
    hand_made(hv)
    unmanaged = next(iter(hv.domains))
    run(hv, set_request(["proxy-theirs"], uid="someone-else"))
    result = converge(hv, set_request(["proxy-a"]), clock=lambda: NOW + DAY)
    assert result["removed"] == []
    assert sorted(f["name"] for f in result["foreign"]) == sorted([unmanaged, "proxy-theirs"])
    assert {unmanaged, "proxy-theirs"} <= set(hv.domains)


def test_gc_skips_a_domain_it_cannot_read_and_goes_on(run):
    hv = ready_host()
    run(hv, set_request(["proxy-b", "proxy-c"]))
    hv.fail("domain_xml", errors.VIR_ERR_INTERNAL_ERROR, "cannot read", when=lambda dom: dom.name == "proxy-b")
    result = run(hv, set_request(["proxy-a"]), clock=lambda: NOW + DAY)
    assert [r["name"] for r in result["removed"]] == ["proxy-c"]
    assert result["spared"] == [{"name": "proxy-b", "reason": "fake domain_xml: cannot read"}]


def test_a_hypervisor_that_cannot_be_listed_removes_nothing(run):
    hv = ready_host()
    run(hv, set_request(["proxy-b"]))
    hv.fail("list_domains", errors.VIR_ERR_RPC, "End of file while reading data")
    with pytest.raises(errors.TransientError, match="End of file"):
        run(hv, set_request(["proxy-a"]), clock=lambda: NOW + DAY)
    assert "proxy-b" in hv.domains and "proxy-a" not in hv.domains


def test_gc_off_keeps_unlisted_proxies(run):
    hv = ready_host()
    run(hv, set_request(["proxy-b"]))
    result = run(hv, set_request(["proxy-a"], gc=False), clock=lambda: NOW + DAY)
    assert result["removed"] == [] and "proxy-b" in hv.domains


def test_replacements_roll_one_at_a_time_each_waiting_for_its_address(run, fake_time):
    hv = ready_host()
    run(hv, set_request(["proxy-a", "proxy-b"]))
    lease_all(hv)
    order = []
    original_start = hv.start_domain

    def start(dom):
        order.append(("start", dom.name, sorted(d.name for d in hv.domains.values() if d.state == RUNNING)))
        original_start(dom)
        lease_all(hv)
    hv.start_domain = start
    result = run(hv, set_request(["proxy-a", "proxy-b"], user_data=USER_DATA + "# v2\n", wait_for_ip=True))
    assert [p["outcome"] for p in result["proxies"]] == ["replaced", "replaced"]
    # When proxy-b's replacement starts, proxy-a's is already running again: never both down.
    assert order == [("start", "proxy-a", ["proxy-b"]), ("start", "proxy-b", ["proxy-a"])]


def test_without_wait_for_ip_replacements_are_not_awaited(run, fake_time):
    hv = ready_host()
    run(hv, set_request(["proxy-a", "proxy-b"]))
    # No address ever comes: with nothing to wait for, both are replaced and the task returns.
    result = run(hv, set_request(["proxy-a", "proxy-b"], user_data=USER_DATA + "# v2\n", wait_timeout=10))
    assert [p["outcome"] for p in result["proxies"]] == ["replaced", "replaced"]
    assert all(hv.domains[name].state == RUNNING for name in ("proxy-a", "proxy-b"))


def test_a_replacement_that_gets_no_address_stops_the_roll(run, fake_time):
    hv = ready_host()
    run(hv, set_request(["proxy-a", "proxy-b"]))
    with pytest.raises(errors.TransientError) as raised:
        run(hv, set_request(["proxy-a", "proxy-b"], user_data=USER_DATA + "# v2\n", wait_for_ip=True, wait_timeout=10))
    assert raised.value.message.startswith("proxy-a got no routable IPv4 within wait_timeout (10 s): proxy-a (state running")
    assert raised.value.message.endswith("; the roll stopped: proxy-b still runs on the old VM")
    assert raised.value.completed_actions[:len(REMOVE_RUNNING)] == ["proxy-a: " + a for a in REMOVE_RUNNING]
    assert hv.domains["proxy-b"].state == RUNNING and "v2" not in str(domain_of(hv, "proxy-b").metadata)


def test_new_proxies_are_awaited_together_under_one_deadline(run, fake_time):
    hv = ready_host()
    fake_time.on_sleep = lambda n: lease_all(hv) if n == 2 else None
    result = run(hv, set_request(["proxy-a", "proxy-b"], wait_for_ip=True))
    assert [p["state"] for p in result["proxies"]] == ["Running", "Running"]
    assert all(p["ip"].startswith("198.18.0.") for p in result["proxies"])
    # Both polled in each round: two rounds of sleep for the whole set, not two per proxy.
    assert fake_time.slept == [POLL_INTERVAL, POLL_INTERVAL]


def test_new_proxies_without_an_address_in_time_are_named_together(run, fake_time):
    hv = ready_host()
    with pytest.raises(errors.TransientError, match="proxy-a, proxy-b got no routable IPv4 within wait_timeout") as raised:
        run(hv, set_request(["proxy-a", "proxy-b"], wait_for_ip=True, wait_timeout=6))
    assert raised.value.to_result()["changed"] is True
    assert sum(fake_time.slept) == 6


def test_stopped_set(converge):
    hv = ready_host()
    converge(hv, set_request(["proxy-a"]))
    result = converge(hv, set_request(["proxy-a"], state="stopped"))
    assert result["proxies"][0]["actions"] == [steps.SHUTDOWN_DOMAIN]
    assert hv.domains["proxy-a"].state == SHUTOFF


def test_proxies_built_side_by_side_report_in_request_order_and_every_failure_by_name(run):
    hv = ready_host()
    names = ["proxy-%02d" % index for index in range(12)]
    hv.fail("start_domain", errors.VIR_ERR_INTERNAL_ERROR, "no room", times=2,
            when=lambda dom: dom.name in ("proxy-03", "proxy-09"))
    with pytest.raises(errors.TransientError) as raised:
        run(hv, set_request(names))
    message = raised.value.message
    assert message.startswith("proxy 'proxy-03': start domain failed after") and "; proxy 'proxy-09': start" in message
    done = raised.value.completed_actions
    # Every other proxy was built: one failure does not stop the others.
    assert [action for action in done if action.endswith(": enable autostart")] == [
        "%s: enable autostart" % name for name in names if name not in ("proxy-03", "proxy-09")]
    assert "proxy-03: define domain" in done and "proxy-03: start domain" not in done
    result = run(hv, set_request(names))
    assert [p["name"] for p in result["proxies"]] == names
    assert [p["name"] for p in result["proxies"] if p["changed"]] == ["proxy-03", "proxy-09"]


# --- the one address wait: a member that stops fails the wait at once --------------------------------


def test_a_member_that_stops_while_awaited_fails_at_once_naming_it_and_its_state(run, fake_time):
    hv = ready_host()
    fake_time.on_sleep = lambda n: setattr(hv.domains["proxy-b"], "state", SHUTOFF) if n == 2 else None
    with pytest.raises(errors.PermanentError) as raised:
        run(hv, set_request(["proxy-a", "proxy-b"], wait_for_ip=True))
    assert raised.value.message.startswith(
        "proxy-b stopped while its address was awaited: proxy-b (state shutoff, bridge br0; arp: no address yet, "
        "agent: no address yet)"), raised.value.message
    # Two polls, not wait_timeout's 300.
    assert fake_time.slept == [POLL_INTERVAL, POLL_INTERVAL]
    assert raised.value.to_result()["changed"] is True


def test_wait_for_port_implies_wait_for_ip(run, fake_time):
    assert set_request(["proxy-a"], wait_for_port=3128).wait_for_ip is True
    with pytest.raises(errors.TransientError, match="proxy-a got no routable IPv4 answering on port 3128 within wait_timeout"):
        run(hv=ready_host(), req=set_request(["proxy-a"], wait_for_port=3128, wait_timeout=5))
    assert sum(fake_time.slept) == 5


# --- garbage collection of running proxies waits for the new ones ------------------------------------


def test_a_renamed_proxy_that_does_not_come_up_keeps_the_old_one_running(run, fake_time):
    hv = ready_host()
    run(hv, set_request(["proxy-a"]))
    with pytest.raises(errors.TransientError) as raised:
        run(hv, set_request(["proxy-b"], gc_grace_period=0, wait_for_ip=True, wait_timeout=10))
    message = raised.value.message
    assert message.startswith("proxy-b got no routable IPv4 within wait_timeout (10 s)")
    assert message.endswith("; the roll stopped: proxy-a, no longer listed, still runs: garbage collection removes a "
                            "running proxy only once the new ones are up")
    assert hv.domains["proxy-a"].state == RUNNING
    assert not [action for action in raised.value.completed_actions if action.startswith("proxy-a")]


def test_a_new_proxy_that_fails_to_start_keeps_the_unlisted_running_ones_and_removes_the_stopped(run):
    hv = ready_host()
    run(hv, set_request(["proxy-a", "proxy-z"]))
    hv.domains["proxy-z"].state = SHUTOFF
    hv.fail("start_domain", errors.VIR_ERR_INTERNAL_ERROR, "no room", when=lambda dom: dom.name == "proxy-b")
    with pytest.raises(errors.TransientError) as raised:
        run(hv, set_request(["proxy-b"], gc_grace_period=0))
    assert raised.value.message.endswith("; the roll stopped: proxy-a, no longer listed, still runs: garbage "
                                         "collection removes a running proxy only once the new ones are up")
    # A stopped unlisted proxy serves nobody: it goes at once.
    assert hv.domains["proxy-a"].state == RUNNING and "proxy-z" not in hv.domains


def test_running_unlisted_proxies_go_last_one_batch_at_a_time_after_the_roll(run):
    hv = ready_host()
    run(hv, set_request(["proxy-a", "proxy-b", "proxy-c"]))
    lease_all(hv)
    events = []
    original_start, original_shutdown = hv.start_domain, hv.shutdown_domain

    def start(dom):
        events.append(("start", dom.name))
        original_start(dom)
        lease_all(hv)

    def shutdown(dom):
        events.append(("shutdown", dom.name))
        original_shutdown(dom)
    hv.start_domain, hv.shutdown_domain = start, shutdown
    result = run(hv, set_request(["proxy-a", "proxy-d"], user_data=USER_DATA + "# v2\n", gc_grace_period=0,
                                 wait_for_ip=True))
    assert [(p["name"], p["outcome"]) for p in result["proxies"]] == [("proxy-a", "replaced"), ("proxy-d", "created")]
    assert [r["name"] for r in result["removed"]] == ["proxy-b", "proxy-c"]
    # proxy-d is up before anything running goes; then one at a time (max_unavailable 1): proxy-a's replacement,
    # then each unlisted proxy.
    assert events == [("start", "proxy-d"), ("shutdown", "proxy-a"), ("start", "proxy-a"), ("shutdown", "proxy-b"),
                      ("shutdown", "proxy-c")]


# --- createdAt in the future ---------------------------------------------------------------------------


def test_a_created_at_far_in_the_future_protects_nothing_and_is_reported(run, converge):
    hv = ready_host()
    run(hv, set_request(["proxy-b"]), clock=lambda: NOW + 30000 * DAY)
    result = converge(hv, set_request(["proxy-a"]))
    assert [r["name"] for r in result["removed"]] == ["proxy-b"] and "proxy-b" not in hv.domains
    assert result["spared"] == []
    assert result["warnings"][0].startswith("domain 'proxy-b' records createdAt 2108-")
    assert result["warnings"][0].endswith("ahead of this host's clock (clock skew up to 300 s is allowed): more than "
                                          "clock skew explains, so it reads as corrupt and did not protect the domain "
                                          "from garbage collection")


def test_a_created_at_a_little_ahead_counts_as_now_and_says_so(run):
    hv = ready_host()
    run(hv, set_request(["proxy-b"]), clock=lambda: NOW + datetime.timedelta(seconds=90))
    result = run(hv, set_request(["proxy-a"]))
    assert result["removed"] == [] and "warnings" not in result
    assert result["spared"] == [{"name": "proxy-b", "reason": (
        "created less than gc_grace_period (3600 s) ago (createdAt 2026-09-08T10:01:30Z, 90 s ahead of this host's "
        "clock (clock skew up to 300 s is allowed): within clock skew, it counts as now)")}]


# --- graceful stops ------------------------------------------------------------------------------------


def test_garbage_collection_stops_a_running_proxy_gracefully_within_the_sets_shutdown_timeout(run, fake_time):
    hv = ready_host()
    run(hv, set_request(["proxy-a", "proxy-b"]))
    hv.domains["proxy-b"].honours_acpi = False
    result = run(hv, set_request(["proxy-a"], gc_grace_period=0, shutdown_timeout=7))
    (removed,) = result["removed"]
    assert removed["actions"] == REMOVE_RUNNING
    assert sum(fake_time.slept) == 7 and "did not power off within 7 s" in removed["warnings"][0]


# --- what a set is asked to remove but may not ------------------------------------------------------


def test_removing_a_listed_proxy_of_another_owner_or_of_nobody_leaves_it_and_removes_ours(run, converge):
    hv = ready_host()
    hand_made(hv)
    unmanaged = next(iter(hv.domains))
    run(hv, set_request(["proxy-theirs"], uid="someone-else"))
    run(hv, set_request(["proxy-a"]))
    result = converge(hv, set_request([{"name": name, "state": "absent"}
                                       for name in ("proxy-a", "proxy-theirs", unmanaged)]))
    assert [(p["name"], p["outcome"], p["actions"]) for p in result["proxies"]] == [
        ("proxy-a", "removed", REMOVE_RUNNING), ("proxy-theirs", "left alone (another owner)", []),
        (unmanaged, "left alone (unmanaged)", [])]
    assert result["proxies"][0]["reason"] is None
    assert result["proxies"][1]["reason"].startswith(
        "domain 'proxy-theirs' is owned by uid 'someone-else', not by this task's uid '%s'; it was left as it is, not "
        "removed. Add 'someone-else' to adopt_uids, or set force=true, to remove it" % UID)
    assert "was not created by egress_proxies.kvm; it was left as it is" in result["proxies"][2]["reason"]
    assert result["proxies"][1]["state"] == "Provisioning" and result["proxies"][1]["uid"] == "someone-else"
    assert result["diff"]["after"]["proxy-theirs"] == result["diff"]["before"]["proxy-theirs"]
    assert {"proxy-theirs", unmanaged} <= set(hv.domains) and "proxy-a" not in hv.domains


# --- messages name the entry ---------------------------------------------------------------------------


def test_a_bad_bridge_on_one_entry_names_the_entry(run):
    hv = ready_host()
    with pytest.raises(errors.PermanentError) as raised:
        run(hv, set_request(["proxy-a", {"name": "proxy-b", "bridge": "br9"}]))
    assert raised.value.message.startswith(
        "proxies[1] (proxy-b): bridge 'br9' (option bridge) is not an interface of the hypervisor")
    assert not MUTATING.intersection(hv.calls)
