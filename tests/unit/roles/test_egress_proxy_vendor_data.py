"""egress_proxy_install_packages false is enough for a network without internet access (issue 31 item 21).

kvm_proxy's default vendor-data installs qemu-guest-agent through cloud-init `packages:`, which cloud-init takes
when the role's user-data has none: the role passes an empty vendor-data then, unless egress_proxy_vendor_data says
otherwise. The role's arguments.yml shapes the converge's arguments, on localhost, and the test reads vendor_data.
"""

import json
import re

import pytest

from ansible_collections.egress_proxies.kvm.tests.unit.role_playbook import run_role_tasks
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import converge_options

ROLE_VARS = {
    "egress_proxy_image": {"name": "debian-12", "url": "http://mirror.example/debian-12.qcow2",
                           "checksum": "sha256:" + "0" * 64},
    "egress_proxy_bridge": "br0",
    "egress_proxy_allowed_clients": ["10.0.0.0/8"],
    "egress_proxy_instances": [{"name": "egress-a"}],
}
SHOW = [{"ansible.builtin.debug": {"msg": "VENDOR_DATA={{ egress_proxy__set_args_lazy | dict2items | selectattr('key', 'eq', "
                                          "'vendor_data') | map(attribute='value') | list | to_json }}"}}]


def vendor_data(tmp_path, **variables):
    """[vendor_data] as the role passes it to kvm_proxy_set, [] when it leaves the option out (the module's default)."""
    variables = dict(ROLE_VARS, egress_proxy__set_options=converge_options(), **variables)
    out = run_role_tasks(tmp_path, "egress_proxy", "arguments", variables, check=True, after=SHOW)
    return json.loads(json.loads(re.search(r'"msg": ("VENDOR_DATA=.*")', out).group(1))[len("VENDOR_DATA="):])


@pytest.mark.parametrize("variables, passed", [
    ({"egress_proxy_install_packages": False}, [""]),
    ({"egress_proxy_install_packages": True}, []),
    ({"egress_proxy_install_packages": False, "egress_proxy_vendor_data": "#cloud-config\n{}\n"}, ["#cloud-config\n{}\n"]),
    ({"egress_proxy_install_packages": True, "egress_proxy_vendor_data": ""}, [""]),
], ids=["no packages: no vendor-data", "packages: kvm_proxy's default", "own vendor-data kept", "empty vendor-data kept"])
def test_the_vendor_data_follows_install_packages_unless_given(tmp_path, variables, passed):
    assert vendor_data(tmp_path, **variables) == passed
