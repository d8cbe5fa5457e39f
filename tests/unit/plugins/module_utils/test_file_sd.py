# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The file_sd file's read, join and write under its lock (issue 40 item 14: runs at once each keep the other's)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import multiprocessing
import os
import time

import pytest

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import PermanentError, TransientError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._targets import file_sd as file_sd_module
from ansible_collections.egress_proxies.kvm.plugins.module_utils._targets.file_sd import (
    TargetsError,
    lock_path,
    locked,
    write_file_sd,
)


def group(proxy, hypervisor, port=9301):
    return {"targets": ["198.18.0.%d:%d" % (len(proxy), port)], "labels": {"hypervisor": hypervisor, "proxy": proxy, "owner": "o"}}


def test_a_run_replaces_its_hypervisors_groups_and_keeps_the_others():
    before = json.dumps([group("a", "hv1"), group("b", "hv2"), group("c", "hv-gone")])
    groups = file_sd_module.file_sd({"hv1": [group("aa", "hv1")]}, before, None)
    assert groups == [group("c", "hv-gone"), group("aa", "hv1"), group("b", "hv2")]
    assert file_sd_module.file_sd({"hv1": []}, before, ["hv1", "hv2"]) == [group("b", "hv2")]


def test_the_file_is_written_under_its_lock_then_left_alone(tmp_path):
    path = str(tmp_path / "targets.json")
    assert write_file_sd(path, {"hv1": [group("a", "hv1")]}, None, check_mode=True)[0]
    assert not os.path.exists(path)
    changed, before, after = write_file_sd(path, {"hv1": [group("a", "hv1")]}, None)
    assert changed and before is None and json.loads(after) == [group("a", "hv1")]
    assert os.stat(path).st_mode & 0o777 == 0o644 and os.path.exists(lock_path(path))
    assert write_file_sd(path, {"hv1": [group("a", "hv1")]}, None) == (False, after, after)
    assert sorted(os.listdir(str(tmp_path))) == [".targets.json.lock", "targets.json"]


def _write_one(path, hypervisor, start):
    """One run of a slice: waits for the others, then joins its hypervisor's groups."""
    start.wait()
    write_file_sd(path, {hypervisor: [group(hypervisor + "-p", hypervisor)]}, None)


def test_runs_at_once_each_keep_the_others_groups(tmp_path, monkeypatch):
    """Before the lock, every run read the file before any wrote it: the last writer's file had its own slice only."""
    path = str(tmp_path / "targets.json")
    hypervisors = ["hv%d" % number for number in range(8)]
    reads = []
    real_read = file_sd_module.read_text

    def slow_read(where):
        # Each run reads, then lets the others read too before it writes: the interleaving that lost targets.
        text = real_read(where)
        reads.append(where)
        time.sleep(0.05)
        return text

    monkeypatch.setattr(file_sd_module, "read_text", slow_read)
    context = multiprocessing.get_context("fork")
    start = context.Event()
    runs = [context.Process(target=_write_one, args=(path, hypervisor, start)) for hypervisor in hypervisors]
    for run in runs:
        run.start()
    start.set()
    for run in runs:
        run.join(30)
        assert run.exitcode == 0
    with open(path) as handle:
        assert sorted(entry["labels"]["hypervisor"] for entry in json.load(handle)) == hypervisors


def test_a_run_that_holds_the_lock_too_long_fails_the_other_naming_it(tmp_path):
    path = str(tmp_path / "targets.json")
    with locked(path, 1), pytest.raises(TransientError) as raised:
        write_file_sd(path, {"hv1": []}, None, timeout=0)
    assert raised.value.message == ("another run has held the lock file %s for more than 0 seconds (lock_timeout) while "
                                    "it writes the same file; nothing was written" % lock_path(path))


@pytest.mark.parametrize("content, why", [
    (b"{not json", "it is not JSON"),
    (b'[{"targets": ["x:1"]}]', "it is not a file_sd file of egress proxies"),
    (b"\xff\xfe", "it is not UTF-8 text"),
], ids=["not JSON", "another file_sd file", "not text"])
def test_a_file_that_is_not_ours_is_left_as_it_is(tmp_path, content, why):
    path = tmp_path / "targets.json"
    path.write_bytes(content)
    with pytest.raises(TargetsError) as raised:
        write_file_sd(str(path), {"hv1": []}, None)
    assert raised.value.message.startswith("%s cannot be joined with the scrape targets: %s" % (path, why))
    assert raised.value.message.endswith("; nothing was written")
    assert path.read_bytes() == content


def test_a_file_too_large_is_not_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(file_sd_module, "MAX_FILE_BYTES", 10)
    path = tmp_path / "targets.json"
    path.write_text("[" + " " * 20 + "]")
    with pytest.raises(TargetsError, match="larger than 10 bytes"):
        write_file_sd(str(path), {"hv1": []}, None)


def test_a_lock_file_planted_as_a_symlink_is_not_followed(tmp_path):
    path = tmp_path / "targets.json"
    victim = tmp_path / "victim"
    victim.write_text("kept")
    os.symlink(str(victim), lock_path(str(path)))
    with pytest.raises(PermanentError, match="cannot open the lock file %s" % lock_path(str(path))):
        write_file_sd(str(path), {"hv1": []}, None)
    assert victim.read_text() == "kept" and not path.exists()
