"""Moving a proxy between the lab's hypervisors as docs/role-egress_proxy.md describes (issue 40 item 8).

One edit of the inventory moves it: its egress_proxy_fleet entry names the new hypervisor, and the old copy is listed
with state absent on the old one (a second fleet entry, or the old hypervisor's own egress_proxy_instances). A name
listed to exist on two hypervisors is still refused before any hypervisor is touched. The proxies boot the small
non-booting image on lab-hv1 and lab-hv2, each reached over its own sshd, as in test_fleet.py.
"""

import pytest

from tests.lab.fleet_runs import PREFIX

pytest_plugins = ["tests.integration.fleet_fixtures"]
pytestmark = pytest.mark.integration

CONVERGE_TASK = "Converge the proxies of this hypervisor"
HV1, HV2 = "lab-hv1", "lab-hv2"
MOVED = PREFIX + "moved"


def deployed(hv_fleet, fleet, host_vars=None):
    """deploy.yml with this egress_proxy_fleet (and host_vars): the run, checked to have succeeded."""
    run = hv_fleet.playbook("deploy.yml", hv_fleet.inventory(hv_fleet.role_vars(egress_proxy_fleet=fleet), host_vars))
    assert run.rc == 0, run
    return run


def placed(hv_fleet):
    """{hypervisor: {domain: state}} of this test's domains, from virsh on each hypervisor."""
    return {HV1: hv_fleet.domains_local(hv_fleet.hv1), HV2: hv_fleet.domains_local(hv_fleet.hv2)}


def test_a_proxy_moves_between_hypervisors_in_one_edit_and_two_present_copies_are_refused(hv_fleet):
    deployed(hv_fleet, [{"name": MOVED, "hypervisor": HV1}])
    assert placed(hv_fleet) == {HV1: {MOVED: "running"}, HV2: {}}

    # The documented move: the entry names lab-hv2, the old copy is listed absent on lab-hv1.
    move = [{"name": MOVED, "hypervisor": HV2}, {"name": MOVED, "hypervisor": HV1, "state": "absent"}]
    run = deployed(hv_fleet, move)
    assert run.items(CONVERGE_TASK, HV2)[MOVED]["changed"] and run.items(CONVERGE_TASK, HV1)[MOVED]["changed"]
    assert placed(hv_fleet) == {HV1: {}, HV2: {MOVED: "running"}}
    again = deployed(hv_fleet, move)
    assert [again.stats(host)["changed"] for host in (HV1, HV2)] == [0, 0], again

    # And back, the old copy now in the fleet list (absent on lab-hv2), the proxy in lab-hv1's own list.
    deployed(hv_fleet, [{"name": MOVED, "hypervisor": HV2, "state": "absent"}],
             {HV1: {"egress_proxy_instances": [{"name": MOVED}]}})
    assert placed(hv_fleet) == {HV1: {MOVED: "running"}, HV2: {}}

    # Two copies that are both to exist: refused on every hypervisor, nothing converged, nothing changed.
    for fleet, host_vars, where in (
            ([{"name": MOVED, "hypervisor": HV1}, {"name": MOVED, "hypervisor": HV2, "state": "stopped"}], None,
             "%s and %s" % (HV1, HV2)),
            ([{"name": MOVED, "hypervisor": HV2}], {HV1: {"egress_proxy_instances": [{"name": MOVED}]}},
             "%s and %s (egress_proxy_instances of %s)" % (HV2, HV1, HV1))):
        refused = hv_fleet.playbook("deploy.yml", hv_fleet.inventory(hv_fleet.role_vars(egress_proxy_fleet=fleet),
                                                                     host_vars))
        assert refused.rc != 0, refused
        messages = " | ".join(message or "" for _host, _task, message in refused.failures())
        assert ("egress_proxy_fleet[0].name: the proxy %s is listed to exist on %s; a proxy runs on one hypervisor"
                % (MOVED, where)) in messages, messages
        assert refused.ran(CONVERGE_TASK) == [], refused
        assert placed(hv_fleet) == {HV1: {MOVED: "running"}, HV2: {}}
