"""docs/role-egress_proxy.md's examples run on the lab's hypervisors over SSH, as a user would copy them.

The page's inventory files (the blocks headed ``# inventory/...``) are written to a directory ``inventory/``,
adapted by one rule (role_examples.LabRule); nothing else in an example changes:

| in an example                                   | on the lab                                                      |
| ------------------------------------------------ | --------------------------------------------------------------- |
| the host ``hv1.example.net`` / ``hv2.example.net`` | ``lab-hv1`` / ``lab-hv2`` (hosts.yml, a fleet entry's ``hypervisor``) |
| a host's connection variables                    | inventories/lab/hosts.yml's (root over SSH, host keys checked)  |
| a proxy's ``name``                               | prefixed ``eptest-roledoc-`` (the lab's names for tests)        |
| ``egress_proxy_image``, ``egress_proxy_bridge``  | inventories/lab/group_vars': the mirror's Debian guest, ``br0`` |
| the pool, virt type and CPU mode (defaults)      | inventories/lab's ``egress``, ``qemu``, ``none`` (no nested KVM) |
| packages and vendor-data (defaults)              | none, as inventories/lab's: the image has squid and the agent   |
| clients ``10.20.0.0/16``, backup hosts ``10.20.7.0/24`` | lab-hv1's LAN ``198.18.11.0/24``; ``198.18.11.0/28`` (with the LAN namespace) |
| the hypervisor on the bridge ``10.20.0.2/32``    | the LAN namespace ``198.18.11.1/32``, ``egress_proxy_verify_netns`` (no address on br0) |
| the bucket ``backup.example-bucket.net``         | the LAN's origin ``198.18.11.1`` (every lab address is internal)    |
| a vaulted password ``{{ vault_... }}``           | a password of the run's, in ``group_vars/all.yml``              |

Everything else stays: each proxy's memory and disk, the role's defaults for what the page leaves out (its wait
for the addresses included), the client networks, the owner. In order:

1. Quick start, its command as written (``ansible-playbook -i inventory egress_proxies.kvm.deploy``): egress-a
   and egress-b boot on lab-hv1 (the only booting run), each Running with an address, egress-b with 2048 MiB.
2. The same command again, followed by the play of "The fact egress_proxy_proxies": nothing changes, and each
   running proxy is added as a host.
3. The fleet list ("One list for the fleet"), instead of the Quick start's per-host list, run by the ``serial: 1``
   play of "Across hypervisors" in check mode: the fleet's placement is a prediction (egress-b created on
   lab-hv2, egress-a unchanged on lab-hv1, egress-b left there within the grace period), so no second boot;
   the hypervisors run one after the other; nothing changes on them.
4. "Rolling an allowlist out" on the Quick start's inventory with the variables of "Profiles and report mode" added,
   on the same proxies, at once (their first boot may still be going on: the first deploy waits for it): its deploy
   command, then from the backup hosts the bucket passes, another destination is
   forwarded (report mode) and the user ci is refused the bucket; its status command shows WOULD DENY 1 on the proxy
   asked and the access log the decisions; a second bucket allowed (step 3) starts the counts from zero; enforced
   (step 4), the other destination gets squid's 403. Each deploy updates both proxies in place, on the same domains.
5. The destroy play of "Entry points" on the Quick start inventory: both proxies are gone with their volumes.

role_examples.NOT_RUN lists the page's other blocks, with the reason.
"""

import base64
import json
import time

import pytest

from tests.integration import examples, role_examples
from tests.integration.fleet_fixtures import fetch, in_guest
from tests.lab import config, hypervisors

pytest_plugins = ["tests.integration.fleet_fixtures"]
pytestmark = pytest.mark.integration

QUICK_START, FLEET, SERIAL = role_examples.QUICK_START, role_examples.FLEET, role_examples.SERIAL
DESTROY, FACT = role_examples.DESTROY, role_examples.FACT
PROFILES, ROLLOUT = role_examples.PROFILES, role_examples.ROLLOUT
CONVERGE_TASK = "Converge the proxies of this hypervisor"
STATUS_ROWS_TASK = "Show the same rows as JSON"
RECORD_TASK = "Record the proxies of this hypervisor in egress_proxy_proxies"
HV1, HV2 = "lab-hv1", "lab-hv2"


def ours(spec, kind):
    """This test's domains ({name: state}) or volumes (names) on a hypervisor, entering its namespaces."""
    if kind == "domains":
        listed = hypervisors.virsh(spec, "list", "--all", "--name").stdout.split()
        return {domain: hypervisors.virsh(spec, "domstate", domain).stdout.strip()
                for domain in listed if domain.startswith(role_examples.NAME_PREFIX)}
    hypervisors.virsh(spec, "pool-refresh", config.HV_POOL_NAME)
    listed = hypervisors.virsh(spec, "vol-list", config.HV_POOL_NAME).stdout.split()[0::2]
    return sorted(volume for volume in listed if volume.startswith(role_examples.NAME_PREFIX))


def memory_mib(spec, domain):
    (kib,) = [line.split()[2] for line in hypervisors.virsh(spec, "dominfo", domain).stdout.splitlines()
              if line.startswith("Max memory:")]
    return int(kib) // 1024


def remove_ours(specs):
    for spec in specs:
        for domain, state in ours(spec, "domains").items():
            if state != "shut off":
                hypervisors.virsh(spec, "destroy", domain, check=False)
            hypervisors.virsh(spec, "undefine", domain, "--nvram")
        for volume in ours(spec, "volumes"):
            hypervisors.virsh(spec, "vol-delete", volume, "--pool", config.HV_POOL_NAME)


@pytest.fixture
def clean_roledoc(hv_fleet):
    """None of this test's proxies on the lab's hypervisors before the test, nor after."""
    remove_ours(hv_fleet.specs)
    yield
    remove_ours(hv_fleet.specs)


def changed_tasks(run, play):
    """(host, task name) of each task of the run's play that reported a change."""
    return [(host, task["task"]["name"]) for task in run.result["plays"][play]["tasks"]
            for host, result in task["hosts"].items() if result.get("changed")]


def domain_ids(spec, proxies):
    return {proxy: hypervisors.virsh(spec, "domuuid", proxy).stdout.strip() for proxy in proxies}


def would_deny_counts(hv_fleet, directory, status, proxies):
    """{proxy: its WOULD DENY} of status.yml's rows of ``proxies`` (the hypervisor's others, scripts/demo's, are shown
    too), run once as the page says, right after a policy change: squid's first answer on the metrics port after one
    lacks the counts, and status.yml reads such a page again ("The count of decisions")."""
    run = hv_fleet.command(directory, status)
    assert run.rc == 0, run
    (shown,) = run.results(STATUS_ROWS_TASK, HV1)
    return {row["name"]: row["would_deny"] for row in shown["status_rows"] if row["name"] in proxies}


def roll_out(hv_fleet, rule, quick_files, tmp_path, ips):
    """"Rolling an allowlist out", on the Quick start's running proxies, step by step as the page says; the seconds of
    each deploy. Every deploy is a policy change in place: each proxy updated, on the same domain."""
    spec = hv_fleet.hv1
    files = role_examples.profile_files(quick_files, role_examples.inventory_files(PROFILES))
    directory = tmp_path / "rollout"
    inventory = rule.inventory(files)
    (deploy, status) = [argv for block in role_examples.section_blocks(ROLLOUT) for argv in block.commands()]
    ids = domain_ids(spec, ips)
    first, second = sorted(ips)
    seconds = []

    def deployed(group_vars):
        role_examples.write_inventory(directory, dict(inventory, **{"group_vars/hypervisors.yml": group_vars}))
        run = hv_fleet.command(directory, deploy)
        assert run.rc == 0, run
        outcomes = {proxy: entry["outcome"] for proxy, entry in run.items(CONVERGE_TASK, HV1).items()}
        assert outcomes == dict.fromkeys(ips, "updated"), outcomes
        assert domain_ids(spec, ips) == ids
        seconds.append(run.seconds)

    def ask(user, url):
        credentials = "%s:%s" % (user, rule.secrets["vault_egress_proxy_%s_password" % user])
        return fetch(spec, "http://%s:3128" % ips[first], url, credentials)[0]

    def logged(text, seconds=15):
        """The count of access.log's lines holding ``text``, once one is there: squid writes the file through its
        log daemon, which buffers, so a request's line lands a moment after its answer."""
        deadline = time.monotonic() + seconds
        while True:
            found = in_guest(spec, first, "/bin/grep", "-c", text, "/var/log/squid/access.log")
            count = int(base64.b64decode(found.get("out-data", "")) or 0)
            if count or time.monotonic() > deadline:
                return count
            time.sleep(1)

    # 1. The profiles, backup in report mode: from the backup hosts (the LAN namespace), backup's bucket passes and
    # another destination is forwarded, judged would_deny; the user ci, enforced, is refused the bucket.
    group_vars = inventory["group_vars/hypervisors.yml"]
    deployed(group_vars)
    bucket, other = spec.origin_url(spec.lan_address) + "eptest-rollout", "http://eptest-other.example/"
    assert (ask("backup", bucket), ask("ci", bucket)) == (200, 403)
    assert ask("backup", other) != 403
    # 2. status.yml's WOULD DENY, and the access lines' fields.
    assert would_deny_counts(hv_fleet, directory, status, ips) == {first: 1, second: 0}
    assert logged(" decision=would_deny profile=backup rule=not_allowed") == 1
    # ci's refusal of the bucket, by ci's profile (its rule deny_internal: on the lab the bucket is an internal address).
    assert logged(" decision=deny profile=ci rule=deny_internal") == 1
    # 3. A second bucket allowed, still in report mode: the counts start from zero.
    (ci, backup) = group_vars["egress_proxy_profiles"]
    group_vars = dict(group_vars, egress_proxy_profiles=[ci, dict(backup, allowed_destinations=backup[
        "allowed_destinations"] + ["backup-2.example-bucket.net"])])
    deployed(group_vars)
    assert would_deny_counts(hv_fleet, directory, status, ips) == {first: 0, second: 0}
    # 4. Enforced (mode: report removed): refused with squid's 403, the line says deny.
    (ci, backup) = group_vars["egress_proxy_profiles"]
    deployed(dict(group_vars, egress_proxy_profiles=[ci, {key: value for key, value in backup.items() if key != "mode"}]))
    assert (ask("backup", other), ask("backup", bucket)) == (403, 200)
    assert logged(" decision=deny profile=backup rule=not_allowed") == 1
    return seconds


def write_playbook(directory, file_name, plays):
    (directory / file_name).write_text(json.dumps(plays, indent=1))
    return file_name


@pytest.mark.boot
@pytest.mark.usefixtures("clean_roledoc")
def test_the_role_pages_examples_run_as_written_on_the_lab(hv_fleet, tmp_path):
    rule = role_examples.LabRule(hv_fleet.hv1)
    quick_files = role_examples.inventory_files(QUICK_START)
    quick = tmp_path / "quick-start"
    role_examples.write_inventory(quick, rule.inventory(quick_files))
    (command,) = [argv for block in role_examples.section_blocks(QUICK_START) for argv in block.commands()]
    proxies = [role_examples.named("egress-a"), role_examples.named("egress-b")]

    deployed = hv_fleet.command(quick, command)
    assert deployed.rc == 0, deployed
    assert ours(hv_fleet.hv1, "domains") == dict.fromkeys(proxies, "running")
    assert ours(hv_fleet.hv2, "domains") == {}
    (recorded,) = deployed.results(RECORD_TASK, HV1)
    listed = {proxy["name"]: proxy for proxy in recorded["ansible_facts"]["egress_proxy_proxies"]}
    assert sorted(listed) == proxies
    assert all(proxy["state"] == "Running" and proxy["ip"] for proxy in listed.values()), listed
    # The page's fact section: kvm_proxy's result keys and outcome.
    keys = set(examples.return_docs("kvm_proxy")) | {"outcome"}
    assert all(keys <= set(proxy) for proxy in listed.values()), [keys - set(proxy) for proxy in listed.values()]
    assert [memory_mib(hv_fleet.hv1, proxy) for proxy in proxies] == [1024, 2048]

    # The command's playbook by name, then the page's play that uses the fact.
    again_plays = [{"ansible.builtin.import_playbook": command[-1]}] + role_examples.section_plays(FACT)
    again = hv_fleet.command(quick, command[:-1] + [write_playbook(quick, "again.yml", again_plays)])
    assert again.rc == 0, again
    # The deploy changed nothing (add_host reports a change for each host it adds to the run's inventory).
    assert changed_tasks(again, play=0) == [], again
    (added,) = again.results("Add each running proxy as a host", HV1)
    assert sorted(item["add_host"]["host_name"] for item in added["results"]) == proxies

    fleet_files = role_examples.fleet_files(quick_files, role_examples.inventory_files(FLEET))
    fleet = tmp_path / "fleet"
    role_examples.write_inventory(fleet, rule.inventory(fleet_files, role_examples.fleet_hosts(fleet_files)))
    serial = write_playbook(fleet, "serial.yml", role_examples.section_plays(SERIAL))
    predicted = hv_fleet.command(fleet, ["ansible-playbook", "-i", "inventory", serial, "--check"])
    assert predicted.rc == 0, predicted
    outcomes = {host: {proxy: entry["outcome"] for proxy, entry in predicted.items(CONVERGE_TASK, host).items()}
                for host in (HV1, HV2)}
    assert outcomes == {HV1: {role_examples.named("egress-a"): "unchanged"},
                        HV2: {role_examples.named("egress-b"): "created", role_examples.named("egress-old"): "absent"}}, outcomes
    (converged,) = predicted.results(CONVERGE_TASK, HV1)
    assert [entry["name"] for entry in converged["spared"]] == [role_examples.named("egress-b")], converged
    # One hypervisor at a time: each batch of the play converges one host, lab-hv1's before lab-hv2's.
    batches = [sorted(task["hosts"]) for play in predicted.result["plays"] for task in play["tasks"]
               if task["task"]["name"].endswith(CONVERGE_TASK) and task["hosts"]]
    assert batches == [[HV1], [HV2]], batches
    assert ours(hv_fleet.hv1, "domains") == dict.fromkeys(proxies, "running")
    assert ours(hv_fleet.hv2, "domains") == {}

    # "Rolling an allowlist out" on the same proxies: policy changes, in place.
    rolled = roll_out(hv_fleet, rule, quick_files, tmp_path, {name: listed[name]["ip"] for name in proxies})

    destroy = write_playbook(quick, "destroy.yml", role_examples.section_plays(DESTROY))
    destroyed = hv_fleet.command(quick, command[:-1] + [destroy])
    assert destroyed.rc == 0, destroyed
    assert destroyed.stats(HV1)["changed"] > 0, destroyed
    assert [ours(spec, kind) for spec in hv_fleet.specs for kind in ("domains", "volumes")] == [{}, [], {}, []]
    print("quick start %.0f s, again %.0f s, fleet --check %.0f s, roll-out deploys %s s, destroy %.0f s" % (
        deployed.seconds, again.seconds, predicted.seconds, ", ".join("%.0f" % took for took in rolled),
        destroyed.seconds))
