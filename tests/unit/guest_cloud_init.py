# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The lab guest image's own cloud-init, run on this machine: its ``net-convert`` renders a network-config into the
files the guest would write (ifupdown's /etc/network/interfaces.d on Debian 12).

Its Python packages (cloud-init and what it imports) are copied out of the image's root filesystem with debugfs,
which reads ext4 without mounting it; no guest boots. Cheaper than a boot by two orders of magnitude (about 2 s), and
the same code the guest runs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess

import pytest

from ansible_collections.egress_proxies.kvm.tests.lab import config

GUEST_IMAGE = os.path.join(config.MIRROR_DIR, config.GUEST_IMAGE)
GUEST_PACKAGES = "/usr/lib/python3/dist-packages"
# The guest's Python is Debian 12's 3.11, as the hypervisor's: the packages' compiled parts (PyYAML's) load here too.
GUEST_PYTHON = "/usr/bin/python3"


def extract_guest_packages(directory):
    """Copy the image's dist-packages into ``directory``; return the path to put on PYTHONPATH."""
    if not os.path.exists(GUEST_IMAGE):
        pytest.skip("the lab's guest image %s is not built (scripts/lab up builds it)" % GUEST_IMAGE)
    raw = os.path.join(directory, "guest.raw")
    subprocess.run(["qemu-img", "convert", "-O", "raw", GUEST_IMAGE, raw], check=True, timeout=120)
    table = json.loads(subprocess.run(["sfdisk", "--json", raw], check=True, capture_output=True, text=True,
                                      timeout=30).stdout)["partitiontable"]
    root = table["partitions"][0]
    offset = root["start"] * table.get("sectorsize", 512)
    subprocess.run(["debugfs", "-R", "rdump %s %s" % (GUEST_PACKAGES, directory), "%s?offset=%d" % (raw, offset)],
                   check=True, capture_output=True, timeout=120)
    os.remove(raw)
    packages = os.path.join(directory, os.path.basename(GUEST_PACKAGES))
    assert os.path.isdir(os.path.join(packages, "cloudinit")), "no cloud-init in %s" % GUEST_IMAGE
    return packages


def net_convert(packages, network_config, directory):
    """What the guest's cloud-init writes for ``network_config`` (a network-config document, bytes) on Debian:
    {path relative to the root: text}. Fails on a network-config cloud-init refuses."""
    source = os.path.join(directory, "network-config")
    with open(source, "wb") as handle:
        handle.write(network_config)
    output = os.path.join(directory, "out")
    converted = subprocess.run(
        [GUEST_PYTHON, "-m", "cloudinit.cmd.main", "devel", "net-convert", "--network-data", source, "--kind", "yaml",
         "--distro", "debian", "--output-kind", "eni", "--directory", output],
        env=dict(os.environ, PYTHONPATH=packages), capture_output=True, text=True, timeout=120, check=False)
    assert converted.returncode == 0, converted.stderr
    written = {}
    for base, _dirs, files in os.walk(output):
        for name in files:
            path = os.path.join(base, name)
            with open(path) as handle:
                written[os.path.relpath(path, output)] = handle.read()
    return written
