# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The fixtures that run kvm_proxy_set's flow over the fake, shared by its tests (test_proxy_set, test_proxy_policy)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.timing import Timing
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.flow import run_set
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import MUTATING, NOW, FakeTime


@pytest.fixture
def fake_time():
    return FakeTime()


@pytest.fixture
def run(tmp_path, fake_time):
    def run_flow(hv, req, check_mode=False, clock=lambda: NOW):
        timing = Timing(clock=clock, sleep=fake_time.sleep, monotonic=fake_time.monotonic)
        return run_set(hv, req, check_mode, timing=timing, lock_dir=str(tmp_path / "locks")).module_result(diff_mode=True)
    return run_flow


@pytest.fixture
def converge(run):
    def check_then_apply(hv, req, **options):
        before = len(hv.calls)
        predicted = run(hv, req, check_mode=True, **options)
        assert not MUTATING.intersection(hv.calls[before:]), hv.calls[before:]
        result = run(hv, req, **options)
        assert [p["actions"] for p in predicted["proxies"]] == [p["actions"] for p in result["proxies"]]
        assert [p["name"] for p in predicted["removed"]] == [p["name"] for p in result["removed"]]
        assert predicted["changed"] == result["changed"]
        return result
    return check_then_apply
