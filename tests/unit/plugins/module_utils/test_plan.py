# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The plan's shape, its execution and the result protocol, and the optional-import guard."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import dataclasses
from dataclasses import dataclass, field

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import TransientError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.imports import lazy_import, optional_import
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.plan import Plan, Result, Step, execute


@dataclass(frozen=True)
class Done(Result):
    said: str = "planned"
    actions: list = field(default_factory=list)

    def as_dict(self):
        return {"changed": self.changed, "said": self.said, "actions": list(self.actions)}

    def diff(self):
        return {"before": {}, "after": {"said": self.said}}


def test_a_plan_lists_every_action_of_its_steps_in_order():
    plan = Plan.of([Step("a", "first"), Step("b", "second", also=("third",))], Done())
    assert plan.actions == plan.result.actions == ["first", "second", "third"]
    assert plan.result.changed is True
    assert Plan.of([], Done()).result.changed is False


def test_a_plan_is_immutable():
    plan = Plan.of([Step("a", "first")], Done())
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.steps = ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.steps[0].target = "elsewhere"


def test_execute_runs_the_steps_in_order_on_their_targets_and_threads_the_result():
    ran = []

    def record(target, result):
        ran.append(target)
        return result

    def complete(target, result):
        ran.append(target)
        return dataclasses.replace(result, said="done")

    plan = Plan.of([Step("record", "one", "x"), Step("complete", "two", "y"), Step("record", "three", "z")], Done())
    result = execute(plan, {"record": record, "complete": complete})
    assert ran == ["x", "y", "z"]
    assert (result.said, result.actions) == ("done", ["one", "two", "three"])
    assert plan.result.said == "planned"  # check mode's answer stays what was planned


def test_execute_stops_at_the_first_failure():
    ran = []

    def fail(target, result):
        raise RuntimeError(target)

    plan = Plan.of([Step("fail", "one", "x"), Step("record", "two", "y")], Done())
    with pytest.raises(RuntimeError, match="x"):
        execute(plan, {"fail": fail, "record": lambda target, result: ran.append(target) or result})
    assert ran == []


def test_a_failed_step_says_how_far_the_run_got_when_the_flow_asks():
    def fail(target, result):
        raise TransientError("gone", code=42)

    def failed(error, step, done):
        return error.after("%s failed after %s: %s" % (step.action, ", ".join(done), error.message), done)

    plan = Plan.of([Step("ok", "one"), Step("ok", "two", also=("three",)), Step("fail", "four")], Done())
    operations = {"ok": lambda target, result: result, "fail": fail}
    with pytest.raises(TransientError) as raised:
        execute(plan, operations, failed)
    assert raised.value.message == "four failed after one, two, three: gone"
    assert (raised.value.code, raised.value.completed_actions) == (42, ["one", "two", "three"])
    with pytest.raises(TransientError, match="^gone$"):
        execute(plan, operations)  # without ``failed`` the step's error is raised as it is


def test_the_module_result_has_a_diff_in_diff_mode_only():
    result = Done(actions=["one"])
    assert result.module_result(diff_mode=False) == {"changed": True, "said": "planned", "actions": ["one"]}
    assert result.module_result(diff_mode=True)["diff"] == {"before": {}, "after": {"said": "planned"}}


def test_optional_import_gives_the_module_and_a_satisfied_requirement():
    module, requirement = optional_import("json", "json", "ships with Python")
    assert module.dumps([]) == "[]"
    assert requirement == ("json", "ships with Python", None)


def test_optional_import_of_a_missing_library_gives_none_and_the_traceback():
    module, (library, hint, error) = optional_import("egress_proxies_no_such_library", "nosuch", "pip install nosuch")
    assert module is None
    assert (library, hint) == ("nosuch", "pip install nosuch")
    assert "ModuleNotFoundError" in error and "egress_proxies_no_such_library" in error


def test_lazy_import_finds_the_library_without_importing_it(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    module, requirement = lazy_import("colorsys", "colorsys", "ships with Python")
    assert requirement == ("colorsys", "ships with Python", None)
    assert "colorsys" not in sys.modules
    assert module.rgb_to_hsv(0, 0, 0) == (0, 0, 0)  # imported at its first use
    assert "colorsys" in sys.modules


def test_lazy_import_of_a_missing_library_gives_none_and_the_traceback():
    for name in ("egress_proxies_no_such_library", "egress_proxies_no_such_package.etree"):
        module, (library, hint, error) = lazy_import(name, "nosuch", "pip install nosuch")
        assert module is None
        assert (library, hint) == ("nosuch", "pip install nosuch")
        assert "ModuleNotFoundError" in error and name.split(".", maxsplit=1)[0] in error
