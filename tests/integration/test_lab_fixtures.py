"""The integration fixtures themselves: mirror, playbook runner and test sshd behave as documented."""

import hashlib
import os

import pytest
import requests

from tests.lab import config

pytestmark = pytest.mark.integration

PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "playbooks")


@pytest.mark.parametrize("name", config.MIRROR_IMAGES)
def test_mirror_serves_image_with_content_length_and_listed_checksum(lab, name):
    image = lab.images[name]
    with requests.get(image["url"], stream=True, timeout=30) as response:
        assert int(response.headers["Content-Length"]) == image["size"]
        digest = hashlib.sha256()
        for chunk in response.iter_content(1 << 20):
            digest.update(chunk)
    assert digest.hexdigest() == image["sha256"]


def test_playbook_modules_run_on_the_distro_python(lab, run_playbook):
    run = run_playbook(os.path.join(PLAYBOOKS, "lab_smoke.yml"))
    assert run.rc == 0, run
    facts = run.task_results("Gathering Facts")[0]["ansible_facts"]
    assert facts["ansible_python"]["executable"] == "/usr/bin/python3"
    version = run.task_results("Read the libvirt version through the module interpreter")[0]
    assert int(version["stdout"]) >= 9000000


def test_ansible_reaches_the_test_sshd(sshd, run_ansible):
    run = run_ansible("ansible.builtin.ping", pattern="hypervisor-ssh", extra_hosts=[sshd.inventory_line()])
    assert run.rc == 0, run
    assert '"ping": "pong"' in run.stdout
