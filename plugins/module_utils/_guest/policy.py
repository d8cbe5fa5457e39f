# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A proxy's policy: the files its service enforces, kept in the running guest apart from the machine.

A machine (image, CPUs, memory, NICs, cloud-init data) is replaced when it
changes; the policy is not. A new VM gets it in its seed (``cloud_config``,
which _seed.nocloud adds to the user-data), and a running one gets a change
in place through the guest agent (``apply_policy``): the changed files are
written beside the old ones, moved into place (the old kept), ``validate``
runs with the new ones in place, the old ones come back when it did not pass
(refused, or not known to have passed: the agent gone, too slow or breaking
the protocol), and ``reload`` makes the service read them (for squid a
reconfigure: the connections it holds go on). The files are read back
(``read_policy``) on every run, so one edited by hand in the guest is drift,
restored by the next run.

The policy's digest (``Policy.digest``) is recorded in the domain's metadata
when the VM is defined and after each apply: what a proxy enforces is known
without asking the guest. So are the HA group it names (``group``, a
_common.ha_group.HaGroup) and the egress addresses a pool gave its profiles
(``pooled_addresses``, a _common.pooled_addresses.PooledAddresses), which the
digest covers: they change in place, with its files.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Optional

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import (
    KvmError,
    PermanentError,
    TransientError,
    ValidationError,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.ha_group import HaGroup
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.pooled_addresses import PooledAddresses
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import MAX_FILE_BYTES, control_character, quoted, text_bytes
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.timing import polls
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.agent import (
    ANSWER_POLL,
    EXEC_TIMEOUT,
    ROLLBACK_SECONDS,
    UNUSABLE_AGENT,
    AgentUnavailableError,
    GuestFileError,
)

# An absolute path of plain components: no "." or "..", no white space, quotes or shell characters.
_PATH = re.compile(r"(/[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*)+")
_MAX_PATH = 1024
# POSIX portable user and group names, as useradd takes them.
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_MODE = re.compile(r"0?[0-7]{3}")
# Beside each changed file while it is applied: the new content before it moves into place, the old one until
# validate passed (then removed, or moved back when it failed).
STAGED_SUFFIX = ".kvm-new"
KEPT_SUFFIX = ".kvm-old"

# The fixed scripts an apply runs with /bin/sh; every value reaches them as an argument, never as script text.
# Per file (owner:group, mode, staged): an empty staged file with the file's owner and mode, for the content to be
# written into (a write keeps them). An owner or group the guest lacks fails here, before any file moved.
_STAGE = 'umask 077 && while [ $# -gt 0 ]; do : > "$3" && chown -- "$1" "$3" && chmod -- "$2" "$3" || exit 1; shift 3; done'
# Per file (staged, path): the old one kept, the new one moved over it (a rename: a reader sees the old file or
# the new one, never half of one).
_INSTALL = ('set -e; while [ $# -gt 0 ]; do if [ -e "$2" ]; then cp -p -- "$2" "$2%s"; else rm -f -- "$2%s"; fi; '
            'mv -f -- "$1" "$2"; shift 2; done' % (KEPT_SUFFIX, KEPT_SUFFIX))
# Per file: the old one back where the new one was not validated, from wherever the apply stopped. A file whose
# staged copy is still there was not moved (every staged file exists once the install starts): only the staged copy
# goes. One moved has its old copy kept, or had none (it is new: removed).
_ROLLBACK = ('for f; do if [ -e "$f%s" ]; then rm -f -- "$f%s" "$f%s"; elif [ -e "$f%s" ]; then mv -f -- "$f%s" "$f"; '
             'else rm -f -- "$f"; fi; done' % (STAGED_SUFFIX, STAGED_SUFFIX, KEPT_SUFFIX, KEPT_SUFFIX, KEPT_SUFFIX))
# Per staged file: removed, where the apply stopped before any file moved.
_DISCARD = 'for f; do rm -f -- "$f"; done'
# Per file: an old copy an earlier apply kept and never committed (its rollback could not run) put back, so what is
# kept now is what was enforced before that apply, never its unvalidated files. Exits RECOVERED when it put one back.
RECOVERED = 3
_RECOVER = ('r=0; for f; do rm -f -- "$f%s" || exit 1; if [ -e "$f%s" ]; then mv -f -- "$f%s" "$f" || exit 1; r=%d; fi; '
            'done; exit $r' % (STAGED_SUFFIX, KEPT_SUFFIX, KEPT_SUFFIX, RECOVERED))
_COMMIT = 'for f; do rm -f -- "$f%s"; done' % KEPT_SUFFIX
SHELL = "/bin/sh"
# cloud-init writes it when a VM's first boot is over: the seed's files written (the policy's too, deferred after
# the packages) and its runcmd done (the role's restarts the guest agent). Until then the policy's files are not
# the guest's to read back, and one written in place would race with both.
BOOT_FINISHED = "/var/lib/cloud/instance/boot-finished"
# The longest policy.reload may run: an HA group's member hands its address over first, and squid reconfigures in
# seconds on a slow guest.
RELOAD_SECONDS = 180
# The longest policy.release may run: an HA group's hand-over waits for another member to serve, one replaced just
# before possibly still in its first boot.
RELEASE_SECONDS = 600


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class PolicyFile:
    """One file of the policy: where it goes, its content (bytes), owner, group and mode.

    A ``secret`` file's content (given as secret_content) never appears in a diff or a message: only its digest does.
    """

    path: str
    content: bytes
    owner: str = "root"
    group: str = "root"
    mode: str = "0644"
    secret: bool = False

    @property
    def sha256(self):
        return _sha256(self.content)

    def shown(self, content):
        """``content`` (bytes of this file, or None when absent) as a diff shows it: text, or a secret's digest."""
        if content is None:
            return None
        if self.secret:
            return "(secret, sha256 %s)" % _sha256(content)
        return content.decode("utf-8", "replace")


@dataclass(frozen=True)
class Policy:
    """The files of a proxy's policy, and the programs (argument lists) that check and load them in the guest, and
    the one that releases its service before the VM is shut down (``release``); the HA group it is a member of
    (``group``, a HaGroup, or None) and the egress addresses a pool gave its profiles (``pooled_addresses``, a
    PooledAddresses, or None)."""

    files: tuple
    validate: tuple = ()
    reload: tuple = ()
    release: tuple = ()
    group: Optional[HaGroup] = None
    pooled_addresses: Optional[PooledAddresses] = None

    @classmethod
    def from_params(cls, params):
        """The policy option (a dict, or None: no policy) validated; ValidationError names the entry."""
        if params is None:
            return None
        files, paths = [], set()
        for index, entry in enumerate(params.get("files") or []):
            label = "policy.files[%d]" % index
            policy_file = _policy_file(label, entry)
            if policy_file.path in paths:
                raise ValidationError("%s: path %s appears more than once" % (label, policy_file.path))
            paths.add(policy_file.path)
            files.append(policy_file)
        if not files:
            raise ValidationError("policy.files must list at least one file")
        return cls(tuple(files), _argv("policy.validate", params.get("validate")),
                   _argv("policy.reload", params.get("reload")), _argv("policy.release", params.get("release")),
                   HaGroup.from_params(params.get("group")), PooledAddresses.from_params(params.get("pooled_addresses")))

    def digest(self):
        """sha256 over what the guest holds: each file's path, owner, group, mode and content digest; and the HA group
        the proxy is a member of and its profiles' pooled addresses, when it has them (a policy without either keeps
        the digest it had before they were)."""
        files = [{"path": f.path, "owner": f.owner, "group": f.group, "mode": f.mode, "sha256": f.sha256}
                 for f in sorted(self.files, key=lambda f: f.path)]
        described = {"files": files}
        if self.group is not None:
            described["ha_group"] = self.group.as_dict()
        if self.pooled_addresses is not None:
            described["pooled_addresses"] = self.pooled_addresses.as_dict()
        if len(described) == 1:
            described = files
        return _sha256(json.dumps(described, sort_keys=True, separators=(",", ":")).encode("ascii"))

    def cloud_config(self):
        """The cloud-config that writes the files at a VM's first boot, after its packages are installed.

        Deferred, as a package's own configuration file written before the package would be taken for one the
        user changed.
        """
        return {"write_files": [{"path": f.path, "content": f.content.decode("utf-8"), "owner": "%s:%s" % (
            f.owner, f.group), "permissions": f.mode, "defer": True} for f in self.files]}

    def shown(self, contents):
        """{path: what the diff shows} of ``contents`` ({path: bytes or None})."""
        return {f.path: f.shown(contents.get(f.path)) for f in self.files}

    def contents(self):
        return {f.path: f.content for f in self.files}


def _policy_file(label, entry):
    if not isinstance(entry, dict):
        raise ValidationError("%s must be a dictionary with path and content" % label)
    path = entry.get("path")
    if not isinstance(path, str) or not _PATH.fullmatch(path) or len(path) > _MAX_PATH or "/../" in path + "/" \
            or "/./" in path + "/":
        raise ValidationError("%s.path %s is not an absolute path of plain names (letters, digits and . _ @ + -, "
                              "no . or .. component)" % (label, quoted(path)))
    given_content = [option for option in ("content", "secret_content") if entry.get(option) is not None]
    if len(given_content) != 1:
        raise ValidationError("%s needs one of content and secret_content (a secret's content is masked in the "
                              "task's output and shown in a diff by its digest only)" % label)
    content = text_bytes(entry[given_content[0]], "%s.%s" % (label, given_content[0]))
    given = {}
    for option in ("owner", "group"):
        value = entry.get(option)
        if value is not None and (not isinstance(value, str) or not _ACCOUNT.fullmatch(value)):
            raise ValidationError("%s.%s %s is not a user or group name (lower-case letters, digits, _ and -, "
                                  "starting with a letter or _, at most 32)" % (label, option, quoted(value)))
        if value is not None:
            given[option] = value
    mode = entry.get("mode")
    if mode is not None:
        if not isinstance(mode, str) or not _MODE.fullmatch(mode):
            raise ValidationError("%s.mode %s is not an octal mode such as '0644' (give it quoted, as a string)"
                                  % (label, quoted(mode)))
        given["mode"] = mode.zfill(4)
    return PolicyFile(path=path, content=content, secret=given_content[0] == "secret_content", **given)


def _argv(option, value):
    """A program and its arguments (a list of strings, none with a control character); () when not given."""
    if not value:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value) or not value[0]:
        raise ValidationError("%s must be a list of strings: a program and its arguments" % option)
    for index, item in enumerate(value):
        problem = control_character(item)
        if problem is not None:
            raise ValidationError("%s[%d] holds a control character (%s): each item is one argument, run without a "
                                  "shell" % (option, index, problem))
    return tuple(value)


@dataclass(frozen=True)
class GuestPolicy:
    """The policy files as the guest holds them: {path: bytes, or None when missing or unreadable}.

    ``unavailable`` is the message when the guest agent did not answer, ``booting`` whether the guest's first
    boot is still going on: nothing is known of the files then.
    """

    contents: dict
    unavailable: Optional[str] = None
    booting: bool = False

    def drifted(self, policy):
        """The paths whose content in the guest differs from ``policy``'s, in its order."""
        if self.unavailable is not None or self.booting:
            return ()
        return tuple(f.path for f in policy.files if self.contents.get(f.path) != f.content)


def _first_boot_over(agent):
    try:
        agent.read_file(BOOT_FINISHED, 4096)
    except GuestFileError:
        return False
    return True


def await_first_boot(agent, deadline):
    """Wait until the guest's first boot is over, until ``deadline`` (a _common.timing.Deadline) passes; its agent may
    restart meanwhile."""
    for _attempt in polls(deadline, agent.sleep, ANSWER_POLL):
        try:
            if _first_boot_over(agent):
                return
        except AgentUnavailableError:
            pass  # restarted by the first boot's runcmd
    raise TransientError("the first boot of domain '%s' (cloud-init) did not finish within %d s, so its policy was not "
                         "applied; run the task again once it has" % (agent.name, deadline.seconds))


def await_booted(agent, deadline, booting):
    """Wait until the guest of ``agent`` answers and its first boot is over, until ``deadline`` passes: a guest that may
    be ``booting`` (the run started it, or it is that new) may take that long for its agent to come up; another one's
    agent that is not there fails at once."""
    if booting:
        agent.await_answer(deadline)
    else:
        agent.ping()
    await_first_boot(agent, deadline)


def read_policy(agent, policy, booting=False):
    """The GuestPolicy of ``policy``'s files in the guest of ``agent`` (a _guest.agent.GuestAgent); reads only.

    A guest that may be ``booting`` (see await_booted) whose agent is silent reads as one in its first boot: many
    images start their agent at its end.
    """
    try:
        try:
            agent.ping()
        except AgentUnavailableError:
            if booting:
                return GuestPolicy({}, booting=True)
            raise
        if not _first_boot_over(agent):
            return GuestPolicy({}, booting=True)
        contents = {}
        for policy_file in policy.files:
            try:
                data = agent.read_file(policy_file.path, MAX_FILE_BYTES)
            except GuestFileError:
                data = None
            contents[policy_file.path] = data
    except UNUSABLE_AGENT as error:
        # A guest that breaks the protocol or is too slow counts as one whose agent does not answer: nothing it says
        # about its files is known, the plan warns (or applies, and that fails naming it) and the set goes on.
        return GuestPolicy({}, error.message)
    return GuestPolicy(contents)


def apply_policy(agent, policy, paths):
    """Write the files of ``policy`` at ``paths`` into the guest, validate, and reload; raises a KvmError.

    On every path that did not validate (validate refused them, or the agent
    failed, was too slow or broke the protocol anywhere before validate
    passed) the old files are put back, nothing reloaded, and the error says
    so. When even that cannot run (the agent gone), the new files stay in
    place unvalidated, not loaded until the service restarts, and the next
    run repairs it: the caller records the policy's digest only after this
    returns, so the domain still records the old one; observe then finds
    the policy not current (a new policy) or the files drifted (the old one),
    plans an apply again, and that apply first puts back the old files kept
    beside them (_RECOVER) before it stages the new ones, so what it keeps is
    never an unvalidated file. The files that need no change are not touched;
    ``reload`` runs whenever a file changed.
    """
    recovered = _run(agent, [SHELL, "-c", _RECOVER, "sh"] + [f.path for f in policy.files],
                     "putting back the old policy files an earlier apply left", allowed=(RECOVERED,))
    # A file put back may differ from the policy where observe found it equal: every file is written then.
    changing = [f for f in policy.files if f.path in paths or recovered.exitcode == RECOVERED]
    moved = [f.path for f in changing]
    staged = [f.path + STAGED_SUFFIX for f in changing]
    stage = []
    for policy_file, staged_path in zip(changing, staged):
        stage += ["%s:%s" % (policy_file.owner, policy_file.group), policy_file.mode, staged_path]
    try:
        _run(agent, [SHELL, "-c", _STAGE, "sh"] + stage, "preparing the policy files")
        for policy_file, staged_path in zip(changing, staged):
            agent.write_file(staged_path, policy_file.content)
    except KvmError as error:
        raise _undone(agent, error, [SHELL, "-c", _DISCARD, "sh"] + staged, "no policy file was moved",
                      "the staged files (%s) stay beside them, unused" % STAGED_SUFFIX) from error
    install = []
    for policy_file, staged_path in zip(changing, staged):
        install += [staged_path, policy_file.path]
    try:
        _run(agent, [SHELL, "-c", _INSTALL, "sh"] + install, "putting the policy files in place")
        if policy.validate:
            checked = agent.run(policy.validate)
            if checked.exitcode != 0:
                raise PermanentError("%s refused the new policy (exit %d): %s" % (
                    " ".join(policy.validate), checked.exitcode, checked.last_lines()))
    except KvmError as error:
        raise _undone(agent, error, [SHELL, "-c", _ROLLBACK, "sh"] + moved,
                      "the old files are back in place and still enforced",
                      "the new files, not validated, stay in place but the service was not reloaded with them (a "
                      "restart would load them); the next run puts the old ones back before it applies again") from error
    # Validated: from here on a failure leaves the new files in place, not reloaded and not recorded, so the next
    # run applies them again.
    _run(agent, [SHELL, "-c", _COMMIT, "sh"] + moved, "removing the old policy files")
    if policy.reload:
        agent.budget.grant(RELOAD_SECONDS)
        _run(agent, list(policy.reload), "reloading the service", timeout=RELOAD_SECONDS)


def _undone(agent, error, argv, undone, left):
    """``error`` of an apply that stopped before its files were validated, once ``argv`` put the old state back:
    saying ``undone``, or, when that failed too (the same agent failing again), what is ``left``."""
    agent.budget.grant(ROLLBACK_SECONDS)
    try:
        _run(agent, argv, "undoing the apply")
    except KvmError as failed:
        return error.after("%s; putting the old policy files back failed too (%s): %s" % (
            error.message, failed.message, left), error.completed_actions or [])
    return error.after("%s; %s" % (error.message, undone), error.completed_actions or [])


def _run(agent, argv, doing, allowed=(), timeout=EXEC_TIMEOUT):
    completed = agent.run(argv, timeout=timeout)
    if completed.exitcode != 0 and completed.exitcode not in allowed:
        raise PermanentError("%s in domain '%s' failed (%s exited %d): %s" % (
            doing, agent.name, argv[0] if argv[0] != SHELL else "sh", completed.exitcode, completed.last_lines()))
    return completed


def release_service(agent, policy):
    """Run ``policy.release`` in the guest of ``agent`` before its VM is shut down; raises a KvmError.

    A refusal (non-zero exit) is a PermanentError quoting its output: the caller leaves the VM as it was. An agent
    that does not answer raises one of UNUSABLE_AGENT, for the caller to shut the VM down without it.
    """
    agent.ping()
    # Granted beyond the proxy's budget, as a release may wait minutes for another VM to serve.
    agent.budget.grant(RELEASE_SECONDS)
    completed = agent.run(policy.release, timeout=RELEASE_SECONDS)
    if completed.exitcode != 0:
        raise PermanentError("%s refused to release the service of domain '%s' (exit %d), so it was not shut down: %s"
                             % (" ".join(policy.release), agent.name, completed.exitcode, completed.last_lines()))
