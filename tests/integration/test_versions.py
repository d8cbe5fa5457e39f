"""The collection on the ansible-core releases users run: the newest, and the oldest requires_ansible claims.

Each release has its own virtualenv (build/versions/<name>, made by scripts/bootstrap from
tests/versions/<name>.txt) and runs the installed artifact: the module smoke against the main lab
(tests/versions/smoke.yml) and the role's deploy and destroy on lab-hv1 over SSH (non-booting).
ansible-test sanity on each release runs in scripts/test.
"""

import json
import os
import subprocess

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import read_iso
from tests.integration import collection_artifact
from tests.integration.hypervisor_inventory import hypervisor_inventory
from tests.lab import config, hypervisors
from tests.unit.role_templates import user_data_parts

pytestmark = pytest.mark.integration

VERSIONS_DIR = os.path.join(collection_artifact.REPO_ROOT, "tests", "versions")
RELEASES = sorted(name[:-len(".txt")] for name in os.listdir(VERSIONS_DIR) if name.endswith(".txt"))
VENVS = os.path.join(collection_artifact.REPO_ROOT, "build", "versions")
PREFIX = "eptest-versions-"


def _ansible(release, program, argv, tmp_path):
    binary = os.path.join(VENVS, release, "bin", program)
    assert os.path.exists(binary), "no %s: scripts/bootstrap makes build/versions/%s" % (binary, release)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update({"ANSIBLE_COLLECTIONS_PATH": collection_artifact.COLLECTIONS_DIR, "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
                "ANSIBLE_NOCOLOR": "true", "ANSIBLE_RETRY_FILES_ENABLED": "false", "ANSIBLE_HOST_KEY_CHECKING": "true",
                "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local")})
    return subprocess.run([binary] + argv, capture_output=True, text=True, env=env, check=False, timeout=900)


@pytest.mark.parametrize("release", RELEASES)
def test_module_smoke(release, lab, lab_cleanup, tmp_path):
    vm_name = PREFIX + release.replace(".", "-")
    lab_cleanup(domains=[vm_name], volumes=[vm_name + ".qcow2", vm_name + "-seed.iso"])
    image = lab.images[config.TINY_QCOW2]
    extra_vars = {"vm_name": vm_name, "pool": lab.pool, "bridge": lab.bridge, "virt_type": config.VIRT_TYPE,
                  "cpu_mode": config.CPU_MODE, "image_url": image["url"], "image_sha256": image["sha256"]}
    completed = _ansible(release, "ansible-playbook", [
        "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=/usr/bin/python3",
        "-e", json.dumps(extra_vars), os.path.join(VERSIONS_DIR, "smoke.yml")], tmp_path)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]


# A key whose comment holds a character beyond U+FFFF: ansible-core 2.15 to 2.18 read a render that looks like data
# with literal_eval, and a JSON escape of it is two surrogates to a YAML reader.
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHq9 versions \U0001f600"


def _seed_keys(spec, name, tmp_path):
    """The SSH keys of the user-data in the seed of ``name`` on the hypervisor ``spec``, as cloud-init reads them."""
    path = tmp_path / "seed.iso"
    hypervisors.virsh(spec, "vol-download", "--pool", config.HV_POOL_NAME, name + "-seed.iso", str(path))
    # The role's cloud-config comes first, the policy's files after it.
    cloud_config = user_data_parts(read_iso(path.read_bytes())["user-data"])[0]
    return yaml.safe_load(cloud_config)["ssh_authorized_keys"]


def _domains(spec):
    return sorted(name for name in hypervisors.virsh(spec, "list", "--all", "--name").stdout.split() if name.startswith(PREFIX))


@pytest.mark.hypervisors
@pytest.mark.parametrize("release", RELEASES)
def test_role_deploy_and_destroy_on_one_hypervisor(release, lab, tmp_path):
    spec = [spec for spec in hypervisors.present_specs() if spec.name == "lab-hv1"][0]
    name = PREFIX + release.replace(".", "-")
    inventory = hypervisor_inventory()
    group = inventory["all"]["children"]["hypervisors"]
    group["hosts"] = {"lab-hv1": group["hosts"]["lab-hv1"]}
    group["vars"].update({"ansible_ssh_private_key_file": os.path.join(config.SSH_DIR, "id_ed25519"),
                          "egress_proxy_uid": name, "egress_proxy_memory_mib": 128,
                          "egress_proxy_instances": [{"name": name}], "egress_proxy_ssh_authorized_keys": [KEY]})
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    try:
        deployed = _ansible(release, "ansible-playbook", ["-i", str(path), "egress_proxies.kvm.deploy"], tmp_path)
        assert deployed.returncode == 0, deployed.stdout[-4000:] + deployed.stderr[-2000:]
        assert _domains(spec) == [name]
        assert _seed_keys(spec, name, tmp_path) == [KEY]
        destroyed = _ansible(release, "ansible-playbook", ["-i", str(path), "-e", "egress_proxy_remove_image=true", "egress_proxies.kvm.destroy"], tmp_path)
        assert destroyed.returncode == 0, destroyed.stdout[-4000:] + destroyed.stderr[-2000:]
        assert _domains(spec) == []
    finally:
        for leftover in _domains(spec):
            hypervisors.virsh(spec, "destroy", leftover, check=False)
            hypervisors.virsh(spec, "undefine", leftover, "--managed-save", "--snapshots-metadata", "--nvram")
