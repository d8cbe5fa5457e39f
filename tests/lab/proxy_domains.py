"""Small proxy domains as kvm_proxy defines them, for the fleets the listing tests and benchmarks build.

tests/integration/proxy_fleet.py (the kvm_proxy_info and inventory plugin tests) and bench/_fleet.py (the listing
benchmarks) define domains of this XML on the lab's libvirtd, each with volumes of their own making.
"""

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import overlay_volume_name, seed_volume_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import DomainParams, NicInfo, build_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import build_instance_element


def managed_domain_xml(name, uid, created_at, pool, bridge, virt_type, cpu_mode, mac=None):
    """A small proxy domain of owner ``uid`` as kvm_proxy defines one (the collection's builders), on ``bridge``.

    Its disks are the volumes overlay_volume_name(name) and seed_volume_name(name) of ``pool``.
    """
    return build_domain_xml(DomainParams(
        name=name,
        metadata=build_instance_element(uid, created_at, "0" * 64),
        vcpus=1,
        memory_mib=128,
        pool=pool,
        overlay_volume=overlay_volume_name(name),
        seed_volume=seed_volume_name(name),
        interfaces=(NicInfo(mac=mac, bridge=bridge, network=None),),
        virt_type=virt_type,
        cpu_mode=cpu_mode,
    ))
