# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""egress_proxy_guest_agent_rpcs: the user-data's script that restricts qemu-ga, run against stand-ins of both kinds
of qemu-ga (with --allow-rpcs, and 7.2's --block-rpcs only), and the names it takes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_proxy import RoleInputError, role_instances
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import render, role_defaults, role_variables

ALLOWED = ["guest-ping", "guest-exec", "guest-exec-status"]
# qemu-ga's own lists (qemu-ga --block-rpcs='?'), one command a line.
LISTED = ["guest-ping", "guest-exec", "guest-exec-status", "guest-set-user-password", "guest-fsfreeze-freeze"]
NEW_HELP = "  -b, --block-rpcs=LIST ...\n  -a, --allow-rpcs=LIST ...\n"
OLD_HELP = "  -b, --block-rpcs=LIST ...\n"
QEMU_GA = """#!/bin/sh
case "$1" in
  --help) printf '%s' "$HELP" ;;
  --block-rpcs=\\?) printf '%s\\n' $LISTED ;;
esac
"""
SYSTEMCTL = '#!/bin/sh\necho "$@" >> "$ROOT/systemctl.log"\n'


def restriction_argv(rpcs):
    """The runcmd entry that restricts the agent, from the rendered user-data (None when there is none)."""
    settings = dict(egress_proxy_bridge="br0", egress_proxy_allowed_clients=["10.0.0.0/8"], egress_proxy_guest_agent_rpcs=rpcs,
                    egress_proxy_image={"name": "debian-12", "url": "https://images.example/d.qcow2"})
    (instance,) = role_instances([{"name": "proxy-a"}], role_variables(**settings))
    user_data = yaml.safe_load(render("user-data.yml.j2", dict(role_defaults(), egress_proxy_instance=instance, **settings)))
    scripts = [entry for entry in user_data["runcmd"] if isinstance(entry, list) and "qemu-ga.conf" in " ".join(entry)]
    return scripts[0] if scripts else None


@pytest.mark.parametrize("qemu_ga_help, written", [
    (NEW_HELP, "[general]\nallow-rpcs=guest-ping,guest-exec,guest-exec-status\n"),
    (OLD_HELP, "[general]\nblock-rpcs=guest-set-user-password,guest-fsfreeze-freeze\n"),
])
def test_the_agent_answers_only_the_listed_commands_whatever_its_version(tmp_path, qemu_ga_help, written):
    argv = restriction_argv(ALLOWED)
    assert argv[0:2] == ["sh", "-c"] and argv[-1] == ",".join(ALLOWED)
    bin_dir, etc = tmp_path / "bin", tmp_path / "etc"
    bin_dir.mkdir()
    for name, text in (("qemu-ga", QEMU_GA), ("systemctl", SYSTEMCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    # The script writes /etc/qemu/qemu-ga.conf: here under tmp_path, the one path changed for the test.
    script = argv[2].replace("/etc/qemu", str(etc / "qemu"))
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]), HELP=qemu_ga_help, LISTED=" ".join(LISTED),
               ROOT=str(tmp_path))
    subprocess.run(["sh", "-c", script] + argv[3:], env=env, check=True)
    assert (etc / "qemu" / "qemu-ga.conf").read_text() == written
    assert (tmp_path / "systemctl.log").read_text() == "restart qemu-guest-agent\n"


def test_an_empty_list_leaves_the_agent_as_it_is():
    assert restriction_argv([]) is None


@pytest.mark.parametrize("rpcs", [["guest-ping; reboot"], ["guest-ping\n[general]"], ["guest-ping,guest-exec"],
                                  ["ping"], [""], [7]])
def test_a_name_that_is_not_a_command_is_refused_naming_the_variable(rpcs):
    variables = role_variables(egress_proxy_bridge="br0", egress_proxy_allowed_clients=["10.0.0.0/8"],
                               egress_proxy_image={"name": "debian-12", "url": "https://images.example/d.qcow2"},
                               egress_proxy_guest_agent_rpcs=["guest-ping"] + rpcs)
    role_instances([{"name": "proxy-a"}], dict(variables, egress_proxy_guest_agent_rpcs=["guest-ping"]))
    with pytest.raises(RoleInputError) as raised:
        role_instances([{"name": "proxy-a"}], variables)
    assert "egress_proxy_guest_agent_rpcs" in str(raised.value) and "not the name of a guest agent command" in str(
        raised.value)
