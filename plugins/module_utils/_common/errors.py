# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Typed errors shared by every module_utils file.

module_utils raise these and never call fail_json; the module wrapper maps
them to one failure with a message, libvirt's code and libvirt's message.
The three classes mirror what a caller can do about a failure: NotFound
(the thing is not there), Permanent (retrying the same request will fail
again: fix the input or the hypervisor) and Transient (retrying may work).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


# libvirt's virErrorNumber values (virerror.h). They are part of libvirt's
# stable ABI, so they are spelled out here and the fake seam and the unit
# tests need no libvirt bindings.
VIR_ERR_INTERNAL_ERROR = 1
VIR_ERR_NO_SUPPORT = 3
VIR_ERR_INVALID_ARG = 8
VIR_ERR_OS_TYPE = 16
VIR_ERR_XML_ERROR = 27
VIR_ERR_DOM_EXIST = 28
VIR_ERR_OPERATION_DENIED = 29
VIR_ERR_XML_DETAIL = 35
VIR_ERR_SYSTEM_ERROR = 38
VIR_ERR_RPC = 39
VIR_ERR_NO_DOMAIN = 42
VIR_ERR_NO_NETWORK = 43
VIR_ERR_AUTH_FAILED = 45
VIR_ERR_NO_STORAGE_POOL = 49
VIR_ERR_NO_STORAGE_VOL = 50
VIR_ERR_OPERATION_INVALID = 55
VIR_ERR_NO_INTERFACE = 57
VIR_ERR_CONFIG_UNSUPPORTED = 67
VIR_ERR_OPERATION_TIMEOUT = 68
VIR_ERR_ARGUMENT_UNSUPPORTED = 74
VIR_ERR_AUTH_CANCELLED = 79
VIR_ERR_NO_DOMAIN_METADATA = 80
VIR_ERR_OPERATION_UNSUPPORTED = 84
VIR_ERR_AGENT_UNRESPONSIVE = 86
VIR_ERR_ACCESS_DENIED = 88
VIR_ERR_STORAGE_VOL_EXIST = 90
VIR_ERR_CPU_INCOMPATIBLE = 91
VIR_ERR_XML_INVALID_SCHEMA = 92
VIR_ERR_AUTH_UNAVAILABLE = 94
VIR_ERR_AGENT_UNSYNCED = 97

NOT_FOUND_CODES = frozenset((
    VIR_ERR_NO_DOMAIN, VIR_ERR_NO_STORAGE_VOL, VIR_ERR_NO_STORAGE_POOL, VIR_ERR_NO_NETWORK, VIR_ERR_NO_INTERFACE,
    VIR_ERR_NO_DOMAIN_METADATA,
))

# The hypervisor will keep rejecting these until someone changes the request
# or the host. Every other code (including ones nobody taught this table) is
# transient: retrying is safer than latching a failure on an unknown code.
PERMANENT_CODES = frozenset((
    VIR_ERR_NO_SUPPORT,
    VIR_ERR_INVALID_ARG,
    VIR_ERR_OS_TYPE,
    VIR_ERR_XML_ERROR,
    VIR_ERR_XML_DETAIL,
    VIR_ERR_XML_INVALID_SCHEMA,
    VIR_ERR_CONFIG_UNSUPPORTED,
    VIR_ERR_OPERATION_UNSUPPORTED,
    VIR_ERR_ARGUMENT_UNSUPPORTED,
    VIR_ERR_CPU_INCOMPATIBLE,
    VIR_ERR_AUTH_FAILED,
    VIR_ERR_AUTH_CANCELLED,
    VIR_ERR_AUTH_UNAVAILABLE,
    VIR_ERR_ACCESS_DENIED,
    VIR_ERR_OPERATION_DENIED,
    VIR_ERR_DOM_EXIST,
    VIR_ERR_STORAGE_VOL_EXIST,
))


class KvmError(Exception):
    """Base of every error this collection raises on purpose.

    ``code`` and ``libvirt_message`` keep libvirt's own detail (None when the
    error did not come from libvirt) so the user sees what the hypervisor said.
    """

    kind = "error"

    def __init__(self, message, code=None, libvirt_message=None, completed_actions=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.libvirt_message = libvirt_message
        # The steps a flow finished before it failed: a failed task that did
        # steps must still say changed (AWX and callers rely on it) and which.
        self.completed_actions = completed_actions

    def after(self, message, completed_actions):
        """The same kind of error with a new message, recording the steps completed before it."""
        return type(self)(message, code=self.code, libvirt_message=self.libvirt_message,
                          completed_actions=list(completed_actions))

    def has_code(self, code):
        return self.code == code

    def to_result(self):
        """Extra keys for the failed task's result."""
        result = {"error_kind": self.kind}
        if self.completed_actions is not None:
            result["changed"] = bool(self.completed_actions)
            result["actions"] = list(self.completed_actions)
        if self.code is not None:
            result["libvirt_code"] = self.code
            result["libvirt_message"] = self.libvirt_message
        return result


def unless_already(code, call, *args):
    """Run ``call(*args)``; a libvirt error ``code`` means it had happened already, which is what was wanted."""
    try:
        return call(*args)
    except KvmError as error:
        if not error.has_code(code):
            raise
        return None


class NotFoundError(KvmError):
    kind = "not_found"


class PermanentError(KvmError):
    kind = "permanent"


class TransientError(KvmError):
    kind = "transient"


class ValidationError(PermanentError):
    """Bad input, found before anything on the hypervisor was touched."""

    kind = "invalid_input"


def classify(code, message, context):
    """Build the typed error for a libvirt error code.

    ``context`` says what was being done ("looking up domain 'proxy-1'") and
    leads the message; libvirt's message follows it.
    """
    text = "%s: %s" % (context, message) if message else context
    if code in NOT_FOUND_CODES:
        cls = NotFoundError
    elif code in PERMANENT_CODES:
        cls = PermanentError
    else:
        cls = TransientError
    return cls(text, code=code, libvirt_message=message)
