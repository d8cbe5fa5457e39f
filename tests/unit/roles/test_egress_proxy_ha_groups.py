# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""HA groups through the role (issue 42): what a member's guest gets, and what nobody else gets.

Each case runs the role's path (proxy_instances, the templates, proxy_set_args) with egress_proxy__ha as
vars/main.yml finds it across the fleet; the members' squid.conf is read by squid -k parse and served by a real
squid in a network namespace, where keepalived's health check and the hand-over script run against it; the role's
tasks run through ansible-playbook at -vvv with the members on two hypervisors, one of them outside the play.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_instances import proxy_instances
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.ha_group import HaGroup
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.policy import Policy
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import (
    CHECK_ANSWER_SECONDS,
    HAND_OVER_PATH,
    HEALTH_PORT,
    HEALTH_SCRIPT_PATH,
    KEEPALIVED_CONF_PATH,
    SYSCTL_PATH,
    fleet_groups,
    member_view,
    release_argv,
)
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_conf import MANAGER_PORT
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_reload import squid_reload_argv
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import (
    REPO_ROOT,
    ROLE,
    SQUID_CONF,
    converge_options,
    role_set_args,
    role_variables,
    squid_parsed,
)

UID = "egress_proxies.kvm.egress_proxy"
GROUP = {"name": "office", "address": "198.18.40.10", "members": ["egress-a", "egress-b"]}
A = {"name": "egress-a", "address": "198.18.40.11/24"}
B = {"name": "egress-b", "address": "198.18.40.12/24"}
LONE = {"name": "egress-lone", "address": "198.18.40.30/24"}
BASE = {"egress_proxy_bridge": "br0", "egress_proxy_allowed_clients": ["198.18.40.0/24"],
        "egress_proxy_image": {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"}}
OUTSIDE = {"egress_proxy_outside": {"bridge": "br1", "gateway": "198.18.41.1", "gateway6": "2001:db8:41::1"}}


def with_outside(entry, host):
    return dict(entry, address6=entry["address"].replace("198.18.40.", "2001:db8:40::").replace("/24", "/64"),
                outside={"address": "198.18.41.%d/24" % host, "address6": "2001:db8:41::%d/64" % host})


def found(groups, hv1, hv2=(), **settings):
    """egress_proxy__ha as vars/main.yml finds it: ``hv1`` this hypervisor's entries, ``hv2`` another's."""
    settings = dict({"egress_proxy_port": 3128}, **settings)
    return fleet_groups(groups, [member_view(hv1, groups, settings, "hv1"), member_view(list(hv2), groups, settings, "hv2")],
                        UID)


def proxies(entries, groups=(), hv2=(B,), **overrides):
    """kvm_proxy_set's proxies of hv1 (``entries``) with ``groups``, as tasks/arguments.yml shapes them."""
    groups = list(groups)
    variables = dict(BASE, egress_proxy_ha_groups=groups, **overrides)
    variables["egress_proxy__ha"] = found(groups, entries, hv2, **{
        key: value for key, value in variables.items() if key == "egress_proxy_outside"})
    return {proxy["name"]: proxy for proxy in role_set_args([dict(entry) for entry in entries], **variables)["proxies"]}


def files_of(proxy):
    return {entry["path"]: entry for entry in proxy["policy"]["files"]}


def test_a_member_gets_keepalived_and_its_files_as_policy():
    proxy = proxies([A], [GROUP])["egress-a"]
    files = files_of(proxy)
    assert list(files) == [SQUID_CONF, KEEPALIVED_CONF_PATH, HEALTH_SCRIPT_PATH, HAND_OVER_PATH]
    assert not [entry for entry in files.values() if "secret_content" in entry]
    assert "unicast_peer {\n        198.18.40.12\n    }" in files[KEEPALIVED_CONF_PATH]["content"]
    assert proxy["policy"]["validate"][:2] == ["/bin/sh", "-c"] and proxy["policy"]["validate"][-3:] == [
        "/usr/sbin/squid", "-k", "parse"]
    # squid's reload holds new connections to every port it listens on: the proxy's, the metrics port, the cache
    # manager's and the health check's loopback ports.
    assert proxy["policy"]["reload"][4:] == [HAND_OVER_PATH, "198.18.40.10", "198.18.40.12", "--"] + squid_reload_argv(
        [3128, 9301, MANAGER_PORT, HEALTH_PORT])
    assert proxy["policy"]["release"] == release_argv([{"address": "198.18.40.10/24", "peers": ["198.18.40.12"]}])
    document = yaml.safe_load(proxy["user_data"])
    assert document["packages"] == ["squid", "qemu-guest-agent", "prometheus-squid-exporter", "keepalived"]
    runcmd = [" ".join(command) if isinstance(command, list) else command for command in document["runcmd"]]
    # keepalived starts before squid reloads the role's configuration: its check keeps it off the address until squid
    # answers.
    keepalived = runcmd.index("systemctl reload-or-restart keepalived")
    assert runcmd[keepalived - 1] == "sh -c systemctl is-enabled --quiet keepalived || systemctl enable keepalived"
    assert keepalived < runcmd.index("systemctl reload-or-restart squid")


def test_without_install_packages_a_member_installs_nothing_but_still_starts_keepalived():
    document = yaml.safe_load(proxies([A], [GROUP], egress_proxy_install_packages=False)["egress-a"]["user_data"])
    assert "packages" not in document and ["systemctl", "reload-or-restart", "keepalived"] in document["runcmd"]


def test_a_member_with_an_outside_nic_loads_the_sysctl_file_before_squid():
    entries = [with_outside(A, 11)]
    proxy = proxies(entries, [GROUP], hv2=[with_outside(B, 12)], **OUTSIDE)["egress-a"]
    assert files_of(proxy)[SYSCTL_PATH]["content"].endswith("net.ipv4.ip_nonlocal_bind = 1\nnet.ipv6.ip_nonlocal_bind = 1\n")
    runcmd = yaml.safe_load(proxy["user_data"])["runcmd"]
    assert runcmd.index(["sysctl", "--quiet", "--load=" + SYSCTL_PATH]) < runcmd.index(["systemctl", "reload-or-restart", "squid"])


def test_a_proxy_in_no_group_is_byte_identical_beside_a_group():
    alone = proxies([LONE], [])["egress-lone"]
    beside = proxies([LONE, A], [GROUP])["egress-lone"]
    assert beside == alone
    assert "keepalived" not in json.dumps(alone) and "egress_health" not in json.dumps(alone)


def test_a_members_policy_names_its_group_which_the_module_records_and_a_lone_proxys_names_none():
    proxy = proxies([with_outside(A, 11)], [dict(GROUP, address6="2001:db8:40::10")], hv2=[with_outside(B, 12)],
                    **OUTSIDE)["egress-a"]
    assert proxy["policy"]["group"] == {"name": "office", "address": "198.18.40.10", "address6": "2001:db8:40::10"}
    assert Policy.from_params(proxy["policy"]).group == HaGroup("office", "198.18.40.10", "2001:db8:40::10")
    assert proxies([A], [GROUP])["egress-a"]["policy"]["group"] == {
        "name": "office", "address": "198.18.40.10", "address6": None}
    # A proxy in no group: no group key, so its policy's digest is the one it had before groups named themselves.
    alone = proxies([LONE, A], [GROUP])["egress-lone"]
    assert "group" not in alone["policy"] and Policy.from_params(alone["policy"]).group is None


def test_membership_priority_address_and_id_changes_are_policy_only():
    """The user-data (the machine) stays: only the policy changes, which the module writes in place."""
    before = proxies([A], [GROUP])["egress-a"]
    c = {"name": "egress-c", "address": "198.18.40.13/24"}
    for changed, hv2 in ((dict(GROUP, priorities={"egress-a": 100}), [B]), (dict(GROUP, address="198.18.40.20"), [B]),
                         (dict(GROUP, vrrp_id=9), [B]),
                         (dict(GROUP, members=["egress-a", "egress-b", "egress-c"]), [B, c])):
        after = proxies([A], [changed], hv2=hv2)["egress-a"]
        assert after["user_data"] == before["user_data"] and after["policy"] != before["policy"], changed


# squid.conf of a member, read by squid.
def member_squid(entries=(A,), groups=(GROUP,), hv2=(B,), **overrides):
    return files_of(proxies(list(entries), groups, hv2=hv2, **overrides)["egress-a"])[SQUID_CONF]["content"]


SQUID_SHAPES = {
    "one NIC": {},
    "syslog and users": {"egress_proxy_syslog": "198.18.40.9:514",
                         "egress_proxy_users": [{"name": "alice", "password": "correct horse"}]},
    "no metrics": {"egress_proxy_metrics": False},
}


@pytest.mark.parametrize("shape", list(SQUID_SHAPES))
def test_squid_accepts_a_members_squid_conf_and_the_health_port_is_refused_first_and_logged_nowhere(shape, tmp_path):
    squid = member_squid(**SQUID_SHAPES[shape])
    parsed = squid_parsed(squid, tmp_path)
    assert "http_port 127.0.0.1:%d name=egress_health" % HEALTH_PORT in parsed
    assert [line for line in parsed if line.startswith("http_access")][0] == "http_access deny egress_health"
    logs = [line for line in parsed if line.startswith("access_log")]
    assert logs and all(line.endswith(" !egress_health") for line in logs), logs


def test_with_an_outside_nic_squid_also_listens_on_the_groups_addresses(tmp_path):
    group = dict(GROUP, address6="2001:db8:40::10")
    squid = member_squid([with_outside(A, 11)], [group], [with_outside(B, 12)], **OUTSIDE)
    ports = [line for line in squid_parsed(squid, tmp_path) if line.startswith("http_port")]
    assert ports[:4] == ["http_port 198.18.40.11:3128", "http_port [2001:db8:40::11]:3128", "http_port 198.18.40.10:3128",
                         "http_port [2001:db8:40::10]:3128"]
    # The group's metrics target scrapes the address's holder: the metrics port there too, under the one name its
    # ACLs match.
    assert ports[5:8] == ["http_port 198.18.40.11:9301 accel defaultsite=metrics name=egress_metrics",
                          "http_port 198.18.40.10:9301 accel defaultsite=metrics name=egress_metrics",
                          "http_port [2001:db8:40::10]:9301 accel defaultsite=metrics name=egress_metrics"]


def test_with_egress_follows_requests_on_the_groups_address_leave_from_its_egress_address(tmp_path):
    group = dict(GROUP, address6="2001:db8:40::10", egress_follows=True, egress_address="198.18.41.10",
                 egress_address6="2001:db8:41::10")
    squid = member_squid([with_outside(A, 11)], [group], [with_outside(B, 12)], **OUTSIDE)
    parsed = squid_parsed(squid, tmp_path)
    assert "acl egress_ha_office myip 198.18.40.10 2001:db8:40::10" in parsed
    outgoing = [line for line in parsed if line.startswith("tcp_outgoing_address")]
    assert outgoing == ["tcp_outgoing_address 198.18.41.10 egress_ha_office",
                        "tcp_outgoing_address 2001:db8:41::10 egress_ha_office",
                        "tcp_outgoing_address 198.18.41.11", "tcp_outgoing_address 2001:db8:41::11"]


def test_a_members_port_on_the_health_port_is_refused():
    variables = role_variables(**dict(BASE, egress_proxy_port=HEALTH_PORT, egress_proxy_ha_groups=[GROUP],
                                      egress_proxy__ha=found([GROUP], [A], [B], egress_proxy_port=HEALTH_PORT)))
    with pytest.raises(AnsibleFilterError) as error:
        proxy_instances([A], variables)
    assert "port %d is the loopback port of the HA group's health check" % HEALTH_PORT in str(error.value)


# The refusals reach the role's check of the proxies, naming the entry.
def test_the_groups_problems_fail_the_roles_check_before_anything_is_touched():
    groups = [dict(GROUP, address="198.18.50.10")]
    variables = role_variables(**dict(BASE, egress_proxy_ha_groups=groups, egress_proxy__ha=found(groups, [A], [B])))
    with pytest.raises(AnsibleFilterError) as error:
        proxy_instances([A], variables)
    assert "egress_proxy_ha_groups[0].address 198.18.50.10 is not a host address of the members' segment" in str(error.value)


def test_a_group_that_still_gives_a_password_fails_the_roles_check_naming_the_key():
    groups = [dict(GROUP, password="Pa55:w/d")]
    variables = role_variables(**dict(BASE, egress_proxy_ha_groups=groups, egress_proxy__ha=found(groups, [A], [B])))
    with pytest.raises(AnsibleFilterError) as error:
        proxy_instances([A], variables)
    assert "egress_proxy_ha_groups[0].password: groups take no password any more" in str(error.value)
    assert "Pa55:w/d" not in str(error.value)


def test_a_member_whose_user_data_replaces_the_roles_is_refused():
    variables = role_variables(**dict(BASE, egress_proxy_ha_groups=[GROUP], egress_proxy__ha=found([GROUP], [A], [B]),
                                      egress_proxy_user_data="#cloud-config\npackages: [squid]\n"))
    with pytest.raises(AnsibleFilterError) as error:
        proxy_instances([A], variables)
    assert "egress-a on hv1 is in egress_proxy_ha_groups, but egress_proxy_user_data replaces" in str(error.value)


def test_the_destroy_entry_point_needs_no_group():
    groups = [dict(GROUP, address="198.18.50.10")]
    variables = role_variables(**dict(BASE, egress_proxy_ha_groups=groups, egress_proxy__ha=found(groups, [A], [B])))
    assert [instance["state"] for instance in proxy_instances([A], variables, removing=True)] == ["absent"]


# A real squid in a network namespace: keepalived's health check, the logs, and the hand-over script.
def netns(name, *argv, **options):
    return subprocess.run(["ip", "netns", "exec", name] + list(argv), capture_output=True, text=True, timeout=60,
                          check=options.get("check", True), env=options.get("env"))


def guest_script(tmp_path, proxy, path):
    script = tmp_path / os.path.basename(path)
    script.write_text(files_of(proxy)[path]["content"])
    script.chmod(0o755)
    return str(script)


class Squid:
    """The member's squid.conf run in the namespace ``name``, its access log and pid file in ``workdir``."""

    def __init__(self, name, squid_conf, workdir):
        self.log = os.path.join(workdir, "access.log")
        conf = os.path.join(workdir, "squid.conf")
        with open(conf, "w") as handle:
            handle.write(squid_conf.replace("/var/log/squid/access.log", self.log) +
                         "pid_filename %s/squid.pid\ncache_log %s/cache.log\n" % (workdir, workdir))
        self.process = subprocess.Popen(["ip", "netns", "exec", name, "squid", "-N", "-f", conf],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while ":%d " % HEALTH_PORT not in netns(name, "ss", "-Hltn").stdout:
            assert self.process.poll() is None and time.monotonic() < deadline, "squid did not start"
            time.sleep(0.1)

    def stop(self):
        """Stops squid, which writes its access log out."""
        self.process.terminate()
        self.process.wait(timeout=30)
        with open(self.log) as handle:
            return handle.read()


@pytest.fixture()
def segment(tmp_path):
    """Two namespaces on one veth, as two members on the client segment: "member" (egress-a, 198.18.40.11, holding
    the group's 198.18.40.10) and "other" (egress-b, 198.18.40.12); a fake systemctl on the member's PATH whose
    "stop keepalived" gives the address up, as keepalived's stop does."""
    # squid writes its log as its own user, which cannot enter pytest's directories (mode 0700).
    workdir = tempfile.mkdtemp(prefix="eptest-ha-")
    os.chmod(workdir, 0o777)
    names = {"member": "eptest-ha-%s" % secrets.token_hex(3), "other": "eptest-ha-%s" % secrets.token_hex(3)}
    for name in names.values():
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "link", "add", "m0", "netns", names["member"], "type", "veth", "peer", "name", "o0",
                        "netns", names["other"]], check=True)
        for role, nic, address in (("member", "m0", "198.18.40.11/24"), ("other", "o0", "198.18.40.12/24")):
            for command in (["ip", "link", "set", "lo", "up"], ["ip", "link", "set", nic, "up"],
                            ["ip", "addr", "add", address, "dev", nic]):
                netns(names[role], *command)
        netns(names["member"], "ip", "addr", "add", "198.18.40.10/24", "dev", "m0")
        netns(names["other"], "ip", "addr", "add", "198.18.40.10/32", "dev", "o0")
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "systemctl").write_text(
            '#!/bin/sh\necho "$*" >> %s/systemctl.log\n'
            'if [ "$*" = "stop keepalived" ]; then ip addr del 198.18.40.10/24 dev m0; fi\n' % workdir)
        (bin_dir / "systemctl").chmod(0o755)
        yield names, workdir, dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]))
    finally:
        for name in names.values():
            subprocess.run(["ip", "netns", "del", name], check=False)
        shutil.rmtree(workdir)


def test_the_health_check_passes_on_squids_answer_and_its_requests_reach_no_log(tmp_path, segment):
    names, workdir, _env = segment
    proxy = proxies([A], [GROUP])["egress-a"]
    check = guest_script(tmp_path, proxy, HEALTH_SCRIPT_PATH)
    assert netns(names["member"], check, str(HEALTH_PORT), check=False).returncode == 1  # no squid yet
    squid = Squid(names["member"], files_of(proxy)[SQUID_CONF]["content"], workdir)
    try:
        for _attempt in range(5):
            assert netns(names["member"], check, str(HEALTH_PORT), check=False).returncode == 0
        # A client's request is logged: the log works, the health check's are left out.
        netns(names["member"], "bash", "-c", 'exec 3<>/dev/tcp/198.18.40.11/3128; printf "GET http://127.0.0.1/'
              'squid-internal-mgr/menu HTTP/1.0\\r\\n\\r\\n" >&3; head -c 100 <&3')
    finally:
        log = squid.stop()
    assert log.count("TCP_DENIED/403") == 1 and "squid-internal-mgr/menu" in log and ":%d" % HEALTH_PORT not in log, log


def test_the_health_check_fails_on_a_squid_that_does_not_answer(tmp_path, segment):
    names, _workdir, _env = segment
    check = guest_script(tmp_path, proxies([A], [GROUP])["egress-a"], HEALTH_SCRIPT_PATH)
    # A listener that never answers, as a hung squid's socket: the check gives up within its bound.
    listener = subprocess.Popen(["ip", "netns", "exec", names["member"], sys.executable, "-c",
                                 "import socket, time\ns = socket.socket()\ns.bind(('127.0.0.1', %d))\ns.listen()\n"
                                 "print('ready', flush=True)\ntime.sleep(30)" % HEALTH_PORT], stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout.readline().strip() == "ready"
        started = time.monotonic()
        assert netns(names["member"], check, str(HEALTH_PORT), check=False).returncode == 1
        assert time.monotonic() - started < CHECK_ANSWER_SECONDS + 1
    finally:
        listener.kill()
        listener.wait()


def test_the_hand_over_gives_the_address_to_the_member_that_answers(tmp_path, segment):
    names, workdir, env = segment
    members = proxies([A, B], [GROUP], hv2=())
    hand_over = guest_script(tmp_path, members["egress-a"], HAND_OVER_PATH)
    squid = Squid(names["other"], files_of(members["egress-b"])[SQUID_CONF]["content"], workdir)
    try:
        handed = netns(names["member"], hand_over, "198.18.40.10", "198.18.40.12", env=env, check=False)
        assert (handed.returncode, handed.stdout) == (0, "hand-over: egress-a handed 198.18.40.10 over to egress-b\n"), handed
        # Not the holder any more: nothing to do.
        again = netns(names["member"], hand_over, "198.18.40.10", "198.18.40.12", env=env, check=False)
        assert (again.returncode, again.stdout) == (0, "hand-over: egress-a does not hold 198.18.40.10\n")
    finally:
        squid.stop()
    with open(os.path.join(workdir, "systemctl.log")) as handle:
        assert handle.read() == "stop keepalived\n"


def test_a_hand_over_nobody_takes_starts_keepalived_again_and_says_why(tmp_path, segment):
    names, workdir, env = segment
    members = proxies([A, B], [GROUP], hv2=())
    hand_over = guest_script(tmp_path, members["egress-a"], HAND_OVER_PATH)
    # The peer serves on its own address, but does not take the group's.
    netns(names["other"], "ip", "addr", "del", "198.18.40.10/32", "dev", "o0")
    squid = Squid(names["other"], files_of(members["egress-b"])[SQUID_CONF]["content"], workdir)
    try:
        handed = netns(names["member"], hand_over, "198.18.40.10", "198.18.40.12", env=env, check=False)
    finally:
        squid.stop()
    assert handed.returncode == 1 and handed.stdout == (
        "hand-over: no other member answered on 198.18.40.10 port 3128 within 10 s; keepalived of egress-a started again\n")
    with open(os.path.join(workdir, "systemctl.log")) as handle:
        assert handle.read() == "stop keepalived\nstart keepalived\n"


def test_a_hand_over_without_a_serving_peer_keeps_the_address_and_leaves_keepalived_alone(tmp_path, segment):
    names, workdir, env = segment
    hand_over = guest_script(tmp_path, proxies([A], [GROUP])["egress-a"], HAND_OVER_PATH)
    handed = netns(names["member"], hand_over, "--within", "2", "198.18.40.10", "198.18.40.12", env=env, check=False)
    assert (handed.returncode, handed.stdout) == (1, "hand-over: no other member serves (asked 198.18.40.12 on port 3128 "
                                                     "for 2 s); 198.18.40.10 stays on egress-a\n")
    assert not os.path.exists(os.path.join(workdir, "systemctl.log"))


@pytest.mark.parametrize("argv", [["198.18.40.10\n", "198.18.40.12"], ["198.18.40.10;reboot", "198.18.40.12"],
                                  ["198.18.40.10", "198.18.40.12 x"], ["198.18.40.10"], ["--move", "$(reboot)"],
                                  ["--within", "2;reboot", "198.18.40.10", "198.18.40.12"]])
def test_the_hand_over_refuses_arguments_that_are_not_addresses(tmp_path, segment, argv):
    names, workdir, env = segment
    hand_over = guest_script(tmp_path, proxies([A], [GROUP])["egress-a"], HAND_OVER_PATH)
    handed = netns(names["member"], hand_over, *argv, env=env, check=False)
    assert handed.returncode == 2 and not os.path.exists(os.path.join(workdir, "systemctl.log"))


# The role's tasks: two hypervisors, the members found through hostvars, the password nowhere in the output.
def converge_throttle():
    """The expression of the converge task's throttle (tasks/main.yml), without its braces."""
    with open(os.path.join(ROLE, "tasks", "main.yml")) as handle:
        (block,) = [task for task in yaml.safe_load(handle) if "block" in task]
    (converge,) = [task for task in block["block"] if "egress_proxies.kvm.kvm_proxy_set" in task]
    text = converge["throttle"].strip()
    assert text.startswith("{{") and text.endswith("}}"), text
    return text[2:-2]


def run_arguments(tmp_path, limit=None, members_here=None, groups=(GROUP,)):
    """The role's arguments.yml on hv1 (A and LONE) and hv2 (B) in check mode, then a task showing what it found, with
    the converge's throttle as tasks/main.yml computes it from each hypervisor's egress_proxy__ha_member_here
    (``members_here`` {host: bool}, as tasks/main.yml's listing keeps it)."""
    inventory = {"all": {"hosts": {
        "hv1": {"egress_proxy_instances": [A, LONE]},
        "hv2": {"egress_proxy_instances": [B]},
    }, "vars": dict(BASE, ansible_connection="local", ansible_python_interpreter=sys.executable,
                    egress_proxy_ha_groups=list(groups))}}
    for host, here in (members_here or {}).items():
        inventory["all"]["hosts"][host]["egress_proxy__ha_member_here"] = here
    (tmp_path / "inventory.yml").write_text(json.dumps(inventory))
    shown = ("{{ {'ha': egress_proxy__ha, 'throttle': (%s) | int, 'files': "
             "egress_proxy__proxies | map(attribute='policy.files') | map('map', attribute='path') | list} | to_json }}"
             % converge_throttle())
    show = {"name": "Show the groups", "ansible.builtin.debug": {"msg": shown}}
    play = {"hosts": "all", "gather_facts": False, "vars": {"egress_proxy__set_options": converge_options()}, "tasks": [
        {"ansible.builtin.include_role": {"name": "egress_proxies.kvm.egress_proxy", "tasks_from": "arguments",
                                          "public": True}}, show]}
    (tmp_path / "play.yml").write_text(json.dumps([play]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO_ROOT, "build", "collections"),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_NOCOLOR="true",
               ANSIBLE_STDOUT_CALLBACK="default")
    argv = [os.path.join(REPO_ROOT, ".venv", "bin", "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"),
            str(tmp_path / "play.yml"), "--check", "-vvv"] + (["--limit", limit] if limit else [])
    completed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-3000:]
    return completed.stdout + completed.stderr


def shown(out, host):
    """What the last task showed for ``host``."""
    answer = out.split("TASK [Show the groups]", 1)[1].split("ok: [%s] => " % host, 1)[1]
    return json.loads(json.loads(answer[:answer.index("\n}\n") + 2])["msg"])


@pytest.mark.parametrize("limit", [None, "hv1"])
def test_the_role_finds_the_members_across_hypervisors(tmp_path, limit):
    out = run_arguments(tmp_path, limit, members_here={"hv1": False, "hv2": True})
    seen = shown(out, "hv1")
    (group,) = seen["ha"]["groups"]
    assert [(member["name"], member["hypervisor"]) for member in group["members"]] == [("egress-a", "hv1"), ("egress-b", "hv2")]
    # A member runs on hv2: one hypervisor at a time (with --limit hv1 too, where hv1's own listing decides).
    assert seen["throttle"] == (1 if limit is None else 0)
    assert seen["files"] == [[SQUID_CONF, KEEPALIVED_CONF_PATH, HEALTH_SCRIPT_PATH, HAND_OVER_PATH],
                             [SQUID_CONF]]


@pytest.mark.parametrize("members_here, groups, throttle", [
    ({"hv1": False, "hv2": False}, [GROUP], 0),  # the group's first deploy: its members boot side by side
    ({"hv1": True, "hv2": False}, [GROUP], 1),
    ({"hv1": True, "hv2": True}, [GROUP], 1),
    ({}, [], 0),  # no group spans the hypervisors: the listing is skipped
], ids=["first-deploy", "one-member-runs", "both-run", "no-group"])
def test_the_converge_runs_one_hypervisor_at_a_time_once_a_spanning_groups_member_exists(
        tmp_path, members_here, groups, throttle):
    assert shown(run_arguments(tmp_path, members_here=members_here, groups=groups), "hv1")["throttle"] == throttle
    assert found([GROUP], [A], [B])["spans_hypervisors"] and not found([GROUP], [A, B])["spans_hypervisors"]
