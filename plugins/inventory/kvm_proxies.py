# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: kvm_proxies
short_description: The egress-proxy VMs of libvirt hypervisors as Ansible hosts
version_added: 0.1.0
description:
  - Reads one or more libvirt hypervisors and yields one host per VM that carries this collection's metadata
    (the VMs M(egress_proxies.kvm.kvm_proxy) creates), so playbooks can configure the proxies themselves.
  - C(ansible_host) is the VM's IPv4 address (its IPv6 when its first NIC is IPv6-only), from the hypervisor's ARP table
    or the guest agent. A VM without a known address yet (still booting, or stopped) is still listed, without
    C(ansible_host); C(kvm_proxy_state) tells why.
  - Host variables, all prefixed C(kvm_proxy_), carry what M(egress_proxies.kvm.kvm_proxy_info) returns for the VM
    (C(kvm_proxy_id), C(kvm_proxy_name), C(kvm_proxy_hypervisor), C(kvm_proxy_uri), C(kvm_proxy_state),
    C(kvm_proxy_libvirt_state), C(kvm_proxy_ip), C(kvm_proxy_ipv6), C(kvm_proxy_ip_sources), C(kvm_proxy_uid),
    C(kvm_proxy_created_at),
    C(kvm_proxy_spec_digest), C(kvm_proxy_policy_digest), C(kvm_proxy_vcpus), C(kvm_proxy_memory_mib),
    C(kvm_proxy_disks), C(kvm_proxy_macs), C(kvm_proxy_interfaces), C(kvm_proxy_egress_ip), C(kvm_proxy_egress_ipv6),
    C(kvm_proxy_egress_address), C(kvm_proxy_egress_address6), C(kvm_proxy_autostart), C(kvm_proxy_ha_group),
    C(kvm_proxy_ha_holder)).
  - C(kvm_proxy_policy_digest) is the digest of the policy the VM was last given (O(egress_proxies.kvm.kvm_proxy#module:policy)),
    as recorded in its metadata; V(null) when none is recorded.
  - C(kvm_proxy_interfaces) lists every NIC in device order, as M(egress_proxies.kvm.kvm_proxy_info) returns it
    (C(mac), C(bridge), C(network), C(role), C(ipv4), C(ipv6), C(egress)); C(kvm_proxy_egress_ip) is the egress NIC's
    address, the one destinations see (the NIC with role C(outside), else the first), and C(kvm_proxy_egress_ipv6) its
    IPv6, the one IPv6 destinations see. C(ansible_host) stays the first NIC's.
  - A NIC's IPv6 (C(kvm_proxy_ipv6), C(ipv6)) is looked up, from the guest agent, only for a NIC the VM was created with
    a static IPv6 for (O(egress_proxies.kvm.kvm_proxy#module:interfaces[].address6)); else it is V(null).
  - C(kvm_proxy_egress_address) (and C(kvm_proxy_egress_address6)) is the egress NIC's static IPv4 (IPv6) address as
    the VM's metadata records it, known while the VM is stopped too; V(null) when it has none.
  - C(kvm_proxy_ha_group) is the HA group the VM is a member of (C(name), C(address), C(address6)), as its metadata
    records it (O(egress_proxies.kvm.kvm_proxy#module:policy.group)); V(null) for a VM in no group.
    C(kvm_proxy_ha_holder) says whether the VM holds its group's address now (V(true), V(false)), as its guest agent
    reports its NICs' addresses; V(null) when that is not known (not running, no agent answer) or it is in no group.
    Reading a running member costs one guest agent lookup more when the ARP table gave its addresses.
  - "Groups: C(kvm_proxies) (every proxy), C(kvm_hypervisor_<name>) per hypervisor, C(kvm_state_running),
    C(kvm_state_provisioning) and C(kvm_state_stopped) per state, C(kvm_owner_<uid>) per owner, and
    C(kvm_ha_group_<name>) per HA group (its members, holder or not). Characters not allowed in group names become
    underscores. O(compose), O(groups) and O(keyed_groups) add more."
  - The configuration file name must end in C(.kvm_proxies.yml) or C(.kvm_proxies.yaml).
author:
  - Contributors to the egress_proxies.kvm collection (!UNKNOWN)
requirements:
  - libvirt-python (Debian/Ubuntu/RHEL package C(python3-libvirt), or C(libvirt-python) from PyPI) and lxml, on the
    controller, in the Python that runs Ansible.
extends_documentation_fragment:
  - constructed
  - inventory_cache
options:
  plugin:
    description: The name of this plugin; it marks the file as this plugin's configuration.
    required: true
    type: str
    choices: [egress_proxies.kvm.kvm_proxies]
  hypervisors:
    description:
      - The hypervisors to read, each by its libvirt connection URI.
      - The controller connects to each one itself. For C(qemu+ssh://) URIs that means key-based SSH from the
        controller to the hypervisor (libvirt runs C(ssh) non-interactively; add C(?keyfile=/path/to/key) to the URI,
        or configure the key in C(~/.ssh/config)), and the host key must already be known to the controller.
      - Use C(qemu+ssh://), not C(qemu+libssh://), with libvirt 9.0 and libssh 0.10 (Debian 12). Measured here, the
        libssh transport hangs or crashes the process on replies over a few kilobytes, even one connection at a time.
        To check host keys against a known_hosts file of your own, point the URI's C(command=) at an ssh wrapper that
        passes C(-o UserKnownHostsFile=...) (docs/awx.md shows one).
      - Each entry is an SSH session and a libvirt handshake. With many entries, or an inventory read often, let ssh share
        one connection per hypervisor (C(ControlMaster auto), C(ControlPath), C(ControlPersist 60) in the ssh_config
        libvirt's ssh reads); later sessions then skip the key exchange. The lab does this (docs/performance.md, B6).
    type: list
    elements: dict
    default: [{uri: "qemu:///system"}]
    suboptions:
      uri:
        description: libvirt connection URI, for example V(qemu:///system) or V(qemu+ssh://root@nas1.example.net/system).
        type: str
        required: true
      name:
        description:
          - The hypervisor's name in ids, group names and messages.
          - Use the O(egress_proxies.kvm.kvm_proxy#module:host) your playbooks give, so C(kvm_proxy_id) matches their ids.
          - Defaults to the host name libvirt reports for the hypervisor.
        type: str
  uid:
    description: Only list the VMs recorded as owned by this uid.
    type: str
  qualify_hostnames:
    description:
      - Name each host C(<vm name>.<hypervisor name>) instead of C(<vm name>).
      - Needed when two hypervisors run VMs of the same name; without it, the second of two such VMs is refused
        (an error with O(strict), a warning without).
    type: bool
    default: false
  strict:
    description:
      - If V(true), a hypervisor that cannot be read fails the inventory source, and so do two VMs that would
        get the same host name and invalid O(compose), O(groups) or O(keyed_groups) expressions.
      - If V(false), a warning names the hypervisor and gives libvirt's message, and the other hypervisors are
        still listed; an invalid expression is skipped with a warning, and so is a O(keyed_groups) key whose value
        is a number (write C(kvm_proxy_vcpus | string) to group by one).
      - Use V(true) for inventories that clean-up jobs run against, so they never act on a partial view of the fleet.
        Ansible itself only warns about an inventory source that failed and goes on without it; set
        C(any_unparsed_is_failed = true) in the C([inventory]) section of C(ansible.cfg)
        (or C(ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED=true)) to make such a run stop.
    type: bool
    default: false
notes:
  - With O(cache) enabled, a listing in which a hypervisor could not be read is not written to the cache, so the next
    run asks again instead of serving the partial view until the cache expires.
  - A domain that disappears while a hypervisor is listed, or whose definition or state cannot be read, is left out
    with a warning; the other VMs of that hypervisor are still listed.
seealso:
  - module: egress_proxies.kvm.kvm_proxy_info
    description: The same listing from a task, for one hypervisor.
  - module: egress_proxies.kvm.kvm_proxy
    description: Create and delete the VMs this plugin lists.
"""

EXAMPLES = r"""
# The smallest configuration, the proxies on the controller's own hypervisor, is one line in
# proxies.kvm_proxies.yml:  plugin: egress_proxies.kvm.kvm_proxies

# fleet.kvm_proxies.yml: two hypervisors over SSH, one owner, cached for ten minutes
plugin: egress_proxies.kvm.kvm_proxies
hypervisors:
  - name: nas1
    uri: qemu+ssh://root@nas1.example.net/system?keyfile=/home/ops/.ssh/hypervisors
  - name: nas2
    uri: qemu+ssh://root@nas2.example.net/system?keyfile=/home/ops/.ssh/hypervisors
uid: 6f1c2a7e-4b1d-4f7a-9d8e-0c3b5a1e2f44
strict: true
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/ansible-inventory
cache_timeout: 600
compose:
  ansible_user: "'debian'"
  # The address a member's HA group is reached on.
  ha_address: kvm_proxy_ha_group.address if kvm_proxy_ha_group else none
keyed_groups:
  - key: kvm_proxy_libvirt_state
    prefix: libvirt
  # The members of each HA group as ha_<name> (kvm_ha_group_<name> holds them too). A VM in no group gets none: its
  # key is an empty list, which strict accepts.
  - key: "[kvm_proxy_ha_group.name] if kvm_proxy_ha_group else []"
    prefix: ha
groups:
  reachable: kvm_proxy_ip is not none
  two_nics: kvm_proxy_interfaces | length > 1
  # The member of each HA group that holds the group's address now.
  ha_holders: kvm_proxy_ha_holder is true

# Then, for example:
#   ansible-inventory -i fleet.kvm_proxies.yml --graph
#   ansible -i fleet.kvm_proxies.yml kvm_state_running -m ansible.builtin.ping
"""

from ansible import template as ansible_template
from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.unsafe_proxy import wrap_var

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import KvmError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import validate_host_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import LIBVIRT_REQUIREMENT, Hypervisor
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.xml import LXML_REQUIREMENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.inventory import list_proxies, read_each, resolve_host

# ansible-core 2.19 and later (the releases with trust_as_template) trust no inventory plugin's data as a
# template unless the plugin marks it so.
PLUGIN_DATA_IS_UNTRUSTED = hasattr(ansible_template, "trust_as_template")

VAR_PREFIX = "kvm_proxy_"
ALL_GROUP = "kvm_proxies"

# Entry keys from _proxy.inventory that become host variables (with VAR_PREFIX), and their names.
_HOST_VARS = (
    ("id", "id"),
    ("name", "name"),
    ("host", "hypervisor"),
    ("state", "state"),
    ("libvirt_state", "libvirt_state"),
    ("ip", "ip"),
    ("ipv6", "ipv6"),
    ("ip_sources", "ip_sources"),
    ("uid", "uid"),
    ("created_at", "created_at"),
    ("spec_digest", "spec_digest"),
    ("policy_digest", "policy_digest"),
    ("vcpus", "vcpus"),
    ("memory_mib", "memory_mib"),
    ("disks", "disks"),
    ("macs", "macs"),
    ("interfaces", "interfaces"),
    ("egress_ip", "egress_ip"),
    ("egress_ipv6", "egress_ipv6"),
    ("egress_address", "egress_address"),
    ("egress_address6", "egress_address6"),
    ("autostart", "autostart"),
    ("ha_group", "ha_group"),
    ("ha_holder", "ha_holder"),
)
HA_GROUP_PREFIX = "kvm_ha_group_"


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    NAME = "egress_proxies.kvm.kvm_proxies"

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith((".kvm_proxies.yml", ".kvm_proxies.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        hypervisors = self._hypervisors()

        cache_key = self.get_cache_key(path)
        use_cache = self.get_option("cache")
        listing = None
        if use_cache and cache:
            listing = self._cache.get(cache_key)
        if listing is None:
            listing, complete = self._read_hypervisors(hypervisors)
            # A partial view is never cached: the next run should ask the missing hypervisor again.
            if use_cache and complete:
                self._cache[cache_key] = listing
        self._populate(listing)

    def _hypervisors(self):
        """The configured hypervisors, checked before any connection is made."""
        configured = self.get_option("hypervisors")
        if not configured:
            raise AnsibleParserError("%s: hypervisors is empty; list at least one {uri: ...}" % self.NAME)
        hypervisors = []
        for index, item in enumerate(configured):
            if not isinstance(item, dict) or not isinstance(item.get("uri"), str) or not item["uri"]:
                raise AnsibleParserError("%s: hypervisors[%d] needs a uri, for example {uri: 'qemu:///system'}" % (self.NAME, index))
            unknown = set(item) - {"uri", "name"}
            if unknown:
                raise AnsibleParserError("%s: hypervisors[%d] has unknown keys %s; use uri and name" % (self.NAME, index, ", ".join(sorted(unknown))))
            name = item.get("name")
            if name is not None:
                try:
                    validate_host_name(name)
                except KvmError as error:
                    raise AnsibleParserError("%s: hypervisors[%d]: %s" % (self.NAME, index, error.message)) from error
            hypervisors.append({"uri": item["uri"], "name": name})
        for library, install_hint, import_error in (LIBVIRT_REQUIREMENT, LXML_REQUIREMENT):
            if import_error is not None:
                raise AnsibleParserError(
                    "%s needs the Python library %s on the controller, in the Python that runs Ansible (%s)"
                    % (self.NAME, library, install_hint))
        return hypervisors

    def _read_hypervisors(self, hypervisors):
        """([{hypervisor, uri, proxies}], complete): complete is False when a hypervisor could not be read.

        The hypervisors are read at once (a few SSH sessions in parallel);
        warnings and errors are reported in the configured order.
        """
        listing = []
        complete = True
        for hypervisor, (read, error) in zip(hypervisors, read_each(self._read_hypervisor, hypervisors)):
            if error is not None:
                message = "%s: could not read hypervisor %s: %s" % (
                    self.NAME, hypervisor["name"] or hypervisor["uri"], error.message)
                if self.get_option("strict"):
                    raise AnsibleParserError(message) from error
                self.display.warning(message + "; its proxies are missing from this inventory")
                complete = False
                continue
            record, warnings = read
            for warning in warnings:
                self.display.warning("%s: %s" % (self.NAME, warning))
            listing.append(record)
        return listing, complete

    def _read_hypervisor(self, hypervisor):
        """(record, warnings) of one hypervisor; runs in a reader thread, so it reports nothing itself."""
        with Hypervisor.open(hypervisor["uri"]) as connection:
            name = resolve_host(connection, hypervisor["name"])
            proxies, warnings = list_proxies(connection, name, uid=self.get_option("uid"))
        return {"hypervisor": name, "uri": hypervisor["uri"], "proxies": proxies}, warnings

    def _populate(self, listing):
        strict = self.get_option("strict")
        qualify = self.get_option("qualify_hostnames")
        seen = {}
        self.inventory.add_group(ALL_GROUP)
        for record in listing:
            for proxy in record["proxies"]:
                hostname = "%s.%s" % (proxy["name"], record["hypervisor"]) if qualify else proxy["name"]
                if hostname in seen:
                    message = "%s: %s and %s would both be host %s; set qualify_hostnames: true to tell them apart" % (
                        self.NAME, seen[hostname], proxy["id"], hostname)
                    if strict:
                        raise AnsibleParserError(message)
                    self.display.warning(message + "; %s is left out" % proxy["id"])
                    continue
                seen[hostname] = proxy["id"]
                self._add_proxy(hostname, proxy, record["uri"], strict)

    def _add_proxy(self, hostname, proxy, uri, strict):
        self.inventory.add_host(hostname, group=ALL_GROUP)
        # .get: a listing cached by an older release lacks the keys added since (egress_ip, policy_digest, egress_address,
        # egress_address6, ipv6, egress_ipv6, ha_group, ha_holder).
        hostvars = {VAR_PREFIX + var: proxy.get(key) for key, var in _HOST_VARS}
        hostvars[VAR_PREFIX + "uri"] = uri
        if proxy["ip"]:
            hostvars["ansible_host"] = proxy["ip"]
        for var, value in hostvars.items():
            # What a hypervisor reports is data, never a template. Older releases need it marked; marking it
            # on 2.19 and later costs half the plugin's time per host and changes nothing.
            self.inventory.set_variable(hostname, var, value if PLUGIN_DATA_IS_UNTRUSTED else wrap_var(value))

        groups = ["kvm_hypervisor_" + proxy["host"], "kvm_state_" + proxy["state"].lower()]
        if proxy["uid"]:
            groups.append("kvm_owner_" + proxy["uid"])
        if proxy.get("ha_group"):
            groups.append(HA_GROUP_PREFIX + proxy["ha_group"]["name"])
        for group in groups:
            group = self.inventory.add_group(self._sanitize_group_name(group))
            self.inventory.add_child(group, hostname)

        self._set_composite_vars(self.get_option("compose"), hostvars, hostname, strict=strict)
        self._add_host_to_composed_groups(self.get_option("groups"), hostvars, hostname, strict=strict)
        for keyed in self.get_option("keyed_groups") or []:
            try:
                self._add_host_to_keyed_groups([keyed], hostvars, hostname, strict=strict)
            except AnsibleParserError as error:
                # ansible-core refuses a key that is not a string, list or dictionary (an integer such as
                # kvm_proxy_vcpus) even without strict; the docs promise such an entry is skipped.
                if strict:
                    raise
                self.display.warning("keyed_groups entry %r skipped for host %s: %s (a number needs '| string')" % (
                    keyed.get("key") if isinstance(keyed, dict) else keyed, hostname, error))
