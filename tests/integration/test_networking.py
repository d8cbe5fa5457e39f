"""Egress networking on a booted guest (issue 15): static addresses, an inside and an outside NIC, the egress address proven.

One two-NIC proxy on lab-hv1 (docs/dev/lab.md), the suite's one booted role proxy: its inside NIC on br0
with a static address on the LAN, its outside NIC on br1 with a static address on the outside segment,
where the origin server (tests/lab/origin.py) reports the peer it saw and the headers it got. The role
deploys it; verify.yml, run on lab-hv1 and on a client in the LAN at once, proves its egress address (curl
in the LAN namespace) and, with curl on the client itself, names the proxy, the expected and the seen
address when they differ; squid forwards for the
allowed client only, listens only inside, and passes nothing of the inside on; a second run changes
nothing, and a new static address replaces it. Bad static addresses and NIC layouts fail before anything
is touched.
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
# A host whose modules run in lab-hv1's LAN namespace, for verify.yml's path without egress_proxy_verify_netns.
LAN_CLIENT = "lan-client"
CONVERGE_TASK = "Converge the proxies of this hypervisor"
RECORD_TASK = "Record the proxies of this hypervisor in egress_proxy_proxies"
REPORT_TASK = "Report what each proxy answered"
CHECK_ORIGIN_TASK = "Check the address and the headers the origin saw from each proxy"
CURL_CONNECT_FAILED = 7  # curl: the connection was refused
# The last byte of the proxy's addresses: inside on the LAN, outside on the outside segment.
PROXY_HOST = 70
# A second address of the LAN namespace, outside the proxy's allowed_clients.
OUTSIDER_HOST = 2


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


@pytest.fixture
def lan_outsider(net_fleet):
    """A second address in lab-hv1's LAN namespace for the test, so a client can come from outside allowed_clients."""
    spec = net_fleet.hv1
    address = "%s.%d" % (spec.lan_prefix, OUTSIDER_HOST)
    device = ["ip", "-n", spec.lan_netns, "addr"]
    subprocess.run(device + ["add", address + "/24", "dev", config.LAN_IFACE], check=True)
    try:
        yield address
    finally:
        subprocess.run(device + ["del", address + "/24", "dev", config.LAN_IFACE], check=False)


def through_proxy(netns, proxy, url, source=None):
    """(curl's exit code, HTTP status, X-Egress-Proxy, the origin's JSON or None): url through proxy from netns."""
    argv = ["ip", "netns", "exec", netns, "curl", "--silent", "--max-time", "20", "--proxy", proxy,
            "--write-out", "%{stderr}%{http_code} %header{x-egress-proxy}", url]
    if source is not None:
        argv[5:5] = ["--interface", source]
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    status, header = (completed.stderr.split(" ", 1) + [""])[:2]
    body = json.loads(completed.stdout) if completed.returncode == 0 and status == "200" else None
    return completed.returncode, int(status or 0), header, body


def two_nic_vars(net_fleet, inside, outside):
    spec = net_fleet.hv1
    image = "http://127.0.0.1:8642/"
    return net_fleet.role_vars(
        egress_proxy_image={"name": "debian-12-egress", "url": image + config.GUEST_IMAGE,
                            "checksum": "sha256:" + image + config.SHA256SUMS},
        egress_proxy_memory_mib=512, egress_proxy_disk_size_gb=4, egress_proxy_wait_for_ip=True,
        egress_proxy_uid="eptest-net", egress_proxy_allowed_clients=[spec.lan_address + "/32"],
        egress_proxy_verify_netns=spec.lan_netns, egress_proxy_verify_url=spec.origin_url(spec.outside_address),
        egress_proxy_verify_origin=True,
        egress_proxy_outside={"bridge": config.HV_OUTSIDE_BRIDGE, "gateway": spec.outside_address},
        egress_proxy_instances=[{"name": PROXY, "address": inside, "dns": [spec.lan_address], "search": ["lab"],
                                 "outside": {"address": outside}}])


def deploy(net_fleet, inventory):
    """deploy.yml on lab-hv1: (kvm_proxy_set's result, the proxy the role recorded)."""
    run = net_fleet.playbook("deploy.yml", inventory, extra_vars={"egress_proxy_hosts": HV1}, timeout=1500)
    assert run.rc == 0, run
    (converged,) = run.results(CONVERGE_TASK, HV1)
    (recorded,) = run.results(RECORD_TASK, HV1)
    (proxy,) = recorded["ansible_facts"]["egress_proxy_proxies"]
    return converged, proxy


def verified(run, host):
    """What verify.yml on host reported of the proxy, and what its origin check said (None: it did not get there)."""
    reported = run.results(REPORT_TASK, host)
    checked = run.results(CHECK_ORIGIN_TASK, host)
    return reported[0]["results"][0]["msg"] if reported else None, checked[0]["results"][0]["msg"] if checked else None


def with_lan_client(net_fleet, variables, expected_outside):
    """An inventory of lab-hv1 and LAN_CLIENT: connection local, modules on /usr/bin/python3 in lab-hv1's LAN namespace.

    From there verify.yml's curl (run by the command module, so in that namespace) reaches the proxy, and kvm_proxy_info reaches lab-hv1's
    libvirtd through its socket (a Unix socket crosses network namespaces). LAN_CLIENT expects the proxy's
    egress address to be expected_outside.
    """
    spec = net_fleet.hv1
    python = net_fleet.tmp_path / "lan-python"
    python.write_text('#!/bin/sh\nexec ip netns exec %s /usr/bin/python3 "$@"\n' % spec.lan_netns)
    python.chmod(0o755)
    socket = "%s/run-libvirt/libvirt-sock" % spec.run_dir
    inventory = net_fleet.inventory(variables, host_vars={LAN_CLIENT: {
        "ansible_connection": "local", "ansible_python_interpreter": str(python),
        "egress_proxy_uri": "qemu+unix:///system?socket=" + socket, "egress_proxy_host": HV1,
        "egress_proxy_verify_netns": "",
        "egress_proxy_instances": [dict(variables["egress_proxy_instances"][0], outside={"address": expected_outside})]}})
    with open("%s/lan-client.yml" % inventory, "w") as handle:
        handle.write("hypervisors:\n  hosts:\n    %s:\n" % LAN_CLIENT)
    return inventory


@pytest.mark.boot
def test_a_two_nic_proxy_with_static_addresses_egresses_from_its_outside_address(net_fleet, lan_outsider):
    spec = net_fleet.hv1
    inside, outside = "%s.%d/24" % (spec.lan_prefix, PROXY_HOST), "%s.%d/24" % (spec.outside_prefix, PROXY_HOST)
    elsewhere = "%s.%d/24" % (spec.outside_prefix, PROXY_HOST + 1)
    origin = spec.origin_url(spec.outside_address)
    variables = two_nic_vars(net_fleet, inside, outside)
    inventory = with_lan_client(net_fleet, variables, elsewhere)

    converged, proxy = deploy(net_fleet, inventory)
    assert converged["changed"] is True and proxy["state"] == "Running", proxy
    # Exactly the static addresses, as the guest agent reports them on each NIC.
    assert [(nic["role"], nic["bridge"], nic["ipv4"], nic["egress"]) for nic in proxy["interfaces"]] == [
        ("inside", config.HV_BRIDGE, host(inside), False), ("outside", config.HV_OUTSIDE_BRIDGE, host(outside), True)]
    assert proxy["ip"] == host(inside) and proxy["egress_ip"] == host(outside), proxy

    # verify.yml on both hosts in one run; each waits for squid (cloud-init configures it after the addresses
    # are up). lab-hv1, with curl in its LAN namespace, proves the egress address by the peer the origin saw.
    run = net_fleet.playbook("verify.yml", inventory, extra_vars={"egress_proxy_hosts": HV1 + "," + LAN_CLIENT},
                             timeout=900)
    assert run.failures(HV1) == [], run
    reported, checked = verified(run, HV1)
    assert "HTTP 200, X-Egress-Proxy %s" % PROXY in reported, reported
    assert "the origin saw %s (the egress address)" % host(outside) in checked, checked
    # LAN_CLIENT, with curl on the host itself and told to expect another egress address, reads the origin's JSON
    # and fails, naming the proxy, the expected and the seen address.
    assert run.rc != 0, run
    reported, _checked = verified(run, LAN_CLIENT)
    assert "HTTP 200, X-Egress-Proxy %s" % PROXY in reported, reported
    assert ("%s on %s: the origin saw the request come from %s, expected the proxy's egress address %s" % (
        PROXY, LAN_CLIENT, host(outside), host(elsewhere))) in json.dumps(run.failures(LAN_CLIENT)), run

    # squid: the allowed client is forwarded, from the outside address, with nothing of the inside passed on.
    code, status, header, seen = through_proxy(spec.lan_netns, "http://%s:3128" % host(inside), origin)
    assert (code, status, header) == (0, 200, PROXY), (code, status, header)
    assert seen["peer"] == host(outside), seen
    assert not {"via", "x-forwarded-for"} & {name.lower() for name in seen["headers"]}, seen["headers"]
    # A client on the LAN outside allowed_clients is refused.
    code, status, _header, _seen = through_proxy(spec.lan_netns, "http://%s:3128" % host(inside), origin, lan_outsider)
    assert (code, status) == (0, 403), "%s through the proxy: curl exit %d, HTTP %d" % (lan_outsider, code, status)
    # A request arriving on the outside NIC finds no listener.
    code, _status, _header, _seen = through_proxy(spec.outside_netns, "http://%s:3128" % host(outside), origin)
    assert code == CURL_CONNECT_FAILED, "squid answered on the outside address %s (curl exit %d)" % (host(outside), code)

    again, kept = deploy(net_fleet, inventory)
    assert again["changed"] is False and [p["outcome"] for p in again["proxies"]] == ["unchanged"], again

    # A new static address is drift: the proxy is replaced (not waited for: its boot proves nothing new).
    moved = "%s.%d/24" % (spec.lan_prefix, PROXY_HOST + 1)
    replaced, proxy = deploy(net_fleet, net_fleet.inventory(dict(two_nic_vars(net_fleet, moved, outside),
                                                                 egress_proxy_wait_for_ip=False)))
    assert [p["outcome"] for p in replaced["proxies"]] == ["replaced"], replaced
    assert proxy["created_at"] != kept["created_at"], (proxy, kept)


@pytest.mark.parametrize("instances, message", [
    ([{"name": PROXY, "address": "198.18.11.80/24", "gateway": "198.18.12.1"}],
     "proxies[0] (%s): interfaces[0]: gateway 198.18.12.1 is outside the prefix" % PROXY),
    # The role's squid check reads the inside address first (squid listens on it), naming the proxy.
    ([{"name": PROXY, "address": "198.18.11.300/24"}],
     "%s on %s are not usable: address '198.18.11.300/24' is not an IPv4" % (PROXY, HV1)),
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
