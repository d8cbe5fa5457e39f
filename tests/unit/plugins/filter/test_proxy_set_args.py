# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The egress_proxy role's data in Python: the instances filled in and checked (proxy_instances), kvm_proxy_set's
arguments built and validated by the module's own code (proxy_set_args), each refusal naming hypervisor and proxy."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_instances import proxy_instances
from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_set_args import proxy_set_args
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_reload import squid_reload_argv
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import OMIT, REMOVAL_OPTIONS, role_variables, set_options

IMAGE = {"name": "debian-12", "url": "https://images.example/debian-12.qcow2", "checksum": "", "format": "qcow2"}
USABLE = dict(egress_proxy_image=IMAGE, egress_proxy_bridge="br0", egress_proxy_allowed_clients=["10.0.0.0/8"])
OUTSIDE = {"bridge": "br1", "gateway": "198.19.0.1"}


def variables(**overrides):
    return role_variables(**dict(USABLE, **overrides))


def rendered(*names):
    """The role's render of the texts (templates/proxy_texts.j2): user-data and squid.conf by name."""
    return {name: {"user_data": "#cloud-config\n# %s\n" % name, "squid_conf": "# squid.conf of %s" % name}
            for name in names}


def converge(instances, **overrides):
    settings = variables(**overrides)
    filled = proxy_instances(instances, settings)
    return proxy_set_args(filled, settings, options=set_options(settings), omitted=OMIT,
                          texts=rendered(*[entry["name"] for entry in instances]))


def refusal(instances, **overrides):
    with pytest.raises(AnsibleFilterError) as raised:
        converge(instances, **overrides)
    return raised.value.message


def test_each_instance_gets_the_role_wide_settings_it_does_not_give():
    (first, second) = proxy_instances([{"name": "egress-a"}, {"name": "egress-b", "vcpus": 2, "outside": {"address": "x"}}],
                                      variables(egress_proxy_vcpus=3, egress_proxy_outside=OUTSIDE, egress_proxy_state="absent"))
    assert first == {"name": "egress-a", "state": "absent", "vcpus": 3, "memory_mib": 1024, "disk_size_gb": 10, "mac": "",
                     "autostart": True, "port": 3128, "allowed_clients": ["10.0.0.0/8"], "address": "", "gateway": "",
                     "address6": "", "gateway6": "", "dns": [], "search": [], "outside": OUTSIDE, "allowed_destinations": [], "denied_destinations": [],
                     "deny_internal": True, "users": [], "mode": "enforce", "tls_sni_check": False, "profiles": [],
                     "pooled_addresses": {}, "metrics": True, "metrics_port": 9301, "metrics_clients": [], "syslog": "", "syslog_protocol": "udp"}
    assert second["vcpus"] == 2 and second["outside"] == dict(OUTSIDE, address="x")


def test_the_arguments_are_the_modules_with_the_roles_values_and_unset_ones_left_out():
    arguments = converge([{"name": "egress-a"}, {"name": "egress-b", "state": "absent"}], egress_proxy_wait_for_port=True)
    assert arguments == {
        "uri": "qemu:///system", "connect_timeout": 20, "host": "hv1", "uid": "egress_proxies.kvm.egress_proxy",
        "adopt_uids": [], "pool": "default", "image": {"name": "debian-12", "url": IMAGE["url"], "format": "qcow2"},
        "image_prune": False, "virt_type": "kvm",
        "on_drift": "replace", "on_unreachable_agent": "fail", "shutdown_timeout": 120, "wait_for_ip": True,
        "wait_timeout": 300, "wait_for_port": 3128, "gc": True, "gc_grace_period": 3600, "max_unavailable": 1,
        "proxies": [{"name": "egress-a", "state": "present", "vcpus": 1, "memory_mib": 1024, "disk_size_gb": 10,
                     "autostart": True, "user_data": "#cloud-config\n# egress-a\n", "bridge": "br0",
                     # squid.conf (its last newline put back) is the proxy's policy, checked and loaded by squid,
                     # new connections to its ports (the proxy's, the metrics and cache manager's) held meanwhile.
                     "policy": {"files": [{"path": "/etc/squid/squid.conf", "content": "# squid.conf of egress-a\n"}],
                                "validate": ["/usr/sbin/squid", "-k", "parse"],
                                "reload": squid_reload_argv([3128, 9301, 13128])}},
                    {"name": "egress-b", "state": "absent"}]}


def test_the_nics_of_a_static_and_of_a_two_nic_proxy():
    (static, two) = converge([{"name": "egress-a", "address": "198.18.0.5/24", "dns": ["198.18.0.1"]},
                              {"name": "egress-b", "address": "198.18.0.6/24", "mac": "52:54:00:00:00:0a",
                               "outside": dict(OUTSIDE, address="198.19.0.6/24")}])["proxies"]
    assert static["interfaces"] == [{"bridge": "br0", "network": None, "mac": None, "address": "198.18.0.5/24",
                                     "gateway": None, "address6": None, "gateway6": None, "nameservers": ["198.18.0.1"],
                                     "search": None}]
    assert [nic["role"] for nic in two["interfaces"]] == ["inside", "outside"]
    assert two["interfaces"][1] == {"bridge": "br1", "network": None, "mac": None, "role": "outside",
                                    "address": "198.19.0.6/24", "gateway": "198.19.0.1", "address6": None, "gateway6": None,
                                    "nameservers": None, "search": None}
    assert "bridge" not in two


def test_an_address_from_the_pool_is_the_outside_address_and_an_own_one_stays():
    pooled = {"egress-a": {"address": "198.19.0.10/24", "address6": "2001:db8:19::10/64"},
              "egress-b": {"address": "198.19.0.11/24", "address6": "2001:db8:19::11/64"}}
    (first, second) = converge([{"name": "egress-a", "address": "198.18.0.5/24"},
                                {"name": "egress-b", "address": "198.18.0.6/24", "outside": {"address": "198.19.0.6/24"}}],
                               egress_proxy_outside=dict(OUTSIDE, pool=["198.19.0.10-198.19.0.20"]),
                               egress_proxy__pool_addresses=pooled)["proxies"]
    assert (first["interfaces"][1]["address"], first["interfaces"][1]["address6"]) == ("198.19.0.10/24", "2001:db8:19::10/64")
    assert (second["interfaces"][1]["address"], second["interfaces"][1]["address6"]) == ("198.19.0.6/24", "2001:db8:19::11/64")


def test_with_a_pool_the_entry_points_that_allocate_nothing_check_the_rest():
    # targets and destroy run no allocation: a pooled proxy is checked without its outside address.
    (instance,) = proxy_instances([{"name": "egress-a", "address": "198.18.0.5/24"}],
                                  variables(egress_proxy_outside=dict(OUTSIDE, pool=["198.19.0.10-198.19.0.20"])))
    assert "address" not in instance["outside"]


def test_an_address_from_the_pool_goes_through_the_checks_of_an_own_one():
    message = refusal([{"name": "egress-a", "address": "198.18.0.5/24"},
                       {"name": "egress-b", "address": "198.18.0.6/24", "outside": {"address": "198.19.0.7/24"}}],
                      egress_proxy_outside=OUTSIDE, egress_proxy__pool_addresses={"egress-a": {"address": "198.18.0.6/24"}})
    assert "have one static address: egress-a outside.address 198.18.0.6, egress-b address 198.18.0.6." in message


def test_vendor_data_follows_install_packages_and_a_users_user_data_replaces_the_roles():
    arguments = converge([{"name": "egress-a"}], egress_proxy_install_packages=False,
                         egress_proxy_user_data="#cloud-config\n{}\n")
    assert arguments["vendor_data"] == "" and arguments["proxies"][0]["user_data"] == "#cloud-config\n{}\n"


def test_the_removal_removes_every_listed_proxy_and_nothing_else():
    settings = variables(egress_proxy_image=None, egress_proxy_bridge="")
    instances = proxy_instances([{"name": "egress-a", "state": "stopped"}], settings, removing=True)
    assert proxy_set_args(instances, settings, options=set_options(settings, REMOVAL_OPTIONS), omitted=OMIT) == {
        "host": "hv1", "uid": "egress_proxies.kvm.egress_proxy", "adopt_uids": [], "pool": "default", "state": "absent",
        "gc": False, "shutdown_timeout": 120, "proxies": [{"name": "egress-a", "state": "absent"}]}


@pytest.mark.parametrize("instances, overrides, words", [
    ([{"name": "Egress_1"}], {}, 'The proxies of hv1 (egress_proxy_instances): the name "Egress_1" is not a valid VM name.'),
    ([{"name": "egress-a"}, {"name": "egress-a"}], {}, 'the name "egress-a" appears more than once'),
    ([{"name": "egress-a", "hypervisor": "hv1"}], {"egress_proxy_uid": ""}, "has an empty owner (egress_proxy_uid)"),
    ([{"name": "egress-a"}], {"egress_proxy_bridge": ""},
     "hv1 has instances to run (egress-a), so the role needs exactly one of egress_proxy_bridge"),
    ([{"name": "egress-a"}], {"egress_proxy_image": None}, "needs egress_proxy_image (name, url, and preferably checksum)"),
    ([{"name": "egress-a", "port": 70000}], {}, "The squid settings or SSH keys of egress-a on hv1 are not usable: port 70000"),
    # A role-wide value wrong for every proxy: one sentence naming them all.
    ([{"name": "egress-a"}, {"name": "egress-b", "port": 70000}, {"name": "egress-c"}], {"egress_proxy_allowed_clients": []},
     "The squid settings or SSH keys of egress-a, egress-c on hv1 are not usable: allowed_clients is empty (set "
     "egress_proxy_allowed_clients, or allowed_clients on the instance). The squid settings or SSH keys of egress-b on hv1"),
    ([{"name": "egress-a"}], {"egress_proxy_ssh_authorized_keys": ["a\nb"]}, "egress_proxy_ssh_authorized_keys[0]"),
    ([{"name": "egress-a", "outside": {"bridge": "br1"}}], {},
     "Proxy egress-a on hv1 has an outside NIC, so: address: the inside NIC needs a static address"),
    ([{"name": "egress-a", "address": "198.18.0.5/24"}, {"name": "egress-b", "address": "198.18.0.5/16"}], {},
     "Two proxies on hv1 have one static address: egress-a address 198.18.0.5, egress-b address 198.18.0.5."),
    ([{"name": "egress-a", "port": 3129}], {"egress_proxy_wait_for_port": True}, "but on hv1 egress-a set another port"),
    ([{"name": "egress-a"}], {"egress_proxy_vendor_data": "packages: []\n"},
     "The proxies of hv1 are not usable: egress_proxy_vendor_data does not start with a line cloud-init acts on"),
    # The module's own validation, on the arguments the role passes.
    ([{"name": "egress-a", "memory_mib": 64}], {}, "The proxies of hv1 are not usable: proxies[0] (egress-a): memory_mib"),
    ([{"name": "egress-a", "mac": "52:54:zz:00:00:01"}], {}, "proxies[0] (egress-a): MAC address"),
    ([{"name": "egress-a"}], {"egress_proxy_max_unavailable": 0}, "max_unavailable"),
    ([{"name": "egress-a"}], {"egress_proxy_connect_timeout": -1},
     "The proxies of hv1 are not usable: connect_timeout must be a whole number of seconds, 0 (no bound) or more, got -1"),
    ([{"name": "egress-a", "address": "198.18.0.5/24", "gateway": "198.18.1.1"}], {},
     "proxies[0] (egress-a): interfaces[0]: gateway 198.18.1.1 is outside the prefix"),
])
def test_what_the_role_or_the_module_refuses_fails_naming_the_hypervisor_and_the_proxy(instances, overrides, words):
    assert words in refusal(instances, **overrides)


def test_a_removal_checks_only_the_names_and_the_owner():
    settings = variables(egress_proxy_image=None, egress_proxy_allowed_clients=[], egress_proxy_user_data="not cloud-init")
    assert proxy_instances([{"name": "egress-a", "port": 0}], settings, removing=True)[0]["state"] == "absent"
    with pytest.raises(AnsibleFilterError, match="is not a valid VM name"):
        proxy_instances([{"name": "-a"}], settings, removing=True)


def test_the_report_lines_and_the_gc_summary():
    from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_report import proxy_report

    converged = {"proxies": [{"id": "hosts/hv1/domains/egress-a", "state": "Running", "ip": None, "outcome": "replaced"},
                             {"id": "hosts/hv1/domains/egress-b", "state": None, "ip": None, "outcome": "removed"},
                             {"id": "hosts/hv1/domains/egress-c", "state": "Stopped", "ip": None, "outcome": "unchanged"}],
                 "removed": [{"name": "egress-old"}], "spared": [{"name": "egress-young", "reason": None}], "foreign": []}
    assert proxy_report(converged, True) == {
        "proxies": ["hosts/hv1/domains/egress-a Running no address (would be replaced)",
                    "hosts/hv1/domains/egress-b (would be removed)", "hosts/hv1/domains/egress-c Stopped no address"],
        "gc": "would remove: egress-old; kept: egress-young (no reason given); not this owner's: none"}
    assert proxy_report(converged)["proxies"][:2] == ["hosts/hv1/domains/egress-a Running no address",
                                                      "hosts/hv1/domains/egress-b removed"]
