#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kvm_base_image
short_description: Cache a cloud image in a libvirt storage pool, streamed and verified
version_added: 0.1.0
description:
  - Downloads a distro cloud image (qcow2 or raw) over HTTP(S) straight into a volume of a libvirt storage pool,
    through libvirt's upload stream. Nothing is buffered in memory or written to a temporary file, and no path on
    the hypervisor's filesystem is needed, so it works on every pool type and against remote hypervisors.
  - The sha256 of the body is computed on the way; a mismatch with O(checksum) deletes the volume and fails.
    The pool is then refreshed so libvirt reads the image's real virtual size, and a marker volume
    C(<base>.sha256) recording the verified digest is written last.
  - Images must be self-contained. A qcow2 image whose header names a backing file or an external data file
    would let every VM whose disk is an overlay on it read that file of the hypervisor, so it is refused from the
    first bytes of the download, before any volume is created, and the task fails naming the file. A base that
    libvirt still reports with a backing store after the pool refresh is deleted before its marker is written.
    Flatten such an image first (C(qemu-img convert -O qcow2)). A base cached with a backing store by an earlier
    version of this module fails the task, and is kept for the VMs that may use it, until it is removed with
    O(state=absent).
  - The image is ready when its base volume and a well-formed marker exist and, with O(checksum), the marker
    records that checksum. A ready image is never downloaded again. The leftovers of an interrupted run
    (a base without marker, a marker without base) are removed before fetching again. A base that VM disks back
    onto is never fetched again. When its marker is missing or does not match, its content is hashed where it lies
    and, matching O(checksum), its marker is written again; the task fails, changing nothing, when it does not
    match, and without O(checksum).
  - With O(checksum) the base volume is content-addressed, C(base-<name>-<first 16 hex of sha256>.<format>), so a
    new release is cached next to the old one and never overwrites a file that VM disks back onto. Without
    O(checksum) it is C(base-<name>.<format>) and is kept as first downloaded.
  - No base volume that another volume of the pool uses as its backing store is ever deleted by this module.
  - Concurrent runs for the same image and pool on the same machine (parallel playbooks, async tasks) download once;
    the second waits for the first and then finds the image ready.
extends_documentation_fragment:
  - egress_proxies.kvm.common
  - egress_proxies.kvm.image_download
attributes:
  check_mode:
    support: full
    details:
      - Predicts whether the image would be downloaded and which volumes would be removed, without changing the pool.
      - For an image that is not cached, check mode reads its header, the first bytes of O(url) (an HTTP
        C(Range) request; from a server that ignores it, only the first bytes of the response are read), so
        RV(size) is the image's virtual size and an image the real run would refuse (not self-contained, wrong
        format) fails in check mode too.
      - A O(checksum) of the form C(sha256:<URL>) is still fetched in check mode, because the digest names the volume.
  diff_mode:
    support: full
    details:
      - Shows the base volume, its sha256 and its state (V(absent), V(incomplete) or V(present)) before and after;
        with O(prune=true) or O(state=absent) also the image's base volumes in the pool.
  idempotent:
    support: full
options:
  name:
    description:
      - Name of the image in the cache, part of the volume names, for example V(debian-13) or V(ubuntu-24.04).
      - 1-128 lowercase letters, digits, C(.), C(_) or C(-), starting with a letter or digit, and not ending in C(-)
        followed by 16 hex digits (that is how cached volumes carry their checksum).
    type: str
    required: true
  url:
    description:
      - Where to download the image from. Only C(http://) and C(https://) URLs are accepted, and redirects to any
        other scheme are refused.
      - The server must send C(Content-Length) in ASCII digits, which every distro mirror does.
      - Control characters and blanks must be percent-encoded (C(%20)); a port must be written in ASCII digits.
      - The image must be self-contained (see the description).
      - Required with O(state=present), and with O(state=absent) when O(checksum) names a checksum file.
      - A password in the URL (V(https://user:password@host/...), sent as HTTP basic authentication) is masked
        (C(********)) in the task's arguments, results and messages, as it is in a checksum file's URL.
    type: str
  checksum:
    description:
      - The image's expected sha256, as V(sha256:<64 hex digits>), or V(sha256:<URL>) of a C(SHA256SUMS) file as distro
        mirrors publish them; the entry for the file name of O(url) is used.
      - Only sha256 is supported. Debian publishes C(SHA512SUMS) only, so pin its images with V(sha256:<64 hex digits>).
      - A digest of the wrong length or with a character that is not a hex digit fails before anything is fetched,
        saying how many of the 64 hex digits it has, or which character is wrong.
      - A checksum file that lists the image's file name twice with different digests is ambiguous, as C(sha256sum -c)
        would fail one of them, so the task fails naming both digests before the image is downloaded. The same digest
        listed twice is one entry.
      - With a checksum file that follows a C(current) or C(latest) release, a new release is downloaded into a new base
        volume on the next run; the old one stays until pruned (O(prune)).
      - Without a checksum the first download is kept forever, whatever the URL serves later.
    type: str
  format:
    description:
      - Disk format of the image. The first bytes of the download (the qcow2 header) are checked against it.
      - Ubuntu's C(.img) cloud images are qcow2.
    type: str
    choices: [qcow2, raw]
    default: qcow2
  pool:
    description:
      - Name of the libvirt storage pool that holds the base volumes. It must exist.
    type: str
    default: default
  state:
    description:
      - V(present) caches the image.
      - V(absent) removes cached copies of the image with their markers; with O(checksum) only that content's base
        in O(format), without it every base of O(name) whatever its checksum or format. It fails without removing
        anything when a base to remove is the backing store of a volume in the pool, or a disk of a domain, and names
        those volumes and domains.
    type: str
    choices: [present, absent]
    default: present
  departing_volumes:
    description:
      - With O(state=absent), volumes of O(pool) that the same run removes before this task, such as the overlays
        of the proxies a M(egress_proxies.kvm.kvm_proxy_set) task just removed. They do not count as using a base,
        so check mode, where they are still there, predicts the removal the real run makes. The real run checks
        the pool as it is then, so a base still used by any volume is kept and the task fails naming the volume.
    type: list
    elements: str
    default: []
  max_virtual_size_gb:
    description:
      - The largest virtual size, in GiB, an image may have to be cached. An image whose qcow2 header (or, for a raw
        image, whose length) says more is refused from its first bytes, before its body is downloaded, and the task
        fails naming both sizes; a cached base larger than this fails the task too and is kept.
      - The default is the largest O(egress_proxies.kvm.kvm_proxy#module:disk_size_gb) a VM may have, so an image no
        VM could boot from is never cached. Set it to the disk size of the VMs you create to refuse larger images.
      - 1 to 65536.
    type: int
    default: 65536
  prune:
    description:
      - With O(state=present), also remove the other cached copies of O(name) (older checksums, the other format,
        leftovers of interrupted runs) that no volume of the pool uses as its backing store.
      - Copies still in use are kept and reported in RV(kept) with the volumes that use them.
    type: bool
    default: false
notes:
  - The lock that makes concurrent runs download once lives on the machine the module runs on (under C(/run/lock)).
    Runs from different machines against the same hypervisor over C(qemu+ssh://) do not see each other's lock;
    run the module on the hypervisor itself, or serialise those runs, when they may cache the same image at once.
  - A base volume is in use while a volume of O(pool) has it as its backing store or a domain has it as a disk. A
    volume of another pool backing onto it is not seen.
  - The base volume is created with the size of the download and libvirt's upload writes the image into it verbatim,
    so the cached volume is byte for byte the published image; RV(size) is its virtual size after the pool refresh.
seealso:
  - module: egress_proxies.kvm.kvm_proxy
    description: Creates VMs whose disks are overlays on a cached base image.
  - module: egress_proxies.kvm.kvm_seed
    description: Builds the cloud-init seed volume of a VM.
  - name: Ubuntu cloud images
    description: Ubuntu's cloud images and their SHA256SUMS files.
    link: https://cloud-images.ubuntu.com/
  - name: Debian official cloud images
    description: Debian's cloud images (checksums published as SHA512SUMS).
    link: https://cloud.debian.org/images/cloud/
"""

EXAMPLES = r"""
# Debian publishes SHA512SUMS only: pin the sha256 of the release you validated
# (sha256sum debian-13-generic-amd64-20251117-2299.qcow2), from its dated directory.
# A cached image that matches the pin is used without asking the server again, so
# with latest/ instead of a dated directory the task still succeeds where the pinned
# release is cached, and fails with a checksum mismatch only where it is not (a new
# hypervisor) once latest/ moves on: pin a dated URL to get the same image everywhere.
- name: Cache Debian 13 (trixie), pinned to a validated release
  egress_proxies.kvm.kvm_base_image:
    name: debian-13
    url: https://cloud.debian.org/images/cloud/trixie/20251117-2299/debian-13-generic-amd64-20251117-2299.qcow2
    checksum: "sha256:{{ debian_13_sha256 }}"
    pool: default

- name: Cache Ubuntu 24.04 (noble), verified against Canonical's SHA256SUMS
  egress_proxies.kvm.kvm_base_image:
    name: ubuntu-24.04
    url: https://cloud-images.ubuntu.com/noble/current/noble-server-cloudimg-amd64.img
    checksum: sha256:https://cloud-images.ubuntu.com/noble/current/SHA256SUMS
    format: qcow2
  register: ubuntu_image

- name: Show where the base volume is
  ansible.builtin.debug:
    msg: "{{ ubuntu_image.volume }} at {{ ubuntu_image.volume_path }}, {{ ubuntu_image.size }} bytes virtual size"

- name: Follow noble's current release and remove the older bases no VM uses any more
  egress_proxies.kvm.kvm_base_image:
    name: ubuntu-24.04
    url: https://cloud-images.ubuntu.com/noble/current/noble-server-cloudimg-amd64.img
    checksum: sha256:https://cloud-images.ubuntu.com/noble/current/SHA256SUMS
    prune: true

- name: Cache an image on a remote hypervisor, from the controller
  egress_proxies.kvm.kvm_base_image:
    uri: qemu+ssh://root@hv1.example.net/system
    name: debian-13
    url: https://cloud.debian.org/images/cloud/trixie/latest/debian-13-generic-amd64.qcow2
  delegate_to: localhost

- name: Remove every cached copy of the Ubuntu image (fails, naming them, if VM disks still use one)
  egress_proxies.kvm.kvm_base_image:
    name: ubuntu-24.04
    state: absent
"""

RETURN = r"""
volume:
  description: Name of the image's base volume in the pool.
  returned: state is present
  type: str
  sample: base-ubuntu-24.04-5c3ddb00f60bc455.qcow2
volume_path:
  description:
    - Path of the base volume on the hypervisor, what a VM disk's backing store points to.
    - Null in check mode when the image would be downloaded.
    - Not named C(path), which Ansible would take for a file on the host that runs the module.
  returned: state is present
  type: str
  sample: /var/lib/libvirt/images/base-ubuntu-24.04-5c3ddb00f60bc455.qcow2
format:
  description: Disk format of the base volume (the backing format of overlays on it).
  returned: state is present
  type: str
  sample: qcow2
sha256:
  description:
    - The verified sha256 of the cached image.
    - Null in check mode when the image would be downloaded and O(checksum) is not set.
  returned: state is present
  type: str
  sample: 5c3ddb00f60bc455dac0862fabe9d8bacec46c33ac1751143c5c3683404b110d
size:
  description:
    - Virtual size of the image in bytes, as libvirt reports the base volume's capacity; a VM disk on it is at least this large.
    - In check mode when the image would be downloaded, the virtual size its qcow2 header gives (the length of a raw
      image), read without downloading the image; null only for a raw image whose server does not say its length.
  returned: state is present
  type: int
  sample: 3758096384
downloaded:
  description: Whether the image was downloaded (in check mode, whether it would be).
  returned: state is present
  type: bool
  sample: true
bytes:
  description: Bytes downloaded, 0 when the image was already cached.
  returned: state is present
  type: int
  sample: 604701696
seconds:
  description: Duration of the download in seconds, 0 when the image was already cached.
  returned: state is present
  type: float
  sample: 12.514
throughput:
  description: Download speed in bytes per second, 0 when the image was already cached.
  returned: state is present
  type: int
  sample: 48321556
actions:
  description: What was done (in check mode, what would be done), in order.
  returned: always
  type: list
  elements: str
  sample:
    - download https://cloud-images.ubuntu.com/noble/current/noble-server-cloudimg-amd64.img into volume base-ubuntu-24.04-5c3ddb00f60bc455.qcow2
    - write marker volume base-ubuntu-24.04-5c3ddb00f60bc455.qcow2.sha256
removed:
  description: Base volumes removed with their markers (in check mode, that would be removed).
  returned: state is absent, or O(prune=true)
  type: list
  elements: str
  sample: [base-ubuntu-24.04-0a41b2e6a9d2c7f3.qcow2]
kept:
  description: Other cached copies of the image kept because volumes of the pool use them as backing store, or domains as a disk.
  returned: O(prune=true)
  type: list
  elements: dict
  contains:
    volume:
      description: The base volume kept.
      type: str
      sample: base-ubuntu-24.04-9e3f0c55d0b1a7c2.qcow2
    used_by:
      description: The volumes whose backing store it is.
      type: list
      elements: str
      sample: [proxy-1.qcow2]
    used_by_domains:
      description: The domains that have it as a disk (attached directly, not through an overlay).
      type: list
      elements: str
      sample: []
"""

from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.argspec import kvm_base_image_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.task import BaseImageTask

ARGUMENT_SPEC = kvm_base_image_argument_spec()


def main():
    BaseImageTask.main(ARGUMENT_SPEC)


if __name__ == "__main__":
    main()
