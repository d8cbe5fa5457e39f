# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The seed's files refuse what cloud-init could not use: not UTF-8, binary, too large, text it would ignore."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import MAX_FILE_BYTES
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.nocloud import seed_files

NAME = "proxy-1"
SECRET = "s3cret-password"


@pytest.mark.parametrize("option", ["user_data", "vendor_data"])
@pytest.mark.parametrize("value, refusal", [
    ("#cloud-config\npassword: %s\x00\x01\n" % SECRET, r"holds binary data \(the control character U\+0000 at offset"),
    ("#cloud-config\npassword: %s caf\udce9\n" % SECRET, r"is not UTF-8 text \(the character at offset 43 "),
    (b"#cloud-config\npassword: caf\xe9\n", r"is not UTF-8 text \(the byte at offset 27 cannot be decoded\)"),
    ("#cloud-config\n" + "a" * MAX_FILE_BYTES, r"is %d bytes, more than the 1048576 bytes \(1 MiB\)" % (MAX_FILE_BYTES + 14)),
    ("packages: [squid]\npassword: %s\n" % SECRET, r"does not start with a line cloud-init acts on .*#cloud-config"),
    ("just some words %s" % SECRET, "does not start with a line cloud-init acts on"),
], ids=["binary", "not UTF-8 (surrogates)", "not UTF-8 (bytes)", "over 1 MiB", "YAML without #cloud-config", "plain text"])
def test_cloud_data_that_cloud_init_could_not_use_is_refused_naming_the_option_never_its_content(option, value, refusal):
    with pytest.raises(ValidationError, match="^%s %s" % (option, refusal)) as raised:
        seed_files(NAME, **{option: value})
    assert SECRET not in raised.value.message


def test_a_dictionary_over_the_limit_is_refused_like_text():
    with pytest.raises(ValidationError, match="^user_data is"):
        seed_files(NAME, {"write_files": [{"content": "a" * MAX_FILE_BYTES}]})


@pytest.mark.parametrize("user_data", [
    "", "  \n", "#cloud-config\n{}\n", "  #Cloud-Config\npackages: []\n", "#!/bin/sh\necho ok\r\n\techo tab\n",
    "#include https://config.example.net/x\n", "#cloud-boothook\n#!/bin/sh\n", "## template: jinja\n#cloud-config\n",
    "Content-Type: multipart/mixed; boundary=\"b\"\n", "From nobody\nMIME-Version: 1.0\n", "#cloud-config\n" + "a" * (MAX_FILE_BYTES - 14),
], ids=["empty", "blank", "cloud-config", "cloud-config any case, indented", "script with CR and tab", "include",
        "boothook", "jinja template", "MIME", "MIME version in the head", "exactly 1 MiB"])
def test_every_format_cloud_init_reads_is_written_verbatim(user_data):
    assert seed_files(NAME, user_data)["user-data"] == user_data.encode("utf-8")


def test_network_config_text_is_held_to_text_and_size_but_needs_no_header():
    assert seed_files(NAME, network_config="version: 2\n")["network-config"] == b"version: 2\n"
    with pytest.raises(ValidationError, match="^network_config holds binary data"):
        seed_files(NAME, network_config="version: 2\x00\n")
    with pytest.raises(ValidationError, match="^network_config is %d bytes" % (MAX_FILE_BYTES + 1)):
        seed_files(NAME, network_config="a" * (MAX_FILE_BYTES + 1))
