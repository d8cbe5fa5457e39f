"""The lab's origin server: a destination that says who it saw and what it was sent.

Every GET is answered 200 with a JSON body ``{"peer": <the TCP peer's address>, "path": ...,
"headers": {<name>: <value>, ...}}`` and the same peer address in the ``X-Origin-Peer`` header, so a
client fetching through a proxy learns the proxy's egress address and the headers the proxy passed on
(Via, X-Forwarded-For, ...). `scripts/lab up` runs one on each hypervisor's LAN and on its outside
segment (`python -m tests.lab.origin HOST PORT`, pid file and log in the hypervisor's run dir).
"""

import http.server
import json
import socket
import subprocess
import sys
import time

from tests.lab import namespaces
from tests.lab.shell import LabError, process_cmdline, read_pidfile

MODULE = "tests.lab.origin"
PEER_HEADER = "X-Origin-Peer"


class OriginRequestHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        peer = self.client_address[0]
        body = json.dumps({"peer": peer, "path": self.path, "headers": dict(self.headers.items())},
                          sort_keys=True).encode("utf-8") + b"\n"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header(PEER_HEADER, peer)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))
        sys.stderr.flush()


class _IPv6Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


def serve(host, port):
    """Serve on host:port, an IPv4 or (with a colon) an IPv6 address."""
    server_class = _IPv6Server if ":" in host else http.server.ThreadingHTTPServer
    server_class.allow_reuse_address = True
    with server_class((host, port), OriginRequestHandler) as server:
        server.serve_forever()


def origin_pid(pidfile):
    pid = read_pidfile(pidfile)
    if pid and MODULE.encode("ascii") in process_cmdline(pid):
        return pid
    return None


def ensure_origin(netns, host, port, pidfile, logfile, cwd):
    """Start the origin server on host:port in network namespace netns unless it runs; the actions taken."""
    if origin_pid(pidfile):
        return []
    with open(logfile, "ab") as log:
        process = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-m", MODULE, host, str(port)],
            cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    with open(pidfile, "w") as handle:
        handle.write("%d\n" % process.pid)
    deadline = time.monotonic() + 10
    while not namespaces.listening(process.pid, host, port):
        if process.poll() is not None or time.monotonic() > deadline:
            raise LabError("the origin server on %s:%d (netns %s) did not start; see %s" % (host, port, netns, logfile))
        time.sleep(0.1)
    return ["started origin server http://%s:%d/ in netns %s" % ("[%s]" % host if ":" in host else host, port, netns)]


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
