# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""squid_reload_argv: the argv's shape, its script (fixed, one line, shellcheck-clean), the values it refuses, and its
SYN filter run on packets by a classic BPF interpreter of the test's (the kernel runs it in
tests/integration/test_squid_reload.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import struct
import subprocess

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.policy import Policy
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_reload import (
    HOLD_HANDLE,
    HOLD_PREF,
    LISTEN_SECONDS,
    MAX_PORTS,
    SCRIPT,
    SQUID_RELOAD,
    held_argv,
    squid_reload_argv,
    syn_filter,
)


def test_the_argv_is_the_fixed_script_with_every_value_an_argument():
    argv = squid_reload_argv([3128, 9301, 13128, 3128])
    assert argv[:4] == ["/bin/sh", "-c", SCRIPT, "sh"]
    assert argv[4] == syn_filter([3128, 9301, 13128])
    assert argv[5:] == [str(LISTEN_SECONDS), "3128", "9301", "13128", "--"] + list(SQUID_RELOAD)
    assert squid_reload_argv((8080,), reload=["kill", "-HUP", "42"], listen_seconds=5)[5:] == [
        "5", "8080", "--", "kill", "-HUP", "42"]
    # The same script for every proxy: no value of one is written into it.
    assert squid_reload_argv([1])[2] == squid_reload_argv([65535], reload=["true"], listen_seconds=600)[2]
    assert "pref %d handle %d protocol all bpf" % (HOLD_PREF, HOLD_HANDLE) in SCRIPT


def test_a_policy_takes_the_argv_as_its_reload():
    """A policy's reload argv holds no control character (policy._argv): the script is one line."""
    argv = squid_reload_argv([3128, 9301])
    policy = Policy.from_params({"files": [{"path": "/etc/squid/squid.conf", "content": "http_port 3128\n"}],
                                 "reload": argv})
    assert policy.reload == tuple(argv)


def test_the_script_is_shellcheck_clean():
    checked = subprocess.run(["shellcheck", "--shell=sh", "-"], input=SCRIPT, capture_output=True, text=True,
                             check=False)
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize("ports", [
    [], None, "3128", b"3128", "3128 9301", ["3128"], ["3128; reboot"], [3128, "$(reboot)"], [0], [65536], [-1],
    [True], [3128.0], [None], {3128: 1}, list(range(1, MAX_PORTS + 2)),
])
def test_what_is_not_a_list_of_ports_is_refused(ports):
    with pytest.raises(ValueError, match="squid_reload_argv: "):
        squid_reload_argv(ports)


@pytest.mark.parametrize("listen_seconds", [0, -1, 601, True, "30", "30; reboot", 1.5, None])
def test_what_is_not_a_bound_is_refused(listen_seconds):
    with pytest.raises(ValueError, match="squid_reload_argv: listen_seconds"):
        squid_reload_argv([3128], listen_seconds=listen_seconds)


@pytest.mark.parametrize("command", [None, "", "systemctl reload squid", b"kill", [], [""], [1], ["kill", None]])
def test_what_is_not_a_command_is_refused(command):
    with pytest.raises(ValueError, match="squid_reload_argv: the command"):
        squid_reload_argv([3128], reload=command)
    with pytest.raises(ValueError, match="held_argv: the command"):
        held_argv([3128], command)


def test_a_held_command_is_the_reloads_script_without_the_wait_for_squids_sockets():
    argv = held_argv([3128, 3128], ["/usr/local/bin/hand-over", "198.18.40.10"])
    assert argv[:4] == squid_reload_argv([3128])[:4]
    assert argv[4:] == [syn_filter([3128]), "0", "3128", "--", "/usr/local/bin/hand-over", "198.18.40.10"]
    with pytest.raises(ValueError, match="held_argv: port"):
        held_argv([0], ["true"])


def test_the_filter_of_the_most_ports_fits_classic_bpf():
    program = _decode(syn_filter(list(range(1000, 1000 + MAX_PORTS))))
    assert len(program) <= 4096
    assert all(jt <= 255 and jf <= 255 for _code, jt, jf, _k in program)
    assert _run(program, 0x0800, _ipv4(_tcp(1000 + MAX_PORTS - 1, SYN))) == DROP


SYN, ACK, RST = 0x02, 0x10, 0x04
DROP, NEXT_FILTER = 2, 0xFFFFFFFF
PORTS = [3128, 9301]


def _tcp(port, flags):
    return struct.pack("!HHIIBBHHH", 40000, port, 1, 0, 5 << 4, flags, 65535, 0, 0)


def _ipv4(payload, protocol=6, fragment=0, options=b""):
    length = 20 + len(options)
    return struct.pack("!BBHHHBBH4s4s", 0x40 | length // 4, 0, length + len(payload), 1, fragment, 64, protocol, 0,
                       bytes([198, 51, 100, 7]), bytes([198, 51, 100, 5])) + options + payload


def _ipv6(payload, next_header=6):
    return struct.pack("!IHBB16s16s", 6 << 28, len(payload), next_header, 64, b"\x20\x01\x0d\xb8" + b"\x00" * 11 + b"\x07",
                       b"\x20\x01\x0d\xb8" + b"\x00" * 11 + b"\x05") + payload


@pytest.mark.parametrize("protocol, packet, verdict", [
    (0x0800, _ipv4(_tcp(3128, SYN)), DROP),
    (0x0800, _ipv4(_tcp(9301, SYN)), DROP),
    (0x86DD, _ipv6(_tcp(3128, SYN)), DROP),
    # An IPv4 header with options: the TCP header found after them.
    (0x0800, _ipv4(_tcp(3128, SYN), options=b"\x01" * 4), DROP),
    # The handshake's SYN-ACK and last ACK, an established connection's packets, a reset: through.
    (0x0800, _ipv4(_tcp(3128, SYN | ACK)), NEXT_FILTER),
    (0x0800, _ipv4(_tcp(3128, ACK)), NEXT_FILTER),
    (0x86DD, _ipv6(_tcp(3128, ACK)), NEXT_FILTER),
    (0x0800, _ipv4(_tcp(3128, RST)), NEXT_FILTER),
    # Other ports, other protocols, a later fragment, IPv6 with an extension header first, not IP at all.
    (0x0800, _ipv4(_tcp(22, SYN)), NEXT_FILTER),
    (0x86DD, _ipv6(_tcp(22, SYN)), NEXT_FILTER),
    (0x0800, _ipv4(_tcp(3128, SYN), protocol=17), NEXT_FILTER),
    (0x0800, _ipv4(_tcp(3128, SYN), fragment=0x0010), NEXT_FILTER),
    (0x86DD, _ipv6(_tcp(3128, SYN), next_header=0), NEXT_FILTER),
    (0x0806, b"\x00\x01\x08\x00\x06\x04\x00\x01" + b"\x00" * 20, NEXT_FILTER),
])
def test_the_filter_drops_a_syn_to_squids_ports_alone(protocol, packet, verdict):
    assert _run(_decode(syn_filter(PORTS)), protocol, packet) == verdict


def _decode(bytecode):
    count, rest = bytecode.split(",", 1)
    program = [tuple(int(field) for field in word.split()) for word in rest.split(",")]
    assert len(program) == int(count)
    return program


_NET = 0x100000  # SKF_NET_OFF: loads relative to the network header
_PROTOCOL = (-0x1000) & 0xFFFFFFFF  # SKF_AD_OFF + SKF_AD_PROTOCOL


def _run(program, protocol, network):
    """The verdict of the classic BPF ``program`` on a packet of ``protocol`` (skb->protocol) whose network header and
    payload are ``network``: the instructions syn_filter writes, as the kernel runs them (a load out of the packet
    ends the program with 0)."""
    a = x = pc = 0

    def load(offset, size):
        offset &= 0xFFFFFFFF
        if offset == _PROTOCOL and size == 4:
            return protocol
        offset = (offset - (0x100000000 - _NET)) & 0xFFFFFFFF
        if offset + size > len(network):
            raise IndexError(offset)
        return int.from_bytes(network[offset:offset + size], "big")

    sizes = {0x00: 4, 0x08: 2, 0x10: 1}
    while True:
        code, jt, jf, k = program[pc]
        pc += 1
        if code & 0x07 in (0x00, 0x01):  # loads: ld abs, ld ind, ldx 4 * ([k] & 0xf)
            try:
                if code == 0xB1:
                    x = 4 * (load(k, 1) & 0x0F)
                else:
                    assert code & 0xE0 in (0x20, 0x40), "unknown load %#x" % code
                    a = load(k + (x if code & 0xE0 == 0x40 else 0), sizes[code & 0x18])
            except IndexError:
                return 0
        elif code == 0x54:  # and #k
            a &= k
        elif code == 0x05:  # ja
            pc += k
        elif code in (0x15, 0x45):  # jeq #k, jset #k
            pc += jt if (a == k if code == 0x15 else a & k) else jf
        elif code == 0x06:  # ret #k
            return k
        else:
            raise AssertionError("unknown instruction %#x" % code)
