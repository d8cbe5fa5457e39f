#!/usr/bin/env bash
# Recipe of the lab's bootable guest image: Debian 12 with cloud-init (NoCloud), qemu-guest-agent,
# squid built with OpenSSL (squid-openssl: the TLS name check peeks at ClientHellos),
# prometheus-squid-exporter and keepalived (both installed, not enabled). tests/lab/images.py
# hashes this file: any edit here rebuilds the cached image.
#
# Usage: build_guest_image.sh OUTPUT.qcow2 WORKDIR DEB_CACHE
#   as root; WORKDIR is created and removed; DEB_CACHE keeps downloaded .debs between builds.
set -euo pipefail

output=$1
workdir=$2
deb_cache=$3
suite=bookworm
mirror=http://deb.debian.org/debian
disk_size_mib=2048
partition_offset=$((1024 * 1024))
# A fixed filesystem UUID keeps the image reproducible and lets the boot loader and fstab name
# the root without probing.
root_uuid=6c0f2a39-8a51-4d8e-9c5e-3f0e0e6a1b52
# dbus, which a cloud image has and --no-install-recommends leaves out: without it systemd-logind does
# not run, so the guest ignores the ACPI power button and qemu-ga's guest-shutdown (`shutdown +0` asks
# logind) fails; every graceful stop of a proxy would then wait out its shutdown_timeout.
packages=(
  linux-image-cloud-amd64 systemd-sysv udev kmod dbus
  ifupdown isc-dhcp-client iproute2 netbase
  cloud-init cloud-guest-utils fdisk sudo openssh-server
  qemu-guest-agent squid-openssl prometheus-squid-exporter keepalived
)

rootdir=$workdir/root
disk=$workdir/disk.raw
mnt=$workdir/mnt

# Unmount everything below $1 (debootstrap mounts /proc and /sys in its target and may leave
# them behind when it fails), deepest first.
unmount_under() {
  local mountpoint
  awk -v base="$1/" 'index($2 "/", base) == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r mountpoint; do umount -l "$mountpoint"; done
}

cleanup() {
  local status=$?
  if [ $status -ne 0 ] && [ -f "$rootdir/debootstrap/debootstrap.log" ]; then
    echo "== build failed; the end of debootstrap.log:" >&2
    tail -n 30 "$rootdir/debootstrap/debootstrap.log" >&2
  fi
  unmount_under "$workdir"
  rm -rf --one-file-system "$workdir"
}
trap cleanup EXIT

unmount_under "$workdir"
rm -rf --one-file-system "$workdir"
mkdir -p "$mnt" "$deb_cache"

# deb.debian.org is reached over a network that sometimes drops a download: retry.
for attempt in 1 2 3 4; do
  echo "== debootstrap $suite (attempt $attempt)"
  unmount_under "$workdir"
  rm -rf --one-file-system "$rootdir"
  mkdir -p "$rootdir"
  if debootstrap --variant=minbase "$suite" "$rootdir" "$mirror"; then
    break
  fi
  if [ $attempt -eq 4 ]; then exit 1; fi
  tail -n 15 "$rootdir/debootstrap/debootstrap.log" >&2 || true
  sleep $((attempt * 10))
done

# Nothing in the image needs documentation or translations; dropping them keeps the image small.
cat > "$rootdir/etc/dpkg/dpkg.cfg.d/01-egress-lab-nodoc" <<'CFG'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
CFG
# Services must not start inside the build chroot.
printf '#!/bin/sh\nexit 101\n' > "$rootdir/usr/sbin/policy-rc.d"
chmod +x "$rootdir/usr/sbin/policy-rc.d"

# Only /proc is mounted. The host's /dev and /sys stay out of the chroot: package scripts there
# (systemd-tmpfiles' static-nodes rules) would re-own host devices such as /dev/kvm to the
# chroot's group ids. debootstrap already created the few device nodes dpkg needs.
mount -t proc proc "$rootdir/proc"
mount --bind "$deb_cache" "$rootdir/var/cache/apt/archives"

echo "== apt-get install ${packages[*]}"
apt_get() { chroot "$rootdir" env DEBIAN_FRONTEND=noninteractive apt-get -q -o Acquire::Retries=5 "$@"; }
apt_get update
apt_get install -y --no-install-recommends "${packages[@]}"
umount "$rootdir/var/cache/apt/archives"

echo "== configure"
# The exporter's postinst enables its unit, and with the package's default ARGS="" it would listen on
# :9301 on every address, unauthenticated. The egress_proxy role writes
# /etc/default/prometheus-squid-exporter and enables the unit itself when metrics are on; until then it
# stays off. systemctl disable in a chroot only removes the unit's symlinks (and the SysV script's rc
# links, through systemd-sysv-install).
chroot "$rootdir" systemctl disable prometheus-squid-exporter.service
test ! -e "$rootdir/etc/systemd/system/multi-user.target.wants/prometheus-squid-exporter.service"
# keepalived's postinst enables its unit too. Debian's unit starts only with a non-empty
# /etc/keepalived/keepalived.conf (ConditionFileNotEmpty), which the image lacks; it is disabled as
# well, so only the role starts it (on a proxy in an HA group) and a proxy in none never runs VRRP.
chroot "$rootdir" systemctl disable keepalived.service
test ! -e "$rootdir/etc/systemd/system/multi-user.target.wants/keepalived.service"
test ! -e "$rootdir/etc/keepalived/keepalived.conf"
# NoCloud is the datasource the collection's seed ISO (label cidata) speaks.
cat > "$rootdir/etc/cloud/cloud.cfg.d/90-egress-lab-datasource.cfg" <<'CFG'
datasource_list: [ NoCloud, None ]
CFG
# The image carries no locale data (see the dpkg excludes above); cloud-init's locale module
# would fail on every boot and leave `cloud-init status` at error. C.UTF-8 is built in.
cat > "$rootdir/etc/cloud/cloud.cfg.d/91-egress-lab-locale.cfg" <<'CFG'
locale: false
CFG
# The lab network is 198.18.0.0/15 (RFC 2544 benchmarking space); squid's stock rules admit only
# localhost. Debian's squid.conf includes conf.d/ before its final "deny all".
cat > "$rootdir/etc/squid/conf.d/egress-lab.conf" <<'CFG'
acl egress_lab src 198.18.0.0/15
http_access allow egress_lab
CFG
cat > "$rootdir/etc/fstab" <<CFG
UUID=$root_uuid / ext4 errors=remount-ro 0 1
CFG
printf 'auto lo\niface lo inet loopback\n\nsource /etc/network/interfaces.d/*\n' \
  > "$rootdir/etc/network/interfaces"
echo localhost > "$rootdir/etc/hostname"
: > "$rootdir/etc/resolv.conf"
# Every clone must get its own machine-id and SSH host keys on first boot.
: > "$rootdir/etc/machine-id"
rm -f "$rootdir/var/lib/dbus/machine-id" "$rootdir"/etc/ssh/ssh_host_*
rm -f "$rootdir/usr/sbin/policy-rc.d"
rm -rf "$rootdir"/var/lib/apt/lists/* "$rootdir"/var/cache/apt/*.bin "$rootdir"/var/log/*.log

kernel=$(find "$rootdir/boot" -maxdepth 1 -name 'vmlinuz-*' -printf '%f\n' | sort -V | tail -n1)
initrd=initrd.img-${kernel#vmlinuz-}
test -f "$rootdir/boot/$initrd"
mkdir -p "$rootdir/boot/extlinux"
cat > "$rootdir/boot/extlinux/extlinux.conf" <<CFG
DEFAULT debian
TIMEOUT 0
PROMPT 0
LABEL debian
  KERNEL /boot/$kernel
  INITRD /boot/$initrd
  APPEND root=UUID=$root_uuid ro console=tty0 console=ttyS0,115200n8
CFG

umount "$rootdir/proc"

echo "== disk"
truncate -s "${disk_size_mib}M" "$disk"
echo "start=$((partition_offset / 512)), type=83, bootable" | sfdisk -q "$disk"
partition_kib=$(( (disk_size_mib * 1024) - (partition_offset / 1024) ))
# syslinux cannot read ext4's 64bit layout; a 2 GiB filesystem does not need it.
mkfs.ext4 -q -F -L root -U "$root_uuid" -O ^64bit -E offset=$partition_offset \
  -d "$rootdir" "$disk" "${partition_kib}k"
mount -o loop,offset=$partition_offset "$disk" "$mnt"
extlinux --install "$mnt/boot/extlinux"
umount "$mnt"
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$disk" bs=440 count=1 conv=notrunc status=none

echo "== qcow2"
qemu-img convert -c -f raw -O qcow2 "$disk" "$output.partial"
mv "$output.partial" "$output"
echo "== built $output"
