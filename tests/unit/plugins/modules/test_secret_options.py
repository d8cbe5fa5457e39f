# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Secrets stay out of what a task prints at -vvv: the invocation, the result, the diff and messages (issue 31 item 2).

Every option that may carry a secret is no_log in every module that takes it;
a no_log dictionary is masked whole, never value by value all over the
result; the password of a URL (https://user:password@host/...) is masked
wherever the URL is shown.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import locks as _locks
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.argspec import (
    kvm_proxy_argument_spec,
    kvm_proxy_set_argument_spec,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import read_iso
from ansible_collections.egress_proxies.kvm.plugins.modules import kvm_base_image, kvm_proxy, kvm_proxy_set, kvm_seed
from ansible_collections.egress_proxies.kvm.plugins.modules.kvm_seed import ARGUMENT_SPEC as KVM_SEED_SPEC
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import FakeHypervisor
from ansible_collections.egress_proxies.kvm.tests.unit.image_server import ImageServer
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_image_cache import IMAGE, IMAGE_SHA
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import IMAGE_SHA as CACHED_SHA
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import UID, ready_host

SECRET_OPTIONS = ("user_data", "vendor_data", "meta_data")
TOKEN = "tok-5f3e1d2c9b8a"
# "proxy", "default" and 1 are in every result: masked value by value, they would turn proxy-1-seed.iso into
# ********-1-seed.iso, the pool into ******** and every 1 into ********.
META_DATA = {"token": TOKEN, "role": "proxy", "pool": "default", "replicas": 1}
PASSWORD = "pw-7c6b5a4d3e2f"
HIDDEN = "user:********@"


@pytest.mark.parametrize("module, spec", [
    ("kvm_seed", KVM_SEED_SPEC),
    ("kvm_proxy", kvm_proxy_argument_spec()),
    ("kvm_proxy_set", kvm_proxy_set_argument_spec()),
    ("kvm_proxy_set proxies[]", kvm_proxy_set_argument_spec()["proxies"]["options"]),
])
def test_the_cloud_init_options_are_no_log(module, spec):
    assert [option for option in SECRET_OPTIONS if not spec[option].get("no_log")] == [], module


@pytest.fixture
def seed_host():
    hv = FakeHypervisor(hostname="hv1")
    hv.add_pool("default")
    return hv


def test_meta_data_is_masked_whole_in_the_invocation_result_and_diff(run_main, seed_host):
    args = dict(name="proxy-1", meta_data=META_DATA)
    for check_mode in (True, False):
        result, out, _opened = run_main(kvm_seed.main, seed_host, args, check_mode=check_mode, diff=True)
        assert TOKEN not in out
        assert result["invocation"]["module_args"]["meta_data"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
        assert result["invocation"]["module_args"]["pool"] == "default"
        assert result["volume"] == "proxy-1-seed.iso" and result["diff"]["after"]["volume"] == "proxy-1-seed.iso"
        assert "********" not in out, "nothing is masked but the invocation's meta_data"
    meta = yaml.safe_load(read_iso(bytes(seed_host.volume("default", "proxy-1-seed.iso").content))["meta-data"])
    assert meta["token"] == TOKEN, "the seed itself is written from the dictionary"


@pytest.mark.parametrize("args, message", [
    (dict(user_data="packages: [squid]\n"), "user_data does not start with a line cloud-init acts on"),
    (dict(state="gone"), "value of state must be one of"),  # refused by Ansible itself, before the module's code
])
def test_a_failure_shows_no_meta_data(run_main, seed_host, args, message):
    result, out, _opened = run_main(kvm_seed.main, seed_host, dict(args, name="proxy-1", meta_data=META_DATA))
    assert result["failed"] is True and message in result["msg"]
    assert TOKEN not in out


@pytest.mark.parametrize("main, args", [
    (kvm_proxy.main, dict(name="proxy-1", meta_data=META_DATA)),
    (kvm_proxy_set.main, dict(meta_data=META_DATA, proxies=[{"name": "proxy-1", "meta_data": dict(META_DATA, n=2)}])),
])
def test_a_proxys_meta_data_is_masked_whole(run_main, main, args):
    image = dict(name="debian-13", url="https://images.example/debian-13.qcow2", checksum="sha256:" + CACHED_SHA)
    result, out, _opened = run_main(main, ready_host("nas1"), dict(args, uid=UID, bridge="br0", image=image), diff=True)
    assert result["changed"] is True and "failed" not in result
    assert TOKEN not in out
    assert "hosts/nas1/domains/proxy-1" in out and "proxy-1-seed.iso" in out and "default" in out
    assert "********" not in out


@pytest.fixture
def image_server(monkeypatch, tmp_path):
    """(kvm_base_image's arguments with a password in the image's URL and in the SHA256SUMS file's, their server)."""
    monkeypatch.setattr(_locks, "default_lock_dir", lambda: str(tmp_path / "locks"))
    server = ImageServer()
    image_url = server.add("/debian-13-generic-amd64.qcow2", IMAGE)
    sums_url = server.add("/SHA256SUMS", ("%s  debian-13-generic-amd64.qcow2\n" % IMAGE_SHA).encode("ascii"))
    with_password = "http://user:%s@" % PASSWORD
    yield dict(name="debian-13", url=image_url.replace("http://", with_password),
               checksum="sha256:" + sums_url.replace("http://", with_password)), server
    server.close()


def test_a_url_password_is_masked_in_the_invocation_and_the_result(run_main, seed_host, image_server):
    image_args, _server = image_server
    for check_mode in (True, False):
        result, out, _opened = run_main(kvm_base_image.main, seed_host, image_args, check_mode=check_mode, diff=True)
        assert result["changed"] is True and "failed" not in result
        assert PASSWORD not in out
        assert HIDDEN in result["invocation"]["module_args"]["url"]
        assert HIDDEN in result["invocation"]["module_args"]["checksum"]


@pytest.mark.parametrize("change, message", [
    (dict(format="qcow3"), "value of format must be one of"),  # Ansible's own refusal, before the module's code
    (dict(checksum="sha512:" + "0" * 128), "only sha256 is"),
])
def test_a_url_password_is_masked_in_a_failure(run_main, seed_host, image_server, change, message):
    image_args, _server = image_server
    result, out, _opened = run_main(kvm_base_image.main, seed_host, dict(image_args, **change))
    assert result["failed"] is True and message in result["msg"]
    assert PASSWORD not in out


def test_a_url_password_is_masked_in_a_download_failure(run_main, seed_host, image_server):
    image_args, server = image_server
    server.routes["/debian-13-generic-amd64.qcow2"].status = 404
    result, out, _opened = run_main(kvm_base_image.main, seed_host, image_args)
    assert result["failed"] is True and "answered HTTP 404" in result["msg"] and HIDDEN in result["msg"]
    assert PASSWORD not in out


def test_no_part_of_a_password_shows_in_a_message_that_cuts_a_long_url_short(run_main, seed_host):
    # The message quotes the URL cut after 60 characters: a cut password is no value Ansible could mask.
    password = "long-" + PASSWORD * 4
    url = "https://user:%s@images.example/debian 13.qcow2" % password
    result, out, _opened = run_main(kvm_base_image.main, seed_host, dict(name="debian-13", url=url))
    assert result["failed"] is True and "has a blank" in result["msg"]
    assert password[:12] not in out


def test_a_password_in_a_proxys_image_url_is_masked(run_main):
    image = dict(name="debian-13", url="https://user:%s@images.example/debian-13.qcow2" % PASSWORD,
                 checksum="sha256:" + CACHED_SHA)
    result, out, _opened = run_main(kvm_proxy_set.main, ready_host("nas1"),
                                    dict(uid=UID, bridge="br0", image=image, proxies=[{"name": "proxy-1"}]), diff=True)
    assert result["changed"] is True and "failed" not in result
    assert PASSWORD not in out
    assert HIDDEN in result["invocation"]["module_args"]["image"]["url"]


def test_a_password_in_the_hypervisor_uri_is_masked(run_main, seed_host):
    uri = "qemu+ssh://user:%s@hv1.example.net/system" % PASSWORD
    result, out, opened = run_main(kvm_seed.main, seed_host, dict(name="proxy-1", uri=uri, user_data="not cloud-config"))
    assert opened == [] and result["failed"] is True and "(hypervisor qemu+ssh://user:********@hv1" in result["msg"]
    assert PASSWORD not in out
