"""kvm_proxy_info and the listing behind it on the lab's real libvirtd.

A fleet of three managed domains (one started) and one hand-made domain is
defined with the collection's builders; the listing must find exactly the
managed ones, read their metadata from the XML libvirt really returns, and
report a started domain without an address as Provisioning with what each
address source said. The module runs through ansible-playbook on the
hypervisor's Python, and ad hoc over SSH as users run it
(``ansible hypervisors -m egress_proxies.kvm.kvm_proxy_info``).
"""

import json
import os
import socket

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.inventory import get_proxy, list_proxies
from tests.integration import proxy_fleet

pytestmark = pytest.mark.integration

PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks", "kvm_proxy_info.yml")
PREFIX = "eptest-info-"
HOST = "lab"


fleet = proxy_fleet.fixture(PREFIX)


def ours(entries, fleet):
    return {entry["name"]: entry for entry in entries if entry["name"].startswith(fleet.prefix)}


def test_listing_finds_the_managed_domains_with_their_metadata(lab, fleet, hypervisor):
    entries, warnings = list_proxies(hypervisor, HOST)
    assert warnings == []
    listed = ours(entries, fleet)
    assert sorted(listed) == [PREFIX + "off", PREFIX + "old", PREFIX + "run"]

    run = listed[PREFIX + "run"]
    assert run["id"] == "hosts/lab/domains/%srun" % PREFIX
    assert (run["managed"], run["uid"]) == (True, fleet.owner_one)
    assert run["created_at"] == fleet.member("run").created_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert run["spec_digest"] == "0" * 64
    assert (run["vcpus"], run["memory_mib"]) == (1, 128)
    assert run["macs"] == [fleet.member("run").mac]
    assert [(d["device"], d["pool"], d["volume"]) for d in run["disks"]] == [
        ("disk", lab.pool, PREFIX + "run.qcow2"), ("cdrom", lab.pool, PREFIX + "run-seed.iso")]
    # Started, but tiny.qcow2 never boots: no address from either source, so not Running yet.
    assert (run["libvirt_state"], run["state"], run["ip"]) == ("running", "Provisioning", None)
    assert list(run["ip_sources"]) == ["arp", "agent"]
    # libvirt 9.0 cannot read the neighbour table on newer kernels ("wrong nlmsg len"); either way, no address.
    assert run["ip_sources"]["arp"] == "no address yet" or run["ip_sources"]["arp"].startswith("host ARP table unreadable")
    assert "guest agent not responding" in run["ip_sources"]["agent"]

    off = listed[PREFIX + "off"]
    assert (off["libvirt_state"], off["state"], off["ip"], off["ip_sources"]) == ("shutoff", "Stopped", None, {})
    assert (off["uid"], off["autostart"]) == (fleet.owner_two, True)
    assert listed[PREFIX + "old"]["created_at"] == "2020-01-02T03:04:05Z"


def test_unmanaged_domain_only_on_request(fleet, hypervisor):
    entries, _warnings = list_proxies(hypervisor, HOST, include_unmanaged=True)
    by_owner, _warnings = list_proxies(hypervisor, HOST, uid=fleet.owner_two, include_unmanaged=True)
    hand = ours(entries, fleet)[PREFIX + "hand"]
    assert (hand["managed"], hand["uid"], hand["created_at"], hand["disks"]) == (False, None, None, [])
    assert [entry["name"] for entry in by_owner] == [PREFIX + "off"]


def test_get_by_name_reads_the_same_as_the_listing(fleet, hypervisor):
    entries, _warnings = list_proxies(hypervisor, HOST, uid=fleet.owner_one)
    one = get_proxy(hypervisor, HOST, PREFIX + "old")
    missing = get_proxy(hypervisor, HOST, PREFIX + "absent")
    assert one == ours(entries, fleet)[PREFIX + "old"]
    assert missing is None


def test_module_through_a_playbook(lab, fleet, run_playbook):
    run = run_playbook(PLAYBOOK, extra_vars={"uri": lab.uri, "host": HOST, "prefix": PREFIX, "owner_one": fleet.owner_one})
    assert run.rc == 0, run
    owned = run.task_results("List one owner's proxies")[0]
    assert owned["changed"] is False
    assert owned["host"] == HOST
    assert [(p["id"], p["state"]) for p in owned["proxies"]] == [
        ("hosts/lab/domains/%sold" % PREFIX, "Stopped"), ("hosts/lab/domains/%srun" % PREFIX, "Provisioning")]
    everything = run.task_results("Everything on the hypervisor, hand-made domains included")[0]
    assert sorted(ours(everything["proxies"], fleet)) == sorted(fleet.names)


def _ad_hoc_result(run, host):
    """The JSON result of ``host`` from ad-hoc output (``host | SUCCESS => {...}``)."""
    marker = "%s | " % host
    start = run.stdout.index(marker)
    return json.loads(run.stdout[run.stdout.index("{", start):])


def test_ad_hoc_over_ssh_prints_the_fleet(lab, fleet, sshd, run_ansible):
    run = run_ansible("egress_proxies.kvm.kvm_proxy_info", "uid=%s" % fleet.owner_one,
                      pattern="hypervisor-ssh", extra_hosts=[sshd.inventory_line()])
    assert run.rc == 0, run
    assert "hypervisor-ssh | SUCCESS" in run.stdout
    result = _ad_hoc_result(run, "hypervisor-ssh")
    assert result["changed"] is False
    # Without host, ids carry the host name libvirt reports for the hypervisor.
    assert result["host"] == socket.gethostname()
    assert [p["id"] for p in result["proxies"]] == [
        "hosts/%s/domains/%s%s" % (socket.gethostname(), PREFIX, suffix) for suffix in ("old", "run")]


def test_ad_hoc_unreachable_hypervisor_fails_and_names_it(lab, run_ansible):
    uri = "qemu+ssh://root@127.0.0.1:1/system?no_verify=1"
    run = run_ansible("egress_proxies.kvm.kvm_proxy_info", "uri=%s" % uri)
    assert run.rc != 0, run
    assert "localhost | FAILED" in run.stdout
    result = _ad_hoc_result(run, "localhost")
    assert uri in result["msg"]
    assert "connecting to hypervisor" in result["msg"]
