"""The hypervisor role's decisions for OS families and hosts the lab has not (RHEL, aarch64: never run here).

roles/hypervisor/tasks/select.yml alone, through ansible-playbook on localhost, with the facts of the
host it would run on given as extra vars: the package manager, the packages, the daemon mode and EPEL it picks,
the settings it takes from the egress_proxy role's variables, and what it refuses before installing anything.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.tests.unit.role_playbook import run_role_tasks

REPO_ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: egress_proxies.kvm.hypervisor
        tasks_from: select
        public: true
    - ansible.builtin.copy:
        dest: "{{ selection_out }}"
        content: "{{ {'manager': hypervisor_package_manager, 'packages': hypervisor_package_list,
                      'daemons': hypervisor_daemon_mode_selected, 'epel': hypervisor_epel_package,
                      'uri': hypervisor_uri, 'pool': hypervisor_pool_name, 'bridge': hypervisor__bridge,
                      'network': hypervisor__network} | to_json }}"
        mode: "0644"
"""
RHEL_PACKAGES = ["qemu-kvm", "qemu-img", "libvirt-daemon", "libvirt-daemon-driver-qemu",
                 "libvirt-daemon-driver-storage-core", "libvirt-client",
                 "python3-libvirt", "python3-lxml", "python3-pycdlib", "python3-requests", "curl"]
DEBIAN_COMMON = ["qemu-utils", "libvirt-daemon-system", "libvirt-clients",
                 "python3-libvirt", "python3-lxml", "python3-pycdlib", "python3-requests", "curl"]


def select(tmp_path, **variables):
    playbook = tmp_path / "select.yml"
    playbook.write_text(PLAYBOOK)
    out = tmp_path / "selection.json"
    variables = dict({"selection_out": str(out), "ansible_architecture": "x86_64", "ansible_service_mgr": "systemd",
                      "hypervisor_bridge": "br0", "ansible_python_interpreter": sys.executable}, **variables)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "build" / "collections"),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_NOCOLOR="true")
    completed = subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", str(playbook),
         "-e", json.dumps(variables)], capture_output=True, text=True, check=False, env=env, timeout=120)
    return completed, (json.loads(out.read_text()) if out.exists() else None)


def test_rhel_with_systemd_installs_with_dnf_and_starts_the_units(tmp_path):
    completed, selection = select(tmp_path, ansible_os_family="RedHat", ansible_distribution="Rocky")
    assert completed.returncode == 0, completed.stdout
    assert (selection["manager"], selection["packages"], selection["daemons"]) == ("dnf", RHEL_PACKAGES, "systemd")


@pytest.mark.parametrize("facts, epel", [
    ({"ansible_distribution": "Rocky"}, "epel-release"),
    ({"ansible_distribution": "AlmaLinux", "hypervisor_epel": False}, ""),
    ({"ansible_distribution": "RedHat", "ansible_distribution_major_version": "9"},
     "https://dl.fedoraproject.org/pub/epel/epel-release-latest-9.noarch.rpm"),
    ({"ansible_distribution": "Fedora"}, ""),
], ids=["Rocky: the distribution's epel-release", "EPEL turned off", "RHEL: EPEL's own package", "Fedora: none"])
def test_the_rhel_family_gets_epel_for_pycdlib_where_it_needs_it(tmp_path, facts, epel):
    completed, selection = select(tmp_path, ansible_os_family="RedHat", **facts)
    assert completed.returncode == 0, completed.stdout
    assert selection["epel"] == epel


def test_debian_needs_no_epel(tmp_path):
    completed, selection = select(tmp_path, ansible_os_family="Debian")
    assert completed.returncode == 0, completed.stdout
    assert selection["epel"] == ""


def test_rhel_with_a_libvirt_network_adds_its_driver_and_dhcp_server(tmp_path):
    completed, selection = select(tmp_path, ansible_os_family="RedHat", hypervisor_bridge="", hypervisor_network="egress")
    assert completed.returncode == 0, completed.stdout
    assert selection["packages"] == RHEL_PACKAGES + ["libvirt-daemon-driver-network", "dnsmasq"]


def test_debian_without_systemd_picks_x86_qemu_and_pid_files(tmp_path):
    completed, selection = select(tmp_path, ansible_os_family="Debian", ansible_service_mgr="sysvinit")
    assert completed.returncode == 0, completed.stdout
    assert (selection["manager"], selection["packages"], selection["daemons"]) == (
        "apt", ["qemu-system-x86"] + DEBIAN_COMMON, "pidfile")


def test_an_inventory_made_for_deploy_gives_the_role_its_uri_pool_and_bridge(tmp_path):
    """inventories/lab sets only the egress_proxy role's variables: prepare.yml takes them (issue 31 item 11)."""
    completed, selection = select(tmp_path, ansible_os_family="Debian", hypervisor_bridge="", egress_proxy_bridge="br7",
                                  egress_proxy_pool="egress", egress_proxy_uri="qemu:///session")
    assert completed.returncode == 0, completed.stdout
    assert (selection["uri"], selection["pool"], selection["bridge"], selection["network"]) == (
        "qemu:///session", "egress", "br7", "")


def test_an_egress_proxy_network_is_the_network_the_role_defines(tmp_path):
    completed, selection = select(tmp_path, ansible_os_family="Debian", hypervisor_bridge="", egress_proxy_network="egress")
    assert completed.returncode == 0, completed.stdout
    assert (selection["bridge"], selection["network"]) == ("", "egress")
    assert selection["packages"][-1] == "dnsmasq-base"


def test_the_roles_own_bridge_or_network_wins_over_the_egress_proxy_roles_as_a_pair(tmp_path):
    completed, selection = select(tmp_path, ansible_os_family="Debian", hypervisor_bridge="", hypervisor_network="egress",
                                  egress_proxy_bridge="virbr-egress")
    assert completed.returncode == 0, completed.stdout
    assert (selection["bridge"], selection["network"]) == ("", "egress")


def test_with_no_pool_set_anywhere_both_roles_use_the_pool_default(tmp_path):
    """One default for both roles and the modules (issue 31 item 16)."""
    completed, selection = select(tmp_path, ansible_os_family="Debian")
    assert completed.returncode == 0, completed.stdout
    with open(REPO_ROOT / "roles" / "egress_proxy" / "defaults" / "main.yml") as handle:
        assert selection["pool"] == yaml.safe_load(handle)["egress_proxy_pool"] == "default"


def test_the_daemon_mode_given_wins_over_the_service_manager(tmp_path):
    completed, selection = select(tmp_path, ansible_os_family="Debian", hypervisor_daemon_mode="pidfile")
    assert completed.returncode == 0, completed.stdout
    assert selection["daemons"] == "pidfile"


@pytest.mark.parametrize("variables, words", [
    ({"ansible_os_family": "Suse"}, ["the Suse OS family is not supported", "Debian", "RedHat"]),
    ({"ansible_os_family": "Debian", "ansible_architecture": "aarch64"},
     ["localhost is an aarch64 host", "x86_64 q35", "x86_64 hosts only", "nothing was installed"]),
    ({"ansible_os_family": "RedHat", "ansible_architecture": "ppc64le"}, ["localhost is an ppc64le host", "x86_64 q35"]),
    ({"ansible_os_family": "Debian", "hypervisor_network": "egress"}, ["set exactly one of hypervisor_bridge"]),
    ({"ansible_os_family": "Debian", "hypervisor_bridge": ""}, ["set exactly one of hypervisor_bridge", "egress_proxy_bridge"]),
    ({"ansible_os_family": "Debian", "hypervisor_pool_path": "pool"}, ["hypervisor_pool_path must be absolute"]),
    ({"ansible_os_family": "Debian", "egress_proxy_uri": "qemu+ssh://virt@nas1.example.net/system"},
     ["ansible_connection local", "names another machine (nas1.example.net)", "on this controller", "Nothing was changed",
      "hypervisors:!localhost"]),
    ({"ansible_os_family": "Debian", "hypervisor_bridge": "../../etc"}, ["bridge \"../../etc\""]),
    ({"ansible_os_family": "Debian", "hypervisor_bridge": "", "hypervisor_network": "e</name><x>"}, ["network \"e</name><x>\""]),
    ({"ansible_os_family": "Debian", "hypervisor_bridge": "", "hypervisor_network": "egress",
      "hypervisor_network_address": "192.168.150.\u0661"}, ["the network's addresses dotted IPv4"]),
    ({"ansible_os_family": "Debian", "egress_proxy_pool": "pool\nname"}, ["pool \"pool\\nname\""]),
    ({"ansible_os_family": "Debian", "hypervisor_bridge": "br0\n"}, ["bridge \"br0\\n\""]),
], ids=["OS family", "aarch64", "ppc64le", "bridge and network", "neither", "relative pool path", "local connection, remote URI",
        "bridge path", "network XML", "non-ASCII digit", "pool newline", "trailing line feed"])
def test_what_the_role_cannot_do_fails_before_any_change_naming_why(tmp_path, variables, words):
    completed, selection = select(tmp_path, **variables)
    assert completed.returncode != 0 and selection is None
    for word in words:
        assert word in completed.stdout, completed.stdout


def test_a_host_with_every_package_installed_updates_no_package_index_and_installs_nothing(tmp_path):
    """The lab's hypervisors have no way to a mirror: a prepared host must not need one (issue 31 item 11)."""
    out = run_role_tasks(tmp_path, "hypervisor", "packages", {
        "hypervisor_package_manager": "apt", "hypervisor_package_list": ["dpkg", "python3"], "hypervisor_epel_package": "",
        "hypervisor_epel": True}, check=True)
    assert re.search(r"TASK \[egress_proxies.kvm.hypervisor : Install QEMU, libvirt and the modules' Python libraries "
                     r"\(apt\)\] \**\nskipping: \[localhost\]", out), out


def test_prepare_yml_refuses_a_local_host_whose_uri_names_another_machine_before_installing(tmp_path):
    """inventories/example's nas1: ansible_connection local, qemu+ssh:// (issue 31 item 17). In check mode, for safety."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"hypervisors": {"hosts": {"nas1.home.example.net": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "egress_proxy_uri": "qemu+ssh://virt@nas1.home.example.net/system", "egress_proxy_bridge": "br0"}}}}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "build" / "collections"),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_NOCOLOR="true")
    completed = subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), "--check",
         str(REPO_ROOT / "playbooks" / "prepare.yml")], capture_output=True, text=True, check=False, env=env, timeout=120)
    assert completed.returncode != 0, completed.stdout
    assert "nas1.home.example.net is reached with ansible_connection local" in completed.stdout, completed.stdout
    assert "Install QEMU" not in completed.stdout, completed.stdout


def test_a_pid_directory_with_shell_syntax_stays_a_path(tmp_path):
    """hypervisor_pid_dir goes into the probe's shell command quoted: a value never runs as a command."""
    marker = tmp_path / "ran"
    out = run_role_tasks(tmp_path, "hypervisor", "daemons_pidfile", {
        "hypervisor_pid_dir": '%s/run"; touch %s; echo "' % (tmp_path, marker), "hypervisor_plan": []}, check=True)
    assert "ok: [localhost] => (item=virtlogd)" in out, out
    assert not marker.exists(), out
