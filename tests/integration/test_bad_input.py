"""Bad input through ansible-playbook: each value fails naming its option, and nothing on the lab changes.

One playbook per module runs every case of its table (a loop with ignore_errors, registered), so the
suite costs one ansible-playbook run per module. Before and after, the domains and every volume of
every pool are listed through the seam; the two listings must be equal (the image cache included):
a bad value is stopped before anything on the hypervisor is touched.
"""

import gzip
import subprocess

import pytest
import yaml

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import base_volume_name
from tests.lab import config, hypervisors

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.integration.fleet_fixtures"]

PREFIX = config.TEST_DOMAIN_PREFIX + "badinput-"
VM = PREFIX + "vm"
IMAGE = PREFIX + "tiny"

# (case id, options merged over the valid ones, text the failure must contain: the option's name)
PROXY_SET_CASES = [
    ("name with upper case", {"proxies": [{"name": "Bad_Name"}]}, "Bad_Name"),
    ("name too long", {"proxies": [{"name": "a" * 70}]}, "a" * 70),
    ("name with a shell command", {"proxies": [{"name": "x;rm -rf /"}]}, "x;rm -rf /"),
    ("name with markup", {"proxies": [{"name": "<name>x</name>"}]}, "<name>x</name>"),
    ("empty name", {"proxies": [{"name": ""}]}, "name"),
    ("same name twice", {"proxies": [{"name": VM}, {"name": VM}]}, VM),
    ("pool with a slash", {"pool": "bad/pool"}, "bad/pool"),
    ("bridge with a space", {"bridge": "br 0"}, "br 0"),
    ("bridge too long", {"bridge": "b" * 16}, "b" * 16),
    ("network with markup", {"bridge": None, "network": "net<x>"}, "net<x>"),
    ("image name with a space", {"image": {"name": "Bad Name", "url": "http://127.0.0.1:8642/tiny.qcow2"}}, "Bad Name"),
    ("image url not http", {"image": {"name": IMAGE, "url": "ftp://127.0.0.1/tiny.qcow2"}}, "url"),
    ("image url not a url", {"image": {"name": IMAGE, "url": "not a url"}}, "url"),
    ("checksum not hex", {"image": {"name": IMAGE, "url": "http://127.0.0.1:8642/tiny.qcow2",
                                    "checksum": "sha256:xyz"}}, "checksum"),
    ("checksum of another algorithm", {"image": {"name": IMAGE, "url": "http://127.0.0.1:8642/tiny.qcow2",
                                                 "checksum": "md5:" + "0" * 32}}, "checksum"),
    ("memory too small", {"memory_mib": 64}, "memory_mib"),
    ("memory negative", {"memory_mib": -1}, "memory_mib"),
    ("no vcpus", {"vcpus": 0}, "vcpus"),
    ("too many vcpus", {"vcpus": 100000}, "vcpus"),
    ("disk of 0 GB", {"disk_size_gb": 0}, "disk_size_gb"),
    ("disk too large", {"disk_size_gb": 10 ** 9}, "disk_size_gb"),
    ("disk size not a number", {"disk_size_gb": "ten"}, "disk_size_gb"),
    ("MAC not hex", {"proxies": [{"name": VM, "mac": "zz:zz:zz:zz:zz:zz"}]}, "zz:zz:zz:zz:zz:zz"),
    ("MAC multicast", {"proxies": [{"name": VM, "mac": "01:00:5e:00:00:01"}]}, "01:00:5e:00:00:01"),
    ("MAC all zeros", {"proxies": [{"name": VM, "mac": "00:00:00:00:00:00"}]}, "00:00:00:00:00:00"),
    ("uid empty", {"uid": ""}, "uid"),
    ("uid with a line break", {"uid": "a\nb"}, "uid"),
    ("uid with surrounding space", {"uid": " owner "}, "uid"),
    ("machine with a shell command", {"machine": "q35; reboot"}, "machine"),
    ("base volume with a path", {"image": None, "base_volume": "../../etc/passwd"}, "../../etc/passwd"),
    ("shutdown timeout negative", {"shutdown_timeout": -5}, "shutdown_timeout"),
    ("wait timeout negative", {"wait_timeout": -1}, "wait_timeout"),
    ("gc grace period negative", {"gc_grace_period": -1}, "gc_grace_period"),
    ("max_unavailable 0", {"max_unavailable": 0}, "max_unavailable"),
    ("meta_data not a dictionary", {"meta_data": "instance-id: x"}, "meta_data"),
    ("user_data neither text nor a dictionary", {"user_data": [1, 2]}, "user_data"),
    ("vendor_data neither text nor a dictionary", {"vendor_data": 5}, "vendor_data"),
    ("virt_type unknown", {"virt_type": "xen"}, "virt_type"),
    ("timeout not a number", {"timeout": "soon"}, "timeout"),
    ("retries negative", {"retries": -1}, "retries"),
    ("ca_path that does not exist", {"ca_path": "/nonexistent/eptest-ca.pem"}, "ca_path /nonexistent/eptest-ca.pem"),
]

# user-data cloud-init could not use, as files a playbook reads with the file lookup (Ansible reads bytes that are
# not UTF-8 into text as lone surrogates): (class, the file's bytes, what the failure says after "user_data ").
USER_DATA_CASES = [
    ("binary (gzip)", gzip.compress(b"#cloud-config\npackages: [squid]\n", mtime=0), "is not UTF-8 text"),
    ("binary (control characters)", b"#cloud-config\nhostname: a\x00b\n", "holds binary data"),
    ("not UTF-8 (Latin-1)", b"#cloud-config\nhostname: caf\xe9\n", "is not UTF-8 text"),
    ("10 MiB", b"#cloud-config\n" + b"#" * (10 * 1024 * 1024) + b"\n", "is 10485774 bytes, more than the 1048576"),
    ("YAML that is not cloud-config", b"packages: [squid]\n", "does not start with a line cloud-init acts on"),
]


def _user_data_files(tmp_path):
    """{class: path} of USER_DATA_CASES' files."""
    paths = {}
    for index, (case_id, content, _expected) in enumerate(USER_DATA_CASES):
        path = tmp_path / ("user-data-%d" % index)
        path.write_bytes(content)
        paths[case_id] = str(path)
    return paths


def _virsh(uri, *args):
    return subprocess.run(["virsh", "-q", "-c", uri] + list(args), capture_output=True, text=True, check=True).stdout


def _listing(uri):
    """Every domain (with its definition) and every volume of every pool (with its size), from virsh."""
    domains = {name: _virsh(uri, "dumpxml", "--inactive", name) for name in _virsh(uri, "list", "--all", "--name").split()}
    volumes = {}
    for pool in _virsh(uri, "pool-list", "--all", "--name").split():
        _virsh(uri, "pool-refresh", pool)
        volumes[pool] = _virsh(uri, "vol-list", pool, "--details")
    return domains, volumes


def _valid(lab):
    tiny = lab.images[config.TINY_QCOW2]
    return {
        "uri": lab.uri, "pool": lab.pool, "bridge": lab.bridge, "uid": PREFIX + "owner",
        "image": {"name": IMAGE, "url": tiny["url"], "checksum": "sha256:" + tiny["sha256"]},
        "virt_type": lab.virt_type, "cpu_mode": lab.cpu_mode, "memory_mib": 128, "disk_size_gb": 1,
        "wait_for_ip": False, "gc": True, "vendor_data": "", "proxies": [{"name": VM}],
    }


def test_every_bad_kvm_proxy_set_value_fails_naming_it_and_changes_nothing(lab, lab_cleanup, run_playbook, tmp_path):
    valid = _valid(lab)
    # Only a value wrongly accepted would make these; then they are removed, after the listing compared.
    base = base_volume_name(IMAGE, "qcow2", lab.images[config.TINY_QCOW2]["sha256"])
    lab_cleanup(domains=[VM], volumes=[VM + ".qcow2", VM + "-seed.iso", base, base + ".sha256"])
    cases = []
    for case_id, changes, _expected in PROXY_SET_CASES:
        options = dict(valid, **changes)
        cases.append({"id": case_id, "options": {key: value for key, value in options.items() if value is not None}})
    playbook = tmp_path / "bad_input.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Every bad value of kvm_proxy_set", "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "Try one bad value", "egress_proxies.kvm.kvm_proxy_set": "{{ item.options }}",
                   "loop": "{{ cases }}", "loop_control": {"label": "{{ item.id }}"},
                   "ignore_errors": True, "register": "tried"}]}]))
    before = _listing(lab.uri)
    run = run_playbook(str(playbook), {"cases": cases})
    after = _listing(lab.uri)
    (task,) = run.task_results("Try one bad value")
    outcomes = {result["item"]["id"]: result for result in task["results"]}
    wrong = []
    for case_id, _changes, expected in PROXY_SET_CASES:
        result = outcomes[case_id]
        if not result.get("failed") or expected not in result.get("msg", ""):
            wrong.append("%s: failed=%s msg=%r" % (case_id, result.get("failed"), result.get("msg")))
    assert after == before, "\n".join(wrong)
    assert not wrong, "\n".join(wrong)


def test_user_data_cloud_init_could_not_use_fails_in_every_module_naming_it_and_changes_nothing(
        lab, lab_cleanup, run_playbook, tmp_path):
    valid = _valid(lab)
    base = base_volume_name(IMAGE, "qcow2", lab.images[config.TINY_QCOW2]["sha256"])
    lab_cleanup(domains=[VM], volumes=[VM + ".qcow2", VM + "-seed.iso", base, base + ".sha256"])
    files = _user_data_files(tmp_path)
    shared = ("uri", "pool", "bridge", "uid", "image", "virt_type", "cpu_mode", "memory_mib", "disk_size_gb",
              "wait_for_ip", "vendor_data")
    proxy = {key: valid[key] for key in shared}
    user_data = "{{ lookup('ansible.builtin.file', item.path) }}"
    modules = {
        "egress_proxies.kvm.kvm_seed": {"uri": lab.uri, "pool": lab.pool, "name": VM, "user_data": user_data},
        "egress_proxies.kvm.kvm_proxy": dict(proxy, name=VM, state="stopped", user_data=user_data),
        "egress_proxies.kvm.kvm_proxy_set": dict(valid, user_data=user_data),
    }
    playbook = tmp_path / "bad_user_data.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "user-data cloud-init could not use", "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "Try it with " + module, module: options,
                   "loop": [{"id": case_id, "path": path} for case_id, path in files.items()],
                   "loop_control": {"label": "{{ item.id }}"}, "ignore_errors": True, "register": "tried"}
                  for module, options in modules.items()]}]))
    before = _listing(lab.uri)
    run = run_playbook(str(playbook))
    after = _listing(lab.uri)
    wrong = []
    for module in modules:
        (task,) = run.task_results("Try it with " + module)
        outcomes = {result["item"]["id"]: result for result in task["results"]}
        for case_id, _content, expected in USER_DATA_CASES:
            result = outcomes[case_id]
            if not result.get("failed") or "user_data " + expected not in result.get("msg", ""):
                wrong.append("%s, %s: failed=%s msg=%r" % (module, case_id, result.get("failed"), result.get("msg")))
    assert after == before, "\n".join(wrong)
    assert not wrong, "\n".join(wrong)


# The role (playbooks/deploy.yml on lab-hv1 and lab-hv2): (case id, role variables, text the failure must name).
ROLE_CASES = [
    ("memory too small", {"egress_proxy_memory_mib": 64}, "memory_mib"),
    ("MAC multicast", {"egress_proxy_instances": [{"name": PREFIX + "role", "mac": "01:00:5e:00:00:01"}]},
     "01:00:5e:00:00:01"),
    ("uid with a line break", {"egress_proxy_uid": "a\nb"}, "uid"),
]


def _role_listing(spec):
    """Every domain (with its definition) and every volume of every pool on a lab hypervisor: name, path, type and
    capacity, not the allocation, which a running VM's disk (scripts/demo's, beside the tests) changes by itself."""
    domains = {name: hypervisors.virsh(spec, "dumpxml", "--inactive", name).stdout
               for name in hypervisors.virsh(spec, "list", "--all", "--name").stdout.split()}
    volumes = {}
    for pool in hypervisors.virsh(spec, "pool-list", "--all", "--name").stdout.split():
        hypervisors.virsh(spec, "pool-refresh", pool)
        volumes[pool] = [line.split()[:-2] for line in hypervisors.virsh(spec, "vol-list", pool, "--details").stdout.splitlines()]
    return domains, volumes


# Each deploy.yml run tries two cases at once, one on each hypervisor (in its host_vars): a case of ROLE_CASES, or a
# class of USER_DATA_CASES as egress_proxy_user_data. Each hypervisor must fail naming its own.
ROLE_RUNS = [("binary (gzip)", "memory too small"), ("not UTF-8 (Latin-1)", "MAC multicast"),
             ("10 MiB", "uid with a line break"), ("YAML that is not cloud-config", "binary (control characters)")]


def _role_case(case_id, files):
    """(host_vars, text the failure must hold) of a ROLE_CASES case or a USER_DATA_CASES class."""
    for role_case_id, variables, expected in ROLE_CASES:
        if role_case_id == case_id:
            return variables, expected
    (expected,) = [message for user_data_id, _content, message in USER_DATA_CASES if user_data_id == case_id]
    return ({"egress_proxy_user_data": "{{ lookup('ansible.builtin.file', '%s') }}" % files[case_id]},
            "egress_proxy_user_data " + expected)


@pytest.mark.parametrize("cases", ROLE_RUNS, ids=[" / ".join(run) for run in ROLE_RUNS])
def test_bad_role_variables_fail_on_each_hypervisor_before_it_is_touched(hv_fleet, tmp_path, cases):
    files = _user_data_files(tmp_path)
    specs = (hv_fleet.hv1, hv_fleet.hv2)
    tried = {spec.name: _role_case(case_id, files) for spec, case_id in zip(specs, cases)}
    role_vars = hv_fleet.role_vars(egress_proxy_instances=[{"name": PREFIX + "role"}])
    before = [_role_listing(spec) for spec in specs]
    run = hv_fleet.playbook("deploy.yml", hv_fleet.inventory(
        group_vars=role_vars, host_vars={host: variables for host, (variables, _expected) in tried.items()}))
    after = [_role_listing(spec) for spec in specs]
    assert run.rc != 0, run
    for host, (_variables, expected) in tried.items():
        messages = " ".join(str(message) for _host, _task, message in run.failures(host))
        assert expected in messages, (host, expected, messages)
    assert after == before
