# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Pools and volumes on the seam, in the shapes the flows ask for them: found or None, required with a hint.

Also who uses a volume (find_users): a volume no flow deletes while a VM
would lose a disk with it, whether the image cache's base or a VM's seed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import dataclass

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import NotFoundError, PermanentError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import parse_domain_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import parse_volume_xml


def find_pool(hypervisor, name):
    """The pool of that name, or None."""
    try:
        return hypervisor.lookup_pool(name)
    except NotFoundError:
        return None


def require_pool(hypervisor, name):
    """The pool of that name; a PermanentError saying how to get one when there is none."""
    try:
        return hypervisor.lookup_pool(name)
    except NotFoundError as error:
        raise PermanentError(
            "storage pool '%s' does not exist on the hypervisor; create it (virsh pool-define-as) or set pool to an "
            "existing one" % name, error.code, error.libvirt_message) from error


def find_volume(hypervisor, pool, name):
    """The volume of that name in ``pool``, or None."""
    try:
        return hypervisor.lookup_volume(pool, name)
    except NotFoundError:
        return None


def delete_volume(hypervisor, vol):
    """Delete ``vol``; one already gone is what was wanted."""
    try:
        hypervisor.delete_volume(vol)
    except NotFoundError:
        pass


def volume_info(hypervisor, vol):
    """The volume's parsed XML (_libvirt.volume_xml.VolumeInfo): format, capacity, path, backing file."""
    return parse_volume_xml(hypervisor.volume_xml(vol))


def volume_deleter(hypervisor):
    """A plan operation (_common.plan.execute) deleting the step's target volume as delete_volume does; the result as it was."""
    def delete(vol, result):
        delete_volume(hypervisor, vol)
        return result
    return delete


def require_pool_found(hypervisor, name):
    """As require_pool, with the same hint, but a missing pool stays a NotFoundError (kvm_seed's error_kind not_found)."""
    try:
        return require_pool(hypervisor, name)
    except PermanentError as error:
        if not isinstance(error.__cause__, NotFoundError):
            raise
        raise NotFoundError(error.message, error.code, error.libvirt_message) from error.__cause__


@dataclass(frozen=True)
class VolumeUsers:
    """What would lose a disk if a volume went: the pool's ``volumes`` backing onto it, the ``domains`` with it as a disk.

    Names, each sorted.
    """

    volumes: tuple = ()
    domains: tuple = ()

    def __bool__(self):
        return bool(self.volumes or self.domains)

    def without(self, departing):
        """These users but the volumes named in ``departing`` (removed by the same run first)."""
        return VolumeUsers(tuple(name for name in self.volumes if name not in departing), self.domains)

    def describe(self):
        """"the backing store of 'a.qcow2' and a disk of domain 'p1'", for messages."""
        parts = []
        if self.volumes:
            parts.append("the backing store of %s" % ", ".join("'%s'" % name for name in self.volumes))
        if self.domains:
            parts.append("a disk of domain %s" % ", ".join("'%s'" % name for name in self.domains))
        return " and ".join(parts)


def find_users(hypervisor, pool, pool_name, info):
    """The VolumeUsers of the volume ``info`` (its VolumeInfo) in ``pool`` (named ``pool_name``).

    A domain uses it when one of its disks names it by pool and volume (as
    kvm_proxy defines them) or by path (as virt-install does). Every domain is
    read, defined or running; one that vanishes meanwhile uses nothing.
    """
    volumes = []
    for vol in hypervisor.list_volumes(pool):
        try:
            backing = volume_info(hypervisor, vol)
        except NotFoundError:
            continue  # deleted while we were listing: it uses nothing any more
        if backing.backing_path is not None and backing.backing_path == info.path:
            volumes.append(backing.name)
    domains = []
    for dom in hypervisor.list_domains():
        try:
            disks = parse_domain_xml(hypervisor.domain_xml(dom)).disks
        except NotFoundError:
            continue
        if any((disk.pool == pool_name and disk.volume == info.name) or (info.path is not None and disk.path == info.path)
               for disk in disks):
            domains.append(hypervisor.domain_name(dom))
    return VolumeUsers(tuple(sorted(volumes)), tuple(sorted(domains)))
