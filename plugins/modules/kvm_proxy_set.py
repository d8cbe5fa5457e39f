#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kvm_proxy_set
short_description: Converge one hypervisor's whole set of egress-proxy VMs in one call, with garbage collection and rolling replacement
version_added: 0.1.0
description:
  - Makes every proxy of O(proxies) what it asks for, as M(egress_proxies.kvm.kvm_proxy) would one by one, over one
    connection and in one task, so Ansible's per-item cost is paid once per hypervisor instead of once per proxy.
  - The options of M(egress_proxies.kvm.kvm_proxy) apply to every proxy; an entry of O(proxies) sets its own where it
    differs. All proxies are looked at and planned before anything changes, so check mode predicts the whole set.
  - First of all, each image (O(image), or an entry's own) that a proxy to run or to keep stopped builds from is made
    ready in O(pool) once, as M(egress_proxies.kvm.kvm_base_image) caches it (in check mode, predicted). An image that
    cannot be (a wrong URL or O(image.checksum), a server that fails) fails the task, naming it, before any proxy is
    looked at, so nothing else was changed. RV(images) says what was done to each; with O(image_prune) its older cached
    copies that no volume uses are removed.
  - Proxies that are created, started, stopped or removed are handled first; with O(wait_for_ip), their addresses are
    awaited together, each within its O(wait_timeout), in the same wait as M(egress_proxies.kvm.kvm_proxy)'s; a proxy
    whose VM stops while awaited fails the task at once, naming it and its state.
  - With O(wait_for_ip), replacements of running proxies (after a change of spec) roll, at most O(max_unavailable) at
    a time. The next replacement starts only when the previous ones have an IPv4 address (and, with O(wait_for_port),
    answer on that port from where the module runs). A replacement that does not come up in time stops the roll; the
    proxies not yet replaced keep running on their old VM, and the task fails naming them. Without O(wait_for_ip)
    nothing tells when a replacement is up, so all of them are replaced at once.
  - A running proxy is stopped gracefully before it is replaced or removed (an ACPI shutdown request, then a hard
    stop after O(shutdown_timeout)).
  - With O(gc), a managed domain recorded with this set's owner O(uid) that is not in O(proxies) and was created more
    than O(gc_grace_period) seconds ago is removed with its overlay and seed. Unmanaged domains and other owners'
    proxies are never touched; they are returned in RV(foreign). A hypervisor that cannot be listed fails the task
    before anything is removed; a domain that cannot be read is left (RV(spared)) and the sweep goes on.
  - Garbage collection of a running proxy takes capacity away, like a replacement; it comes after the new and started
    proxies are up and after the replacements, counted against O(max_unavailable). When a new proxy fails (or, with
    O(wait_for_ip), gets no address in time) the unlisted proxies still running are kept, and the message names them.
    Unlisted proxies that are not running are removed at once.
  - A C(createdAt) more than 5 minutes ahead of the hypervisor's clock is corrupt, as a malformed one is, and does not
    protect a proxy from garbage collection (a warning names it). Up to 5 minutes ahead is clock skew and counts as
    now (RV(spared) says so).
  - A proxy of O(proxies) with O(proxies[].state=absent) that another owner, or nobody, created is left as it is and
    reported (outcome V(left alone (another owner)) or V(left alone (unmanaged)), with the reason and a warning); the
    set's own are removed and the task does not fail. M(egress_proxies.kvm.kvm_proxy) refuses such a domain instead.
  - A changed O(policy) is applied in place to every running proxy through its guest agent (action V(apply policy),
    outcome V(updated)), never replacing one. With O(on_unreachable_agent=fail), a proxy whose agent does not answer
    fails the task, naming it, after the other proxies got the policy.
extends_documentation_fragment:
  - egress_proxies.kvm.common
  - egress_proxies.kvm.proxy
  - egress_proxies.kvm.image_download
options:
  proxies:
    description:
      - The proxies this hypervisor must run (or stop, or not have). Each entry names one; the other keys override the
        options of the same name for that proxy.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Name of the VM, as O(egress_proxies.kvm.kvm_proxy#module:name).
        type: str
        required: true
      state:
        description: This proxy's O(state).
        type: str
        choices: [present, stopped, absent]
      vcpus:
        description: This proxy's O(vcpus).
        type: int
      memory_mib:
        description: This proxy's O(memory_mib).
        type: int
      disk_size_gb:
        description: This proxy's O(disk_size_gb).
        type: int
      pool:
        description: This proxy's O(pool).
        type: str
      bridge:
        description: This proxy's O(bridge).
        type: str
      network:
        description: This proxy's O(network).
        type: str
      mac:
        description: This proxy's O(mac).
        type: str
      interfaces:
        description: This proxy's O(interfaces).
        type: list
        elements: dict
        suboptions:
          bridge:
            description: As O(interfaces[].bridge).
            type: str
          network:
            description: As O(interfaces[].network).
            type: str
          mac:
            description: As O(interfaces[].mac).
            type: str
          role:
            description: As O(interfaces[].role).
            type: str
          address:
            description: As O(interfaces[].address).
            type: str
          gateway:
            description: As O(interfaces[].gateway).
            type: str
          address6:
            description: As O(interfaces[].address6).
            type: str
          gateway6:
            description: As O(interfaces[].gateway6).
            type: str
          nameservers:
            description: As O(interfaces[].nameservers).
            type: list
            elements: str
          search:
            description: As O(interfaces[].search).
            type: list
            elements: str
      image:
        description: This proxy's O(image).
        type: dict
        suboptions:
          name:
            description: As O(image.name).
            type: str
            required: true
          url:
            description: As O(image.url).
            type: str
            required: true
          checksum:
            description: As O(image.checksum).
            type: str
          format:
            description: As O(image.format).
            type: str
            choices: [qcow2, raw]
            default: qcow2
      base_volume:
        description: This proxy's O(base_volume).
        type: str
      user_data:
        description: This proxy's O(user_data).
        type: raw
      vendor_data:
        description: This proxy's O(vendor_data).
        type: raw
      meta_data:
        description: This proxy's O(meta_data).
        type: dict
      network_config:
        description: This proxy's O(network_config).
        type: raw
      virt_type:
        description: This proxy's O(virt_type).
        type: str
        choices: [kvm, qemu]
      cpu_mode:
        description: This proxy's O(cpu_mode).
        type: str
        choices: [host-passthrough, host-model, maximum, none]
      machine:
        description: This proxy's O(machine).
        type: str
      autostart:
        description: This proxy's O(autostart).
        type: bool
      shutdown_timeout:
        description: This proxy's O(shutdown_timeout).
        type: int
      on_drift:
        description: This proxy's O(on_drift).
        type: str
        choices: [replace, ignore]
      policy:
        description:
          - This proxy's O(policy), instead of the set's (whole, not merged with it).
        type: dict
        suboptions:
          files:
            description: As O(policy.files).
            type: list
            elements: dict
            required: true
            suboptions:
              path:
                description: As O(policy.files[].path).
                type: str
                required: true
              content:
                description: As O(policy.files[].content).
                type: str
              secret_content:
                description: As O(policy.files[].secret_content).
                type: str
              owner:
                description: As O(policy.files[].owner).
                type: str
                default: root
              group:
                description: As O(policy.files[].group).
                type: str
                default: root
              mode:
                description: As O(policy.files[].mode).
                type: str
                default: '0644'
          validate:
            description: As O(policy.validate).
            type: list
            elements: str
          reload:
            description: As O(policy.reload).
            type: list
            elements: str
          release:
            description: As O(policy.release).
            type: list
            elements: str
          group:
            description: As O(policy.group).
            type: dict
            suboptions:
              name:
                description: As O(policy.group.name).
                type: str
                required: true
              address:
                description: As O(policy.group.address).
                type: str
                required: true
              address6:
                description: As O(policy.group.address6).
                type: str
          pooled_addresses:
            description: As O(policy.pooled_addresses).
            type: dict
      on_unreachable_agent:
        description: This proxy's O(on_unreachable_agent).
        type: str
        choices: [fail, replace]
  gc:
    description:
      - Remove the proxies recorded with this set's owner O(uid) that O(proxies) does not list any more (once they are
        older than O(gc_grace_period)). Needs O(uid).
    type: bool
    default: true
  gc_grace_period:
    description:
      - Seconds since its creation during which a proxy missing from O(proxies) is kept, so that a proxy another run
        has just created for a newer list survives a run with an older one.
    type: int
    default: 3600
  max_unavailable:
    description: How many running proxies may be down at once while they are replaced (with O(wait_for_ip)).
    type: int
    default: 1
  wait_for_port:
    description:
      - With it, a created, started or replaced proxy counts as up only when a TCP connection to this port of its
        address succeeds from the host the module runs on, squid's 3128 for example.
      - Implies O(wait_for_ip); the port is asked on the address that wait finds.
    type: int
  image_prune:
    description:
      - Once each image is ready, remove its other cached copies in the pool (same O(image.name), another checksum or
        format) that no volume uses as its backing store, such as the previous release after a checksum file moved on,
        as O(egress_proxies.kvm.kvm_base_image#module:prune) does. Copies that VM disks still use are kept
        (C(kept) in RV(images)); those of proxies this run replaces go on a later run.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details:
      - Predicts the C(actions) of every proxy in RV(proxies) and every removal of the garbage collection.
  diff_mode:
    support: full
    details:
      - Shows each proxy's state, owner, autostart flag, spec digest, spec and policy digest before and after, keyed by
        name; with O(policy), its policy files as M(egress_proxies.kvm.kvm_proxy) shows them.
  idempotent:
    support: full
notes:
  - M(egress_proxies.kvm.kvm_proxy) stays the module for a single VM; both plan each proxy with the same code.
  - Across hypervisors, a play converges them in parallel (one task per host); C(serial) rolls one hypervisor at a time.
seealso:
  - module: egress_proxies.kvm.kvm_proxy
  - module: egress_proxies.kvm.kvm_proxy_info
"""

EXAMPLES = r"""
- name: Converge this hypervisor's proxies, remove the ones no longer listed, replace one at a time
  egress_proxies.kvm.kvm_proxy_set: &egress_eu  # the set the later examples reuse
    uid: egress-eu
    bridge: br0
    image:
      name: debian-13
      url: https://cloud.debian.org/images/cloud/trixie/20251117-2299/debian-13-genericcloud-amd64-20251117-2299.qcow2
      checksum: "sha256:{{ debian_13_sha256 }}"
    user_data: "{{ lookup('ansible.builtin.template', 'squid-user-data.yml.j2') }}"
    proxies:
      - name: egress-eu-1
      - name: egress-eu-2
      - name: egress-eu-3
        vcpus: 2
        memory_mib: 2048
    wait_for_ip: true
    wait_for_port: 3128
  register: fleet

- name: Show what happened to each proxy
  ansible.builtin.debug:
    msg: "{{ fleet.proxies | map(attribute='name') | zip(fleet.proxies | map(attribute='outcome')) | list }}"

- name: The set's squid policy, applied in place to the running proxies (a change of it replaces no VM)
  egress_proxies.kvm.kvm_proxy_set:
    <<: *egress_eu
    policy:
      files:
        - path: /etc/squid/squid.conf
          content: "{{ lookup('ansible.builtin.template', 'squid.conf.j2') }}"
        - path: /etc/squid/passwords
          secret_content: "{{ squid_users_htpasswd }}"
          group: proxy
          mode: "0640"
      validate: [/usr/sbin/squid, -k, parse]
      reload: [/bin/systemctl, reload-or-restart, squid]

- name: Stop every proxy of the set but keep their VMs (the same spec, so nothing is replaced), without garbage collection
  egress_proxies.kvm.kvm_proxy_set:
    <<: *egress_eu
    state: stopped
    gc: false
"""

RETURN = r"""
images:
  description:
    - One entry per image the set made ready before its proxies, with the keys
      M(egress_proxies.kvm.kvm_base_image) returns (C(volume), C(volume_path), C(sha256), C(downloaded), C(actions),
      ..., and with O(image_prune) C(removed) and C(kept)); empty when no proxy to run or keep stopped names an image.
    - Its C(actions) count in the task's C(changed).
  returned: always
  type: list
  elements: dict
  sample: [{"volume": "base-debian-13-8f0c9c4ba1e27a44.qcow2", "downloaded": false, "actions": [], "changed": false}]
host:
  description: Name of the hypervisor in the ids, O(host) or the host name libvirt reports.
  returned: always
  type: str
  sample: hv1.example.net
proxies:
  description:
    - One entry per proxy of O(proxies), in their order, with the keys M(egress_proxies.kvm.kvm_proxy) returns
      (C(id), C(name), C(state), C(ip), C(uid), C(actions), C(drifted), C(policy_digest), C(policy_drift), ...) plus
      C(outcome).
    - C(policy_digest) is the digest of the policy recorded in the VM's metadata (null when none is recorded), and
      C(policy_drift) the paths of the policy files found changed in the guest and written back, as
      M(egress_proxies.kvm.kvm_proxy) returns them (RV(egress_proxies.kvm.kvm_proxy#module:policy_digest),
      RV(egress_proxies.kvm.kvm_proxy#module:policy_drift)).
    - C(outcome) is one of V(created), V(replaced), V(updated) (state, autostart, owner or policy made right), V(unchanged),
      V(removed), V(absent), V(cleaned) (leftover volumes of a dead run deleted), V(left alone (another owner)) (a
      matching proxy of another owner, or one of another owner to remove) or V(left alone (unmanaged)) (a domain to
      remove that this collection did not create).
    - C(reason) says why a proxy was left alone and how to make the set act on it (O(adopt_uids), O(force)); null for
      the other outcomes.
  returned: always
  type: list
  elements: dict
  sample: [{"id": "hosts/hv1/domains/egress-eu-1", "name": "egress-eu-1", "outcome": "unchanged", "state": "Running"}]
removed:
  description: The proxies the garbage collection removed (or, in check mode, would remove), as in RV(proxies).
  returned: always
  type: list
  elements: dict
  sample: []
foreign:
  description: Domains not in O(proxies) that are not this owner's (unmanaged, or recorded with another uid); never touched.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "windows-build", "managed": false, "uid": null}]
spared:
  description:
    - Domains the garbage collection did not remove although it could not rule them out, with the reason.
    - Not C(skipped), which Ansible keeps for a skipped task.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "egress-eu-4", "reason": "created less than gc_grace_period (3600 s) ago"}]
"""

from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.argspec import kvm_proxy_set_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.task import ProxySetTask

ARGUMENT_SPEC = kvm_proxy_set_argument_spec()


def main():
    ProxySetTask.main(ARGUMENT_SPEC)


if __name__ == "__main__":
    main()
