# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Every module's EXAMPLES are YAML tasks calling modules by FQCN, with only the options the module documents.

A cheap guard without the lab; tests/integration/test_examples.py runs the examples.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.egress_proxies.kvm.tests.integration.examples import (
    COLLECTION,
    MODULES,
    collection_module,
    documented_options,
    examples,
    task_module,
    undocumented_options,
)


@pytest.mark.parametrize("module", MODULES)
def test_examples_are_named_tasks_calling_modules_by_fqcn(module):
    tasks = examples(module)
    assert isinstance(tasks, list) and tasks
    for task in tasks:
        assert isinstance(task, dict) and task.get("name"), task
        name, _args = task_module(task)
        assert name.count(".") == 2, "%s: %r calls %s without its FQCN" % (module, task["name"], name)
    assert any(collection_module(task) == module for task in tasks), "no example of %s calls it" % module


@pytest.mark.parametrize("module", MODULES)
def test_examples_use_only_documented_options(module):
    for task in examples(module):
        called = collection_module(task)
        if called is None:
            continue
        args = task_module(task)[1]
        assert isinstance(args, dict), task["name"]
        assert undocumented_options(args, documented_options(called)) == [], "%s: %r" % (module, task["name"])


def test_an_undocumented_option_is_found_at_any_depth():
    options = {"image": {"suboptions": {"url": {}}}, "proxies": {"suboptions": {"name": {}}}, "state": {}}
    args = {"state": "present", "image": {"url": "u", "sha": "x"}, "proxies": [{"name": "a"}, {"nmae": "b"}], "pool": "p"}
    assert undocumented_options(args, options) == ["image.sha", "proxies[1].nmae", "pool"]


def test_the_collection_modules_are_told_from_others():
    assert collection_module({"name": "x", COLLECTION + ".kvm_seed": {"name": "a"}}) == "kvm_seed"
    assert collection_module({"name": "x", "ansible.builtin.debug": {"msg": "a"}}) is None
