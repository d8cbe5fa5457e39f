# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The filters the egress_proxy role validates with: the module's own refusals, and squid's, on the controller."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.egress_proxies.kvm.plugins.filter.cloud_init_data_errors import cloud_init_data_errors
from ansible_collections.egress_proxies.kvm.plugins.filter.kvm_proxy_set_errors import kvm_proxy_set_errors
from ansible_collections.egress_proxies.kvm.plugins.filter.squid_settings_errors import squid_settings_errors

IMAGE = {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"}
VALID = {"uid": "egress-eu", "bridge": "br0", "image": IMAGE, "user_data": "#cloud-config\n{}\n",
         "proxies": [{"name": "egress-eu-1"}, {"name": "egress-eu-2", "vcpus": 2}]}


def with_proxy(**overrides):
    return dict(VALID, proxies=[dict(VALID["proxies"][0], **overrides)])


def test_arguments_the_module_accepts_give_no_errors():
    assert kvm_proxy_set_errors(VALID) == []


@pytest.mark.parametrize("arguments, words", [
    (with_proxy(memory_mib=64), "proxies[0] (egress-eu-1): memory_mib"),
    (with_proxy(vcpus="many"), "vcpus"),
    (with_proxy(state="running"), "running"),
    (with_proxy(name="Egress_1"), "Egress_1"),
    (with_proxy(mac="52:54:zz:00:00:01"), "MAC address"),
    (with_proxy(disk_size_gb=0), "disk_size_gb"),
    (with_proxy(colour="red"), "colour"),
    (dict(VALID, proxies=[{"name": "egress-eu-1"}, {"name": "egress-eu-1"}]), "more than once"),
    (dict(VALID, network="default"), "mutually exclusive"),
    (dict(VALID, gc_grace_period=-1), "gc_grace_period"),
    (dict(VALID, max_unavailable=0), "max_unavailable"),
    (dict(VALID, shutdown_timeout=-5), "shutdown_timeout"),
    (dict(VALID, uid=None), "gc needs uid"),
    (dict(VALID, image=None), "needs image"),
])
def test_what_the_module_refuses_the_filter_reports_naming_the_option(arguments, words):
    (error,) = kvm_proxy_set_errors({key: value for key, value in arguments.items() if value is not None})
    assert words in error


def test_removals_need_no_image_network_or_user_data():
    assert kvm_proxy_set_errors({"uid": "egress-eu", "state": "absent", "gc": False,
                                 "proxies": [{"name": "egress-eu-1"}]}) == []


SAFE = ["80", "443", "1025-65535"]
CONNECT = ["443"]


def test_usable_squid_settings_give_no_problems():
    proxy = {"name": "egress-eu-1", "port": 3128, "allowed_clients": ["198.18.0.0/24", "10.1.2.3", "2001:db8::/32", "::1"]}
    assert squid_settings_errors(proxy, SAFE, CONNECT) == []


@pytest.mark.parametrize("proxy, safe, connect, words", [
    ({"name": "egress-eu-1", "port": 70000, "allowed_clients": ["10.0.0.0/8"]}, SAFE, CONNECT, "port 70000 is not a port between 1 and 65535"),
    ({"name": "egress-eu-1", "port": 0, "allowed_clients": ["10.0.0.0/8"]}, SAFE, CONNECT, "port 0"),
    ({"name": "egress-eu-1", "port": 3128, "allowed_clients": []}, SAFE, CONNECT, "allowed_clients is empty"),
    ({"name": "egress-eu-1", "port": 3128, "allowed_clients": ["300.1.1.1/99"]}, SAFE, CONNECT, "'300.1.1.1/99'"),
    ({"name": "egress-eu-1", "port": 3128, "allowed_clients": ["::::"]}, SAFE, CONNECT, "'::::'"),
    ({"name": "egress-eu-1", "port": 3128, "allowed_clients": ["10.0.0.1/8"]}, SAFE, CONNECT, "no host bits"),
    ({"name": "egress-eu-1", "port": 3128, "allowed_clients": ["198.18.0.0/24 all"]}, SAFE, CONNECT, "'198.18.0.0/24 all'"),
    ({"name": "egress-eu-1", "port": 3128, "allowed_clients": ["10.0.0.0/8"]}, ["70000"], CONNECT, "egress_proxy_safe_ports '70000'"),
    ({"name": "egress-eu-1", "port": 3128, "allowed_clients": ["10.0.0.0/8"]}, ["0-99999"], CONNECT, "'0-99999'"),
    ({"name": "egress-eu-1", "port": 3128, "allowed_clients": ["10.0.0.0/8"]}, ["2000-1000"], CONNECT, "'2000-1000'"),
    ({"name": "egress-eu-1", "port": 3128, "allowed_clients": ["10.0.0.0/8"]}, SAFE, [], "egress_proxy_connect_ports is empty"),
])
def test_what_squid_would_refuse_is_a_problem(proxy, safe, connect, words):
    (problem,) = squid_settings_errors(proxy, safe, connect)
    assert words in problem


@pytest.mark.parametrize("value", ["#cloud-config\npackages: [squid]\n", "#!/bin/sh\n", "", {"packages": ["squid"]}])
def test_cloud_init_data_the_modules_write_gives_no_errors(value):
    assert cloud_init_data_errors(value, "egress_proxy_user_data") == []


@pytest.mark.parametrize("value, words", [
    ("#cloud-config\nhostname: caf\udce9\n", "egress_proxy_user_data is not UTF-8 text"),
    ("#cloud-config\nhostname: a\x00b\n", "egress_proxy_user_data holds binary data"),
    ("#cloud-config\n" + "#" * (2 * 1024 * 1024), "egress_proxy_user_data is 2097166 bytes"),
    ("packages: [squid]\n", "egress_proxy_user_data does not start with a line cloud-init acts on"),
    (["packages"], "egress_proxy_user_data must be a string or a dictionary"),
], ids=["not UTF-8", "binary", "over 1 MiB", "YAML without #cloud-config", "a list"])
def test_cloud_init_data_the_modules_refuse_is_named_as_the_role_variable(value, words):
    (error,) = cloud_init_data_errors(value, "egress_proxy_user_data")
    assert error.startswith(words), error
