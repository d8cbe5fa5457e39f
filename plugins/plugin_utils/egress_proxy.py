# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The egress_proxy role's data, shaped and checked in Python on the controller.

The role hands its variables to two filters: proxy_instances (each instance with the role-wide settings filled
in, and the checks only the role can make, on its own variables) and proxy_set_args (kvm_proxy_set's arguments,
validated by the module's own code: its argument spec with ArgumentSpecValidator, then SetRequest.from_params).
Nothing here imports AnsibleModule or a library the modules need on the hypervisor (libvirt, lxml, pycdlib,
requests): a controller with ansible-core alone runs it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.argspec import common_argument_spec, open_timeout
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import validate_vm_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import (
    control_character,
    ip_address,
    ipv4_interface,
    ipv6_interface,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import validate_uid
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.argspec import (
    KVM_PROXY_SET_MUTUALLY_EXCLUSIVE,
    KVM_PROXY_SET_REQUIRED_IF,
    kvm_proxy_set_argument_spec,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import SetRequest
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.nocloud import render_cloud_data
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.egress_pool import with_allocation
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.guest_program import (
    ANSWER_SNI_GIVEN,
    CHECK_EITHER_PASSWORD,
    COUNT_DECISIONS,
    program_text,
)
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.ha_groups import instance_groups, member_policy
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.password_hash import password_problem, squid_user_hash
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.profile_addresses import with_profile_addresses
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_conf import (
    PREVIOUS_USERS_FILE,
    USERS_FILE,
    authorized_keys_problems,
    is_user_name,
    squid_settings,
)
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_reload import squid_reload_argv

# The per-instance keys and the role-wide variable each one falls back to (meta/argument_specs.yml).
INSTANCE_DEFAULTS = (
    ("state", "egress_proxy_state"),
    ("vcpus", "egress_proxy_vcpus"),
    ("memory_mib", "egress_proxy_memory_mib"),
    ("disk_size_gb", "egress_proxy_disk_size_gb"),
    ("autostart", "egress_proxy_autostart"),
    ("port", "egress_proxy_port"),
    ("allowed_clients", "egress_proxy_allowed_clients"),
    ("address", "egress_proxy_address"),
    ("gateway", "egress_proxy_gateway"),
    ("address6", "egress_proxy_address6"),
    ("gateway6", "egress_proxy_gateway6"),
    ("dns", "egress_proxy_dns"),
    ("search", "egress_proxy_search"),
    ("allowed_destinations", "egress_proxy_allowed_destinations"),
    ("denied_destinations", "egress_proxy_denied_destinations"),
    ("deny_internal", "egress_proxy_deny_internal"),
    ("users", "egress_proxy_users"),
    ("mode", "egress_proxy_mode"),
    ("tls_sni_check", "egress_proxy_tls_sni_check"),
    ("profiles", "egress_proxy_profiles"),
)
# The flags of a policy, the instance's (its default policy) and each profile's, which the inventory may give as text.
PROFILE_FLAGS = ("deny_internal", "tls_sni_check")
# The role-wide settings squid.conf writes the same for every proxy of the hypervisor: its metrics and its access
# log's remote copy. They are not instance keys: each instance gets the role's.
ROLE_WIDE_SQUID = (
    ("metrics", "egress_proxy_metrics"),
    ("metrics_port", "egress_proxy_metrics_port"),
    ("metrics_clients", "egress_proxy_metrics_clients"),
    ("syslog", "egress_proxy_syslog"),
    ("syslog_protocol", "egress_proxy_syslog_protocol"),
)


class RoleInputError(Exception):
    """What the role refuses, as the sentence its task fails with."""


def kvm_proxy_set_errors(arguments):
    """The messages kvm_proxy_set would fail with for ``arguments`` (a dict of its options), before connecting.

    The module's own validation: its argument spec (types, choices, unknown options, mutually_exclusive,
    required_if), then the set's and each proxy's checks. [] when the module accepts them.
    """
    spec = common_argument_spec()
    spec.update(kvm_proxy_set_argument_spec())
    validator = ArgumentSpecValidator(spec, mutually_exclusive=KVM_PROXY_SET_MUTUALLY_EXCLUSIVE,
                                      required_if=KVM_PROXY_SET_REQUIRED_IF)
    checked = validator.validate(dict(arguments))
    if checked.error_messages:
        return list(checked.error_messages)
    params = checked.validated_parameters
    try:
        # The download options too; ca_path names a file on the module's host, so it is not looked for here.
        SetRequest.from_params(params)
        open_timeout(params)
    except KvmError as error:
        return [error.message]
    return []


def _blank(value):
    """Jinja's falsiness, which the role's variables have always been read with: "" and [] and {} and None."""
    return not value


def _bool(value):
    """A role variable read as Jinja's ``bool`` filter reads it (the role's argument spec checks, but does not
    convert, what the inventory gives: "yes" stays a string)."""
    return boolean(value, strict=False)


def _bool_or_given(value):
    """A per-instance flag as a bool when it is one (True, "yes", "false", 0...), else as given, for the check that owns
    it to refuse, naming it: ``_bool`` would read "true\n" or "sometimes" as false, and so turn deny_internal off."""
    try:
        return boolean(value, strict=True)
    except TypeError:
        return value


def _json(value):
    return json.dumps(value)


def fill_in(entry, variables):
    """One instance (an entry of egress_proxy_instances or egress_proxy_fleet) with the role-wide settings filled in
    where it gives none of its own, and ``outside`` its outside NIC: egress_proxy_outside with its own over it."""
    instance = {key: variables[variable] for key, variable in INSTANCE_DEFAULTS}
    instance.update(mac="", outside={})
    instance.update(entry)
    instance.update((key, variables[variable]) for key, variable in ROLE_WIDE_SQUID)
    instance["metrics"] = _bool_or_given(instance["metrics"])
    instance["autostart"] = _bool_or_given(instance["autostart"])
    for flag in PROFILE_FLAGS:
        instance[flag] = _bool_or_given(instance[flag])
    if isinstance(instance["profiles"], list):
        instance["profiles"] = [
            dict(profile, **{flag: _bool_or_given(profile[flag]) for flag in PROFILE_FLAGS if flag in profile})
            if isinstance(profile, dict) else profile for profile in instance["profiles"]]
    # The addresses from the pool are the instance's outside.address and address6 and its profiles' egress addresses,
    # checked from here on as ones given by hand; pooled_addresses says which profile addresses the pool gave.
    instance["outside"], instance["profiles"], instance["pooled_addresses"] = with_allocation(
        instance["name"], dict(variables["egress_proxy_outside"] or {}, **(instance["outside"] or {})),
        instance["profiles"], variables["egress_proxy__pool_addresses"] or {})
    return instance


def _name_problems(instances, variables):
    hypervisor = variables["inventory_hostname"]
    if _blank(variables["egress_proxy_uid"]):
        return ["The proxies of %s: %s has an empty owner (egress_proxy_uid); the role records one owner per deployment, "
                "so set it to a name of your deployment or leave egress_proxy_uid at its default."
                % (hypervisor, _json(instance["name"])) for instance in instances[:1]]
    # Checked before the users' passwords are hashed with it (squid_user_hash refuses a NUL), by the modules' rule.
    try:
        validate_uid(variables["egress_proxy_uid"])
    except ValidationError as error:
        return ["The proxies of %s: egress_proxy_uid: %s." % (hypervisor, error.message)] if instances else []
    names = [instance.get("name") for instance in instances]
    problems = []
    for instance in instances:
        try:
            validate_vm_name(instance["name"])
            wrong = "appears more than once" if names.count(instance["name"]) > 1 else None
        except ValidationError:
            wrong = "is not a valid VM name"
        if wrong:
            lists = "egress_proxy_instances and egress_proxy_fleet" if "hypervisor" in instance else "egress_proxy_instances"
            problem = ("The proxies of %s (%s): the name %s %s. Use 1-63 lowercase letters, digits and hyphens, starting "
                       "and ending with a letter or digit (the name is also the proxy's host name), once per hypervisor."
                       % (hypervisor, lists, _json(instance["name"]), wrong))
            if problem not in problems:
                problems.append(problem)
    return problems


def _placement_problems(kept, variables):
    """The image and the network the running and stopped instances need."""
    image, bridge, network = variables["egress_proxy_image"], variables["egress_proxy_bridge"], variables["egress_proxy_network"]
    if image is not None and _blank(bridge) != _blank(network):
        return []
    return ["%s has instances to run (%s), so the role needs %sexactly one of egress_proxy_bridge (a Linux bridge on the "
            "hypervisor) or egress_proxy_network (a libvirt network); egress_proxy_bridge is %s, egress_proxy_network is %s."
            % (variables["inventory_hostname"], ", ".join(instance["name"] for instance in kept),
               "egress_proxy_image (name, url, and preferably checksum) and " if image is None else "", _json(bridge),
               _json(network))]


def _password_problems(kept, variables):
    """Each user's password, and previous password when it has one, is text squid can be sent and check: not empty, no
    control character, what password_problem accepts (at most 511 bytes). Never quoted."""
    problems = []
    for instance in kept:
        for index, user in enumerate(instance["users"] or []):
            entry = user if isinstance(user, dict) else {}
            for key in ("password", "previous_password") if entry.get("previous_password") is not None else ("password",):
                problem = _password_problem(entry.get(key))
                if problem is not None:
                    problems.append("users[%d] (%s) of %s on %s: %s." % (
                        index, _json(entry.get("name")), instance["name"], variables["inventory_hostname"],
                        problem.replace("the password", "the " + key.replace("_", " "), 1)))
    return problems


def _password_problem(password):
    """Why ``password`` cannot be a user's, as a phrase ("the password is ..."); None when it can."""
    if not isinstance(password, str) or not password:
        return "the password is empty or not text"
    if control_character(password) is not None:
        return "the password has a control character"
    return password_problem(password)


def _with_user_hashes(instance, owner):
    """``instance`` with each user's password replaced by its hash (squid_user_hash): from here on, the instance
    (a fact the role shows at -v) carries no password. An instance being removed keeps no users. A name that is not
    a user's name (not text, a NUL, a line feed...) gets no hash; squid_settings refuses it, naming it."""
    users = [] if instance["state"] == STATE_ABSENT else instance["users"] or []
    return dict(instance, users=[_user_hashes(user, owner) for user in users])


def _user_hashes(user, owner):
    """``user``'s name and the hash of its password, and of its previous password while it has one."""
    named = is_user_name(user.get("name"))
    hashed = {"name": user.get("name"), "hash": squid_user_hash(owner, user["name"], user["password"]) if named else None}
    if user.get("previous_password") is not None:
        hashed["previous_hash"] = squid_user_hash(owner, user["name"], user["previous_password"]) if named else None
    return hashed


def _squid_problems(kept, variables):
    """Every value squid.conf.j2 writes and the SSH keys user-data.yml.j2 writes, unless a user-data replaces both."""
    if not _blank(variables["egress_proxy_user_data"]):
        return []
    # The proxies by what is wrong with them: a role-wide value (an empty egress_proxy_allowed_clients, a bad key) is
    # one sentence naming every proxy, not one sentence per proxy.
    names_by_problem = {}
    for instance in kept:
        found = squid_settings(instance, variables["egress_proxy_safe_ports"],
                               variables["egress_proxy_connect_ports"], variables["egress_proxy_forwarded_for"])[1]
        found += authorized_keys_problems(variables["egress_proxy_ssh_authorized_keys"])
        if found:
            names_by_problem.setdefault("; ".join(found), []).append(instance["name"])
    return ["The squid settings or SSH keys of %s on %s are not usable: %s."
            % (", ".join(names), variables["inventory_hostname"], problem) for problem, names in names_by_problem.items()]


def _two_nic_problems(kept, variables):
    problems = []
    for instance in kept:
        outside = instance["outside"]
        if not outside:
            continue
        found = [] if instance["address"] or instance["address6"] else [
            "address: the inside NIC needs a static address or address6 (squid listens only there)"]
        # With a pool, the deploy's allocation (tasks/pool.yml) gave the proxy its address or failed before this check;
        # the entry points that allocate nothing (targets, destroy) need none.
        if _blank(outside.get("address")) and _blank(outside.get("address6")) and _blank(outside.get("pool")):
            found.append("outside.address: the outside NIC needs a static address or address6 (the egress address), "
                         "or egress_proxy_outside.pool to give it one")
        for gateway in ("gateway", "gateway6"):
            if instance[gateway]:
                found.append("%s %s: the default route leaves through the outside NIC; give outside.%s instead"
                             % (gateway, _json(instance[gateway]), gateway))
        if _blank(outside.get("bridge")) == _blank(outside.get("network")):
            found.append("outside: give exactly one of bridge and network")
        if found:
            problems.append("Proxy %s on %s has an outside NIC, so: %s."
                            % (instance["name"], variables["inventory_hostname"], "; ".join(found)))
    return problems


def _shared_address_problems(kept, variables):
    used = []  # (address without its prefix, proxy, "<proxy> <field>", a NIC's?) of every static NIC and profile address
    for instance in kept:
        outside = instance["outside"]
        for field, address in (("address", instance["address"]), ("outside.address", outside.get("address")),
                               ("address6", instance["address6"]), ("outside.address6", outside.get("address6"))):
            # What is not an address is compared as given: the module's checks (_checked) refuse it, naming it.
            if isinstance(address, str) and address:
                parsed = ipv4_interface(address) or ipv6_interface(address)
                used.append((str(parsed.ip) if parsed else address.split("/")[0], instance["name"],
                             "%s %s" % (instance["name"], field), True))
        profiles = instance.get("profiles")
        for index, profile in enumerate(profiles if isinstance(profiles, list) else []):
            for field in ("egress_address", "egress_address6"):
                address = profile.get(field) if isinstance(profile, dict) else None
                if isinstance(address, str) and address:
                    parsed = ip_address(address)
                    used.append((str(parsed) if parsed else address, instance["name"],
                                 "%s profiles[%d].%s" % (instance["name"], index, field), False))
    # A profile's address that is its own proxy's too is refused with the profile's checks (squid_conf), naming it.
    shared = ["%s %s" % (label, address) for position, (address, proxy, label, nic) in enumerate(used)
              if any(other_position != position and other[0] == address and (nic and other[3] or other[1] != proxy)
                     for other_position, other in enumerate(used))]
    if not shared:
        return []
    return ["Two proxies on %s have one static address: %s. Give each NIC and each profile its own address."
            % (variables["inventory_hostname"], ", ".join(shared))]


def _ha_problems(kept, variables):
    """egress_proxy_ha_groups as checked across the fleet (egress_proxy__ha, vars/main.yml), and what this hypervisor
    adds: a member needs the role's squid policy, which egress_proxy_user_data replaces."""
    problems = list((variables.get("egress_proxy__ha") or {}).get("problems") or [])
    members = [instance["name"] for instance in kept if instance.get("ha")]
    if members and not _blank(variables["egress_proxy_user_data"]):
        problems.append("%s on %s %s in egress_proxy_ha_groups, but egress_proxy_user_data replaces the role's squid "
                        "set-up, and with it the keepalived configuration a member gets; leave egress_proxy_user_data "
                        "empty, or take the proxies out of the groups." % (
                            ", ".join(members), variables["inventory_hostname"], "is" if len(members) == 1 else "are"))
    return problems


def _port_problems(kept, variables):
    if not _bool(variables["egress_proxy_wait_for_port"]):
        return []
    elsewhere = [instance["name"] for instance in kept if instance["port"] != variables["egress_proxy_port"]]
    if not elsewhere:
        return []
    return ["egress_proxy_wait_for_port waits for egress_proxy_port (%s) on every proxy, but on %s %s set another port. "
            "Give them egress_proxy_port, or set egress_proxy_wait_for_port to false."
            % (variables["egress_proxy_port"], variables["inventory_hostname"], ", ".join(elsewhere))]


def _cloud_data_problems(variables):
    """The role's own user-data and vendor-data, as the modules check them (named as the role's variables)."""
    errors = []
    for variable, given in (("egress_proxy_user_data", not _blank(variables["egress_proxy_user_data"])),
                            ("egress_proxy_vendor_data", variables["egress_proxy_vendor_data"] is not None)):
        if given:
            try:
                render_cloud_data(variables[variable], variable)
            except ValidationError as error:
                errors.append(error.message)
    if not errors:
        return []
    return ["The proxies of %s are not usable: %s." % (variables["inventory_hostname"], "; ".join(errors))]


# A qemu guest agent command's name, as qemu-ga lists them (guest-ping, guest-file-open, ...).
_AGENT_RPC = re.compile(r"guest-[a-z0-9-]{1,60}")


def _agent_rpc_problems(_kept, variables):
    """egress_proxy_guest_agent_rpcs: names of agent commands only (the user-data passes them to a shell script)."""
    rpcs = variables["egress_proxy_guest_agent_rpcs"] or []
    bad = [rpc for rpc in rpcs if not isinstance(rpc, str) or not _AGENT_RPC.fullmatch(rpc)]
    if not bad:
        return []
    return ["The proxies of %s are not usable: egress_proxy_guest_agent_rpcs %s %s not the name of a guest agent "
            "command (guest- and lower-case letters, digits and -)." % (
                variables["inventory_hostname"], ", ".join(_json(rpc) for rpc in bad), "is" if len(bad) == 1 else "are")]


# The role's checks of its own variables, in the order they run: the first that finds a problem stops there.
KEPT_CHECKS = (_placement_problems, _squid_problems, _two_nic_problems, _shared_address_problems, _ha_problems,
               _port_problems, _agent_rpc_problems)


def role_instances(desired, variables, removing=False):
    """The instances of one hypervisor (``desired``: its egress_proxy_instances, then the egress_proxy_fleet entries
    naming it) with the role-wide settings filled in, after the checks only the role can make.

    ``removing`` (the destroy entry point): every instance is removed, so only the names and the owner are checked.
    Raises RoleInputError with the sentence the role fails with.
    """
    instances = [fill_in(entry, variables) for entry in desired]
    if removing:
        instances = [dict(instance, state=STATE_ABSENT) for instance in instances]
    kept = [instance for instance in instances if instance["state"] != STATE_ABSENT]
    _refuse_first([lambda: _name_problems(instances, variables), lambda: _password_problems(kept, variables)])
    instances = [_with_user_hashes(instance, variables["egress_proxy_uid"]) for instance in instances]
    if not removing:
        instances = [_with_groups(instance, variables) for instance in instances]
    kept = [instance for instance in instances if instance["state"] != STATE_ABSENT]
    checks = [lambda check=check: check(kept, variables) for check in KEPT_CHECKS] if kept else []
    if not removing:
        checks.append(lambda: _cloud_data_problems(variables))
    _refuse_first(checks)
    return instances


def _with_groups(instance, variables):
    """``instance`` with ``ha``, the HA groups it is in (ha_groups.instance_groups), when it runs in
    any; any other instance as it was, so its squid.conf and user-data stay what they were."""
    groups = (variables.get("egress_proxy__ha") or {}).get("groups") or []
    found = instance_groups(groups, instance["name"]) if instance["state"] != STATE_ABSENT else []
    return dict(instance, ha=found) if found else instance


def _refuse_first(checks):
    """Run ``checks`` in order; the first that finds problems raises RoleInputError with them."""
    for check in checks:
        problems = check()
        if problems:
            raise RoleInputError(" ".join(problems))


def _nics(instance, variables):
    """The NIC options of one proxy: one NIC on egress_proxy_bridge/network; with an outside NIC, both as interfaces
    with their roles; a static address alone as a one-NIC list."""
    inside = {"bridge": variables["egress_proxy_bridge"] or None, "network": variables["egress_proxy_network"] or None,
              "mac": instance["mac"] or None, "address": instance["address"] or None, "gateway": instance["gateway"] or None,
              "address6": instance["address6"] or None, "gateway6": instance["gateway6"] or None,
              "nameservers": instance["dns"] or None, "search": instance["search"] or None}
    outside = instance["outside"]
    if outside:
        return {"interfaces": [dict(inside, role="inside"), {
            "bridge": outside.get("bridge") or None, "network": outside.get("network") or None,
            "mac": outside.get("mac") or None, "role": "outside", "address": outside.get("address") or None,
            "gateway": outside.get("gateway") or None, "address6": outside.get("address6") or None,
            "gateway6": outside.get("gateway6") or None, "nameservers": outside.get("dns") or None,
            "search": outside.get("search") or None}]}
    if instance["address"] or instance["address6"]:
        return {"interfaces": [inside]}
    return {key: inside[key] for key in ("bridge", "network", "mac") if inside[key] is not None}


def _proxy(instance, variables, texts):
    if instance["state"] == STATE_ABSENT:
        return {"name": instance["name"], "state": STATE_ABSENT}
    proxy = {"name": instance["name"], "state": instance["state"], "vcpus": instance["vcpus"],
             "memory_mib": instance["memory_mib"], "disk_size_gb": instance["disk_size_gb"],
             "autostart": instance["autostart"]}
    if variables["egress_proxy_user_data"]:
        proxy["user_data"] = variables["egress_proxy_user_data"]  # the user's own squid set-up: no policy of ours
    elif instance["name"] in texts:
        rendered = texts[instance["name"]]
        proxy.update(user_data=rendered["user_data"], policy=squid_policy(instance, rendered["squid_conf"], variables))
    proxy.update(_nics(instance, variables))
    return proxy


# Where the policy's files go in the guest, and the programs that check and load them (squid 4 and newer).
SQUID_CONF_PATH = "/etc/squid/squid.conf"
SQUID_VALIDATE = ["/usr/sbin/squid", "-k", "parse"]


def squid_ports(settings):
    """Every port squid listens on, from its squid_settings: the proxy's, the metrics port and the cache manager's
    loopback port with the metrics on, an HA member's loopback health port."""
    ports = [settings["port"]]
    if settings["metrics_port"]:
        ports += [settings["metrics_port"], settings["manager_port"]]
    if settings["ha_health_port"]:
        ports.append(settings["ha_health_port"])
    return ports


def squid_policy(instance, squid_conf, variables):
    """kvm_proxy_set's policy of one proxy: its squid.conf, its users' file (name:hash, readable by squid's group),
    while passwords are rotated the previous ones' file and the Basic helper that takes either, and with
    the decisions counted the counter squid runs as its log daemon (both of the role's files/squid_helpers.py).
    Its reload (squid_reload_argv: a reconfigure, new connections to every port squid listens on held meanwhile, not
    refused) is no part of the policy's digest: a proxy that holds the policy is not touched for a new reload. The
    addresses the pool gave its profiles go with it, to be recorded (policy.pooled_addresses)."""
    files = [{"path": SQUID_CONF_PATH, "content": squid_conf if squid_conf.endswith("\n") else squid_conf + "\n"}]
    settings = squid_settings(instance, variables["egress_proxy_safe_ports"], variables["egress_proxy_connect_ports"],
                              variables["egress_proxy_forwarded_for"])[0]
    if settings["users"]:
        files.append({"path": USERS_FILE, "group": "proxy", "mode": "0640",
                      "secret_content": "".join("%s:%s\n" % (user["name"], user["hash"]) for user in settings["users"])})
    if settings["rotating_users"]:
        previous = "".join("%s:%s\n" % (user["name"], user["previous_hash"]) for user in settings["rotating_users"])
        files += [{"path": PREVIOUS_USERS_FILE, "group": "proxy", "mode": "0640", "secret_content": previous},
                  {"path": settings["auth_program"][0], "mode": "0755", "content": program_text(CHECK_EITHER_PASSWORD)}]
    if settings["decisions_counted"]:
        counter = program_text(COUNT_DECISIONS, settings["counter"]["log"], settings["exporter_port"],
                               settings["page_port"])
        files.append({"path": settings["counter"]["program"], "mode": "0755", "content": counter})
    if settings["tls_sni_checked"]:
        files.append({"path": settings["sni_program"], "mode": "0755", "content": program_text(ANSWER_SNI_GIVEN)})
    policy = with_profile_addresses({"files": files, "validate": SQUID_VALIDATE,
                                     "reload": squid_reload_argv(squid_ports(settings))}, settings["egress_addresses"])
    if instance.get("pooled_addresses"):
        # Recorded with the policy, so the next run's allocation keeps them (kvm_proxy_info's pooled_addresses).
        policy["pooled_addresses"] = instance["pooled_addresses"]
    if instance.get("ha"):
        return member_policy(instance, policy)
    return policy


def set_arguments(instances, variables, options=None, omitted=None, texts=None):
    """kvm_proxy_set's arguments for the hypervisor's ``instances`` (role_instances'), checked by the module's own
    validation: ``options`` the set-wide options as the role's task writes them (the converge's in tasks/main.yml,
    the removal's in tasks/destroy.yml), each equal to ``omitted`` (the play's omit) left out, in an option's mapping
    too, as the task leaves it out; the proxies from the instances, with ``texts`` the render of
    templates/proxy_texts.j2 ({name: {"user_data", "squid_conf"}}) for those to run. Raises RoleInputError naming the
    hypervisor.
    """
    arguments = _given(options or {}, omitted)
    arguments["proxies"] = [_proxy(instance, variables, texts or {}) for instance in instances]
    removing = arguments.get("state") == STATE_ABSENT
    return _checked(arguments, "The proxies of %s cannot be removed: %s." if removing else
                    "The proxies of %s are not usable: %s.", variables)


def _given(options, omitted):
    """``options`` without the values that are ``omitted``, in a mapping's values too (Ansible's omit: a placeholder
    text before ansible-core 2.19, an object of its own since)."""
    def given(value):
        return not (value is omitted or (isinstance(value, str) and value == omitted))

    return {option: {key: item for key, item in value.items() if given(item)} if isinstance(value, dict) else value
            for option, value in options.items() if given(value)}


# kvm_proxy_set names a proxy's NICs by their place in its interfaces (_nics): which of the role's variables each is.
NIC_VARIABLES = ("In the role's variables, interfaces[0] is the proxy's (inside) NIC: egress_proxy_bridge or "
                 "egress_proxy_network, and the mac, address, gateway, address6, gateway6, dns (nameservers) and search of "
                 "the instance or the role-wide egress_proxy_*; interfaces[1] is its outside NIC, outside (and "
                 "egress_proxy_outside).")


def _checked(arguments, sentence, variables):
    errors = kvm_proxy_set_errors(arguments)
    if errors:
        refusal = sentence % (variables["inventory_hostname"], "; ".join(errors))
        if any("interfaces[" in error for error in errors):
            refusal += " " + NIC_VARIABLES
        raise RoleInputError(refusal)
    return arguments


def report(converged, check_mode=False, hypervisor=None):
    """What the role shows of kvm_proxy_set's result: one line per listed proxy, and the garbage collection's summary;
    with ``hypervisor`` (the inventory host) also ``results``, what was done to each proxy as the job's stats publish it.

    A proxy's line is its id, state and address, and its static egress addresses where they are others (an outside NIC:
    the addresses a pool gave it too); in check mode what the run would do to it (a proxy to be created does not exist
    yet, and is not missing), in a real run what was done to one that is gone.
    """
    lines = []
    for proxy in converged["proxies"]:
        line = proxy["id"]
        if proxy.get("state"):
            line += " %s %s" % (proxy["state"], proxy.get("ip") or "no address")
            egress = [proxy[key] for key in ("egress_address", "egress_address6") if proxy.get(key)]
            if egress and egress != [proxy.get("ip")]:
                line += " egress %s" % " ".join(egress)
        if check_mode and proxy["outcome"] != "unchanged":
            line += " (would be %s)" % proxy["outcome"]
        elif not proxy.get("state"):
            line += " " + proxy["outcome"]
        lines.append(line)
    spared = ["%s (%s)" % (proxy["name"], proxy.get("reason") or "no reason given") for proxy in converged["spared"]]
    gc = "%s: %s; kept: %s; not this owner's: %s" % (
        "would remove" if check_mode else "removed", ", ".join(proxy["name"] for proxy in converged["removed"]) or "none",
        ", ".join(spared) or "none", ", ".join(proxy["name"] for proxy in converged["foreign"]) or "none")
    shown = {"proxies": lines, "gc": gc}
    if hypervisor is not None:
        shown["results"] = [{"hypervisor": hypervisor, "name": proxy["name"], "action": proxy["outcome"],
                             "state": proxy["state"], "ip": proxy["ip"]}
                            for proxy in converged["proxies"] + converged["removed"]]
    return shown
