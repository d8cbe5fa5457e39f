# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The egress_proxy role's templates rendered as a play renders them: Ansible's Templar, the collection's filters found by name.

The rendering runs in a Python of its own: the templates call the collection's filters by their full names, which
takes Ansible's collection finder, and that finder cannot take over ``ansible_collections`` once the other unit
tests have imported it from PYTHONPATH.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import email
import json
import os
import re
import subprocess
import sys

import yaml

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLE = os.path.join(REPO_ROOT, "roles", "egress_proxy")
# scripts/bootstrap links the collection here.
COLLECTIONS = os.path.join(REPO_ROOT, "build", "collections")


def role_defaults():
    with open(os.path.join(ROLE, "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle)


# The names vars/main.yml gathers with the varnames lookup.
ROLE_VARIABLE = "^egress_proxy_[a-z]"
# What the tests give for the play's omit (a placeholder text, as ansible-core before 2.19 gives).
OMIT = "__omit_place_holder__role_templates"


# What vars/main.yml's egress_proxy__ha is without egress_proxy_ha_groups (ha_groups.fleet_groups' shape).
NO_HA_GROUPS = {"groups": [], "problems": [], "spans_hypervisors": False}


def role_variables(hypervisor="hv1", **overrides):
    """The mapping vars/main.yml hands the filters proxy_instances and proxy_set_args (egress_proxy__variables: every
    egress_proxy_* variable, the pool's addresses, the HA groups as checked across the fleet and the hypervisor), with
    the role's defaults and ``overrides`` in it, on the hypervisor ``hypervisor``."""
    # No address from a pool unless a test gives some (tasks/pool.yml allocates them).
    variables = dict(role_defaults(), egress_proxy_host=hypervisor)
    variables.update(overrides)
    variables = {name: value for name, value in variables.items() if re.match(ROLE_VARIABLE, name)}
    variables.update(inventory_hostname=hypervisor, egress_proxy__pool_addresses=overrides.get(
        "egress_proxy__pool_addresses", {}), egress_proxy__ha=overrides.get("egress_proxy__ha", NO_HA_GROUPS))
    return variables


# Where each entry point writes kvm_proxy_set's set-wide options: the task file and the mapping's name in its vars.
CONVERGE_OPTIONS = ("main.yml", "egress_proxy__set_options")
REMOVAL_OPTIONS = ("destroy.yml", "egress_proxy__removal_options")


def converge_options(where=CONVERGE_OPTIONS):
    """kvm_proxy_set's set-wide options as the role's task file writes them (templates, CONVERGE_OPTIONS or
    REMOVAL_OPTIONS): what a play that runs tasks/arguments.yml alone gives it, as the block around it does."""
    tasks_file, name = where
    with open(os.path.join(ROLE, "tasks", tasks_file)) as handle:
        (block,) = [task for task in yaml.safe_load(handle) if name in task.get("vars", {})]
    return block["vars"][name]


def set_options(variables, where=CONVERGE_OPTIONS):
    """The set-wide options of ``where`` (converge_options) rendered with ``variables``, as the play renders them:
    Ansible's Templar, the builtin filters, OMIT for the play's omit."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    templar = Templar(loader=DataLoader(), variables=dict(variables, omit=OMIT))
    return {option: templar.template(trust_as_template(value)) if isinstance(value, str) else value
            for option, value in converge_options(where).items()}


def render_each(renders):
    """Each (template, variables) of ``renders`` rendered: a list of {"text": ...} or {"error": the message}."""
    completed = subprocess.run([sys.executable, os.path.abspath(__file__)], input=json.dumps(renders),
                               capture_output=True, text=True, check=True)
    return json.loads(completed.stdout)


def render(template, variables):
    """``template`` of the role's templates/ rendered with ``variables``; fails with the template's error."""
    (rendered,) = render_each([(template, variables)])
    assert "error" not in rendered, rendered["error"]
    return rendered["text"]


# What tasks/arguments.yml's set_fact renders: one template for the whole set, which includes each proxy's two; the key
# of each text in its mapping, and the template of that text.
TEXTS_TEMPLATE = "proxy_texts.j2"
PROXY_TEMPLATES = (("user_data", "user-data.yml.j2"), ("squid_conf", "squid.conf.j2"))
# What kvm_proxy_set is told to check the policy's files with, and to load them with, on the proxy.
SQUID_CONF = "/etc/squid/squid.conf"
SQUID_USERS = "/etc/squid/egress-users"
# The decisions' counter, squid's log daemon where squid.conf counts them (the role's files/squid_helpers.py).
COUNTER_PROGRAM = "/usr/local/sbin/egress-proxy-decision-counter"
# A count of the counter's metric on a metrics page: its labels, and its value.
DECISION_SAMPLE = re.compile(r'^egress_proxy_decisions_total\{decision="([^"]*)",profile="([^"]*)",rule="([^"]*)"\} (\d+)$',
                             re.M)
SQUID_VALIDATE = ["/usr/sbin/squid", "-k", "parse"]
# While users' passwords are rotated: their previous hashes, and squid's Basic helper that takes either.
PREVIOUS_USERS = "/etc/squid/egress-users-previous"
EITHER_PROGRAM = "/usr/local/sbin/egress-proxy-basic-auth-either"
# With profiles' own egress addresses: their list, the program that puts them on the NIC, and squid's drop-in that runs it.
EGRESS_ADDRESSES = "/etc/egress-proxy/egress-addresses"
EGRESS_ADDRESSES_PROGRAM = "/usr/local/sbin/egress-proxy-egress-addresses"
SQUID_DROP_IN = "/etc/systemd/system/squid.service.d/egress-addresses.conf"
# With the TLS name check: squid's external acl that says whether a ClientHello named a server.
SNI_PROGRAM = "/usr/local/sbin/egress-proxy-sni-given"
POLICY_PATHS = (SQUID_CONF, SQUID_USERS, PREVIOUS_USERS, EITHER_PROGRAM, COUNTER_PROGRAM, SNI_PROGRAM, EGRESS_ADDRESSES,
                EGRESS_ADDRESSES_PROGRAM, SQUID_DROP_IN)


def reload_ports(reload):
    """The ports a proxy's policy.reload holds new connections to: it is squid_reload_argv's of them (squid's reload,
    SQUID_RELOAD), else an AssertionError."""
    from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_reload import SQUID_RELOAD, squid_reload_argv

    ports = [int(port) for port in reload[6:reload.index("--")]]
    assert reload == squid_reload_argv(ports), reload
    assert reload[reload.index("--") + 1:] == list(SQUID_RELOAD), reload
    return ports


def render_texts(renders):
    """Each of ``renders`` (the role's variables, egress_proxy__instances the instances) rendered and read back as the
    set_fact of tasks/arguments.yml does (TEXTS_TEMPLATE, then from_json): {"texts": {name: {key: text}}}, or
    {"error": the template's message}."""
    return [rendered if "error" in rendered else {"texts": json.loads(rendered["text"])}
            for rendered in render_each([(TEXTS_TEMPLATE, variables) for variables in renders])]


def render_proxies(cases):
    """Each of ``cases`` (the role's variables, egress_proxy_instance one proxy) rendered alone as the set_fact of
    tasks/arguments.yml renders it: {key: text} of PROXY_TEMPLATES, or {"error": the failing template's message}."""
    renders = [dict(variables, egress_proxy__instances=[variables["egress_proxy_instance"]]) for variables in cases]
    return [rendered if "error" in rendered else rendered["texts"][variables["egress_proxy_instance"]["name"]]
            for variables, rendered in zip(cases, render_texts(renders))]


def role_set_args(desired, render=True, hypervisor="hv1", **overrides):
    """tasks/arguments.yml for the entries ``desired`` with the role's defaults and ``overrides``: the instances
    (proxy_instances), the render of the texts of those to run (``render``), then kvm_proxy_set's arguments
    (proxy_set_args). Raises the filters' AnsibleFilterError."""
    from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_instances import proxy_instances
    from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_set_args import proxy_set_args

    variables = role_variables(hypervisor, **overrides)
    instances = proxy_instances(desired, variables)
    options = set_options(variables)
    if not render:
        return proxy_set_args(instances, variables, options=options, omitted=OMIT)
    (rendered,) = render_texts([dict(role_defaults(), inventory_hostname=hypervisor, egress_proxy__instances=instances,
                                     **overrides)])
    assert "error" not in rendered, rendered["error"]
    return proxy_set_args(instances, variables, options=options, omitted=OMIT, texts=rendered["texts"])


def decision_counts(page):
    """{(decision, profile, rule): count} of the decisions' counter on a metrics page (text)."""
    return {labels[:3]: int(labels[3]) for labels in DECISION_SAMPLE.findall(page)}


def policy_files(proxy):
    """{path: file} of the policy kvm_proxy_set gets for ``proxy`` (one of proxy_set_args' proxies): squid.conf, the
    users' file beside it when there are users, the previous passwords' and the helper that takes either while they
    are rotated, the decisions' counter when squid.conf counts them, the TLS name check's program, and the profiles' egress addresses with their
    program and squid's drop-in; checked by squid -k parse and loaded by a reload of squid that holds new connections
    to its ports (after the egress addresses went on). Its pooled_addresses are not files."""
    from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.profile_addresses import with_profile_addresses

    policy = proxy["policy"]
    # pooled_addresses, recorded with the policy, only for a proxy whose profiles have addresses from the pool.
    assert sorted(policy) in (["files", "reload", "validate"], ["files", "pooled_addresses", "reload", "validate"]), policy
    assert policy["validate"] == SQUID_VALIDATE
    paths = [entry["path"] for entry in policy["files"]]
    squid_reload = policy["reload"]
    if EGRESS_ADDRESSES in paths:
        # The addresses go on first (/bin/sh -c SCRIPT sh, then squid's reload).
        squid_reload = policy["reload"][4:]
        egress = [{"interface": "192.0.2.1/24", "device": "nic0"}]
        assert with_profile_addresses({"files": [], "reload": squid_reload}, egress)["reload"] == policy["reload"]
    reload_ports(squid_reload)
    # squid.conf, then each other file once, in the order the role writes them.
    assert paths[:1] == [SQUID_CONF] and paths == [path for path in POLICY_PATHS if path in paths], paths
    return {entry["path"]: entry for entry in policy["files"]}


# The one file the user-data writes (with metrics): the exporter's arguments, before the packages are installed.
EXPORTER_DEFAULTS = "/etc/default/prometheus-squid-exporter"


def user_data_document(text):
    """The user-data ``text`` parsed: it writes no file but the exporter's arguments, so neither squid.conf nor the
    users' file and their hashes."""
    document = yaml.safe_load(text)
    assert [entry["path"] for entry in document.get("write_files", [])] in ([], [EXPORTER_DEFAULTS]), text
    assert "/etc/squid/" not in text and "$6$" not in text, text
    return document


def user_data_parts(data):
    """The documents of a seed's user-data (bytes) as cloud-init reads them: each part of a MIME multi-part (the
    role's cloud-config, then the policy's files), decoded; the user-data itself when it is not one."""
    message = email.message_from_bytes(data)
    if not message.is_multipart():
        return [data]
    return [part.get_payload(decode=True) for part in message.walk() if not part.is_multipart()]


def squid_parsed(squid_conf, tmp_path):
    """The directives squid itself reads from ``squid_conf`` (squid -k parse, its "Processing:" lines), failing on
    a file squid refuses or warns about."""
    path = tmp_path / "squid.conf"
    path.write_text(squid_conf)
    parsed = subprocess.run(["squid", "-k", "parse", "-f", str(path)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert parsed.returncode == 0, parsed.stderr
    # squid warns of `via off`, which the role writes on purpose (egress_proxy_via); any other warning is the file's.
    warnings = [line for line in parsed.stderr.splitlines()
                if ("WARNING" in line or "ERROR" in line) and "HTTP requires the use of Via" not in line]
    assert warnings == [], parsed.stderr
    return [line.split("Processing: ", 1)[1] for line in parsed.stderr.splitlines() if "Processing: " in line]


def _render_in_this_python(renders):
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar, trust_as_template

    init_plugin_loader([COLLECTIONS])
    loader = DataLoader()
    loader.set_basedir(os.path.join(ROLE, "templates"))
    templar = Templar(loader=loader)
    rendered = []
    for template, variables in renders:
        with open(os.path.join(ROLE, "templates", template)) as handle:
            text = trust_as_template(handle.read())
        templar.available_variables = variables
        try:
            rendered.append({"text": templar.template(text)})
        except AnsibleError as error:
            rendered.append({"error": str(error)})
    return rendered


if __name__ == "__main__":
    json.dump(_render_in_this_python(json.load(sys.stdin)), sys.stdout)
