"""Removing what tests put on the lab's libvirtd, whether it is still there or not."""

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import NotFoundError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import UNDEFINE_ALL
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.state import is_active


def remove_domain(hypervisor, name):
    """Stop domain ``name`` if it runs and undefine it; nothing when there is none."""
    try:
        dom = hypervisor.lookup_domain(name)
    except NotFoundError:
        return
    if is_active(hypervisor.domain_state(dom)):
        hypervisor.destroy_domain(dom)
    hypervisor.undefine_domain(dom, UNDEFINE_ALL)


def delete_volume(hypervisor, pool, name):
    """Delete volume ``name`` of ``pool`` (a handle); nothing when there is none."""
    try:
        hypervisor.delete_volume(hypervisor.lookup_volume(pool, name))
    except NotFoundError:
        pass


def remove(hypervisor, pool_name, domains=(), volumes=()):
    """The domains, then the volumes (which a domain may be using) of pool ``pool_name``."""
    for name in domains:
        remove_domain(hypervisor, name)
    pool = hypervisor.lookup_pool(pool_name)
    for name in volumes:
        delete_volume(hypervisor, pool, name)
