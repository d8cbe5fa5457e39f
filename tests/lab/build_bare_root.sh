#!/usr/bin/env bash
# Recipe of the lab's bare host root (tests/lab/bare_host.py): Debian 12 minbase with only what an
# SSH-managed server has, openssh-server, python3 and iproute2. No QEMU, libvirt or Python libraries:
# playbooks/prepare.yml installs those. tests/lab/bare_host.py hashes this file: any edit here
# rebuilds the cached root.
#
# Usage: build_bare_root.sh OUTPUT_DIR WORKDIR DEB_CACHE
#   as root; OUTPUT_DIR is replaced only by a complete root; WORKDIR is created and removed;
#   DEB_CACHE keeps downloaded .debs between builds (shared with build_guest_image.sh).
set -euo pipefail

output=$1
workdir=$2
deb_cache=$3
suite=bookworm
mirror=http://deb.debian.org/debian
rootdir=$workdir/root

cleanup() {
  local status=$?
  if [ $status -ne 0 ] && [ -f "$rootdir/debootstrap/debootstrap.log" ]; then
    echo "== build failed; the end of debootstrap.log:" >&2
    tail -n 30 "$rootdir/debootstrap/debootstrap.log" >&2
  fi
  # debootstrap mounts /proc and /sys in its target and may leave them behind when it fails.
  awk -v base="$workdir/" 'index($2 "/", base) == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r mountpoint; do umount -l "$mountpoint"; done
  rm -rf --one-file-system "$workdir"
}
trap cleanup EXIT
rm -rf --one-file-system "$workdir"
mkdir -p "$workdir" "$deb_cache"

# deb.debian.org is reached over a network that sometimes drops a download: retry.
for attempt in 1 2 3 4; do
  echo "== debootstrap $suite (attempt $attempt)"
  rm -rf --one-file-system "$rootdir"
  mkdir -p "$rootdir"
  if debootstrap --variant=minbase --include=openssh-server,python3,iproute2 --cache-dir="$deb_cache" \
      "$suite" "$rootdir" "$mirror"; then
    break
  fi
  if [ $attempt -eq 4 ]; then exit 1; fi
  sleep $((attempt * 10))
done

# The lab's sshd runs with its own host key (tests/lab/lab_ssh.py); the package's keys would be
# the same in every copy of the root.
rm -f "$rootdir"/etc/ssh/ssh_host_*
rm -rf "$rootdir"/var/lib/apt/lists/* "$rootdir"/var/cache/apt/archives/*.deb "$rootdir"/var/log/*.log
echo lab-bare > "$rootdir/etc/hostname"
: > "$rootdir/etc/resolv.conf"

rm -rf --one-file-system "$output.partial"
mv "$rootdir" "$output.partial"
rm -rf --one-file-system "$output"
mv "$output.partial" "$output"
echo "== built $output"
