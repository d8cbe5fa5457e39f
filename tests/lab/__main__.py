"""python -m tests.lab COMMAND  (wrapped by scripts/lab; see docs/dev/lab.md)."""

import argparse
import sys

from tests.lab import bare_host, lab
from tests.lab.shell import LabError

HYPERVISOR_ACTIONS = ("sshd-stop", "sshd-start", "freeze", "thaw")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="scripts/lab", description="the local libvirt test lab")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("up", help="bring the lab and its hypervisors up (EGRESS_LAB_HYPERVISORS: how many, 2 by default)")
    commands.add_parser("down", help="remove the lab and every lab hypervisor")
    commands.add_parser("status", help="each part and its state; exit 0 when all are up, 3 otherwise")
    commands.add_parser("down-hypervisors", help="remove the lab hypervisors only")
    commands.add_parser("bare-up", help="bring the bare host lab-bare up (docs/dev/lab.md); `up` never does")
    commands.add_parser("bare-down", help="remove the bare host")
    for action, text in zip(HYPERVISOR_ACTIONS, (
            "stop a hypervisor's sshd and drop its sessions", "start a hypervisor's sshd again",
            "SIGSTOP a hypervisor's libvirtd", "SIGCONT a hypervisor's libvirtd")):
        commands.add_parser(action, help=text).add_argument("hypervisor", help="lab-hvN (or N)")
    args = parser.parse_args(argv)
    try:
        if args.command == "status":
            state = lab.status()
            hypervisor_state = lab.hypervisor_status()
            for component, value in list(state.items()) + list(hypervisor_state.items()):
                print("%-52s %s" % (component, value))
            return 0 if lab.is_up(state, hypervisor_state) else 3
        if args.command in HYPERVISOR_ACTIONS:
            actions = lab.hypervisor_action(args.command, args.hypervisor)
            print("\n".join("lab: %s" % action for action in actions) or "lab: nothing to do")
            return 0
        actions = {"up": lab.up, "down": lab.down, "down-hypervisors": lab.hypervisors_down,
                   "bare-up": bare_host.up, "bare-down": bare_host.down}[args.command]()
    except LabError as error:
        print("lab: %s" % error, file=sys.stderr)
        return 1
    if not actions:
        print("lab: already %s" % args.command)
    else:
        print("lab: %s (%d changes)" % (args.command, len(actions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
