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


def write_if_changed(path, content, mode=0o644):
    """Write content (bytes, or text as UTF-8) to path unless it holds it already; whether it changed. The file is
    written beside the old one and renamed into place, so a reader (Prometheus watching a file_sd file, sshd) never
    sees half of it."""
    data = content.encode() if isinstance(content, str) else content
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return False
    except FileNotFoundError:
        pass
    with open(path + ".partial", "wb") as handle:
        handle.write(data)
    os.chmod(path + ".partial", mode)
    os.replace(path + ".partial", path)
    return True


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
