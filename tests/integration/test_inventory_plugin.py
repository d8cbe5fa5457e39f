"""The kvm_proxies inventory plugin through ansible-inventory, on the lab's real libvirtd.

The plugin runs on the controller (the dev venv's Python and libvirt-python) and reads the lab
twice: once over qemu:///system and once over qemu+ssh through the test sshd, so the graph
shows the same fleet under two hypervisors, as it would for two hosts.
"""

import json
import os
import subprocess

import pytest

from tests.integration import proxy_fleet

pytestmark = pytest.mark.integration

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The collection link that tests/integration/conftest.py maintains, and the dev venv: the controller.
COLLECTIONS_DIR = os.path.join(REPO_ROOT, "build", "collections")
VENV_BIN = os.path.join(REPO_ROOT, ".venv", "bin")

PREFIX = "eptest-inv-"
UNREACHABLE = "qemu+ssh://root@127.0.0.1:1/system?no_verify=1"


fleet = proxy_fleet.fixture(PREFIX)


@pytest.fixture
def inventory(tmp_path):
    """inventory(config_text, *args, **env) -> CompletedProcess of ansible-inventory on that plugin config."""

    def run(config, *args, **extra_env):
        path = tmp_path / "lab.kvm_proxies.yml"
        path.write_text(config)
        env = dict(os.environ)
        env.update({
            "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS_DIR,
            "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
            "ANSIBLE_NOCOLOR": "true",
        })
        env.update(extra_env)
        return subprocess.run([os.path.join(VENV_BIN, "ansible-inventory"), "-i", str(path)] + list(args),
                              capture_output=True, text=True, timeout=300, check=False, env=env)

    return run


def config(lab, sshd, fleet, extra=""):
    return (
        "plugin: egress_proxies.kvm.kvm_proxies\n"
        "hypervisors:\n"
        "  - {name: lab, uri: '%s'}\n"
        "  - {name: lab-ssh, uri: '%s'}\n"
        "qualify_hostnames: true\n"
        "keyed_groups:\n"
        "  - {key: kvm_proxy_libvirt_state, prefix: libvirt}\n"
        "%s" % (lab.uri, sshd.uri, extra)
    )


def graph_children(graph_output, group):
    """Host names listed directly under ``@group:`` in ``ansible-inventory --graph`` output."""
    lines = graph_output.splitlines()
    for index, line in enumerate(lines):
        if line.strip() == "|--@%s:" % group:
            depth = line.index("|--")
            hosts = []
            for child in lines[index + 1:]:
                if "|--" not in child or child.index("|--") <= depth:
                    break
                name = child.split("|--", 1)[1]
                if not name.startswith("@"):
                    hosts.append(name)
            return sorted(hosts)
    raise AssertionError("group %s not in the graph:\n%s" % (group, graph_output))


def plain(value):
    """A --list value without ansible-core 2.19's marking of untrusted strings ({"__ansible_unsafe": ...})."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def ours(hosts, fleet):
    return sorted(host for host in hosts if host.startswith(fleet.prefix))


def test_graph_groups_the_proxies_by_hypervisor_state_and_owner(lab, sshd, fleet, inventory):
    completed = inventory(config(lab, sshd, fleet), "--graph")
    assert completed.returncode == 0, completed.stderr
    graph = completed.stdout
    run, off, old = PREFIX + "run", PREFIX + "off", PREFIX + "old"
    assert ours(graph_children(graph, "kvm_hypervisor_lab"), fleet) == sorted(m + ".lab" for m in (run, off, old))
    assert ours(graph_children(graph, "kvm_hypervisor_lab_ssh"), fleet) == sorted(m + ".lab-ssh" for m in (run, off, old))
    assert ours(graph_children(graph, "kvm_state_provisioning"), fleet) == [run + ".lab", run + ".lab-ssh"]
    assert ours(graph_children(graph, "kvm_state_stopped"), fleet) == sorted(m + h for m in (off, old) for h in (".lab", ".lab-ssh"))
    owner_one = "kvm_owner_" + fleet.owner_one.replace("-", "_")
    assert graph_children(graph, owner_one) == sorted(m + h for m in (old, run) for h in (".lab", ".lab-ssh"))
    assert ours(graph_children(graph, "libvirt_running"), fleet) == [run + ".lab", run + ".lab-ssh"]
    assert PREFIX + "hand" not in graph


def test_host_vars_and_the_owner_filter(lab, sshd, fleet, inventory):
    completed = inventory(config(lab, sshd, fleet, "uid: %s\n" % fleet.owner_two), "--list")
    assert completed.returncode == 0, completed.stderr
    listing = json.loads(completed.stdout)
    hostvars = plain(listing["_meta"]["hostvars"])
    assert sorted(hostvars) == [PREFIX + "off.lab", PREFIX + "off.lab-ssh"]
    off = hostvars[PREFIX + "off.lab-ssh"]
    assert off["kvm_proxy_id"] == "hosts/lab-ssh/domains/%soff" % PREFIX
    assert off["kvm_proxy_hypervisor"] == "lab-ssh"
    assert off["kvm_proxy_uri"] == sshd.uri
    assert (off["kvm_proxy_state"], off["kvm_proxy_uid"], off["kvm_proxy_autostart"]) == ("Stopped", fleet.owner_two, True)
    # No address: listed all the same, without ansible_host.
    assert "ansible_host" not in off and off["kvm_proxy_ip"] is None


def test_unreadable_hypervisor_warns_by_default_and_fails_with_strict(lab, sshd, fleet, inventory):
    unreachable = "  - {name: gone, uri: '%s'}\n" % UNREACHABLE
    base = config(lab, sshd, fleet).replace("qualify_hostnames", unreachable + "qualify_hostnames")

    completed = inventory(base, "--graph")
    assert completed.returncode == 0, completed.stderr
    assert "could not read hypervisor gone" in completed.stderr
    assert ours(graph_children(completed.stdout, "kvm_hypervisor_lab"), fleet)

    # strict fails the source; any_unparsed_is_failed makes ansible stop there instead of going on
    # with the other sources, which is what a clean-up job wants.
    completed = inventory(base + "strict: true\n", "--graph", ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="true")
    assert completed.returncode != 0
    assert "could not read hypervisor gone" in completed.stderr
    assert "127.0.0.1" in completed.stderr
