# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  uri:
    description:
      - libvirt connection URI of the hypervisor.
      - V(qemu:///system) runs against the host the module runs on; V(qemu+ssh://user@host/system) reaches a
        remote hypervisor from wherever the module runs (for example the controller with C(delegate_to=localhost)).
      - Remote connections send keepalives, so a hypervisor that stops answering fails the task after about
        20 seconds instead of hanging it.
    type: str
    default: qemu:///system
requirements:
  - libvirt-python (Debian/Ubuntu/RHEL package C(python3-libvirt)) on the host that runs the module.
"""
