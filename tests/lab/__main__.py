"""python -m tests.lab up|down|status  (wrapped by scripts/lab)."""

import argparse
import sys

from tests.lab import lab
from tests.lab.shell import LabError


def main(argv=None):
    parser = argparse.ArgumentParser(prog="scripts/lab", description="the local libvirt test lab")
    parser.add_argument("command", choices=("up", "down", "status"))
    args = parser.parse_args(argv)
    try:
        if args.command == "status":
            state = lab.status()
            for component, value in state.items():
                print("%-40s %s" % (component, value))
            return 0 if lab.is_up(state) else 3
        actions = lab.up() if args.command == "up" else lab.down()
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
