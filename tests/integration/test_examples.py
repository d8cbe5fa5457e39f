"""Every module's EXAMPLES run on the lab as a user would copy them, in order, through ansible-playbook.

Each example task of the collection's modules runs three times in a row: in check mode (``check: <name>``),
for real (``<name>``) and again (``again: <name>``), all with diff mode on. The check run must predict the real
run's ``changed``, the real run must return every RETURN key documented for its arguments with its documented type,
and the run again must change nothing. An example that is itself in check mode (a preview) runs once. A few
examples' names make a claim the result is checked against (CLAIMS).

The one rule that adapts an example to the lab (examples.LabRule); nothing else in an example changes:

| in an example                                       | on the lab                                                   |
| --------------------------------------------------- | ------------------------------------------------------------ |
| ``pool``, given or left to its default              | ``egress-lab``                                               |
| ``bridge``                                          | ``eplab0``                                                   |
| ``virt_type``, set on every task that takes it      | ``qemu`` (nested KVM is broken on the lab machines)          |
| the ``name`` of a VM, seed, image or set's proxy    | prefixed ``eptest-examples-`` (the lab's names for tests)    |
| an image ``url``: kvm_base_image's                  | the mirror's ``tiny.qcow2`` (``tiny.raw`` for format raw)    |
| an image ``url``: kvm_proxy's and kvm_proxy_set's   | the mirror's bootable ``debian-12-egress.qcow2``             |
| ``checksum: sha256:<digest, or a variable>``        | that lab image's sha256                                      |
| ``checksum: sha256:<URL of a SHA256SUMS file>``     | ``sha256:`` the mirror's ``SHA256SUMS``                      |
| ``base_volume: base-<name>-<16 hex>.<format>``      | that lab image's base volume under its lab name              |

What an example takes from its user is there: the variables in USER_VARS, a public key at
``~/.ssh/id_ed25519.pub`` (HOME is the test's directory) and the template ``squid-user-data.yml.j2``.
"""

import subprocess

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import base_volume_name
from tests.integration import examples, lab_objects
from tests.lab import config

pytestmark = pytest.mark.integration

# Examples that cannot run on the lab, by module and task name, with the reason.
NOT_ON_LAB = {
    ("kvm_base_image", "Cache an image on a remote hypervisor, from the controller"): "a remote hypervisor",
    ("kvm_seed", "Seed with a static address and no vendor-data, on a remote hypervisor"): "a remote hypervisor",
    ("kvm_proxy", "Same VM on a remote hypervisor with a fixed MAC, driven from the controller"): "a remote hypervisor",
    ("kvm_proxy_info", "Look at one proxy from the controller, over SSH"): "a remote hypervisor",
    ("kvm_proxy_info", "Fail unless it is up"): "reads the remote hypervisor's answer",
    # Measured: three guests booting at once under TCG on the lab's two CPUs had no address within 300 s.
    ("kvm_proxy_set", "Converge this hypervisor's proxies, remove the ones no longer listed, replace one at a time"):
        "boots three guests at once: too slow under the lab's TCG",
    ("kvm_proxy_set", "Show what happened to each proxy"): "reads the converge's result",
    ("kvm_proxy_set", "The set's squid policy, applied in place to the running proxies (a change of it replaces no VM)"):
        "the set above, booted: three guests at once (test_converge applies a policy in place on booted proxies)",
    ("kvm_proxy_set", "Stop every proxy of the set but keep their VMs (the same spec, so nothing is replaced), "
                      "without garbage collection"): "needs the converged set",
}
USER_VARS = {
    "proxy_user_data": "#cloud-config\npackages: [squid]\n",
}
SQUID_USER_DATA = "#cloud-config\nruncmd:\n  - [systemctl, enable, --now, squid]\n"


def image(lab, name):
    return {"url": lab.images[name]["url"], "sha256": lab.images[name]["sha256"]}


def lab_rule(lab):
    tiny = {"qcow2": image(lab, config.TINY_QCOW2), "raw": image(lab, config.TINY_RAW)}
    bootable = {"qcow2": image(lab, config.GUEST_IMAGE)}
    images = {"kvm_base_image": tiny, "kvm_proxy": bootable, "kvm_proxy_set": bootable}
    return examples.LabRule(lab, images, base_volume_name)


def is_ours(name):
    return name.startswith((examples.NAME_PREFIX, "base-" + examples.NAME_PREFIX))


def remove_ours(hypervisor, pool_name):
    domains = [hypervisor.domain_name(dom) for dom in hypervisor.list_domains()]
    pool = hypervisor.lookup_pool(pool_name)
    hypervisor.refresh_pool(pool)
    # Markers and the VMs' own volumes before the bases they name or back onto.
    volumes = sorted((hypervisor.volume_name(vol) for vol in hypervisor.list_volumes(pool)),
                     key=lambda name: name.startswith("base-") and not name.endswith(".sha256"))
    lab_objects.remove(hypervisor, pool_name, [name for name in domains if is_ours(name)],
                       [name for name in volumes if is_ours(name)])


@pytest.fixture
def clean_examples(lab, hypervisor):
    """No domain or volume of these examples before the test, nor after."""
    remove_ours(hypervisor, lab.pool)
    yield
    remove_ours(hypervisor, lab.pool)


@pytest.fixture
def user_home(tmp_path, monkeypatch):
    """The files an example reads from its user: a public key under ~/.ssh, a template next to the playbook."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "eptest-examples",
                    "-f", str(home / ".ssh" / "id_ed25519")], check=True)
    monkeypatch.setenv("HOME", str(home))
    return home


def check_copy(task):
    copied = dict(task, name="check: " + task["name"], check_mode=True)
    copied.pop("register", None)
    return copied


def again_copy(task):
    copied = dict(task, name="again: " + task["name"])
    copied.pop("register", None)
    return copied


def playbook_tasks(module, rule):
    """The module's examples on the lab, each of the collection's tasks as check, real and again."""
    tasks = []
    for task in examples.examples(module):
        if (module, task["name"]) in NOT_ON_LAB:
            continue
        adapted = rule.adapt(module, task)
        if examples.collection_module(task) is None:
            tasks.append(adapted)
        elif adapted.get("check_mode"):
            tasks.append(adapted)  # a preview: run again, it predicts the same change
        else:
            tasks += [check_copy(adapted), adapted, again_copy(adapted)]
    return tasks


def write_playbook(directory, module, tasks):
    directory.mkdir()
    (directory / "templates").mkdir()
    (directory / "templates" / "squid-user-data.yml.j2").write_text(SQUID_USER_DATA)
    path = directory / ("%s.yml" % module)
    play = {"name": "The examples of %s" % module, "hosts": "localhost", "gather_facts": False, "diff": True,
            "tasks": tasks}
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return str(path)


def results_of(result):
    """The result of each loop item, or the result itself."""
    return result.get("results", [result])


# What a task's name says its result shows (checked on the real run).
CLAIMS = {
    ("kvm_base_image", "Cache Debian 13 (trixie), pinned to a validated release"):
        lambda result: result["downloaded"] and result["changed"],
    ("kvm_base_image", "Remove every cached copy of the Ubuntu image (fails, naming them, if VM disks still use one)"):
        lambda result: result["removed"] and result["changed"],
    ("kvm_seed", "Preview a change with the files' contents (user-data may hold secrets; only where the output is private)"):
        lambda result: result["changed"] and "user-data" in result["changed_files"],
    ("kvm_proxy", "Run an egress proxy from the Debian 13 cloud image on br0"):
        lambda result: result["state"] == "Running" and result["ip"],
    ("kvm_proxy", "Keep a hand-tuned VM although its spec changed (a larger disk asked; reports drifted instead of replacing it)"):
        lambda result: result["drifted"] and not result["changed"],
    ("kvm_proxy", "Shut the proxy down (ACPI, then a hard stop after a minute); the same spec, so nothing is replaced"):
        lambda result: result["state"] == "Stopped" and result["actions"] == ["shutdown domain"],
    ("kvm_proxy", "Delete the proxy with its disk and seed (the cached image stays)"):
        lambda result: result["state"] is None and "undefine domain" in result["actions"],
}


def runs_on_lab(module):
    return any((module, task["name"]) not in NOT_ON_LAB for task in examples.examples(module))


def test_claims_name_example_tasks_that_run():
    names = {(module, task["name"]) for module in examples.MODULES for task in examples.examples(module)}
    assert set(NOT_ON_LAB) <= names
    assert set(CLAIMS) <= names - set(NOT_ON_LAB)


# kvm_proxy's and kvm_proxy_set's examples boot the Debian guest (the rule's image for them).
BOOTING = ("kvm_proxy", "kvm_proxy_set")


@pytest.mark.parametrize("module", [pytest.param(module, marks=[pytest.mark.boot] if module in BOOTING else [])
                                    for module in examples.MODULES if runs_on_lab(module)])
@pytest.mark.usefixtures("clean_examples", "user_home")
def test_examples(lab, tmp_path, run_playbook, module):
    rule = lab_rule(lab)
    tasks = playbook_tasks(module, rule)
    run = run_playbook(write_playbook(tmp_path / "playbook", module, tasks), USER_VARS)
    assert run.rc == 0, run
    problems = []
    for task in tasks:
        called = examples.collection_module(task)
        name = task["name"]
        if called is None or name.startswith(("check: ", "again: ")):
            continue
        args = examples.task_module(task)[1]
        (real,) = run.task_results(name)
        if not task.get("check_mode"):
            (check,) = run.task_results("check: " + name)
            (again,) = run.task_results("again: " + name)
            if check["changed"] != real["changed"]:
                problems.append("%s: check mode predicted changed=%s, the real run said %s"
                                % (name, check["changed"], real["changed"]))
            if again["changed"]:
                problems.append("%s: run again, it changed: %s" % (name, again.get("actions")))
        for result in results_of(real):
            problems += ["%s: %s" % (name, error) for error in examples.return_errors(called, args, result)]
        claim = CLAIMS.get((module, name))
        if claim is not None and not claim(real):
            problems.append("%s: the result does not show what the name says: %r" % (name, real))
    assert problems == [], "\n".join(problems)
