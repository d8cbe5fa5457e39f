# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A metrics page served on loopback for the tests of status.yml's reads: what it answers, with which headers, or an
endless page."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import http.server
import threading


class PageHandler(http.server.BaseHTTPRequestHandler):
    """Answers with the server's ``headers`` (name, value pairs) and ``page`` (bytes; None: an endless page; a list: its
    pages in turn, the last one from then on)."""

    def do_GET(self):
        self.send_response(200)
        for name, value in self.server.headers:
            self.send_header(name, value)
        self.end_headers()
        page = self.server.page
        if isinstance(page, list):
            page = page.pop(0) if len(page) > 1 else page[0]
        if page is not None:
            self.wfile.write(page)
            return
        try:
            while True:
                self.wfile.write(b"squid_client_http_requests_total 1\n" * 1024)
        except OSError:
            pass

    def log_message(self, fmt, *args):
        pass


class PageServers:
    """The servers a test started; ``close()`` stops them all."""

    def __init__(self):
        self.servers = []

    def serve(self, address, port, page, headers=()):
        """A server on address:port (port 0: any) answering ``page`` (see PageHandler) with ``headers``; its port."""
        server = http.server.ThreadingHTTPServer((address, port), PageHandler)
        server.headers, server.page = list(headers), page
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.servers.append(server)
        return server.server_address[1]

    def close(self):
        for server in self.servers:
            server.shutdown()
            server.server_close()
