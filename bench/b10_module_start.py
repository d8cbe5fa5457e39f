"""B10: the module's start (issue 28), each module of the collection apart, beside the same of a baseline commit.

For each module, a no-op task on libvirt's test driver (test:///default, in the
module's own process: the start is measured without the lab's libvirtd, and no lock
is needed; a listing of a uid no domain carries, the absent state of names that do
not exist) through `ansible localhost -m <module>` with the hypervisor's
/usr/bin/python3, kept with ANSIBLE_KEEP_REMOTE_FILES=1 so the AnsiballZ payload
Ansible built is measured as it was sent: its size, the collection's files in its
zip, and the time /usr/bin/python3 takes to import the module from that zip (a fresh
interpreter each run, as AnsiballZ runs it), with the heavy libraries the import
ran (in sys.modules after it). Beside every figure: ansible.builtin.ping's task, the
fixed cost of Ansible itself. The baseline (`bench/run --only B10 --baseline COMMIT`) is
the same commit's collection unpacked with `git archive`, measured in the same run.
"""

import base64
import glob
import io
import json
import os
import re
import shutil
import tempfile
import zipfile

from bench._common import HYPERVISOR_PYTHON, adhoc, ansible_env, figure, repeat, timed

HEAVY = ("libvirt", "libvirt_qemu", "lxml.etree", "pycdlib", "requests")
NAME = "eptest-bench-b10"
# module: its no-op arguments (JSON, as -a takes them).
URI = "test:///default"
POOL = "default-pool"  # the test driver's own pool
NO_OP = {
    "kvm_proxy_info": '{"uid": "%s", "uri": "%s"}' % (NAME, URI),
    "kvm_proxy": '{"name": "%s", "state": "absent", "uri": "%s"}' % (NAME, URI),
    "kvm_proxy_set": '{"proxies": [], "uid": "%s", "uri": "%s"}' % (NAME, URI),
    "kvm_seed": '{"name": "%s", "state": "absent", "pool": "%s", "uri": "%s"}' % (NAME, POOL, URI),
    "kvm_base_image": '{"name": "%s.qcow2", "url": "http://127.0.0.1:9/%s.qcow2", "state": "absent", "pool": "%s", '
                      '"uri": "%s"}' % (NAME, NAME, POOL, URI),
}
IMPORT_TIMER = ("import sys, time; started = time.perf_counter(); import %s; "
                "print(time.perf_counter() - started)")


def payload_zip(ansiballz):
    """The zip of an AnsiballZ wrapper, as bytes."""
    with open(ansiballz) as handle:
        text = handle.read()
    return base64.b64decode(re.search(r"zip_data='([A-Za-z0-9+/=]+)'", text).group(1))


def import_figures(zip_path, module_fqn, runs):
    """figure() of importing ``module_fqn`` from the payload on the hypervisor's Python, and the heavy libraries it imported (sys.modules)."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": zip_path}
    seconds = [float(timed([HYPERVISOR_PYTHON, "-c", IMPORT_TIMER % module_fqn], env=env)[1].stdout) for _run in range(runs)]
    listed = "import sys; import %s; print(' '.join(name for name in %r if name in sys.modules))" % (module_fqn, HEAVY)
    imported = timed([HYPERVISOR_PYTHON, "-c", listed], env=env)[1].stdout.split()
    return figure(seconds), [library for library in HEAVY if library in imported]


def measure(label, collections, module, workdir, runs):
    """The figures of ``module`` from the collections at ``collections``."""
    args = NO_OP[module]
    remote_tmp = os.path.join(workdir, "%s-%s" % (label, module))
    env = ansible_env(collections, ANSIBLE_KEEP_REMOTE_FILES="1", ANSIBLE_REMOTE_TMP=remote_tmp)
    argv = adhoc("egress_proxies.kvm." + module, args)
    timed(argv, env=env)
    ansiballz = glob.glob(os.path.join(remote_tmp, "ansible-tmp-*", "AnsiballZ_%s.py" % module))[0]
    data = payload_zip(ansiballz)
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    zip_path = os.path.join(workdir, "%s-%s.zip" % (label, module))
    with open(zip_path, "wb") as handle:
        handle.write(data)
    payload_kib = round(os.path.getsize(ansiballz) / 1024, 1)
    shutil.rmtree(remote_tmp)
    module_utils = sorted(name.split("/module_utils/", 1)[1] for name in names
                          if name.startswith("ansible_collections/") and "/module_utils/" in name
                          and not name.endswith("__init__.py"))
    imported, heavy = import_figures(zip_path, "ansible_collections.egress_proxies.kvm.plugins.modules." + module, runs)
    return {
        "payload_kib": payload_kib,
        "zip_kib": round(len(data) / 1024, 1),
        "module_utils": module_utils,
        "import": imported,
        "imported_libraries": heavy,
        "task": repeat(runs, argv, env=ansible_env(collections)),
    }


def run(collections_by_label, runs, baseline=None):
    """{label: {module: figures}} for the checkout and the baseline (commit ``baseline``), and ping's task beside them."""
    with tempfile.TemporaryDirectory(prefix="bench-b10-") as workdir:
        results = {"by": {label: {} for label in collections_by_label}, "baseline": baseline}
        # Module by module, the baseline's beside the checkout's: a load that changes during the run hits both.
        for module in NO_OP:
            for label, collections in collections_by_label.items():
                results["by"][label][module] = measure(label, collections, module, workdir, runs)
        results["ping"] = repeat(runs, adhoc("ansible.builtin.ping", ""), env=ansible_env(collections_by_label["now"]))
    return results


if __name__ == "__main__":
    from bench._common import BUILD_COLLECTIONS
    print(json.dumps(run({"now": BUILD_COLLECTIONS}, 3), indent=1))
