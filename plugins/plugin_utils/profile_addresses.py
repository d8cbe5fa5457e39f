# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The egress addresses of a proxy's profiles, put on its egress NIC in the guest.

A profile with an ``egress_address`` (``egress_address6``) sends its requests from that address
(squid.conf's tcp_outgoing_address, squid_conf's ``egress_addresses``). The address is policy, changed in place: the
list of addresses is a file of the policy (ADDRESSES_FILE), and PROGRAM puts each listed address on its NIC and takes
off those the last list had that this one has not. squid's start runs it (DROP_IN, so every boot has the addresses
before squid), the policy's reload runs it before squid reads the configuration that names them, and the first boot's
user-data runs it once. The program and the drop-in are fixed text; the list is written from parsed addresses and the
guest's own NIC names, never from the user's text.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_reload import composed_argv

ADDRESSES_FILE = "/etc/egress-proxy/egress-addresses"
# What the program last put on the NICs: on the guest's tmpfs, as the addresses are gone after a reboot too.
APPLIED_FILE = "/run/egress-proxy/egress-addresses"
PROGRAM_PATH = "/usr/local/sbin/egress-proxy-egress-addresses"
PROGRAM_ARGV = (PROGRAM_PATH, ADDRESSES_FILE, APPLIED_FILE)
DROP_IN_PATH = "/etc/systemd/system/squid.service.d/egress-addresses.conf"

# An IPv6 address skips duplicate address detection (squid binds it at once) and is deprecated (preferred_lft 0), so
# the kernel never picks it for a connection that asks for no source; an IPv4 one is a secondary address of its
# segment, which the kernel does not pick either. An address that cannot be added fails the program, naming it, after
# every other one was tried.
PROGRAM = """#!/bin/sh
# The egress addresses of this proxy's profiles, written by the egress_proxies.kvm.egress_proxy role: each line of $1
# (address/prefix-length device) put on its NIC, each line of $2 (what the last run put on) no longer in $1 taken off,
# then $1 copied to $2. squid's start runs it, and so does the policy's reload.
wanted=$1 applied=$2 failed=0
mkdir -p "${applied%/*}" || exit
if [ -f "$applied" ]; then
  while read -r address device; do
    grep -qxF -e "$address $device" "$wanted" || ip address del "$address" dev "$device" 2>/dev/null || :
  done < "$applied"
fi
while read -r address device; do
  case $address in
    *:*) set -- nodad preferred_lft 0 ;;
    *) set -- ;;
  esac
  ip address replace "$address" dev "$device" "$@" || {
    echo "egress address $address could not be put on $device" >&2
    failed=1
  }
done < "$wanted"
cp "$wanted" "$applied" && exit "$failed"
"""

DROP_IN = """# The egress addresses of the proxy's profiles on their NICs before squid starts (egress_proxies.kvm.egress_proxy).
[Service]
ExecStartPre=-%s
""" % " ".join(PROGRAM_ARGV)

# Before squid's reload: the addresses, so squid never reads a configuration whose addresses are not there yet. squid is
# reloaded whatever they did, and the reload then fails when one was not put on.
_RELOAD_SCRIPT = '%s || added=no; "$@"; [ "${added:-yes}" = yes ]' % " ".join(PROGRAM_ARGV)


def addresses_text(egress_addresses):
    """The content of ADDRESSES_FILE: one line "address/prefix-length device" per entry of ``egress_addresses``
    (squid_conf's: each {"interface", "device"})."""
    return "".join("%s %s\n" % (entry["interface"], entry["device"]) for entry in egress_addresses)


def with_profile_addresses(policy, egress_addresses):
    """``policy`` (kvm_proxy_set's: files, validate, reload) with the addresses' list, the program and squid's drop-in,
    and its reload putting the addresses on first; ``policy`` itself when no profile has an egress address."""
    if not egress_addresses:
        return policy
    files = list(policy["files"]) + [
        {"path": ADDRESSES_FILE, "content": addresses_text(egress_addresses)},
        {"path": PROGRAM_PATH, "mode": "0755", "content": PROGRAM},
        {"path": DROP_IN_PATH, "content": DROP_IN},
    ]
    return dict(policy, files=files, reload=composed_argv(_RELOAD_SCRIPT, policy["reload"]))
