# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors


@pytest.mark.parametrize(
    "code, expected",
    [
        (errors.VIR_ERR_NO_DOMAIN, errors.NotFoundError),
        (errors.VIR_ERR_NO_STORAGE_VOL, errors.NotFoundError),
        (errors.VIR_ERR_NO_STORAGE_POOL, errors.NotFoundError),
        (errors.VIR_ERR_XML_ERROR, errors.PermanentError),
        (errors.VIR_ERR_CONFIG_UNSUPPORTED, errors.PermanentError),
        (errors.VIR_ERR_ACCESS_DENIED, errors.PermanentError),
        (errors.VIR_ERR_AUTH_FAILED, errors.PermanentError),
        (errors.VIR_ERR_OPERATION_INVALID, errors.TransientError),
        (errors.VIR_ERR_INTERNAL_ERROR, errors.TransientError),
        (errors.VIR_ERR_RPC, errors.TransientError),
        (9999, errors.TransientError),
    ],
)
def test_classify_maps_codes_to_the_three_kinds(code, expected):
    error = errors.classify(code, "libvirt said no", "looking up domain 'p1'")
    assert error.__class__ is expected
    assert error.code == code
    assert error.libvirt_message == "libvirt said no"
    assert error.message == "looking up domain 'p1': libvirt said no"


def test_result_keeps_libvirts_code_and_message():
    error = errors.classify(errors.VIR_ERR_NO_STORAGE_POOL, "Storage pool not found", "looking up storage pool 'x'")
    assert error.to_result() == {
        "error_kind": "not_found",
        "libvirt_code": errors.VIR_ERR_NO_STORAGE_POOL,
        "libvirt_message": "Storage pool not found",
    }


def test_errors_not_from_libvirt_carry_no_code():
    error = errors.ValidationError("name 'A' is not valid")
    assert isinstance(error, errors.PermanentError)
    assert error.to_result() == {"error_kind": "invalid_input"}
    assert not error.has_code(errors.VIR_ERR_NO_DOMAIN)


def test_codes_match_the_installed_libvirt_bindings():
    libvirt = pytest.importorskip("libvirt", reason="libvirt-python is not installed in this Python (the 3.9 run has no libvirt bindings)")
    for name in dir(errors):
        if name.startswith("VIR_ERR_"):
            assert getattr(errors, name) == getattr(libvirt, name), name
