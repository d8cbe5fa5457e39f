# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The channel into a running guest: the qemu guest agent, reached through libvirt on the module's own connection.

No SSH into the guest, no key in it, no network path to it: libvirt relays
each command over the VM's virtio-serial channel (virDomainQemuAgentCommand),
on a local URI and over qemu+ssh alike. The agent must answer guest-ping,
guest-file-open/read/write/close and guest-exec/guest-exec-status, which the
qemu-guest-agent package of every current distribution does. libvirt marks a
domain tainted (custom-ga-command) after such a command; that is a note in the
domain's log, nothing more (docs/role-egress_proxy.md "The guest agent").

Reads go through the hypervisor seam's ``guest_query`` and never change the
guest, so check mode may read; writes and programs go through ``guest_change``.

What comes back is the guest's word, and a guest may be compromised: every
reply's shape is checked before it is used, a read must make progress, what
is kept of a file or a program's output is bounded in bytes, and all the
exchanges with one proxy's guest in a run share one GuestBudget of seconds. A
guest that breaks the protocol raises GuestProtocolError naming its domain and
what it did; one that uses up its budget raises GuestTimeoutError.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import math
from dataclasses import dataclass

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import (
    VIR_ERR_AGENT_UNRESPONSIVE,
    VIR_ERR_AGENT_UNSYNCED,
    VIR_ERR_OPERATION_INVALID,
    VIR_ERR_OPERATION_TIMEOUT,
    KvmError,
    PermanentError,
    TransientError,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.timing import Deadline, polls

# Seconds libvirt waits for one agent reply. A guest under TCG answers a file command in milliseconds and starts a
# program in well under a second; one that does not reply in this long is not serving its agent.
COMMAND_TIMEOUT = 10
# Bytes per guest-file-read: one reply of 256 KiB is 342 KiB of base64 JSON, far below libvirt's message limit, and a
# policy file of a few KiB takes one. Bytes per guest-file-write: the lab's qemu-ga 7.2 answers a write of 160 KiB
# (219 KiB of JSON) and stops answering one of 192 KiB, as if it had never come (libvirt's "not available for now",
# then a garbled reply to the next command); 64 KiB is a third of that.
READ_CHUNK = 256 * 1024
WRITE_CHUNK = 64 * 1024
# How long a program run in the guest may take, and how often its status is asked.
EXEC_TIMEOUT = 60
EXEC_POLL_FIRST = 0.02
EXEC_POLL_MAX = 0.25
# How often an agent that does not answer yet (a guest still booting) is asked again.
ANSWER_POLL = 1
# What is kept of a program's stdout and of its stderr: the end, where a failing program says why (squid -k parse
# logs every directive first). qemu-ga itself captures up to 16 MiB.
OUTPUT_LIMIT = 64 * 1024
# The seconds one proxy's guest exchanges may take in a run beyond wait_timeout (which a guest still booting may
# take to answer): a file read or written takes milliseconds, a program a few seconds under TCG.
EXCHANGE_SECONDS = 120
# Granted once more to put the old policy files back after an apply that failed, a spent budget included.
ROLLBACK_SECONDS = 30

# libvirt's codes for an agent that is not there: not connected (not started, not installed, the guest
# down), not answering in time, or out of sync after a restart.
_UNAVAILABLE_CODES = (VIR_ERR_AGENT_UNRESPONSIVE, VIR_ERR_AGENT_UNSYNCED, VIR_ERR_OPERATION_TIMEOUT,
                      VIR_ERR_OPERATION_INVALID)


class AgentUnavailableError(TransientError):
    """The guest agent of a domain did not answer (not running, not installed, or the guest not up)."""

    kind = "agent_unavailable"

    def __init__(self, message, reason=None, **details):
        super().__init__(message, **details)
        self.reason = reason  # what libvirt said, for the message of a wait that ends on it


class GuestTimeoutError(TransientError):
    """The exchanges with a domain's guest agent took longer than its GuestBudget allows in one run."""

    kind = "guest_timeout"


class GuestProtocolError(PermanentError):
    """A domain's guest agent answered something the protocol does not allow (a compromised or broken guest)."""

    kind = "guest_protocol"


class GuestFileError(KvmError):
    """The guest agent answered, but refused a file operation (missing file, permission)."""

    kind = "guest_file"


# The errors after which nothing is known of the guest: its agent is not there, too slow, or not to be believed.
UNUSABLE_AGENT = (AgentUnavailableError, GuestTimeoutError, GuestProtocolError)


class GuestBudget:
    """The seconds the guest agent exchanges of one proxy may take in one run, observe and apply together.

    What counts is the time spent in this proxy's agent calls and in the
    pauses of its polls, read from ``monotonic``: not the time it waits
    for other proxies of the set. One budget per proxy and run, handed to
    every GuestAgent of that proxy.
    """

    def __init__(self, seconds, monotonic):
        self.seconds = seconds
        self.monotonic = monotonic
        self.spent = 0.0

    @classmethod
    def of_proxy(cls, wait_timeout, monotonic):
        """The budget of a proxy whose guest may take ``wait_timeout`` seconds to come up."""
        return cls(wait_timeout + EXCHANGE_SECONDS, monotonic)

    def remaining(self):
        return self.seconds - self.spent

    def grant(self, seconds):
        """``seconds`` more (the rollback of a failed apply, which must run even when the apply used up the rest)."""
        self.seconds = max(self.seconds, self.spent) + seconds

    def spend_since(self, started):
        self.spent += max(0.0, self.monotonic() - started)


@dataclass(frozen=True)
class Completed:
    """A program that ran in the guest: its exit code and what it wrote (bytes, the last OUTPUT_LIMIT of each)."""

    exitcode: int
    stdout: bytes
    stderr: bytes

    def last_lines(self):
        """The last lines the program wrote (stderr, else stdout) as one line for a message: a failing program says
        why last, after whatever it logged on the way (squid -k parse logs every directive first)."""
        text = (self.stderr or self.stdout).decode("utf-8", "replace")
        text = " / ".join([line.strip() for line in text.splitlines() if line.strip()][-3:])
        return text if len(text) <= 400 else "..." + text[-397:]


class GuestAgent:
    """The guest agent of domain ``dom`` (named ``name`` in messages) on ``hypervisor``.

    ``timing`` (a _common.timing.Timing or anything with ``sleep``) pauses
    the polls, so tests wait for nothing; ``budget`` (a GuestBudget) bounds
    every exchange in time. A reader that never polls (check mode) needs no
    ``timing``.
    """

    def __init__(self, hypervisor, dom, name, timing, budget):
        self.hv = hypervisor
        self.dom = dom
        self.name = name
        self.timing = timing
        self.budget = budget

    def _command(self, call, command, arguments=None):
        remaining = self.budget.remaining()
        if remaining <= 0:
            raise GuestTimeoutError(
                "the guest agent of domain '%s' was not done within the %d s its exchanges may take in one run (%s "
                "not sent): a guest that slow or that busy is not serving its agent" % (
                    self.name, self.budget.seconds, command))
        started = self.budget.monotonic()
        try:
            # One reply may not outlast the budget: libvirt takes whole seconds, at least one.
            return call(self.dom, command, arguments, min(COMMAND_TIMEOUT, max(1, int(math.ceil(remaining)))))
        except KvmError as error:
            if error.code in _UNAVAILABLE_CODES:
                raise self._unavailable(error.libvirt_message or error.message, error.code, error.libvirt_message) \
                    from error
            raise
        finally:
            self.budget.spend_since(started)

    def _query(self, command, arguments=None):
        return self._command(self.hv.guest_query, command, arguments)

    def _change(self, command, arguments=None):
        return self._command(self.hv.guest_change, command, arguments)

    def _broke(self, command, what):
        return GuestProtocolError("the guest agent of domain '%s' broke the protocol: %s %s; its guest may be "
                                  "compromised" % (self.name, command, what))

    def _reply(self, command, reply, fields):
        """``reply`` checked: a dict whose ``fields`` ({key: (type, required)}) have their type."""
        if not isinstance(reply, dict):
            raise self._broke(command, "answered %s instead of an object" % _kind(reply))
        for key, (kind, required) in fields.items():
            if key not in reply:
                if required:
                    raise self._broke(command, "answered without '%s'" % key)
                continue
            value = reply[key]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise self._broke(command, "answered '%s' as %s" % (key, _kind(value)))
        return reply

    def _decoded(self, command, text, field, limit=None):
        """The bytes of base64 ``text`` (a reply's ``field``), the last ``limit`` of them when given."""
        if limit is not None:
            # Only the tail is decoded: a guest's megabytes of output are not worth the memory.
            keep = 4 * ((limit + 2) // 3)
            text = text[-keep:] if len(text) > keep else text
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise self._broke(command, "answered '%s' that is not base64" % field) from None
        return data if limit is None else data[max(len(data) - limit, 0):]

    def sleep(self, seconds):
        """A pause of a poll: it counts against the budget like the exchanges it separates."""
        started = self.budget.monotonic()
        try:
            self.timing.sleep(seconds)
        finally:
            self.budget.spend_since(started)

    def ping(self):
        """Raise AgentUnavailableError unless the agent answers."""
        self._reply("guest-ping", self._query("guest-ping"), {})

    def await_answer(self, deadline):
        """Ping until the agent answers (a guest that is still booting), until ``deadline`` (a _common.timing.Deadline)
        passes; then the last AgentUnavailableError."""
        unavailable = None
        for _attempt in polls(deadline, self.sleep, ANSWER_POLL):
            try:
                return self.ping()
            except AgentUnavailableError as error:
                unavailable = error
        raise self._unavailable(unavailable.reason, unavailable.code, unavailable.libvirt_message, deadline.seconds)

    def _unavailable(self, reason, code, libvirt_message, waited=None):
        """The AgentUnavailableError of libvirt's error ``code`` and ``reason``, after ``waited`` seconds of asking
        when given."""
        return AgentUnavailableError(
            "the guest agent of domain '%s' did not answer%s (%s): is qemu-guest-agent installed and running in the "
            "guest?" % (self.name, "" if waited is None else " within %d s" % waited, reason), reason,
            code=code, libvirt_message=libvirt_message)

    def read_file(self, path, limit):
        """The bytes of ``path`` in the guest, at most ``limit`` + 1 of them (more means "larger than limit").

        Raises GuestFileError when the agent cannot open it (missing, unreadable).
        """
        handle = self._open(path, "r")
        try:
            data = self._read(path, handle, limit)
        except KvmError:
            self._close_after_failure(self._query, handle)
            raise
        self._close(self._query, handle)
        return data

    def _read(self, path, handle, limit):
        command = "guest-file-read"
        data = b""
        # A regular file comes in full pieces until its last: more replies than that is a guest stalling.
        for _reply in range(limit // READ_CHUNK + 2):
            reply = self._reply(command, self._query(command, {"handle": handle, "count": READ_CHUNK}),
                                {"count": (int, True), "buf-b64": (str, True), "eof": (bool, True)})
            if len(reply["buf-b64"]) > 4 * -(-READ_CHUNK // 3):
                raise self._broke(command, "of %s answered more than the %d bytes asked" % (path, READ_CHUNK))
            chunk = self._decoded(command, reply["buf-b64"], "buf-b64")
            if reply["count"] != len(chunk):
                raise self._broke(command, "of %s answered count %d with %d bytes" % (path, reply["count"], len(chunk)))
            data += chunk
            if reply["eof"] or len(data) > limit:
                return data[:limit + 1]
            if not chunk:
                raise self._broke(command, "of %s answered no bytes without eof (a read that never ends)" % path)
        raise self._broke(command, "of %s kept answering past the %d bytes of a whole file" % (path, limit + 1))

    def write_file(self, path, data):
        """Write ``data`` (bytes) over ``path`` in the guest; a file that exists keeps its owner and mode."""
        handle = self._open(path, "w", change=True)
        command = "guest-file-write"
        try:
            for start in range(0, len(data), WRITE_CHUNK):
                piece = data[start:start + WRITE_CHUNK]
                reply = self._reply(command, self._change(command, {
                    "handle": handle, "buf-b64": base64.b64encode(piece).decode("ascii")}), {"count": (int, True)})
                if reply["count"] != len(piece):
                    raise self._broke(command, "of %s answered count %d for %d bytes" % (path, reply["count"], len(piece)))
        except KvmError:
            self._close_after_failure(self._change, handle)
            raise
        self._close(self._change, handle)

    def _open(self, path, mode, change=False):
        try:
            handle = (self._change if change else self._query)("guest-file-open", {"path": path, "mode": mode})
        except (AgentUnavailableError, GuestTimeoutError):
            raise
        except KvmError as error:
            raise GuestFileError("the guest agent of domain '%s' could not open %s: %s" % (
                self.name, path, error.libvirt_message or error.message), code=error.code,
                libvirt_message=error.libvirt_message) from error
        if not isinstance(handle, int) or isinstance(handle, bool):
            raise self._broke("guest-file-open", "of %s answered %s instead of a handle" % (path, _kind(handle)))
        return handle

    def _close(self, call, handle):
        self._reply("guest-file-close", call("guest-file-close", {"handle": handle}), {})

    def _close_after_failure(self, call, handle):
        # The failure says what went wrong; a close that fails too (the same guest) would only hide it.
        try:
            self._close(call, handle)
        except KvmError:
            pass

    def run(self, argv, timeout=EXEC_TIMEOUT):
        """Run ``argv`` (a program and its arguments; no shell) in the guest and wait for it: a Completed.

        Raises TransientError when it is still running after ``timeout`` seconds.
        """
        started = self._reply("guest-exec", self._change("guest-exec", {
            "path": argv[0], "arg": list(argv[1:]), "capture-output": True}), {"pid": (int, True)})
        command = "guest-exec-status"
        for _attempt in polls(Deadline(timeout, self.budget.monotonic), self.sleep, EXEC_POLL_FIRST, EXEC_POLL_MAX):
            status = self._reply(command, self._query(command, {"pid": started["pid"]}), {
                "exited": (bool, True), "exitcode": (int, False), "out-data": (str, False), "err-data": (str, False)})
            if status["exited"]:
                # No exitcode: killed by a signal.
                return Completed(status.get("exitcode", -1),
                                 self._decoded(command, status.get("out-data", ""), "out-data", OUTPUT_LIMIT),
                                 self._decoded(command, status.get("err-data", ""), "err-data", OUTPUT_LIMIT))
        raise TransientError("%s did not finish within %d s in domain '%s'" % (argv[0], timeout, self.name))


def _kind(value):
    """What a reply's value is, for a message (never the value itself: it is the guest's)."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), "something else")
