# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The guest agent channel over the fake: files in pieces, a read bounded, an agent that is gone, a program's words."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.agent import (
    CHUNK,
    AgentUnavailableError,
    Completed,
    GuestAgent,
    GuestFileError,
)
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import RUNNING, SHUTOFF, FakeFile, FakeHypervisor
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import FakeTime


def guest(state=RUNNING):
    hv = FakeHypervisor()
    dom = hv.add_domain("proxy-a", state=state)
    return hv, dom, GuestAgent(hv, dom, "proxy-a", FakeTime())


def test_a_file_larger_than_one_piece_is_written_and_read_in_pieces():
    hv, dom, agent = guest()
    data = bytes(range(256)) * (CHUNK // 128 + 3)
    agent.write_file("/etc/big", data)
    assert dom.guest.files["/etc/big"].content == data
    before = hv.calls.count("guest_query")
    assert agent.read_file("/etc/big", len(data)) == data
    # open, one read a piece, close
    assert hv.calls.count("guest_query") - before == 2 + -(-len(data) // CHUNK)


def test_a_read_stops_past_its_limit():
    _hv, dom, agent = guest()
    dom.guest.files["/etc/squid/squid.conf"] = FakeFile(b"x" * (3 * CHUNK))
    assert len(agent.read_file("/etc/squid/squid.conf", CHUNK)) == CHUNK + 1


def test_a_missing_file_is_a_guest_file_error_naming_domain_and_path():
    _hv, _dom, agent = guest()
    with pytest.raises(GuestFileError) as raised:
        agent.read_file("/etc/none", 10)
    assert raised.value.message.startswith("the guest agent of domain 'proxy-a' could not open /etc/none: ")


@pytest.mark.parametrize("state, code", [(RUNNING, errors.VIR_ERR_AGENT_UNRESPONSIVE), (SHUTOFF, None)])
def test_an_agent_that_is_not_there_is_unavailable(state, code):
    _hv, dom, agent = guest(state)
    dom.agent_error = code
    with pytest.raises(AgentUnavailableError) as raised:
        agent.ping()
    assert "the guest agent of domain 'proxy-a' did not answer" in raised.value.message


def test_waiting_for_an_agent_gives_up_after_its_time():
    _hv, dom, agent = guest()
    dom.agent_error = errors.VIR_ERR_AGENT_UNRESPONSIVE
    with pytest.raises(AgentUnavailableError):
        agent.await_answer(30)
    assert 1030 <= agent.timing.monotonic() <= 1032


def test_a_programs_message_is_its_last_lines():
    logged = "\n".join("2026/12/03| Processing: line %d" % number for number in range(200))
    completed = Completed(1, b"", (logged + "\nFATAL: Bungled squid.conf line 51: bogus\n").encode())
    assert completed.said().endswith("Processing: line 199 / FATAL: Bungled squid.conf line 51: bogus")
    assert len(Completed(1, b"x" * 1000, b"").said()) == 400
