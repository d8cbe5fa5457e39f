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
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
from dataclasses import dataclass

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import (
    VIR_ERR_AGENT_UNRESPONSIVE,
    VIR_ERR_AGENT_UNSYNCED,
    VIR_ERR_OPERATION_INVALID,
    VIR_ERR_OPERATION_TIMEOUT,
    KvmError,
    TransientError,
)

# Seconds libvirt waits for one agent reply. A guest under TCG answers a file command in milliseconds and starts a
# program in well under a second; one that does not reply in this long is not serving its agent.
COMMAND_TIMEOUT = 10
# Bytes per guest-file-read and guest-file-write: one reply of 256 KiB is 342 KiB of base64 JSON, far below
# libvirt's message limit, and a policy file of a few KiB takes one.
CHUNK = 256 * 1024
# How long a program run in the guest may take, and how often its status is asked.
EXEC_TIMEOUT = 60
EXEC_POLL_FIRST = 0.02
EXEC_POLL_MAX = 0.25

# libvirt's codes for an agent that is not there: not connected (not started, not installed, the guest
# down), not answering in time, or out of sync after a restart.
_UNAVAILABLE_CODES = (VIR_ERR_AGENT_UNRESPONSIVE, VIR_ERR_AGENT_UNSYNCED, VIR_ERR_OPERATION_TIMEOUT,
                      VIR_ERR_OPERATION_INVALID)


class AgentUnavailableError(TransientError):
    """The guest agent of a domain did not answer (not running, not installed, or the guest not up)."""

    kind = "agent_unavailable"


class GuestFileError(KvmError):
    """The guest agent answered, but refused a file operation (missing file, permission)."""

    kind = "guest_file"


@dataclass(frozen=True)
class Completed:
    """A program that ran in the guest: its exit code and what it wrote (bytes)."""

    exitcode: int
    stdout: bytes
    stderr: bytes

    def said(self):
        """The last lines the program wrote (stderr, else stdout) as one line for a message: a failing program says
        why last, after whatever it logged on the way (squid -k parse logs every directive first)."""
        text = (self.stderr or self.stdout).decode("utf-8", "replace")
        text = " / ".join([line.strip() for line in text.splitlines() if line.strip()][-3:])
        return text if len(text) <= 400 else "..." + text[-397:]


class GuestAgent:
    """The guest agent of domain ``dom`` (named ``name`` in messages) on ``hypervisor``.

    ``timing`` (an _proxy.execute.Timing or anything with ``sleep`` and
    ``monotonic``) drives the polls, so tests wait for nothing.
    """

    def __init__(self, hypervisor, dom, name, timing):
        self.hv = hypervisor
        self.dom = dom
        self.name = name
        self.timing = timing

    def _command(self, call, command, arguments=None):
        try:
            return call(self.dom, command, arguments, COMMAND_TIMEOUT)
        except KvmError as error:
            if error.code in _UNAVAILABLE_CODES:
                raise AgentUnavailableError(
                    "the guest agent of domain '%s' did not answer (%s): is qemu-guest-agent installed and running in "
                    "the guest?" % (self.name, error.libvirt_message or error.message),
                    code=error.code, libvirt_message=error.libvirt_message) from error
            raise

    def _query(self, command, arguments=None):
        return self._command(self.hv.guest_query, command, arguments)

    def _change(self, command, arguments=None):
        return self._command(self.hv.guest_change, command, arguments)

    def ping(self):
        """Raise AgentUnavailableError unless the agent answers."""
        self._query("guest-ping")

    def await_answer(self, timeout):
        """Ping until the agent answers (a guest that is still booting), at most ``timeout`` seconds."""
        deadline = self.timing.monotonic() + timeout
        while True:
            try:
                return self.ping()
            except AgentUnavailableError:
                if self.timing.monotonic() >= deadline:
                    raise
            self.timing.sleep(1)

    def read_file(self, path, limit):
        """The bytes of ``path`` in the guest, at most ``limit`` + 1 of them (more means "larger than limit").

        Raises GuestFileError when the agent cannot open it (missing, unreadable).
        """
        handle = self._open(path, "r")
        data = b""
        try:
            while len(data) <= limit:
                chunk = self._query("guest-file-read", {"handle": handle, "count": CHUNK})
                data += base64.b64decode(chunk.get("buf-b64", ""))
                if chunk.get("eof") or not chunk.get("count"):
                    break
        finally:
            self._query("guest-file-close", {"handle": handle})
        return data[:limit + 1]

    def write_file(self, path, data):
        """Write ``data`` (bytes) over ``path`` in the guest; a file that exists keeps its owner and mode."""
        handle = self._open(path, "w", change=True)
        try:
            for start in range(0, len(data), CHUNK):
                self._change("guest-file-write",
                             {"handle": handle, "buf-b64": base64.b64encode(data[start:start + CHUNK]).decode("ascii")})
        finally:
            self._change("guest-file-close", {"handle": handle})

    def _open(self, path, mode, change=False):
        try:
            return (self._change if change else self._query)("guest-file-open", {"path": path, "mode": mode})
        except AgentUnavailableError:
            raise
        except KvmError as error:
            raise GuestFileError("the guest agent of domain '%s' could not open %s: %s" % (
                self.name, path, error.libvirt_message or error.message), code=error.code,
                libvirt_message=error.libvirt_message) from error

    def run(self, argv, timeout=EXEC_TIMEOUT):
        """Run ``argv`` (a program and its arguments; no shell) in the guest and wait for it: a Completed.

        Raises TransientError when it is still running after ``timeout`` seconds.
        """
        started = self._change("guest-exec", {"path": argv[0], "arg": list(argv[1:]), "capture-output": True})
        deadline = self.timing.monotonic() + timeout
        pause = EXEC_POLL_FIRST
        while True:
            status = self._query("guest-exec-status", {"pid": started["pid"]})
            if status.get("exited"):
                return Completed(status.get("exitcode", -1), base64.b64decode(status.get("out-data", "")),
                                 base64.b64decode(status.get("err-data", "")))
            if self.timing.monotonic() >= deadline:
                raise TransientError("%s did not finish within %d s in domain '%s'" % (argv[0], timeout, self.name))
            self.timing.sleep(pause)
            pause = min(pause * 2, EXEC_POLL_MAX)
