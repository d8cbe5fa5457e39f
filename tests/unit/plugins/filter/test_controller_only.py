# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Every filter imports and runs on a controller with ansible-core alone (issue 25, item 4).

A Python of its own, where libvirt, lxml, pycdlib and requests cannot be imported (a sys.meta_path blocker),
imports each filter plugin by its file and runs every filter it offers; ansible.module_utils.basic (the
AnsibleModule the modules' wrapper builds) must not be imported along the way.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

FILTERS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))), "plugins", "filter")
BLOCKED = ("libvirt", "lxml", "pycdlib", "requests")

CHILD = r'''
import importlib.abc
import json
import sys

BLOCKED = %(blocked)r


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in BLOCKED:
            raise ImportError("%%s is not installed on this controller" %% fullname)
        return None


sys.meta_path.insert(0, Blocker())
import importlib

ran = {}
for name in %(names)r:
    plugin = importlib.import_module("ansible_collections.egress_proxies.kvm.plugins.filter." + name)
    filters = plugin.FilterModule().filters()
    ran.update({filter_name: None for filter_name in filters})

from ansible_collections.egress_proxies.kvm.plugins.filter.cloud_init_data_errors import cloud_init_data_errors
from ansible_collections.egress_proxies.kvm.plugins.filter.egress_addresses import egress_addresses
from ansible_collections.egress_proxies.kvm.plugins.filter.egress_pool_view import egress_pool_view
from ansible_collections.egress_proxies.kvm.plugins.filter.ha_group_holders import ha_group_holders
from ansible_collections.egress_proxies.kvm.plugins.filter.ha_groups import ha_groups
from ansible_collections.egress_proxies.kvm.plugins.filter.ha_member_view import ha_member_view
from ansible_collections.egress_proxies.kvm.plugins.filter.kvm_proxy_set_errors import kvm_proxy_set_errors
from ansible_collections.egress_proxies.kvm.plugins.filter.metrics_file_sd import metrics_file_sd
from ansible_collections.egress_proxies.kvm.plugins.filter.metrics_pages import metrics_pages
from ansible_collections.egress_proxies.kvm.plugins.filter.metrics_targets import metrics_targets
from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_instances import proxy_instances
from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_report import proxy_report
from ansible_collections.egress_proxies.kvm.plugins.filter.proxy_set_args import proxy_set_args
from ansible_collections.egress_proxies.kvm.plugins.filter.squid_settings import squid_settings
from ansible_collections.egress_proxies.kvm.plugins.filter.squid_settings_errors import squid_settings_errors
from ansible_collections.egress_proxies.kvm.plugins.filter.verify_expectations import verify_expectations

variables = json.loads(sys.stdin.read())
proxy = {"name": "egress-a", "port": 3128, "allowed_clients": ["10.0.0.0/8"]}
image = {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"}
ran["cloud_init_data_errors"] = cloud_init_data_errors("#cloud-config\n{}\n", "user_data")
ran["squid_settings"] = squid_settings(proxy, ["443"], ["443"], "delete")["port"]
ran["squid_settings_errors"] = squid_settings_errors(dict(proxy, port=0), ["443"], ["443"])
ran["kvm_proxy_set_errors"] = [
    kvm_proxy_set_errors({"uid": "egress", "bridge": "br0", "image": image, "user_data": "#cloud-config\n{}\n",
                          "proxies": [{"name": "egress-a"}, {"name": "egress-b", "memory_mib": 64}]}),
    kvm_proxy_set_errors({"uid": "egress", "bridge": "br0", "image": image, "gc_grace_period": -1,
                          "proxies": [{"name": "egress-a", "mac": "52:54:00:00:00:0a"}]})]
instances = proxy_instances([{"name": "egress-a"}], variables)
ran["proxy_instances"] = instances[0]["state"]
view = egress_pool_view([{"name": "egress-a"}], {"bridge": "br1", "pool": ["198.18.21.0/30"]}, "present")
ran["egress_pool_view"] = view["instances"]
ran["egress_addresses"] = egress_addresses(
    ["hv1"], {"hv1": {"egress_proxy__pool_view": view, "egress_proxy__pool_listing": {"proxies": []}}}, [], ["hv1"])
arguments = proxy_set_args(instances, variables, options={"uid": "egress", "image": image})
ran["proxy_set_args"] = [proxy["name"] for proxy in arguments["proxies"]]
ran["proxy_report"] = proxy_report({"proxies": [{"id": "hosts/hv1/domains/egress-a", "name": "egress-a", "state": None,
                                                "ip": None, "outcome": "created"}],
                                    "removed": [], "spared": [], "foreign": []}, True)["proxies"]
targets = metrics_targets([{"name": "egress-a", "ip": "10.0.0.5"}], instances, "hv1", "egress")
ran["metrics_targets"] = targets["groups"][0]["targets"]
ran["metrics_file_sd"] = len(metrics_file_sd({"hv1": targets["groups"]}, None, ["hv1"]))
ran["metrics_pages"] = metrics_pages("http://10.0.0.5:9301/metrics  000 7\n")
ran["ha_group_holders"] = ha_group_holders(
    [{"name": "office", "address": "10.0.0.10", "members": ["egress-a", "egress-b"]}],
    {"hv1": "http://10.0.0.10:9301/metrics  000 7 \n"})["groups"][0]["answer"]
ha = [{"name": "office", "address": "10.0.0.10", "members": ["egress-a", "egress-b"]}]
ha_view = ha_member_view([{"name": "egress-a", "address": "10.0.0.11/8"}], ha, {"egress_proxy_port": 3128}, "hv1")
ran["ha_member_view"] = [member["address"] for member in ha_view]
ran["ha_groups"] = [member["hypervisor"] for member in ha_groups(
    ha, {"hv1": {"egress_proxy__ha_view": ha_view}, "hv2": {"egress_proxy_instances": [
        {"name": "egress-b", "address": "10.0.0.12/8"}]}}, ["hv1"], ["hv1", "hv2"], [], "egress")["groups"][0]["members"]]
ran["verify_expectations"] = verify_expectations({"name": "egress-a", "ip": "2001:db8::5"}, {}, {}, "http://o/", 3128)[
    "proxy_url"]
ran["imported"] = sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED or name == "ansible.module_utils.basic")
print(json.dumps(ran))
'''


def test_every_filter_imports_and_runs_without_the_hypervisors_libraries_or_ansible_module():
    from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import role_variables

    names = sorted(name[:-3] for name in os.listdir(FILTERS) if name.endswith(".py") and name != "__init__.py")
    variables = role_variables(egress_proxy_image={"name": "debian-12", "url": "https://images.example/debian-12.qcow2"},
                               egress_proxy_bridge="br0", egress_proxy_allowed_clients=["10.0.0.0/8"],
                               egress_proxy_user_data="#cloud-config\n{}\n")
    completed = subprocess.run([sys.executable, "-c", CHILD % {"blocked": BLOCKED, "names": names}],
                               input=json.dumps(variables), capture_output=True, text=True, check=False, timeout=120)
    assert completed.returncode == 0, completed.stderr
    ran = json.loads(completed.stdout)
    assert ran.pop("imported") == []
    assert ran == {
        "cloud_init_data_errors": [],
        "squid_settings": 3128,
        "squid_settings_errors": ["port 0 is not a port between 1 and 65535 in ASCII digits"],
        "kvm_proxy_set_errors": [
            ["proxies[1] (egress-b): memory_mib must be a whole number from 128 to 16777216, got 64"],
            ["gc_grace_period must be a whole number of at least 0, got -1"]],
        "proxy_instances": "present",
        "egress_pool_view": [{"name": "egress-a", "state": None, "outside": {"address": None, "address6": None}}],
        "egress_addresses": {"hv1": {"egress-a": {"address": "198.18.21.1/30"}}},
        "proxy_set_args": ["egress-a"],
        "metrics_targets": ["10.0.0.5:9301"],
        "metrics_file_sd": 1,
        "metrics_pages": {"http://10.0.0.5:9301/metrics": {"answer": "no answer", "requests": None, "would_deny": None}},
        "ha_group_holders": "no answer",
        "ha_member_view": ["10.0.0.11/8"],
        "ha_groups": ["hv1", "hv2"],
        "verify_expectations": "http://[2001:db8::5]:3128",
        "proxy_report": ["hosts/hv1/domains/egress-a (would be created)"],
    }
