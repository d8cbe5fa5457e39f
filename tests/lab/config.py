"""Constants of the local lab, defined once.

scripts/lab, tests/integration/conftest.py and the demo import these; docs/dev/lab.md describes them.
"""

import dataclasses
import os

LIBVIRT_URI = "qemu:///system"

POOL_NAME = "egress-lab"
POOL_DIR = "/var/lib/egress-proxies-lab/pool"

BRIDGE = "eplab0"
NETNS = "eplab"
# veth pair: the first end is enslaved to the bridge in the root namespace, the second lives in NETNS.
VETH_BRIDGE_END = "eplab0-br"
VETH_NETNS_END = "eplab0-ns"
NETNS_ADDRESS = "198.18.0.1"
NETNS_PREFIX_LEN = 24
NETNS_CIDR = "198.18.0.0/24"
DHCP_RANGE_START = "198.18.0.100"
DHCP_RANGE_END = "198.18.0.200"

# Pid files, dnsmasq's lease file and the mirror's log live here; the directory goes away on reboot
# together with the processes it describes.
RUN_DIR = "/run/egress-proxies-lab"
DNSMASQ_PIDFILE = os.path.join(RUN_DIR, "dnsmasq.pid")
DNSMASQ_LEASEFILE = os.path.join(RUN_DIR, "dnsmasq.leases")
MIRROR_PIDFILE = os.path.join(RUN_DIR, "mirror.pid")
MIRROR_LOGFILE = os.path.join(RUN_DIR, "mirror.log")

CACHE_DIR = os.environ.get("EGRESS_LAB_CACHE", "/var/cache/egress-proxies-lab")
MIRROR_DIR = os.path.join(CACHE_DIR, "mirror")

MIRROR_HOST = "127.0.0.1"
MIRROR_PORT = 8642
MIRROR_URL = "http://%s:%d/" % (MIRROR_HOST, MIRROR_PORT)

GUEST_IMAGE = "debian-12-egress.qcow2"
TINY_QCOW2 = "tiny.qcow2"
TINY_RAW = "tiny.raw"
SHA256SUMS = "SHA256SUMS"
MIRROR_IMAGES = (GUEST_IMAGE, TINY_QCOW2, TINY_RAW)
# The tiny images hold no OS, so a VM of one never acts on an ACPI shutdown: each graceful stop of a running one
# (before a replacement or removal) lasts the whole shutdown_timeout, the module's 120 s by default. Tests of such
# VMs give this instead.
TINY_SHUTDOWN_TIMEOUT = 3

# Nested KVM is broken on the lab machines: guests run under TCG with no <cpu> element.
VIRT_TYPE = "qemu"
CPU_MODE = "none"

# Domains whose names start with these belong to the lab; `scripts/lab down` removes them.
TEST_DOMAIN_PREFIX = "eptest-"
DEMO_DOMAIN_PREFIX = "egress-demo"
LAB_DOMAIN_PREFIXES = (TEST_DOMAIN_PREFIX, DEMO_DOMAIN_PREFIX)

# --- The lab's hypervisors (tests/lab/hypervisors.py; docs/dev/lab.md draws them) -----------------
# Independent hypervisor hosts on this machine, each with its own network namespace, UTS name, sshd,
# libvirtd and virtlogd (private /etc/libvirt, /run/libvirt, /var/lib/libvirt, /var/cache/libvirt and
# /var/log/libvirt), image mirror, VM bridge, DHCP, client network ("LAN") and storage pool.
# EGRESS_LAB_HYPERVISORS says how many `up` brings up (2 by default, at most MAX_HYPERVISORS).
DEFAULT_HYPERVISORS = 2
MAX_HYPERVISORS = 9
HYPERVISORS_ENV = "EGRESS_LAB_HYPERVISORS"

# The management network: a bridge in the root namespace, where the controller (Ansible, virsh, the
# tests) has MGMT_ADDRESS; each hypervisor's management interface joins it through a veth pair.
MGMT_BRIDGE = "eplabhv0"
MGMT_ADDRESS = "198.18.10.1"
MGMT_PREFIX_LEN = 24
MGMT_CIDR = "198.18.10.0/24"

HV_STATE_DIR = "/var/lib/egress-proxies-lab/hypervisors"  # what survives a reboot: libvirt's state, pools
HV_RUN_DIR = os.path.join(RUN_DIR, "hypervisors")  # pid files, sockets, logs, sshd's config and host key

# The controller's side of SSH: one client key for every hypervisor, the known_hosts file with each
# hypervisor's host key, and an ssh_config naming each hypervisor (for ssh -F and tests/lab/lab-ssh.sh).
SSH_DIR = os.path.join(RUN_DIR, "ssh")
SSH_KEY = os.path.join(SSH_DIR, "id_ed25519")
SSH_KNOWN_HOSTS = os.path.join(SSH_DIR, "known_hosts")
SSH_CONFIG = os.path.join(SSH_DIR, "config")
# ssh's shared connections (ControlMaster), one socket per hypervisor: %C is a hash of host, port and user.
SSH_CONTROL_PATH = os.path.join(SSH_DIR, "cm-%C")
SSH_USER = "root"
SSH_PORT = 22
# ssh -F SSH_CONFIG: libvirt's qemu+ssh runs it through ?command=, with host keys checked.
LAB_SSH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lab-ssh.sh")

# The same names on every hypervisor, as on a fleet built from one template: the inventory's
# group_vars give them once.
HV_POOL_NAME = "egress"
HV_BRIDGE = "br0"
HV_MGMT_IFACE = "mgmt0"
HV_LAN_PORT = "lan0-port"  # the LAN's veth end on the hypervisor, enslaved to HV_BRIDGE
LAN_IFACE = "lan0"  # the other end, in the LAN namespace
LAN_PREFIX_LEN = 24
# The outside segment, for two-NIC proxies: a second VM bridge and, on it, a namespace standing for the
# uplink (static addresses only, no DHCP), where the origin server sees the proxies' egress address.
HV_OUTSIDE_BRIDGE = "br1"
HV_OUTSIDE_PORT = "out0-port"  # the outside namespace's veth end on the hypervisor, on HV_OUTSIDE_BRIDGE
OUTSIDE_IFACE = "out0"
OUTSIDE_PREFIX_LEN = 24
# The origin server (tests/lab/origin.py) on each LAN and outside segment: it reports the peer it saw.
ORIGIN_PORT = 8080
# Names each hypervisor's dnsmasq answers for its LAN (HypervisorSpec.dns_records), so a proxy whose DNS is the LAN's
# address reaches the origins by name: ORIGIN_NAME is the outside segment's origin, a destination; REBIND_NAME the
# LAN's, an internal address behind a name a policy may allow (the DNS-rebinding case).
ORIGIN_NAME = "origin.lab"
REBIND_NAME = "rebind.lab"
# Names of two addresses, the outside segment's origin and another (issue 40 item 0): MIXED_LAB_NAME (in the lab's
# domain) and MIXED_INTERNAL_NAME the LAN's origin, an internal address; MIXED_UNLISTED_NAME UNLISTED_ADDRESS, a public
# address a test gives the outside namespace (tests/integration/test_networking.py), outside what a policy allows.
MIXED_LAB_NAME = "mixed.lab"
MIXED_INTERNAL_NAME = "internal-mixed.example"
MIXED_UNLISTED_NAME = "unlisted-mixed.example"
UNLISTED_ADDRESS = "93.184.216.99"


# --- The client segment (tests/lab/hypervisors.py; docs/dev/lab.md "The client segment") ---------------
# One layer-2 segment shared by every lab hypervisor, as hypervisors on one VLAN: bridge HV_SEGMENT_BRIDGE (the same
# name on each, so group_vars name it once) in each hypervisor's namespace, joined by a veth pair to the hub
# namespace's bridge SEGMENT_BRIDGE. The hub holds the segment's router address, where an origin server
# (tests/lab/origin.py) listens; SEGMENT_CLIENT_NETNS is a client of the proxies on it. Addresses are static: no
# DHCP here (proxies of an HA group need static inside addresses, their unicast VRRP peers).
HV_SEGMENT_BRIDGE = "br2"
HV_SEGMENT_PORT = "seg0-port"  # the hub's veth end on each hypervisor, on HV_SEGMENT_BRIDGE
SEGMENT_NETNS = "eplab-seg"
SEGMENT_BRIDGE = "seg0"  # in SEGMENT_NETNS; it holds SEGMENT_ADDRESS and SEGMENT_ADDRESS6
SEGMENT_BRIDGE_MAC = "02:00:c6:12:28:01"  # its own (locally administered, from 198.18.40.1), kept when hypervisors join
SEGMENT_CLIENT_NETNS = "eplab-seg-client"
SEGMENT_CLIENT_IFACE = "client0"
SEGMENT_CLIENT_PORT = "client0-port"  # the client's veth end in SEGMENT_NETNS, on SEGMENT_BRIDGE
SEGMENT_PREFIX_LEN = 24
SEGMENT_CIDR = "198.18.40.0/24"
SEGMENT_ADDRESS = "198.18.40.1"  # the router (a proxy's gateway) and the origin server
SEGMENT_CLIENT_ADDRESS = "198.18.40.2"
SEGMENT_PREFIX6_LEN = 64
SEGMENT_CIDR6 = "2001:db8:40::/64"
SEGMENT_ADDRESS6 = "2001:db8:40::1"
SEGMENT_CLIENT_ADDRESS6 = "2001:db8:40::2"
# An HA group's client address on the segment, and its members' static addresses from .11 upward (::11 likewise).
SEGMENT_GROUP_ADDRESS = "198.18.40.10"
SEGMENT_GROUP_ADDRESS6 = "2001:db8:40::10"
SEGMENT_MEMBERS = 89  # .11 to .99
SEGMENT_RUN_DIR = os.path.join(RUN_DIR, "segment")  # the origin servers' pid files and log


def segment_member_address(number):
    """The static address of member number (1-based) on the client segment: 198.18.40.(10+number)."""
    return "198.18.40.%d" % (10 + _segment_member(number))


def segment_member_address6(number):
    """Its IPv6 address: 2001:db8:40::(10+number), the IPv4 address's last number written as the last group."""
    return "2001:db8:40::%d" % (10 + _segment_member(number))


def _segment_member(number):
    if not 1 <= number <= SEGMENT_MEMBERS:
        raise ValueError("segment member number %r: give 1 to %d" % (number, SEGMENT_MEMBERS))
    return number


def segment_origin_urls():
    """The origin server on the client segment's router, over IPv4 and IPv6."""
    return ("http://%s:%d/" % (SEGMENT_ADDRESS, ORIGIN_PORT), "http://[%s]:%d/" % (SEGMENT_ADDRESS6, ORIGIN_PORT))


@dataclasses.dataclass(frozen=True)
class HypervisorSpec:
    """Every name, address and path of lab hypervisor number ``index`` (1-based)."""

    index: int

    @property
    def name(self):
        """The inventory host name, the UTS host name and the name libvirt reports."""
        return "lab-hv%d" % self.index

    @property
    def netns(self):
        return "eplab-hv%d" % self.index

    @property
    def lan_netns(self):
        return "eplab-hv%d-lan" % self.index

    @property
    def mgmt_veth(self):
        """The root namespace's end of the management veth pair, on MGMT_BRIDGE."""
        return "eplabhv%d" % self.index

    @property
    def address(self):
        """The management address: sshd listens here, Ansible connects here."""
        return "198.18.10.%d" % (10 + self.index)

    @property
    def lan_prefix(self):
        return "198.18.%d" % (10 + self.index)

    @property
    def lan_cidr(self):
        return "%s.0/%d" % (self.lan_prefix, LAN_PREFIX_LEN)

    @property
    def lan_address(self):
        """The LAN namespace's address: clients of the proxies, and the DHCP server."""
        return self.lan_prefix + ".1"

    @property
    def outside_netns(self):
        return "eplab-hv%d-out" % self.index

    @property
    def outside_prefix(self):
        """The outside segment's /24: 198.18.(20+N), clear of the LANs (11-19) and the bare host (30)."""
        return "198.18.%d" % (20 + self.index)

    @property
    def outside_cidr(self):
        return "%s.0/%d" % (self.outside_prefix, OUTSIDE_PREFIX_LEN)

    @property
    def outside_address(self):
        """The outside namespace's address: the uplink's router and the origin server behind the proxies."""
        return self.outside_prefix + ".1"

    def origin_url(self, address):
        """The origin server on one of this hypervisor's segments (lan_address or outside_address, or a name of one)."""
        return "http://%s:%d/" % (address, ORIGIN_PORT)

    @property
    def origin_cidrs(self):
        """The segments its origin servers are on, LAN and outside: internal addresses a proxy refuses unless its
        allowed_destinations lists them."""
        return (self.lan_cidr, self.outside_cidr)

    @property
    def dns_records(self):
        """(name, address) of each name the LAN's dnsmasq answers besides its DHCP clients' names; a name of two
        addresses comes twice (dnsmasq answers both, in turns)."""
        return ((ORIGIN_NAME, self.outside_address), (REBIND_NAME, self.lan_address),
                (MIXED_LAB_NAME, self.outside_address), (MIXED_LAB_NAME, self.lan_address),
                (MIXED_INTERNAL_NAME, self.outside_address), (MIXED_INTERNAL_NAME, self.lan_address),
                (MIXED_UNLISTED_NAME, self.outside_address), (MIXED_UNLISTED_NAME, UNLISTED_ADDRESS))

    @property
    def segment_port(self):
        """This hypervisor's veth end in the client segment's hub (SEGMENT_NETNS), on SEGMENT_BRIDGE."""
        return "hv%d-port" % self.index

    @property
    def dhcp_range(self):
        return (self.lan_prefix + ".100", self.lan_prefix + ".200")

    @property
    def state_dir(self):
        return os.path.join(HV_STATE_DIR, self.name)

    @property
    def run_dir(self):
        return os.path.join(HV_RUN_DIR, self.name)

    @property
    def pool_dir(self):
        return os.path.join(self.state_dir, "pool")

    def private_dirs(self):
        """(private directory, where the hypervisor sees it), for every directory of libvirt's own."""
        return (
            (os.path.join(self.state_dir, "etc-libvirt"), "/etc/libvirt"),
            (os.path.join(self.run_dir, "run-libvirt"), "/run/libvirt"),
            (os.path.join(self.state_dir, "lib-libvirt"), "/var/lib/libvirt"),
            (os.path.join(self.state_dir, "cache-libvirt"), "/var/cache/libvirt"),
            (os.path.join(self.state_dir, "log-libvirt"), "/var/log/libvirt"),
        )

    def run_file(self, name):
        return os.path.join(self.run_dir, name)

    @property
    def uri(self):
        """libvirt over SSH from the controller, host key checked against SSH_KNOWN_HOSTS."""
        return "qemu+ssh://%s@%s/system?command=%s" % (SSH_USER, self.name, LAB_SSH)


def hypervisor_count():
    """How many hypervisors `up` brings up: EGRESS_LAB_HYPERVISORS, else DEFAULT_HYPERVISORS."""
    raw = os.environ.get(HYPERVISORS_ENV, "").strip()
    if not raw:
        return DEFAULT_HYPERVISORS
    if not raw.isdigit() or not 0 <= int(raw) <= MAX_HYPERVISORS:
        raise ValueError("%s=%s: give a number from 0 to %d" % (HYPERVISORS_ENV, raw, MAX_HYPERVISORS))
    return int(raw)


def origin_cidrs(specs):
    """Every segment the origin servers of these hypervisors are on (HypervisorSpec.origin_cidrs), once each, in order:
    the allowed_destinations of a proxy that may fetch from any of them."""
    return list(dict.fromkeys(cidr for spec in specs for cidr in spec.origin_cidrs))


def hypervisor_specs(count=None):
    """The specs of hypervisors 1..count (count defaults to hypervisor_count())."""
    return [HypervisorSpec(index) for index in range(1, (hypervisor_count() if count is None else count) + 1)]


# --- The bare host (tests/lab/bare_host.py; docs/dev/lab.md "The bare host") ----------------------------
# A hypervisor host that starts with nothing of libvirt: a Debian minbase root of its own, on the
# management network beside lab-hvN, for proving playbooks/prepare.yml. Brought up and down by its test's
# fixture (or scripts/lab bare-up / bare-down), never by `up`.
BARE_HOST_NAME = "lab-bare"
BARE_HOST_NETNS = "eplab-bare"
BARE_HOST_LAN_NETNS = "eplab-bare-lan"
BARE_HOST_MGMT_VETH = "eplabbare"
BARE_HOST_ADDRESS = "198.18.10.30"
BARE_HOST_LAN_PREFIX = "198.18.30"
# Its outside segment, as a lab hypervisor has one (HypervisorSpec.outside_netns).
BARE_HOST_OUTSIDE_NETNS = "eplab-bare-out"
BARE_HOST_OUTSIDE_PREFIX = "198.18.31"
BARE_ROOT_CACHE = os.path.join(CACHE_DIR, "bare-root")
# The bare host's apt reaches deb.debian.org through this proxy on the controller's management address.
APT_PROXY_PORT = 3142
