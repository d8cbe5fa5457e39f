# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The proxy users' hashes and passwords in the role's output (issue 40, items 1 and 7).

The role's checks and the shaping of kvm_proxy_set's arguments (tasks/arguments.yml, which imports tasks/instances.yml)
run through ansible-playbook at -vvv: neither a user's password nor its hash is in the output, and a password the
proxy could never check (512 bytes or more) is refused in a message that names the user and still shows at -vvv.
The upgrade that changed every hash (the salt no longer derived from the password) is a policy change: applied in
place, no proxy replaced.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import hmac

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.argspec import common_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.argspec import kvm_proxy_set_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.request import SetRequest
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.guest_program import CHECK_EITHER_PASSWORD, program_text
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.password_hash import (
    CRYPT_ALPHABET,
    PASSWORD_MAX_BYTES,
    SQUID_ROUNDS,
    sha512_crypt,
    squid_user_hash,
)
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.squid_conf import SQUID_NCSA_AUTH
from ansible_collections.egress_proxies.kvm.tests.unit.role_playbook import run_role_tasks
from ansible_collections.egress_proxies.kvm.tests.unit.role_templates import (
    EITHER_PROGRAM,
    PREVIOUS_USERS,
    SQUID_CONF,
    SQUID_USERS,
    converge_options,
    policy_files,
    role_set_args,
    squid_parsed,
)

OWNER = "egress-hashes"
PASSWORD = "correct horse:battery staple"
PREVIOUS = "the horse before"
FLEET_PASSWORD = "fleet-entry-secret"
ENTRY = {"name": "egress-1", "address": "198.51.100.5/24"}
BASE = {"egress_proxy_bridge": "br0", "egress_proxy_allowed_clients": ["198.51.100.0/24"], "egress_proxy_uid": OWNER,
        "egress_proxy_image": {"name": "debian-12", "url": "https://images.example/debian-12.qcow2"}}
# The options tasks/main.yml gives tasks/arguments.yml, which these plays run alone.
PLAY_BASE = dict(BASE, egress_proxy__set_options=converge_options())


def hash_parts(user, password):
    """The hash line's parts an output must not hold: the whole hash, and the hash proper after its salt."""
    whole = squid_user_hash(OWNER, user, password)
    return [whole, whole.rsplit("$", 1)[1]]


def test_no_hash_and_no_password_reach_the_roles_output_at_vvv(tmp_path):
    # Role-wide users, and a fleet entry with its own.
    variables = dict(BASE, egress_proxy_users=[{"name": "alice", "password": PASSWORD, "previous_password": PREVIOUS}],
                     egress_proxy_instances=[ENTRY],
                     egress_proxy_fleet=[dict(ENTRY, name="egress-2", address="198.51.100.6/24", hypervisor="localhost",
                                              users=[{"name": "carol", "password": FLEET_PASSWORD}])])
    out = run_role_tasks(tmp_path, "egress_proxy", "arguments", dict(PLAY_BASE, **variables), check=True, options=["-vvv"])
    assert "task path: " in out and "Keep the proxies for the converge" in out  # -vvv, the whole file ran
    secrets = [PASSWORD, FLEET_PASSWORD, PREVIOUS] + hash_parts("alice", PASSWORD) + hash_parts("carol", FLEET_PASSWORD) \
        + hash_parts("alice", PREVIOUS)
    found = [secret for secret in secrets if secret in out.replace("\\n", "\n")]
    assert found == [], "at -vvv the output holds %s" % found


@pytest.mark.parametrize("password", ["p" * (PASSWORD_MAX_BYTES + 1), "€" * 171, "q" * 4096],
                         ids=["512-ascii", "513-utf8", "4096"])
def test_a_password_the_proxy_could_never_check_is_refused_naming_the_user_at_vvv(tmp_path, password):
    variables = dict(BASE, egress_proxy_instances=[ENTRY], egress_proxy_users=[
        {"name": "alice", "password": PASSWORD}, {"name": "bob", "password": password}])
    with pytest.raises(AssertionError) as failed:
        run_role_tasks(tmp_path, "egress_proxy", "arguments", dict(PLAY_BASE, **variables), check=True, options=["-vvv"])
    out = str(failed.value)
    # The check's task fails with the role's sentence; the task that keeps the instances never ran.
    assert "TASK [egress_proxies.kvm.egress_proxy : Check the proxies of this hypervisor]" in out, out[-3000:]
    assert ('users[1] ("bob") of egress-1 on localhost: the password is %d bytes or more in UTF-8, and the proxy\'s '
            'crypt(3) checks at most %d' % (PASSWORD_MAX_BYTES + 1, PASSWORD_MAX_BYTES)) in out, out[-3000:]
    assert "Keep the proxies of this hypervisor" not in out
    found = [secret for secret in [password, password[:64], PASSWORD] + hash_parts("alice", PASSWORD) if secret in out]
    assert found == [], "the refusal at -vvv holds %s" % found


@pytest.mark.parametrize("previous, problem", [
    ("p" * (PASSWORD_MAX_BYTES + 1), "the previous password is %d bytes or more" % (PASSWORD_MAX_BYTES + 1)),
    ("old\nalice:$6$x", "the previous password has a control character"),
    ("", "the previous password is empty or not text"),
], ids=["too long", "line feed", "empty"])
def test_a_previous_password_the_proxy_could_never_check_is_refused_naming_it(tmp_path, previous, problem):
    variables = dict(BASE, egress_proxy_instances=[ENTRY], egress_proxy_users=[
        {"name": "alice", "password": PASSWORD, "previous_password": previous}])
    with pytest.raises(AssertionError) as failed:
        run_role_tasks(tmp_path, "egress_proxy", "arguments", dict(PLAY_BASE, **variables), check=True)
    assert 'users[0] ("alice") of egress-1 on localhost: ' + problem in str(failed.value), str(failed.value)[-3000:]
    assert "Keep the proxies of this hypervisor" not in str(failed.value)


def test_while_a_password_is_rotated_squid_takes_either_and_then_the_new_one_alone(tmp_path):
    """The previous passwords' hashes go to a file of their own beside the users' and squid's Basic helper becomes the
    role's, which asks basic_ncsa_auth on both; once the previous password is gone, squid.conf is what it was."""
    rotating = [{"name": "alice", "password": PASSWORD, "previous_password": PREVIOUS}, {"name": "bob", "password": "b"}]
    (proxy,) = role_set_args([dict(ENTRY)], **dict(BASE, egress_proxy_users=rotating))["proxies"]
    files = policy_files(proxy)
    assert files[PREVIOUS_USERS]["secret_content"] == "alice:%s\n" % squid_user_hash(OWNER, "alice", PREVIOUS)
    assert (files[PREVIOUS_USERS]["group"], files[PREVIOUS_USERS]["mode"]) == ("proxy", "0640")
    assert files[SQUID_USERS]["secret_content"] == "alice:%s\nbob:%s\n" % (
        squid_user_hash(OWNER, "alice", PASSWORD), squid_user_hash(OWNER, "bob", "b"))
    assert files[EITHER_PROGRAM] == {"path": EITHER_PROGRAM, "mode": "0755", "content": program_text(CHECK_EITHER_PASSWORD)}
    parsed = squid_parsed(files[SQUID_CONF]["content"], tmp_path)
    assert [line for line in parsed if line.startswith("auth_param basic program")] == [
        "auth_param basic program %s %s %s %s" % (EITHER_PROGRAM, SQUID_NCSA_AUTH, SQUID_USERS, PREVIOUS_USERS)]
    (done,) = role_set_args([dict(ENTRY)], **dict(BASE, egress_proxy_users=[
        {"name": "alice", "password": PASSWORD}, {"name": "bob", "password": "b"}]))["proxies"]
    after = policy_files(done)
    assert sorted(after) == [SQUID_USERS, SQUID_CONF] and after[SQUID_USERS] == files[SQUID_USERS]
    assert "auth_param basic program %s %s\n" % (SQUID_NCSA_AUTH, SQUID_USERS) in after[SQUID_CONF]["content"]
    assert after[SQUID_CONF]["content"] != files[SQUID_CONF]["content"]


def test_a_password_of_the_limit_is_kept(tmp_path):
    longest = "€" * 170 + "p"  # 511 bytes in UTF-8
    variables = dict(BASE, egress_proxy_instances=[ENTRY], egress_proxy_users=[{"name": "bob", "password": longest}])
    out = run_role_tasks(tmp_path, "egress_proxy", "arguments", dict(PLAY_BASE, **variables), check=True)
    assert "Keep the proxies for the converge" in out


def set_request(arguments):
    """kvm_proxy_set's request of ``arguments`` (proxy_set_args'), as the module reads them."""
    spec = dict(common_argument_spec(), **kvm_proxy_set_argument_spec())
    checked = ArgumentSpecValidator(spec).validate(arguments)
    assert not checked.error_messages, checked.error_messages
    return SetRequest.from_params(checked.validated_parameters)


def test_the_upgrades_new_hash_is_a_policy_change_applied_in_place_never_a_new_machine():
    # The users' file as the role wrote it before issue 40 (its salt keyed by the password), and as it writes it now.
    arguments = role_set_args([dict(ENTRY)], **dict(BASE, egress_proxy_users=[{"name": "alice", "password": PASSWORD}]))
    users = policy_files(arguments["proxies"][0])[SQUID_USERS]
    old_salt = "".join(CRYPT_ALPHABET[byte & 0x3F] for byte in hmac.new(
        PASSWORD.encode("utf-8"), (OWNER + "\0alice").encode("utf-8"), hashlib.sha256).digest()[:16])
    old_line = "alice:%s\n" % sha512_crypt(PASSWORD, old_salt, SQUID_ROUNDS)
    assert users["secret_content"] == "alice:%s\n" % squid_user_hash(OWNER, "alice", PASSWORD) != old_line
    before = copy.deepcopy(arguments)
    (old_users,) = [entry for entry in before["proxies"][0]["policy"]["files"] if entry["path"] == SQUID_USERS]
    old_users["secret_content"] = old_line
    (old,), (new,) = set_request(before).proxies, set_request(arguments).proxies
    # kvm_proxy_set replaces a VM whose spec changed (its digest is in the domain's metadata) and applies a changed
    # policy in place: the spec (the seed's files without the policy) is the same, the policy's digest is not.
    assert old.spec() == new.spec() and old.machine_files() == new.machine_files()
    assert old.policy_digest != new.policy_digest
