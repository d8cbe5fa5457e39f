# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The text of a program the role writes into a proxy's guest for squid to run: the egress_proxy role's
files/squid_helpers.py (the guest's python3 runs it, standard library only), then the call of one of its entries.

The programs live in the role, not in plugins/: they start squid's own programs, which nothing in plugins/ may do.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import os

SQUID_HELPERS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                             "roles", "egress_proxy", "files", "squid_helpers.py")
# The entries of squid_helpers.py: squid's Basic helper over two password files, its log daemon that counts the
# policy's decisions, and the external acl of the TLS name check.
CHECK_EITHER_PASSWORD = "check_either_password"
COUNT_DECISIONS = "count_decisions"
ANSWER_SNI_GIVEN = "answer_sni_given"


@functools.lru_cache(maxsize=1)
def _helpers_source():
    # Read once per process: the role renders every proxy's policy in one, and most proxies carry a program.
    with open(SQUID_HELPERS, encoding="utf-8") as handle:
        return handle.read()


def program_text(entry, *arguments):
    """squid_helpers.py as a script of the guest's python3 that runs ``entry(sys.argv, *arguments)`` (``arguments``
    numbers or text, written as Python literals)."""
    source = _helpers_source()
    return "#!/usr/bin/python3\n%s\n\nif __name__ == \"__main__\":\n    %s(sys.argv%s)\n" % (
        source, entry, "".join(", %r" % (argument,) for argument in arguments))
