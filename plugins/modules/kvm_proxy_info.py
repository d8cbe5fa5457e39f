#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kvm_proxy_info
short_description: List the egress-proxy VMs on a libvirt hypervisor
version_added: 0.1.0
description:
  - Answers the question of what runs where. It reports every domain on the hypervisor that carries this collection's
    metadata, with its state, IPv4 address, owner, creation time, size, disks, NICs (each with its role and address,
    and which is the egress one), autostart flag, spec digest and policy digest, the egress addresses a pool gave its
    profiles, and, for a member of an HA group, its group and whether it holds the group's address.
  - With O(name), reports that one domain, or an empty list and RV(found=false) when there is none.
  - The state is the collection's mapping of libvirt's state. V(Running) means running or blocked B(and) a
    routable IPv4 is known; V(Provisioning) means running without an address yet, or a state libvirt could not
    determine (C(nostate)); V(Stopped) is everything else (shut off, paused, crashed, suspended, shutting down).
  - The address comes from the host's ARP table first and the guest agent second. A guest that has sent no traffic
    yet or whose agent is not up yet simply has no address; RV(proxies[].ip_sources) says what each source answered.
  - A domain that disappears while the hypervisor is listed, or whose definition or state cannot be read, is left out
    with a warning, so one broken domain does not hide the others. A hypervisor that cannot be reached, or stops
    answering during the listing, fails the task, so nothing built on this result acts on a partial view.
options:
  name:
    description:
      - Report only the domain of this name.
      - The domain is reported whether or not this collection manages it; RV(proxies[].managed) tells.
      - When there is no such domain, the task succeeds with RV(proxies=[]) and RV(found=false).
    type: str
  uid:
    description:
      - Report only the VMs recorded as owned by this uid (the O(egress_proxies.kvm.kvm_proxy#module:uid) they were created with).
      - Domains not managed by this collection have no owner, so they never match.
    type: str
  include_unmanaged:
    description:
      - Also report the domains that do not carry this collection's metadata, with RV(proxies[].managed=false).
      - Ignored with O(name), which reports the named domain either way.
    type: bool
    default: false
  host:
    description:
      - The hypervisor's name in the returned ids (C(hosts/<host>/domains/<name>)).
      - Use the name other tasks and the inventory use for this hypervisor, so ids compare equal across results.
      - Defaults to the host name libvirt reports for the hypervisor.
    type: str
extends_documentation_fragment:
  - egress_proxies.kvm.common
  - egress_proxies.kvm.info_module
notes:
  - Each domain costs a small constant number of libvirt calls (its definition once, which also carries the
    metadata; its state; its autostart flag; one or two address lookups when it runs, for all of its NICs at once),
    whatever the size of the fleet. A running member of an HA group costs one guest agent lookup more when the ARP
    table gave its addresses (the agent tells whether it holds the group's address); a proxy in no group, none.
  - The list is sorted by domain name.
seealso:
  - module: egress_proxies.kvm.kvm_proxy
    description: Create, replace, stop and delete the proxy VMs this module lists.
  - plugin: egress_proxies.kvm.kvm_proxies
    plugin_type: inventory
    description: The same listing as Ansible inventory hosts, across several hypervisors.
"""

EXAMPLES = r"""
- name: List the proxies on the hypervisor the play runs on
  egress_proxies.kvm.kvm_proxy_info:
  register: fleet

- name: Show where each proxy runs and how to reach it
  ansible.builtin.debug:
    msg: "{{ item.id }} is {{ item.state }} at {{ item.ip | default('no address yet', true) }}"
  loop: "{{ fleet.proxies }}"
  loop_control:
    label: "{{ item.name }}"

- name: Look at one proxy from the controller, over SSH
  egress_proxies.kvm.kvm_proxy_info:
    name: proxy-eu-1
    uri: qemu+ssh://root@nas1.example.net/system
    host: nas1
  delegate_to: localhost
  register: proxy

- name: Fail unless it is up
  ansible.builtin.assert:
    that:
      - proxy.found
      - proxy.proxies[0].state == 'Running'
    fail_msg: "proxy-eu-1 is {{ proxy.proxies[0].state | default('absent') }}"

- name: The proxies of one owner (listed by name; the next task sorts them oldest first)
  egress_proxies.kvm.kvm_proxy_info:
    uid: 6f1c2a7e-4b1d-4f7a-9d8e-0c3b5a1e2f44
  register: owned

- name: Delete that owner's stopped proxies, oldest first
  egress_proxies.kvm.kvm_proxy:
    name: "{{ item.name }}"
    state: absent
    uid: 6f1c2a7e-4b1d-4f7a-9d8e-0c3b5a1e2f44
  loop: "{{ owned.proxies | selectattr('state', 'equalto', 'Stopped') | sort(attribute='created_at') }}"
  loop_control:
    label: "{{ item.id }}"

- name: Which member of each HA group holds the group's address
  ansible.builtin.debug:
    msg: "{{ item.name }} holds {{ item.ha_group.address }} ({{ item.ha_group.name }})"
  loop: "{{ fleet.proxies | selectattr('ha_holder') }}"
  loop_control:
    label: "{{ item.name }}"

- name: Everything defined on the hypervisor, including hand-made domains
  egress_proxies.kvm.kvm_proxy_info:
    include_unmanaged: true
  register: everything

# Ad hoc, from the command line:
#   ansible hypervisors -m egress_proxies.kvm.kvm_proxy_info
#   ansible hypervisors -m egress_proxies.kvm.kvm_proxy_info -a 'name=proxy-eu-1'
"""

RETURN = r"""
host:
  description: The hypervisor's name used in the ids (O(host), or libvirt's host name).
  returned: always
  type: str
  sample: nas1
found:
  description: Whether at least one domain matched. With O(name), whether that domain exists (and matches O(uid)).
  returned: always
  type: bool
  sample: true
proxies:
  description: One entry per domain, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description:
        - C(hosts/<host>/domains/<name>), the id the other modules of this collection take.
        - V(null) for a domain whose name this collection could not have created (uppercase, underscores and so on).
      type: str
      sample: hosts/nas1/domains/proxy-eu-1
    name:
      description: The libvirt domain name (for the proxies, also the guest's host name).
      type: str
      sample: proxy-eu-1
    host:
      description: The hypervisor's name, as in RV(host).
      type: str
      sample: nas1
    state:
      description:
        - V(Running) (running or blocked, with a routable IPv4), V(Provisioning) (running without an address yet, or
          libvirt's C(nostate)), or V(Stopped) (anything else).
      type: str
      sample: Running
    libvirt_state:
      description:
        - libvirt's own state, as C(virsh domstate) names it without spaces.
        - One of C(nostate), C(running), C(blocked), C(paused), C(shutdown), C(shutoff), C(crashed), C(pmsuspended).
      type: str
      sample: running
    ip:
      description:
        - The first routable IPv4 of the domain's (first) NIC, from ARP or the guest agent; V(null) when none is known.
        - Its IPv6 when that NIC was created IPv6-only
          (O(egress_proxies.kvm.kvm_proxy#module:interfaces[].address6) alone).
      type: str
      sample: 198.18.0.123
    ipv6:
      description:
        - The routable IPv6 of the domain's first NIC, from the guest agent; looked up only for a NIC created with
          O(egress_proxies.kvm.kvm_proxy#module:interfaces[].address6), else V(null) (as while none is known).
      type: str
      sample: 2001:db8:11::70
    ip_sources:
      description:
        - What each address source answered, in the order asked (C(arp), then C(agent)); empty for a domain that is not running.
        - A value is either the address or why there is none, such as C(no address yet) or
          C(guest agent not responding (VIR_ERR_AGENT_UNRESPONSIVE)).
      type: dict
      sample: {"arp": "no address yet", "agent": "198.18.0.123"}
    managed:
      description: Whether the domain carries this collection's metadata with the managed flag set.
      type: bool
      sample: true
    uid:
      description: The owner recorded when the VM was created; V(null) for unmanaged domains.
      type: str
      sample: 6f1c2a7e-4b1d-4f7a-9d8e-0c3b5a1e2f44
    created_at:
      description:
        - When the VM was created, RFC 3339 in UTC; V(null) for unmanaged domains.
        - A malformed timestamp in the metadata reads as C(0001-01-01T00:00:00Z), the oldest possible time.
      type: str
      sample: "2026-09-04T14:04:00Z"
    spec_digest:
      description: The sha256 of the spec the VM was built from (kvm_proxy compares it to detect drift); V(null) when absent.
      type: str
      sample: 3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855a
    policy_digest:
      description:
        - The sha256 of the policy the VM was last given (the O(egress_proxies.kvm.kvm_proxy#module:policy) of
          M(egress_proxies.kvm.kvm_proxy), in its seed or applied through the guest agent), as recorded in its metadata;
          V(null) when none is recorded.
        - It says what the VM was given, not what its files hold now; M(egress_proxies.kvm.kvm_proxy) reads those back.
      type: str
      sample: 9b2d6f0e1a3c5b7d9f1e3a5c7b9d1f3e5a7c9b1d3f5e7a9c1b3d5f7e9a1c3b5d
    ha_group:
      description:
        - The HA group the proxy is a member of, as its metadata records it (O(egress_proxies.kvm.kvm_proxy#module:policy.group),
          which the C(egress_proxies.kvm.egress_proxy) role sets for each member of C(egress_proxy_ha_groups)), with
          its C(name), C(address) (the client IPv4 it shares with the other members) and C(address6) (V(null) when
          the group has none).
        - V(null) for a proxy in no group, one recorded before groups were, and an unmanaged domain.
      type: dict
      sample: {"name": "demo", "address": "198.18.40.10", "address6": null}
      contains:
        name:
          description: The group's name.
          type: str
          sample: demo
        address:
          description: The group's client IPv4 address, without prefix length.
          type: str
          sample: 198.18.40.10
        address6:
          description: The group's client IPv6 address, without prefix length; V(null) when it has none.
          type: str
          sample: 2001:db8:40::10
    pooled_addresses:
      description:
        - The egress addresses a pool gave the proxy's profiles, as its metadata records them
          (O(egress_proxies.kvm.kvm_proxy#module:policy.pooled_addresses), which the C(egress_proxies.kvm.egress_proxy)
          role sets for each profile whose C(egress_address) or C(egress_address6) is V(pool)), by profile name, each
          with C(egress_address) (IPv4), C(egress_address6) (IPv6) or both, without prefix length.
        - Empty for a proxy without such a profile, one recorded before this was, an unmanaged domain, and one whose
          record is not what the collection writes (edited by hand).
      type: dict
      sample: {"backup": {"egress_address": "203.0.113.12", "egress_address6": "2001:db8:20::12"}}
    ha_holder:
      description:
        - Whether the proxy holds its group's address now, the one clients reach the group on.
        - V(true) when the running guest's agent reports RV(proxies[].ha_group.address) (or C(address6)) on one of its
          NICs, V(false) when the agent answers without it.
        - V(null) when that is not known (the domain is not running, or its guest agent does not answer) and for a
          proxy in no group.
        - The guest's word at the moment of the lookup; a hand-over (keepalived) may move the address a second later.
          A group with no member or two members holding its address is worth an alert.
      type: bool
      sample: true
    vcpus:
      description: Virtual CPUs in the domain definition.
      type: int
      sample: 1
    memory_mib:
      description: Memory of the domain definition, in MiB.
      type: int
      sample: 512
    disks:
      description: The domain's disks in device order.
      type: list
      elements: dict
      contains:
        device:
          description: C(disk) or C(cdrom).
          type: str
          sample: disk
        target:
          description: The guest device name.
          type: str
          sample: vda
        pool:
          description: The storage pool of a pool-backed disk; V(null) for a disk given by path.
          type: str
          sample: default
        volume:
          description: The volume of a pool-backed disk; V(null) for a disk given by path.
          type: str
          sample: proxy-eu-1.qcow2
        path:
          description: The file or device of a disk given by path; V(null) for a pool-backed disk.
          type: str
          sample: null
      sample:
        - {"device": "disk", "target": "vda", "pool": "default", "volume": "proxy-eu-1.qcow2", "path": null}
        - {"device": "cdrom", "target": "sda", "pool": "default", "volume": "proxy-eu-1-seed.iso", "path": null}
    macs:
      description: MAC addresses of the domain's NICs in device order; RV(proxies[].ip) is the first one's address.
      type: list
      elements: str
      sample: ["52:54:00:12:34:56"]
    interfaces:
      description:
        - Every NIC of the domain in device order (the first is the boot NIC), as M(egress_proxies.kvm.kvm_proxy)
          returns them.
        - Each address comes from the same lookups as RV(proxies[].ip) (the ARP table, then the guest agent, each asked
          once for all the NICs); V(null) while none is known, and for a domain that is not running.
      type: list
      elements: dict
      contains:
        mac:
          description: The NIC's MAC address.
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
          description:
            - The role the VM was created with (O(egress_proxies.kvm.kvm_proxy#module:interfaces[].role)), such as
              V(inside) or V(outside); V(null) when it was given none, and for unmanaged domains.
          type: str
          sample: inside
        ipv4:
          description:
            - The NIC's static IPv4 (O(egress_proxies.kvm.kvm_proxy#module:interfaces[].address)) where the guest has it,
              else its first routable IPv4; V(null) when none is known. A NIC may carry more addresses (a profile's
              egress addresses of the egress_proxy role), which are not reported.
          type: str
          sample: 198.18.11.70
        ipv6:
          description:
            - The NIC's routable IPv6, from the guest agent; looked up only for a NIC created with
              O(egress_proxies.kvm.kvm_proxy#module:interfaces[].address6), else V(null) (as while none is known).
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
        - The IPv4 of the egress NIC (RV(proxies[].interfaces[].egress)), the address IPv4 destinations see (its IPv6
          when it is IPv6-only); with one NIC the same as RV(proxies[].ip). V(null) when none is known.
      type: str
      sample: 198.18.21.70
    egress_ipv6:
      description:
        - The IPv6 of the egress NIC, the address IPv6 destinations see; V(null) when it has no static IPv6 or it is not
          known (yet).
      type: str
      sample: 2001:db8:21::70
    egress_address:
      description:
        - The static address of the egress NIC as the domain's recorded spec gives it, without its prefix (its IPv6 when
          it is IPv6-only), whether or
          not the domain runs; V(null) for an egress NIC on DHCP and for a domain this collection did not create. The
          egress_proxy role reads it to keep each proxy's address from a pool.
      type: str
      sample: 198.18.21.70
    egress_address6:
      description:
        - The static IPv6 address of the egress NIC as the VM's metadata records it, without its prefix; V(null) when
          it has none. Beside RV(proxies[].egress_address) on a dual-stack NIC.
      type: str
      sample: 2001:db8:21::70
    autostart:
      description: Whether libvirt starts the domain when the hypervisor boots.
      type: bool
      sample: true
"""

from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.info import ProxyInfoTask, kvm_proxy_info_argument_spec

ARGUMENT_SPEC = kvm_proxy_info_argument_spec()


def main():
    ProxyInfoTask.main(ARGUMENT_SPEC)


if __name__ == "__main__":
    main()
