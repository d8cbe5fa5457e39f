"""kvm_proxy_set through the role on the lab's two hypervisors over SSH (issue 14): GC and rolling replacement.

Garbage collection runs on the small non-booting image: a set converged on both hypervisors, a
no-op run, a proxy dropped from the list kept within the grace period and removed after it on its
own hypervisor only, an unmanaged domain and another owner's proxy left alone, an unreachable
hypervisor failing alone and losing nothing. The rolling case boots the Debian guest on both
hypervisors at once (each proxy forwarding from its own LAN only), then replaces lab-hv1's two
proxies one at a time, sampled every second from its LAN namespace, then a replacement onto an
image that cannot boot stops the roll with the other proxy still serving.
"""

import base64
import contextlib
import hashlib
import os
import subprocess
import threading
import time

import pytest

pytest.register_assert_rewrite("tests.integration.fleet_fixtures")

from ansible_collections.egress_proxies.kvm.plugins.filter.metrics_pages import DECISIONS_TYPE  # noqa: E402
from tests.integration.fleet_fixtures import ORIGIN_PORT, agent, fetch, in_guest, lan_http_server  # noqa: E402
from tests.lab import config, hypervisors  # noqa: E402
from tests.lab.fleet_runs import PREFIX, overlap  # noqa: E402
from tests.unit.role_templates import decision_counts  # noqa: E402

pytest_plugins = ["tests.integration.fleet_fixtures"]
pytestmark = pytest.mark.integration

CONVERGE_TASK = "Converge the proxies of this hypervisor"
HV1, HV2 = "lab-hv1", "lab-hv2"
OTHER_OWNER = "eptest-fleet-other"
UNMANAGED = PREFIX + "gc-unmanaged"
# The address wait of a replacement onto the image that cannot boot: waited out in full, under the boot lock.
UNBOOTABLE_WAIT = 10
# The metrics port of the role's default (egress_proxy_metrics_port).
METRICS_PORT = 9301
# The proxy users policy_in_place gives lab-hv1's proxies: two with a profile of their own, one without.
USERS = {"ci": "ci's secret", "ops": "ops's secret", "web": "web's secret"}
# Denied destinations that make squid.conf larger than one write qemu-ga answers (about 300 KB against 192 KiB): the
# policy goes into the guest in pieces (_guest.agent.WRITE_CHUNK).
LONG_LIST = ["host-%d.denied.example" % number for number in range(6000)]
# The host part of a second origin's address on the LAN, outside its DHCP range (tests/lab/config.py).
SECOND_ORIGIN_HOST = 250


def name(suffix):
    return PREFIX + "gc-" + suffix


def placed(hv_fleet, entries, **overrides):
    """An inventory whose fleet-wide list is ``entries`` ({name suffix: hypervisor})."""
    return hv_fleet.inventory(hv_fleet.role_vars(
        egress_proxy_fleet=[{"name": name(suffix), "hypervisor": host} for suffix, host in entries.items()], **overrides))


def define_unmanaged(spec):
    """A domain this collection did not create (no metadata), defined on the hypervisor's own libvirtd."""
    xml = ("<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>"
           "<os><type arch='x86_64'>hvm</type></os></domain>" % UNMANAGED)
    subprocess.run(hypervisors.virsh_argv(spec, "define", "/dev/stdin"), input=xml, text=True, check=True,
                   capture_output=True)


def test_gc_removes_only_this_owners_unlisted_proxies_after_the_grace_period_on_their_own_hypervisor(hv_fleet):
    # Another owner's proxy and an unmanaged domain share lab-hv1 with the set.
    other = hv_fleet.inventory(hv_fleet.role_vars(egress_proxy_uid=OTHER_OWNER, egress_proxy_gc=False),
                               {HV1: {"egress_proxy_instances": [{"name": name("other")}]}})
    assert hv_fleet.playbook("deploy.yml", other, {"egress_proxy_hosts": HV1}).rc == 0
    define_unmanaged(hv_fleet.hv1)

    full = {"a": HV1, "b": HV1, "c": HV2}
    run = hv_fleet.playbook("deploy.yml", placed(hv_fleet, full))
    assert run.rc == 0, run
    assert sorted(run.items(CONVERGE_TASK, HV1)) == [name("a"), name("b")]
    assert [entry["outcome"] for entry in run.items(CONVERGE_TASK, HV2).values()] == ["created"]
    noop = hv_fleet.playbook("deploy.yml", placed(hv_fleet, full))
    assert noop.rc == 0, noop
    assert [noop.stats(host)["changed"] for host in (HV1, HV2)] == [0, 0], noop
    (converged,) = noop.results(CONVERGE_TASK, HV1)
    assert {entry["name"] for entry in converged["foreign"]} >= {name("other"), UNMANAGED}

    # b dropped from the list: within the grace period (the default hour) it stays, and says why.
    without_b = {"a": HV1, "c": HV2}
    kept = hv_fleet.playbook("deploy.yml", placed(hv_fleet, without_b))
    assert kept.rc == 0, kept
    (converged,) = kept.results(CONVERGE_TASK, HV1)
    assert converged["removed"] == [] and [entry["name"] for entry in converged["spared"]] == [name("b")]
    assert "gc_grace_period" in converged["spared"][0]["reason"]
    assert name("b") in hv_fleet.domains_local(hv_fleet.hv1)

    # Past a grace period of one second: removed with its disks, on lab-hv1 only, nothing else touched.
    time.sleep(2)
    swept = hv_fleet.playbook("deploy.yml", placed(hv_fleet, without_b, egress_proxy_gc_grace_period=1))
    assert swept.rc == 0, swept
    (converged,) = swept.results(CONVERGE_TASK, HV1)
    assert [entry["name"] for entry in converged["removed"]] == [name("b")] and converged["changed"]
    assert swept.stats(HV2)["changed"] == 0
    assert sorted(hv_fleet.domains_local(hv_fleet.hv1)) == sorted([name("a"), UNMANAGED, name("other")])
    assert not [volume for volume in hv_fleet.volumes_local(hv_fleet.hv1) if volume.startswith(name("b"))]
    assert sorted(hv_fleet.domains_local(hv_fleet.hv2)) == [name("c")]

    # lab-hv2 unreachable while c is dropped too: that host fails alone, and nothing is deleted there.
    hypervisors.stop_sshd(hv_fleet.hv2)
    try:
        cut = hv_fleet.playbook("deploy.yml", placed(hv_fleet, {"a": HV1}, egress_proxy_gc_grace_period=1))
        assert cut.rc != 0, cut
        assert cut.stats(HV2)["unreachable"] == 1 and cut.stats(HV1)["failures"] == 0, cut.result["stats"]
        assert sorted(hv_fleet.domains_local(hv_fleet.hv2)) == [name("c")]
    finally:
        hypervisors.start_sshd(hv_fleet.hv2)
    assert sorted(hv_fleet.domains_local(hv_fleet.hv1)) == sorted([name("a"), UNMANAGED, name("other")])


def leases(spec):
    """{MAC: [IPv4, ...]} of the DHCP leases on the hypervisor's LAN."""
    found = {}
    with open(hypervisors.dnsmasq_leasefile(spec)) as handle:
        for line in handle:
            fields = line.split()
            if len(fields) >= 3:
                found.setdefault(fields[1].lower(), []).append(fields[2])
    return found


def macs(spec, proxy):
    """The MACs of the proxy's domain now (none while it is being replaced)."""
    listed = hypervisors.virsh(spec, "domiflist", proxy, check=False).stdout.split()
    return [field.lower() for field in listed if field.count(":") == 5]


# Exits 0 when the address answers a TCP connection to squid's port at all (accepted or refused): a
# host is there. A timeout or "no route" means no one holds the address.
ANSWERS = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 3128), timeout=1).close()
except ConnectionRefusedError:
    pass
except OSError:
    sys.exit(1)
"""


def addressed(spec, proxies):
    """The proxies that have an address now: a lease of their NIC answers from the hypervisor's LAN namespace."""
    leased, have = leases(spec), set()
    for proxy in proxies:
        for address in [address for mac in macs(spec, proxy) for address in leased.get(mac, [])]:
            probe = ["ip", "netns", "exec", spec.lan_netns, "/usr/bin/python3", "-c", ANSWERS, address]
            if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
                have.add(proxy)
                break
    return have


class Sampler:
    """Every second, from the LAN namespace, which of ``proxies`` have an address, until stopped."""

    def __init__(self, spec, proxies):
        self.spec, self.proxies, self.samples = spec, set(proxies), []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.samples.append(addressed(self.spec, self.proxies))
            self._stop.wait(1)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)


# GET argv[2] through the proxy argv[1] into argv[3], 64 KiB every 2 seconds until the file argv[4] exists: 8 MiB would
# take over 4 minutes, longer than the policy change takes on a loaded machine.
SLOW_CLIENT = """
import os, sys, time, urllib.request
proxy, url, out, fast = sys.argv[1:5]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
with opener.open(url, timeout=60) as response, open(out, "wb") as handle:
    for chunk in iter(lambda: response.read(65536), b""):
        handle.write(chunk)
        if not os.path.exists(fast):
            time.sleep(2)
"""


def metrics_page(spec, ip, seconds=30):
    """The proxy's metrics page, read from the hypervisor's LAN namespace (one of its metrics clients), as Prometheus's
    next scrapes would: squid probes the counter it starts at a reconfigure before the counter listens, so the first
    read after it gets the exporter's page alone, without the counter's."""
    deadline = time.monotonic() + seconds
    while True:
        read = subprocess.run(["ip", "netns", "exec", spec.lan_netns, "curl", "-sS", "--fail", "--max-time", "20",
                               "http://%s:%d/metrics" % (ip, METRICS_PORT)], capture_output=True, text=True, check=False)
        if DECISIONS_TYPE in read.stdout or time.monotonic() > deadline:
            return read.stdout
        time.sleep(2)


def running_as(spec, proxies):
    """{proxy: (domain UUID, domain id)}: the id changes whenever the VM starts again."""
    return {proxy: (hypervisors.virsh(spec, "domuuid", proxy).stdout.strip(),
                    hypervisors.virsh(spec, "domid", proxy).stdout.strip()) for proxy in proxies}


@contextlib.contextmanager
def second_lan_origin(spec, tmp_path):
    """An origin server on a second address of the hypervisor's LAN namespace, for as long as the block runs: the
    address."""
    address = "%s.%d" % (spec.lan_prefix, SECOND_ORIGIN_HOST)
    device = ["ip", "-n", spec.lan_netns, "addr"]
    subprocess.run(device + ["add", address + "/32", "dev", config.LAN_IFACE], check=True)
    server = None
    try:
        server = lan_http_server(spec, address, tmp_path / "origin")
        yield address
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        subprocess.run(device + ["del", address + "/32", "dev", config.LAN_IFACE], check=False)


def answered_as(spec, proxies, expected, seconds=30):
    """{proxy: {(user, url): status}} of each request of ``expected`` ({(user or None, url): status}) through every
    proxy, asked again until every proxy answers each as expected or ``seconds`` pass (squid reconfigures after the
    reload)."""
    deadline = time.monotonic() + seconds
    while True:
        answers = {proxy: {(user, url): fetch(spec, "http://%s:3128" % ip, url, user and "%s:%s" % (user, USERS[user]))[0]
                           for user, url in expected} for proxy, ip in proxies.items()}
        if all(answer == expected for answer in answers.values()) or time.monotonic() > deadline:
            return answers
        time.sleep(1)


def enforced(spec, proxies, origin, status, seconds=30):
    """Whether every proxy answers ``status`` for the origin within ``seconds`` (squid reconfigures after the reload)."""
    deadline = time.monotonic() + seconds
    while True:
        answers = {proxy: fetch(spec, "http://%s:3128" % ip, origin)[0] for proxy, ip in proxies.items()}
        if set(answers.values()) == {status} or time.monotonic() > deadline:
            return answers
        time.sleep(1)


def policy_in_place(hv_fleet, spec, proxies, origin, inventory, tmp_path, deployed):
    """Issue 27 on lab-hv1's two running proxies: a policy change applied in place by the guest agent (no
    replacement, a download in flight finishes intact), squid.conf edited by hand found and restored, issue 43's users
    with profiles of their own and report mode turned on and off again, and a proxy whose agent is stopped named (the
    roll replaces it)."""
    extra = {"egress_proxy_hosts": HV1}
    (recorded,) = deployed.results("Record the proxies of this hypervisor in egress_proxy_proxies", HV1)
    ips = {entry["name"]: entry["ip"] for entry in recorded["ansible_facts"]["egress_proxy_proxies"]}
    before = running_as(spec, proxies)
    # The role's default egress_proxy_guest_agent_rpcs: the agent answers what the collection uses, refuses the rest.
    enabled = {command["name"]: command["enabled"] for command in agent(spec, proxies[0], "guest-info")["supported_commands"]}
    assert enabled["guest-exec"] and enabled["guest-file-write"] and enabled["guest-network-get-interfaces"], enabled
    assert not enabled["guest-set-user-password"] and not enabled["guest-ssh-add-authorized-keys"], enabled
    # 8 MiB through roll-1, read slowly (32 KiB/s) while the policy changes, then at full speed.
    body = os.urandom(8 << 20)
    (tmp_path / "origin" / "big.bin").write_bytes(body)
    fast = tmp_path / "fast"
    download = subprocess.Popen(
        ["ip", "netns", "exec", spec.lan_netns, "/usr/bin/python3", "-c", SLOW_CLIENT, "http://%s:3128" % ips[proxies[0]],
         origin + "big.bin", str(tmp_path / "downloaded.bin"), str(fast)])
    time.sleep(3)
    denied = inventory(egress_proxy_denied_destinations=[spec.lan_address])
    applied = hv_fleet.playbook("deploy.yml", denied, extra, timeout=600)
    assert applied.rc == 0, applied
    entries = applied.items(CONVERGE_TASK, HV1)
    assert [(entries[p]["outcome"], entries[p]["actions"]) for p in proxies] == [("updated", ["apply policy"])] * 2
    assert running_as(spec, proxies) == before
    assert enforced(spec, ips, origin, 403) == dict.fromkeys(proxies, 403)
    assert download.poll() is None, "the download ended before the change was applied"
    fast.touch()
    assert download.wait(timeout=120) == 0
    assert hashlib.sha256((tmp_path / "downloaded.bin").read_bytes()).digest() == hashlib.sha256(body).digest()
    start, end = applied.spans(CONVERGE_TASK)[HV1]
    print("policy applied in place to two proxies: the converge task took %.1f s" % (end - start))

    # squid.conf edited by hand in roll-2: check mode sees the drift, the next run restores the file.
    in_guest(spec, proxies[1], "/bin/sh", "-c", "echo 'http_access allow all' >> /etc/squid/squid.conf")
    checked = hv_fleet.playbook("deploy.yml", denied, extra, options=("--check",))
    assert checked.rc == 0, checked
    entries = checked.items(CONVERGE_TASK, HV1)
    assert entries[proxies[1]]["policy_drift"] == ["/etc/squid/squid.conf"] and entries[proxies[0]]["policy_drift"] == []
    assert checked.stats(HV1)["changed"] >= 1
    # The run that restores it (a squid.conf of some 300 KB, written in pieces) also gives both proxies users (issue 43),
    # in place: ci and ops each with a profile of its own, whose allowlists are disjoint (the LAN's origin, and a second
    # origin on the LAN), and web with none, whose requests take the default policy, now in report mode. Exactly ci's
    # and ops's own origins pass (the other's is internal, and not in its allowlist); web's denied destination is
    # forwarded all the same, said would_deny on the access line and counted on the metrics page.
    with second_lan_origin(spec, tmp_path) as other_address:
        other_origin = "http://%s:%d/" % (other_address, ORIGIN_PORT)
        reporting = inventory(
            egress_proxy_denied_destinations=[spec.lan_address] + LONG_LIST, egress_proxy_mode="report",
            egress_proxy_users=[{"name": user, "password": password} for user, password in USERS.items()],
            egress_proxy_profiles=[
                {"name": "ci", "users": ["ci"], "allowed_destinations": [spec.lan_address]},
                {"name": "ops", "users": ["ops"], "allowed_destinations": [other_address]}])
        restored = hv_fleet.playbook("deploy.yml", reporting, extra)
        assert restored.rc == 0, restored
        entries = restored.items(CONVERGE_TASK, HV1)
        assert [(entries[p]["outcome"], entries[p]["actions"]) for p in proxies] == [("updated", ["apply policy"])] * 2
        again = hv_fleet.playbook("deploy.yml", reporting, extra, options=("--check",))
        assert again.rc == 0 and again.stats(HV1)["changed"] == 0, again
        expected = {("ci", origin): 200, ("ci", other_origin): 403, ("ops", other_origin): 200, ("ops", origin): 403,
                    ("web", origin): 200, (None, origin): 407}
        assert answered_as(spec, ips, expected) == dict.fromkeys(proxies, expected)
    decided = {("allow", "ci", "allowed_destinations"), ("deny", "ci", "deny_internal"),
               ("allow", "ops", "allowed_destinations"), ("deny", "ops", "deny_internal"),
               ("would_deny", "default", "denied_destinations"), ("deny", "-", "users")}
    counted = decision_counts(metrics_page(spec, ips[proxies[0]]))
    assert decided <= set(counted), counted
    logged = in_guest(spec, proxies[0], "/bin/grep", "-c", " decision=would_deny profile=default rule=denied_destinations",
                      "/var/log/squid/access.log")
    assert logged["exitcode"] == 0 and int(base64.b64decode(logged["out-data"])) >= 1, logged

    # roll-2's agent stopped: the change back to enforce reaches roll-1, which refuses again on the same VM; the run
    # fails naming roll-2, which keeps the policy it had (report: forwarded). The roll below replaces it with
    # on_unreachable_agent=replace. A wait_timeout shorter than the proxies' age: the run would wait that long for the
    # silent agent of a proxy created within it (its first boot may still be going on).
    in_guest(spec, proxies[1], "/bin/systemctl", "stop", "qemu-guest-agent")
    silent = hv_fleet.playbook("deploy.yml", inventory(egress_proxy_denied_destinations=[spec.lan_address],
                                                       egress_proxy_wait_timeout=60), extra, timeout=600)
    assert silent.rc != 0, silent
    (converged,) = silent.results(CONVERGE_TASK, HV1)
    assert "proxy '%s'" % proxies[1] in converged["msg"] and "did not answer" in converged["msg"], converged["msg"]
    assert "on_unreachable_agent=replace" in converged["msg"], converged["msg"]
    assert enforced(spec, {proxies[0]: ips[proxies[0]]}, origin, 403) == {proxies[0]: 403}
    assert fetch(spec, "http://%s:3128" % ips[proxies[1]], origin, "web:" + USERS["web"])[0] == 200
    assert running_as(spec, proxies) == before


@pytest.mark.boot
def test_a_rolling_replace_keeps_one_proxy_addressed_and_an_unbootable_image_stops_the_roll(
        hv_fleet, lan_origins, tmp_path):
    """First both hypervisors boot their proxies at once, each forwarding from its own LAN only; then lab-hv1's
    two proxies get policy changes in place (policy_in_place), then a machine change of one and the other's silent
    agent roll them. One boot of the Debian guest per proxy and roll serves every claim (booting is minutes here)."""
    spec, origin = hv_fleet.hv1, lan_origins[HV1]
    mirror = "http://127.0.0.1:8642/"
    proxies, other = [name("roll-1"), name("roll-2")], name("boot-hv2")
    booted = dict(
        egress_proxy_image={"name": "debian-12-egress", "url": mirror + config.GUEST_IMAGE,
                            "checksum": "sha256:" + mirror + config.SHA256SUMS},
        # Three guests boot at once on the machine's two CPUs at first: a longer limit than one boot needs.
        egress_proxy_memory_mib=512, egress_proxy_disk_size_gb=4, egress_proxy_wait_for_ip=True,
        egress_proxy_wait_timeout=600)

    def inventory(instances=({}, {}), **overrides):
        """The three proxies; ``instances``: lab-hv1's two entries' own settings, ``overrides`` its variables."""
        host_vars = {host: {"egress_proxy_allowed_clients": [lan.lan_cidr], "egress_proxy_verify_netns": lan.lan_netns,
                            "egress_proxy_verify_url": lan_origins[host], "egress_proxy_instances": entries}
                     for host, lan, entries in (
                         (HV1, hv_fleet.hv1, [dict(own, name=proxy) for proxy, own in zip(proxies, instances)]),
                         (HV2, hv_fleet.hv2, [{"name": other}]))}
        host_vars[HV1].update(overrides)
        return hv_fleet.inventory(hv_fleet.role_vars(**booted), host_vars)

    deployed = hv_fleet.playbook("deploy.yml", inventory(), timeout=1500)
    assert deployed.rc == 0, deployed
    waits = deployed.spans(CONVERGE_TASK)
    assert overlap(waits[HV1], waits[HV2]) > 0, waits
    first = hv_fleet.playbook("verify.yml", inventory(), timeout=900)
    assert first.rc == 0, first
    (reported,) = first.results("Report what each proxy answered", HV2)
    assert "HTTP 200, X-Egress-Proxy %s" % other in reported["results"][0]["msg"], reported
    (recorded,) = deployed.results("Record the proxies of this hypervisor in egress_proxy_proxies", HV2)
    (listed,) = recorded["ansible_facts"]["egress_proxy_proxies"]
    assert listed["state"] == "Running" and listed["ip"].startswith(hv_fleet.hv2.lan_prefix + "."), listed
    assert fetch(hv_fleet.hv2, "http://%s:3128" % listed["ip"], lan_origins[HV2]) == (200, other)
    # Each LAN reaches its own hypervisor's proxy only: the segments are separate.
    assert fetch(spec, "http://%s:3128" % listed["ip"], lan_origins[HV2])[0] == 0
    print("booted three on two hypervisors in %.0f s, verified in %.0f s" % (deployed.seconds, first.seconds))

    extra = {"egress_proxy_hosts": HV1}
    policy_in_place(hv_fleet, spec, proxies, origin, inventory, tmp_path, deployed)

    # A machine change of roll-1 (memory) and roll-2's silent agent with on_unreachable_agent=replace replace both,
    # one at a time; roll-2's new VM boots with the policy its old one could not be given.
    changed = inventory(instances=({"memory_mib": 640}, {}), egress_proxy_on_unreachable_agent="replace")
    with Sampler(spec, proxies) as sampler:
        rolled = hv_fleet.playbook("deploy.yml", changed, extra, timeout=1200)
    assert rolled.rc == 0, rolled
    # roll-2's spec did not change (not drifted): it was replaced for its silent agent.
    assert [(entry["outcome"], entry["drifted"]) for entry in rolled.items(CONVERGE_TASK, HV1).values()] == [
        ("replaced", True), ("replaced", False)]
    assert sampler.samples and all(sample for sample in sampler.samples), sampler.samples
    verified = hv_fleet.playbook("verify.yml", changed, extra, timeout=600)
    assert verified.rc == 0, verified
    (recorded,) = rolled.results("Record the proxies of this hypervisor in egress_proxy_proxies", HV1)
    for proxy in proxies:
        (entry,) = [listed for listed in recorded["ansible_facts"]["egress_proxy_proxies"] if listed["name"] == proxy]
        assert fetch(spec, "http://%s:3128" % entry["ip"], origin) == (200, proxy)

    # The replacement's image cannot boot: the first replacement never gets an address, the roll stops,
    # the second proxy keeps running its old VM and still forwards. The small image never gets one, so a
    # short limit is waited out in full for the same claim.
    unbootable = inventory(egress_proxy_image={"name": "tiny-fleet", "url": mirror + config.TINY_QCOW2,
                                               "checksum": "sha256:" + mirror + config.SHA256SUMS},
                           egress_proxy_wait_timeout=UNBOOTABLE_WAIT)
    stopped = hv_fleet.playbook("deploy.yml", unbootable, extra, timeout=600)
    assert stopped.rc != 0, stopped
    (converged,) = stopped.results(CONVERGE_TASK, HV1)
    assert "%s got no routable IPv4 within wait_timeout (%d s)" % (proxies[0], UNBOOTABLE_WAIT) in converged["msg"], converged["msg"]
    assert "the roll stopped: %s still runs on the old VM" % proxies[1] in converged["msg"], converged["msg"]
    (entry,) = [listed for listed in recorded["ansible_facts"]["egress_proxy_proxies"] if listed["name"] == proxies[1]]
    assert fetch(spec, "http://%s:3128" % entry["ip"], origin) == (200, proxies[1])
