"""playbooks/prepare.yml (the hypervisor role) on a host that starts with nothing of QEMU or libvirt.

The lab's bare host (tests/lab/bare_host.py, docs/dev/lab.md "The bare host") is a Debian 12 minbase root
with openssh-server, python3 and iproute2 only, run as a lab hypervisor of its own: own network, mount and
UTS namespaces, own sshd, bridge br0 and LAN. Over SSH, prepare.yml installs and starts everything; then the
egress_proxy role deploys a proxy onto it, which boots and forwards a request from the bare host's LAN. While
the guest configures squid, a second run and a check-mode run change nothing, and a run asking for a libvirt
network instead of the bridge defines and starts it.

The lab's own hypervisors, prepared by `scripts/lab up`, take prepare.yml on the inventory deploy.yml uses
(inventories/lab, which sets only the egress_proxy role's variables): it changes nothing.
"""

import os
import re
import shutil
import subprocess
import time

import pytest

from tests.lab import bare_host, config
from tests.lab import lab as lab_control
from tests.lab.fleet_runs import PLAYBOOKS, REPO_ROOT, VENV_BIN, Fleet, FleetRun

# The bare host is a host of its own, which no other test touches: its test runs in the machine's lane (conftest.py),
# beside the lab's hypervisors' tests; the test of those (fleet_lab) is in their lane.
pytestmark = pytest.mark.integration
pytest_plugins = ["tests.integration.fleet_fixtures"]

HOST = config.BARE_HOST_NAME
BARE_HOSTS = os.path.join(REPO_ROOT, "inventories", "bare", "hosts.yml")
PROXY = "eptest-bare-proxy"
KVM_WARNING = "Warn that KVM is not usable"
NETWORK_VARS = {"hypervisor_bridge": "", "hypervisor_network": "eptest-bare-net", "hypervisor_network_bridge": "virbr-eptest",
                "hypervisor_network_forward": "isolated"}


class BareHost(Fleet):
    """Fleet's runs and role variables, on an inventory of the bare host alone."""

    def __init__(self, tmp_path):
        super().__init__([bare_host.SPEC, bare_host.SPEC], tmp_path)

    def inventory(self, group_vars=None, host_vars=None):
        path = super().inventory(group_vars, host_vars)
        shutil.copyfile(BARE_HOSTS, os.path.join(path, "hosts.yml"))
        return path

    def ssh(self, spec, *argv):
        """A command on the bare host through its sshd, its host key checked against its own known_hosts, as
        inventories/bare reaches it: the lab's ssh_config, which tests/lab/lab-ssh.sh reads, is rewritten without the
        bare host by the other lane's `scripts/lab up`."""
        return subprocess.run(
            ["ssh", "-F", "/dev/null", "-o", "UserKnownHostsFile=" + bare_host.known_hosts(), "-o", "GlobalKnownHostsFile=/dev/null",
             "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-i", config.SSH_KEY,
             "-p", str(config.SSH_PORT), "%s@%s" % (config.SSH_USER, spec.address)] + list(argv),
            capture_output=True, text=True, timeout=120, check=False)

    def check(self, playbook, inventory, timeout=600):
        """ansible-playbook --check PLAYBOOK -> FleetRun (Fleet.playbook runs for real only)."""
        argv = [os.path.join(VENV_BIN, "ansible-playbook"), "--check", "-i", inventory, os.path.join(PLAYBOOKS, playbook)]
        env = dict(self._env(str(self.tmp_path / "timeline-check.jsonl")), ANSIBLE_STDOUT_CALLBACK="json_results")
        started = time.monotonic()
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, env=env, cwd=REPO_ROOT)
        return FleetRun(completed, [], time.monotonic() - started)


@pytest.fixture
def bare(tmp_path):
    """The bare host up on a fresh copy of its root (after the lab), removed afterwards."""
    if os.geteuid() != 0:
        pytest.fail("the bare host needs network namespaces and mounts; run as root")
    lab_control.up()
    bare_host.down()
    bare_host.up()
    try:
        yield BareHost(tmp_path)
    finally:
        bare_host.down()


def changed_tasks(run):
    return sorted({task["task"]["name"] for play in run.result["plays"] for task in play["tasks"]
                   if task["hosts"].get(HOST, {}).get("changed")})


def fetch(proxy, url):
    """(HTTP status, X-Egress-Proxy) of a request from the bare host's LAN through proxy."""
    completed = subprocess.run(
        ["ip", "netns", "exec", bare_host.SPEC.lan_netns, "curl", "-sS", "--max-time", "20", "-o", "/dev/null",
         "-w", "%{http_code} %header{x-egress-proxy}", "-x", proxy, url], capture_output=True, text=True, check=False)
    status, header = (completed.stdout.split(" ", 1) + [""])[:2]
    return int(status or 0), header


@pytest.mark.boot
def test_prepare_makes_a_bare_host_a_hypervisor_that_runs_a_proxy_forwarding_from_its_lan(bare):
    # The lab's origin server on the bare host's LAN.
    lan_origin = bare_host.SPEC.origin_url(bare_host.SPEC.lan_address)
    inventory = bare.inventory({})
    absent = bare.ssh(bare_host.SPEC, "command -v virsh qemu-system-x86_64 libvirtd")
    assert absent.returncode not in (0, 255) and absent.stdout == "", absent  # 255: ssh itself failed

    prepared = bare.playbook("prepare.yml", inventory)
    assert prepared.rc == 0, prepared
    changed = changed_tasks(prepared)
    for step in ("Install QEMU, libvirt and the modules' Python libraries (apt)",
                 "Start the libvirt daemons that do not run (pid files)", "Define the storage pool",
                 "Build the storage pool (its directory)", "Start the storage pool", "Autostart the storage pool"):
        assert any(name.endswith(step) for name in changed), (step, changed)
    # The bare host has no /dev/kvm: a warning naming the reason, not a failure.
    (warning,) = prepared.results(KVM_WARNING, HOST)
    assert "/dev/kvm is missing" in warning["msg"] and "egress_proxy_virt_type to qemu" in warning["msg"], warning
    (listed,) = prepared.results("List the proxies on the host with kvm_proxy_info", HOST)
    assert listed["proxies"] == [], listed

    image = "http://127.0.0.1:8642/"  # the bare host's own mirror of the lab's images
    deploy_vars = bare.role_vars(
        egress_proxy_image={"name": "debian-12-egress", "url": image + config.GUEST_IMAGE,
                            "checksum": "sha256:" + image + config.SHA256SUMS},
        egress_proxy_memory_mib=512, egress_proxy_disk_size_gb=4, egress_proxy_wait_for_ip=True,
        egress_proxy_uid="eptest-bare", egress_proxy_allowed_clients=[bare_host.SPEC.lan_cidr],
        egress_proxy_instances=[{"name": PROXY}])
    deployed = bare.playbook("deploy.yml", bare.inventory(deploy_vars), timeout=1500)
    assert deployed.rc == 0, deployed
    (recorded,) = deployed.results("Record the proxies of this hypervisor in egress_proxy_proxies", HOST)
    (proxy,) = recorded["ansible_facts"]["egress_proxy_proxies"]
    assert proxy["state"] == "Running" and proxy["ip"].startswith(bare_host.SPEC.lan_prefix + "."), proxy

    # While cloud-init configures squid in the guest: a second run and a check run on the prepared host,
    # now running a proxy, change nothing; then a run that asks for a libvirt network instead of the bridge.
    again = bare.playbook("prepare.yml", inventory)
    assert again.rc == 0 and again.stats(HOST)["changed"] == 0, (changed_tasks(again), again)
    checked = bare.check("prepare.yml", inventory)
    assert checked.rc == 0 and checked.stats(HOST)["changed"] == 0, (changed_tasks(checked), checked)
    (planned,) = checked.results("Report what a real run would change", HOST)
    assert planned["msg"] == [], planned
    (relisted,) = checked.results("List the proxies on the host with kvm_proxy_info", HOST)
    assert [listed["name"] for listed in relisted["proxies"]] == [PROXY], relisted
    # A libvirt network instead of the bridge: its DHCP server installed, the network defined, started, autostarted.
    networked = bare.playbook("prepare.yml", bare.inventory(NETWORK_VARS))
    assert networked.rc == 0, networked
    for step in ("Define the libvirt network", "Start the libvirt network", "Autostart the libvirt network"):
        assert any(name.endswith(step) for name in changed_tasks(networked)), (step, changed_tasks(networked))
    info = bare.ssh(bare_host.SPEC, "virsh", "-c", config.LIBVIRT_URI, "net-info", NETWORK_VARS["hypervisor_network"]).stdout
    assert re.search(r"(?m)^Active:\s+yes$", info) and re.search(r"(?m)^Autostart:\s+yes$", info), info

    # squid answers once cloud-init has configured it, a while after the address.
    address, deadline = "http://%s:3128" % proxy["ip"], time.monotonic() + 600
    answer = fetch(address, lan_origin)
    while answer != (200, PROXY) and time.monotonic() < deadline:
        time.sleep(5)
        answer = fetch(address, lan_origin)
    assert answer == (200, PROXY)
    print("prepared in %.0f s (again %.0f s, check %.0f s), deployed in %.0f s; slowest deploy tasks: %s" % (
        prepared.seconds, again.seconds, checked.seconds, deployed.seconds, sorted(
            ((round(end - start), task) for task, (start, end) in
             ((record["task"], (record["start"], record["end"])) for record in deployed.timeline)), reverse=True)[:3]))


def test_prepare_on_the_labs_deploy_inventory_changes_nothing_on_its_prepared_hypervisors(fleet_lab, tmp_path):
    """prepare.yml -i inventories/lab, as deploy.yml takes it: the role's pool, bridge and URI come from the egress_proxy
    role's variables (issue 31 item 11), a check run and a real run change nothing, and nothing is installed."""
    lab = Fleet(fleet_lab, tmp_path)
    command = ["ansible-playbook", "-i", "inventories/lab", "playbooks/prepare.yml"]
    for words in (command + ["--check"], command):
        run = lab.command(REPO_ROOT, words, timeout=600)
        assert run.rc == 0, run
        for host in ("lab-hv1", "lab-hv2"):
            assert run.stats(host)["changed"] == 0, (host, run)
            (ready,) = run.results("Report the prepared host", host)
            assert "%s is ready: libvirt answers on qemu:///system, pool egress, bridge br2," % host in ready["msg"], ready
            (install,) = run.results("Install QEMU, libvirt and the modules' Python libraries (apt)", host)
            assert install.get("skipped"), install
    print("prepare.yml on inventories/lab: %.0f s" % run.seconds)
