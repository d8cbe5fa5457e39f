"""Egress networking on a booted guest (issue 15): static addresses, an inside and an outside NIC, the egress address proven.

One two-NIC proxy on lab-hv1 (docs/dev/lab.md): its inside NIC on br0 with a static address on the LAN,
its outside NIC on br1 with a static address on the outside segment, where the origin server
(tests/lab/origin.py) reports the peer it saw and the headers it got. The role deploys it, verify.yml
proves its egress address, a second run changes nothing, and a new static address replaces it: two
boots under TCG in all.
"""

import json
import subprocess

import pytest

from tests.lab import config, hypervisors

pytest_plugins = ["tests.integration.fleet_fixtures"]
pytestmark = pytest.mark.integration

PREFIX = "eptest-net-"
PROXY = PREFIX + "1"
HV1 = "lab-hv1"
CONVERGE_TASK = "Converge the proxies of this hypervisor"
RECORD_TASK = "Record the proxies of this hypervisor in egress_proxy_proxies"
CHECK_ORIGIN_TASK = "Check the address and the headers the origin saw from each proxy"
CURL_CONNECT_FAILED = 7  # curl: the connection was refused


def remove_test_domains(spec):
    """Every eptest-net- domain of the hypervisor gone, with its overlay and seed."""
    names = [name for name in hypervisors.virsh(spec, "list", "--all", "--name").stdout.split() if name.startswith(PREFIX)]
    for name in names:
        hypervisors.virsh(spec, "destroy", name, check=False)
        hypervisors.virsh(spec, "undefine", name, "--managed-save", "--snapshots-metadata", "--nvram")
    hypervisors.virsh(spec, "pool-refresh", config.HV_POOL_NAME)
    for volume in hypervisors.virsh(spec, "vol-list", config.HV_POOL_NAME).stdout.split()[0::2]:
        if volume.startswith(PREFIX):
            hypervisors.virsh(spec, "vol-delete", volume, "--pool", config.HV_POOL_NAME)


@pytest.fixture
def net_fleet(hv_fleet):
    remove_test_domains(hv_fleet.hv1)
    try:
        yield hv_fleet
    finally:
        remove_test_domains(hv_fleet.hv1)


def host(address):
    return address.split("/")[0]


def through_proxy(netns, proxy, url):
    """(curl's exit code, the origin's JSON or None) for url fetched through proxy from network namespace netns."""
    completed = subprocess.run(["ip", "netns", "exec", netns, "curl", "--silent", "--max-time", "20", "--proxy", proxy, url],
                               capture_output=True, text=True, timeout=60, check=False)
    return completed.returncode, json.loads(completed.stdout) if completed.returncode == 0 else None


def two_nic_vars(net_fleet, inside):
    spec = net_fleet.hv1
    image = "http://127.0.0.1:8642/"
    return net_fleet.role_vars(
        egress_proxy_image={"name": "debian-12-egress", "url": image + config.GUEST_IMAGE,
                            "checksum": "sha256:" + image + config.SHA256SUMS},
        egress_proxy_memory_mib=512, egress_proxy_disk_size_gb=4, egress_proxy_wait_for_ip=True,
        egress_proxy_uid="eptest-net", egress_proxy_allowed_clients=[spec.lan_cidr],
        egress_proxy_verify_netns=spec.lan_netns, egress_proxy_verify_url=spec.origin_url(spec.outside_address),
        egress_proxy_verify_origin=True,
        egress_proxy_outside={"bridge": config.HV_OUTSIDE_BRIDGE, "gateway": spec.outside_address},
        egress_proxy_instances=[{"name": PROXY, "address": inside, "dns": [spec.lan_address], "search": ["lab"],
                                 "outside": {"address": spec.outside_prefix + ".70/24"}}])


def deploy(net_fleet, inside):
    inventory = net_fleet.inventory(two_nic_vars(net_fleet, inside))
    run = net_fleet.playbook("deploy.yml", inventory, extra_vars={"egress_proxy_hosts": HV1}, timeout=1500)
    assert run.rc == 0, run
    (converged,) = run.results(CONVERGE_TASK, HV1)
    (recorded,) = run.results(RECORD_TASK, HV1)
    (proxy,) = recorded["ansible_facts"]["egress_proxy_proxies"]
    return inventory, converged, proxy


def verify(net_fleet, inventory, egress):
    """verify.yml waits for squid to answer (cloud-init configures it after the addresses are up) and proves the egress address."""
    verified = net_fleet.playbook("verify.yml", inventory, extra_vars={"egress_proxy_hosts": HV1}, timeout=900)
    assert verified.rc == 0, verified
    (checked,) = verified.results(CHECK_ORIGIN_TASK, HV1)
    assert "the origin saw %s (the egress address)" % egress in checked["results"][0]["msg"], checked


@pytest.mark.boot
def test_a_two_nic_proxy_with_static_addresses_egresses_from_its_outside_address(net_fleet):
    spec = net_fleet.hv1
    inside, outside = spec.lan_prefix + ".70/24", spec.outside_prefix + ".70/24"
    origin = spec.origin_url(spec.outside_address)

    inventory, converged, proxy = deploy(net_fleet, inside)
    assert converged["changed"] is True and proxy["state"] == "Running", proxy
    # Exactly the static addresses, as the guest agent reports them on each NIC.
    assert [(nic["role"], nic["bridge"], nic["ipv4"], nic["egress"]) for nic in proxy["interfaces"]] == [
        ("inside", config.HV_BRIDGE, host(inside), False), ("outside", config.HV_OUTSIDE_BRIDGE, host(outside), True)]
    assert proxy["ip"] == host(inside) and proxy["egress_ip"] == host(outside)

    verify(net_fleet, inventory, host(outside))

    # From the inside client, through the inside address: the origin sees the outside address, nothing of the inside.
    code, seen = through_proxy(spec.lan_netns, "http://%s:3128" % host(inside), origin)
    assert code == 0 and seen["peer"] == host(outside), seen
    assert not {"via", "x-forwarded-for"} & {name.lower() for name in seen["headers"]}, seen["headers"]
    # A request arriving on the outside NIC finds no listener.
    code, _seen = through_proxy(spec.outside_netns, "http://%s:3128" % host(outside), origin)
    assert code == CURL_CONNECT_FAILED

    _inventory, again, proxy = deploy(net_fleet, inside)
    assert again["changed"] is False and [p["outcome"] for p in again["proxies"]] == ["unchanged"], again

    moved = spec.lan_prefix + ".71/24"
    inventory, replaced, proxy = deploy(net_fleet, moved)
    assert [p["outcome"] for p in replaced["proxies"]] == ["replaced"], replaced
    assert proxy["ip"] == host(moved) and proxy["egress_ip"] == host(outside), proxy
    verify(net_fleet, inventory, host(outside))


@pytest.mark.parametrize("instances, message", [
    ([{"name": PROXY, "address": "198.18.11.80/24", "gateway": "198.18.12.1"}],
     "proxies[0] (%s): interfaces[0]: gateway 198.18.12.1 is outside the prefix" % PROXY),
    ([{"name": PROXY, "address": "198.18.11.300/24"}], "interfaces[0]: address '198.18.11.300/24' is not an IPv4"),
    ([{"name": PROXY, "address": "198.18.11.80/24"}, {"name": PREFIX + "2", "address": "198.18.11.80/24"}],
     "have one static address: %s address 198.18.11.80, %s2 address 198.18.11.80" % (PROXY, PREFIX)),
    ([{"name": PROXY, "outside": {"bridge": config.HV_OUTSIDE_BRIDGE, "address": "198.18.21.80/24"}}],
     "address: the inside NIC needs a static address"),
])
def test_bad_addresses_fail_before_anything_naming_proxy_and_field(net_fleet, instances, message):
    inventory = net_fleet.inventory(net_fleet.role_vars(egress_proxy_uid="eptest-net", egress_proxy_instances=instances))
    run = net_fleet.playbook("deploy.yml", inventory, extra_vars={"egress_proxy_hosts": HV1})
    assert run.rc != 0 and message in json.dumps(run.failures(HV1)), run
    assert not run.ran(CONVERGE_TASK)
    assert not [name for name in hypervisors.virsh(net_fleet.hv1, "list", "--all", "--name").stdout.split()
                if name.startswith(PREFIX)]
