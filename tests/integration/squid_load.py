"""A load through squid while its policy is reloaded: an origin with small and long answers, and a client of both.

Run as a program inside the test's network namespace (tests/integration/squid_netns.py):

- ``squid_load.py origin PORT``: an HTTP origin on [::]:PORT (IPv4 and IPv6): ``/small/NAME`` answers a short body,
  ``/long/SECONDS`` streams a body of known length over SECONDS (a long download).
- ``squid_load.py load SPEC``: the client, SPEC a JSON object: ``proxies`` [[address, port], ...] squid's listeners
  asked in turn, ``origin`` (http://address:port), ``seconds`` the length of the load, ``rate`` new requests a second
  (each on a new connection, GET ORIGIN/small/N), ``downloads`` the number of long downloads running beside them
  from the start for ``download_seconds``, ``timeout`` the most one request waits. It prints ``started`` when the
  load begins, then one JSON line: ``requests`` [{"start", "seconds", "error"}], ``downloads`` [{"expected",
  "received", "error"}] (error null when it passed; start and seconds from the load's own start).
"""

import http.server
import json
import socket
import socketserver
import sys
import threading
import time

CHUNK = b"x" * 1024
CHUNKS_A_SECOND = 20
SMALL_BODY = b"small answer\n"


class _Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server's name
        parts = self.path.split("/")
        if len(parts) == 3 and parts[1] == "long":
            chunks = int(float(parts[2]) * CHUNKS_A_SECOND)
            self._head(chunks * len(CHUNK))
            for _chunk in range(chunks):
                self.wfile.write(CHUNK)
                self.wfile.flush()
                time.sleep(1.0 / CHUNKS_A_SECOND)
        else:
            self._head(len(SMALL_BODY))
            self.wfile.write(SMALL_BODY)

    def _head(self, length):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Connection", "close")
        self.end_headers()

    def log_message(self, *args):
        pass


class _DualStackServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True
    request_queue_size = 128

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def _origin(port):
    server = _DualStackServer(("::", int(port)), _Origin)
    print("ready", flush=True)
    server.serve_forever()


def _get(proxy, url, timeout, expected=None):
    """GET ``url`` through ``proxy`` (address, port) on a new connection; the body's length, or raises OSError or
    ValueError saying what went wrong. ``expected`` a Content-Length to check against."""
    with socket.create_connection(tuple(proxy), timeout=timeout) as connection:
        connection.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (
            url, url.split("/")[2])).encode())
        stream = connection.makefile("rb")
        status_line = stream.readline()
        if not status_line:
            raise ValueError("squid closed the connection without an answer")
        if status_line.split()[1:2] != [b"200"]:
            raise ValueError("squid answered %r" % status_line.strip()[:80])
        length = None
        while True:
            line = stream.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, value = line.split(b":", 1) if b":" in line else (line, b"")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        received = 0
        while True:
            data = stream.read(65536)
            if not data:
                break
            received += len(data)
        if length is None or received != length or (expected is not None and length != expected):
            raise ValueError("the body was cut: %d of %s bytes" % (received, expected if expected is not None else length))
        return received


def _load(spec):
    results = {"requests": [], "downloads": []}
    lock = threading.Lock()
    began = time.monotonic()
    origin = spec["origin"]

    def request(number, proxy):
        start = time.monotonic()
        error = None
        try:
            _get(proxy, "%s/small/%d" % (origin, number), spec["timeout"])
        except (OSError, ValueError) as failed:
            error = "%s: %s" % (type(failed).__name__, failed)
        with lock:
            results["requests"].append({"start": start - began, "seconds": time.monotonic() - start, "error": error,
                                        "proxy": "%s:%d" % tuple(proxy)})

    def download(proxy):
        expected = int(spec["download_seconds"] * CHUNKS_A_SECOND) * len(CHUNK)
        received, error = 0, None
        try:
            received = _get(proxy, "%s/long/%s" % (origin, spec["download_seconds"]), spec["download_seconds"] + 30,
                            expected)
        except (OSError, ValueError) as failed:
            error = "%s: %s" % (type(failed).__name__, failed)
        with lock:
            results["downloads"].append({"expected": expected, "received": received, "error": error,
                                         "proxy": "%s:%d" % tuple(proxy)})

    proxies = spec["proxies"]
    threads = [threading.Thread(target=download, args=(proxies[index % len(proxies)],))
               for index in range(spec["downloads"])]
    print("started", flush=True)
    for thread in threads:
        thread.start()
    number = 0
    while time.monotonic() - began < spec["seconds"]:
        thread = threading.Thread(target=request, args=(number, proxies[number % len(proxies)]))
        thread.start()
        threads.append(thread)
        number += 1
        time.sleep(max(0.0, began + number / spec["rate"] - time.monotonic()))
    for thread in threads:
        thread.join()
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "origin":
        _origin(sys.argv[2])
    else:
        _load(json.loads(sys.argv[2]))
