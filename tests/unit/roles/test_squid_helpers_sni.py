"""Whether a ClientHello named a server (answer_sni_given of the role's files/squid_helpers.py): the program as the
guest runs it (a script on python3), spoken to as squid speaks to the TLS name check's external acl, a line per
lookup: the ClientHello's SNI, then ``-`` for the acl's absent arguments."""

import subprocess

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.guest_program import ANSWER_SNI_GIVEN, program_text
from ansible_collections.egress_proxies.kvm.tests.unit.squid_helpers_program import squid_helpers


def answers(tmp_path, *lines):
    script = tmp_path / "egress-proxy-sni-given"
    script.write_text(program_text(ANSWER_SNI_GIVEN))
    completed = subprocess.run(["/usr/bin/python3", str(script)], input=b"".join(lines), capture_output=True,
                               timeout=60, check=False)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout.splitlines()


def test_a_named_server_is_ok_and_none_is_err(tmp_path):
    assert answers(tmp_path, b"api.example.com -\n", b"- -\n", b"-\n", b"\n", b"api.example.com\n") == [
        b"OK", b"ERR", b"ERR", b"ERR", b"OK"]


def test_a_line_longer_than_squid_writes_is_refused_whole(tmp_path):
    """Its tail is no lookup of its own: a name at the end of a long line after "-" does not pass."""
    long_line = b"- " + b"x" * squid_helpers.HELPER_LINE_BYTES + b" api.example.com\n"
    assert answers(tmp_path, b"-" + long_line, b"- -\n") == [b"ERR", b"ERR"]
