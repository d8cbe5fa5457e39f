# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""HTTPS downloads: certificates verified by default, a private CA trusted through ca_path.

The image server of the other download tests, behind TLS with a self-signed
certificate made by openssl for 127.0.0.1, so requests and the ssl module do
the real verification.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import ssl
import subprocess

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image import cache
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.options import DownloadOptions, download_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.spec import ImageSpec
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import FakeHypervisor
from ansible_collections.egress_proxies.kvm.tests.unit.image_server import ImageServer
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_image_header import qcow2_header

IMAGE = qcow2_header(1024 ** 3) + b"served over TLS " * 4096
IMAGE_SHA = hashlib.sha256(IMAGE).hexdigest()


def self_signed(directory, name, *extensions):
    """(certificate, key) files of a self-signed certificate with subject CN=``name``."""
    cert, key = directory / (name + ".pem"), directory / (name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "1", "-subj", "/CN=" + name, "-keyout", str(key), "-out", str(cert)] + list(extensions),
                   check=True, capture_output=True)
    return str(cert), str(key)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """The server's self-signed certificate for 127.0.0.1, and its key."""
    return self_signed(tmp_path_factory.mktemp("tls"), "127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1")


@pytest.fixture
def tls_server(certificate):
    """An ImageServer whose listening socket speaks TLS; its URLs are https://127.0.0.1:<port>/..."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    server = ImageServer()
    # The handshake happens in accept(); a client that refuses the
    # certificate makes it fail there, which the server loop ignores.
    server.httpd.socket = context.wrap_socket(server.httpd.socket, server_side=True)
    yield server
    server.close()


@pytest.fixture
def ensure(tmp_path):
    hv = FakeHypervisor()
    hv.add_pool("default")

    def run(url, **options):
        spec = ImageSpec(name="debian-13", url=url, checksum="sha256:" + IMAGE_SHA, format="qcow2")
        return cache.ensure_image(hv, "default", spec, DownloadOptions(timeout=5, retries=0, backoff=0, **options),
                                  lock_dir=str(tmp_path / "locks"))

    return run


def https(server, path):
    return server.url(path).replace("http://", "https://", 1)


def test_a_self_signed_server_is_refused_by_default_naming_the_url_and_both_ways_out(tls_server, ensure):
    url = https(tls_server, "/debian.qcow2")
    tls_server.add("/debian.qcow2", IMAGE)
    with pytest.raises(PermanentError) as raised:
        ensure(url)
    message = raised.value.message
    assert message.startswith("TLS verification of %s failed against the system's CA certificates" % url)
    assert "set ca_path to the CA certificate" in message
    assert "set validate_certs to false" in message


def test_ca_path_trusts_the_servers_certificate(tls_server, ensure, certificate):
    url = https(tls_server, "/debian.qcow2")
    tls_server.add("/debian.qcow2", IMAGE)
    result = ensure(url, ca_path=certificate[0])
    assert (result.changed, result.sha256, result.bytes) == (True, IMAGE_SHA, len(IMAGE))


def test_a_ca_path_that_does_not_vouch_for_the_server_is_named(tls_server, ensure, tmp_path):
    other_ca = self_signed(tmp_path, "another-ca")[0]
    url = https(tls_server, "/debian.qcow2")
    tls_server.add("/debian.qcow2", IMAGE)
    with pytest.raises(PermanentError, match=r"against the CA bundle %s \(ca_path\)" % other_ca):
        ensure(url, ca_path=other_ca)


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_validate_certs_false_skips_the_check(tls_server, ensure):
    tls_server.add("/debian.qcow2", IMAGE)
    assert ensure(https(tls_server, "/debian.qcow2"), validate_certs=False).sha256 == IMAGE_SHA


def test_a_missing_ca_path_is_refused_before_any_request(tls_server, ensure, tmp_path):
    tls_server.add("/debian.qcow2", IMAGE)
    with pytest.raises(ValidationError, match="ca_path %s does not exist" % (tmp_path / "absent.pem")):
        ensure(https(tls_server, "/debian.qcow2"), ca_path=str(tmp_path / "absent.pem"))
    assert tls_server.hit_count("/debian.qcow2") == 0


def test_ca_path_is_a_shared_download_option():
    assert download_argument_spec()["ca_path"] == dict(type="path")


def test_a_missing_ca_path_is_refused_with_the_other_download_options(tmp_path):
    # The module's own validation, before connecting: a cached image would never open the downloader.
    with pytest.raises(ValidationError, match="^ca_path %s does not exist on the host" % (tmp_path / "absent.pem")):
        DownloadOptions(ca_path=str(tmp_path / "absent.pem")).require_ca_path()
    DownloadOptions(ca_path=str(tmp_path)).require_ca_path()
    DownloadOptions().require_ca_path()


@pytest.mark.parametrize("option, value, message", [
    ("timeout", 0, "timeout must be a positive number of seconds, got 0"),
    ("lock_timeout", -5, "lock_timeout must be a positive number of seconds, got -5"),
    ("retries", -1, "retries must be 0 or more, got -1"),
])
def test_download_options_that_could_never_work_are_refused_when_built(option, value, message):
    with pytest.raises(ValidationError, match="^%s$" % message):
        DownloadOptions.from_params({option: value})


def test_download_options_from_params_take_the_defaults_for_what_is_left_out():
    params = {option: spec.get("default") for option, spec in download_argument_spec().items()}
    assert DownloadOptions.from_params(params) == DownloadOptions.from_params({}) == DownloadOptions()
    assert DownloadOptions.from_params(dict(params, retries=0, ca_path="/ca.pem")) == DownloadOptions(retries=0, ca_path="/ca.pem")
