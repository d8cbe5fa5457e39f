"""Egress networking through the role (issue 15): bad static addresses and NIC layouts fail before anything is touched.

The booted two-NIC proxy whose egress address verify.yml proves is on branch wip/networking-boot until
its origin check passes (verify.yml could not parse what the origin answered).
"""

import json

import pytest

from tests.lab import config, hypervisors

pytest_plugins = ["tests.integration.fleet_fixtures"]
pytestmark = pytest.mark.integration

PREFIX = "eptest-net-"
PROXY = PREFIX + "1"
HV1 = "lab-hv1"
CONVERGE_TASK = "Converge the proxies of this hypervisor"


def remove_test_domains(spec):
    """Every eptest-net- domain of the hypervisor gone, with its overlay and seed."""
    names = [name for name in hypervisors.virsh(spec, "list", "--all", "--name").stdout.split() if name.startswith(PREFIX)]
    for name in names:
        hypervisors.virsh(spec, "destroy", name, check=False)
        hypervisors.virsh(spec, "undefine", name, "--managed-save", "--snapshots-metadata", "--nvram")
    hypervisors.virsh(spec, "pool-refresh", config.HV_POOL_NAME)
    for volume in hypervisors.virsh(spec, "vol-list", config.HV_POOL_NAME).stdout.split()[0::2]:
        if volume.startswith(PREFIX):
            hypervisors.virsh(spec, "vol-delete", volume, "--pool", config.HV_POOL_NAME)


@pytest.fixture
def net_fleet(hv_fleet):
    remove_test_domains(hv_fleet.hv1)
    try:
        yield hv_fleet
    finally:
        remove_test_domains(hv_fleet.hv1)


@pytest.mark.parametrize("instances, message", [
    ([{"name": PROXY, "address": "198.18.11.80/24", "gateway": "198.18.12.1"}],
     "proxies[0] (%s): interfaces[0]: gateway 198.18.12.1 is outside the prefix" % PROXY),
    ([{"name": PROXY, "address": "198.18.11.300/24"}], "interfaces[0]: address '198.18.11.300/24' is not an IPv4"),
    ([{"name": PROXY, "address": "198.18.11.80/24"}, {"name": PREFIX + "2", "address": "198.18.11.80/24"}],
     "have one static address: %s address 198.18.11.80, %s2 address 198.18.11.80" % (PROXY, PREFIX)),
    ([{"name": PROXY, "outside": {"bridge": config.HV_OUTSIDE_BRIDGE, "address": "198.18.21.80/24"}}],
     "address: the inside NIC needs a static address"),
])
def test_bad_addresses_fail_before_anything_naming_proxy_and_field(net_fleet, instances, message):
    inventory = net_fleet.inventory(net_fleet.role_vars(egress_proxy_uid="eptest-net", egress_proxy_instances=instances))
    run = net_fleet.playbook("deploy.yml", inventory, extra_vars={"egress_proxy_hosts": HV1})
    assert run.rc != 0 and message in json.dumps(run.failures(HV1)), run
    assert not run.ran(CONVERGE_TASK)
    assert not [name for name in hypervisors.virsh(net_fleet.hv1, "list", "--all", "--name").stdout.split()
                if name.startswith(PREFIX)]
