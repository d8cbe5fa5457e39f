# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The egress_proxy role shapes its data in Python and renders its costly values once per run, never printing the
user-data (issue 19, B2; issue 25, item 5)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.argspec import common_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.argspec import kvm_proxy_set_argument_spec
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import (
    PROXY_TEMPLATES,
    ROLE,
    ROLE_VARIABLE,
    TEXTS_TEMPLATE,
    role_set_args,
)


def read(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return handle.read()


def tasks(name):
    return yaml.safe_load(read("tasks", name))


def named(task_list, name):
    (task,) = [task for task in task_list if task["name"] == name]
    return task


def test_no_template_but_the_texts_builds_data_and_no_variable_builds_lists_in_jinja():
    assert sorted(os.listdir(os.path.join(ROLE, "templates"))) == [TEXTS_TEMPLATE, "squid.conf.j2", "user-data.yml.j2"]
    texts = [read("vars", "main.yml")] + [read("tasks", name) for name in ("main.yml", "arguments.yml", "destroy.yml", "report.yml")]
    for text in texts:
        for idiom in ("append(", "namespace(", "{% set", "product(", "items2dict"):
            assert idiom not in text, idiom
    # No JSON written by hand: the texts' template builds a mapping and writes it once with to_json, which the one
    # task that renders it reads back with from_json (data on every ansible-core release).
    wrapper = read("templates", TEXTS_TEMPLATE)
    body = wrapper.split("#}", 1)[1]
    assert body.count("to_json") == 1 and body.rstrip().endswith("| to_json }}")
    assert '"' not in body and "loop.last" not in body
    assert [text.count("from_json") for text in texts] == [0, 0, 1, 0, 0]


def test_the_arguments_are_shaped_once_by_the_filters_from_the_roles_variables():
    variables = yaml.safe_load(read("vars", "main.yml"))
    assert " ".join(variables["egress_proxy__set_args_lazy"].split()) == (
        "{{ egress_proxy__instances | egress_proxies.kvm.proxy_set_args(egress_proxy__variables, "
        "options=egress_proxy__set_options, omitted=omit, texts=egress_proxy__texts) }}")
    # The role's variables are gathered by their prefix, not copied by name: a new variable needs no line here.
    assert variables["egress_proxy__variable_names"] == "{{ query('ansible.builtin.varnames', '%s') }}" % ROLE_VARIABLE
    assert "egress_proxy_" not in variables["egress_proxy__variables"].replace("egress_proxy__", "")
    # The instances (they hold the users' hashes): checked by a task that shows a refusal, then kept with no_log.
    check = named(tasks("instances.yml"), "Check the proxies of this hypervisor")
    instances = check["vars"]["egress_proxy__instances_checked"]
    assert "egress_proxy__desired | egress_proxies.kvm.proxy_instances(egress_proxy__variables)" in instances
    shown, kept = check["block"]
    assert "no_log" not in shown and "egress_proxy__instances_checked" in shown["ansible.builtin.assert"]["fail_msg"]
    assert kept["no_log"] is True
    assert kept["ansible.builtin.set_fact"] == {"egress_proxy__instances": "{{ egress_proxy__instances_checked }}"}


RENDER = "Render the user-data and squid.conf of the proxies"


def test_the_user_data_and_squid_conf_are_rendered_in_one_lookup_and_never_shown():
    steps = tasks("arguments.yml")
    render = named(steps, RENDER)
    # One task and one lookup for the whole set: neither a loop nor a condition (the template renders {} when
    # egress_proxy_user_data replaces the role's templates); the tests render it as this task does (role_templates).
    assert render["no_log"] is True and not {"loop", "when", "register"} & set(render)
    assert render["ansible.builtin.set_fact"] == {
        "egress_proxy__texts": "{{ lookup('ansible.builtin.template', '%s') | from_json }}" % TEXTS_TEMPLATE}
    # The check shows a refusal (no no_log); then the fact that holds the user-data and the policies is kept with no_log.
    names = [task["name"] for task in steps]
    check, keep = names.index("Check the proxies as kvm_proxy_set will"), names.index("Keep the proxies for the converge")
    assert keep == check + 1 and names.index(RENDER) < check
    assert "no_log" not in steps[check] and steps[keep]["no_log"] is True
    assert "egress_proxy__set_args_lazy" in steps[check]["ansible.builtin.assert"]["that"]
    assert "egress_proxy__set_args_lazy" in steps[check]["ansible.builtin.assert"]["fail_msg"]
    assert steps[keep]["ansible.builtin.set_fact"] == {"egress_proxy__proxies": "{{ egress_proxy__set_args_lazy.proxies }}"}
    # Nothing else reads the lazy arguments (each reference would shape and validate them again).
    readers = [name for name in os.listdir(os.path.join(ROLE, "tasks")) if "egress_proxy__set_args_lazy" in read("tasks", name)]
    assert readers == ["arguments.yml"]


def test_each_set_wide_option_is_written_once_from_the_roles_variables_in_the_converge_task():
    (block,) = [task for task in tasks("main.yml") if "block" in task]
    options = block["vars"]["egress_proxy__set_options"]
    converge = named(block["block"], "Converge the proxies of this hypervisor")
    arguments = converge["egress_proxies.kvm.kvm_proxy_set"]
    assert "module_defaults" not in converge
    # The converge passes the mapping the check validated (YAML's merge key), and the proxies the check kept.
    assert arguments == dict(options, proxies="{{ egress_proxy__proxies }}")
    assert "<<: *egress_proxy__set_options" in read("tasks", "main.yml")
    spec = dict(common_argument_spec(), **kvm_proxy_set_argument_spec())
    for option, value in options.items():
        assert option in spec, option
        # From the role's own variables, the one named for the option among them; never from a derived fact.
        assert "egress_proxy__" not in value and "egress_proxy_" in value, option
    assert {"uid", "image", "image_prune", "connect_timeout", "wait_timeout", "gc", "on_unreachable_agent"} <= set(options)
    # The hypervisor's only module call: libvirt's answer, the image and the proxies in one round trip.
    modules = [key for task in block["block"] for key in task if key.startswith("egress_proxies.kvm.")]
    assert modules == ["egress_proxies.kvm.kvm_proxy_set"]


def test_the_templates_neither_include_one_another_nor_call_the_template_lookup():
    """The lookup deep-copies all of the host's variables on every call: the role calls it once for the whole set
    (the set_fact above), and its template includes each proxy's two. squid.conf is the proxy's policy, not its
    user-data: the user-data neither includes it nor writes a squid file (only the exporter's arguments), and both templates compute the settings themselves."""
    wrapper = read("templates", TEXTS_TEMPLATE)
    assert "lookup(" not in wrapper and wrapper.count("{% include ") == len(PROXY_TEMPLATES)
    for _fact, template in PROXY_TEMPLATES:
        assert "lookup(" not in read("templates", template) and "{% include" not in read("templates", template), template
        assert "egress_proxy_instance | egress_proxies.kvm.squid_settings(" in read("templates", template), template
    user_data = read("templates", "user-data.yml.j2")
    assert user_data.count("- path:") == 1 and "- path: /etc/default/prometheus-squid-exporter" in user_data
    assert "/etc/squid" not in user_data


def test_a_character_outside_the_basic_plane_reaches_kvm_proxy_set_whole():
    """An emoji in an SSH key's comment (the role's checks accept it): ansible-core 2.15 to 2.18 read a lookup's JSON
    text with literal_eval, which made its escaped surrogate pair two lone surrogates; read back with from_json, the
    texts are data before that. tests/integration/test_versions.py deploys one on 2.15 and on the newest release."""
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBJh dev \U0001f600 laptop"
    (proxy,) = role_set_args([{"name": "egress-1"}], egress_proxy_ssh_authorized_keys=[key], egress_proxy_bridge="br0",
                             egress_proxy_allowed_clients=["10.0.0.0/8"],
                             egress_proxy_image={"name": "debian-12", "url": "https://images.example/debian-12.qcow2"})["proxies"]
    assert yaml.safe_load(proxy["user_data"])["ssh_authorized_keys"] == [key]
    proxy["user_data"].encode("utf-8")  # no lone surrogate
