#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kvm_seed
short_description: Keep a VM's cloud-init NoCloud seed ISO in a libvirt storage pool
version_added: 0.1.0
description:
  - Renders a cloud-init NoCloud seed (files C(user-data), C(meta-data), C(vendor-data), and C(network-config) when
    given) and keeps it as the raw volume C(<name>-seed.iso) in a libvirt storage pool.
  - The ISO image (volume label C(cidata), Rock Ridge and Joliet names, readable by Linux isofs as cloud-init mounts
    it) is built in memory and uploaded through libvirt's stream. Nothing is installed or written to a temporary file
    on the hypervisor, so it works on every pool type and against remote hypervisors.
  - Idempotent by content. The existing volume is read back through libvirt, parsed and compared file by file with
    the files this task renders. The same files leave it untouched, whatever build time its image carries. Different
    files, or a volume that is not a complete seed (for example one whose upload was cut off), are replaced.
  - This module manages the seed volume only. M(egress_proxies.kvm.kvm_proxy) makes the seed of the VMs it creates
    itself; use this module for VMs defined in other ways.
extends_documentation_fragment:
  - egress_proxies.kvm.common
attributes:
  check_mode:
    support: full
    details:
      - Reads the existing volume back and predicts whether it would be replaced, without changing the pool.
  diff_mode:
    support: full
    details:
      - Shows the volume's state and, per file, its sha256 and size before and after.
      - File contents are shown only with O(diff_content=true).
  idempotent:
    support: full
options:
  name:
    description:
      - Name of the VM the seed is for. The volume is C(<name>-seed.iso), and O(name) is the default C(instance-id)
        and C(local-hostname) of the meta-data.
      - 1-63 lowercase letters, digits and hyphens, starting and ending with a letter or digit.
    type: str
    required: true
  pool:
    description:
      - Name of the libvirt storage pool that holds the seed volume. It must exist.
    type: str
    default: default
  state:
    description:
      - V(present) makes the seed volume hold exactly the rendered files.
      - V(absent) deletes the seed volume. A missing pool or volume is nothing to do.
      - A seed volume that a domain (defined or running) has as a disk, by pool and volume name or by path, is not
        deleted with V(absent); the task fails naming the domain, and check mode predicts the same failure. Remove
        the domain first (M(egress_proxies.kvm.kvm_proxy) with O(state=absent) removes a proxy and its seed).
    type: str
    choices: [present, absent]
    default: present
  user_data:
    description:
      - cloud-init user-data.
      - A string is written verbatim (a C(#cloud-config) document, a script, or a multi-part archive).
      - A dictionary is cloud-config, written as C(#cloud-config) followed by the dictionary as JSON with sorted keys,
        which cloud-init reads as YAML. The same dictionary always writes the same bytes, whatever its keys' order.
      - Any other type (a list, a number) is refused.
      - >-
        A string must be UTF-8 text (no control characters but tab, line feed and carriage return) of at most 1 MiB,
        and start with a line cloud-init acts on (C(#cloud-config), C(#!), C(#include), C(#cloud-boothook),
        C(#part-handler), C(#upstart-job), C(## template: jinja), or a MIME multi-part archive); anything else, such
        as YAML without the C(#cloud-config) line, cloud-init would ignore, so it is refused before anything is
        touched. The same limits hold for O(vendor_data), and text and size for O(network_config).
      - An empty string still writes an empty C(user-data) file, which NoCloud requires.
      - It often holds secrets, so it is declared C(no_log) and never returned, warned about or logged; results and
        diffs show its sha256 only. See O(diff_content) to see it in a diff.
    type: raw
    default: ""
  meta_data:
    description:
      - Extra meta-data keys, merged over C(instance-id) and C(local-hostname), which both default to O(name).
      - A stable C(instance-id) is what keeps cloud-init from taking a reboot for a new instance; changing it makes
        cloud-init run its per-instance modules again on the next boot.
      - Written as JSON with sorted keys, which cloud-init reads as YAML.
      - It may hold secrets (a token the guest reads), so, like O(user_data), it is C(no_log), never returned or
        logged, and in results and diffs shown by its sha256 only (see O(diff_content)).
      - A C(no_log) dictionary (here, or as O(user_data) or O(vendor_data)) is masked whole, as one document, where the
        task's arguments are shown. Ansible would otherwise mask each of its values wherever it appears in the
        result, so that a value such as V(proxy) or V(1) would turn the volume name V(proxy-1-seed.iso) or a size into
        C(********).
    type: dict
  vendor_data:
    description:
      - cloud-init vendor-data. cloud-init merges it under the user-data.
      - A string is written verbatim; a dictionary is cloud-config, written as O(user_data) writes one. Any other type
        is refused.
      - When not set, a cloud-config that installs and starts qemu-guest-agent, through which the VM's address can be
        read before the host has seen its traffic. An empty string writes an empty vendor-data.
      - It may hold secrets (a C(bootcmd) with a token), so it is declared C(no_log), like O(user_data).
    type: raw
  network_config:
    description:
      - cloud-init network configuration (version 1 or 2), written as C(network-config).
      - A string is written verbatim; a dictionary is written as JSON with sorted keys, which cloud-init reads as YAML.
      - When not set the file is left out, and cloud-init configures DHCP on the first NIC.
    type: raw
  diff_content:
    description:
      - In diff mode, also show the changed files' contents, as a unified diff of each file.
      - >-
        Off by default because user-data, vendor-data and meta-data often hold secrets. To see a change before making it, set O(diff_content)
        to a variable that is false in the play, for example C({{ show_seed_content }}), and run
        C(ansible-playbook --check --diff -e show_seed_content=true) where the output stays private.
      - The contents before the change (read back from the volume) are shown in full. Ansible still masks any text
        identical to the whole O(user_data) value with C(********); the diff of a multi-line user-data shows each line
        on its own, so only a one-line user-data stays masked.
      - Files that are not UTF-8 text are shown as their sha256 only.
    type: bool
    default: false
notes:
  - cloud-init reads the seed when the VM boots. A changed seed takes effect on the VM's next boot, and
    per-instance configuration (users, packages, C(runcmd)) runs again only when the C(instance-id) changes.
  - A seed volume that a running VM has attached is replaced all the same; the VM keeps reading the old image until it
    is restarted.
  - Attach the seed as a cdrom on a virtio-scsi controller. Debian's and Ubuntu's cloud kernels have no AHCI driver,
    so a SATA cdrom is invisible to them and cloud-init falls back to no datasource.
  - pycdlib stamps the build time into the image, so two builds of the same files are not byte-identical. The module
    compares files, never image bytes.
requirements:
  - pycdlib (Debian/Ubuntu package C(python3-pycdlib), RHEL from EPEL, or C(pycdlib) from PyPI) on the host that runs
    the module.
seealso:
  - module: egress_proxies.kvm.kvm_proxy
    description: Creates egress proxy VMs, including their seed volume.
  - module: egress_proxies.kvm.kvm_base_image
    description: Caches the cloud image the VM boots from.
  - name: cloud-init NoCloud datasource
    description: How cloud-init finds and reads a C(cidata) seed.
    link: https://docs.cloud-init.io/en/latest/reference/datasources/nocloud.html
"""

EXAMPLES = r"""
- name: Seed proxy-1 with a cloud-config that installs squid
  egress_proxies.kvm.kvm_seed:
    name: proxy-1
    pool: default
    user_data: |
      #cloud-config
      packages: [squid]
      ssh_authorized_keys:
        - "{{ lookup('ansible.builtin.file', '~/.ssh/id_ed25519.pub') }}"
  register: seed

- name: Show where the seed volume is and what it holds
  ansible.builtin.debug:
    msg: "{{ seed.volume_path }}: {{ seed.files | map(attribute='name') | join(', ') }}"

- name: Seed proxy-3 with cloud-config given as a dictionary (written as a cloud-config document)
  egress_proxies.kvm.kvm_seed:
    name: proxy-3
    user_data:
      packages: [squid]
      runcmd:
        - [systemctl, enable, --now, squid]
    vendor_data:
      packages: [qemu-guest-agent]

- name: Seed with a static address and no vendor-data, on a remote hypervisor
  egress_proxies.kvm.kvm_seed:
    uri: qemu+ssh://root@hv1.example.net/system
    name: proxy-2
    user_data: "{{ lookup('ansible.builtin.template', 'proxy-user-data.yml.j2') }}"
    vendor_data: ""
    meta_data:
      local-hostname: proxy-2.egress.example.net
    network_config:
      version: 2
      ethernets:
        primary:
          match:
            name: "en*"
          addresses: [192.0.2.12/24]
          routes:
            - to: default
              via: 192.0.2.1
          nameservers:
            addresses: [192.0.2.53]
  delegate_to: localhost

- name: Preview a change with the files' contents (user-data may hold secrets; only where the output is private)
  egress_proxies.kvm.kvm_seed:
    name: proxy-1
    user_data: "{{ proxy_user_data }}"
    diff_content: true
  check_mode: true
  diff: true

- name: Remove the seed of a VM that is gone (fails, naming the domain, while a domain has it as a disk)
  egress_proxies.kvm.kvm_seed:
    name: proxy-1
    state: absent
"""

RETURN = r"""
volume:
  description: Name of the seed volume.
  returned: always
  type: str
  sample: proxy-1-seed.iso
volume_path:
  description:
    - Path of the seed volume on the hypervisor.
    - Null in check mode when the volume would be created, and with O(state=absent).
    - Not named C(path), which Ansible would take for a file on the host that runs the module.
  returned: always
  type: str
  sample: /var/lib/libvirt/images/proxy-1-seed.iso
size:
  description: Size of the seed volume in bytes (the ISO image's size when it is written).
  returned: state is present
  type: int
  sample: 71680
files:
  description: The files of the seed, in the order they are written.
  returned: state is present
  type: list
  elements: dict
  contains:
    name:
      description: File name on the seed.
      type: str
      sample: user-data
    sha256:
      description: sha256 of the file's content.
      type: str
      sample: 3b2c4d6e4ff6b6a9e03e1a04d8e5f3e0c1f53a87e7c1b7c0a4f1f3f7e2d1c0b9
    size:
      description: Size of the file in bytes.
      type: int
      sample: 512
previous_state:
  description:
    - What the task found where the seed volume should be.
    - V(absent) when there was no volume; V(unreadable) when it was not a complete seed, or larger than a seed is
      read back (16 MiB, or twice this seed's image when that is more); V(present) when its files were read.
  returned: state is present
  type: str
  choices: [absent, unreadable, present]
  sample: present
changed_files:
  description:
    - Names of the files added, removed or modified on the volume (in check mode, that would be), sorted.
    - When RV(previous_state) is V(present), the old files were read and compared by content, so only files whose
      content differs, and files added or removed, are listed.
    - When RV(previous_state) is V(absent) or V(unreadable), what the volume held is not known, and every file
      written is listed.
  returned: state is present
  type: list
  elements: str
  sample: [user-data]
reason:
  description: Why the volume was (or would be) written or deleted; null when nothing changed.
  returned: always
  type: str
  sample: "volume proxy-1-seed.iso is not a readable seed: the image is truncated: 40960 of the 71680 bytes its volume descriptor declares"
actions:
  description: The volume operations done on the seed, in order (in check mode, those a real run would do).
  returned: always
  type: list
  elements: str
  sample:
    - delete volume proxy-1-seed.iso
    - create volume proxy-1-seed.iso (71680 bytes)
    - upload seed to volume proxy-1-seed.iso
"""

from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.argspec import kvm_seed_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.task import SeedTask

ARGUMENT_SPEC = kvm_seed_argument_spec()


def main():
    SeedTask.main(ARGUMENT_SPEC)


if __name__ == "__main__":
    main()
