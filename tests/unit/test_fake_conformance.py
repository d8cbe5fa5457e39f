# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""FakeHypervisor is held to the seam it stands in for.

It offers exactly Hypervisor's public methods with the same signatures, and
Hypervisor.MUTATING_METHODS, which the tests' "check mode calls nothing that
mutates" assertions use, is right about the fake: each of those methods
changes it and is logged under its own name, every other method leaves it
as it was.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import inspect

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import (
    ADDRESS_SOURCE_ARP,
    UNDEFINE_ALL,
    Hypervisor,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.volume_xml import VolumeSpec, build_volume_xml
from ansible_collections.egress_proxies.kvm.tests.unit.fake_hypervisor import RUNNING, SHUTOFF, FakeHypervisor
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_image_header import qcow2_header

# The fake's own controls: tests set the stage with them, flows never call them.
CONTROLS = {"add_pool", "add_domain", "add_volume", "fail", "cut_upload_after", "volume"}
# Flows use the seam as a context manager.
CONTEXT_MANAGER = ("__enter__", "__exit__")


def seam_methods(cls):
    # Instance methods only: the classmethod Hypervisor.open connects, tests build the fake directly.
    return {name: member for name, member in vars(cls).items()
            if inspect.isfunction(member) and (not name.startswith("_") or name in CONTEXT_MANAGER)}


SEAM = seam_methods(Hypervisor)
FAKE = seam_methods(FakeHypervisor)


def test_the_fake_offers_exactly_the_seams_methods():
    assert sorted(set(FAKE) - CONTROLS) == sorted(SEAM)
    assert set(FAKE) >= CONTROLS
    assert not CONTROLS & set(SEAM)
    assert FakeHypervisor().uri == Hypervisor(None, "qemu:///system").uri


def _parameters(method):
    return [(p.name, p.kind, p.default) for p in inspect.signature(method).parameters.values()]


@pytest.mark.parametrize("name", sorted(SEAM))
def test_same_signature(name):
    assert _parameters(FAKE[name]) == _parameters(SEAM[name])
    # download_volume streams: nothing happens before the first chunk is asked for, in both.
    assert inspect.isgeneratorfunction(FAKE[name]) == inspect.isgeneratorfunction(SEAM[name])


def test_mutating_methods_are_the_seams_own_declaration():
    assert FakeHypervisor.MUTATING_METHODS is Hypervisor.MUTATING_METHODS
    assert set(SEAM) >= Hypervisor.MUTATING_METHODS


class World:
    """A fake with one of everything: a running and a stopped domain, a pool, a raw volume holding a qcow2 image."""

    def __init__(self):
        self.hv = FakeHypervisor()
        self.pool = self.hv.add_pool("default")
        self.vol = self.hv.add_volume("default", "disk.img", content=qcow2_header(1 << 30))
        self.running = self.hv.add_domain("running", state=RUNNING)
        self.off = self.hv.add_domain("off", state=SHUTOFF)

    def snapshot(self):
        domains = {name: (dom.xml, dom.state, dom.autostart, repr(sorted(dom.guest.files.items())))
                   for name, dom in self.hv.domains.items()}
        volumes = {(pool.name, name): (vol.format, vol.capacity, vol.backing_path, bytes(vol.content))
                   for pool in self.hv.pools.values() for name, vol in pool.volumes.items()}
        return domains, volumes


# One call of every seam method, on the World.
CALLS = {
    "close": lambda w: w.hv.close(),
    "__enter__": lambda w: w.hv.__enter__(),
    "__exit__": lambda w: w.hv.__exit__(None, None, None),
    "hostname": lambda w: w.hv.hostname(),
    "lookup_domain": lambda w: w.hv.lookup_domain("off"),
    "list_domains": lambda w: w.hv.list_domains(),
    "define_domain": lambda w: w.hv.define_domain("<domain type='kvm'><name>new</name></domain>"),
    "domain_name": lambda w: w.hv.domain_name(w.off),
    "domain_state": lambda w: w.hv.domain_state(w.off),
    "domain_xml": lambda w: w.hv.domain_xml(w.off),
    "set_domain_metadata": lambda w: w.hv.set_domain_metadata(w.off, "<instance><uid>u</uid></instance>", "x", "urn:x", False),
    "start_domain": lambda w: w.hv.start_domain(w.off),
    "shutdown_domain": lambda w: w.hv.shutdown_domain(w.running),
    "destroy_domain": lambda w: w.hv.destroy_domain(w.running),
    "undefine_domain": lambda w: w.hv.undefine_domain(w.off, UNDEFINE_ALL),
    "domain_autostart": lambda w: w.hv.domain_autostart(w.off),
    "set_domain_autostart": lambda w: w.hv.set_domain_autostart(w.off, True),
    "guest_query": lambda w: w.hv.guest_query(w.running, "guest-ping", None, 5),
    "guest_change": lambda w: w.hv.guest_change(w.running, "guest-file-open", {"path": "/etc/new", "mode": "w"}, 5),
    "domain_addresses": lambda w: w.hv.domain_addresses(w.running, ADDRESS_SOURCE_ARP),
    "lookup_interface": lambda w: w.hv.lookup_interface("br0"),
    "lookup_network": lambda w: w.hv.lookup_network("default"),
    "lookup_pool": lambda w: w.hv.lookup_pool("default"),
    "refresh_pool": lambda w: w.hv.refresh_pool(w.pool),
    "list_volumes": lambda w: w.hv.list_volumes(w.pool),
    "lookup_volume": lambda w: w.hv.lookup_volume(w.pool, "disk.img"),
    "volume_name": lambda w: w.hv.volume_name(w.vol),
    "volume_path": lambda w: w.hv.volume_path(w.vol),
    "volume_xml": lambda w: w.hv.volume_xml(w.vol),
    "create_volume": lambda w: w.hv.create_volume(w.pool, build_volume_xml(VolumeSpec("new.qcow2", 1 << 30, "qcow2"))),
    "delete_volume": lambda w: w.hv.delete_volume(w.vol),
    "upload_volume": lambda w: w.hv.upload_volume(w.vol, [b"new content"]),
    "download_volume": lambda w: list(w.hv.download_volume(w.vol)),
}


def test_every_seam_method_has_a_call():
    assert sorted(CALLS) == sorted(SEAM)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_method_changes_the_fake_exactly_when_it_is_declared_mutating(name):
    world = World()
    before = world.snapshot()
    CALLS[name](world)
    assert (world.snapshot() != before) == (name in Hypervisor.MUTATING_METHODS)
    if name in Hypervisor.MUTATING_METHODS:
        assert world.hv.calls == [name]
