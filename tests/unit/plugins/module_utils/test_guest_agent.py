# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The guest agent channel over the fake: files in pieces, a read bounded, an agent that is gone, a program's words,
and a compromised guest's replies, each bounded in bytes and time."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import MAX_FILE_BYTES
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.timing import Deadline
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.agent import (
    COMMAND_TIMEOUT,
    EXEC_TIMEOUT,
    OUTPUT_LIMIT,
    READ_CHUNK,
    WRITE_CHUNK,
    AgentUnavailableError,
    Completed,
    GuestAgent,
    GuestBudget,
    GuestFileError,
    GuestProtocolError,
    GuestTimeoutError,
)
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import RUNNING, SHUTOFF, FakeFile, FakeHypervisor
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import FakeTime


def guest(state=RUNNING, seconds=600):
    hv = FakeHypervisor()
    dom = hv.add_domain("proxy-a", state=state)
    time = FakeTime()
    return hv, dom, GuestAgent(hv, dom, "proxy-a", time, GuestBudget(seconds, time.monotonic))


def test_a_file_larger_than_one_piece_is_written_and_read_in_pieces():
    """The largest policy file (1 MiB) in writes the guest's agent answers (the fake's, as qemu-ga 7.2's, stops
    answering a larger write)."""
    hv, dom, agent = guest()
    data = bytes(range(256)) * (MAX_FILE_BYTES // 256)
    before = hv.calls.count("guest_change")
    agent.write_file("/etc/big", data)
    assert dom.guest.files["/etc/big"].content == data
    # open, one write a piece, close
    assert hv.calls.count("guest_change") - before == 2 + -(-len(data) // WRITE_CHUNK)
    before = hv.calls.count("guest_query")
    assert agent.read_file("/etc/big", len(data)) == data
    # open, one read a piece, close
    assert hv.calls.count("guest_query") - before == 2 + -(-len(data) // READ_CHUNK)


def test_a_read_stops_past_its_limit():
    _hv, dom, agent = guest()
    dom.guest.files["/etc/squid/squid.conf"] = FakeFile(b"x" * (3 * READ_CHUNK))
    assert len(agent.read_file("/etc/squid/squid.conf", READ_CHUNK)) == READ_CHUNK + 1


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
        agent.await_answer(Deadline(30, agent.timing.monotonic))
    assert 1030 <= agent.timing.monotonic() <= 1032


def test_a_programs_message_is_its_last_lines():
    logged = "\n".join("2026/12/03| Processing: line %d" % number for number in range(200))
    completed = Completed(1, b"", (logged + "\nFATAL: Bungled squid.conf line 51: bogus\n").encode())
    assert completed.last_lines().endswith("Processing: line 199 / FATAL: Bungled squid.conf line 51: bogus")
    assert len(Completed(1, b"x" * 1000, b"").last_lines()) == 400


# --- a compromised guest ------------------------------------------------------------------------------------------
# Each hostile reply below is what a guest that runs its own program on the agent's port may send. The fake counts
# the replies and gives up after MAX_ANSWERS, so a loop the agent does not bound fails the test instead of hanging it.
MAX_ANSWERS = 1000


def hostile(dom, command, reply):
    """``command`` answered with ``reply`` (a value, or a function of the arguments), at most MAX_ANSWERS times."""
    def answer(arguments, _honest):
        assert dom.guest.answered <= MAX_ANSWERS, "the agent kept asking a hostile guest: unbounded"
        return reply(arguments) if callable(reply) else reply
    dom.guest.hostile[command] = answer


def with_file(dom, path="/etc/squid/squid.conf", content=b"http_port 3128\n"):
    dom.guest.files[path] = FakeFile(content)
    return path


@pytest.mark.parametrize("reply, said", [
    ({"count": 1, "buf-b64": "", "eof": False}, "answered count 1 with 0 bytes"),
    ({"count": 0, "buf-b64": "", "eof": False}, "answered no bytes without eof (a read that never ends)"),
    ({"count": 1, "buf-b64": "eA==", "eof": False}, "kept answering past the 4097 bytes of a whole file"),
])
def test_a_read_that_never_ends_is_a_protocol_error_within_a_few_replies(reply, said):
    _hv, dom, agent = guest()
    path = with_file(dom)
    hostile(dom, "guest-file-read", reply)
    with pytest.raises(GuestProtocolError) as raised:
        agent.read_file(path, 4096)
    assert raised.value.message.startswith("the guest agent of domain 'proxy-a' broke the protocol: guest-file-read "
                                           "of %s " % path) and said in raised.value.message
    # open, at most limit // READ_CHUNK + 2 reads, close
    assert dom.guest.answered <= 4


def test_a_giant_reply_is_refused_before_it_is_decoded():
    _hv, dom, agent = guest()
    path = with_file(dom)
    giant = base64.b64encode(b"x" * (4 * READ_CHUNK)).decode()
    hostile(dom, "guest-file-read", {"count": 4 * READ_CHUNK, "buf-b64": giant, "eof": True})
    with pytest.raises(GuestProtocolError) as raised:
        agent.read_file(path, 16 * READ_CHUNK)
    assert "answered more than the %d bytes asked" % READ_CHUNK in raised.value.message


@pytest.mark.parametrize("command, reply, said", [
    ("guest-ping", [], "guest-ping answered a list instead of an object"),
    ("guest-file-open", "1000", "guest-file-open of /etc/squid/squid.conf answered a string instead of a handle"),
    ("guest-file-open", True, "answered a boolean instead of a handle"),
    ("guest-file-read", None, "guest-file-read answered null instead of an object"),
    ("guest-file-read", {"count": "1", "buf-b64": "eA==", "eof": True}, "answered 'count' as a string"),
    ("guest-file-read", {"count": 1, "buf-b64": ["eA=="], "eof": True}, "answered 'buf-b64' as a list"),
    ("guest-file-read", {"count": 1, "buf-b64": "eA=="}, "answered without 'eof'"),
    ("guest-file-read", {"count": True, "buf-b64": "eA==", "eof": True}, "answered 'count' as a boolean"),
    ("guest-file-read", {"count": 3, "buf-b64": "!!!!", "eof": True}, "answered 'buf-b64' that is not base64"),
    ("guest-file-read", {"count": 3, "buf-b64": "eA", "eof": True}, "answered 'buf-b64' that is not base64"),
    ("guest-file-read", {"count": 3, "buf-b64": "\u00e9\u00e9\u00e9\u00e9", "eof": True}, "that is not base64"),
    ("guest-file-close", "closed", "guest-file-close answered a string instead of an object"),
])
def test_a_reply_of_the_wrong_shape_is_a_protocol_error_naming_the_domain(command, reply, said):
    _hv, dom, agent = guest()
    path = with_file(dom)
    hostile(dom, command, reply)
    with pytest.raises(GuestProtocolError) as raised:
        agent.ping()
        agent.read_file(path, 4096)
    assert raised.value.message.startswith("the guest agent of domain 'proxy-a' broke the protocol: ")
    assert said in raised.value.message and raised.value.kind == "guest_protocol"


@pytest.mark.parametrize("command, reply, said", [
    ("guest-exec", {}, "guest-exec answered without 'pid'"),
    ("guest-exec", {"pid": "4000"}, "guest-exec answered 'pid' as a string"),
    ("guest-exec-status", {"exitcode": 0}, "guest-exec-status answered without 'exited'"),
    ("guest-exec-status", {"exited": True, "exitcode": "0"}, "answered 'exitcode' as a string"),
    ("guest-exec-status", {"exited": True, "exitcode": 0, "out-data": {"a": 1}}, "answered 'out-data' as an object"),
    ("guest-exec-status", {"exited": True, "exitcode": 0, "err-data": "%%%%"}, "answered 'err-data' that is not base64"),
])
def test_a_program_reply_of_the_wrong_shape_is_a_protocol_error(command, reply, said):
    _hv, dom, agent = guest()
    dom.guest.programs["/bin/true"] = lambda argv, guest: (0, b"", b"")
    hostile(dom, command, reply)
    with pytest.raises(GuestProtocolError) as raised:
        agent.run(["/bin/true"])
    assert said in raised.value.message


def test_a_write_the_guest_says_it_cut_short_is_a_protocol_error():
    _hv, dom, agent = guest()
    hostile(dom, "guest-file-write", {"count": 1, "eof": False})
    with pytest.raises(GuestProtocolError) as raised:
        agent.write_file("/etc/x", b"abc")
    assert "guest-file-write of /etc/x answered count 1 for 3 bytes" in raised.value.message


def test_a_program_that_never_exits_is_given_up_after_its_timeout():
    _hv, dom, agent = guest()
    dom.guest.programs["/bin/sleep"] = lambda argv, guest: (0, b"", b"")
    hostile(dom, "guest-exec-status", {"exited": False})
    with pytest.raises(errors.TransientError) as raised:
        agent.run(["/bin/sleep", "infinity"])
    assert "/bin/sleep did not finish within %d s in domain 'proxy-a'" % EXEC_TIMEOUT in raised.value.message
    assert agent.timing.monotonic() - 1000 <= EXEC_TIMEOUT + 1 and dom.guest.answered < 300


def test_a_huge_program_output_keeps_its_end_only():
    _hv, dom, agent = guest()
    dom.guest.programs["/bin/yes"] = lambda argv, guest: (0, b"", b"")
    out = b"y\n" * (4 * 1024 * 1024) + b"the end\n"
    hostile(dom, "guest-exec-status", {"exited": True, "exitcode": 0, "out-data": base64.b64encode(out).decode(),
                                       "err-data": base64.b64encode(out[:-8] + b"error\n").decode()})
    completed = agent.run(["/bin/yes"])
    assert len(completed.stdout) == len(completed.stderr) == OUTPUT_LIMIT
    assert completed.stdout.endswith(b"y\nthe end\n") and completed.last_lines().endswith("y / error")


def test_every_exchange_of_one_proxy_shares_one_budget_in_seconds():
    hv, dom, first = guest(seconds=30)
    path = with_file(dom)
    time = first.timing

    def slow(arguments, honest):
        time.now += 4  # a guest that answers just inside libvirt's wait, every time
        return honest
    dom.guest.hostile["guest-file-read"] = slow
    timeouts = []
    query = hv.guest_query
    hv.guest_query = lambda dom_, command, arguments, timeout: timeouts.append(timeout) or query(
        dom_, command, arguments, timeout)
    first.read_file(path, 4096)  # observe
    second = GuestAgent(hv, dom, "proxy-a", time, first.budget)  # the apply, later in the same run
    with pytest.raises(GuestTimeoutError) as raised:
        for size in [4096] * 10:
            second.read_file(path, size)
    assert raised.value.message.startswith("the guest agent of domain 'proxy-a' was not done within the 30 s its "
                                           "exchanges may take in one run")
    assert 30 <= first.budget.spent <= 34
    # libvirt is never asked to wait past the budget.
    assert timeouts[0] == COMMAND_TIMEOUT and min(timeouts) >= 1 and timeouts[-1] <= 30 - 28


def test_a_spent_budget_ends_the_polls_of_a_program_too():
    _hv, dom, agent = guest(seconds=5)
    dom.guest.programs["/bin/sleep"] = lambda argv, guest: (0, b"", b"")
    hostile(dom, "guest-exec-status", {"exited": False})
    with pytest.raises(GuestTimeoutError):
        agent.run(["/bin/sleep", "infinity"])
    assert 5 <= agent.budget.spent <= 5.5
