#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kvm_proxy
short_description: Create, start, stop, replace on drift and delete one egress-proxy VM on a libvirt hypervisor
version_added: 0.1.0
description:
  - Makes one VM exist and run (O(state=present)), exist shut off (O(state=stopped)), or not exist (O(state=absent)).
  - The VM boots a qcow2 overlay (C(<name>.qcow2)) on a base image cached in the storage pool, and reads its cloud-init
    configuration from a NoCloud seed volume (C(<name>-seed.iso)) built from O(user_data), O(meta_data),
    O(vendor_data) and O(network_config).
  - The domain is looked up by name first. When it exists and was built from the same spec, only its running state and
    autostart flag are made right; its volumes are never touched. When it does not exist, the image is cached if needed
    (as M(egress_proxies.kvm.kvm_base_image) does), an existing overlay is reused when it is the one this task would
    create, the seed is compared file by file and rewritten when it differs or is unreadable (a cut-off upload leaves a
    truncated seed), and the domain is defined with this collection's metadata, started and set to autostart.
  - The spec digest, a sha256 over everything that shapes the VM (pool, disk size, image, the cloud-init data, the NIC,
    vCPUs, memory, virt type, CPU mode, machine type), is stored in the domain's metadata. When the request's digest
    differs the VM has drifted; by default it is replaced (shut down gracefully, its overlay and seed deleted,
    undefined, then created again), since an egress proxy keeps no state. O(on_drift=ignore) leaves it alone and
    returns RV(drifted).
  - The proxy's policy (O(policy), the files its service enforces) is not part of the spec. A new VM gets it in its
    seed; a running one gets a change in place through the qemu guest agent (action V(apply policy)), checked by
    O(policy.validate) and loaded by O(policy.reload), and never replaced for it. The files are read back on every
    run, so one changed by hand in the guest is drift (RV(policy_drift)) that the run repairs.
  - O(state=absent) stops the domain (an ACPI shutdown request first, a hard stop after O(shutdown_timeout)), deletes
    its overlay and seed by name, and undefines it (with its managed save
    image, snapshot metadata and NVRAM). Volumes left behind by a run that died before the domain was defined are found
    by name and deleted too. A missing pool means there is nothing left to clean. Base images are never deleted.
  - A domain of the same name that this collection did not create, or that records another owner O(uid), is never
    replaced or deleted unless O(force=true) (or, for another owner, O(adopt_uids) lists it); the task fails instead,
    naming the owner. Another owner's VM that matches the request is left as it is, with a warning.
extends_documentation_fragment:
  - egress_proxies.kvm.common
  - egress_proxies.kvm.proxy
  - egress_proxies.kvm.image_download
attributes:
  check_mode:
    support: full
    details:
      - Predicts the exact list of RV(actions) a real run would take, from the same observations, without changing
        anything. A O(image.checksum) of the form C(sha256:<URL>) is still fetched, because the digest names the base
        volume.
      - With O(policy), the policy files of a running VM are read through its guest agent, which changes nothing.
  diff_mode:
    support: full
    details:
      - Shows the VM's state, owner, autostart flag, spec digest and spec before and after. The cloud-init data appear
        in the spec as sha256 digests only, never their content.
      - Shows the policy digest too, and with O(policy) its files under C(policy) (before as read from a running VM's
        guest, after as requested); a O(policy.files[].secret_content) file shows as its sha256 only.
  idempotent:
    support: full
options:
  name:
    description:
      - Name of the VM (the libvirt domain), which is also its hostname.
      - 1-63 lowercase letters, digits and hyphens, starting and ending with a letter or digit, not starting with
        C(base-) (the prefix of cached base image volumes).
    type: str
    required: true
notes:
  - Changing any option that shapes the VM (see the description) replaces it. The options that do not (O(state),
    O(autostart), O(host), O(wait_for_ip), the timeouts, O(image.url), O(policy), O(on_unreachable_agent)) are applied
    in place or only affect this run;
    a new O(uid) is recorded in place only for owners listed in O(adopt_uids).
  - A replacement first caches and verifies the new base image and checks the bridge or network, the pool and the disk
    size against the image; only then is the old VM removed. When that preparation fails, the old VM keeps running as
    it was and the message says so.
  - When O(image.checksum) is a C(SHA256SUMS) URL, the digest it lists is part of the spec. A new release published
    there is drift, so every VM moves to the same image.
  - The image must be self-contained, as M(egress_proxies.kvm.kvm_base_image) requires. Planning reads the header of an
    image that is not cached yet (one ranged request), so a disk smaller than the image fails before any download,
    in check mode too.
  - A VM that is not running and whose seed volume is gone (deleted outside this collection) gets its seed written
    again before it starts (action V(write seed)); its disk is kept. One whose overlay is gone cannot boot; it is
    rebuilt, with a warning naming the volume, and RV(drifted) is true.
  - A failed task that completed steps before failing returns C(changed=true) and those steps in RV(actions).
  - The base image is held under a lock on the machine the module runs on while the overlay is created on it, so a
    concurrent M(egress_proxies.kvm.kvm_base_image) prune on the same machine cannot remove it in between.
  - The libvirt conversation is small and constant for an existing VM (the domain is looked up by name; nothing lists
    every domain), so the module can run often.
seealso:
  - module: egress_proxies.kvm.kvm_base_image
    description: Caches the base images the VMs boot from, and prunes the old ones.
  - module: egress_proxies.kvm.kvm_seed
    description: Builds a cloud-init seed volume on its own.
  - module: egress_proxies.kvm.kvm_proxy_info
    description: Lists the proxies of a hypervisor with their state and address.
  - name: cloud-init NoCloud datasource
    description: How the seed volume's user-data, meta-data, vendor-data and network-config are read.
    link: https://cloudinit.readthedocs.io/en/latest/reference/datasources/nocloud.html
"""

EXAMPLES = r"""
- name: Run an egress proxy from the Debian 13 cloud image on br0
  egress_proxies.kvm.kvm_proxy: &egress_proxy_1  # the spec the later examples reuse
    name: egress-proxy-1
    uid: 3f9c2b1e-5d1a-4c57-9a0e-2f3b8d6c7e10
    vcpus: 1
    memory_mib: 1024
    bridge: br0
    image:
      name: debian-13
      url: https://cloud.debian.org/images/cloud/trixie/20251117-2299/debian-13-genericcloud-amd64-20251117-2299.qcow2
      checksum: "sha256:{{ debian_13_sha256 }}"
    user_data: |
      #cloud-config
      packages: [squid]
      write_files:
        - path: /etc/squid/conf.d/egress.conf
          content: |
            # only the LAN may use the proxy; never run an open proxy
            acl lan src 192.168.1.0/24
            http_access allow lan
      runcmd:
        - [systemctl, restart, squid]
    wait_for_ip: true
  register: proxy

- name: Use the proxy
  ansible.builtin.debug:
    msg: "{{ proxy.name }} listens on http://{{ proxy.ip }}:3128 ({{ proxy.id }})"

- name: Same VM on a remote hypervisor with a fixed MAC, driven from the controller
  egress_proxies.kvm.kvm_proxy:
    uri: qemu+ssh://root@hv1.example.net/system
    name: egress-proxy-2
    bridge: br0
    mac: "52:54:00:e9:00:02"
    base_volume: base-debian-13-5c3ddb00f60bc455.qcow2
    user_data: "{{ lookup('ansible.builtin.file', 'proxy-user-data.yml') }}"
  delegate_to: localhost

- name: An egress proxy whose cloud-config is a dictionary (written as a cloud-config document)
  egress_proxies.kvm.kvm_proxy:
    name: egress-proxy-3
    bridge: br0
    base_volume: base-debian-13-5c3ddb00f60bc455.qcow2
    user_data:
      packages: [squid]
      ssh_authorized_keys: ["{{ lookup('ansible.builtin.file', '~/.ssh/id_ed25519.pub') }}"]

- name: Keep a hand-tuned VM although its spec changed (a larger disk asked; reports drifted instead of replacing it)
  egress_proxies.kvm.kvm_proxy:
    <<: *egress_proxy_1
    disk_size_gb: 20
    on_drift: ignore

- name: Shut the proxy down (ACPI, then a hard stop after a minute); the same spec, so nothing is replaced
  egress_proxies.kvm.kvm_proxy:
    <<: *egress_proxy_1
    state: stopped
    shutdown_timeout: 60

- name: Delete the proxy with its disk and seed (the cached image stays)
  egress_proxies.kvm.kvm_proxy:
    name: egress-proxy-1
    uid: 3f9c2b1e-5d1a-4c57-9a0e-2f3b8d6c7e10
    state: absent
"""

RETURN = r"""
id:
  description: The VM's id, C(hosts/<host>/domains/<name>).
  returned: always
  type: str
  sample: hosts/hv1.example.net/domains/egress-proxy-1
name:
  description: Name of the VM.
  returned: always
  type: str
  sample: egress-proxy-1
host:
  description: Name of the hypervisor, O(host) or the host name libvirt reports.
  returned: always
  type: str
  sample: hv1.example.net
state:
  description:
    - V(Running) (running with a routable IPv4), V(Provisioning) (running without an address yet, or a state libvirt
      could not determine), or V(Stopped).
    - Null when the VM does not exist (after O(state=absent), or in check mode before it would be created). In check
      mode it describes the VM as it is before the run.
  returned: always
  type: str
  sample: Running
libvirt_state:
  description: libvirt's own name of the domain state, null when the VM does not exist.
  returned: always
  type: str
  sample: running
ip:
  description:
    - The VM's first routable IPv4 address (of its first NIC), null when it has none (yet).
    - When that NIC is IPv6-only (O(interfaces[].address6) without O(interfaces[].address)), its IPv6 address.
  returned: always
  type: str
  sample: 198.18.0.150
ipv6:
  description:
    - The static IPv6 address of the VM's first NIC as the guest agent reports it; null when that NIC has no
      O(interfaces[].address6), or the address is not known (yet).
  returned: always
  type: str
  sample: 2001:db8:11::70
ip_sources:
  description: What each address source said, in the order asked (V(arp), then V(agent)); empty when none was asked.
  returned: always
  type: dict
  sample: {"arp": "no address yet", "agent": "198.18.0.150"}
uid:
  description:
    - Owner recorded in the VM's metadata.
    - Null in check mode for a VM that would be created without O(uid) (its random UUID is chosen when it is created).
  returned: always
  type: str
  sample: 3f9c2b1e-5d1a-4c57-9a0e-2f3b8d6c7e10
created_at:
  description: When the VM was defined (RFC 3339, UTC); null when it does not exist or in check mode before creation.
  returned: always
  type: str
  sample: "2026-09-08T10:00:00Z"
spec_digest:
  description: The spec digest recorded in the VM's metadata (with O(on_drift=ignore), the drifted VM's own); null when the VM does not exist.
  returned: always
  type: str
  sample: 0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0
policy_digest:
  description:
    - The digest of the policy recorded in the VM's metadata, the one the VM was last given (see O(policy)); null when
      none is recorded (the VM was never given a policy, or it does not exist).
    - Without O(policy), a kept VM's recorded digest stays as it was, as do its files. In check mode, the digest
      recorded before the run; for a VM that would be created, the requested policy's.
  returned: always
  type: str
  sample: 9b2d6f0e1a3c5b7d9f1e3a5c7b9d1f3e5a7c9b1d3f5e7a9c1b3d5f7e9a1c3b5d
mac:
  description: MAC address of the VM's NIC; null when the VM does not exist.
  returned: always
  type: str
  sample: "52:54:00:e9:00:02"
interfaces:
  description:
    - Every NIC of the VM in device order (the first is the boot NIC), as M(egress_proxies.kvm.kvm_proxy_info)
      reports them; empty when the VM does not exist. In check mode, for a VM that would be created, the NICs asked
      for, without addresses.
    - Each address comes from the same lookups as RV(ip); V(null) while none is known, and for a VM that is not running.
  returned: always
  type: list
  elements: dict
  contains:
    mac:
      description: The NIC's MAC address; V(null) where libvirt will choose it.
      type: str
      sample: "52:54:00:12:34:56"
    bridge:
      description: The host bridge the NIC is on; V(null) for a NIC on a libvirt network.
      type: str
      sample: br0
    network:
      description: The libvirt network the NIC is on; V(null) for a NIC on a host bridge.
      type: str
      sample: null
    role:
      description: The NIC's O(interfaces[].role), such as V(inside) or V(outside); V(null) when it was given none.
      type: str
      sample: inside
    ipv4:
      description:
        - The NIC's static IPv4 (O(interfaces[].address)) where the guest has it, else its first routable IPv4;
          V(null) when none is known. A NIC may carry more addresses (a profile's egress addresses of the egress_proxy
          role), which are not reported.
      type: str
      sample: 198.18.11.70
    ipv6:
      description:
        - The NIC's routable IPv6, from the guest agent; looked up only for a NIC with O(interfaces[].address6), else
          V(null) (as while none is known).
      type: str
      sample: 2001:db8:11::70
    egress:
      description: Whether this is the egress NIC, whose address destinations see (role V(outside), else the first NIC).
      type: bool
      sample: false
  sample:
    - {"mac": "52:54:00:12:34:56", "bridge": "br0", "network": null, "role": "inside", "ipv4": "198.18.11.70",
       "ipv6": null, "egress": false}
    - {"mac": "52:54:00:12:34:57", "bridge": "br1", "network": null, "role": "outside", "ipv4": "198.18.21.70",
       "ipv6": "2001:db8:21::70", "egress": true}
egress_ip:
  description:
    - The IPv4 of the egress NIC (RV(interfaces[].egress)), the address IPv4 destinations see (its IPv6 when it is
      IPv6-only); with one NIC the same as RV(ip). V(null) when none is known.
  returned: always
  type: str
  sample: 198.18.21.70
egress_ipv6:
  description:
    - The IPv6 of the egress NIC, the address IPv6 destinations see; V(null) when it has no static IPv6 or it is not
      known (yet).
  returned: always
  type: str
  sample: 2001:db8:21::70
egress_address:
  description:
    - The static address of the egress NIC (RV(interfaces[].egress)) as the VM's spec records it in its metadata,
      without its prefix (its IPv6 when it is IPv6-only), known whether or not the VM runs; V(null) for an egress NIC
      on DHCP. An address the egress_proxy role gave from a pool is kept this way across replacements.
  returned: always
  type: str
  sample: 198.18.21.70
egress_address6:
  description:
    - The static IPv6 address of the egress NIC as the VM's metadata records it, without its prefix; V(null) when
      it has none. Beside RV(egress_address) on a dual-stack NIC.
  returned: always
  type: str
  sample: 2001:db8:21::70
autostart:
  description: Whether libvirt starts the VM when the hypervisor boots; null when the VM does not exist.
  returned: always
  type: bool
  sample: true
volumes:
  description: The VM's volumes.
  returned: always
  type: dict
  contains:
    pool:
      description: The storage pool (for O(state=absent), the one the volumes were found in).
      type: str
      sample: default
    overlay:
      description: The VM's disk, a qcow2 overlay on the base.
      type: str
      sample: egress-proxy-1.qcow2
    seed:
      description: The cloud-init NoCloud seed.
      type: str
      sample: egress-proxy-1-seed.iso
    base:
      description:
        - The base image volume the overlay backs onto. Null for O(state=absent), and for an existing VM whose
          O(image.checksum) is a C(SHA256SUMS) URL (only a fetch of that file names the volume).
      type: str
      sample: base-debian-13-5c3ddb00f60bc455.qcow2
actions:
  description:
    - What was done, in order (in check mode, what would be done, exactly).
    - Each is one of V(fetch base image), V(create overlay), V(delete overlay), V(write seed), V(delete seed),
      V(define domain), V(start domain), V(shutdown domain), V(destroy domain), V(undefine domain),
      V(enable autostart), V(disable autostart), V(record owner), V(verify base image), V(apply policy),
      V(release service).
    - V(verify base image) is a kept VM's base, whose marker is missing or does not match, hashed where it lies and
      marked again (see M(egress_proxies.kvm.kvm_base_image)).
    - V(shutdown domain) is an ACPI request followed, after O(shutdown_timeout), by a hard stop (a warning says so).
      A running VM gets it before it is replaced or removed too; V(destroy domain) stops at once a VM that cannot act
      on it (paused, crashed).
    - V(apply policy) is O(policy) written into a running VM through its guest agent, checked with
      O(policy.validate) and loaded with O(policy.reload); its digest is then recorded.
    - V(release service) is O(policy.release) run in a running VM before its V(shutdown domain) (to stop or replace it).
    - When the task fails, the steps completed before the failure.
  returned: always
  type: list
  elements: str
  sample: [create overlay, write seed, define domain, start domain, enable autostart]
drifted:
  description:
    - Whether the existing VM had been built from a different spec (it was replaced unless O(on_drift=ignore)).
    - Also true when it was rebuilt because its disk was gone (a warning names the volume); a rebuild is never
      reported as no drift.
  returned: always
  type: bool
  sample: false
policy_drift:
  description:
    - The paths of the O(policy) files found changed in the guest (edited by hand, or removed) although the VM's
      recorded policy is the requested one. This run wrote them back (in check mode, would write them back) with
      action V(apply policy).
    - Empty without O(policy), when nothing drifted, when the recorded policy is not the requested one (every file is
      written then), and when the files could not be read (a VM not running, or whose guest agent does not answer).
  returned: always
  type: list
  elements: str
  sample: [/etc/squid/squid.conf]
"""

from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.argspec import kvm_proxy_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.task import ProxyTask

ARGUMENT_SPEC = kvm_proxy_argument_spec()


def main():
    ProxyTask.main(ARGUMENT_SPEC)


if __name__ == "__main__":
    main()
