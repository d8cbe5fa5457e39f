# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The options every module shares, as data: the module wrapper (_common/module.py) merges them into each module's
spec, and the controller's filters validate against them without importing AnsibleModule."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import DEFAULT_URI, OPEN_TIMEOUT


def common_argument_spec():
    return dict(uri=dict(type="str", default=DEFAULT_URI), connect_timeout=dict(type="int", default=OPEN_TIMEOUT))


def open_timeout(params):
    """The seconds opening the connection may take, from the option connect_timeout (0: None, no bound)."""
    seconds = params["connect_timeout"]
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        raise ValidationError("connect_timeout must be a whole number of seconds, 0 (no bound) or more, got %r" % (seconds,))
    return seconds or None
