# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A user's two passwords while one replaces the other: a program of the guest, squid's Basic authentication helper.

squid's basic_ncsa_auth checks one password file and keeps one hash per user (the file's last line for a name wins).
While a user's password is rotated (``previous_password`` beside ``password``), squid.conf
(squid_conf.squid_settings' ``auth_program``) names this program the helper instead, with basic_ncsa_auth's path and
two files: the users' hashes, and the previous hashes of the users being rotated. It runs one basic_ncsa_auth per
file and answers each of squid's requests (a line ``user password``, squid's Basic helper protocol without
concurrency) with the first file's ``OK``, else the second's, else ``ERR``: both passwords pass until the previous one
is taken out of the inventory, a policy change in place.

The password is never parsed here: squid's line goes to basic_ncsa_auth as it came. A line is at most LINE_BYTES (a
longer one is answered ERR whole), an answer at most LINE_BYTES; a checker that ends or answers nothing ends the
program, which squid starts again.

Runs in the guest on its python3 (standard library only) as ``main(argv)``; the role writes this file's text there
(guest_program.program_text).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import subprocess
import sys

# squid's own bound on a helper's line (HELPER_INPUT_BUFFER).
LINE_BYTES = 8196
OK, ERR = b"OK", b"ERR\n"


class CheckerGone(Exception):
    """A basic_ncsa_auth that no longer answers."""


def ask(checker, line):
    """``checker``'s answer (a line) to squid's ``line``."""
    checker.stdin.write(line)
    checker.stdin.flush()
    answer = checker.stdout.readline(LINE_BYTES)
    if not answer.endswith(b"\n"):
        raise CheckerGone()
    return answer


def answer(checkers, line):
    """The first checker's OK for ``line``, else the next one's, else ERR."""
    for checker in checkers:
        said = ask(checker, line)
        if said.startswith(OK):
            return said
    return ERR


def serve(requests, answers, checkers):
    """Answer each line of ``requests`` on ``answers`` until squid closes it."""
    while True:
        line = requests.readline(LINE_BYTES)
        if not line:
            return
        if not line.endswith(b"\n"):
            # Longer than squid writes: refused, and the rest of it is no request of its own.
            while line and not line.endswith(b"\n"):
                line = requests.readline(LINE_BYTES)
            said = ERR
        else:
            said = answer(checkers, line)
        answers.write(said)
        answers.flush()


def main(argv):
    if len(argv) != 4:
        sys.exit("usage: %s BASIC_NCSA_AUTH USERS PREVIOUS_USERS (squid's Basic helper)" % argv[0])
    checkers = [subprocess.Popen([argv[1], path], stdin=subprocess.PIPE, stdout=subprocess.PIPE) for path in argv[2:]]
    try:
        serve(sys.stdin.buffer, sys.stdout.buffer, checkers)
    except (CheckerGone, BrokenPipeError):
        sys.exit("%s: a basic_ncsa_auth ended" % argv[0])
    finally:
        for checker in checkers:
            checker.stdin.close()
            checker.wait()
