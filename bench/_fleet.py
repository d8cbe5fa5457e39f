"""A fleet of managed-looking domains for the listing benchmarks, defined with plain libvirt-python.

Each domain `eptest-bench-<i>` is the small proxy domain of tests/lab/proxy_domains.py (the XML
kvm_proxy writes, with the collection's metadata element, so kvm_proxy_info and the kvm_proxies plugin
list it), with an empty 1 MiB qcow2 overlay and a 64 KiB raw seed. Only the fleet is built with the
collection's code; what is measured runs the modules and the plugin as a user does.
"""

import datetime
import re

import libvirt

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import overlay_volume_name, seed_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import VolumeSpec, build_volume_xml
from bench._common import PREFIX, config
from tests.lab.proxy_domains import managed_domain_xml

BENCH_DOMAIN = re.compile(re.escape(PREFIX) + r"\d+")
OVERLAY_BYTES = 1 << 20
SEED_BYTES = 64 << 10
UNDEFINE_ALL = (libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
                | libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)


def grow_fleet(conn, uid, first, count, running, pool_name=config.POOL_NAME, bridge=config.BRIDGE):
    """Define domains ``first`` .. ``count - 1`` with their volumes on ``conn``; start those below ``running``.

    The defaults are the single lab's pool and bridge; a lab hypervisor has its own (config.HV_POOL_NAME, HV_BRIDGE).
    Virt type and cpu mode are the lab's (qemu, none), so a started domain runs under TCG.
    """
    pool = conn.storagePoolLookupByName(pool_name)
    created_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    for index in range(first, count):
        name = "%s%d" % (PREFIX, index)
        pool.createXML(build_volume_xml(VolumeSpec(overlay_volume_name(name), OVERLAY_BYTES, "qcow2")), 0)
        pool.createXML(build_volume_xml(VolumeSpec(seed_volume_name(name), SEED_BYTES, "raw")), 0)
        dom = conn.defineXML(managed_domain_xml(name, uid, created_at, pool_name, bridge, config.VIRT_TYPE,
                                                config.CPU_MODE))
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
