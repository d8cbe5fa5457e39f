"""The lab's HTTP image mirror on 127.0.0.1:8642, serving the cache dir's mirror/.

Run as a daemon by `scripts/lab up` (`python -m tests.lab.mirror DIR HOST PORT`). The collection's
image download checks Content-Length; SimpleHTTPRequestHandler sends it for every file it serves.
"""

import functools
import http.server
import os
import socket
import subprocess
import sys
import time

from tests.lab import config
from tests.lab.shell import LabError, process_cmdline, read_pidfile, report

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class MirrorRequestHandler(http.server.SimpleHTTPRequestHandler):
    # HTTP/1.1 so clients may keep the connection; every response carries Content-Length.
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        sys.stderr.write("%s %s\n" % (self.address_string(), format % args))
        sys.stderr.flush()


def serve(directory, host, port):
    handler = functools.partial(MirrorRequestHandler, directory=directory)
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    with http.server.ThreadingHTTPServer((host, port), handler) as server:
        server.serve_forever()


def mirror_pid():
    pid = read_pidfile(config.MIRROR_PIDFILE)
    if pid and b"tests.lab.mirror" in process_cmdline(pid):
        return pid
    return None


def _port_answers():
    try:
        with socket.create_connection((config.MIRROR_HOST, config.MIRROR_PORT), timeout=1):
            return True
    except OSError:
        return False


def ensure_mirror():
    if mirror_pid():
        return []
    if _port_answers():
        raise LabError("%s:%d is taken by a process that is not the lab mirror" % (
            config.MIRROR_HOST, config.MIRROR_PORT))
    os.makedirs(config.RUN_DIR, exist_ok=True)
    os.makedirs(config.MIRROR_DIR, exist_ok=True)
    with open(config.MIRROR_LOGFILE, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.lab.mirror", config.MIRROR_DIR,
             config.MIRROR_HOST, str(config.MIRROR_PORT)],
            cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    with open(config.MIRROR_PIDFILE, "w") as handle:
        handle.write("%d\n" % process.pid)
    deadline = time.monotonic() + 10
    while not _port_answers():
        if process.poll() is not None or time.monotonic() > deadline:
            raise LabError("the image mirror did not start; see %s" % config.MIRROR_LOGFILE)
        time.sleep(0.1)
    action = "started image mirror %s (pid %d)" % (config.MIRROR_URL, process.pid)
    report(action)
    return [action]


def stop_mirror():
    pid = mirror_pid()
    if os.path.exists(config.MIRROR_PIDFILE):
        os.unlink(config.MIRROR_PIDFILE)
    if not pid:
        return []
    os.kill(pid, 15)
    report("stopped image mirror")
    return ["stopped image mirror"]


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]))
