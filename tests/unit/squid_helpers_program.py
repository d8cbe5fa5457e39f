"""The role's files/squid_helpers.py, the programs squid runs in a proxy's guest, loaded as a module so that its parts
can be called (the tests that run a program run it as the guest does: guest_program.program_text as a script)."""

import importlib.util

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.guest_program import SQUID_HELPERS

_SPEC = importlib.util.spec_from_file_location("squid_helpers", SQUID_HELPERS)
squid_helpers = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(squid_helpers)
