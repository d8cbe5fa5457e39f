# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import threading
import time

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import (
    VIR_ERR_NO_DOMAIN,
    KvmError,
    NotFoundError,
    TransientError,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt import hypervisor as _libvirt
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import parse_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import (
    METADATA_PREFIX,
    METADATA_URI,
    build_instance_element,
    unqualified_xml,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import VIR_DOMAIN_RUNNING


def test_flag_values_are_libvirts():
    libvirt = pytest.importorskip("libvirt", reason="libvirt-python is not installed in this Python (the 3.9 run has no libvirt bindings)")
    assert _libvirt.UNDEFINE_ALL == (
        libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA | libvirt.VIR_DOMAIN_UNDEFINE_NVRAM
    )
    assert _libvirt.ADDRESS_SOURCE_AGENT == libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT
    assert _libvirt.ADDRESS_SOURCE_ARP == libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_ARP
    assert _libvirt.METADATA_ELEMENT == libvirt.VIR_DOMAIN_METADATA_ELEMENT
    assert _libvirt.METADATA_AFFECT_CONFIG == libvirt.VIR_DOMAIN_AFFECT_CONFIG


def test_open_failure_is_typed_and_names_the_uri():
    pytest.importorskip("libvirt", reason="libvirt-python is not installed in this Python (the 3.9 run has no libvirt bindings)")
    # test:///default is libvirt's built-in mock driver; an unknown scheme fails inside libvirt itself.
    with pytest.raises((NotFoundError, TransientError)) as caught:
        _libvirt.Hypervisor.open("nosuchdriver:///nowhere")
    assert "nosuchdriver:///nowhere" in caught.value.message


def test_seam_against_libvirts_test_driver():
    pytest.importorskip("libvirt", reason="libvirt-python is not installed in this Python (the 3.9 run has no libvirt bindings)")
    with _libvirt.Hypervisor.open("test:///default") as hypervisor:
        dom = hypervisor.lookup_domain("test")
        assert hypervisor.domain_name(dom) == "test"
        assert hypervisor.domain_state(dom) == VIR_DOMAIN_RUNNING
        assert parse_domain_xml(hypervisor.domain_xml(dom)).metadata is None
        with pytest.raises(NotFoundError) as caught:
            hypervisor.lookup_domain("absent")
        assert caught.value.code == VIR_ERR_NO_DOMAIN
        pool = hypervisor.lookup_pool("default-pool")
        assert hypervisor.list_volumes(pool) == []


def test_metadata_written_through_the_seam_reads_back_from_the_domain_xml():
    pytest.importorskip("libvirt", reason="libvirt-python is not installed in this Python (the 3.9 run has no libvirt bindings)")
    created = datetime.datetime(2026, 11, 29, 18, 0, 0, tzinfo=datetime.timezone.utc)
    element = build_instance_element("uid-<&>", created, "ab" * 32, policy_digest="cd" * 32)
    with _libvirt.Hypervisor.open("test:///default") as hypervisor:
        dom = hypervisor.lookup_domain("test")
        hypervisor.set_domain_metadata(dom, unqualified_xml(element), METADATA_PREFIX, METADATA_URI, live=True)
        metadata = parse_domain_xml(hypervisor.domain_xml(dom)).metadata
    assert (metadata.managed, metadata.uid, metadata.created_at, metadata.spec_digest, metadata.policy_digest) == (
        True, "uid-<&>", created, "ab" * 32, "cd" * 32)


def test_a_guest_agent_command_goes_through_qemu_agent_command_and_fails_typed():
    pytest.importorskip("libvirt", reason="libvirt-python is not installed in this Python (the 3.9 run has no libvirt bindings)")
    # libvirt's test driver has no guest agent: the command reaches libvirt, which refuses it.
    with _libvirt.Hypervisor.open("test:///default") as hypervisor:
        dom = hypervisor.lookup_domain("test")
        with pytest.raises(KvmError) as caught:
            hypervisor.guest_query(dom, "guest-ping", None, 5)
    assert caught.value.message.startswith("running guest agent command guest-ping in domain 'test': ")
    assert caught.value.code is not None


class _LateConnection:
    def __init__(self):
        self.closed = threading.Event()

    def close(self):
        self.closed.set()


def test_an_open_that_gets_no_answer_fails_typed_and_the_late_connection_is_closed(monkeypatch):
    libvirt = pytest.importorskip("libvirt", reason="libvirt-python is not installed in this Python (the 3.9 run has no libvirt bindings)")
    answer = threading.Event()
    late = _LateConnection()

    def open_that_waits(uri):
        # A daemon that accepted the socket and replies only when the test says so.
        answer.wait()
        return late

    monkeypatch.setattr(libvirt, "open", open_that_waits)
    with pytest.raises(TransientError) as caught:
        _libvirt.Hypervisor.open("qemu+ssh://root@hv1/system", timeout=0.2)
    assert "qemu+ssh://root@hv1/system" in caught.value.message
    assert "no answer within" in caught.value.message
    answer.set()
    assert late.closed.wait(10), "the connection that arrived after the caller gave up was leaked"


def test_an_open_that_gets_no_answer_names_the_hypervisor_and_says_nothing_changed(monkeypatch):
    libvirt = pytest.importorskip("libvirt", reason="libvirt-python is not installed in this Python (the 3.9 run has no libvirt bindings)")
    answer = threading.Event()
    monkeypatch.setattr(libvirt, "open", lambda uri: answer.wait() and _LateConnection())
    try:
        with pytest.raises(TransientError) as caught:
            _libvirt.Hypervisor.open("qemu:///system", timeout=0.2, name="lab-hv2")
    finally:
        answer.set()
    assert caught.value.message.startswith("connecting to hypervisor lab-hv2 (qemu:///system): no answer within 0.2 seconds")
    assert "Nothing was changed" in caught.value.message and "connect_timeout" in caught.value.message


def test_an_open_without_a_bound_waits_for_the_answer(monkeypatch):
    libvirt = pytest.importorskip("libvirt", reason="libvirt-python is not installed in this Python (the 3.9 run has no libvirt bindings)")
    late = _LateConnection()

    def slow_open(uri):
        time.sleep(0.3)
        return late

    monkeypatch.setattr(libvirt, "open", slow_open)
    # A connection without keepalive support, as libvirt's test driver is.
    monkeypatch.setattr(late, "setKeepAlive", lambda *_args: None, raising=False)
    hypervisor = _libvirt.Hypervisor.open("qemu:///system", timeout=None)
    assert hypervisor._conn is late
