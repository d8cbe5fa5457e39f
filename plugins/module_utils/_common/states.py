# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The ``state`` values the modules share, written once: each flow and argument spec imports them from here."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

STATE_PRESENT = "present"
STATE_ABSENT = "absent"
# The states of a module that keeps one thing or removes it (kvm_base_image, kvm_seed); the first is the default.
PRESENCE_STATES = (STATE_PRESENT, STATE_ABSENT)
