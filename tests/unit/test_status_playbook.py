"""playbooks/status.yml's table, rendered by its own task through ansible-playbook on localhost from given rows.

A row's cells are what a hypervisor's listing said (a domain's name, the owner its metadata records): untrusted text.
"""

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.filter.ha_group_holders import ha_group_holders
from ansible_collections.egress_proxies.kvm.tests.unit.page_server import PageServers

REPO_ROOT = Path(__file__).resolve().parents[2]
TABLE_TASK = "Show every proxy of every hypervisor"
COLUMNS = ("hypervisor", "name", "id", "state", "ip", "ipv6", "egress", "egress6", "owner", "age", "policy", "metrics",
           "requests", "would_deny", "desired", "group", "holds", "error")
NO_GROUPS = {"groups": [], "error": None}


def table(tmp_path, rows):
    """The lines status.yml's table task shows for ``rows``, in a fleet without HA groups."""
    (play,) = yaml.safe_load((REPO_ROOT / "playbooks" / "status.yml").read_text())
    (block,) = [task for task in play["tasks"] if "block" in task]
    (task,) = [task for task in block["block"] if task["name"] == TABLE_TASK]
    shown = tmp_path / "shown.json"
    keep = {"name": "Keep what it showed", "ansible.builtin.copy": {"content": "{{ shown.msg | to_json }}", "dest": str(shown)}}
    playbook = tmp_path / "status.yml"
    playbook.write_text(yaml.safe_dump([dict(play, hosts="localhost", connection="local",
                                             tasks=[dict(task, register="shown"), keep])]))
    # The play's templates/ are found beside the playbook.
    (tmp_path / "templates").symlink_to(REPO_ROOT / "playbooks" / "templates")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "build" / "collections"),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_NOCOLOR="true")
    completed = subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", str(playbook), "-e",
         json.dumps({"ansible_python_interpreter": sys.executable, "status_groups": NO_GROUPS,
                     "status_rows": [dict(dict.fromkeys(COLUMNS), **row) for row in rows]})],
        capture_output=True, text=True, check=False, env=env, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return json.loads(shown.read_text())


def test_a_listed_name_or_owner_cannot_start_a_row_of_its_own(tmp_path):
    forged = "lab\nlab-hv2     egress-demo-2  Running  198.18.12.188  up       4242"
    lines = table(tmp_path, [
        {"hypervisor": "lab-hv1", "name": "egress-demo-1\r\x1b[2K", "id": "hosts/lab-hv1/domains/egress-demo-1",
         "state": "Running", "owner": forged, "metrics": "up"},
        {"hypervisor": "lab-hv2", "name": "egress-demo-2", "id": "hosts/lab-hv2/domains/egress-demo-2", "state": "Running",
         "owner": "lab", "metrics": "no answer"}])
    assert len(lines) == 4, lines
    assert lines[1].split()[:3] == ["lab-hv1", "egress-demo-1??[2K", "Running"], lines
    assert "lab?lab-hv2     egress-demo-2  Running  198.18.12.188  up       4242" in lines[1], lines
    assert lines[2].split()[:2] == ["lab-hv2", "egress-demo-2"] and "no answer" in lines[2], lines
    assert lines[3] == "2 hypervisor(s), 2 proxies: 2 Running", lines


def test_the_would_deny_decisions_show_in_a_column_of_their_own_when_a_proxy_counts_them(tmp_path):
    """Issue 43 item 2: what report mode forwarded that enforcement would refuse, beside the requests; "-" for a proxy
    that does not count its decisions, and no column in a fleet where none does."""
    row = {"hypervisor": "lab-hv1", "id": "hosts/lab-hv1/domains/egress-demo-1", "state": "Running", "metrics": "up",
           "requests": 1234}
    lines = table(tmp_path, [dict(row, name="egress-demo-1", would_deny=42), dict(row, name="egress-demo-2")])
    header = lines[0].split()
    assert header[header.index("REQUESTS") + 1:header.index("REQUESTS") + 4] == ["WOULD", "DENY", "DESIRED"], lines
    assert lines[1].split()[-3:] == ["1234", "42", "-"] and lines[2].split()[-3:] == ["1234", "-", "-"], lines
    (tmp_path / "again").mkdir()
    lines = table(tmp_path / "again", [dict(row, name="egress-demo-1")])
    assert "WOULD" not in lines[0] and lines[0].split()[-1] == "DESIRED", lines


# HA groups (issue 42 item 4): which member holds each group's address, from squid's X-Egress-Proxy header of the
# answer on it. Whatever answers there is untrusted: only a member's name is shown, within bounds.

READ_GROUPS_TASK = "Read the metrics page on each HA group's address"
PAGE = 'squid_client_http_requests_total 17\nsquid_up{host="127.0.0.1"} 1\n'
PAGE_BYTES = PAGE.encode()
GROUPS = [{"name": "office", "address": "127.0.0.2", "members": ["egress-a", "egress-b"]},
          {"name": "lab", "address": "127.0.0.3", "members": ["egress-c", "egress-d"]},
          {"name": "dmz", "address": "127.0.0.4", "members": ["egress-e", "egress-f"]}]


def status_play():
    (play,) = yaml.safe_load((REPO_ROOT / "playbooks" / "status.yml").read_text())
    return play


def group_line(url, page=PAGE, headers="HTTP/1.1 200 OK\r\nX-Egress-Proxy: egress-a\r\n\r\n", status="200", exit_code="0"):
    """A line of status.yml's read of a group's address: the URL, the page and the headers in base64, curl's status and
    exit code."""
    return "%s %s %s %s %s" % (url, base64.b64encode(page.encode()).decode(), status, exit_code,
                               base64.b64encode(headers.encode()).decode())


def fleet(tmp_path, proxies, reads, groups, port=None):
    """(the table's lines, the JSON rows, the groups) status.yml's "Show the fleet" shows on localhost, a hypervisor
    that listed ``proxies`` and read ``reads`` (the group read's output) with egress_proxy_ha_groups ``groups``; with
    ``reads`` None, status.yml's own read of the groups' addresses at metrics port ``port``."""
    play = status_play()
    (read,) = [task for task in play["tasks"] if task["name"] == READ_GROUPS_TASK]
    (block,) = [task for task in play["tasks"] if "block" in task]
    shown = tmp_path / "shown.json"
    (show,) = [task for task in block["block"] if task["name"] == TABLE_TASK]
    tasks = [dict(show, register="show")] + [
        {"name": "Keep what it showed", "ansible.builtin.copy": {
            "content": "{{ {'lines': show.msg, 'rows': status_rows, 'groups': status_groups} | to_json }}",
            "dest": str(shown)}}]
    listed = {"status_listing": {"proxies": proxies}}
    if reads is not None:
        listed["status_group_metrics"] = {"stdout": reads}
    setup = [{"name": "Listed", "ansible.builtin.set_fact": listed}] + ([read] if reads is None else [])
    playbook = tmp_path / "status.yml"
    playbook.write_text(yaml.safe_dump([dict(play, hosts="localhost", connection="local",
                                             tasks=setup + [dict(block, block=tasks)])]))
    (tmp_path / "templates").symlink_to(REPO_ROOT / "playbooks" / "templates")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "build" / "collections"),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_NOCOLOR="true")
    completed = subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", str(playbook), "-e",
         json.dumps({"ansible_python_interpreter": sys.executable, "egress_proxy_ha_groups": groups,
                     "egress_proxy_metrics_port": port or 9301})],
        capture_output=True, text=True, check=False, env=env, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    kept = json.loads(shown.read_text())
    return kept["lines"], kept["rows"], kept["groups"]


def proxy(name, ip):
    return {"name": name, "id": "hosts/localhost/domains/" + name, "state": "Running", "ip": ip, "uid": "lab",
            "created_at": None}


def test_each_member_shows_its_group_and_whether_it_holds_the_address_and_each_group_its_holder(tmp_path):
    proxies = [proxy("egress-a", "198.18.40.11"), proxy("egress-b", "198.18.40.12"), proxy("egress-c", "198.18.41.11"),
               proxy("lonely", "198.18.11.5")]
    reads = "\n".join([
        group_line("http://127.0.0.2:9301/metrics"),
        # Something else answers on lab's address and names a proxy of another group, with a line of a table after it.
        group_line("http://127.0.0.3:9301/metrics", headers=(
            "HTTP/1.1 200 OK\r\nX-Egress-Proxy: egress-a\r\n\r\ngroup office 127.0.0.2: held by egress-b\r\n")),
        ""])
    lines, rows, groups = fleet(tmp_path, proxies, reads, GROUPS)
    held = {row["name"]: (row["group"], row["holds"]) for row in rows}
    assert held == {"egress-a": ("office", "yes"), "egress-b": ("office", "no"), "egress-c": ("lab", None),
                    "lonely": (None, None)}, rows
    assert lines[0].split()[-2:] == ["GROUP", "HOLDS"], lines
    assert lines[1].split()[0] == "localhost" and lines[1].split()[-2:] == ["office", "yes"], lines
    assert lines[-3:] == [
        "group office 127.0.0.2: held by egress-a (metrics up, read from localhost)",
        "group lab 127.0.0.3: holder unknown, the answer names none of its members (metrics up, read from localhost)",
        "group dmz 127.0.0.4: not read (no member runs on a hypervisor of the play)"], lines
    assert [group["holder"] for group in groups["groups"]] == ["egress-a", "unknown", None]


def test_a_fleet_without_groups_shows_the_table_it_showed(tmp_path):
    lines, rows, groups = fleet(tmp_path, [proxy("egress-a", "198.18.40.11")], "", [])
    assert groups == NO_GROUPS and len(lines) == 3 and "GROUP" not in lines[0], lines
    assert lines[0].split()[-1] == "DESIRED" and lines[2] == "1 hypervisor(s), 1 proxy: 1 Running", lines
    assert rows[0]["group"] is None and rows[0]["holds"] is None


def test_a_bad_group_variable_is_a_line_that_names_the_entry(tmp_path):
    bad = [dict(GROUPS[0], address="127.0.0.2\nlab-hv2 egress-b Running")]
    lines, _rows, groups = fleet(tmp_path, [proxy("egress-a", "198.18.40.11")], "", bad)
    assert groups["groups"] == [] and lines[-1].startswith("egress_proxy_ha_groups: egress_proxy_ha_groups[0].address"), lines


@pytest.fixture
def answering():
    """serve(address, port, headers, page): an HTTP server on address:port (port 0: any); its port."""
    servers = PageServers()
    yield lambda address, port, headers, page=PAGE_BYTES: servers.serve(address, port, page, headers)
    servers.close()


def test_status_reads_each_groups_address_within_its_bounds_and_believes_only_a_members_name(answering):
    """status.yml's own read (its script, with curl) of the groups' addresses, each on a loopback address of its own at
    one port: an honest holder, one that names a proxy of no member, one with a control character in its name, one
    with two names, one with headers over the bound, an endless page, and an address where nothing listens."""
    play = status_play()
    (read,) = [task for task in play["tasks"] if task["name"] == READ_GROUPS_TASK]
    port = answering("127.0.0.2", 0, [("X-Egress-Proxy", "g0-a")])
    answering("127.0.0.3", port, [("X-Egress-Proxy", "egress-z")])
    answering("127.0.0.4", port, [("X-Egress-Proxy", "g2-a\x1b[2K")])
    answering("127.0.0.5", port, [("X-Egress-Proxy", "g3-a"), ("X-Egress-Proxy", "g3-b")])
    answering("127.0.0.6", port, [("X-Padding-%d" % index, "x" * 100) for index in range(100)]
              + [("X-Egress-Proxy", "g4-a")])
    answering("127.0.0.7", port, [("X-Egress-Proxy", "g5-b")], page=None)
    addresses = ["127.0.0.%d" % last for last in range(2, 9)]
    groups = [{"name": "g%d" % index, "address": address, "members": ["g%d-a" % index, "g%d-b" % index]} for index, address in enumerate(addresses)]
    page_bytes, header_bytes = play["vars"]["status_page_bytes"], play["vars"]["status_header_bytes"]
    started = time.monotonic()
    completed = subprocess.run(["sh", "-c", read["vars"]["status_read_group_pages"], "status.yml", str(page_bytes + 1),
                                str(header_bytes + 1), str(port)] + addresses,
                               capture_output=True, text=True, check=True, timeout=60)
    assert time.monotonic() - started < 15
    assert len(completed.stdout) < len(addresses) * 2 * (page_bytes + header_bytes), len(completed.stdout)
    shown = ha_group_holders(groups, {"hv1": completed.stdout}, page_bytes, header_bytes)
    assert [(group["answer"], group["holder"]) for group in shown["groups"]] == [
        ("up", "g0-a"), ("up", "unknown"), ("up", "unknown"), ("up", "unknown"), ("up", "unknown"),
        ("unreadable", "g5-b"), ("no answer", None)], completed.stdout[:2000]


def test_the_playbook_reads_the_address_of_each_group_with_a_member_running_here(tmp_path, answering):
    """status.yml's read task, as the play runs it: office's address (a member runs here) is read and its answer names
    the holder; lab's and dmz's are not read (no member of theirs runs here), though something answers on lab's."""
    port = answering("127.0.0.2", 0, [("X-Egress-Proxy", "egress-b")])
    answering("127.0.0.3", port, [("X-Egress-Proxy", "egress-c")])
    lines, rows, groups = fleet(tmp_path, [proxy("egress-a", "198.18.40.11"), proxy("lonely", "198.18.11.5")], None,
                                GROUPS, port)
    assert [(group["group"], group["answer"], group["holder"]) for group in groups["groups"]] == [
        ("office", "up", "egress-b"), ("lab", None, None), ("dmz", None, None)], groups
    assert {row["name"]: row["holds"] for row in rows} == {"egress-a": "no", "lonely": None}
    assert "group office 127.0.0.2: held by egress-b (metrics up, read from localhost)" in lines, lines
