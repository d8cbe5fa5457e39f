# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Running a module's main() over the fake seam, shared by the module tests."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import module as _module
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import Hypervisor


@pytest.fixture
def run_main(monkeypatch, capsys):
    """run_main(main, hypervisor, args, check_mode=False, diff=False, open_error=None) -> (result, stdout, URIs opened).

    ``Hypervisor.open`` hands out ``hypervisor`` (or raises ``open_error``); ``hypervisor.opened_as`` records the
    (timeout, name) of the last open.
    """
    # The fake stands in for libvirt, so the bindings need not be installed where unit tests run.
    monkeypatch.setattr(_module, "BASE_REQUIREMENTS", tuple(
        requirement[:2] + (None,) if requirement is _module.LIBVIRT_REQUIREMENT else requirement
        for requirement in _module.BASE_REQUIREMENTS))

    def run(main, hypervisor, args, check_mode=False, diff=False, open_error=None):
        opened = []

        def fake_open(uri, timeout, name):
            opened.append(uri)
            hypervisor.opened_as = (timeout, name)
            if open_error is not None:
                raise open_error
            hypervisor.uri = uri
            return hypervisor

        monkeypatch.setattr(Hypervisor, "open", fake_open)
        module_args = dict(args)
        if check_mode:
            module_args["_ansible_check_mode"] = True
        if diff:
            module_args["_ansible_diff"] = True
        with patch_module_args(module_args), pytest.raises(SystemExit):
            main()
        out = capsys.readouterr().out
        return json.loads(out), out, opened

    return run
