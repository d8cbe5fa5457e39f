"""The hypervisor role's decisions for OS families and hosts the lab has not (RHEL: never run here).

roles/hypervisor/tasks/select.yml alone, through ansible-playbook on localhost, with the facts of the
host it would run on given as extra vars: the package manager, the packages and the daemon mode it picks.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: egress_proxies.kvm.hypervisor
        tasks_from: select
    - ansible.builtin.copy:
        dest: "{{ selection_out }}"
        content: "{{ {'manager': hypervisor_package_manager, 'packages': hypervisor_package_list,
                      'daemons': hypervisor_daemon_mode_selected} | to_json }}"
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
    completed, selection = select(tmp_path, ansible_os_family="RedHat")
    assert completed.returncode == 0, completed.stdout
    assert selection == {"manager": "dnf", "packages": RHEL_PACKAGES, "daemons": "systemd"}


def test_rhel_with_a_libvirt_network_adds_its_driver_and_dhcp_server(tmp_path):
    completed, selection = select(tmp_path, ansible_os_family="RedHat", hypervisor_bridge="", hypervisor_network="egress")
    assert completed.returncode == 0, completed.stdout
    assert selection["packages"] == RHEL_PACKAGES + ["libvirt-daemon-driver-network", "dnsmasq"]


def test_debian_on_arm_without_systemd_picks_arm_qemu_and_pid_files(tmp_path):
    completed, selection = select(tmp_path, ansible_os_family="Debian", ansible_architecture="aarch64",
                                  ansible_service_mgr="sysvinit")
    assert completed.returncode == 0, completed.stdout
    assert selection == {"manager": "apt", "packages": ["qemu-system-arm"] + DEBIAN_COMMON, "daemons": "pidfile"}


def test_the_daemon_mode_given_wins_over_the_service_manager(tmp_path):
    completed, selection = select(tmp_path, ansible_os_family="Debian", hypervisor_daemon_mode="pidfile")
    assert completed.returncode == 0, completed.stdout
    assert selection["daemons"] == "pidfile"


@pytest.mark.parametrize("variables, words", [
    ({"ansible_os_family": "Suse"}, ["Suse on x86_64 is not supported", "Debian", "RedHat"]),
    ({"ansible_os_family": "Debian", "hypervisor_network": "egress"}, ["set exactly one of hypervisor_bridge"]),
    ({"ansible_os_family": "Debian", "hypervisor_pool_path": "pool"}, ["hypervisor_pool_path must be absolute"]),
])
def test_what_the_role_cannot_do_fails_before_any_change_naming_why(tmp_path, variables, words):
    completed, selection = select(tmp_path, **variables)
    assert completed.returncode != 0 and selection is None
    for word in words:
        assert word in completed.stdout, completed.stdout
