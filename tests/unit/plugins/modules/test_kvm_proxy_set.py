# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""kvm_proxy_set's main() over the fake seam: arguments, check and diff mode, results as the user sees them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.egress_proxies.kvm.plugins.modules import kvm_proxy_set
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import (
    IMAGE_SHA,
    MUTATING,
    UID,
    ready_host,
)
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.modules.test_kvm_proxy import (
    powers_off_when_asked_for_an_address,
)

SECRET = "root:s3cr3t-do-not-print"
ARGS = dict(
    uid=UID,
    bridge="br0",
    image=dict(name="debian-13", url="https://images.example/debian-13.qcow2", checksum="sha256:" + IMAGE_SHA),
    user_data={"chpasswd": {"list": SECRET}, "packages": ["squid"]},
    proxies=[{"name": "proxy-a"}, {"name": "proxy-b", "vcpus": 2}],
)


def test_check_mode_then_real_then_nothing_to_do(run_main):
    hypervisor = ready_host("nas1")
    predicted, out, _opened = run_main(kvm_proxy_set.main, hypervisor, ARGS, check_mode=True, diff=True)
    assert predicted["changed"] is True and not MUTATING.intersection(hypervisor.calls)
    assert [p["outcome"] for p in predicted["proxies"]] == ["created", "created"]
    assert set(predicted["diff"]["after"]) == {"proxy-a", "proxy-b"}
    assert SECRET not in out

    result, out, _opened = run_main(kvm_proxy_set.main, hypervisor, ARGS)
    assert [p["actions"] for p in result["proxies"]] == [p["actions"] for p in predicted["proxies"]]
    assert [p["id"] for p in result["proxies"]] == ["hosts/nas1/domains/proxy-a", "hosts/nas1/domains/proxy-b"]
    assert "diff" not in result and all("diff" not in p for p in result["proxies"])
    assert SECRET not in out

    again, _out, _opened = run_main(kvm_proxy_set.main, hypervisor, ARGS)
    assert again["changed"] is False and again["removed"] == [] and again["foreign"] == []


def test_bad_input_fails_before_connecting(run_main):
    hypervisor = ready_host("nas1")
    result, _out, opened = run_main(kvm_proxy_set.main, hypervisor, dict(ARGS, max_unavailable=0))
    assert result["failed"] is True and "max_unavailable must be" in result["msg"]
    assert opened == [] and hypervisor.calls == []


def test_a_member_that_stops_while_awaited_fails_in_seconds_naming_it(run_main):
    hypervisor = ready_host("nas1")
    powers_off_when_asked_for_an_address(hypervisor, "proxy-b")
    started = time.monotonic()
    result, _out, _opened = run_main(kvm_proxy_set.main, hypervisor, dict(ARGS, wait_for_ip=True, wait_timeout=300))
    assert time.monotonic() - started < 10  # one poll interval, not wait_timeout
    assert result["failed"] is True and result["changed"] is True
    assert result["msg"].startswith("proxy-b stopped while its address was awaited: proxy-b (state shutoff, bridge br0; "
                                    "arp: domain not running)"), result["msg"]


def test_connect_timeout_bounds_the_open_which_names_the_host(run_main):
    hypervisor = ready_host("nas1")
    run_main(kvm_proxy_set.main, hypervisor, ARGS, check_mode=True)
    assert hypervisor.opened_as == (30, None)
    run_main(kvm_proxy_set.main, hypervisor, dict(ARGS, connect_timeout=5, host="nas1"), check_mode=True)
    assert hypervisor.opened_as == (5, "nas1")
    # 0: no bound, as Ansible's own timeout keyword.
    run_main(kvm_proxy_set.main, hypervisor, dict(ARGS, connect_timeout=0), check_mode=True)
    assert hypervisor.opened_as == (None, None)
    result, _out, opened = run_main(kvm_proxy_set.main, ready_host("nas1"), dict(ARGS, connect_timeout=-1))
    assert result["failed"] is True and opened == []
    assert result["msg"].startswith("connect_timeout must be a whole number of seconds, 0 (no bound) or more, got -1")
