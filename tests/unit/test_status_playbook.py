"""playbooks/status.yml's table, rendered by its own task through ansible-playbook on localhost from given rows.

A row's cells are what a hypervisor's listing said (a domain's name, the owner its metadata records): untrusted text.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
TABLE_TASK = "Show every proxy of every hypervisor"
COLUMNS = ("hypervisor", "name", "id", "state", "ip", "ipv6", "egress", "egress6", "owner", "age", "policy", "metrics",
           "requests", "desired", "error")


def table(tmp_path, rows):
    """The lines status.yml's table task shows for ``rows``."""
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
         json.dumps({"ansible_python_interpreter": sys.executable,
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
