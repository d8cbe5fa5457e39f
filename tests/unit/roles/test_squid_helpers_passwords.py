"""A user's two passwords while one replaces the other (check_either_password of the role's files/squid_helpers.py):
the program as the guest runs it (a script on python3), asking squid's own basic_ncsa_auth on the users' file and on
the previous passwords' file, spoken to as squid speaks to a Basic helper."""

import os
import subprocess
import urllib.parse

import pytest

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.guest_program import CHECK_EITHER_PASSWORD, program_text
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.password_hash import squid_user_hash
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_conf import SQUID_NCSA_AUTH
from ansible_collections.egress_proxies.kvm.tests.unit.squid_helpers_program import squid_helpers

OWNER = "lab"
# alice is rotated from "old secret" to "new secret"; bob has one password.
USERS = {"alice": "new secret", "bob": "bob's secret"}
PREVIOUS = {"alice": "old secret"}


def request(user, password):
    """squid's line to a Basic helper: the name and the password, URL-escaped, a blank between."""
    return ("%s %s\n" % (urllib.parse.quote(user), urllib.parse.quote(password))).encode()


@pytest.fixture
def helper(tmp_path):
    if not os.access(SQUID_NCSA_AUTH, os.X_OK):
        pytest.fail("%s is missing: scripts/bootstrap installs squid" % SQUID_NCSA_AUTH)
    files = []
    for name, passwords in (("egress-users", USERS), ("egress-users-previous", PREVIOUS)):
        path = tmp_path / name
        path.write_text("".join("%s:%s\n" % (user, squid_user_hash(OWNER, user, password))
                                for user, password in passwords.items()))
        files.append(str(path))
    script = tmp_path / "egress-proxy-basic-auth-either"
    script.write_text(program_text(CHECK_EITHER_PASSWORD))

    def ask(*lines):
        completed = subprocess.run(["/usr/bin/python3", str(script), SQUID_NCSA_AUTH] + files, input=b"".join(lines),
                                   capture_output=True, timeout=60, check=False)
        return completed.returncode, completed.stdout.splitlines()

    return ask


def test_both_passwords_of_a_rotated_user_pass_and_nothing_else_does(helper):
    status, answers = helper(request("alice", "new secret"), request("alice", "old secret"), request("alice", "guess"),
                             request("bob", "bob's secret"), request("bob", "old secret"), request("carol", "new secret"),
                             request("alice", ""))
    assert status == 0
    assert [answer.split()[0] for answer in answers] == [b"OK", b"OK", b"ERR", b"OK", b"ERR", b"ERR", b"ERR"], answers


def test_a_line_longer_than_squid_writes_is_refused_whole(helper):
    """Its tail is no request of its own: a valid request hidden at the end of a long line does not pass."""
    status, answers = helper(b"x" * squid_helpers.HELPER_LINE_BYTES + b" " + request("alice", "new secret"), request("alice", "new secret"))
    assert status == 0 and [answer.split()[0] for answer in answers] == [b"ERR", b"OK"], answers


def test_a_checker_that_ends_ends_the_helper_which_squid_starts_again(helper, tmp_path):
    """basic_ncsa_auth ends without its file: the first file's OK still comes, then the helper ends when it needs the
    second, answering nothing it did not check."""
    os.unlink(tmp_path / "egress-users-previous")
    status, answers = helper(request("alice", "new secret"), request("alice", "old secret"))
    assert status != 0 and [answer.split()[0] for answer in answers] == [b"OK"], answers
