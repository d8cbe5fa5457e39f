# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # The descriptions of the attributes every module of this collection documents.
    # A module states its own support level on top:
    #   extends_documentation_fragment:
    #     - egress_proxies.kvm.attributes
    #     - egress_proxies.kvm.attributes.action_group
    #   attributes:
    #     check_mode:
    #       support: full
    #     diff_mode:
    #       support: full
    #     idempotent:
    #       support: full
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in C(check_mode) and return the changed status it predicts without modifying the hypervisor.
  diff_mode:
    description: Returns details on what has changed (or would change in C(check_mode)) when run in diff mode.
  idempotent:
    description:
      - When run twice in a row with the same arguments, the second run reports no change and leaves the hypervisor as it was.
"""

    # Modules in the action group, so a play can give the connection once:
    # module_defaults: {group/egress_proxies.kvm.kvm: {uri: ...}}
    ACTION_GROUP = r"""
options: {}
attributes:
  action_group:
    description: Use C(group/egress_proxies.kvm.kvm) in C(module_defaults) to set defaults for this module.
    support: full
    membership:
      - egress_proxies.kvm.kvm
"""

    # For modules that only read: complete with egress_proxies.kvm.attributes for the descriptions.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details:
      - This action does not modify state.
  diff_mode:
    support: N/A
    details:
      - This action does not modify state.
  idempotent:
    support: full
"""
