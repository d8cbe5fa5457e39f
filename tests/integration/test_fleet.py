"""The role and playbooks across the lab's hypervisors, each reached over its own sshd (docs/dev/lab.md).

Every hypervisor here is a host of its own (own network, mount and UTS namespaces, sshd, libvirtd,
pool, bridge and LAN); Ansible connects with ansible_connection ssh, host keys checked, forks 5.
The proxies boot the small non-booting image, so a run takes seconds; test_converge.py's rolling
test boots the Debian guest on two hypervisors at once.
"""

import json
import os
import re
import subprocess

import pytest
import yaml

from tests.lab import config, hypervisors
from tests.lab.fleet_runs import PREFIX, REPO_ROOT, overlap

pytest_plugins = ["tests.integration.fleet_fixtures"]
pytestmark = pytest.mark.integration

CONVERGE_TASK = "Converge the proxies of this hypervisor"
# The role's only module call on a hypervisor in a deploy: libvirt reached, the image made ready, the proxies converged.
TOUCHING_TASKS = (CONVERGE_TASK,)
HV1, HV2 = "lab-hv1", "lab-hv2"
# Another deployment on the lab, as scripts/demo's: outside this module's names (PREFIX) and owner.
BYSTANDER, BYSTANDER_OWNER = config.TEST_DOMAIN_PREFIX + "bystander", "eptest-bystander-owner"
with open(os.path.join(REPO_ROOT, "roles", "egress_proxy", "defaults", "main.yml")) as _defaults:
    # The role's default bound on reaching libvirt: the modules' keepalive bound.
    CONNECT_TIMEOUT = yaml.safe_load(_defaults)["egress_proxy_connect_timeout"]


def name(suffix):
    return PREFIX + suffix


def spread(hv_fleet, **overrides):
    """One per-host list (on lab-hv1) and a fleet-wide list over both hypervisors."""
    group_vars = hv_fleet.role_vars(egress_proxy_fleet=[
        {"name": name("b"), "hypervisor": HV1},
        {"name": name("c"), "hypervisor": HV2},
        {"name": name("d"), "hypervisor": HV2, "state": "stopped"},
    ], **overrides)
    return hv_fleet.inventory(group_vars, {HV1: {"egress_proxy_instances": [{"name": name("a")}]}})


EXPECTED = {HV1: {name("a"): "running", name("b"): "running"},
            HV2: {name("c"): "running", name("d"): "shut off"}}


def test_proxies_spread_over_two_hypervisors_converge_in_one_parallel_run_and_stay_converged(hv_fleet):
    inventory = spread(hv_fleet)
    run = hv_fleet.playbook("deploy.yml", inventory)
    assert run.rc == 0, run
    for host, names in ((HV1, [name("a"), name("b")]), (HV2, [name("c"), name("d")])):
        converged = run.items(CONVERGE_TASK, host)
        assert sorted(converged) == names
        for proxy, result in converged.items():
            assert result["changed"] and result["id"] == "hosts/%s/domains/%s" % (host, proxy)
    # The hypervisors worked side by side, not one after the other.
    spans = run.spans(CONVERGE_TASK)
    assert overlap(spans[HV1], spans[HV2]) > 0, spans
    # Each hypervisor holds exactly its own proxies: virsh on each, through its own sshd.
    for host, spec in ((HV1, hv_fleet.hv1), (HV2, hv_fleet.hv2)):
        assert hv_fleet.domains_over_ssh(spec) == EXPECTED[host]
        assert hv_fleet.ssh(spec, "hostname").stdout.strip() == host

    again = hv_fleet.playbook("deploy.yml", inventory)
    assert again.rc == 0, again
    assert [again.stats(host)["changed"] for host in (HV1, HV2)] == [0, 0], again
    print("first run %.0f s, second %.0f s" % (run.seconds, again.seconds))


POOL_TASK = "Allocate the egress addresses of the play's proxies from their pools"


POOL6 = "2001:db8:21::"  # the IPv6 half of the pool: hv1's outside segment's /64 in the lab's documentation prefix


def pool_outside(hv_fleet):
    """egress_proxy_outside with the dual-stack pool the pool tests share."""
    return {"bridge": config.HV_OUTSIDE_BRIDGE, "gateway": hv_fleet.hv1.outside_address,
            "prefix": hv_fleet.hv1.outside_cidr, "prefix6": POOL6 + "/64",
            "pool": [hv_fleet.hv1.outside_prefix + ".100-" + hv_fleet.hv1.outside_prefix + ".104",
                     POOL6 + "100-" + POOL6 + "104"]}


def pooled(hv_fleet, placed, **overrides):
    """A fleet of two-NIC proxies drawing their egress addresses from one dual-stack pool: placed, (suffix, hypervisor,
    inside address's last byte[, state]). Both hypervisors take their outside addresses from hv1's outside segment, as
    hypervisors on one uplink do: the proxies do not boot, so the addresses are only recorded, never used."""
    specs = {HV1: hv_fleet.hv1, HV2: hv_fleet.hv2}
    entries = [dict({"name": name(suffix), "hypervisor": host, "address": "%s.%d/24" % (specs[host].lan_prefix, byte)},
                    **({"state": rest[0]} if rest else {})) for suffix, host, byte, *rest in placed]
    return hv_fleet.inventory(hv_fleet.role_vars(egress_proxy_fleet=entries, egress_proxy_outside=pool_outside(hv_fleet),
                                                 **overrides))


def egress_addresses(run):
    """{proxy: the egress IPv4 address its domain records} of the converge's results on both hypervisors, after
    checking that its IPv6 one is the same place of the pool's IPv6 half."""
    recorded = {proxy: (entry["egress_address"], entry["egress_address6"]) for host in (HV1, HV2)
                for proxy, entry in run.items(CONVERGE_TASK, host).items() if entry.get("state")}
    for proxy, (address, address6) in recorded.items():
        assert address6 == POOL6 + address.rpartition(".")[2], (proxy, address, address6)
    return {proxy: address for proxy, (address, _address6) in recorded.items()}


def test_a_fleet_on_two_hypervisors_draws_unique_egress_addresses_from_one_pool_and_keeps_them(hv_fleet):
    base = hv_fleet.hv1.outside_prefix + "."
    fleet = [("pa", HV1, 201), ("pb", HV1, 202), ("pc", HV2, 201), ("pd", HV2, 202, "stopped")]
    run = hv_fleet.playbook("deploy.yml", pooled(hv_fleet, fleet))
    assert run.rc == 0, run
    assert run.ran(POOL_TASK) == [HV1]  # once for the play
    first = egress_addresses(run)
    # Unique across both hypervisors, converging at once; new ones in the play's order, then by name.
    assert first == {name("pa"): base + "100", name("pb"): base + "101", name("pc"): base + "102",
                     name("pd"): base + "103"}, first

    # Every proxy replaced (another memory size), pb removed, pe added: the replaced keep theirs, and pb's domain still
    # records its address while this run removes it, so pe gets the last free one.
    fleet = [("pa", HV1, 201), ("pb", HV1, 202, "absent"), ("pc", HV2, 201), ("pd", HV2, 202, "stopped"), ("pe", HV2, 203)]
    replaced = hv_fleet.playbook("deploy.yml", pooled(hv_fleet, fleet, egress_proxy_memory_mib=160))
    assert replaced.rc == 0, replaced
    outcomes = {proxy: entry["outcome"] for host in (HV1, HV2) for proxy, entry in replaced.items(CONVERGE_TASK, host).items()}
    assert outcomes == {name("pa"): "replaced", name("pb"): "removed", name("pc"): "replaced", name("pd"): "replaced",
                        name("pe"): "created"}, outcomes
    del first[name("pb")]
    assert egress_addresses(replaced) == dict(first, **{name("pe"): base + "104"})

    # Two more than the pool holds: refused before any hypervisor is touched, naming how many are missing.
    fleet = [entry for entry in fleet if entry[0] != "pb"] + [("pf", HV1, 204), ("pg", HV1, 205)]
    short = hv_fleet.playbook("deploy.yml", pooled(hv_fleet, fleet, egress_proxy_memory_mib=160))
    assert short.rc != 0, short
    messages = " | ".join(message or "" for _host, _task, message in short.failures())
    # One of each family: the IPv4 and the IPv6 half of the pool are both short by one.
    assert "2 addresses missing" in messages and "none for %s" % name("pg") in messages, messages
    assert all(short.ran(task) == [] for task in TOUCHING_TASKS), short

    # pb's domain is gone: its address is free again, for pf.
    inventory = pooled(hv_fleet, fleet[:-1], egress_proxy_memory_mib=160)
    freed = hv_fleet.playbook("deploy.yml", inventory)
    assert freed.rc == 0, freed
    assert egress_addresses(freed) == dict(first, **{name("pe"): base + "104", name("pf"): base + "101"})
    # What the domains record, as kvm_proxy_info reads it back (the listing the next allocation starts from).
    (listing,) = freed.results("List the proxies of this hypervisor with their recorded egress addresses", HV2)
    assert {proxy["name"]: (proxy["egress_address"], proxy["egress_address6"]) for proxy in listing["proxies"]
            if proxy["name"].startswith(PREFIX)} == {name(suffix): (base + byte, POOL6 + byte)
                                                     for suffix, byte in (("pc", "102"), ("pd", "103"), ("pe", "104"))}
    # status.yml's EGRESS and EGRESS6: each proxy's addresses from the pool, the stopped one's too.
    status = hv_fleet.playbook("status.yml", inventory)
    assert status.rc == 0, status
    (rows,) = status.results("Show the same rows as JSON", HV1)
    shown = {row["name"]: (row["egress"], row["egress6"]) for row in rows["status_rows"] if (row["name"] or "").startswith(PREFIX)}
    assert shown == {proxy: (address, POOL6 + address.rpartition(".")[2]) for proxy, address in egress_addresses(freed).items()}


LISTING_TASK = "List the proxies of this hypervisor with their recorded egress addresses"


def allocated(run):
    """The play's allocation (the pool task's fact): {hypervisor: {proxy: its addresses and its profiles'}}."""
    (task,) = run.results(POOL_TASK, HV1)
    return task["ansible_facts"]["egress_proxy__allocated"]


def test_a_profile_draws_an_egress_address_of_its_own_from_the_pool_and_keeps_it(hv_fleet):
    """Issue 43 item 1: a profile's ``egress_address: pool`` (and ``egress_address6``) takes one more address of its
    proxy's pool, after the proxies' own, inside its proxy's segment; check mode predicts it, the domain records it
    (kvm_proxy_info's pooled_addresses, which the next run's allocation reads), and a replaced proxy keeps it. The
    rendering of the address is a hand-given one's (tests/unit/roles/test_egress_proxy_profile_pool.py), whose path to
    the origin test_networking.py proves on a booted proxy."""
    base = hv_fleet.hv1.outside_prefix + "."
    profiles = [{"name": "backup", "clients": [hv_fleet.hv1.lan_cidr], "egress_address": "pool",
                 "egress_address6": "pool"}]
    fleet = [("pa", HV1, 201), ("pb", HV1, 202)]
    inventory = pooled(hv_fleet, fleet, egress_proxy_profiles=profiles)
    predicted = hv_fleet.playbook("deploy.yml", inventory, options=("--check",))
    assert predicted.rc == 0, predicted
    expected = {name(suffix): {"address": "%s%s/24" % (base, own), "address6": "%s%s/64" % (POOL6, own),
                               "profiles": {"backup": {"egress_address": base + pooled_byte,
                                                       "egress_address6": POOL6 + pooled_byte}}}
                for suffix, own, pooled_byte in (("pa", "100", "102"), ("pb", "101", "103"))}
    assert allocated(predicted)[HV1] == expected, allocated(predicted)

    run = hv_fleet.playbook("deploy.yml", inventory)
    assert run.rc == 0, run
    assert allocated(run) == allocated(predicted)
    # Replaced (another memory size): each keeps its profile's addresses, which its domain records.
    replaced = hv_fleet.playbook("deploy.yml", pooled(hv_fleet, fleet, egress_proxy_profiles=profiles,
                                                      egress_proxy_memory_mib=160))
    assert replaced.rc == 0, replaced
    outcomes = {proxy: entry["outcome"] for proxy, entry in replaced.items(CONVERGE_TASK, HV1).items()}
    assert outcomes == {name("pa"): "replaced", name("pb"): "replaced"}, outcomes
    (listing,) = replaced.results(LISTING_TASK, HV1)
    recorded = {proxy["name"]: proxy["pooled_addresses"] for proxy in listing["proxies"] if proxy["name"].startswith(PREFIX)}
    assert recorded == {proxy: entry["profiles"] for proxy, entry in expected.items()}, recorded
    assert allocated(replaced)[HV1] == expected, allocated(replaced)


@pytest.mark.parametrize("source", ["vars", "include_vars"])
def test_a_pool_the_inventory_does_not_show_is_refused_in_a_limited_run(hv_fleet, source):
    """Issue 40 item 3: a pool in the play's vars: or loaded by include_vars is not in hostvars of a hypervisor outside
    the play, so two --limit runs, one per hypervisor, each gave the first address of the pool (hv2's pc and then hv1's
    pa both 198.18.21.100). Refused, naming the variable, the other hypervisor and --limit, before anything is
    touched; the same playbook over both hypervisors at once allocates as a group_vars pool does."""
    pool = pool_outside(hv_fleet)
    fleet = [{"name": name("pa"), "hypervisor": HV1, "address": "%s.201/24" % hv_fleet.hv1.lan_prefix},
             {"name": name("pc"), "hypervisor": HV2, "address": "%s.201/24" % hv_fleet.hv2.lan_prefix}]
    inventory = hv_fleet.inventory(hv_fleet.role_vars(egress_proxy_fleet=fleet))
    play = {"name": "Deploy with the pool in the play", "hosts": "hypervisors", "gather_facts": False,
            "roles": [{"role": "egress_proxies.kvm.egress_proxy"}]}
    if source == "vars":
        play["vars"] = {"egress_proxy_outside": pool}
    else:
        (hv_fleet.tmp_path / "pool.yml").write_text(yaml.safe_dump({"egress_proxy_outside": pool}))
        play["pre_tasks"] = [{"name": "Load the pool", "ansible.builtin.include_vars": str(hv_fleet.tmp_path / "pool.yml")}]
    playbook = hv_fleet.tmp_path / ("pool-in-%s.yml" % source)
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))

    for limit, other in ((HV2, HV1), (HV1, HV2)):
        run = hv_fleet.playbook(str(playbook), inventory, options=("--limit", limit))
        assert run.rc != 0, run
        messages = " | ".join(message or "" for _host, _task, message in run.failures())
        assert ("egress_proxy_outside.pool of %s cannot be proven unique: %s, in group hypervisors with %s, was not "
                "listed in this run (outside the play: --limit" % (limit, other, limit)) in messages, messages
        assert all(run.ran(task) == [] for task in TOUCHING_TASKS), run
    for spec in hv_fleet.specs:
        assert hv_fleet.domains_local(spec) == {}

    whole = hv_fleet.playbook(str(playbook), inventory)
    assert whole.rc == 0, whole
    base = hv_fleet.hv1.outside_prefix + "."
    assert egress_addresses(whole) == {name("pa"): base + "100", name("pc"): base + "101"}


def test_a_proxy_is_not_defined_with_an_egress_address_another_domain_records(hv_fleet):
    """Issue 40 item 3: a run whose allocation listed the domains before another run defined its proxy (two deploys of
    one pool at once) gave the address again. kvm_proxy_set refuses it before anything is touched, check mode too: here
    another deployment (another owner, no pool) gives by hand the address the pool gave pa."""
    run = hv_fleet.playbook("deploy.yml", pooled(hv_fleet, [("pa", HV1, 201)]))
    assert run.rc == 0, run
    taken = egress_addresses(run)[name("pa")]
    outside = dict(pool_outside(hv_fleet), address=taken + "/24")
    del outside["pool"], outside["prefix6"]
    other = hv_fleet.inventory(hv_fleet.role_vars(egress_proxy_uid="eptest-fleet-other", egress_proxy_outside=outside,
                                                  egress_proxy_fleet=[{"name": name("pz"), "hypervisor": HV1,
                                                                       "address": "%s.209/24" % hv_fleet.hv1.lan_prefix}]))
    for options in (("--check",), ()):
        refused = hv_fleet.playbook("deploy.yml", other, options=options)
        assert refused.rc != 0, refused
        messages = " | ".join(message or "" for _host, _task, message in refused.failures(HV1))
        assert ("proxies[0] (%s): its egress address %s (outside.address) is recorded by domain '%s' on this hypervisor"
                % (name("pz"), taken, name("pa"))) in messages, messages
    assert hv_fleet.domains_local(hv_fleet.hv1) == {name("pa"): "running"}


@pytest.mark.parametrize("entries, host_vars, words", [
    ([{"name": name("x"), "hypervisor": HV1}, {"name": name("y"), "hypervisor": "lab-hv9"}], {},
     ["egress_proxy_fleet[1].hypervisor", name("y"), "lab-hv9", "not in the inventory"]),
    ([{"name": name("x"), "hypervisor": HV1}, {"name": name("x"), "hypervisor": HV2}], {},
     ["egress_proxy_fleet[0].name", name("x"), "lab-hv1 and lab-hv2"]),
    ([{"name": name("x"), "hypervisor": HV1}], {HV2: {"egress_proxy_instances": [{"name": name("x")}]}},
     ["egress_proxy_fleet[0].name", name("x"), "egress_proxy_instances of lab-hv2"]),
], ids=["unknown hypervisor", "one name on two hypervisors", "also in another host's list"])
def test_a_misplaced_fleet_entry_fails_before_any_hypervisor_is_touched(hv_fleet, entries, host_vars, words):
    inventory = hv_fleet.inventory(hv_fleet.role_vars(egress_proxy_fleet=entries), host_vars)
    for playbook in ("deploy.yml", "destroy.yml"):
        run = hv_fleet.playbook(playbook, inventory)
        assert run.rc != 0, run
        messages = " | ".join(message or "" for _host, _task, message in run.failures())
        assert all(word in messages for word in words), messages
        for task in TOUCHING_TASKS + ("Remove the proxies and their disks",):
            assert run.ran(task) == [], "%s ran before the bad entry was refused" % task
    for spec in hv_fleet.specs:
        assert hv_fleet.domains_local(spec) == {}


@pytest.fixture
def bystander(hv_fleet):
    """Another deployment's proxy on lab-hv1, as scripts/demo's egress-demo-1 is: another name and owner; removed after."""
    inventory = hv_fleet.inventory(hv_fleet.role_vars(egress_proxy_uid=BYSTANDER_OWNER),
                                   {HV1: {"egress_proxy_instances": [{"name": BYSTANDER}]}})
    # A bystander left by a run that died is removed first: its overlay's base went with hv_fleet's clean.
    assert hv_fleet.playbook("destroy.yml", inventory, extra_vars={"egress_proxy_hosts": HV1}).rc == 0
    run = hv_fleet.playbook("deploy.yml", inventory, extra_vars={"egress_proxy_hosts": HV1})
    assert run.rc == 0, run
    yield BYSTANDER
    assert hv_fleet.playbook("destroy.yml", inventory, extra_vars={"egress_proxy_hosts": HV1}).rc == 0


def test_a_hypervisor_whose_sshd_is_stopped_fails_alone_and_converges_once_it_returns(hv_fleet, bystander):
    """With another deployment's proxy on lab-hv1 (the demo's, issue 31 item 0): the test asserts on its own proxies."""
    assert hv_fleet.playbook("deploy.yml", spread(hv_fleet)).rc == 0
    before = (hv_fleet.domains_local(hv_fleet.hv2), hv_fleet.volumes_local(hv_fleet.hv2))
    grown = hv_fleet.role_vars(egress_proxy_fleet=[
        {"name": name("b"), "hypervisor": HV1},
        {"name": name("c"), "hypervisor": HV2},
        {"name": name("d"), "hypervisor": HV2, "state": "stopped"},
        {"name": name("e"), "hypervisor": HV1},
        {"name": name("f"), "hypervisor": HV2},
    ])
    inventory = hv_fleet.inventory(grown, {HV1: {"egress_proxy_instances": [{"name": name("a")}]}})

    hypervisors.stop_sshd(hv_fleet.hv2)
    run = hv_fleet.playbook("deploy.yml", inventory)
    assert run.rc != 0, run
    assert run.stats(HV2)["unreachable"] == 1 and run.stats(HV2)["changed"] == 0, run.result["stats"]
    (unreachable,) = run.failures(HV2)
    assert hv_fleet.hv2.address in unreachable[2], unreachable
    assert run.stats(HV1)["failures"] == 0 and run.stats(HV1)["unreachable"] == 0, run
    assert run.items(CONVERGE_TASK, HV1)[name("e")]["changed"]
    assert hv_fleet.domains_over_ssh(hv_fleet.hv1) == dict(EXPECTED[HV1], **{name("e"): "running"})
    # Nothing on the unreachable hypervisor changed.
    assert (hv_fleet.domains_local(hv_fleet.hv2), hv_fleet.volumes_local(hv_fleet.hv2)) == before

    # status.yml: every proxy of the reachable hypervisor, and a row saying the other is unreachable.
    status = hv_fleet.playbook("status.yml", inventory)
    assert status.rc == 0, status
    (table,) = status.results("Show every proxy of every hypervisor", HV1)
    lines = table["msg"]
    assert re.match(r"HYPERVISOR +NAME +STATE +IPV4 +IPV6 +EGRESS +EGRESS6 +OWNER +AGE +POLICY +METRICS +REQUESTS +DESIRED$", lines[0]), lines
    assert any(re.match(r"lab-hv2 +- +UNREACHABLE +.*%s" % re.escape(hv_fleet.hv2.address), line) for line in lines), lines
    for proxy in (name("a"), name("b"), name("e")):
        assert any(re.match(r"lab-hv1 +%s +Provisioning +- +- +- +- +eptest-fleet +\d+[smhd] +[0-9a-f]{12} +- +- +yes$" % proxy, line) for line in lines), lines
    # The other deployment's proxy is listed as the inventory does not want it, and left alone.
    assert any(re.match(r"lab-hv1 +%s +Provisioning +- +- +- +- +%s +\d+[smhd] +[0-9a-f]{12} +- +- +no$" % (bystander, BYSTANDER_OWNER), line)
               for line in lines), lines
    # Aligned: every proxy's name and DESIRED under their headers.
    for proxy in (name("a"), name("b"), name("e")):
        (line,) = [line for line in lines if " %s " % proxy in line]
        assert line.index(proxy) == lines[0].index("NAME") and line.rindex("yes") == lines[0].index("DESIRED"), lines
    (rows,) = status.results("Show the same rows as JSON", HV1)
    by_host = {}
    for row in rows["status_rows"]:
        by_host.setdefault(row["hypervisor"], []).append(row)
    assert [row["state"] for row in by_host[HV2]] == ["UNREACHABLE"] and by_host[HV2][0]["error"]
    assert sorted(row["name"] for row in by_host[HV1] if row["owner"] == "eptest-fleet") == [name("a"), name("b"), name("e")]
    # Each proxy's policy digest as its domain's metadata records it (each squid.conf names its proxy: its own).
    for row in by_host[HV1]:
        if row["owner"] == "eptest-fleet":
            assert re.fullmatch("[0-9a-f]{64}", row["policy_digest"]) and row["policy"] == row["policy_digest"][:12], row

    hypervisors.start_sshd(hv_fleet.hv2)
    back = hv_fleet.playbook("deploy.yml", inventory)
    assert back.rc == 0, back
    assert back.stats(HV1)["changed"] == 0, back
    assert back.items(CONVERGE_TASK, HV2)[name("f")]["changed"]
    assert hv_fleet.domains_over_ssh(hv_fleet.hv2) == dict(EXPECTED[HV2], **{name("f"): "running"})
    assert bystander in hv_fleet.ssh(hv_fleet.hv1, "virsh", "-q", "-c", config.LIBVIRT_URI, "list", "--name").stdout.split()


def test_a_hypervisor_whose_libvirtd_is_frozen_fails_within_the_bound_naming_it(hv_fleet):
    inventory = spread(hv_fleet)
    assert hv_fleet.playbook("deploy.yml", inventory).rc == 0
    bound = CONNECT_TIMEOUT
    hypervisors.freeze(hv_fleet.hv2)
    try:
        run = hv_fleet.playbook("deploy.yml", inventory, timeout=300)
        assert run.rc != 0, run
        assert run.stats(HV1)["failures"] == 0 and run.stats(HV1)["ok"] > 0, run
        failures = run.failures(HV2)
        assert failures and all(host == HV2 for host, _task, _msg in failures), failures
        (failed_task,) = {task for _host, task, _msg in failures}
        message = failures[-1][2]
        # The converge is the first task to reach libvirt: it names the hypervisor (the role's host) and its URI.
        assert failed_task.endswith(CONVERGE_TASK), failures
        assert message.startswith("connecting to hypervisor lab-hv2 (%s): no answer within %d seconds (connect_timeout)"
                                  % (config.LIBVIRT_URI, bound)), message
        assert "Nothing was changed" in message, message
        start, end = run.spans(CONVERGE_TASK)[HV2]
        # The bound, plus the SSH and Python start-up around it on a busy machine.
        assert bound <= end - start <= bound + 15, (start, end)

        status = hv_fleet.playbook("status.yml", inventory, {"egress_proxy_status_timeout": 10})
        assert status.rc == 0, status
        (rows,) = status.results("Show the same rows as JSON", HV1)
        (frozen,) = [row for row in rows["status_rows"] if row["hypervisor"] == HV2]
        assert frozen["state"] == "NO ANSWER" and "10 seconds" in frozen["error"], frozen
    finally:
        hypervisors.thaw(hv_fleet.hv2)
    print("deploy with lab-hv2 frozen: %.0f s; lab-hv2 failed after %.1f s" % (run.seconds, end - start))


def test_ad_hoc_kvm_proxy_info_prints_each_hypervisors_own_proxies(hv_fleet):
    inventory = spread(hv_fleet)
    assert hv_fleet.playbook("deploy.yml", inventory).rc == 0
    completed = hv_fleet.adhoc(inventory, "egress_proxies.kvm.kvm_proxy_info", "uid=eptest-fleet")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    listed = {}
    for line in completed.stdout.splitlines():
        host, _bar, rest = line.partition(" | SUCCESS => ")
        if rest:
            listed[host] = json.loads(rest)
    assert sorted(listed) == [HV1, HV2], completed.stdout
    for host in (HV1, HV2):
        # No host given: the module names the hypervisor as libvirt does, by its own (UTS) host name.
        assert listed[host]["host"] == host
        assert sorted(proxy["name"] for proxy in listed[host]["proxies"]) == sorted(EXPECTED[host])
        assert all(proxy["id"] == "hosts/%s/domains/%s" % (host, proxy["name"]) for proxy in listed[host]["proxies"])


def _inventory_plugin(hv_fleet, hypervisor_lines, *args):
    path = hv_fleet.tmp_path / "fleet.kvm_proxies.yml"
    path.write_text("plugin: egress_proxies.kvm.kvm_proxies\nhypervisors:\n%suid: eptest-fleet\nstrict: true\n" % hypervisor_lines)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO_ROOT, "build", "collections"),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_NOCOLOR="true",
               ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="true", ANSIBLE_LOCAL_TEMP=str(hv_fleet.tmp_path / "ansible-local"))
    return subprocess.run([os.path.join(REPO_ROOT, ".venv", "bin", "ansible-inventory"), "-i", str(path)] + list(args),
                          capture_output=True, text=True, timeout=300, check=False, env=env)


def _plain(value):
    """A --list value without ansible-core 2.19's marking of untrusted strings."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def test_the_inventory_plugin_reads_each_hypervisor_over_qemu_ssh_with_host_keys_checked(hv_fleet):
    assert hv_fleet.playbook("deploy.yml", spread(hv_fleet)).rc == 0
    # No name given: each hypervisor is named as libvirt reports it, by its own host name.
    lines = "".join("  - {uri: '%s'}\n" % spec.uri for spec in (hv_fleet.hv1, hv_fleet.hv2))
    completed = _inventory_plugin(hv_fleet, lines, "--list")
    assert completed.returncode == 0, completed.stderr
    listing = _plain(json.loads(completed.stdout))
    for host in (HV1, HV2):
        group = listing["kvm_hypervisor_" + host.replace("-", "_")]["hosts"]
        assert sorted(group) == sorted(EXPECTED[host])
        for proxy in group:
            assert listing["_meta"]["hostvars"][proxy]["kvm_proxy_id"] == "hosts/%s/domains/%s" % (host, proxy)

    # The same URIs with a known_hosts file that does not know lab-hv2's key: refused, naming it. Its own connection
    # (ControlPath none): a session on the lab's shared one would not check the host key again.
    empty = hv_fleet.tmp_path / "known_hosts"
    empty.write_text("")
    wrapper = hv_fleet.tmp_path / "ssh-unknown-hosts"
    wrapper.write_text('#!/bin/sh\nexec ssh -F %s -o ControlPath=none -o UserKnownHostsFile=%s "$@"\n' % (config.SSH_CONFIG, empty))
    wrapper.chmod(0o755)
    refused = _inventory_plugin(hv_fleet, "  - {uri: '%s'}\n" % hv_fleet.hv2.uri.replace(config.LAB_SSH, str(wrapper)), "--list")
    assert refused.returncode != 0
    assert "could not read hypervisor" in refused.stderr and "Host key verification failed" in refused.stderr, refused.stderr
