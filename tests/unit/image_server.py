# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The HTTP server the image download tests fetch from: http.server in a thread on 127.0.0.1.

Each path answers as its ``Route`` says, from bytes in memory or a file on
disk, with the moments a test needs made deterministic: failures first, a
redirect, no Content-Length, a connection cut after some bytes, a slow
answer, "Range: bytes=0-N" answered with a 206 as mirrors do (or ignored, as
some servers do), and a whole download held after some bytes until the test
releases it. Every request's path and headers are kept. The unit tests of
the image cache and kvm_base_image use it, and so do the kvm_base_image
integration tests.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import http.server
import io
import os
import re
import threading
import time

CHUNK = 256 * 1024
_RANGE_FROM_START = re.compile(r"bytes=0-([0-9]+)")


class Route:
    """How the server answers one path. Attributes may be changed while a test runs."""

    def __init__(self, body=b"", status=200, content_length=True, delay=0.0, cut_after=None, location=None,
                 failures=None, ranges=True, range_length="total", source=None):
        self.body = body
        self.source = source  # a file served instead of ``body``, read as it is sent
        self.status = status
        self.content_length = content_length  # True: the body's size; False: none; a string: sent as it is
        self.ranges = ranges  # answer "Range: bytes=0-N" with a 206; False ignores it, as some servers do
        self.range_length = range_length  # "total", or "*" for a 206 that does not tell the length
        self.delay = delay
        self.cut_after = cut_after  # send Content-Length, then close after this many bytes
        self.location = location
        self.failures = list(failures or [])  # statuses to answer first, one per request

    def size(self):
        return len(self.body) if self.source is None else os.path.getsize(self.source)

    def open(self):
        return io.BytesIO(self.body) if self.source is None else open(self.source, "rb")


class Hold:
    """A response held after ``after_bytes`` bytes: ``reached`` is set then, ``release`` lets it go on."""

    def __init__(self, after_bytes):
        self.after_bytes = after_bytes
        self.reached = threading.Event()
        self.release = threading.Event()


class _Handler(http.server.BaseHTTPRequestHandler):
    # HTTP/1.1 so clients keep the connection between the header probe and the download, as with mirrors.
    protocol_version = "HTTP/1.1"
    image_server = None  # set on the subclass each ImageServer makes

    def handle(self):
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (or was killed, which is what some tests want)

    def do_GET(self):
        server = self.image_server
        path = self.path.split("?", 1)[0]
        asked = _RANGE_FROM_START.fullmatch(self.headers.get("Range", ""))
        with server._lock:
            server.hits[path] = server.hits.get(path, 0) + 1
            server.headers.append(dict(self.headers))
            server.requests.append((path, dict(self.headers)))
        route = server.routes.get(path)
        if route is None:
            self.send_error(404)
            return
        time.sleep(route.delay)
        status = route.failures.pop(0) if route.failures else route.status
        if route.location is not None:
            self.send_response(302)
            self.send_header("Location", route.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if status != 200:
            self.send_error(status)
            return
        if route.ranges and asked:
            self._send_head(route, int(asked.group(1)) + 1)
            return
        with server._lock:
            hold = server.holds.pop(path, None)
        self._send_whole(route, hold)

    def _send_head(self, route, length):
        size = route.size()
        if not size:
            self.send_error(416)
            return
        with route.open() as stream:
            head = stream.read(length)
        self.send_response(206)
        self.send_header("Content-Range", "bytes 0-%d/%s" % (len(head) - 1, size if route.range_length == "total" else route.range_length))
        self.send_header("Content-Length", str(len(head)))
        self.end_headers()
        self.wfile.write(head)

    def _send_whole(self, route, hold):
        size = route.size()
        self.send_response(200)
        if route.content_length:
            self.send_header("Content-Length", route.content_length if isinstance(route.content_length, str) else str(size))
        if route.content_length is not True or route.cut_after is not None:
            # The body ends where the connection does.
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        to_send = size if route.cut_after is None else min(size, route.cut_after)
        sent = 0
        with route.open() as stream:
            while sent < to_send:
                chunk = stream.read(min(CHUNK, to_send - sent))
                if not chunk:
                    break
                if hold is not None and sent + len(chunk) > hold.after_bytes:
                    head = hold.after_bytes - sent
                    self.wfile.write(chunk[:head])
                    self.wfile.flush()
                    sent, chunk = sent + head, chunk[head:]
                    hold.reached.set()
                    hold.release.wait(300)
                    hold = None
                self.wfile.write(chunk)
                sent += len(chunk)

    def log_message(self, *args):
        pass


class ImageServer:
    """Serves Routes on 127.0.0.1 at a free port, counts hits and keeps every request's path and headers."""

    def __init__(self):
        self.routes = {}
        self.hits = {}
        self.headers = []
        self.requests = []
        self.holds = {}  # path -> the Hold for its next whole download
        self._made_holds = []
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"image_server": self})
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.httpd.server_port, path)

    def add(self, path, body=b"", **route):
        """Serve ``body`` at ``path`` as Route(body, **route) says; the URL."""
        self.routes[path] = Route(body, **route)
        return self.url(path)

    def serve(self, path, source, **route):
        """Serve the file ``source`` at ``path``; the URL."""
        return self.add(path, source=source, **route)

    def hold(self, path, after_bytes):
        """Hold the next whole download of ``path`` after ``after_bytes`` bytes (range requests are not held)."""
        hold = self.holds[path] = Hold(after_bytes)
        self._made_holds.append(hold)
        return hold

    def hit_count(self, path):
        return self.hits.get(path, 0)

    def ranges_asked(self, path):
        """The Range header of every request for ``path`` (None for a whole download), in order."""
        return [headers.get("Range") for requested, headers in self.requests if requested == path]

    def close(self):
        for hold in self._made_holds:
            hold.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
