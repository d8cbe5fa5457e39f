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

The same proxy runs with an egress policy and proxy users (issue 26): allowed_destinations the lab's domain by
name and the outside segment by CIDR, one address of that segment denied, internal destinations refused (the
default), one user. From the LAN, with the user's credentials, an allowed name and an allowed address are
forwarded from the egress address; a name not allowed, the denied address, the hypervisor's management address,
the metadata address, the LAN's origin, and rebind.lab (allowed by name, resolving to the LAN) get squid's 403 and
reach no origin; CONNECT to a port that is not TLS's is refused; no credentials and a wrong password get 407.
Names of two addresses, one of them the allowed outside origin, are refused with GET and CONNECT whatever order DNS
gives (issue 40 item 0): mixed.lab (allowed by name) and internal-mixed.example with the LAN's origin (internal),
unlisted-mixed.example with a public address outside the allowlist, which the test gives the outside namespace with
an origin of its own; none of those origins gets the request.

The same proxy is dual-stack (issue 29): the LAN and the outside segment get an IPv6 prefix of the documentation
range (2001:db8::/32, inside the lab's namespaces), the proxy an IPv6 address on each NIC. A client comes over IPv6
on the inside; the origin sees the proxy's outside IPv6 address for an IPv6 destination and its outside IPv4 address
for an IPv4 one.
verify.yml proves the refusal of egress_proxy_verify_denied_url and the 407, and fails when that URL is in fact
forwarded. The password is in neither the seed, the domain's XML, nor the output of deploy.yml and verify.yml at
-vvv (with --diff).

Profiles (issue 43): two users with profiles of their own, disjoint allowlists and egress addresses of their own on the
outside segment; exactly their two allowed pairs pass, each seen at the origin from its own address. A third user's
profile checks TLS server names: through a CONNECT to origin.lab:443 (a TLS origin the test starts on the outside
segment), a ClientHello naming origin.lab passes, one naming another server or none is refused, and the syslog line
says why; a CONNECT the profile refuses is closed unanswered, and squid goes on.
"""

import base64
import gzip
import json
import os
import secrets
import signal
import subprocess
import time
from collections import namedtuple

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import read_iso
from tests.integration.squid_netns import tls_answered, tls_server
from tests.lab import config, hypervisors, monitoring, origin
from tests.unit.role_templates import user_data_parts

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
CURL_CONNECT_ABORTED = 56  # curl: the proxy closed the connection before it answered the CONNECT
# The last byte of the proxy's addresses: inside on the LAN, outside on the outside segment.
PROXY_HOST = 70
# A second address of the LAN namespace, outside the proxy's allowed_clients.
OUTSIDER_HOST = 2
# A second address of the outside segment, inside allowed_destinations' CIDR, with an origin of its own: denied.
DENIED_HOST = 9
# The proxy's policy allows every name of the lab's domain (origin.lab, rebind.lab: docs/dev/lab.md).
LAB_DOMAIN = ".lab"
# Its one user; a password of this run's own, searched for where it must not be.
USER = "eptest-client"
PASSWORD = "eptest-pw:%s#Zq" % secrets.token_hex(8)
# Issue 43: two users, each with a profile of its own, whose allowlists are disjoint (the outside origin; the denied
# address's origin) and whose requests leave from egress addresses of their own on the outside segment.
PROFILE_USERS = {"eptest-ci": "ci-pw-%s" % secrets.token_hex(4), "eptest-ops": "ops-pw-%s" % secrets.token_hex(4)}
# Issue 43 item 3: a user whose profile allows the lab's domain by name and checks the TLS server names of its CONNECTs.
TLS_USER, TLS_PASSWORD = "eptest-tls", "tls-pw-%s" % secrets.token_hex(4)
PROFILE_EGRESS_HOSTS = {"eptest-ci": 80, "eptest-ops": 81}
CHECK_DENIED_TASK = "Check that each proxy refused egress_proxy_verify_denied_url"
CHECK_USERS_TASK = "Check that each proxy with users asked for credentials"
SQUID_REFUSED = "ERR_ACCESS_DENIED 0"
# Where the proxy's monitoring listens, in lab-hv1's LAN namespace at its LAN address (the one metrics client).
PROMETHEUS_PORT = 9090
SYSLOG_PORT = 5514
METRICS_PORT = 9301
# The shipped alert rules, loaded by the lab's Prometheus as an operator's would (its test is promtool's, in unit).
ALERT_RULES = os.path.join(hypervisors.REPO_ROOT, "roles", "egress_proxy", "files", "prometheus", "egress-proxy-alerts.yml")
SQUID_AUTH = "ERR_CACHE_ACCESS_DENIED 0"
# The IPv6 prefixes of lab-hv1's LAN and outside segment for the test: (network, the namespace's own address).
LAN6 = ("2001:db8:18:11::/64", "2001:db8:18:11::1")
OUTSIDE6 = ("2001:db8:18:21::/64", "2001:db8:18:21::1")


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
    # replace, not add, here and below: an address a run killed before its teardown left is taken over, not an error.
    subprocess.run(device + ["replace", address + "/24", "dev", config.LAN_IFACE], check=True)
    try:
        yield address
    finally:
        subprocess.run(device + ["del", address + "/24", "dev", config.LAN_IFACE], check=False)


@pytest.fixture
def ipv6_segments(net_fleet, tmp_path):
    """LAN6 and OUTSIDE6 on lab-hv1's LAN and outside namespaces (without duplicate address detection, which would
    hold each address back a second), and an origin server on the outside one."""
    spec = net_fleet.hv1
    added = [(spec.lan_netns, LAN6, config.LAN_IFACE), (spec.outside_netns, OUTSIDE6, config.OUTSIDE_IFACE)]
    for netns, (_network, address), iface in added:
        subprocess.run(["ip", "-n", netns, "addr", "replace", address + "/64", "dev", iface, "nodad"], check=True)
    pidfile, log = str(tmp_path / "origin6.pid"), str(tmp_path / "origin6.log")
    try:
        origin.ensure_origin(spec.outside_netns, OUTSIDE6[1], config.ORIGIN_PORT, pidfile, log, hypervisors.REPO_ROOT)
        yield
    finally:
        pid = origin.origin_pid(pidfile)
        if pid:
            os.kill(pid, signal.SIGTERM)
        for netns, (_network, address), iface in added:
            subprocess.run(["ip", "-n", netns, "addr", "del", address + "/64", "dev", iface], check=False)


def ipv6_host(network, last):
    """The address ``last`` (a number) of an IPv6 /64 network's text, with its prefix length."""
    return "%s%x/64" % (network.split("/")[0], last)


Answer = namedtuple("Answer", "code status proxy squid_error seen")


def through_proxy(netns, proxy, url, source=None, credentials=(USER, PASSWORD), tunnel=False):
    """url through proxy from netns -> Answer: curl's exit code, the HTTP status (of the CONNECT with tunnel), the
    headers X-Egress-Proxy and X-Squid-Error, the origin's JSON or None. credentials (name, password) go to curl on
    its stdin, None sends none."""
    argv = ["ip", "netns", "exec", netns, "curl", "--silent", "--max-time", "20", "--proxy", proxy, "--config", "-",
            "--write-out", "%{stderr}%{http_code}|%{http_connect}|%header{x-egress-proxy}|%header{x-squid-error}", url]
    if source is not None:
        argv[5:5] = ["--interface", source]
    if tunnel:
        argv[5:5] = ["--proxytunnel"]
    config_lines = "proxy-user = %s\n" % json.dumps("%s:%s" % credentials) if credentials else ""
    completed = subprocess.run(argv, input=config_lines, capture_output=True, text=True, timeout=60, check=False)
    status, connect, header, squid_error = (completed.stderr.rsplit("\n", 1)[-1].split("|", 3) + ["", "", ""])[:4]
    body = json.loads(completed.stdout) if completed.returncode == 0 and status == "200" else None
    return Answer(completed.returncode, int((connect if tunnel else status) or 0), header, squid_error, body)


def two_nic_vars(net_fleet, inside, outside, denied, file_sd, dual_stack=False):
    """The proxy's variables: its addresses, and a policy that allows the lab's names and the outside segment, denies
    the address denied on it, and asks for USER's credentials; verify.yml asks for the denied address's origin. Its
    metrics for the LAN's address alone, its scrape target written to file_sd, its access lines to the LAN's syslog.
    dual_stack: an IPv6 address on each NIC too, LAN6's namespace address a client, OUTSIDE6 a destination."""
    spec = net_fleet.hv1
    image = "http://127.0.0.1:8642/"
    variables = net_fleet.role_vars(
        egress_proxy_metrics_clients=[spec.lan_address + "/32"], egress_proxy_metrics_file_sd=file_sd,
        egress_proxy_syslog="%s:%d" % (spec.lan_address, SYSLOG_PORT),
        egress_proxy_image={"name": "debian-12-egress", "url": image + config.GUEST_IMAGE,
                            "checksum": "sha256:" + image + config.SHA256SUMS},
        egress_proxy_memory_mib=512, egress_proxy_disk_size_gb=4, egress_proxy_wait_for_ip=True,
        egress_proxy_uid="eptest-net", egress_proxy_allowed_clients=[spec.lan_address + "/32"],
        egress_proxy_verify_netns=spec.lan_netns, egress_proxy_verify_url=spec.origin_url(spec.outside_address),
        egress_proxy_verify_origin=True, egress_proxy_verify_denied_url=spec.origin_url(denied),
        egress_proxy_allowed_destinations=[LAB_DOMAIN, spec.outside_cidr], egress_proxy_denied_destinations=[denied],
        egress_proxy_users=[{"name": USER, "password": PASSWORD}] + [
            {"name": name, "password": password} for name, password in dict(PROFILE_USERS, **{TLS_USER: TLS_PASSWORD}).items()],
        egress_proxy_outside={"bridge": config.HV_OUTSIDE_BRIDGE, "gateway": spec.outside_address},
        egress_proxy_instances=[{"name": PROXY, "address": inside, "dns": [spec.lan_address], "search": ["lab"],
                                 "outside": {"address": outside}, "profiles": [
                                     {"name": "ci", "users": ["eptest-ci"], "allowed_destinations": [spec.outside_address],
                                      "egress_address": profile_egress(spec, "eptest-ci")},
                                     {"name": "ops", "users": ["eptest-ops"], "allowed_destinations": [denied],
                                      "egress_address": profile_egress(spec, "eptest-ops")},
                                     {"name": "tls", "users": [TLS_USER],
                                      "allowed_destinations": [LAB_DOMAIN, spec.outside_cidr], "tls_sni_check": True}]}])
    if dual_stack:
        (instance,) = variables["egress_proxy_instances"]
        instance.update(address6=ipv6_host(LAN6[0], PROXY_HOST), outside={
            "address": outside, "address6": ipv6_host(OUTSIDE6[0], PROXY_HOST), "gateway6": OUTSIDE6[1]})
        instance["profiles"][0].update(egress_address6=host(profile_egress(spec, "eptest-ci", 6)),
                                       allowed_destinations=[spec.outside_address, OUTSIDE6[1]])
        variables["egress_proxy_allowed_clients"] = variables["egress_proxy_allowed_clients"] + [LAN6[1] + "/128"]
        variables["egress_proxy_allowed_destinations"] = variables["egress_proxy_allowed_destinations"] + [OUTSIDE6[0]]
    return variables


def profile_egress(spec, user, version=4):
    """The egress address of ``user``'s profile on lab-hv1's outside segment (IPv6: with its prefix length)."""
    if version == 6:
        return ipv6_host(OUTSIDE6[0], PROFILE_EGRESS_HOSTS[user])
    return "%s.%d" % (spec.outside_prefix, PROFILE_EGRESS_HOSTS[user])


def deploy(net_fleet, inventory, options=()):
    """deploy.yml on lab-hv1: (kvm_proxy_set's result, the proxy the role recorded, the run)."""
    run = net_fleet.playbook("deploy.yml", inventory, extra_vars={"egress_proxy_hosts": HV1}, timeout=1500, options=options)
    assert run.rc == 0, run
    (converged,) = run.results(CONVERGE_TASK, HV1)
    (recorded,) = run.results(RECORD_TASK, HV1)
    (proxy,) = recorded["ansible_facts"]["egress_proxy_proxies"]
    return converged, proxy, run


def secret_forms():
    """The password as it must appear nowhere: clear, and in the Basic credentials that carry it."""
    return (PASSWORD, base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode())


def where_secret(texts):
    """The names of the texts ({name: str}) that hold the password in one of its forms."""
    return sorted(name for name, text in texts.items() if any(form in text for form in secret_forms()))


def seed_texts(spec, directory):
    """{name: text} of the proxy's seed volume as the hypervisor's pool holds it (virsh vol-download): the image, each
    file in it, each part of its user-data, and each file those write (decoded from base64 and gzip where they say so)."""
    hypervisors.virsh(spec, "pool-refresh", config.HV_POOL_NAME)
    volumes = [volume for volume in hypervisors.virsh(spec, "vol-list", config.HV_POOL_NAME).stdout.split()[0::2]
               if volume.startswith(PROXY) and volume.endswith(".iso")]
    assert volumes, "no seed volume of %s in pool %s" % (PROXY, config.HV_POOL_NAME)
    texts = {}
    for volume in volumes:
        path = os.path.join(str(directory), volume)
        hypervisors.virsh(spec, "vol-download", "--pool", config.HV_POOL_NAME, volume, path)
        with open(path, "rb") as handle:
            image = handle.read()
        texts[volume] = image.decode("latin-1")
        for name, data in read_iso(image).items():
            texts["%s: %s" % (volume, name)] = data.decode("utf-8", "replace")
            if name != "user-data":
                continue
            # The role's cloud-config, then the policy's files: parts in base64, each searched as written.
            documents = user_data_parts(data)
            for index, document in enumerate(documents):
                texts["%s: user-data part %d" % (volume, index)] = document.decode("utf-8", "replace")
            for entry in [entry for document in documents for entry in (yaml.safe_load(document) or {}).get("write_files", [])]:
                content, encoding = entry.get("content", ""), entry.get("encoding", "")
                if "b64" in encoding or "base64" in encoding:
                    content = base64.b64decode(content)
                    if "gz" in encoding:
                        content = gzip.decompress(content)
                    texts["%s: user-data: %s" % (volume, entry["path"])] = content.decode("utf-8", "replace")
    return texts


def verified(run, host):
    """What verify.yml on host reported of the proxy, and what its origin check said (None: it did not get there)."""
    reported = run.results(REPORT_TASK, host)
    checked = run.results(CHECK_ORIGIN_TASK, host)
    return reported[0]["results"][0]["msg"] if reported else None, checked[0]["results"][0]["msg"] if checked else None


def verify_as_pooled_over_ipv6(net_fleet, variables, inside, inside6, outside, outside6):
    """Issue 40 item 9, on the booted proxy: verify.yml with an inventory that gives the proxy no outside address (as
    for one of egress_proxy_outside.pool) proves the egress address its domain records, the IPv6 one for an IPv6
    origin; and refuses, before fetching anything, an origin on its inside network, IPv4 and IPv6."""
    spec = net_fleet.hv1
    (instance,) = variables["egress_proxy_instances"]
    inventory = net_fleet.inventory(dict(variables, egress_proxy_instances=[dict(instance, outside={})]))
    origin6 = "http://[%s]:%d/" % (OUTSIDE6[1], config.ORIGIN_PORT)
    run = net_fleet.playbook("verify.yml", inventory, timeout=600,
                             extra_vars={"egress_proxy_hosts": HV1, "egress_proxy_verify_url": origin6})
    assert run.rc == 0, run
    reported, checked = verified(run, HV1)
    assert "forwarded %s as %s: HTTP 200, X-Egress-Proxy %s" % (origin6, USER, PROXY) in reported, reported
    assert "the origin saw %s (the egress address)" % host(outside6) in checked, checked
    lan_urls = ((spec.origin_url(spec.lan_address), inside), ("http://[%s]:%d/" % (LAN6[1], config.ORIGIN_PORT), inside6))
    for url, network in lan_urls:
        refused = net_fleet.playbook("verify.yml", inventory, timeout=300,
                                     extra_vars={"egress_proxy_hosts": HV1, "egress_proxy_verify_url": url})
        assert refused.rc != 0 and refused.ran("Fetch the URL through each proxy, waiting for it to answer") == [], refused
        assert ("%s on %s has an outside NIC (%s, %s): its squid sends every request out of that address, so "
                "egress_proxy_verify_url must be reachable from the outside segment, and %s is on its inside network (%s)"
                % (PROXY, HV1, host(outside), host(outside6), url, network)) in json.dumps(refused.failures(HV1)), refused
    return run.seconds


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


@pytest.fixture
def denied_origin(net_fleet, tmp_path):
    """An origin server on a second address of lab-hv1's outside segment (inside the outside segment's CIDR, which the
    policy allows), for the address the policy denies: (its address, its log file)."""
    spec = net_fleet.hv1
    address = "%s.%d" % (spec.outside_prefix, DENIED_HOST)
    device = ["ip", "-n", spec.outside_netns, "addr"]
    pidfile, log = str(tmp_path / "denied-origin.pid"), str(tmp_path / "denied-origin.log")
    subprocess.run(device + ["replace", address + "/%d" % config.OUTSIDE_PREFIX_LEN, "dev", config.OUTSIDE_IFACE], check=True)
    try:
        origin.ensure_origin(spec.outside_netns, address, config.ORIGIN_PORT, pidfile, log, hypervisors.REPO_ROOT)
        yield address, log
    finally:
        pid = origin.origin_pid(pidfile)
        if pid:
            os.kill(pid, signal.SIGTERM)
        subprocess.run(device + ["del", address + "/%d" % config.OUTSIDE_PREFIX_LEN, "dev", config.OUTSIDE_IFACE],
                       check=False)


@pytest.fixture
def unlisted_origin(net_fleet, tmp_path):
    """An origin server on config.UNLISTED_ADDRESS, a public address the outside namespace holds for the test (the
    proxy's default route leads there), outside the policy's allowlist: its log file."""
    spec = net_fleet.hv1
    address = config.UNLISTED_ADDRESS + "/32"
    device = ["ip", "-n", spec.outside_netns, "addr"]
    pidfile, log = str(tmp_path / "unlisted-origin.pid"), str(tmp_path / "unlisted-origin.log")
    subprocess.run(device + ["replace", address, "dev", config.OUTSIDE_IFACE], check=True)
    try:
        origin.ensure_origin(spec.outside_netns, config.UNLISTED_ADDRESS, config.ORIGIN_PORT, pidfile, log,
                             hypervisors.REPO_ROOT)
        yield log
    finally:
        pid = origin.origin_pid(pidfile)
        if pid:
            os.kill(pid, signal.SIGTERM)
        subprocess.run(device + ["del", address, "dev", config.OUTSIDE_IFACE], check=False)


Monitoring = namedtuple("Monitoring", "file_sd syslog_log query targets")


@pytest.fixture
def lan_monitoring(net_fleet, tmp_path):
    """Prometheus (scraping the targets the role writes into file_sd, with the shipped alert rules) and a syslog server
    (rsyslogd over UDP) in lab-hv1's LAN namespace, where an operator's monitoring would reach the proxies' inside."""
    spec = net_fleet.hv1
    workdir, file_sd, syslog_log = tmp_path / "monitoring", tmp_path / "egress-proxies.json", tmp_path / "syslog.log"
    monitoring.ensure_prometheus(spec.lan_netns, spec.lan_address, PROMETHEUS_PORT, str(workdir), str(file_sd),
                                 rule_files=[ALERT_RULES])
    try:
        monitoring.ensure_syslog(spec.lan_netns, spec.lan_address, SYSLOG_PORT, "udp", str(syslog_log), str(workdir))
        yield Monitoring(str(file_sd), syslog_log,
                         lambda expr: monitoring.prometheus_query(spec.lan_netns, spec.lan_address, PROMETHEUS_PORT, expr),
                         lambda: monitoring.prometheus_targets(spec.lan_netns, spec.lan_address, PROMETHEUS_PORT))
    finally:
        monitoring.stop_syslog(str(workdir))
        monitoring.stop_prometheus(str(workdir))


def polled(what, read, done, timeout=90):
    """read() until done(value) holds (Prometheus scrapes every 2 s); the value, or a failure naming what and it."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        assert time.monotonic() < deadline, "%s: still %r after %d s" % (what, value, timeout)
        time.sleep(1)


def requests_counted(lan_monitoring):
    """squid's request counter of the proxy as Prometheus last scraped it (None before its first scrape)."""
    found = lan_monitoring.query('squid_client_http_requests_total{job="egress_proxy",proxy="%s"}' % PROXY)
    return int(float(found[0]["value"][1])) if found else None


def access_lines(lan_monitoring, text):
    """The access lines the syslog server got that hold text."""
    received = lan_monitoring.syslog_log.read_text() if lan_monitoring.syslog_log.exists() else ""
    return [line for line in received.splitlines() if text in line]


def logged(*paths):
    """The text of the origins' log files (each origin logs a line per request it got)."""
    texts = []
    for path in paths:
        with open(path, errors="replace") as handle:
            texts.append(handle.read())
    return "".join(texts)


@pytest.mark.boot
def test_a_two_nic_proxy_with_static_addresses_egresses_from_its_outside_address(net_fleet, lan_outsider, denied_origin,
                                                                                 lan_monitoring, ipv6_segments,
                                                                                 unlisted_origin):
    spec = net_fleet.hv1
    inside, outside = "%s.%d/24" % (spec.lan_prefix, PROXY_HOST), "%s.%d/24" % (spec.outside_prefix, PROXY_HOST)
    elsewhere = "%s.%d/24" % (spec.outside_prefix, PROXY_HOST + 1)
    origin = spec.origin_url(spec.outside_address)
    denied, denied_log = denied_origin
    variables = two_nic_vars(net_fleet, inside, outside, denied, lan_monitoring.file_sd, dual_stack=True)
    inside6, outside6 = ipv6_host(LAN6[0], PROXY_HOST), ipv6_host(OUTSIDE6[0], PROXY_HOST)
    inventory = with_lan_client(net_fleet, variables, elsewhere)

    # At -vvv with --diff: the output that must not hold the password.
    converged, proxy, deployed = deploy(net_fleet, inventory, options=("-vvv", "--diff"))
    assert converged["changed"] is True and proxy["state"] == "Running", proxy
    assert "ESTABLISH SSH CONNECTION" in deployed.stderr, deployed.stderr[-3000:]
    # Exactly the static addresses, as the guest agent reports them on each NIC.
    assert [(nic["role"], nic["bridge"], nic["ipv4"], nic["egress"]) for nic in proxy["interfaces"]] == [
        ("inside", config.HV_BRIDGE, host(inside), False), ("outside", config.HV_OUTSIDE_BRIDGE, host(outside), True)]
    assert proxy["ip"] == host(inside) and proxy["egress_ip"] == host(outside), proxy
    # And the static IPv6 addresses, from the guest agent.
    assert [nic["ipv6"] for nic in proxy["interfaces"]] == [host(inside6), host(outside6)], proxy["interfaces"]
    assert proxy["ipv6"] == host(inside6) and proxy["egress_ipv6"] == host(outside6), proxy

    # verify.yml on both hosts in one run; each waits for squid (cloud-init configures it after the addresses
    # are up). lab-hv1, with curl in its LAN namespace, proves the egress address by the peer the origin saw.
    run = net_fleet.playbook("verify.yml", inventory, extra_vars={"egress_proxy_hosts": HV1 + "," + LAN_CLIENT},
                             timeout=900, options=("-vvv",))
    assert run.failures(HV1) == [], run
    reported, checked = verified(run, HV1)
    assert "HTTP 200, X-Egress-Proxy %s" % PROXY in reported, reported
    assert "the origin saw %s (the egress address)" % host(outside) in checked, checked
    # It authenticated as the user, the denied address's origin got squid's refusal, a request without credentials 407.
    assert "forwarded %s as %s: HTTP 200" % (origin, USER) in reported, reported
    assert "asked for %s (to be refused): HTTP 403, X-Squid-Error %s" % (spec.origin_url(denied), SQUID_REFUSED) in reported
    assert "without credentials: HTTP 407" in reported, reported
    assert run.ran(CHECK_DENIED_TASK) == [HV1] and run.ran(CHECK_USERS_TASK) == [HV1], run
    # LAN_CLIENT, with curl on the host itself and told to expect another egress address, reads the origin's JSON
    # and fails, naming the proxy, the expected and the seen address.
    assert run.rc != 0, run
    reported, _checked = verified(run, LAN_CLIENT)
    assert "HTTP 200, X-Egress-Proxy %s" % PROXY in reported, reported
    assert ("%s on %s: the origin saw the request come from %s, expected the proxy's egress address %s" % (
        PROXY, LAN_CLIENT, host(outside), host(elsewhere))) in json.dumps(run.failures(LAN_CLIENT)), run

    # --- issue 40 item 9: verify.yml reads the recorded egress addresses (a pooled view, an IPv6 origin) ---
    print("verify.yml with the recorded egress addresses over IPv6: %.0f s"
          % verify_as_pooled_over_ipv6(net_fleet, variables, inside, inside6, outside, outside6))
    # --- end of item 9 ---

    # squid: the allowed client is forwarded, from the outside address, with nothing of the inside passed on.
    squid = "http://%s:3128" % host(inside)
    answer = through_proxy(spec.lan_netns, squid, origin)
    assert answer[:3] == (0, 200, PROXY), answer
    assert answer.seen["peer"] == host(outside), answer.seen
    assert not {"via", "x-forwarded-for"} & {name.lower() for name in answer.seen["headers"]}, answer.seen["headers"]
    # An allowed name (the lab's domain) resolving into the allowed segment: forwarded from the egress address too.
    answer = through_proxy(spec.lan_netns, squid, spec.origin_url(config.ORIGIN_NAME))
    assert answer[:3] == (0, 200, PROXY) and answer.seen["peer"] == host(outside), answer
    # A client on the LAN outside allowed_clients is refused, credentials or not.
    answer = through_proxy(spec.lan_netns, squid, origin, lan_outsider)
    assert answer[:2] == (0, 403), "%s through the proxy: %s" % (lan_outsider, answer)
    # A client over IPv6 on the inside: an IPv6 destination sees the outside IPv6 address, an IPv4 one the IPv4 address.
    squid6 = "http://[%s]:3128" % host(inside6)
    answer = through_proxy(spec.lan_netns, squid6, "http://[%s]:%d/" % (OUTSIDE6[1], config.ORIGIN_PORT))
    assert answer[:3] == (0, 200, PROXY) and answer.seen["peer"] == host(outside6), answer
    answer = through_proxy(spec.lan_netns, squid6, origin)
    assert answer[:3] == (0, 200, PROXY) and answer.seen["peer"] == host(outside), answer
    # Issue 43: exactly the two allowed pairs of the profiles' users pass, each seen at the origin from its own egress
    # address (the guest put it on the outside NIC at its first boot), over IPv6 too.
    denied_url = spec.origin_url(denied)
    pairs = {(user, url): through_proxy(spec.lan_netns, squid, url, credentials=(user, PROFILE_USERS[user]))
             for user in PROFILE_USERS for url in (origin, denied_url)}
    assert {pair: answer.status for pair, answer in pairs.items()} == {
        ("eptest-ci", origin): 200, ("eptest-ci", denied_url): 403,
        ("eptest-ops", origin): 403, ("eptest-ops", denied_url): 200}, pairs
    assert pairs[("eptest-ci", origin)].seen["peer"] == profile_egress(spec, "eptest-ci"), pairs
    assert pairs[("eptest-ops", denied_url)].seen["peer"] == profile_egress(spec, "eptest-ops"), pairs
    answer = through_proxy(spec.lan_netns, squid6, "http://[%s]:%d/" % (OUTSIDE6[1], config.ORIGIN_PORT),
                           credentials=("eptest-ci", PROFILE_USERS["eptest-ci"]))
    assert answer[:3] == (0, 200, PROXY) and answer.seen["peer"] == host(profile_egress(spec, "eptest-ci", 6)), answer
    # Issue 43 item 3: the TLS name check of the tls profile. A TLS origin on the outside segment's origin address
    # (origin.lab): a CONNECT the profile allows passes only when its ClientHello names a server of the lab's domain.
    # A CONNECT it refuses is closed unanswered (squid 5.7 asserts serving a 403 on a port that peeks without a
    # certificate), and squid goes on answering.
    refused = through_proxy(spec.lan_netns, squid, "http://%s:443/" % spec.lan_address,
                            credentials=(TLS_USER, TLS_PASSWORD), tunnel=True)
    assert refused.status == 0 and refused.code == CURL_CONNECT_ABORTED, refused
    with tls_server(spec.outside_netns, net_fleet.tmp_path, 443):
        sni_cases = {sni: tls_answered(spec.lan_netns, "%s:3128" % host(inside), (TLS_USER, TLS_PASSWORD),
                                       "%s:443" % config.ORIGIN_NAME, sni)
                     for sni in (config.ORIGIN_NAME, "eptest-fronted.example", None)}
    assert sni_cases == {config.ORIGIN_NAME: True, "eptest-fronted.example": False, None: False}, sni_cases
    for rule, sni in (("tls_sni_not_allowed", "eptest-fronted.example"), ("tls_sni_missing", "-")):
        polled("the access line of %s" % rule, lambda rule=rule: access_lines(lan_monitoring, "rule=%s " % rule),
               lambda found: found, timeout=30)
        (line,) = access_lines(lan_monitoring, "rule=%s " % rule)
        assert (" user=%s method=CONNECT dest=%s:443 " % (TLS_USER, config.ORIGIN_NAME) in line
                and line.endswith(" decision=deny profile=tls rule=%s sni=%s" % (rule, sni))), line
    # A request arriving on the outside NIC finds no listener.
    answer = through_proxy(spec.outside_netns, "http://%s:3128" % host(outside), origin)
    assert answer.code == CURL_CONNECT_FAILED, "squid answered on the outside address %s: %s" % (host(outside), answer)

    # The policy refuses, with squid's own 403, before any origin gets the request (each path names this run).
    policy_started = time.monotonic()
    marker = "eptest-refused-%s" % secrets.token_hex(4)
    refused = {
        "a name not allowed": "http://origin.example:%d/%s/name" % (config.ORIGIN_PORT, marker),
        "the denied address": "%s%s/denied" % (spec.origin_url(denied), marker),
        "the hypervisor's management address": "%s%s/management" % (spec.origin_url(spec.address), marker),
        "the metadata address": "http://169.254.169.254/%s/metadata" % marker,
        "the LAN's origin (internal, the proxy's own network)": "%s%s/lan" % (spec.origin_url(spec.lan_address), marker),
        "rebind.lab (allowed by name, resolving to the LAN)": "%s%s/rebind" % (spec.origin_url(config.REBIND_NAME), marker),
        "a public address not allowed": "%s%s/unlisted" % (spec.origin_url(config.UNLISTED_ADDRESS), marker),
    }
    # Names of two addresses, the allowed outside origin and the LAN's (internal) or a public one not allowed: each
    # asked several times, as dnsmasq gives their addresses in turns.
    mixed = {
        "mixed.lab (allowed by name; the outside origin and the LAN's)": config.MIXED_LAB_NAME,
        "internal-mixed.example (the outside origin and the LAN's)": config.MIXED_INTERNAL_NAME,
        "unlisted-mixed.example (the outside origin and a public address not allowed)": config.MIXED_UNLISTED_NAME,
    }
    for turn in range(3):
        refused.update(("%s, %d" % (what, turn), "%s%s/mixed-%d" % (spec.origin_url(name), marker, turn))
                       for what, name in mixed.items())
    answers = {what: through_proxy(spec.lan_netns, squid, url) for what, url in refused.items()}
    assert {what: answer[:4] for what, answer in answers.items()} == dict.fromkeys(refused, (0, 403, PROXY, SQUID_REFUSED)), \
        answers
    # CONNECT to a port that is not TLS's. A refused CONNECT is closed unanswered (status 0) rather than answered 403: a
    # profile of this proxy checks TLS names (the tls profile, above), and squid would assert serving a 403 on its port.
    answer = through_proxy(spec.lan_netns, squid, "%s%s/connect" % (spec.origin_url(config.ORIGIN_NAME), marker), tunnel=True)
    assert answer.status == 0 and answer.code == CURL_CONNECT_ABORTED, answer
    # CONNECT to TLS's port of the names of two addresses: refused by the policy (nothing listens on 443 there, so a
    # CONNECT the policy let through would get 200, then squid's refusal of a ClientHello that never comes).
    tunnels = {what: through_proxy(spec.lan_netns, squid, "http://%s:443/" % name, tunnel=True) for what, name in mixed.items()}
    assert {what: (answer.status, answer.code) for what, answer in tunnels.items()} == dict.fromkeys(
        mixed, (0, CURL_CONNECT_ABORTED)), tunnels
    assert marker not in logged(spec.run_file("origin.log"), denied_log, unlisted_origin)
    # Proxy users: no credentials, a wrong password: squid's 407.
    for credentials in (None, (USER, PASSWORD + "x")):
        answer = through_proxy(spec.lan_netns, squid, origin, credentials=credentials)
        assert answer[:4] == (0, 407, PROXY, SQUID_AUTH), (credentials and "wrong password", answer)

    # Observability. deploy.yml wrote the proxy's scrape target; Prometheus scrapes it, and sees its counter rise.
    observed_started = time.monotonic()
    with open(lan_monitoring.file_sd) as handle:
        assert json.load(handle) == [{"targets": ["%s:%d" % (host(inside), METRICS_PORT)],
                                      "labels": {"hypervisor": HV1, "proxy": PROXY, "owner": "eptest-net"}}]
    before = polled("the proxy's request counter in Prometheus", lambda: requests_counted(lan_monitoring),
                    lambda counted: counted is not None)
    allowed_url = spec.origin_url(config.ORIGIN_NAME)
    for _request in range(5):
        assert through_proxy(spec.lan_netns, squid, allowed_url)[:3] == (0, 200, PROXY)
    polled("the proxy's request counter after 5 requests (%d before)" % before, lambda: requests_counted(lan_monitoring),
           lambda counted: counted >= before + 5)
    # The shipped rules load, and none fires for this healthy proxy.
    assert lan_monitoring.query('ALERTS{alertstate="firing"}') == []
    # Each request reaches the syslog server as one line: the client, its user, the destination, the status.
    unlisted = "eptest-%s.example" % secrets.token_hex(4)
    assert through_proxy(spec.lan_netns, squid, "http://%s/" % unlisted).status == 403
    lines = polled("the access lines of %s" % unlisted, lambda: access_lines(lan_monitoring, "dest=%s:80 " % unlisted),
                   lambda found: found, timeout=30)
    assert lines == ["<134>1 %s %s squid - access - client=%s user=%s method=GET dest=%s:80 status=403 bytes=%s "
                     "result=TCP_DENIED decision=deny profile=default rule=not_allowed sni=-" % (
                         lines[0].split()[1], PROXY, spec.lan_address, USER, unlisted,
                         lines[0].split("bytes=")[1].split()[0])], lines
    forwarded_line = "client=%s user=%s method=GET dest=%s:%d status=200 " % (
        spec.lan_address, USER, config.ORIGIN_NAME, config.ORIGIN_PORT)
    assert len(access_lines(lan_monitoring, forwarded_line)) >= 5, lan_monitoring.syslog_log.read_text()[-3000:]
    # The scrapes are not shipped; the metrics port refuses a client that is not a metrics client.
    assert access_lines(lan_monitoring, "squid-internal-mgr") == access_lines(lan_monitoring, "cache_object") == []
    refused_metrics = subprocess.run(["ip", "netns", "exec", spec.lan_netns, "curl", "--silent", "--interface", lan_outsider,
                                      "--output", "/dev/null", "--write-out", "%{http_code}",
                                      "http://%s:%d/metrics" % (host(inside), METRICS_PORT)],
                                     capture_output=True, text=True, timeout=60, check=False)
    assert refused_metrics.stdout == "403", refused_metrics
    # status.yml shows the service beside the VM: its metrics page answers, and the requests it counted.
    status = net_fleet.playbook("status.yml", inventory, timeout=300, extra_vars={"egress_proxy_hosts": HV1})
    assert status.rc == 0, status
    (rows,) = status.results("Show the same rows as JSON", HV1)
    (row,) = [row for row in rows["status_rows"] if row["name"] == PROXY]
    assert row["metrics"] == "up" and row["requests"] >= before + 5, row
    # EGRESS: the outside address its metadata records, the one the NIC reports too.
    assert row["egress"] == row["egress_address"] == row["egress_ip"] == host(outside), row
    assert row["egress6"] == row["egress_address6"] == row["egress_ipv6"] == host(outside6), row
    assert row["ipv6"] == host(inside6), row
    print("observability: Prometheus, syslog and status checked in %.0f s" % (time.monotonic() - observed_started))

    # verify.yml, told the allowed origin is to be refused, fails naming the proxy, the client, the URL and the answer.
    forwarded = spec.origin_url(config.ORIGIN_NAME)
    wrong = net_fleet.playbook("verify.yml", inventory, timeout=300,
                               extra_vars={"egress_proxy_hosts": HV1, "egress_proxy_verify_denied_url": forwarded})
    assert wrong.rc != 0, wrong
    assert ("%s on %s (%s:3128) did not refuse %s (egress_proxy_verify_denied_url), asked from %s in network namespace %s: "
            "HTTP 200, X-Squid-Error not set" % (PROXY, HV1, host(inside), forwarded, HV1, spec.lan_netns)) in json.dumps(
                wrong.failures(HV1)), wrong

    # The password: not in the seed, the domain's XML, or the output of deploy.yml and verify.yml at -vvv.
    texts = seed_texts(spec, net_fleet.tmp_path)
    texts["virsh dumpxml"] = hypervisors.virsh(spec, "dumpxml", PROXY).stdout
    texts["virsh dumpxml --inactive"] = hypervisors.virsh(spec, "dumpxml", "--inactive", PROXY).stdout
    texts.update({"deploy.yml -vvv --diff": deployed.stdout + deployed.stderr, "verify.yml -vvv": run.stdout + run.stderr,
                  "verify.yml, failing": wrong.stdout + wrong.stderr})
    assert where_secret(texts) == [], "the proxy user's password is in %s" % where_secret(texts)
    print("deploy.yml -vvv --diff %.0f s, verify.yml -vvv %.0f s; the policy's requests, the failing verify.yml (%.0f s) and "
          "the password's search %.0f s" % (deployed.seconds, run.seconds, wrong.seconds, time.monotonic() - policy_started))

    again, kept, _run = deploy(net_fleet, inventory)
    assert again["changed"] is False and [p["outcome"] for p in again["proxies"]] == ["unchanged"], again

    # A new static address is drift: the proxy is replaced (not waited for: its boot proves nothing new).
    moved = "%s.%d/24" % (spec.lan_prefix, PROXY_HOST + 1)
    replaced, proxy, _run = deploy(net_fleet, net_fleet.inventory(dict(two_nic_vars(net_fleet, moved, outside, denied,
                                                                                    lan_monitoring.file_sd),
                                                                       egress_proxy_wait_for_ip=False)))
    assert [p["outcome"] for p in replaced["proxies"]] == ["replaced"], replaced
    assert proxy["created_at"] != kept["created_at"], (proxy, kept)
    # Its scrape target moved with it, and Prometheus follows the file.
    target = "%s:%d" % (host(moved), METRICS_PORT)
    with open(lan_monitoring.file_sd) as handle:
        assert [group["targets"] for group in json.load(handle)] == [[target]]
    polled("Prometheus's targets", lambda: sorted(found["labels"]["instance"] for found in lan_monitoring.targets()),
           lambda instances: instances == [target], timeout=30)


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
