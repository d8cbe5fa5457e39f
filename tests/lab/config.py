"""Constants of the local lab, defined once.

scripts/lab, tests/integration/conftest.py and the demo import these; docs/dev/lab.md describes them.
"""

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

# Nested KVM is broken on the lab machines: guests run under TCG with no <cpu> element.
VIRT_TYPE = "qemu"
CPU_MODE = "none"

# Domains whose names start with these belong to the lab; `scripts/lab down` removes them.
TEST_DOMAIN_PREFIX = "eptest-"
DEMO_DOMAIN_PREFIX = "egress-demo"
LAB_DOMAIN_PREFIXES = (TEST_DOMAIN_PREFIX, DEMO_DOMAIN_PREFIX)
