# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""squid's reload in a proxy's guest that refuses no new connection and cuts none in flight.

squid 5.7 reconfigures on SIGHUP (``systemctl reload squid``) by closing its listening sockets and opening them again
once it has read the new configuration: from a few tens of milliseconds to a second and more, with the size of the
policy and the speed of the guest. A client connecting in between gets a RST (connection refused), and so does one
whose connection waited in a closing socket's accept queue or was half-way through its handshake. The connections
squid accepted go on: a reconfigure keeps them.

squid_reload_argv holds new connections across that window instead: a tc filter on the ingress of every network
device drops each TCP SYN (without ACK) to squid's ports, so the client's kernel sends it again (Linux after 1 s,
then 3 s, 7 s...) and it lands once squid listens again. Packets of established connections pass, and so does the
last ACK of a handshake under way. In order:

1. Hold: the filter goes on every device, an ingress qdisc added where the device has none.
2. Drain: wait (at most DRAIN_SECONDS) until squid's listeners on the ports hold no connection in their accept queue or
   half-way through its handshake, so none is queued when the socket closes.
3. Reload, then wait until squid listens again on every port with new sockets (the old ones gone, the new ones the
   same at two looks in a row), at most ``listen_seconds``.
4. Lift: the filter goes, and the qdiscs the hold added. A trap lifts it on every exit: squid not listening in time
   (the script then fails saying so), the reload command failing, the script interrupted (HUP, INT, TERM). A hold
   left by a run that was killed (SIGKILL) is removed by the next run before it holds.

held_argv holds new connections the same way around another command that does not reload squid (an HA group's
hand-over of its client address, plugin_utils/ha_groups.py): steps 1, 2, the command, 4.

The filter is classic BPF in tc's ``bpf`` classifier, direct-action: it takes sch_ingress and cls_bpf alone, which
Debian's kernels have (cloud and generic, modules tc loads), and no act_* module (u32 with a gact drop would take
act_gact). It reads the IP and TCP headers from the network header (SKF_NET_OFF), so it is the same on an Ethernet
NIC and on the loopback. An IPv4 fragment after the first, and an IPv6 packet with extension headers before TCP,
pass. Besides the kernel modules, the guest needs sleep, awk and iproute2's tc and ss, all in Debian's images.

When the hold cannot be set (no tc, no such kernel module, a tc filter of the guest's own at the hold's preference),
squid is reloaded without it, as before, and the script says so on stderr and exits 0: the new policy is enforced
either way.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# squid's reload: what the guest's squid.service runs for one (kill -HUP of the pid in its pid file: a reconfigure),
# done by the shell's builtins, as systemctl takes a second on a slow guest, with new connections held meanwhile; a
# start through systemd when squid does not run (no pid file, or its pid is another program's now).
SQUID_RELOAD = ("/bin/sh", "-c", 'read -r pid < /run/squid.pid && read -r name < "/proc/$pid/comm" && '
                '[ "$name" = squid ] && kill -HUP "$pid" || exec /bin/systemctl reload-or-restart squid')
SHELL = "/bin/sh"
# The longest squid may take to listen again, new connections held meanwhile (a guest short of CPU took over 30 s under
# load in the lab); the most is MAX_LISTEN_SECONDS.
LISTEN_SECONDS = 120
MAX_LISTEN_SECONDS = 600
MAX_PORTS = 64
# The hold's filter, told apart from any other by its preference, handle and kind. Preference 1 comes first: no
# filter of the guest's own that lets a packet through sees it before the hold.
HOLD_PREF = 1
HOLD_HANDLE = 0x5EED
# While a reload holds new connections, this file holds the guest's uptime (whole seconds) at its start: a health check
# of squid (an HA group's, plugin_utils/ha_groups.py) counts squid as answering meanwhile, for at most
# RELOADING_SECONDS, since its own connection is held too. Removed with the hold.
RELOADING_FILE = "/run/egress-proxy-squid-reload"
# The longest the reload waits, new connections held, for squid to accept those already queued: a slow guest (TCG)
# takes seconds where a KVM one takes milliseconds, and a queued connection is reset when its socket closes.
DRAIN_SECONDS = 30
RELOADING_SECONDS = 60

# A fixed script: every value comes as an argument (the filter, listen_seconds, the ports, "--", the reload command).
# One line, as a policy's reload argv holds no control character: each source line below ends where sh and awk take a
# blank for a line break.
_SCRIPT_LINES = r"""
set -u;
PATH=${PATH:+$PATH:}/usr/sbin:/usr/bin:/sbin:/bin; export PATH;
program=$1; listen_seconds=$2; shift 2;
ports=; while [ "$1" != -- ]; do ports="$ports $1"; shift; done; shift;
devices=; for entry in /sys/class/net/*; do if [ -d "$entry" ] && [ "${entry##*/}" != lo ]; then devices="$devices ${entry##*/}"; fi; done;
if [ -d /sys/class/net/lo ]; then devices="$devices lo"; fi;
set -f; held=; added=; old=;
listeners() {
  ss -Hltne 2>/dev/null | awk -v ports="$ports" '
    BEGIN { n = split(ports, p, " "); for (i = 1; i <= n; i++) watched[p[i]] = 1 }
    { port = $4; sub(/.*:/, "", port) }
    port in watched { for (i = 6; i <= NF; i++) if ($i ~ /^ino:/) print port, substr($i, 5) }';
};
drained() {
  ss -Htn state listening state syn-recv 2>/dev/null | awk -v ports="$ports" '
    BEGIN { n = split(ports, p, " "); for (i = 1; i <= n; i++) watched[p[i]] = 1; waiting = 0 }
    { port = $4; sub(/.*:/, "", port) }
    (port in watched) && ($1 != "LISTEN" || $2 != 0) { waiting = 1 }
    END { exit waiting }';
};
reopened() {
  listeners | awk -v ports="$ports" -v old="$old" '
    BEGIN { n = split(ports, p, " "); for (i = 1; i <= n; i++) missing[p[i]] = 1;
            n = split(old, o, " "); for (i = 1; i < n; i += 2) { before[o[i]]++; closed[o[i + 1]] = 1 } }
    $2 in closed { stale = 1 }
    { delete missing[$1]; now[$1]++ }
    END { if (stale) exit 1; for (port in missing) exit 1; for (port in before) if (now[port] < before[port]) exit 1 }';
};
centiseconds() { read -r up _ < /proc/uptime; clock=$(( ${up%.*} * 100 + 1${up#*.} - 100 )); };
poll() {
  centiseconds; deadline=$((clock + $1 * 100)); shift;
  until "$@"; do centiseconds; [ "$clock" -lt "$deadline" ] || return 1; sleep 0.02; done;
};
remove_filter() { tc filter del dev "$1" ingress pref @PREF@ handle @HANDLE@ protocol all bpf; };
lift() {
  kept=;
  for device in $held; do remove_filter "$device" || kept="$kept $device"; done;
  for device in $added; do tc qdisc del dev "$device" ingress; done;
  held=; added=; rm -f @RELOADING@;
  if [ -n "$kept" ]; then
    echo "the hold on new connections to squid stays on$kept (tc filter del dev DEVICE ingress pref @PREF@ removes it)" >&2;
    return 1;
  fi;
};
hold() {
  for device in $devices; do
    if tc qdisc add dev "$device" ingress 2>/dev/null; then added="$added $device"; fi;
    tc filter add dev "$device" ingress pref @PREF@ handle @HANDLE@ protocol all bpf da bytecode "$program" || return 1;
    held="$held $device";
  done;
};
trap 'lift || exit 1' EXIT; trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM;
for device in $devices; do remove_filter "$device" 2>/dev/null; done;
old=$(listeners | awk '{ printf "%s %s ", $1, $2 }');
read -r up _ < /proc/uptime; echo "${up%.*}" > @RELOADING@;
if ! hold; then
  lift || exit;
  echo "squid reloaded without holding new connections: the tc filter above could not be set" >&2;
  exec "$@";
fi;
poll @DRAIN@ drained || echo "connections to squid were still queued after @DRAIN@ s; reloading" >&2;
"$@" || exit;
if [ "$listen_seconds" -gt 0 ] && ! poll "$listen_seconds" reopened; then
  echo "squid did not listen again on every port of$ports within $listen_seconds s; listening: $(listeners | awk '{ printf "%s ", $1 }')" >&2;
  exit 1;
fi
"""
SCRIPT = " ".join(line.strip() for line in _SCRIPT_LINES.strip().splitlines()).replace(
    "@PREF@", str(HOLD_PREF)).replace("@HANDLE@", str(HOLD_HANDLE)).replace("@RELOADING@", RELOADING_FILE).replace(
    "@DRAIN@", str(DRAIN_SECONDS))


def squid_reload_argv(ports, reload=SQUID_RELOAD, listen_seconds=LISTEN_SECONDS):
    """The argv the guest runs to reload squid without refusing a new connection: /bin/sh with the fixed SCRIPT, and as
    its arguments the SYN filter of ``ports`` (squid's listening ports: ints), ``listen_seconds`` (the longest squid may
    take to listen again, new connections held meanwhile) and ``reload`` (the command that reloads squid: a program and
    its arguments). Raises ValueError naming what is not a port, a bound or a command."""
    if isinstance(listen_seconds, bool) or not isinstance(listen_seconds, int) or \
            not 1 <= listen_seconds <= MAX_LISTEN_SECONDS:
        raise ValueError("squid_reload_argv: listen_seconds %r is not an int between 1 and %d"
                         % (listen_seconds, MAX_LISTEN_SECONDS))
    return _held(ports, listen_seconds, reload, "squid_reload_argv")


def held_argv(ports, command):
    """The argv that runs ``command`` (a program and its arguments) in the guest with new connections to ``ports``
    held while it runs, those queued drained first, as squid_reload_argv's; squid's sockets are not waited for (the
    command does not reload squid: an HA group's hand-over of its address). Raises ValueError as squid_reload_argv."""
    return _held(ports, 0, command, "held_argv")


def _held(ports, listen_seconds, command, caller):
    if isinstance(ports, (str, bytes)) or not isinstance(ports, (list, tuple)) or not ports:
        raise ValueError("%s: ports must be a non-empty list of squid's listening ports, not %r" % (caller, ports))
    checked = []
    for port in ports:
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError("%s: port %r is not an int between 1 and 65535" % (caller, port))
        if port not in checked:
            checked.append(port)
    if len(checked) > MAX_PORTS:
        raise ValueError("%s: %d ports, more than the %d the filter takes" % (caller, len(checked), MAX_PORTS))
    if isinstance(command, (str, bytes)) or not isinstance(command, (list, tuple)) or not command or \
            not all(isinstance(item, str) for item in command) or not command[0]:
        raise ValueError("%s: the command must be a program and its arguments (a list of strings), not %r"
                         % (caller, command))
    return [SHELL, "-c", SCRIPT, "sh", syn_filter(checked), str(listen_seconds)] + [str(port) for port in checked] + \
        ["--"] + list(command)


# Classic BPF (linux/filter.h): the instruction classes, sizes, modes and operations the filter uses.
_LD, _LDX, _ALU, _JMP, _RET = 0x00, 0x01, 0x04, 0x05, 0x06
_W, _H, _B = 0x00, 0x08, 0x10
_ABS, _IND, _MSH = 0x20, 0x40, 0xA0
_AND = 0x50
_JA, _JEQ, _JSET = 0x00, 0x10, 0x40
# Loads relative to the network header (SKF_NET_OFF), and of skb->protocol (SKF_AD_OFF + SKF_AD_PROTOCOL).
_NET = -0x100000
_PROTOCOL = -0x1000
# tc's verdicts in direct-action mode: TC_ACT_UNSPEC (the next filter decides) and TC_ACT_SHOT (dropped).
_NEXT_FILTER = 0xFFFFFFFF
_DROP = 2
_ETH_P_IP, _ETH_P_IPV6 = 0x0800, 0x86DD
_IPPROTO_TCP = 6
_IPV6_HEADER = 40
# TCP's flags byte masked with SYN|ACK: a SYN opening a connection has SYN alone.
_SYN, _SYN_ACK = 0x02, 0x12
# An IPv4 fragment after the first (its offset not 0) holds no TCP header.
_FRAGMENT_OFFSET = 0x1FFF


def syn_filter(ports):
    """tc's bytecode (``N,code jt jf k,...``) of the classic BPF program that drops an IPv4 or IPv6 TCP SYN without ACK
    to one of ``ports`` (checked ints) and leaves every other packet to the next filter."""
    program = _Program()
    program.op(_LD | _W | _ABS, _PROTOCOL)
    program.jump(_JEQ, _ETH_P_IP, true="ipv4")
    program.jump(_JEQ, _ETH_P_IPV6, true="ipv6", false="pass")
    program.label("ipv4")
    program.op(_LD | _B | _ABS, _NET + 9)  # protocol
    program.jump(_JEQ, _IPPROTO_TCP, false="pass")
    program.op(_LD | _H | _ABS, _NET + 6)  # flags and fragment offset
    program.jump(_JSET, _FRAGMENT_OFFSET, true="pass")
    program.op(_LDX | _B | _MSH, _NET)  # X: the IPv4 header's length
    program.op(_LD | _B | _IND, _NET + 13)  # TCP flags
    program.op(_ALU | _AND, _SYN_ACK)
    program.jump(_JEQ, _SYN, false="pass")
    program.op(_LD | _H | _IND, _NET + 2)  # destination port
    program.goto("ports")
    program.label("ipv6")
    program.op(_LD | _B | _ABS, _NET + 6)  # next header
    program.jump(_JEQ, _IPPROTO_TCP, false="pass")
    program.op(_LD | _B | _ABS, _NET + _IPV6_HEADER + 13)
    program.op(_ALU | _AND, _SYN_ACK)
    program.jump(_JEQ, _SYN, false="pass")
    program.op(_LD | _H | _ABS, _NET + _IPV6_HEADER + 2)
    program.label("ports")
    for port in ports:
        program.jump(_JEQ, port, true="drop")
    program.label("pass")
    program.op(_RET, _NEXT_FILTER)
    program.label("drop")
    program.op(_RET, _DROP)
    return program.bytecode()


class _Program:
    """Classic BPF instructions whose jumps name labels, written out as tc's bytecode."""

    def __init__(self):
        self._instructions = []  # (code, label if true, label if false, k, label of an unconditional jump)
        self._labels = {}

    def label(self, name):
        self._labels[name] = len(self._instructions)

    def op(self, code, k):
        self._instructions.append((code, None, None, k, None))

    def jump(self, operation, k, true=None, false=None):
        """A jump to label ``true`` when the test holds, else to ``false``; None: on to the next instruction."""
        self._instructions.append((_JMP | operation, true, false, k, None))

    def goto(self, name):
        self._instructions.append((_JMP | _JA, None, None, 0, name))

    def bytecode(self):
        words = []
        for index, (code, true, false, k, always) in enumerate(self._instructions):
            if always is not None:
                k = self._reach(index, always)
            words.append("%d %d %d %d" % (code, self._reach(index, true), self._reach(index, false), k & 0xFFFFFFFF))
        return "%d,%s" % (len(words), ",".join(words))

    def _reach(self, index, label):
        """The offset of a jump at ``index`` to ``label`` (0 for None): forward, from the next instruction. A
        conditional jump's is one byte; MAX_PORTS keeps the program within it."""
        return self._labels[label] - index - 1 if label is not None else 0


def composed_argv(script, argv):
    """``argv`` run by /bin/sh after ``script``'s commands, each failure stopping it: one argument list for
    kvm_proxy_set's validate or reload. ``script`` is fixed text; every value is an argument."""
    return ["/bin/sh", "-c", "set -e; %s" % script, "sh"] + list(argv)
