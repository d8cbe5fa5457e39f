"""playbooks/deploy.yml, destroy.yml and verify.yml (the egress_proxy role) on the lab's libvirtd.

Most proxies here boot the lab's small non-booting image, so a run takes seconds: that checks the
role's conversation with libvirt (check mode, idempotence, drift through the rendered user-data,
state absent, destroy, bad input refused before anything is touched). The booted proxy that proves
the role's cloud-init makes squid forward for the allowed clients and refuse the others, and both
paths of verify.yml, is test_networking's two-NIC proxy: the suite boots one guest for both. The
molecule scenario (molecule/default) runs from here too, so the test command covers it.
"""

import os
import subprocess

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import read_iso
from tests.lab import config
from tests.unit.role_templates import EXPORTER_DEFAULTS, squid_parsed, user_data_parts

pytestmark = pytest.mark.integration

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(REPO_ROOT, "playbooks", "deploy.yml")
DESTROY = os.path.join(REPO_ROOT, "playbooks", "destroy.yml")
VENV_BIN = os.path.join(REPO_ROOT, ".venv", "bin")

RUNNING = config.TEST_DOMAIN_PREFIX + "role-1"
STOPPED = config.TEST_DOMAIN_PREFIX + "role-2"
# Its own cache name: no other test's clean-up removes the base these VMs back onto.
IMAGE_NAME = "tiny-role"

CONVERGE_TASK = "Converge the proxies of this hypervisor"
# What squid -k parse reads from the role's squid.conf for role_vars(): the template's directives, none of a value's
# (deny_internal's networks, squid.conf.j2's own list, elided).
SQUID_DIRECTIVES = [
    "http_port 3128",
    # The metrics (the role's default): squid serves the exporter on 9301, the cache manager to it alone.
    "http_port 9301 accel defaultsite=metrics name=egress_metrics", "http_port 127.0.0.1:13128 name=egress_manager",
    "cache_peer 127.0.0.1 parent 19301 0 no-query originserver name=egress_exporter",
    "acl egress_metrics myportname egress_metrics", "acl egress_manager myportname egress_manager",
    "acl egress_metrics_clients src 198.18.0.0/24", "cache_peer_access egress_exporter allow egress_metrics",
    "cache_peer_access egress_exporter deny all",
    "acl egress_clients src 198.18.0.0/24", "acl safe_ports port 80 443 1025-65535",
    "acl connect_ports port 443", "acl CONNECT method CONNECT", "acl internal_destinations dst ...",
    "http_access allow egress_metrics egress_metrics_clients !manager", "http_access deny egress_metrics",
    "http_access allow egress_manager manager localhost", "http_access deny egress_manager", "http_access deny manager",
    "http_access deny !safe_ports", "http_access deny CONNECT !connect_ports", "http_access deny !egress_clients",
    "http_access deny internal_destinations", "http_access allow all",
    "forwarded_for delete", "via off", "cache deny all", 'reply_header_add X-Egress-Proxy "%s" all' % STOPPED,
    "coredump_dir /var/spool/squid", "shutdown_lifetime 3 seconds",
]
REMOVE_TASK = "Remove the proxies and their disks"
# A proxy on the same base that a destroy does not list (test_destroy_with_the_image_keeps...).
OTHER = config.TEST_DOMAIN_PREFIX + "role-other"


def role_vars(lab, **overrides):
    """The role's variables for the lab, as extra vars (the test inventory has only localhost)."""
    image = lab.images[config.TINY_QCOW2]
    variables = {
        "egress_proxy_hosts": "localhost",
        "egress_proxy_uri": lab.uri,
        "egress_proxy_pool": lab.pool,
        "egress_proxy_bridge": lab.bridge,
        "egress_proxy_image": {"name": IMAGE_NAME, "url": image["url"], "checksum": "sha256:" + image["sha256"]},
        "egress_proxy_virt_type": lab.virt_type,
        "egress_proxy_cpu_mode": lab.cpu_mode,
        "egress_proxy_memory_mib": 128,
        "egress_proxy_disk_size_gb": 1,
        "egress_proxy_install_packages": False,
        "egress_proxy_allowed_clients": ["198.18.0.0/24"],
        "egress_proxy_uid": "role-test",
        # The image never boots: no address to wait for, no guest to act on an ACPI shutdown.
        "egress_proxy_wait_for_ip": False,
        "egress_proxy_shutdown_timeout": config.TINY_SHUTDOWN_TIMEOUT,
        "egress_proxy_instances": [{"name": RUNNING}, {"name": STOPPED, "state": "stopped"}],
    }
    variables.update(overrides)
    return variables


def results(run, task_suffix, host="localhost"):
    """The result of every task whose name ends with task_suffix (role tasks carry the role's name first)."""
    return [task["hosts"][host] for play in run.result["plays"] for task in play["tasks"]
            if task["task"]["name"].endswith(task_suffix) and host in task["hosts"]]


def item_results(run, task_suffix):
    """{proxy name: its entry} of the one kvm_proxy_set task whose name ends with task_suffix."""
    (task,) = results(run, task_suffix)
    return {entry["name"]: entry for entry in task["proxies"]}


def changed(run):
    return run.result["stats"]["localhost"]["changed"]


def virsh(*args):
    return subprocess.run(["virsh", "-q", "-c", config.LIBVIRT_URI] + list(args), capture_output=True, text=True, check=False)


def domain_state(name):
    """libvirt's state of the domain, or None when there is no such domain."""
    completed = virsh("domstate", name)
    return completed.stdout.strip() if completed.returncode == 0 else None


def seeded_squid_conf(lab, name):
    """The squid.conf the role's user-data writes, as the proxy's seed volume holds it."""
    seed = subprocess.run(["virsh", "-q", "-c", config.LIBVIRT_URI, "vol-download", "--pool", lab.pool, name + "-seed.iso",
                           "/dev/stdout"], capture_output=True, check=True).stdout
    # The user-data is a MIME multi-part, as cloud-init reads it: the role's cloud-config, then the policy's files.
    user_data, policy = (yaml.safe_load(part) for part in user_data_parts(read_iso(seed)["user-data"]))
    # It writes the exporter's arguments only; squid's files are the policy's.
    assert [entry["path"] for entry in user_data["write_files"]] == [EXPORTER_DEFAULTS]
    (squid_conf,) = [entry["content"] for entry in policy["write_files"] if entry["path"] == "/etc/squid/squid.conf"]
    return squid_conf


def folded(directives):
    """``directives`` with deny_internal's acl lines as one, "acl internal_destinations dst ..."."""
    internal = [line for line in directives if line.startswith("acl internal_destinations dst ")]
    return [line if line != internal[0] else "acl internal_destinations dst ..."
            for line in directives if line not in internal[1:]]


def pool_volumes(lab):
    virsh("pool-refresh", lab.pool)
    return set(virsh("vol-list", lab.pool).stdout.split()[0::2])


@pytest.fixture
def clean(lab, run_playbook):
    """Nothing of this test's on the lab before and after it (the destroy playbook, then a check)."""

    def destroy():
        # Whichever owner a test left the proxies with.
        everything = [{"name": RUNNING}, {"name": STOPPED}, {"name": OTHER}]
        run = run_playbook(DESTROY, role_vars(lab, egress_proxy_remove_image=True, egress_proxy_adopt_uids=["*"],
                                              egress_proxy_instances=everything))
        assert run.rc == 0, run
        assert domain_state(RUNNING) is None and domain_state(STOPPED) is None and domain_state(OTHER) is None
        assert not [volume for volume in pool_volumes(lab) if volume.startswith("base-" + IMAGE_NAME)]

    destroy()
    yield
    destroy()


def test_deploy_is_predicted_idempotent_follows_drift_and_destroy_cleans_up(lab, run_playbook, clean, tmp_path):
    predicted = run_playbook(DEPLOY, role_vars(lab), check=True)
    assert predicted.rc == 0, predicted
    planned = item_results(predicted, CONVERGE_TASK)
    assert planned[RUNNING]["changed"] and "define domain" in planned[RUNNING]["actions"]
    assert "start domain" in planned[RUNNING]["actions"]
    assert "start domain" not in planned[STOPPED]["actions"]
    assert domain_state(RUNNING) is None, "check mode created a domain"

    deployed = run_playbook(DEPLOY, role_vars(lab))
    assert deployed.rc == 0, deployed
    converged = item_results(deployed, CONVERGE_TASK)
    # The set makes the image ready once, before its proxies: predicted in check mode, downloaded for real, and
    # the proxies find it ready either way.
    ((predicted_image,),) = [result["images"] for result in results(predicted, CONVERGE_TASK)]
    ((cached,),) = [result["images"] for result in results(deployed, CONVERGE_TASK)]
    assert predicted_image["downloaded"] and predicted_image["changed"] and predicted_image["volume"] == cached["volume"]
    assert cached["changed"] and cached["downloaded"]
    for name in (RUNNING, STOPPED):
        assert "fetch base image" not in planned[name]["actions"]
        assert converged[name]["actions"] == planned[name]["actions"]
    assert converged[RUNNING]["id"] == "hosts/localhost/domains/" + RUNNING
    assert domain_state(RUNNING) == "running"
    assert domain_state(STOPPED) == "shut off"
    # squid reads exactly the template's directives from the seed the role wrote (issue 31 item 1).
    assert folded(squid_parsed(seeded_squid_conf(lab, STOPPED), tmp_path)) == SQUID_DIRECTIVES
    # The role's report: the fact other plays use, and what it printed.
    (recorded,) = results(deployed, "Record the proxies of this hypervisor in egress_proxy_proxies")
    proxies = {proxy["name"]: proxy for proxy in recorded["ansible_facts"]["egress_proxy_proxies"]}
    assert proxies[RUNNING]["state"] == "Provisioning" and proxies[RUNNING]["uid"] == "role-test"
    assert proxies[STOPPED]["state"] == "Stopped"
    (shown,) = results(deployed, "Show the proxies of this hypervisor")
    assert "hosts/localhost/domains/%s Provisioning no address" % RUNNING in shown["msg"]
    created_at = proxies[RUNNING]["created_at"]

    for check in (True, False):
        again = run_playbook(DEPLOY, role_vars(lab), check=check)
        assert again.rc == 0, again
        assert changed(again) == 0, again

    # Another client network changes the rendered squid.conf, the proxy's policy, not its spec: it is applied in
    # place through the guest agent, which this image never runs. The task fails naming the proxy (by default), or
    # with on_unreachable_agent=replace the running proxy is replaced; the stopped one keeps its own allowed_clients
    # and is left alone. A wait_timeout shorter than the proxy's age: a proxy created within it may still be in its
    # first boot, and the run would wait that long for its agent before it fails.
    drift = role_vars(lab, egress_proxy_allowed_clients=["198.18.0.0/25"], egress_proxy_wait_timeout=5,
                      egress_proxy_instances=[{"name": RUNNING},
                                              {"name": STOPPED, "state": "stopped", "allowed_clients": ["198.18.0.0/24"]}])
    silent = run_playbook(DEPLOY, drift)
    assert silent.rc != 0, silent
    (refused,) = results(silent, CONVERGE_TASK)
    assert "proxy '%s'" % RUNNING in refused["msg"] and "did not answer" in refused["msg"], refused["msg"]
    drifted = run_playbook(DEPLOY, dict(drift, egress_proxy_on_unreachable_agent="replace"))
    assert drifted.rc == 0, drifted
    replaced = item_results(drifted, CONVERGE_TASK)
    assert replaced[RUNNING]["outcome"] == "replaced" and replaced[RUNNING]["changed"]
    assert "undefine domain" in replaced[RUNNING]["actions"] and "define domain" in replaced[RUNNING]["actions"]
    assert not replaced[STOPPED]["changed"]
    assert domain_state(RUNNING) == "running"
    (recorded,) = results(drifted, "Record the proxies of this hypervisor in egress_proxy_proxies")
    assert [p["created_at"] for p in recorded["ansible_facts"]["egress_proxy_proxies"] if p["name"] == RUNNING] != [created_at]

    # state absent on one entry removes that proxy with its disks and leaves the other alone.
    retire = role_vars(lab, egress_proxy_instances=[{"name": RUNNING, "state": "absent"},
                                                    {"name": STOPPED, "state": "stopped", "allowed_clients": ["198.18.0.0/24"]}])
    retired = run_playbook(DEPLOY, retire)
    assert retired.rc == 0, retired
    after_retire = item_results(retired, CONVERGE_TASK)
    assert after_retire[RUNNING]["changed"] and not after_retire[STOPPED]["changed"]
    assert domain_state(RUNNING) is None and domain_state(STOPPED) == "shut off"
    assert RUNNING + ".qcow2" not in pool_volumes(lab)

    # Check mode predicts the image's removal too: the proxies it removes first no longer count as its users.
    before = pool_volumes(lab)
    predicted = run_playbook(DESTROY, role_vars(lab, egress_proxy_remove_image=True), check=True)
    assert predicted.rc == 0, predicted
    (image_removal,) = results(predicted, "Remove the cached base image")
    assert image_removal["changed"], image_removal
    assert pool_volumes(lab) == before and domain_state(STOPPED) == "shut off"

    destroyed = run_playbook(DESTROY, role_vars(lab))
    assert destroyed.rc == 0, destroyed
    removed = item_results(destroyed, REMOVE_TASK)
    assert not removed[RUNNING]["changed"] and removed[STOPPED]["changed"]
    assert domain_state(RUNNING) is None and domain_state(STOPPED) is None
    left = pool_volumes(lab)
    for name in (RUNNING, STOPPED):
        assert name + ".qcow2" not in left and name + "-seed.iso" not in left
    # The base image stays unless asked for.
    assert any(volume.startswith("base-" + IMAGE_NAME) for volume in left)

    again = run_playbook(DESTROY, role_vars(lab))
    assert again.rc == 0, again
    assert changed(again) == 0, again


IMAGE_KEPT_TASK = "Warn that the image is kept"


def test_destroy_with_the_image_keeps_an_image_another_proxy_uses_decided_before_removing_anything(lab, run_playbook, clean):
    """A proxy the destroy does not list on the same base: the listed proxy goes, the image stays with a warning naming
    the other's disk, the report runs, and check mode predicts exactly that (issue 31 item 10)."""
    assert run_playbook(DEPLOY, role_vars(lab, egress_proxy_instances=[{"name": RUNNING}, {"name": OTHER}])).rc == 0
    before = pool_volumes(lab)
    base = [volume for volume in before if volume.startswith("base-" + IMAGE_NAME) and not volume.endswith(".sha256")]

    listed = role_vars(lab, egress_proxy_instances=[{"name": RUNNING}], egress_proxy_remove_image=True)
    for check in (True, False):
        run = run_playbook(DESTROY, listed, check=check)
        assert run.rc == 0, run
        (warning,) = results(run, IMAGE_KEPT_TASK)
        assert "image %s %s kept" % (IMAGE_NAME, "would be" if check else "is") in warning["msg"], warning
        assert OTHER + ".qcow2" in warning["msg"] and "before any proxy was removed" in warning["msg"], warning
        (image_removal,) = results(run, "Remove the cached base image")
        assert image_removal.get("skipped"), image_removal
        (shown,) = results(run, "Show the proxies of this hypervisor")
        assert shown["msg"] == ["hosts/localhost/domains/%s %s" % (RUNNING, "(would be removed)" if check else "removed")], shown
        if check:
            assert pool_volumes(lab) == before and domain_state(RUNNING) == "running"
    assert domain_state(RUNNING) is None and domain_state(OTHER) == "running"
    assert base and set(base) <= pool_volumes(lab)


def test_owner_is_stable_another_owner_is_reported_and_adoption_is_explicit(lab, run_playbook, clean):
    default_owner = {key: value for key, value in role_vars(lab).items() if key != "egress_proxy_uid"}
    deployed = run_playbook(DEPLOY, default_owner)
    assert deployed.rc == 0, deployed
    created = item_results(deployed, CONVERGE_TASK)
    assert created[RUNNING]["uid"] == created[STOPPED]["uid"] == "egress_proxies.kvm.egress_proxy"

    # A new owner on matching proxies: reported, nothing refused, nothing touched.
    new_owner = dict(default_owner, egress_proxy_uid="role-test-next")
    reported = run_playbook(DEPLOY, new_owner)
    assert reported.rc == 0, reported
    kept = item_results(reported, CONVERGE_TASK)
    # The result names the owner (kvm_proxy warns too: its unit tests check the wording).
    for name in (RUNNING, STOPPED):
        assert not kept[name]["changed"] and kept[name]["uid"] == "egress_proxies.kvm.egress_proxy"
    assert domain_state(STOPPED) == "shut off"

    # Adopting the old owner records the new one in place: no replacement, and then nothing to do.
    adopt = dict(new_owner, egress_proxy_adopt_uids=["egress_proxies.kvm.egress_proxy"])
    adopted = run_playbook(DEPLOY, adopt)
    assert adopted.rc == 0, adopted.failures()
    recorded = item_results(adopted, CONVERGE_TASK)
    for name in (RUNNING, STOPPED):
        assert recorded[name]["actions"] == ["record owner"] and recorded[name]["uid"] == "role-test-next"
        assert recorded[name]["created_at"] == created[name]["created_at"]
    again = run_playbook(DEPLOY, adopt)
    assert again.rc == 0 and changed(again) == 0, again


@pytest.mark.parametrize("overrides, words", [
    ({"egress_proxy_instances": [{"name": RUNNING, "vcpus": "many"}]}, "vcpus"),
    ({"egress_proxy_instances": [{"name": RUNNING, "memory": 512}]}, "memory"),
    ({"egress_proxy_instances": [{"name": RUNNING, "state": "running"}]}, "running"),
    ({"egress_proxy_instances": [{"name": "Egress_1"}]}, "is not a valid VM name"),
    ({"egress_proxy_instances": [{"name": RUNNING}, {"name": RUNNING}]}, "appears more than once"),
    ({"egress_proxy_bridge": ""}, "exactly one of"),
    ({"egress_proxy_network": "default"}, "exactly one of"),
    ({"egress_proxy_image": None}, "egress_proxy_image"),
    ({"egress_proxy_allowed_clients": []}, "allowed_clients"),
    ({"egress_proxy_allowed_clients": ["198.18.0.0/24 all"]}, "allowed_clients"),
    ({"egress_proxy_port": 70000}, "port 70000"),
    ({"egress_proxy_uid": ""}, "empty owner"),
    # What only the modules checked before (issue 12 point 5, issue 17): now refused before libvirt too.
    ({"egress_proxy_allowed_clients": ["300.1.1.1/99", "::::"]}, "'300.1.1.1/99', '::::' are not IPv4 or IPv6"),
    ({"egress_proxy_safe_ports": ["70000", "0-99999"]}, "egress_proxy_safe_ports '70000', '0-99999' are not ports"),
    # Issue 31: a scope id carrying a directive of its own, and digits of another script.
    ({"egress_proxy_allowed_clients": ["198.18.0.0/24", "::1%1\nhttp_access allow all\n#"]},
     "allowed_clients '::1%1\\nhttp_access allow all\\n#' are not IPv4 or IPv6"),
    ({"egress_proxy_safe_ports": ["\u0668\u0660"]}, "egress_proxy_safe_ports '\u0668\u0660' are not ports"),
    ({"egress_proxy_safe_ports": ["\u00b2"]}, "egress_proxy_safe_ports '\u00b2' are not ports"),
    ({"egress_proxy_memory_mib": 64}, "memory_mib"),
    ({"egress_proxy_shutdown_timeout": -1}, "shutdown_timeout"),
    ({"egress_proxy_max_unavailable": 0}, "max_unavailable"),
    ({"egress_proxy_gc_grace_period": -5}, "gc_grace_period"),
    ({"egress_proxy_instances": [{"name": RUNNING, "mac": "52:54:zz:00:00:01"}]}, "MAC address"),
    # Issue 26: the policy's entries, named with their index; a password never quoted.
    ({"egress_proxy_allowed_destinations": ["deb.debian.org", "*.example.com"]},
     "allowed_destinations[1] '*.example.com': neither a host name"),
    ({"egress_proxy_denied_destinations": ["10.0.0.0/33"]}, "denied_destinations[0] '10.0.0.0/33'"),
    ({"egress_proxy_users": [{"name": "ci", "password": ""}]}, 'users[0] ("ci") of %s on localhost: the password is empty' % RUNNING),
    ({"egress_proxy_users": [{"name": "c i", "password": "x"}]}, "users[0].name 'c i' is not"),
    ({"egress_proxy_deny_internal": "sometimes"}, "egress_proxy_deny_internal"),
])
def test_bad_input_fails_before_anything_is_touched(lab, run_playbook, overrides, words):
    run = run_playbook(DEPLOY, role_vars(lab, **overrides), check=True)
    assert run.rc != 0, run
    failures = [result for play in run.result["plays"] for task in play["tasks"]
                for result in task["hosts"].values() if result.get("failed")]
    assert failures, run
    message = failures[0].get("msg", "")
    if "results" in failures[0]:
        message += " ".join(item.get("msg", "") for item in failures[0]["results"] if item.get("failed"))
    assert words in message, message
    touched = [task["task"]["name"] for play in run.result["plays"] for task in play["tasks"]
               if task["task"]["name"].endswith(CONVERGE_TASK)]
    assert touched == [], "a module ran before the input was refused: %s" % touched
    assert domain_state(RUNNING) is None


def test_waiting_for_an_address_fails_naming_the_proxy_and_the_limit(lab, run_playbook, clean):
    # The small image never boots, so no address ever comes: one limit for the set, no retries to show.
    variables = role_vars(lab, egress_proxy_instances=[{"name": RUNNING}], egress_proxy_wait_for_ip=True,
                          egress_proxy_wait_timeout=6)
    run = run_playbook(DEPLOY, variables)
    assert run.rc != 0, run
    (converged,) = results(run, CONVERGE_TASK)
    assert converged["failed"]
    assert "%s got no routable IPv4 within wait_timeout (6 s)" % RUNNING in converged["msg"]
    assert "attempts" not in converged
    # The proxy itself was created, and the failure says so.
    assert "%s: define domain" % RUNNING in converged["actions"]
    assert domain_state(RUNNING) == "running"


# The scenario runs on lab-hv1 and lab-hv2 (inventories/lab), whose lane kills modules on them in its fault tests:
# it runs in that lane.
@pytest.mark.hypervisors
def test_molecule_default_scenario(lab):
    """molecule/default: converge, idempotence, verify (kvm_proxy_info) and destroy on the lab."""
    env = dict(os.environ, PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""), ANSIBLE_NOCOLOR="true", NO_COLOR="1")
    completed = subprocess.run([os.path.join(VENV_BIN, "molecule"), "test"], cwd=REPO_ROOT, env=env,
                               capture_output=True, text=True, timeout=1200, check=False)
    assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-3000:]
    for action in ("converge", "idempotence", "verify", "destroy"):
        assert "%s: Executed: Successful" % action in completed.stdout + completed.stderr, action
