"""kvm_proxy boots the lab's Debian image for real (TCG) and the guest comes up as the seed says.

This is the proof that the overlay, the seed and the domain work together:
the module waits until the guest has an IPv4 (reported by its guest agent,
since the host has no address on the lab bridge and so no ARP entries), the
guest's hostname is the VM's name and a file from our user-data exists
(cloud-init applied our seed), the guest agent answers, and squid in the
guest proxies a request made from inside the lab's network namespace.

The same guest then turns hostile: a program of its own answers on the
agent's port (guest_hostile_agent.py) with a read that never ends, and
kvm_proxy_set, in check mode and for real, ends in seconds naming the proxy
and what its guest did.
"""

import base64
import json
import os
import subprocess
import time

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import base_volume_name, marker_volume_name
from tests.lab import config

pytestmark = [pytest.mark.integration, pytest.mark.boot]

PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks")
PLAYBOOK = os.path.join(PLAYBOOKS, "kvm_proxy_boot.yml")
UNFETCHABLE = os.path.join(PLAYBOOKS, "kvm_proxy_replace_unfetchable.yml")
SET_TASK = os.path.join(PLAYBOOKS, "kvm_proxy_set_task.yml")
HOSTILE_AGENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guest_hostile_agent.py")
# Where the hostile agent runs in the guest, and for how long at most before it gives the port back.
HOSTILE_AGENT_IN_GUEST = "/run/eptest-hostile-agent.py"
HOSTILE_SECONDS = 240
HOSTILE_VERSION = "eptest-hostile"  # guest-info's version as guest_hostile_agent.py answers it
VM = config.TEST_DOMAIN_PREFIX + "boot-proxy"
MAC = "52:54:00:e9:1a:05"
MARKER = "seed of %s applied by cloud-init" % VM
SQUID_PORT = 3128
ORIGIN_PORT = 18091
WAIT_TIMEOUT = 300
# The image name of the replacement: another name is another image, so the VM drifts.
NEXT_IMAGE = "debian-12-egress-next"


def leased_ips(mac):
    """Every address dnsmasq's lease file records for ``mac`` (a guest's DHCP clients may hold more than one)."""
    with open(config.DNSMASQ_LEASEFILE) as handle:
        return {fields[2] for fields in (line.split() for line in handle) if len(fields) >= 3 and fields[1].lower() == mac}


def virsh(*args, check=True):
    return subprocess.run(["virsh", "-q", "-c", config.LIBVIRT_URI] + list(args), capture_output=True, text=True, check=check)


def agent(command, arguments=None):
    request = {"execute": command}
    if arguments is not None:
        request["arguments"] = arguments
    return json.loads(virsh("qemu-agent-command", VM, json.dumps(request)).stdout)["return"]


def guest_exec(path, *args, timeout=30):
    """Run a command in the guest through the agent; return (exit code, stdout)."""
    pid = agent("guest-exec", {"path": path, "arg": list(args), "capture-output": True})["pid"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = agent("guest-exec-status", {"pid": pid})
        if status["exited"]:
            return status["exitcode"], base64.b64decode(status.get("out-data", "")).decode()
        time.sleep(0.5)
    pytest.fail("%s did not finish in the guest within %d s" % (path, timeout))


@pytest.fixture
def proxy_vars(lab):
    image = lab.images[config.GUEST_IMAGE]
    return {
        "uri": lab.uri, "pool": lab.pool, "bridge": lab.bridge, "vm_name": VM, "mac": MAC,
        "image_url": image["url"], "image_sha256": image["sha256"], "virt_type": lab.virt_type, "cpu_mode": lab.cpu_mode,
        "marker": MARKER, "wait_timeout": WAIT_TIMEOUT,
    }


@pytest.fixture
def absent_after(proxy_vars, run_playbook):
    """The VM does not exist before the test and is deleted by kvm_proxy (state absent) after it.

    Stopped hard (shutdown_timeout 0): the test claims the graceful stop of the replacement only, and the guest's
    graceful stop (squid's shutdown_lifetime is 30 s in the image) held the boot lock 46 s here instead of 5 s.
    """

    def make_absent():
        run = run_playbook(PLAYBOOK, dict(proxy_vars, proxy_state="absent", shutdown_timeout=0))
        assert run.rc == 0, run
        return run

    make_absent()
    yield
    run = make_absent()
    assert run.task_results("Make the proxy absent")[0]["changed"] is True


@pytest.fixture
def next_image_uncached(lab, lab_cleanup):
    """The replacement's image is not cached before the test (so it is fetched) and its base is gone after it."""
    base = base_volume_name(NEXT_IMAGE, "qcow2", lab.images[config.GUEST_IMAGE]["sha256"])
    lab_cleanup(volumes=[base, marker_volume_name(base)])


@pytest.fixture
def netns_origin(serve_in_netns):
    """The destination squid is asked to fetch."""
    return serve_in_netns("origin behind %s\n" % VM, ORIGIN_PORT)


# Listed before absent_after, so its clean-up runs after the VM on that base is gone.
def test_proxy_boots_applies_its_seed_and_proxies(lab, proxy_vars, next_image_uncached, absent_after, netns_origin,
                                                  run_playbook):
    started = time.monotonic()
    run = run_playbook(PLAYBOOK, dict(proxy_vars, proxy_state="present"), timeout=WAIT_TIMEOUT + 600)
    assert run.rc == 0, run
    proxy = run.task_results("Make the proxy present")[0]
    print("kvm_proxy reached Running in %.0f s under TCG; addresses: %s" % (time.monotonic() - started, proxy["ip_sources"]))
    ip = proxy["ip"]

    # The guest agent answers and reports the address kvm_proxy returned; dnsmasq leased it to our MAC.
    assert agent("guest-ping") == {}
    interfaces = agent("guest-network-get-interfaces")
    print("guest interfaces: %s; leases of %s: %s" % (
        [(nic["name"], [a["ip-address"] for a in nic.get("ip-addresses", [])]) for nic in interfaces], MAC, leased_ips(MAC)))
    assert ip in [address["ip-address"] for nic in interfaces for address in nic.get("ip-addresses", [])]
    assert ip in leased_ips(MAC)

    # cloud-init applied our seed: the hostname from its meta-data, the file from its user-data.
    assert agent("guest-get-host-name")["host-name"] == VM
    assert guest_exec("/bin/hostname") == (0, VM + "\n")
    assert guest_exec("/bin/cat", "/etc/eptest-seed") == (0, MARKER + "\n")
    assert guest_exec("/bin/systemctl", "is-active", "qemu-guest-agent")[1].strip() == "active"
    # Every cloud-init stage ran from our seed without an error (waits for the final stage).
    rc, status = guest_exec("/usr/bin/cloud-init", "status", "--wait", "--long", timeout=WAIT_TIMEOUT)
    assert rc == 0 and "status: done" in status, status

    # squid in the guest proxies a request made from inside the lab netns.
    assert fetch_through(lab, ip, netns_origin) == "origin behind %s\n" % VM

    # A compromised guest's agent does not hang a set: it is named with what it did, in seconds.
    a_hostile_agent_is_named_and_bounded(lab, proxy_vars, run_playbook)
    assert fetch_through(lab, ip, netns_origin, attempts_for=10) == "origin behind %s\n" % VM

    # A replacement onto an image that answers 404 fails before it touches the running proxy...
    domain_uuid = virsh("domuuid", VM).stdout.strip()
    refused = run_playbook(UNFETCHABLE, dict(proxy_vars, missing_url=lab.mirror_url + "gone/next.qcow2"))
    assert refused.rc == 0, refused
    assert virsh("domstate", VM).stdout.strip() == "running"
    assert virsh("domuuid", VM).stdout.strip() == domain_uuid
    assert fetch_through(lab, ip, netns_origin, attempts_for=10) == "origin behind %s\n" % VM

    # ...and one onto an image it can get replaces it.
    replaced = run_playbook(PLAYBOOK, dict(proxy_vars, proxy_state="present", image_name=NEXT_IMAGE),
                            timeout=WAIT_TIMEOUT + 600)
    assert replaced.rc == 0, replaced
    result = replaced.task_results("Make the proxy present")[0]
    assert result["drifted"] and result["actions"][:2] == ["fetch base image", "shutdown domain"]
    # The old guest acted on the ACPI request: stopped gracefully, not hard.
    assert not [warning for warning in result.get("warnings", []) if "stopped hard" in warning], result
    assert virsh("domuuid", VM).stdout.strip() != domain_uuid
    assert fetch_through(lab, result["ip"], netns_origin) == "origin behind %s\n" % VM


def agent_version():
    try:
        return agent("guest-info")["version"]
    except (subprocess.CalledProcessError, KeyError, ValueError):
        return None  # no agent on the port for a moment


def await_agent(hostile, timeout=120):
    """Wait until the hostile agent answers (``hostile`` True) or the real one is back (False)."""
    deadline = time.monotonic() + timeout
    while True:
        version = agent_version()
        if (version == HOSTILE_VERSION) if hostile else (version not in (None, HOSTILE_VERSION)):
            return
        if time.monotonic() >= deadline:
            pytest.fail("the %s guest agent did not answer within %d s" % ("hostile" if hostile else "real", timeout))
        time.sleep(1)


def a_hostile_agent_is_named_and_bounded(lab, proxy_vars, run_playbook):
    """kvm_proxy_set over the booted proxy while its guest answers the agent's port with a read that never ends.

    The set holds the proxy as kvm_proxy made it (same spec and owner, so it is kept) with a policy it does not
    hold yet: check mode reads it back, the real run applies it. Before the guest agent's replies were checked, both
    looped on the never-ending read until Ansible's own timeout.
    """
    with open(HOSTILE_AGENT, "rb") as handle:
        program = handle.read()
    opened = agent("guest-file-open", {"path": HOSTILE_AGENT_IN_GUEST, "mode": "w"})
    agent("guest-file-write", {"handle": opened, "buf-b64": base64.b64encode(program).decode()})
    agent("guest-file-close", {"handle": opened})
    # A unit of its own: stopping qemu-guest-agent kills the programs it started. The pause lets this guest-exec
    # report its exit through the real agent first; the real agent comes back however the program ends.
    assert guest_exec("/usr/bin/systemd-run", "--unit=eptest-hostile-agent", "--collect", "/bin/sh", "-c",
                      "sleep 3; systemctl stop qemu-guest-agent; /usr/bin/python3 %s %d; systemctl start "
                      "qemu-guest-agent" % (HOSTILE_AGENT_IN_GUEST, HOSTILE_SECONDS))[0] == 0
    await_agent(hostile=True)
    options = {
        "uri": lab.uri, "pool": lab.pool, "bridge": lab.bridge, "uid": "eptest-boot", "gc": False,
        "proxies": [{"name": VM, "mac": MAC}], "vcpus": 1, "memory_mib": 512, "virt_type": lab.virt_type,
        "cpu_mode": lab.cpu_mode, "wait_timeout": WAIT_TIMEOUT,
        "image": {"name": "debian-12-egress", "url": proxy_vars["image_url"],
                  "checksum": "sha256:" + proxy_vars["image_sha256"]},
        "user_data": "#cloud-config\nwrite_files:\n  - path: /etc/eptest-seed\n    content: \"%s\\n\"\n" % MARKER,
        "policy": {"files": [{"path": "/etc/eptest-policy", "content": "applied in place\n"}], "validate": ["/bin/true"]},
    }
    said = ("the guest agent of domain '%s' broke the protocol: guest-file-read of /var/lib/cloud/instance/"
            "boot-finished answered count 1 with 0 bytes" % VM)
    try:
        started = time.monotonic()
        predicted = run_playbook(SET_TASK, {"proxy_set": options}, check=True, timeout=300)
        checked_in = time.monotonic() - started
        assert predicted.rc == 0, predicted
        entry = predicted.task_results("Show the result")[0]["kvm_proxy_set_result"]
        assert not entry.get("failed"), entry.get("msg")
        proxy = entry["proxies"][0]
        assert proxy["outcome"] == "updated" and proxy["actions"] == ["apply policy"], proxy
        # The task shows each proxy's warnings as its own.
        assert [warning for warning in entry.get("warnings", []) if said in warning], entry.get("warnings")
        started = time.monotonic()
        applied = run_playbook(SET_TASK, {"proxy_set": options}, timeout=300)
        applied_in = time.monotonic() - started
        entry = applied.task_results("Show the result")[0]["kvm_proxy_set_result"]
        assert entry["failed"] and entry["error_kind"] == "guest_protocol", entry
        assert entry["msg"].startswith("proxy '%s': apply policy failed: %s" % (VM, said)), entry["msg"]
        assert "it still enforces the policy it had" in entry["msg"] and entry["changed"] is False, entry
        print("a hostile guest agent: check mode %.1f s, the real run %.1f s (its budget %d s)" % (
            checked_in, applied_in, WAIT_TIMEOUT + 120))
        # Seconds, where the read used to loop until Ansible's timeout; far inside the proxy's budget.
        assert checked_in < 60 and applied_in < 60
    finally:
        try:
            agent("eptest-restore")
        except subprocess.CalledProcessError:
            pass  # it gave the port back by itself (HOSTILE_SECONDS): the wait below says whether the agent is back
    await_agent(hostile=False)
    assert guest_exec("/bin/systemctl", "is-active", "qemu-guest-agent")[1].strip() == "active"
    # Nothing was applied: the domain records no policy, the guest holds no policy file.
    assert guest_exec("/bin/cat", "/etc/eptest-policy")[0] != 0
    assert "policyDigest" not in virsh("dumpxml", VM).stdout


def fetch_through(lab, ip, url, attempts_for=120):
    """The body of ``url`` fetched through squid at ``ip`` from inside the lab netns (retried while squid starts)."""
    deadline = time.monotonic() + attempts_for
    while True:
        fetched = subprocess.run(
            ["ip", "netns", "exec", lab.netns, "curl", "-sS", "--max-time", "10", "-x", "http://%s:%d" % (ip, SQUID_PORT),
             url], capture_output=True, text=True, check=False)
        if fetched.returncode == 0 or time.monotonic() >= deadline:
            return fetched.stdout
        time.sleep(2)
