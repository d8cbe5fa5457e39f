# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    # The options of one proxy VM: kvm_proxy's, and kvm_proxy_set's for every proxy of the set.
    DOCUMENTATION = r"""
requirements:
  - pycdlib (Debian/Ubuntu package C(python3-pycdlib), RHEL from EPEL, or C(pycdlib) from PyPI) on the host that runs
    the module, to build the seed.
options:
  state:
    description:
      - V(present) makes the VM exist and run.
      - V(stopped) makes it exist and shut off, creating it without starting it when it does not exist. A running guest
        gets an ACPI shutdown request and O(shutdown_timeout) seconds to power off before it is stopped hard.
        O(autostart) still applies; set it to V(false) to keep the VM off when the hypervisor reboots.
      - V(absent) deletes it with its overlay and seed volumes, after a graceful stop of a running VM (see
        O(shutdown_timeout)).
    type: str
    choices: [present, stopped, absent]
    default: present
  host:
    description:
      - Name of the hypervisor in the returned RV(egress_proxies.kvm.kvm_proxy#module:id), C(hosts/<host>/domains/<name>).
      - Defaults to the host name libvirt reports for the hypervisor.
    type: str
  uid:
    description:
      - Owner recorded in the domain's metadata (for example the name of the deployment that asks for the proxy).
      - When set, a domain recorded with another uid is not replaced or deleted unless O(force=true) or its owner is
        listed in O(adopt_uids). One that already matches the request is left exactly as it is, with a warning naming
        its owner, and the task does not fail.
      - When not set, any domain this collection created is accepted whatever its uid and keeps its owner when it is
        replaced; a new domain gets a random UUID (null in check mode, which cannot know it).
    type: str
  adopt_uids:
    description:
      - Owners whose domains this task takes over, recording O(uid) in their metadata instead (action
        V(record owner), in place, without replacing the VM when its spec matches).
      - V(*) takes over any domain this collection created. Domains it did not create still need O(force=true).
      - For example the random uids of proxies created before a stable O(uid) was chosen.
    type: list
    elements: str
    default: []
  vcpus:
    description: Number of virtual CPUs.
    type: int
    default: 1
  memory_mib:
    description: Memory of the VM in MiB.
    type: int
    default: 1024
  disk_size_gb:
    description:
      - Size of the VM's disk (the overlay) in GiB. It must be at least the virtual size of the image.
    type: int
    default: 10
  pool:
    description:
      - Name of the libvirt storage pool that holds the base image, the overlay and the seed. It must exist.
    type: str
    default: default
  bridge:
    description:
      - Host bridge the VM's NIC is attached to, for example V(br0).
      - One of O(bridge), O(network) and O(interfaces) is required with O(state=present) or O(state=stopped).
      - O(bridge), O(network) and O(mac) describe a single NIC; they are mutually exclusive with O(interfaces).
    type: str
  network:
    description:
      - libvirt network the VM's NIC is attached to, for example V(default).
    type: str
  mac:
    description:
      - Fixed MAC address of the NIC, for example V(52:54:00:12:34:56). libvirt picks one when not set.
      - With a fixed MAC, a DHCP reservation can give the proxy a stable address.
    type: str
  interfaces:
    description:
      - The VM's NICs, in device order, instead of O(bridge), O(network) and O(mac). The first is the boot and
        default NIC.
      - Every bridge and network must exist; they are all checked before anything is changed.
      - The spec digest covers the whole list, so adding, removing, reordering or changing a NIC is drift.
      - The egress interface (the address destinations see) is the one with O(interfaces[].role=outside), or the
        first.
    type: list
    elements: dict
    suboptions:
      bridge:
        description:
          - Host bridge of this NIC. Exactly one of O(interfaces[].bridge) and O(interfaces[].network).
        type: str
      network:
        description:
          - libvirt network of this NIC.
        type: str
      mac:
        description:
          - Fixed MAC address of this NIC; libvirt picks one when not set. MACs must differ between NICs.
        type: str
      role:
        description:
          - A name for what the NIC is for, for example V(inside) (the clients' side) or V(outside) (towards the
            destinations). Lowercase letters, digits, V(-) and V(_); each role at most once.
        type: str
      address:
        description:
          - A static IPv4 address with its prefix length, for example V(198.18.11.50/24). Without it and without
            O(interfaces[].address6) the NIC uses DHCP.
          - With a static address on any NIC, the seed carries a cloud-init network-config (version 2) listing every
            NIC by its MAC; a static NIC without O(interfaces[].mac) gets a MAC derived from the VM's name and the
            NIC's place in the list, so the configuration and the spec stay the same on every run.
          - Mutually exclusive with O(network_config). Two NICs of a VM cannot share an address.
        type: str
      gateway:
        description:
          - The default IPv4 gateway of a static NIC; it must lie inside the prefix of O(interfaces[].address).
        type: str
      address6:
        description:
          - A static IPv6 address with its prefix length, for example V(2001:db8:11::50/64); a global or unique local
            one, not the prefix's subnet-router anycast address, written without a V(%scope).
          - With O(interfaces[].address) too the NIC is dual-stack; alone, IPv6-only (it asks for no DHCP lease).
          - Like O(interfaces[].address), it makes the NIC static and brings the network-config. Two NICs of a VM cannot
            share an address.
        type: str
      gateway6:
        description:
          - The default IPv6 gateway of a static NIC, another address inside the prefix of O(interfaces[].address6), or
            a router's link-local address such as V(fe80::1) (on this NIC; written without a V(%scope)).
        type: str
      nameservers:
        description:
          - DNS servers (IPv4 or IPv6) of a static NIC.
        type: list
        elements: str
      search:
        description:
          - DNS search domains of a static NIC.
        type: list
        elements: str
  image:
    description:
      - The cloud image to boot, cached in O(pool) on first use exactly as M(egress_proxies.kvm.kvm_base_image) caches
        it. One of O(image) and O(base_volume) is required with O(state=present) or O(state=stopped).
      - Its identity in the spec digest is O(image.name), O(image.format) and O(image.checksum), not O(image.url), so
        moving to another mirror that serves the same checksum does not replace the VM.
    type: dict
    suboptions:
      name:
        description:
          - Name of the image in the cache, for example V(debian-13).
        type: str
        required: true
      url:
        description:
          - Where to download the image from (C(http://) or C(https://)); the server must send C(Content-Length).
          - A password in the URL (V(https://user:password@host/...)) is masked (C(********)) in the task's arguments,
            results and messages.
        type: str
        required: true
      checksum:
        description:
          - Expected sha256, as V(sha256:<64 hex digits>) or V(sha256:<URL of a SHA256SUMS file>).
          - A password in the URL is masked as in O(image.url).
          - Strongly recommended; without it the first download is kept forever.
        type: str
      format:
        description: Disk format of the image.
        type: str
        choices: [qcow2, raw]
        default: qcow2
  base_volume:
    description:
      - Name of a base volume already in O(pool) to boot instead of O(image), for example one cached by
        M(egress_proxies.kvm.kvm_base_image) (its RV(egress_proxies.kvm.kvm_base_image#module:volume)).
    type: str
  user_data:
    description:
      - cloud-init user-data.
      - A string is written verbatim (a C(#cloud-config) document, a script, or a multi-part archive).
      - A dictionary is cloud-config, written as C(#cloud-config) followed by the dictionary as JSON with sorted keys,
        which cloud-init reads as YAML. The same dictionary always writes the same bytes (and so the same spec),
        whatever its keys' order.
      - Any other type (a list, a number) is refused.
      - >-
        A string must be UTF-8 text (no control characters but tab, line feed and carriage return) of at most 1 MiB,
        and start with a line cloud-init acts on, as for M(egress_proxies.kvm.kvm_seed)'s
        O(egress_proxies.kvm.kvm_seed#module:user_data); anything else is refused before anything is touched. The
        same limits hold for O(vendor_data), and text and size for O(network_config).
      - It often holds secrets, so it is never returned or logged (the option is C(no_log)); the diff shows its sha256
        only.
    type: raw
  vendor_data:
    description:
      - cloud-init vendor-data. cloud-init merges it under the user-data.
      - A string is written verbatim; a dictionary is cloud-config, written as O(user_data) writes one. Any other type
        is refused.
      - Defaults to a cloud-config that installs and starts qemu-guest-agent, through which the VM's address can be
        read before the host has seen its traffic. An empty string writes an empty vendor-data.
      - It may hold secrets (a C(bootcmd) with a token), so, like O(user_data), it is C(no_log) and never returned or
        logged; the diff shows its sha256 only.
    type: raw
  meta_data:
    description:
      - Extra meta-data keys, merged over C(instance-id) and C(local-hostname), which both default to O(egress_proxies.kvm.kvm_proxy#module:name).
      - It may hold secrets (a token the guest reads), so, like O(user_data), it is C(no_log) and never returned or
        logged; the diff shows its sha256 only.
      - A C(no_log) dictionary (here, or as O(user_data) or O(vendor_data)) is masked whole, as one document, where the
        task's arguments are shown. Ansible would otherwise mask each of its values wherever it appears in the
        result, so that a value such as V(proxy) or V(1) would turn proxy names, volume names and sizes into
        C(********).
    type: dict
  network_config:
    description:
      - cloud-init network configuration (version 1 or 2), as a YAML string or a dictionary.
      - When not set, cloud-init configures DHCP on the first NIC.
    type: raw
  virt_type:
    description:
      - Domain type. V(kvm) needs hardware virtualisation; V(qemu) runs the guest under TCG emulation (slow, but works
        where KVM does not, such as in nested VMs without nested virtualisation).
    type: str
    choices: [kvm, qemu]
    default: kvm
  cpu_mode:
    description:
      - CPU model the guest sees. V(none) leaves it to QEMU's default model.
      - Defaults to V(host-passthrough) with O(virt_type=kvm) and V(none) with O(virt_type=qemu)
        (V(host-passthrough) is refused under TCG).
    type: str
    choices: [host-passthrough, host-model, maximum, none]
  machine:
    description:
      - QEMU machine type, for example V(q35) or V(pc-q35-7.2).
    type: str
    default: q35
  autostart:
    description:
      - Whether libvirt starts the VM when the hypervisor boots.
    type: bool
    default: true
  wait_for_ip:
    description:
      - With O(state=present), wait until the VM runs with a routable IPv4 address, asking the host's ARP table first
        and the guest agent second, and return it in RV(egress_proxies.kvm.kvm_proxy#module:ip).
      - Fails when the proxy's O(wait_timeout) runs out with the VM's state and what each address source said, and at
        once when the VM stops (crashes, is destroyed, is powered off by its guest) while its address is awaited,
        naming its state.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds a run may wait on each proxy, counted from its first wait on that proxy (one limit for all of those
        waits together, not one for each). A proxy that is not up by then fails the task, naming what it did not get.
      - A run waits on a proxy for its guest agent to answer (a VM this run starts) and for its first boot (cloud-init)
        to end, before it applies a policy the VM does not hold yet (O(policy)), with or without O(wait_for_ip); and,
        with O(wait_for_ip), for its address (in M(egress_proxies.kvm.kvm_proxy_set), with
        O(egress_proxies.kvm.kvm_proxy_set#module:wait_for_port), for that port to answer too).
      - The proxies of a set are waited on side by side, each within its own limit. A shutdown is bounded by
        O(shutdown_timeout), the guest agent's exchanges by their own budget (see O(policy)).
    type: int
    default: 300
  shutdown_timeout:
    description:
      - Seconds a guest gets to power off after an ACPI shutdown request before it is stopped hard (with a warning).
      - A running VM gets that request when it is stopped (O(state=stopped)), and before it is replaced or removed
        (O(state=absent), a change of spec, garbage collection), so that its squid finishes the connections it holds
        (squid's C(shutdown_lifetime), 30 s by default) instead of having them cut.
    type: int
    default: 120
  on_drift:
    description:
      - What to do when the existing VM was built from a different spec (see RV(egress_proxies.kvm.kvm_proxy#module:drifted)).
      - V(replace) deletes it and creates it again from the request.
      - V(ignore) leaves it as it is; its running state and autostart flag are still made right.
    type: str
    choices: [replace, ignore]
    default: replace
  policy:
    description:
      - The proxy's policy, the files its service enforces (its C(squid.conf), a users file, ACL lists), and the
        programs that check and load them. It is kept apart from the machine; it is not part of the spec digest, so
        changing it never replaces the VM.
      - A new VM gets the files in its seed, in an extra cloud-config part of the user-data whose C(write_files) are
        deferred until after the packages are installed (a configuration file written before its package would be
        taken for one the user changed). O(user_data) must then not be a MIME multi-part archive itself; such
        user-data is refused.
      - A running VM gets a change in place, through the qemu guest agent over the module's own libvirt connection
        (O(uri)); nothing connects to the guest by SSH. Each file to write is staged as C(<path>.kvm-new) and moved
        into place, the old file kept as C(<path>.kvm-old); then O(policy.validate) runs. When it fails, the old
        files come back and the task fails, naming the proxy and quoting the last lines O(policy.validate) wrote.
        Otherwise the old files are removed and O(policy.reload) runs (action V(apply policy)).
      - The files are read back from a running VM on every run, in check mode too. A file changed by hand in the
        guest is drift; it is listed in RV(egress_proxies.kvm.kvm_proxy#module:policy_drift), check mode predicts
        V(apply policy), and the run writes it back.
      - The policy's digest (a sha256 over each file's path, owner, group, mode and content) is recorded in the
        domain's metadata (C(policyDigest)) when the VM is defined and after each apply, and returned as
        RV(egress_proxies.kvm.kvm_proxy#module:policy_digest). When the recorded digest is not the requested one,
        every file is written and O(policy.reload) runs, even where the guest's copy already matches.
      - A stopped VM that this run starts gets a policy it does not hold once its guest agent answers, within
        O(wait_timeout), before it counts as up. So does a running VM created less than O(wait_timeout) ago whose
        guest agent does not answer yet, unless O(on_unreachable_agent=replace), since its first boot may still be
        going on (many images start the agent at its end), as on a run right after the one that created it.
      - A VM left stopped (O(state=stopped)) gets its seed written again with the new files (action V(write seed)), and
        the policy when a later run starts it.
      - Any other running VM whose guest agent does not answer is handled as O(on_unreachable_agent) says.
      - What the guest agent answers is the guest's word. A reply of the wrong shape, a read that makes no progress
        or more bytes than asked fails naming the proxy and what its guest did (C(error_kind=guest_protocol)). All
        the agent exchanges with one proxy in a run may take O(wait_timeout) plus 120 seconds
        (C(error_kind=guest_timeout) beyond). Either counts as an agent that does not answer.
      - Without O(policy), the policy files a VM holds are left as they are.
      - The guest must run qemu-guest-agent (the default O(vendor_data) installs it). Reading the files uses the
        agent commands C(guest-ping), C(guest-file-open), C(guest-file-read) and C(guest-file-close); applying them
        also C(guest-file-write), C(guest-exec) and C(guest-exec-status). libvirt marks a domain tainted
        (C(custom-ga-command)) after such commands; that is a note in the domain's log, nothing more.
      - The diff shows the files under C(policy), before (as read from the guest, when it was) and after; a file given
        as O(policy.files[].secret_content) appears as V((secret, sha256 <digest>\)) only.
    type: dict
    suboptions:
      files:
        description:
          - The policy's files, each written whole, with its owner, group and mode. At least one.
        type: list
        elements: dict
        required: true
        suboptions:
          path:
            description:
              - Absolute path of the file in the guest, of plain names (letters, digits and C(.), C(_), C(@), C(+),
                C(-); no C(.) or C(..) component). Each path at most once.
            type: str
            required: true
          content:
            description:
              - The file's content, UTF-8 text. Shown in the diff.
              - Exactly one of O(policy.files[].content) and O(policy.files[].secret_content) is required.
            type: str
          secret_content:
            description:
              - The file's content when it is a secret (a users file with password hashes, a key), UTF-8 text.
              - It is C(no_log), never returned or logged; the diff shows its sha256 only. Like O(user_data), it is
                written into the seed of a new VM.
            type: str
          owner:
            description: User that owns the file in the guest (a POSIX user name).
            type: str
            default: root
          group:
            description: Group of the file in the guest (a POSIX group name).
            type: str
            default: root
          mode:
            description:
              - Permissions of the file, an octal mode of three or four digits such as V('0640'). Give it quoted, as a
                string.
            type: str
            default: '0644'
      validate:
        description:
          - A program and its arguments (run without a shell) that checks the new files in the guest once they are in
            place and before O(policy.reload), for example V(['/usr/sbin/squid', '-k', 'parse']).
          - When it exits non-zero, the old files are put back and the task fails with its output. They are put
            back too when the apply stops anywhere before this check passed (the guest agent gone, too slow, or
            breaking the protocol); when even that cannot run, the task says the new files stay in place, not
            loaded, and the next run puts the old ones back before it applies again.
          - It must finish within 10 minutes.
        type: list
        elements: str
      reload:
        description:
          - A program and its arguments (run without a shell) that makes the service read the new files, for example
            V(['/bin/systemctl', 'reload-or-restart', 'squid']). It runs whenever a file was written.
          - It must finish within 3 minutes; when it fails the task fails, and the next run writes the files and
            reloads again.
        type: list
        elements: str
      release:
        description:
          - A program and its arguments (run without a shell) that the guest runs before this task shuts the running
            VM down to stop or replace it (action V(release service)), while the VM still serves. A proxy that shares a
            client address with others hands that address over this way, returning once another one serves it.
          - When it exits non-zero, the task fails for this proxy with its output, and the VM is left as it was
            (running, not replaced). When the guest agent does not answer, the VM is shut down without it, with a
            warning.
          - It must finish within 10 minutes.
        type: list
        elements: str
      group:
        description:
          - The HA group this proxy is a member of, the client address it shares with other proxies (keepalived in the
            guests hands it over; the C(egress_proxies.kvm.egress_proxy) role's C(egress_proxy_ha_groups) sets it for
            each member). It names the group; the guest's files do the rest.
          - Part of the policy, it is covered by the policy's digest, so joining, leaving or changing a group is applied
            in place like a change of the files (action V(apply policy)), never by replacing the VM.
          - It is recorded in the domain's metadata beside the policy's digest (C(haGroup)), so
            M(egress_proxies.kvm.kvm_proxy_info) and the P(egress_proxies.kvm.kvm_proxies#inventory) inventory report it
            (RV(egress_proxies.kvm.kvm_proxy_info#module:proxies[].ha_group)) and whether the guest holds the address
            (RV(egress_proxies.kvm.kvm_proxy_info#module:proxies[].ha_holder)). A VM recorded before this option reads as
            a member of no group.
          - A value that is not as described below fails the task before anything is touched, naming the option.
        type: dict
        suboptions:
          name:
            description:
              - The group's name, 1 to 15 lowercase letters, digits and C(-), starting with a letter or digit.
            type: str
            required: true
          address:
            description:
              - The group's client IPv4 address, without prefix length, such as V(198.18.40.10).
              - Checked as text before it is parsed, ASCII digits and dots only (no blank, control character, other
                script's digits or prefix); an unspecified, loopback, multicast or link-local address is refused.
            type: str
            required: true
          address6:
            description:
              - The group's client IPv6 address, without prefix length, such as V(2001:db8:40::10); none when not given.
              - Checked as O(policy.group.address) is (ASCII hex digits and colons, no C(%scope)).
            type: str
      pooled_addresses:
        description:
          - The egress addresses a pool gave the profiles of the proxy's policy, by profile name, each a dictionary of
            C(egress_address) (IPv4), C(egress_address6) (IPv6) or both, without prefix length (the profile C(backup)
            with V(203.0.113.12) is C(backup) mapped to C(egress_address) V(203.0.113.12)). The
            C(egress_proxies.kvm.egress_proxy) role sets it for each profile whose C(egress_address) or
            C(egress_address6) is V(pool); the policy's files put the addresses to use.
          - Part of the policy, it is covered by the policy's digest, and recorded in the domain's metadata beside it
            (C(pooledAddresses)), so M(egress_proxies.kvm.kvm_proxy_info) reports it
            (RV(egress_proxies.kvm.kvm_proxy_info#module:proxies[].pooled_addresses)) and the role's next allocation
            keeps the addresses, across replacements too, and gives them to no other proxy. Without it (or empty) the
            digest and the metadata are what they were before this option.
          - M(egress_proxies.kvm.kvm_proxy_set) refuses, before anything of the set is touched, a proxy with an address
            here that its own domain does not record yet and another domain of the hypervisor records (as its egress
            address or one of its profiles'), as two runs of one pool at once would give.
          - A key that is not a profile's name (1 to 32 lowercase letters, digits and C(-), starting with a letter), a
            value with another key, or an address that is not an address of its family written as text (no prefix
            length, no C(%scope), no blank) fails the task before anything is touched, naming the entry.
        type: dict
  on_unreachable_agent:
    description:
      - What to do, when O(policy) is given, with a running VM whose guest agent does not answer, breaks the
        protocol or is too slow.
      - V(fail) - when the VM's recorded policy digest is not the requested one, the task fails naming the proxy
        (M(egress_proxies.kvm.kvm_proxy_set) first applies the policy to its other proxies); the VM keeps the policy
        it had. When the recorded policy is the requested one, the VM is kept and a warning says its files could not be
        read back, so whether they were changed in the guest is unknown.
      - V(replace) - when the VM's recorded policy digest is not the requested one, the VM is replaced, with a
        warning, by one that gets the policy in its seed. When it is the requested one, the VM is kept with the warning
        above.
    type: str
    choices: [fail, replace]
    default: fail
  force:
    description:
      - Replace or delete a domain of this name even when this collection did not create it, or when it records another
        owner O(uid). Its overlay and seed are deleted only by their names, C(<name>.qcow2) and C(<name>-seed.iso).
    type: bool
    default: false
"""
