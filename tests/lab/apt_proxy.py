"""An HTTP proxy for apt on the lab's bare host, forwarding to the Debian mirror only.

The bare host (tests/lab/bare_host.py) has no route out of its network namespace, as the lab's
hypervisors have none. Its apt reaches deb.debian.org through this proxy, which listens on the
controller's management address (`python -m tests.lab.apt_proxy HOST PORT`, started by the bare
host's fixture) and forwards plain-HTTP GETs and HEADs to the allowed hosts, nothing else.
"""

import http.client
import http.server
import sys
import urllib.parse

ALLOWED_HOSTS = ("deb.debian.org",)
# Hop-by-hop headers (RFC 9110 7.6.1) belong to one connection and are not forwarded.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade"}
CHUNK = 1 << 16


class AptProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - name given by BaseHTTPRequestHandler
        self._forward()

    def do_HEAD(self):  # noqa: N802 - name given by BaseHTTPRequestHandler
        self._forward()

    def _forward(self):
        url = urllib.parse.urlsplit(self.path)
        if url.scheme != "http" or url.hostname not in ALLOWED_HOSTS:
            self.send_error(403, "only http://%s is proxied here" % " and http://".join(ALLOWED_HOSTS))
            return
        headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=60)
        try:
            upstream.request(self.command, url.path + ("?" + url.query if url.query else ""), headers=headers)
            response = upstream.getresponse()
            self.send_response(response.status, response.reason)
            length = response.getheader("Content-Length")
            for name, value in response.getheaders():
                if name.lower() not in HOP_BY_HOP:
                    self.send_header(name, value)
            # Without a length the body ends when the connection does.
            if length is None and self.command != "HEAD" and response.status not in (204, 304):
                self.close_connection = True
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                for chunk in iter(lambda: response.read(CHUNK), b""):
                    self.wfile.write(chunk)
        finally:
            upstream.close()

    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        sys.stderr.write("%s %s\n" % (self.address_string(), format % args))
        sys.stderr.flush()


def serve(host, port):
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    with http.server.ThreadingHTTPServer((host, port), AptProxyHandler) as server:
        server.serve_forever()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
