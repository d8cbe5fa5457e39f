"""The egress_proxy role's destroy entry point decides about the image before it removes anything (issue 31 item 10).

destroy.yml with egress_proxy_remove_image and another proxy on the same base used to remove the proxies, then
fail on the image, skipping the report; check mode predicted that half-done run. The lab test
(tests/integration/test_role_deploy.py) runs it; this one reads the task list.
"""

import os

import yaml

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_proxy import role_instances, set_arguments
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import (
    OMIT,
    REMOVAL_OPTIONS,
    ROLE,
    converge_options,
    role_variables,
    set_options,
)

REMOVE_PROXIES = "Remove the proxies and their disks"
REMOVE_IMAGE = "Remove the cached base image"


def removal_block():
    with open(os.path.join(ROLE, "tasks", "destroy.yml")) as handle:
        (block,) = [task for task in yaml.safe_load(handle) if "block" in task]
    return {task["name"]: (index, task) for index, task in enumerate(block["block"])}


def module_of(task):
    (name,) = [key for key in task if key.startswith("egress_proxies.kvm.")]
    return name


def test_the_image_removal_is_predicted_in_check_mode_before_any_proxy_is_removed():
    tasks = removal_block()
    remove_index = tasks[REMOVE_PROXIES][0]
    predictions = [task for index, task in tasks.values() if index < remove_index and task.get("check_mode") is True]
    assert [module_of(task) for task in predictions] == ["egress_proxies.kvm.kvm_proxy_set", "egress_proxies.kvm.kvm_base_image"]
    image_prediction = predictions[1]
    assert image_prediction["egress_proxies.kvm.kvm_base_image"]["state"] == "absent"
    # The overlays of the proxies the removal takes do not count as the image's users: the image's prediction reads
    # what the removal's prediction, just before it, registered.
    assert predictions[0]["register"] + ".proxies" in image_prediction["egress_proxies.kvm.kvm_base_image"]["departing_volumes"]
    # A base in use is a refusal the next tasks act on, not a failure of the host.
    assert image_prediction["failed_when"] is False


def test_the_image_goes_only_as_predicted_and_otherwise_a_warning_says_why_and_the_report_runs():
    tasks = removal_block()
    prediction = tasks["Predict whether the image can go once they are removed"][1]["register"]
    _index, remove_image = tasks[REMOVE_IMAGE]
    assert "%s.removed is defined" % prediction in remove_image["when"]
    _index, warning = tasks["Warn that the image is kept"]
    assert "%s.removed is not defined" % prediction in warning["when"]
    assert "%s.msg" % prediction in warning["ansible.builtin.debug"]["msg"]
    # The report comes last, after every task that touches the image, with no condition.
    names = sorted(tasks, key=lambda name: tasks[name][0])
    assert names[-1] == "Report the proxies of this hypervisor" and "when" not in tasks[names[-1]][1]


def test_each_module_call_is_written_once_and_run_as_the_prediction_then_for_real():
    """The prediction is the removal in check mode: the same arguments (one YAML anchor each), and each kvm_base_image
    run reads the kvm_proxy_set run just before it, as both register the same result."""
    tasks = removal_block()
    for prediction, removal in (("Predict which proxies the removal takes", REMOVE_PROXIES),
                                ("Predict whether the image can go once they are removed", REMOVE_IMAGE)):
        module = module_of(tasks[removal][1])
        assert module_of(tasks[prediction][1]) == module
        assert tasks[prediction][1][module] == tasks[removal][1][module], module
        assert tasks[prediction][1]["check_mode"] is True and "check_mode" not in tasks[removal][1]
    assert tasks["Predict which proxies the removal takes"][1]["register"] == tasks[REMOVE_PROXIES][1]["register"]
    with open(os.path.join(ROLE, "tasks", "destroy.yml")) as handle:
        text = handle.read()
    for argument in ('host: "{{ egress_proxy_host }}"', 'name: "{{ egress_proxy_image.name }}"'):
        assert text.count(argument) == 1, argument


def test_the_removal_gives_a_running_proxy_the_roles_shutdown_timeout():
    """A running proxy is stopped with an ACPI request before it is removed: the destroy waits egress_proxy_shutdown_timeout
    for it, as a converge does, not the module's default."""
    variables = dict(role_variables(), egress_proxy_shutdown_timeout=7)
    instances = role_instances([{"name": "egress-a"}], variables, removing=True)
    arguments = set_arguments(instances, variables, set_options(variables, REMOVAL_OPTIONS), OMIT)
    assert arguments["shutdown_timeout"] == 7 and arguments["gc"] is False
    assert arguments["proxies"] == [{"name": "egress-a", "state": "absent"}]


def test_the_removal_passes_the_options_its_check_validated_each_from_the_roles_variables():
    with open(os.path.join(ROLE, "tasks", "destroy.yml")) as handle:
        (block,) = [task for task in yaml.safe_load(handle) if "block" in task]
    options = converge_options(REMOVAL_OPTIONS)
    assert set(options) == {"host", "uid", "adopt_uids", "pool", "state", "gc", "shutdown_timeout"}
    # The connection's options come to every module of the block from module_defaults.
    assert set(block["module_defaults"]["group/egress_proxies.kvm.kvm"]) == {"uri", "connect_timeout"}
    for name in ("Predict which proxies the removal takes", REMOVE_PROXIES):
        task = removal_block()[name][1]["egress_proxies.kvm.kvm_proxy_set"]
        assert task == dict(options, proxies="{{ egress_proxy__proxies }}"), name
    check = removal_block()["Check the removal as kvm_proxy_set will"][1]["ansible.builtin.set_fact"]
    assert "options=egress_proxy__removal_options, omitted=omit" in " ".join(check["egress_proxy__proxies"].split())


def test_every_module_call_of_the_removal_reaches_libvirt_within_the_connect_timeout():
    with open(os.path.join(ROLE, "tasks", "destroy.yml")) as handle:
        (block,) = [task for task in yaml.safe_load(handle) if "block" in task]
    assert block["module_defaults"]["group/egress_proxies.kvm.kvm"]["connect_timeout"] == "{{ egress_proxy_connect_timeout }}"
    # The bound is the modules' own: the removal's first module call is its first round trip to the hypervisor.
    calls = [task["name"] for task in block["block"] if any(key.startswith("egress_proxies.kvm.") for key in task)]
    assert calls[0] == "Predict which proxies the removal takes"
