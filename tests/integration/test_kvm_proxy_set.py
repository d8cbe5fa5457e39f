"""kvm_proxy_set on the lab's real libvirtd with the tiny image, which runs but never boots an OS.

Its VMs are running domains that never get an address: enough to show how the set's wait and its garbage
collection treat running proxies, without a boot.
"""

import os
import re
import subprocess
import threading
import time

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import base_volume_name
from tests.lab import config

pytestmark = pytest.mark.integration

PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks", "kvm_proxy_set_task.yml")
PREFIX = config.TEST_DOMAIN_PREFIX + "set-"
OWNER = PREFIX + "owner"
IMAGE = PREFIX + "tiny"


@pytest.fixture
def proxy_set(lab, lab_cleanup):
    """proxy_set(names, **options) -> the options of a kvm_proxy_set task on the lab; its VMs go before and after."""
    tiny = lab.images[config.TINY_QCOW2]
    base = base_volume_name(IMAGE, "qcow2", tiny["sha256"])
    lab_cleanup(volumes=[base, base + ".sha256"])

    def options(names, **changes):
        lab_cleanup(domains=names, volumes=[name + suffix for name in names for suffix in (".qcow2", "-seed.iso")])
        values = {
            "uri": lab.uri, "pool": lab.pool, "bridge": lab.bridge, "uid": OWNER, "vendor_data": "",
            "image": {"name": IMAGE, "url": tiny["url"], "checksum": "sha256:" + tiny["sha256"]},
            "virt_type": lab.virt_type, "cpu_mode": lab.cpu_mode, "memory_mib": 128, "disk_size_gb": 1,
            "shutdown_timeout": config.TINY_SHUTDOWN_TIMEOUT, "proxies": [{"name": name} for name in names],
        }
        values.update(changes)
        return values

    return options


def converge(run_playbook, options):
    run = run_playbook(PLAYBOOK, {"proxy_set": options})
    assert run.rc == 0, run
    return run.task_results("Show the result")[0]["kvm_proxy_set_result"]


def virsh(lab, *args):
    return subprocess.run(["virsh", "-q", "-c", lab.uri] + list(args), capture_output=True, text=True, check=False)


def test_a_member_destroyed_while_its_address_is_awaited_fails_in_seconds(lab, proxy_set, run_playbook):
    name = PREFIX + "awaited"
    options = proxy_set([name], wait_for_ip=True, wait_timeout=240)
    destroyed = {}

    def destroy_once_running():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and virsh(lab, "domstate", name).stdout.strip() != "running":
            time.sleep(0.5)
        time.sleep(3)  # the set is polling its address by now
        destroyed["at"] = time.monotonic()
        virsh(lab, "destroy", name)

    killer = threading.Thread(target=destroy_once_running)
    killer.start()
    result = converge(run_playbook, options)
    ended = time.monotonic()
    killer.join()
    assert result["failed"], result
    # libvirt reports the domain shut off, or still shutting down when the wait polls in the middle of the destroy.
    assert re.match(r"%s stopped while its address was awaited: %s \(state (shutoff|shutdown), bridge %s; " % (
        name, name, lab.bridge), result["msg"]), result["msg"]
    # Failed within seconds of the destroy (Ansible's own end included), not at wait_timeout.
    assert ended - destroyed["at"] < 30, ended - destroyed["at"]
    assert result["changed"] is True and "%s: start domain" % name in result["actions"]


def test_a_rename_whose_new_proxy_does_not_come_up_keeps_the_old_one_running(lab, proxy_set, run_playbook):
    old, new = PREFIX + "old", PREFIX + "new"
    created = converge(run_playbook, proxy_set([old]))
    assert not created.get("failed") and [p["outcome"] for p in created["proxies"]] == ["created"], created
    assert virsh(lab, "domstate", old).stdout.strip() == "running"

    renamed = converge(run_playbook, proxy_set([new], gc_grace_period=0, wait_for_ip=True, wait_timeout=10))
    assert renamed["failed"], renamed
    assert renamed["msg"].startswith("%s got no routable IPv4 within wait_timeout (10 s)" % new), renamed["msg"]
    assert ("; the roll stopped: %s, no longer listed, still runs: garbage collection removes a running proxy only once "
            "the new ones are up" % old) in renamed["msg"], renamed["msg"]
    # The hypervisor keeps its capacity: the old proxy was not touched.
    assert virsh(lab, "domstate", old).stdout.strip() == "running"
    assert not [action for action in renamed["actions"] if action.startswith(old + ":")]
