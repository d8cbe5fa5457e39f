# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Where a proxy user's hash goes once kvm_proxy_set has it (issue 40 item 1): the docs' list, held to the module.

The users' file the role gives (``secret_content``) reaches the seed and the guest; the module's output (what a task
prints at -vvv: the invocation, the result and --diff) and the domain's XML never hold the hash, when the proxy is
created and when a new hash is applied in place.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import email

from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.iso9660 import read_iso
from ansible_collections.egress_proxies.kvm.plugins.modules import kvm_proxy_set
from ansible_collections.egress_proxies.kvm.plugins.plugin_utils.password_hash import squid_user_hash
from ansible_collections.egress_proxies.kvm.tests.unit.plugins.module_utils.test_proxy import IMAGE_SHA, UID, ready_host

USERS_PATH = "/etc/squid/egress-users"
IMAGE = dict(name="debian-13", url="https://images.example/debian-13.qcow2", checksum="sha256:" + IMAGE_SHA)


def arguments(password):
    users = "alice:%s\n" % squid_user_hash(UID, "alice", password)
    policy = {"files": [{"path": "/etc/squid/squid.conf", "content": "http_port 3128\n"},
                        {"path": USERS_PATH, "secret_content": users, "group": "proxy", "mode": "0640"}],
              "validate": ["/usr/sbin/squid", "-k", "parse"], "reload": ["/bin/systemctl", "reload-or-restart", "squid"]}
    return dict(uid=UID, bridge="br0", image=IMAGE, proxies=[{"name": "proxy-1", "policy": policy}]), users


def hash_parts(users):
    """The users' line's secret parts: the hash and the hash proper after its salt."""
    line = users.split(":", 1)[1].strip()
    return [line, line.rsplit("$", 1)[1]]


def test_the_hash_reaches_the_seed_and_the_guest_never_the_output_or_the_xml(run_main):
    hv = ready_host("nas1")
    first, first_users = arguments("first password")
    predicted, predicted_out, _opened = run_main(kvm_proxy_set.main, hv, first, check_mode=True, diff=True)
    created, created_out, _opened = run_main(kvm_proxy_set.main, hv, first, diff=True)
    assert predicted["changed"] is True and created["changed"] is True and "failed" not in created
    for out in (predicted_out, created_out):
        assert '"secret_content": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"' in out  # the invocation, masked
        assert [part for part in hash_parts(first_users) if part in out] == []
    dom = hv.domains["proxy-1"]
    assert [part for part in hash_parts(first_users) if part in dom.xml] == []
    # By design: the seed holds the users' file (a new VM enforces the policy from its first boot).
    user_data = email.message_from_bytes(read_iso(hv.volume("default", "proxy-1-seed.iso").content)["user-data"])
    parts = [part.get_payload(decode=True).decode("utf-8") for part in user_data.walk() if not part.is_multipart()]
    assert any('"path": "/etc/squid/egress-users"' in part and hash_parts(first_users)[0] in part for part in parts)

    # A new hash (a changed password, or the salt of issue 40) is applied in place through the guest agent.
    dom.guest.programs["/usr/sbin/squid"] = lambda argv, guest: (0, b"", b"")
    dom.guest.programs["/bin/systemctl"] = lambda argv, guest: (0, b"", b"")
    second, second_users = arguments("second password")
    applied, applied_out, _opened = run_main(kvm_proxy_set.main, hv, second, diff=True)
    assert [proxy["outcome"] for proxy in applied["proxies"]] == ["updated"], applied
    assert hv.domains["proxy-1"] is dom and dom.guest.files[USERS_PATH].content == second_users.encode("ascii")
    assert [part for part in hash_parts(first_users) + hash_parts(second_users) if part in applied_out + dom.xml] == []
    assert "(secret, sha256 " in applied_out
