#!/bin/sh
# ssh to the lab's hypervisors (scripts/lab up) with the controller key and the known_hosts file the lab
# writes; host keys are checked. For people:
#   tests/lab/lab-ssh.sh lab-hv1 virsh -c qemu:///system list --all
# and for libvirt's qemu+ssh transport, which runs it in place of ssh (docs/dev/lab.md):
#   virsh -c "qemu+ssh://root@lab-hv1/system?command=$PWD/tests/lab/lab-ssh.sh" list --all
exec ssh -F /run/egress-proxies-lab/ssh/config "$@"
