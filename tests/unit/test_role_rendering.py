# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The egress_proxy role renders its costly values once per run (issue 19, B2), never printing the user-data."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import yaml

ROLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles", "egress_proxy")
# Each lazy variable of vars/main.yml that a task fixes into a fact, and the tasks file that does it.
FIXED = {"egress_proxy__instances": "validate_names.yml", "egress_proxy__set_args": "validate.yml"}


def read(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return handle.read()


def tasks(name):
    return yaml.safe_load(read("tasks", name))


def index_of(task_list, predicate):
    (index,) = [index for index, task in enumerate(task_list) if predicate(task)]
    return index


def sets_fact(fact):
    return lambda task: fact in task.get("ansible.builtin.set_fact", {})


def test_each_costly_value_is_rendered_into_a_fact_from_its_lazy_variable():
    variables = yaml.safe_load(read("vars", "main.yml"))
    for fact, tasks_file in FIXED.items():
        assert fact not in variables, fact
        assert fact + "_lazy" in variables, fact
        task_list = tasks(tasks_file)
        task = task_list[index_of(task_list, sets_fact(fact))]
        assert task["ansible.builtin.set_fact"] == {fact: "{{ %s_lazy }}" % fact}


def test_only_the_tasks_that_fix_them_read_the_lazy_variables():
    """A loop, a `when` or a template reading a lazy variable would render it again at every reference."""
    texts = {"vars/main.yml": yaml.safe_dump(list(yaml.safe_load(read("vars", "main.yml")).values()))}
    for folder in ("tasks", "templates"):
        texts.update(("%s/%s" % (folder, name), read(folder, name)) for name in os.listdir(os.path.join(ROLE, folder)))
    readers = {}
    for path, text in texts.items():
        for lazy in re.findall(r"\b(egress_proxy__\w+_lazy)\b", text):
            readers.setdefault(lazy, set()).add(path)
    assert readers == {"egress_proxy__instances_lazy": {"tasks/validate_names.yml"},
                       "egress_proxy__set_args_lazy": {"tasks/validate.yml"}}
    rendering = [task for task in tasks("validate.yml") if "egress_proxy__set_args_lazy" in yaml.safe_dump(task)]
    assert [task["name"] for task in rendering] == ["Render the proxies' arguments", "Keep the proxies' arguments for the converge"]


def test_the_arguments_fact_hides_the_user_data_after_an_assert_has_shown_any_templating_error():
    task_list = tasks("validate.yml")
    kept = index_of(task_list, sets_fact("egress_proxy__set_args"))
    render = task_list[kept - 1]
    assert task_list[kept]["no_log"] is True
    assert "ansible.builtin.assert" in render and "no_log" not in render
    # The condition and the message both render the arguments (2.15 reports an error only from the message).
    assert "egress_proxy__set_args_lazy" in render["ansible.builtin.assert"]["that"]
    assert "egress_proxy__set_args_lazy" in render["ansible.builtin.assert"]["fail_msg"]
    check = index_of(task_list, lambda task: "kvm_proxy_set_errors" in str(task.get("vars", {})))
    assert check > kept


def test_the_instances_are_fixed_before_any_task_loops_over_them():
    task_list = tasks("validate_names.yml")
    fixed = index_of(task_list, sets_fact("egress_proxy__instances"))
    loops = [index for index, task in enumerate(task_list) if "egress_proxy__instances" in str(task.get("loop", ""))]
    assert loops and min(loops) > fixed
    for entry in ("main.yml", "destroy.yml"):
        imports = [task.get("ansible.builtin.import_tasks") for task in tasks(entry)]
        assert "validate_names.yml" in imports or "validate.yml" in imports, entry


def test_the_templates_include_one_another_rather_than_call_the_template_lookup_per_proxy():
    """The lookup deep-copies all of the host's variables on every call: a quarter of a second per proxy."""
    assert "lookup(" not in read("templates", "proxies.json.j2")
    assert "{% include 'user-data.yml.j2' %}" in read("templates", "proxies.json.j2")
    assert "lookup(" not in read("templates", "user-data.yml.j2")
    assert "{% include 'squid.conf.j2' %}" in read("templates", "user-data.yml.j2")
