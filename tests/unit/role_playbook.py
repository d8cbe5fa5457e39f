"""A role's task file run alone through ansible-playbook on localhost, with the variables it reads given as extra vars."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_role_tasks(tmp_path, role, tasks_from, variables, check=False, after=(), options=()):
    """ansible-playbook of one play: include_role ``role`` (public) ``tasks_from``, then the ``after`` tasks -> stdout.

    ``options`` are more of ansible-playbook's (``-vvv``). Fails the test when the play fails.
    """
    play = {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "egress_proxies.kvm." + role, "tasks_from": tasks_from, "public": True}},
    ] + list(after)}
    playbook = tmp_path / ("%s-%s.yml" % (role, tasks_from))
    playbook.write_text(json.dumps([play]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "build" / "collections"),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_NOCOLOR="true", ANSIBLE_STDOUT_CALLBACK="default")
    argv = [str(REPO_ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", str(playbook),
            "-e", json.dumps(dict(variables, ansible_python_interpreter=sys.executable))]
    completed = subprocess.run(argv + (["--check"] if check else []) + list(options), capture_output=True, text=True, check=False,
                               env=env, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout
