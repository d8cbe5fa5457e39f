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

import json
import os
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


def role_variables(hypervisor="hv1", **overrides):
    """The mapping vars/main.yml hands the filters proxy_instances and proxy_set_args (egress_proxy__variables), with
    the role's defaults and ``overrides`` in it, on the hypervisor ``hypervisor``."""
    with open(os.path.join(ROLE, "vars", "main.yml")) as handle:
        names = yaml.safe_load(handle)["egress_proxy__variables"]
    variables = dict(role_defaults(), inventory_hostname=hypervisor, egress_proxy_host=hypervisor)
    variables.update(overrides)
    return {name: variables[name] for name in names}


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
