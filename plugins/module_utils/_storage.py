# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Pools and volumes on the seam, in the shapes the flows ask for them: found or None, required with a hint."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.module_utils._errors import NotFoundError, PermanentError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._volume_xml import parse_volume_xml


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
    """The volume's parsed XML (_volume_xml.VolumeInfo): format, capacity, path, backing file."""
    return parse_volume_xml(hypervisor.volume_xml(vol))


def volume_deleter(hypervisor):
    """A plan operation (_plan.execute) deleting the step's target volume as delete_volume does; the result as it was."""
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
