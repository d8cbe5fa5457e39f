"""Running host commands for the lab, and telling the user what changed."""

import os
import subprocess
import sys


def run(argv, check=True, capture=True):
    """Run argv; return the CompletedProcess. With check, a failure raises LabError carrying stderr."""
    result = subprocess.run(argv, stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.PIPE if capture else None, text=True, check=False)
    if check and result.returncode != 0:
        raise LabError("command failed (rc=%d): %s\n%s" % (
            result.returncode, " ".join(argv), (result.stderr or "").strip()))
    return result


def succeeds(argv):
    return run(argv, check=False).returncode == 0


def report(message):
    print("lab: %s" % message, file=sys.stderr, flush=True)


def read_pidfile(path):
    """The pid in path if that process is still alive, else None."""
    try:
        with open(path) as handle:
            pid = int(handle.read().strip() or 0)
    except (OSError, ValueError):
        return None
    if pid <= 0 or not os.path.exists("/proc/%d" % pid):
        return None
    return pid


def process_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


class LabError(Exception):
    """The lab could not be brought into the requested state."""
