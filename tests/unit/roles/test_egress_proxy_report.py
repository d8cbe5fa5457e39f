"""The egress_proxy role's report (tasks/report.yml) on kvm_proxy_set results given to it: what each line says.

report.yml alone, through ansible-playbook on localhost, with egress_proxy__converged given as an extra var: a
first deploy in --check lists the proxies it would create (not "no proxies ... exist"), and the garbage
collection's summary gives each spared proxy the module's own reason (issue 31 item 12).
"""

from ansible_collections.egress_proxies.kvm.tests.unit.role_playbook import run_role_tasks

HOST = "hosts/hv1/domains/"


def result(proxies=(), removed=(), spared=(), foreign=()):
    return {"proxies": list(proxies), "removed": list(removed), "spared": list(spared), "foreign": list(foreign)}


def entry(name, outcome, state=None, ip=None):
    return {"id": HOST + name, "name": name, "outcome": outcome, "state": state, "ip": ip}


def report(tmp_path, converged, check=False):
    return run_role_tasks(tmp_path, "egress_proxy", "report", {"egress_proxy__converged": converged}, check=check)


def test_a_first_deploy_in_check_mode_lists_the_proxies_it_would_create(tmp_path):
    out = report(tmp_path, result([entry("egress-a", "created"), entry("egress-b", "created")]), check=True)
    assert '"%segress-a (would be created)"' % HOST in out and '"%segress-b (would be created)"' % HOST in out, out
    assert "no proxies" not in out, out


def test_check_mode_tells_what_would_happen_to_existing_proxies_and_nothing_for_unchanged_ones(tmp_path):
    out = report(tmp_path, result([entry("egress-a", "replaced", "Running", "10.0.0.5"),
                                   entry("egress-b", "unchanged", "Stopped")]), check=True)
    assert '"%segress-a Running 10.0.0.5 (would be replaced)"' % HOST in out, out
    assert '"%segress-b Stopped no address"' % HOST in out, out


def test_a_real_run_lists_each_proxy_with_its_state_and_a_removed_one_as_removed(tmp_path):
    out = report(tmp_path, result([entry("egress-a", "unchanged", "Running", "10.0.0.5"), entry("egress-b", "removed")]))
    assert '"%segress-a Running 10.0.0.5"' % HOST in out and '"%segress-b removed"' % HOST in out, out


def test_a_proxy_with_an_outside_nic_shows_its_egress_addresses(tmp_path):
    out = report(tmp_path, result([dict(entry("egress-a", "created", "Provisioning"), egress_address="203.0.113.10",
                                        egress_address6="2001:db8:7::10"),
                                   dict(entry("egress-b", "unchanged", "Running", "10.0.0.6"), egress_address="10.0.0.6")]))
    assert '"%segress-a Provisioning no address egress 203.0.113.10 2001:db8:7::10"' % HOST in out, out
    assert '"%segress-b Running 10.0.0.6"' % HOST in out, out  # one NIC: its address is the egress one


def test_with_no_proxy_listed_the_report_says_so(tmp_path):
    out = report(tmp_path, result())
    assert "no proxies are listed for localhost" in out, out


def test_the_gc_summary_gives_each_spared_proxy_its_own_reason(tmp_path):
    spared = [{"name": "egress-young", "reason": "created less than gc_grace_period (3600 s) ago"},
              {"name": "egress-unreadable", "reason": "its domain XML could not be read: no metadata"}]
    out = report(tmp_path, result(removed=[entry("egress-old", "removed")], spared=spared,
                                  foreign=[{"name": "windows-build"}]))
    assert ("removed: egress-old; kept: egress-young (created less than gc_grace_period (3600 s) ago), "
            "egress-unreadable (its domain XML could not be read: no metadata); not this owner's: windows-build") in out, out
    assert "within the grace period" not in out, out
