"""A fleet of managed-looking domains for the listing benchmarks, made with plain libvirt-python and XML text.

Each domain `eptest-bench-<i>` carries the collection's metadata element (as kvm_proxy writes it, so
kvm_proxy_info and the kvm_proxies plugin list it), a 1 MiB qcow2 overlay and a 64 KiB raw seed. The XML
is written here rather than with the collection's builders: the bench uses the collection only as a user
does, through its modules and its plugin.
"""

import datetime
import re

import libvirt

from bench._common import PREFIX, config

BENCH_DOMAIN = re.compile(re.escape(PREFIX) + r"\d+")
OVERLAY_BYTES = 1 << 20
SEED_BYTES = 64 << 10
UNDEFINE_ALL = (libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
                | libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)

# The collection's metadata element (namespace https://github.com/egress-proxies/kvm/metadata/1) and a small
# domain on the lab's bridge; virt type qemu and no <cpu> (the lab's cpu mode none), so it starts under TCG.
DOMAIN_XML = """<domain type="%(virt_type)s"><name>%(name)s</name>
<metadata><egressproxy:instance xmlns:egressproxy="https://github.com/egress-proxies/kvm/metadata/1">
<egressproxy:managed>true</egressproxy:managed><egressproxy:uid>%(uid)s</egressproxy:uid>
<egressproxy:createdAt>%(created_at)s</egressproxy:createdAt>
<egressproxy:specDigest>%(digest)s</egressproxy:specDigest></egressproxy:instance></metadata>
<memory unit="MiB">128</memory><vcpu>1</vcpu><os><type arch="x86_64" machine="q35">hvm</type><boot dev="hd"/></os>
<features><acpi/><apic/></features><devices>
<disk type="volume" device="disk"><driver name="qemu" type="qcow2"/>
<source pool="%(pool)s" volume="%(name)s.qcow2"/><target dev="vda" bus="virtio"/></disk>
<disk type="volume" device="cdrom"><driver name="qemu" type="raw"/>
<source pool="%(pool)s" volume="%(name)s-seed.iso"/><target dev="sda" bus="scsi"/><readonly/></disk>
<controller type="scsi" index="0" model="virtio-scsi"/>
<interface type="bridge"><source bridge="%(bridge)s"/><model type="virtio"/></interface>
<channel type="unix"><target type="virtio" name="org.qemu.guest_agent.0"/></channel></devices></domain>"""

VOLUME_XML = ('<volume type="file"><name>%s</name><capacity unit="bytes">%d</capacity>'
              '<target><format type="%s"/></target></volume>')


def grow_fleet(conn, uid, first, count, running, pool_name=config.POOL_NAME, bridge=config.BRIDGE):
    """Define domains ``first`` .. ``count - 1`` with their volumes on ``conn``; start those below ``running``.

    The defaults are the single lab's pool and bridge; a lab hypervisor has its own (config.HV_POOL_NAME, HV_BRIDGE).
    """
    pool = conn.storagePoolLookupByName(pool_name)
    created_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for index in range(first, count):
        name = "%s%d" % (PREFIX, index)
        pool.createXML(VOLUME_XML % (name + ".qcow2", OVERLAY_BYTES, "qcow2"), 0)
        pool.createXML(VOLUME_XML % (name + "-seed.iso", SEED_BYTES, "raw"), 0)
        dom = conn.defineXML(DOMAIN_XML % dict(virt_type=config.VIRT_TYPE, name=name, uid=uid, created_at=created_at,
                                               digest="0" * 64, pool=pool_name, bridge=bridge))
        if index < running:
            dom.create()


def _unless_gone(action, gone_code):
    # A domain or volume removed meanwhile (by a concurrent cleanup, or libvirt itself) is what was wanted.
    try:
        action()
    except libvirt.libvirtError as exc:
        if exc.get_error_code() != gone_code:
            raise


def remove_fleet(conn, pool_name=config.POOL_NAME):
    """Remove every eptest-bench-<i> domain and its volumes in ``pool_name``, this run's or a failed earlier run's."""
    for dom in conn.listAllDomains(0):
        if BENCH_DOMAIN.fullmatch(dom.name()):
            if dom.isActive():
                _unless_gone(dom.destroy, libvirt.VIR_ERR_NO_DOMAIN)
            _unless_gone(lambda dom=dom: dom.undefineFlags(UNDEFINE_ALL), libvirt.VIR_ERR_NO_DOMAIN)
    pool = conn.storagePoolLookupByName(pool_name)
    pool.refresh(0)
    for vol in pool.listAllVolumes(0):
        name = vol.name()
        if any(BENCH_DOMAIN.fullmatch(name[:-len(suffix)]) for suffix in (".qcow2", "-seed.iso") if name.endswith(suffix)):
            _unless_gone(lambda vol=vol: vol.delete(0), libvirt.VIR_ERR_NO_STORAGE_VOL)
