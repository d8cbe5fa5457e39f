# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Observe, plan, execute: the shape of every flow (image cache, seed, proxy), and their result protocol.

A flow observes what is there once (read-only), then plans with a pure
function of the request and that observation. The Plan is immutable: the
ordered steps, and the result they lead to as far as it is known before
they run. Check mode answers with ``plan.result``; a real run executes the
steps, and a step may complete the result with what only doing it tells
(a volume's path, a download's digest and duration)::

    plan = plan_seed(request, observe_seed(hypervisor, pool_name, request))
    result = plan.result if check_mode else execute(plan, operations)

Every result answers ``actions`` (what was or would be done, in order),
``changed`` (whether there are any), ``as_dict()`` (the module's result) and
``diff()`` (``{before, after}``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass, replace
from typing import Any

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError


@dataclass(frozen=True)
class Step:
    """One thing a plan does: ``action`` says it in the result; ``operation`` names what does it to ``target``.

    ``also`` lists more actions the same operation carries out, as one (a
    volume created and filled, say, which is only ever wanted whole).
    """

    operation: str
    action: str
    target: Any = None
    also: tuple = ()

    @property
    def actions(self):
        return (self.action,) + tuple(self.also)


@dataclass(frozen=True)
class Plan:
    """The ordered steps, and the result of carrying them out as far as planning can tell."""

    steps: tuple
    result: Any

    @classmethod
    def of(cls, steps, result):
        """The plan of ``steps``, whose ``result`` (a dataclass with an ``actions`` field) lists their actions."""
        steps = tuple(steps)
        return cls(steps, replace(result, actions=[action for step in steps for action in step.actions]))

    @property
    def actions(self):
        return [action for step in self.steps for action in step.actions]


def execute(plan, operations, failed=None):
    """Carry out the plan's steps in order; the result as the last step leaves it.

    ``operations`` maps each step's operation to ``function(target, result) -> result``.
    ``failed(error, step, done)``, when given, is the error raised for a step's
    KvmError (``done``: the actions of the steps before it), so a flow can say
    how far it got; without it the step's error is raised as it is.
    """
    result = plan.result
    done = []
    for step in plan.steps:
        try:
            result = operations[step.operation](step.target, result)
        except KvmError as error:
            if failed is None:
                raise
            raise failed(error, step, done) from error
        done.extend(step.actions)
    return result


class Result:
    """The result protocol. A subclass has an ``actions`` list and defines ``as_dict()`` and ``diff()``."""

    @property
    def changed(self):
        return bool(self.actions)

    def as_dict(self):
        raise NotImplementedError

    def diff(self):
        raise NotImplementedError

    def module_result(self, diff_mode):
        """What the module exits with: ``as_dict()``, and ``diff()`` in diff mode."""
        result = self.as_dict()
        if diff_mode:
            result["diff"] = self.diff()
        return result
