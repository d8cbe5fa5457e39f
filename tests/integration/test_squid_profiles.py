"""Profiles and report mode through a real squid (issue 43 items 1 and 2): the role's squid.conf, squid 5.7.

squid (with the users' file the role writes), a stand-in DNS server and the origins run in a network namespace of the
test's (tests/integration/squid_netns.py), which takes root but no lab: the machine's lane, about 15 s. Each request is
asked with GET and with CONNECT, and read back from the access lines squid wrote in the role's format.

- A request takes the first profile of its user or client address: the user ci (profile ci, listed first) from the
  backup hosts' address gets ci's allowlist; another user from there gets the backup profile; from elsewhere, the
  default policy. Each profile refuses internal destinations by address, as the default policy does.
- The backup profile is in report mode: what its allowlist would refuse is forwarded (the origin is reached), and its
  line says decision=would_deny with the rule; an allowed destination says allow; an internal one is refused all the
  same (deny_internal holds in either mode).
- What the proxy checks before any profile (credentials) is decided with profile=-, in either mode, and its 407 carries
  the Proxy-Authenticate challenge clients wait for.
- A profile with an egress address of its own is seen at the origin from it: the role's program puts the addresses on
  the NIC (the namespace's loopback standing in for the guest's), takes off those no longer listed, and names one it
  could not put on.
- The TLS name check (issue 43 item 3): openssl s_client asks for a TLS origin (openssl s_server) through a CONNECT its
  profile allows; squid splices the connection only when the ClientHello names a server the profile allows by name:
  another name (domain fronting), a denied one or none is refused and its line says why (rule=tls_sni_*, sni=); a
  profile in report mode lets it through and says would_deny. A spliced connection writes one line, its tunnel's.
"""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.filter.metrics_pages import metrics_pages
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_conf import EXPORTER_PORT
from tests.integration.squid_netns import SQUID_PORT, squid_namespace, tls_answered, tls_server
from tests.unit.role_templates import (
    COUNTER_PROGRAM,
    EGRESS_ADDRESSES,
    EGRESS_ADDRESSES_PROGRAM,
    EITHER_PROGRAM,
    PREVIOUS_USERS,
    SNI_PROGRAM,
    SQUID_CONF,
    SQUID_USERS,
    decision_counts,
    policy_files,
    role_set_args,
)

pytestmark = pytest.mark.integration

ENTRY = {"name": "egress-1", "address": "198.51.100.5/24", "dns": ["127.0.0.1"]}
PASSWORDS = {"ci": "ci-secret", "ops": "ops-secret"}
BASE = {"egress_proxy_bridge": "br0", "egress_proxy_allowed_clients": ["127.0.0.0/29"], "egress_proxy_metrics": True,
        "egress_proxy_image": {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"},
        "egress_proxy_users": [{"name": name, "password": password} for name, password in PASSWORDS.items()],
        "egress_proxy_allowed_destinations": ["www.example"],
        "egress_proxy_profiles": [
            {"name": "ci", "users": ["ci"], "allowed_destinations": ["mirror.example"]},
            {"name": "backup", "clients": ["127.0.0.3"], "allowed_destinations": ["bucket.example"], "mode": "report"}]}
RECORDS = {"www.example": ["93.184.216.97"], "bucket.example": ["93.184.216.98"], "mirror.example": ["93.184.216.99"],
           "other.example": ["8.8.4.4"], "meta.example": ["169.254.169.254"]}
ADDRESSES = ["93.184.216.97", "93.184.216.98", "93.184.216.99", "8.8.4.4", "169.254.169.254", "127.0.0.3"]
BACKUP_HOST, ELSEWHERE = "127.0.0.3", "127.0.0.1"
EXPORTER_PAGE = "# TYPE squid_up gauge\nsquid_up 1\n"
METRICS_PORT = 9301
STATUS_PLAY = os.path.join(os.path.dirname(__file__), "..", "..", "playbooks", "status.yml")
# What a 407 asks for: Basic credentials, in the role's realm.
CHALLENGE = 'Basic realm="egress proxy"'
# (client address, user, host) -> (status, the address an origin was reached on or None, decision, profile, rule).
EXPECTED = {
    # ci is the first profile: its user takes it from the backup hosts' address too.
    (BACKUP_HOST, "ci", "mirror.example"): (200, "::ffff:93.184.216.99", "allow", "ci", "allowed_destinations"),
    (BACKUP_HOST, "ci", "bucket.example"): (403, None, "deny", "ci", "not_allowed"),
    (BACKUP_HOST, "ci", "meta.example"): (403, None, "deny", "ci", "deny_internal"),
    # Report mode: forwarded, and said.
    (BACKUP_HOST, "ops", "bucket.example"): (200, "::ffff:93.184.216.98", "allow", "backup", "allowed_destinations"),
    (BACKUP_HOST, "ops", "other.example"): (200, "::ffff:8.8.4.4", "would_deny", "backup", "not_allowed"),
    # ... but never to the proxy's inside.
    (BACKUP_HOST, "ops", "meta.example"): (403, None, "deny", "backup", "deny_internal"),
    # The default policy, enforced.
    (ELSEWHERE, "ops", "www.example"): (200, "::ffff:93.184.216.97", "allow", "default", "allowed_destinations"),
    (ELSEWHERE, "ops", "bucket.example"): (403, None, "deny", "default", "not_allowed"),
    (ELSEWHERE, "ops", "meta.example"): (403, None, "deny", "default", "deny_internal"),
    # No credentials: asked for them before any profile, from the report-mode profile's clients too.
    (BACKUP_HOST, None, "other.example"): (407, None, "deny", "-", "users"),
}


@contextlib.contextmanager
def exporter_stand_in(namespace, directory):
    """The exporter's page, ``directory``/metrics, on its loopback port in ``namespace``."""
    server = subprocess.Popen(["ip", "netns", "exec", namespace.name, sys.executable, "-m", "http.server", "--bind",
                               "127.0.0.1", "--directory", directory, str(EXPORTER_PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        server.terminate()
        server.wait(timeout=15)


def metrics_page(namespace, requests):
    """The proxy's metrics page, read as Prometheus reads it (squid's metrics port), once it counts ``requests``
    decisions: squid hands each access line to the counter as it writes it."""
    deadline = time.monotonic() + 20
    while True:
        read = namespace.run(["curl", "-sS", "--max-time", "5", "http://127.0.0.1:%d/metrics" % METRICS_PORT])
        if sum(decision_counts(read.stdout).values()) >= requests or time.monotonic() > deadline:
            return read.stdout
        time.sleep(0.2)


def reconfigured_page(namespace):
    """The metrics port's first answer after squid reconfigured, as a policy change in place does: (status, page).

    squid starts a new counter then, and probes it before it listens."""
    namespace.run(["squid", "-k", "reconfigure", "-f", os.path.join(namespace.workdir, "squid.conf")])
    deadline = time.monotonic() + 20
    while True:
        read = namespace.run(["curl", "-sS", "--max-time", "5", "-w", "\n%{http_code}",
                              "http://127.0.0.1:%d/metrics" % METRICS_PORT])
        page, _newline, status = read.stdout.rpartition("\n")
        # 000: squid does not listen while it reconfigures (a policy change holds new connections meanwhile).
        if status != "000" or time.monotonic() > deadline:
            return status, page
        time.sleep(0.1)


def status_after_reconfigure(namespace):
    """What playbooks/status.yml's read of the metrics page ({"answer", "requests", "would_deny"}) finds right after
    squid reconfigured: its script, run in the namespace once squid listens on the port again (as ss lists it: no
    connection, which squid would log)."""
    namespace.run(["squid", "-k", "reconfigure", "-f", os.path.join(namespace.workdir, "squid.conf")])
    time.sleep(1)  # squid closes its ports at the signal, and opens them again
    deadline = time.monotonic() + 20
    while not namespace.run(["ss", "-Hltn", "sport = :%d" % METRICS_PORT]).stdout.strip():
        assert time.monotonic() < deadline, "squid did not listen on its metrics port again within 20 s"
        time.sleep(0.1)
    with open(STATUS_PLAY) as handle:
        (play,) = yaml.safe_load(handle)
    (read,) = [task for task in play["tasks"] if task["name"] == "Read the metrics page of each running proxy"]
    limit = play["vars"]["status_page_bytes"]
    url = "http://127.0.0.1:%d/metrics" % METRICS_PORT
    completed = namespace.run(["sh", "-c", read["vars"]["status_read_pages"], "status.yml", str(limit + 1), url])
    return metrics_pages(completed.stdout, limit)[url]


def fields(line):
    """The key=value fields of an access line in the role's format (squid's own fields, then decision= profile= rule=)."""
    return dict(word.split("=", 1) for word in line.split() if "=" in word)


@pytest.fixture
def policy_dir():
    """A directory squid's own user reads (pytest's are mode 0700): the users' file, and squid's access lines."""
    path = tempfile.mkdtemp(prefix="eptest-profiles-")
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path)


def copied(policy_dir, policy_file, mode=0o644):
    """The path in ``policy_dir`` of a copy of one file of the policy (policy_files'), which squid's user reads."""
    path = os.path.join(policy_dir, os.path.basename(policy_file["path"]))
    with open(path, "w") as handle:
        handle.write(policy_file.get("secret_content") or policy_file["content"])
    os.chmod(path, mode)
    return path


def test_each_request_takes_its_profile_and_report_mode_forwards_what_it_says_it_would_deny(policy_dir):
    (proxy,) = role_set_args([dict(ENTRY)], **BASE)["proxies"]
    files = policy_files(proxy)
    users = copied(policy_dir, files[SQUID_USERS])
    counter = copied(policy_dir, files[COUNTER_PROGRAM], 0o755)
    exporter = os.path.join(policy_dir, "exporter")
    os.mkdir(exporter)
    with open(os.path.join(exporter, "metrics"), "w") as handle:
        handle.write(EXPORTER_PAGE)
    log = os.path.join(policy_dir, "access.log")
    conf = files[SQUID_CONF]["content"].replace(SQUID_USERS, users).replace(
        "daemon:/var/log/squid/access.log", "stdio:" + log).replace(COUNTER_PROGRAM, counter)
    asked = []
    with squid_namespace(conf, RECORDS, ADDRESSES) as namespace, exporter_stand_in(namespace, exporter):
        for (source, user, host), expected in EXPECTED.items():
            for method, tunnel in (("GET", False), ("CONNECT", True)):
                answer = namespace.ask(host, method.lower(), tunnel=tunnel, source=source,
                                       credentials="%s:%s" % (user, PASSWORDS[user]) if user else "")
                asked.append(((source, user, host, method), expected,
                              (answer["status"], answer["body"] and answer["body"]["reached"])))
                # A 407 says how to authenticate, as curl, Java and .NET clients expect before they send credentials.
                assert (answer["challenge"] == CHALLENGE) == (answer["status"] == 407), answer
        page = metrics_page(namespace, len(asked))
        first_after_reconfigure = reconfigured_page(namespace)
        status = status_after_reconfigure(namespace)
    # squid writes its stdio log out when it stops.
    with open(log) as handle:
        logged = [fields(line) for line in handle.read().splitlines()]
    # The metrics port's scrapes are lines of the file too, and no decision of the policy.
    lines = [line for line in logged if line["rule"] != "metrics"]
    # The metrics page: the exporter's, then each decision counted as the access lines write it.
    assert page.startswith(EXPORTER_PAGE), page
    assert decision_counts(page) == Counter((line["decision"], line["profile"], line["rule"]) for line in lines), page
    assert len(lines) == len(asked), lines
    for line, (request, expected, answered) in zip(lines, asked):
        assert answered == expected[:2], (request, answered)
        assert (line["decision"], line["profile"], line["rule"]) == expected[2:], (request, line)
    # The first scrape after a reconfigure gets the exporter's page, without counts (they start again anyway), not 502.
    assert first_after_reconfigure[0] == "200" and first_after_reconfigure[1].startswith(EXPORTER_PAGE), first_after_reconfigure
    # status.yml reads such a page again: right after a policy change it shows the counter's count (0: it starts again).
    assert status["would_deny"] == 0, status
    # What the operator counts before enforcing the backup profile.
    would_deny = [line for line in lines if line["decision"] == "would_deny" and line["profile"] == "backup"]
    assert len(would_deny) == 2


def test_a_user_whose_password_is_rotated_passes_with_either_until_the_previous_one_is_gone(policy_dir):
    """Issue 43 item 4 through the real squid: the role's helper asks squid's basic_ncsa_auth on both files."""
    rotated = dict(BASE, egress_proxy_profiles=[], egress_proxy_metrics=False, egress_proxy_users=[
        {"name": "ci", "password": "ci-new", "previous_password": "ci-secret"}, {"name": "ops", "password": "ops-secret"}])
    (proxy,) = role_set_args([dict(ENTRY)], **rotated)["proxies"]
    files = policy_files(proxy)
    conf = files[SQUID_CONF]["content"]
    for path, mode in ((SQUID_USERS, 0o644), (PREVIOUS_USERS, 0o644), (EITHER_PROGRAM, 0o755)):
        conf = conf.replace(path, copied(policy_dir, files[path], mode))
    with squid_namespace(conf, RECORDS, ADDRESSES) as namespace:
        answers = {credentials: namespace.ask("www.example", "get", credentials=credentials)["status"]
                   for credentials in ("ci:ci-new", "ci:ci-secret", "ci:ci-other", "ops:ops-secret", "ops:ci-secret")}
    assert answers == {"ci:ci-new": 200, "ci:ci-secret": 200, "ci:ci-other": 407, "ops:ops-secret": 200,
                       "ops:ci-secret": 407}, answers


# Two profiles with egress addresses of their own in the proxy's segment (ENTRY's 198.51.100.5/24): ci's users (from
# anywhere) and the backup hosts' other users; everyone else leaves from the address the kernel picks.
EGRESS = {"ci": "198.51.100.11", "backup": "198.51.100.12"}
EGRESS_BASE = dict(BASE, egress_proxy_metrics=False, egress_proxy_allowed_destinations=[], egress_proxy_profiles=[
    {"name": "ci", "users": ["ci"], "egress_address": EGRESS["ci"]},
    {"name": "backup", "clients": [BACKUP_HOST], "egress_address": EGRESS["backup"]}])


def loopback_addresses(namespace):
    return set(namespace.run(["ip", "-o", "-4", "address", "show", "dev", "lo"]).stdout.split())


def test_each_profile_is_seen_at_the_origin_from_its_own_egress_address(policy_dir):
    (proxy,) = role_set_args([dict(ENTRY)], **EGRESS_BASE)["proxies"]
    files = policy_files(proxy)
    users = copied(policy_dir, files[SQUID_USERS])
    program = copied(policy_dir, files[EGRESS_ADDRESSES_PROGRAM], 0o755)
    # The list the role wrote for the guest's only NIC (nic0), for the namespace's loopback.
    listed = files[EGRESS_ADDRESSES]["content"]
    assert listed == "198.51.100.11/24 nic0\n198.51.100.12/24 nic0\n"
    wanted, applied = os.path.join(policy_dir, "wanted"), os.path.join(policy_dir, "run", "applied")

    def put_on(content):
        with open(wanted, "w") as handle:
            handle.write(content.replace(" nic0", " lo"))
        return namespace.run([program, wanted, applied])

    conf = files[SQUID_CONF]["content"].replace(SQUID_USERS, users)
    with squid_namespace(conf, RECORDS, ADDRESSES) as namespace:
        first = put_on(listed)
        assert first.returncode == 0, first.stderr
        seen = {}
        for source, user, host in ((ELSEWHERE, "ci", "mirror.example"), (BACKUP_HOST, "ops", "bucket.example"),
                                   (ELSEWHERE, "ops", "www.example")):
            for tunnel in (False, True):
                status, body = namespace.get(host, "egress", tunnel=tunnel, source=source,
                                             credentials="%s:%s" % (user, PASSWORDS[user]))
                assert status == 200, (source, user, host, tunnel, status)
                seen[(user, source, tunnel)] = body["from"].replace("::ffff:", "")
        # The backup profile's address taken out of the list: the next run takes it off the NIC, and keeps ci's.
        second = put_on(listed.splitlines(keepends=True)[0])
        after_removal = loopback_addresses(namespace)
        # An address that cannot be put on (no such NIC) fails the program naming it; the others still go on.
        third = put_on(listed + "198.51.100.13/24 nosuchnic\n")
        after_failure = loopback_addresses(namespace)
    for tunnel in (False, True):
        assert seen[("ci", ELSEWHERE, tunnel)] == EGRESS["ci"], seen
        assert seen[("ops", BACKUP_HOST, tunnel)] == EGRESS["backup"], seen
        assert seen[("ops", ELSEWHERE, tunnel)] not in EGRESS.values(), seen
    assert second.returncode == 0, second.stderr
    assert "198.51.100.11/24" in after_removal and "198.51.100.12/24" not in after_removal, after_removal
    assert third.returncode == 1 and "egress address 198.51.100.13/24 could not be put on nosuchnic" in third.stderr, third
    assert {"198.51.100.11/24", "198.51.100.12/24"} <= after_failure, after_failure


# The TLS name check (issue 43 item 3): ci's profile is enforced, ops's in report mode; TLS origins on TLS_PORT.
TLS_PORT = 8443
TLS_BASE = dict(BASE, egress_proxy_metrics=False, egress_proxy_tls_sni_check=True,
                egress_proxy_connect_ports=["443", str(TLS_PORT)], egress_proxy_profiles=[
                    {"name": "ci", "users": ["ci"], "allowed_destinations": [".mirror.example"],
                     "denied_destinations": ["secret.mirror.example"]},
                    {"name": "ops", "users": ["ops"], "allowed_destinations": ["bucket.example"], "mode": "report"}])
# (user, CONNECT host, the ClientHello's SNI or None) -> (whether the TLS origin answered, then each access line's
# decision, profile, rule and sni, in the order squid writes them).
TLS_EXPECTED = {
    ("ci", "mirror.example", "mirror.example"): (True, [("allow", "ci", "allowed_destinations", "mirror.example")]),
    # Domain fronting: an allowed CONNECT, another name inside.
    ("ci", "mirror.example", "www.example"): (False, [("deny", "ci", "tls_sni_not_allowed", "www.example")]),
    ("ci", "mirror.example", "secret.mirror.example"): (False, [("deny", "ci", "tls_sni_denied", "secret.mirror.example")]),
    ("ci", "mirror.example", None): (False, [("deny", "ci", "tls_sni_missing", "-")]),
    # Report mode: spliced, its first line says what enforcement would do, the tunnel's line follows.
    ("ops", "bucket.example", "www.example"): (True, [("would_deny", "ops", "tls_sni_not_allowed", "www.example"),
                                                      ("allow", "ops", "allowed_destinations", "www.example")]),
    ("ops", "bucket.example", None): (True, [("would_deny", "ops", "tls_sni_missing", "-"),
                                             ("allow", "ops", "allowed_destinations", "-")]),
}


def logged_lines(log, count, timeout=10):
    """The lines of ``log`` once it has ``count`` of them."""
    deadline = time.monotonic() + timeout
    while True:
        with open(log) as handle:
            lines = handle.read().splitlines()
        if len(lines) >= count:
            return lines
        assert time.monotonic() < deadline, lines
        time.sleep(0.1)


def test_a_connect_speaks_tls_only_for_a_name_its_profile_allows(policy_dir):
    (proxy,) = role_set_args([dict(ENTRY)], **TLS_BASE)["proxies"]
    files = policy_files(proxy)
    log = os.path.join(policy_dir, "access.log")
    conf = files[SQUID_CONF]["content"].replace(SQUID_USERS, copied(policy_dir, files[SQUID_USERS])).replace(
        SNI_PROGRAM, copied(policy_dir, files[SNI_PROGRAM], 0o755)).replace(
        "daemon:/var/log/squid/access.log", "stdio:" + log)
    with squid_namespace(conf, RECORDS, ADDRESSES) as namespace, tls_server(namespace.name, policy_dir, TLS_PORT):
        answered = {}
        written = 0
        for (user, host, sni), (_answer, expected_lines) in TLS_EXPECTED.items():
            answered[(user, host, sni)] = tls_answered(namespace.name, "127.0.0.1:%d" % SQUID_PORT,
                                                       (user, PASSWORDS[user]), "%s:%d" % (host, TLS_PORT), sni)
            # squid writes a tunnel's line when it closes: the next case starts after this one's lines.
            written += len(expected_lines)
            logged_lines(log, written)
        # A CONNECT the profile refuses is closed unanswered (squid 5.7 would assert serving its 403 on a peeking port),
        # and squid goes on: the allowed name passes again.
        refused = namespace.ask("www.example", "tls", tunnel=True, credentials="ci:" + PASSWORDS["ci"])
        again = tls_answered(namespace.name, "127.0.0.1:%d" % SQUID_PORT, ("ci", PASSWORDS["ci"]),
                             "mirror.example:%d" % TLS_PORT, "mirror.example")
    assert refused["status"] is None and again, (refused, again)
    assert answered == {case: expected[0] for case, expected in TLS_EXPECTED.items()}, answered
    with open(log) as handle:
        logged = [fields(line) for line in handle.read().splitlines()]
    assert [(line["decision"], line["profile"], line["rule"], line["sni"]) for line in logged] == [
        line for _answer, lines in TLS_EXPECTED.values() for line in lines] + [
        ("deny", "ci", "not_allowed", "-"), ("allow", "ci", "allowed_destinations", "mirror.example")], logged


# A name of ci's domain that rebinds: its first answer a public address, every later one the metadata address, which
# the TLS origin listens on too.
REBINDING = "rebind.mirror.example"


def test_a_tunnel_whose_name_rebound_to_an_internal_address_since_its_connect_is_refused(policy_dir):
    """The ClientHello comes late (squid forgets the first answer after a second here): the tunnel the splice makes passes
    http_access again, which resolves the name again, to the metadata address; that pass is refused, not let through for
    ssl_bump to close as a refused CONNECT is."""
    (proxy,) = role_set_args([dict(ENTRY)], **TLS_BASE)["proxies"]
    files = policy_files(proxy)
    log = os.path.join(policy_dir, "access.log")
    conf = files[SQUID_CONF]["content"].replace(SQUID_USERS, copied(policy_dir, files[SQUID_USERS])).replace(
        SNI_PROGRAM, copied(policy_dir, files[SNI_PROGRAM], 0o755)).replace(
        "daemon:/var/log/squid/access.log", "stdio:" + log) + "positive_dns_ttl 1 second\nnegative_dns_ttl 1 second\n"
    records = dict(RECORDS, **{REBINDING: [["93.184.216.99"], ["169.254.169.254"]]})
    with squid_namespace(conf, records, ADDRESSES) as namespace, tls_server(namespace.name, policy_dir, TLS_PORT):
        late = namespace.tls_late("%s:%d" % (REBINDING, TLS_PORT), REBINDING, "ci:" + PASSWORDS["ci"], 3)
        lines = logged_lines(log, 1)
    assert late == {"connect": 200, "answered": False}, late
    # The tunnel's pass is refused (squid writes its 403 into the spliced connection; the ClientHello's own line is not
    # written, as for every splice), and no TLS origin answered.
    line = fields(lines[0])
    assert " TCP_DENIED/403 " in lines[0], lines
    assert (line["decision"], line["profile"], line["rule"], line["sni"]) == ("deny", "ci", "deny_internal", REBINDING), lines
