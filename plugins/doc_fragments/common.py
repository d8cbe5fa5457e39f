# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # What every module of this collection shares: its authors, the connection, the libvirt bindings, the
    # attributes' descriptions (each module states its own support on top) and the action group.
    DOCUMENTATION = r"""
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
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
  connect_timeout:
    description:
      - Seconds opening the connection to O(uri) may take before the task fails, naming the hypervisor (O(uri), and
        the module's C(host) option where it has one) and saying that nothing was changed.
      - A libvirtd that accepts connections but never replies (frozen, deadlocked), or an SSH transport that hangs,
        fails the task within this bound instead of hanging it; once open, the keepalive above bounds every call.
      - V(0) waits for ever.
    type: int
    default: 30
requirements:
  - libvirt-python (Debian/Ubuntu/RHEL package C(python3-libvirt)) on the host that runs the module.
  - lxml (Debian/Ubuntu/RHEL package C(python3-lxml)) on the host that runs the module.
attributes:
  check_mode:
    description: Can run in C(check_mode) and return the changed status it predicts without modifying the hypervisor.
  diff_mode:
    description: Returns details on what has changed (or would change in C(check_mode)) when run in diff mode.
  idempotent:
    description:
      - When run twice in a row with the same arguments, the second run reports no change and leaves the hypervisor as it was.
  action_group:
    description: Use C(group/egress_proxies.kvm.kvm) in C(module_defaults) to set defaults for this module.
    support: full
    membership:
      - egress_proxies.kvm.kvm
"""
