"""Security on the real lab: TLS checked by default, secrets kept out of every output, private volumes.

- An HTTPS image server with a self-signed certificate (made here with openssl) is refused with a
  message that names the URL and says what to set; it is accepted with validate_certs false, and
  with its certificate given as ca_path (kvm_base_image, and kvm_proxy_set's own download).
- A kvm_proxy_set run at -vvv, in diff mode, whose user-data holds a secret: the whole output
  (stdout and stderr) never shows it, on create, on a change of user-data, and in check mode.
- The VM's seed and overlay volumes are readable by their owner only (mode 0600).
"""

import http.server
import json
import os
import ssl
import stat
import subprocess
import threading

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import base_volume_name
from tests.lab import config

pytestmark = pytest.mark.integration

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = config.TEST_DOMAIN_PREFIX + "security-"
VM = PREFIX + "vm"
IMAGE = PREFIX + "tiny"
TLS_IMAGES = {"refused": PREFIX + "tls-refused", "off": PREFIX + "tls-off", "ca": PREFIX + "tls-ca",
              "set-ca": PREFIX + "tls-set-ca"}
TLS_VM = PREFIX + "tls-vm"
SECRET = "eptest-secret-7f3a9c1e"
OTHER_SECRET = "eptest-secret-b41d08e2"


def _write_playbook(tmp_path, name, tasks):
    """One play on localhost running the tasks, a failure of one not stopping the next."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump([{"name": name, "hosts": "localhost", "gather_facts": False, "tasks": [
        dict(task, ignore_errors=True) for task in tasks]}]))
    return str(path)


@pytest.fixture
def https_mirror(lab, tmp_path):
    """The lab's mirror directory over HTTPS on 127.0.0.1 with a self-signed certificate: (base URL, cert path)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    handler = type("Mirror", (http.server.SimpleHTTPRequestHandler,), {
        "log_message": lambda self, *args: None})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *args: handler(*args, directory=config.MIRROR_DIR))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "https://127.0.0.1:%d/" % server.server_port, str(cert)
    finally:
        server.shutdown()
        server.server_close()


def test_a_self_signed_server_is_refused_unless_its_ca_is_given_or_checks_are_off(
        lab, https_mirror, lab_cleanup, run_playbook, tmp_path):
    base_url, cert = https_mirror
    tiny = lab.images[config.TINY_QCOW2]
    image = {"url": base_url + config.TINY_QCOW2, "checksum": "sha256:" + tiny["sha256"]}
    bases = {case: base_volume_name(name, "qcow2", tiny["sha256"]) for case, name in TLS_IMAGES.items()}
    lab_cleanup(domains=[TLS_VM], volumes=[volume for base in bases.values() for volume in (base, base + ".sha256")]
                + [TLS_VM + ".qcow2", TLS_VM + "-seed.iso"])
    cached = {case: {"name": "Cache over HTTPS (%s)" % case, "egress_proxies.kvm.kvm_base_image": dict(
        uri=lab.uri, pool=lab.pool, name=TLS_IMAGES[case], url=image["url"], checksum=image["checksum"], retries=0,
        **extra)} for case, extra in (("refused", {}), ("off", {"validate_certs": False}), ("ca", {"ca_path": cert}))}
    # kvm_proxy_set hands ca_path to its own download of the image it boots from.
    proxy_set = {"name": "Converge over HTTPS (ca)", "egress_proxies.kvm.kvm_proxy_set": {
        "uri": lab.uri, "pool": lab.pool, "bridge": lab.bridge, "uid": PREFIX + "owner", "retries": 0,
        "image": dict(image, name=TLS_IMAGES["set-ca"]), "ca_path": cert, "virt_type": lab.virt_type,
        "cpu_mode": lab.cpu_mode, "memory_mib": 128, "disk_size_gb": 1, "wait_for_ip": False, "gc": False,
        "vendor_data": "", "proxies": [{"name": TLS_VM, "state": "stopped"}]}}
    run = run_playbook(_write_playbook(tmp_path, "tls.yml", list(cached.values()) + [proxy_set]))
    outcomes = {case: run.task_results(task["name"])[0] for case, task in dict(cached, **{"set-ca": proxy_set}).items()}
    refused = outcomes.pop("refused")
    assert refused.get("failed"), refused
    assert base_url + config.TINY_QCOW2 in refused["msg"]
    assert "TLS verification" in refused["msg"] and "ca_path" in refused["msg"] and "validate_certs" in refused["msg"]
    for case, outcome in outcomes.items():
        assert not outcome.get("failed") and outcome.get("changed"), (case, outcome)
    volumes = set(os.listdir(lab.pool_dir))
    assert bases["refused"] not in volumes
    assert {bases[case] for case in outcomes} <= volumes and TLS_VM + ".qcow2" in volumes


def _verbose_playbook(tmp_path, playbook, extra_vars, check=False):
    """ansible-playbook -vvv with the default callback on localhost: its whole output (stdout + stderr)."""
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("localhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n")
    argv = [os.path.join(REPO_ROOT, ".venv", "bin", "ansible-playbook"), "-vvv", "-i", str(inventory),
            "-e", json.dumps(extra_vars), playbook] + (["--check", "--diff"] if check else ["--diff"])
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO_ROOT, "build", "collections"),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false", ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"),
               ANSIBLE_NOCOLOR="true", ANSIBLE_STDOUT_CALLBACK="default")
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False, env=env, cwd=REPO_ROOT)
    return completed.returncode, completed.stdout + completed.stderr


def test_user_data_never_appears_at_vvv_and_the_vm_volumes_are_private(lab, lab_cleanup, tmp_path):
    tiny = lab.images[config.TINY_QCOW2]
    base = base_volume_name(IMAGE, "qcow2", tiny["sha256"])
    lab_cleanup(domains=[VM], volumes=[VM + ".qcow2", VM + "-seed.iso", base, base + ".sha256"])
    playbook = str(tmp_path / "secret.yml")
    with open(playbook, "w") as handle:
        yaml.safe_dump([{"name": "A set whose user-data holds a secret", "hosts": "localhost", "gather_facts": False,
                         "tasks": [{"name": "Converge", "egress_proxies.kvm.kvm_proxy_set": {
                             "uri": lab.uri, "pool": lab.pool, "bridge": lab.bridge, "uid": PREFIX + "owner",
                             "image": {"name": IMAGE, "url": tiny["url"], "checksum": "sha256:" + tiny["sha256"]},
                             "virt_type": lab.virt_type, "cpu_mode": lab.cpu_mode, "memory_mib": 128,
                             "disk_size_gb": 1, "wait_for_ip": False, "gc": False, "vendor_data": "",
                             "user_data": "{{ user_data }}",
                             "proxies": [{"name": VM, "state": "{{ vm_state }}"}]}}]}], handle)

    def user_data(secret):
        return "#cloud-config\nchpasswd:\n  users:\n    - {name: root, password: %s, type: text}\n" % secret

    runs = [
        _verbose_playbook(tmp_path, playbook, {"user_data": user_data(SECRET), "vm_state": "stopped"}),
        _verbose_playbook(tmp_path, playbook, {"user_data": user_data(OTHER_SECRET), "vm_state": "stopped"}, check=True),
        _verbose_playbook(tmp_path, playbook, {"user_data": user_data(OTHER_SECRET), "vm_state": "stopped"}),
    ]
    for rc, output in runs:
        assert rc == 0, output[-4000:]
        assert "<localhost> EXEC" in output  # really -vvv
        assert SECRET not in output and OTHER_SECRET not in output
    for volume in (VM + ".qcow2", VM + "-seed.iso"):
        mode = stat.S_IMODE(os.stat(os.path.join(lab.pool_dir, volume)).st_mode)
        assert mode == 0o600, "%s has mode %o" % (volume, mode)
    rc, output = _verbose_playbook(tmp_path, playbook, {"user_data": user_data(OTHER_SECRET), "vm_state": "absent"})
    assert rc == 0 and OTHER_SECRET not in output, output[-4000:]
