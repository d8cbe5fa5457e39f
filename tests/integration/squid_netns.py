"""A real squid with a stand-in DNS server and origin servers, all in a private network namespace of the test's.

squid's dns_nameservers takes an address only (port 53), and an origin has to sit on the address a policy judges
(10.0.0.5, 93.184.216.99, 64:ff9b::a00:5...): in a network namespace of its own (``ip netns add``), the test gives its
loopback every such address and runs, there, a DNS server on 127.0.0.1:53 answering the test's names with the
addresses in the order given, origins on ports 80 and 443 of every address that answer with the address they were
reached on and the one they were reached from, squid with the role's squid.conf, and a client. Nothing leaves the
namespace.

Run as a program (inside the namespace) it is the DNS server and the origins (``squid_netns.py RECORDS_JSON``), or
a client of squid that writes the request line itself (``squid_netns.py ask HOST PATH get|tunnel SOURCE [USER:PASSWORD]``,
from the source address SOURCE of the namespace's loopback, with those credentials for squid), or one that sends its TLS
ClientHello late into a CONNECT (``squid_netns.py tls-late HOST:PORT SNI USER:PASSWORD DELAY``).
"""

import base64
import contextlib
import http.server
import json
import os
import secrets
import shutil
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time

SQUID_PORT = 3128
ORIGIN_PORTS = (80, 443)
DNS_ADDRESS = "127.0.0.1"
# The answers' TTL: none, so a name is as short-lived as DNS lets an attacker make it (squid keeps it
# negative_dns_ttl at least).
DNS_TTL = 0
_TYPES = {1: 4, 28: 6}  # A, AAAA: the IP version each answers with


def _dns_answer(query, records, asked):
    """The reply to one DNS ``query`` (bytes) from ``records`` {name: [address, ...]}: each address of the asked type,
    in the records' order; NXDOMAIN for a name not there; None for what is not a query of one question. A name that
    rebinds has a list of such lists instead: its n-th query of a type gets the n-th, then the last (``asked`` counts
    the queries of each name and type)."""
    if len(query) < 12:
        return None
    ident, _flags, questions = struct.unpack("!HHH", query[:6])
    if questions != 1:
        return None
    offset, labels = 12, []
    while offset < len(query) and query[offset]:
        length = query[offset]
        labels.append(query[offset + 1:offset + 1 + length].decode("ascii", "replace").lower())
        offset += 1 + length
    qtype, _qclass = struct.unpack("!HH", query[offset + 1:offset + 5])
    question = query[12:offset + 5]
    name = ".".join(labels)
    found = records.get(name)
    if found and isinstance(found[0], list):
        turn = asked[(name, qtype)] = asked.get((name, qtype), -1) + 1
        found = found[min(turn, len(found) - 1)]
    version = _TYPES.get(qtype)
    answers = [socket.inet_pton(socket.AF_INET if version == 4 else socket.AF_INET6, address)
               for address in (found or []) if version and (":" in address) == (version == 6)]
    rcode = 3 if found is None else 0
    header = struct.pack("!HHHHHH", ident, 0x8180 | rcode, 1, len(answers), 0, 0)
    body = b"".join(struct.pack("!HHHIH", 0xC00C, qtype, 1, DNS_TTL, len(data)) + data for data in answers)
    return header + question + body


def _serve_dns(records):
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind((DNS_ADDRESS, 53))
    asked = {}
    while True:
        query, peer = server.recvfrom(4096)
        reply = _dns_answer(query, records, asked)
        if reply is not None:
            server.sendto(reply, peer)


class _Origin(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the address it was reached on and the address it was reached from (squid's outgoing
    address), and logs the path."""

    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"reached": self.connection.getsockname()[0], "from": self.client_address[0],
                           "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        print("reached %s %s" % (self.connection.getsockname()[0], self.path), flush=True)

    def log_message(self, *args):
        pass


class _DualStackServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def _serve(records):
    for port in ORIGIN_PORTS:
        server = _DualStackServer(("::", port), _Origin)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready", flush=True)
    _serve_dns(records)


def _read_head(stream):
    """The status code and the Proxy-Authenticate header (None without one) of the HTTP response head read from
    ``stream`` (a file of the socket); (None, None) when squid closed the connection unanswered."""
    first = stream.readline()
    if not first:
        return None, None
    status = int(first.split()[1])
    challenge = None
    line = stream.readline()
    while line not in (b"\r\n", b"\n", b""):
        name, _colon, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "proxy-authenticate" and challenge is None:
            challenge = value.strip()
        line = stream.readline()
    return status, challenge


def _ask(host, path, mode, source, credentials=""):
    """Prints {"status" (None: closed unanswered), "body", "challenge"} (squid's Proxy-Authenticate): GET
    http://HOST/PATH through squid, or (mode "tunnel") CONNECT HOST:443 and that GET inside the tunnel, from the address
    ``source`` (squid's client), to squid's loopback address of its family; with ``credentials`` (user:password) as
    squid's Basic Proxy-Authorization."""
    squid = "::1" if ":" in source else "127.0.0.1"
    connection = socket.create_connection((squid, SQUID_PORT), timeout=15, source_address=(source, 0))
    stream = connection.makefile("rb")
    body = None
    authorization = ("Proxy-Authorization: Basic %s\r\n" % base64.b64encode(credentials.encode()).decode()
                     if credentials else "")
    if mode == "tunnel":
        connection.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n%s\r\n" % (host, host, authorization)).encode())
        status, challenge = _read_head(stream)
        request = "GET /%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path, host)
    else:
        status = 200
        request = "GET http://%s/%s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n" % (host, path, host, authorization)
    if status == 200:
        connection.sendall(request.encode())
        status, challenge = _read_head(stream)
        if status == 200:
            body = json.loads(stream.read().decode())
    print(json.dumps({"status": status, "body": body, "challenge": challenge}))


def _ask_tls_late(target, sni, credentials, delay):
    """Prints {"connect": squid's status for CONNECT ``target`` (host:port), "answered": whether a TLS server then
    answered a GET}, the ClientHello (naming ``sni``) sent ``delay`` seconds after squid's 200, as a client may."""
    host, _colon, port = target.rpartition(":")
    connection = socket.create_connection(("127.0.0.1", SQUID_PORT), timeout=15)
    authorization = base64.b64encode(credentials.encode()).decode()
    connection.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n"
                        % (target, target, authorization)).encode())
    # A byte at a time, not _read_head's buffered file: the TLS handshake goes on over this socket, so nothing after
    # squid's head may be read ahead.
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        data = connection.recv(1)
        if not data:
            break
        head += data
    status = int(head.split()[1]) if head else None
    answered = False
    if status == 200:
        time.sleep(float(delay))
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            with context.wrap_socket(connection, server_hostname=sni) as tls:
                tls.sendall(b"GET / HTTP/1.0\r\nHost: %s:%s\r\n\r\n" % (host.encode(), port.encode()))
                answered = tls.recv(64).startswith(b"HTTP/1.0 200 ok")
        except (ssl.SSLError, OSError):
            answered = False
    print(json.dumps({"connect": status, "answered": answered}))


def _netns(name, argv):
    return ["ip", "netns", "exec", name] + list(argv)


def _wait_for(what, done, timeout=20):
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError("%s: not ready after %d s" % (what, timeout))
        time.sleep(0.1)


class SquidNamespace:
    """The namespace, its servers and squid; ``get(url)`` asks squid for ``url`` from inside it."""

    def __init__(self, name, workdir):
        self.name = name
        self.workdir = workdir
        self.origins_log = os.path.join(workdir, "origins.log")

    def run(self, argv, **options):
        return subprocess.run(_netns(self.name, argv), capture_output=True, text=True, timeout=60, check=False, **options)

    def ask(self, host, path, tunnel=False, source="127.0.0.1", credentials=""):
        """{"status": HTTP status, "body": the origin's JSON or None, "challenge": squid's Proxy-Authenticate or None}
        of GET http://HOST/PATH through squid, or with ``tunnel`` of a CONNECT to HOST:443 (its status; the GET's inside
        the tunnel when squid opened it), asked from the loopback address ``source`` (an IPv6 one asks squid on ::1),
        with ``credentials`` (user:password) when given. ``host`` goes to squid as written (a client such as curl
        rewrites 0x0a000005 to 10.0.0.5 before squid sees it)."""
        completed = self.run([sys.executable, os.path.abspath(__file__), "ask", host, path, "tunnel" if tunnel else "get",
                              source, credentials])
        assert completed.returncode == 0, completed.stderr
        return json.loads(completed.stdout)

    def get(self, host, path, tunnel=False, source="127.0.0.1", credentials=""):
        """(HTTP status, the origin's JSON or None) of ask()."""
        answer = self.ask(host, path, tunnel, source, credentials)
        return answer["status"], answer["body"]

    def tls_late(self, target, sni, credentials, delay):
        """{"connect": squid's status, "answered": whether a TLS server answered} of _ask_tls_late in the namespace."""
        completed = self.run([sys.executable, os.path.abspath(__file__), "tls-late", target, sni, credentials, str(delay)])
        assert completed.returncode == 0, completed.stderr
        return json.loads(completed.stdout)

    def reached(self):
        """The origins' log: one line "reached ADDRESS PATH" per request an origin got."""
        with open(self.origins_log) as handle:
            return handle.read()


@contextlib.contextmanager
def tls_server(netns, directory, port):
    """openssl's TLS server on ``port`` of every address of network namespace ``netns`` (its key and self-signed
    certificate in ``directory``), answering a GET with "HTTP/1.0 200 ok" whatever name the client asked for."""
    key, cert = os.path.join(directory, "tls-origin.key"), os.path.join(directory, "tls-origin.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-subj", "/CN=origin.example", "-days", "1"], check=True, capture_output=True, timeout=60)
    server = subprocess.Popen(_netns(netns, ["openssl", "s_server", "-quiet", "-www", "-accept", str(port), "-key", key,
                                             "-cert", cert]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for("openssl s_server", lambda: server.poll() is None and ":%d " % port in subprocess.run(
            _netns(netns, ["ss", "-Hltn"]), capture_output=True, text=True, check=False).stdout)
        yield
    finally:
        server.terminate()
        server.wait(timeout=15)


def tls_answered(netns, proxy, credentials, target, sni):
    """Whether a tls_server answered the GET openssl s_client sent through the HTTP proxy ``proxy`` (host:port) from
    network namespace ``netns``: CONNECT ``target`` (host:port) as ``credentials`` (user, password), with ``sni`` in its
    ClientHello (None: none)."""
    user, password = credentials
    completed = subprocess.run(_netns(netns, ["openssl", "s_client", "-quiet", "-proxy", proxy, "-proxy_user", user,
                                              "-proxy_pass", "pass:" + password, "-connect", target]
                                      + (["-servername", sni] if sni else ["-noservername"])),
                               input="GET / HTTP/1.0\r\n\r\n", capture_output=True, text=True, timeout=60, check=False)
    return "HTTP/1.0 200 ok" in completed.stdout


@contextlib.contextmanager
def squid_namespace(squid_conf, records, addresses):
    """A SquidNamespace running squid with ``squid_conf`` (the role's, with the test's own log and pid paths added),
    the DNS server answering ``records`` {name: [address, ...]}, origins on the loopback's ``addresses``."""
    name = "eptest-squid-%s" % secrets.token_hex(3)
    # squid writes its logs as its own user, which cannot enter pytest's directories (mode 0700).
    workdir = tempfile.mkdtemp(prefix=name + "-")
    os.chmod(workdir, 0o777)
    subprocess.run(["ip", "netns", "add", name], check=True)
    processes = []
    try:
        subprocess.run(_netns(name, ["ip", "link", "set", "lo", "up"]), check=True)
        for address in addresses:
            prefix = 128 if ":" in address else 32
            subprocess.run(_netns(name, ["ip", "addr", "add", "%s/%d" % (address, prefix), "dev", "lo"] +
                                  (["nodad"] if prefix == 128 else [])), check=True)
        namespace = SquidNamespace(name, workdir)
        with open(namespace.origins_log, "w") as log:
            processes.append(subprocess.Popen(_netns(name, [sys.executable, os.path.abspath(__file__), json.dumps(records)]),
                                              stdout=log, stderr=subprocess.STDOUT))
        _wait_for("the DNS server and the origins", lambda: "ready" in namespace.reached())
        conf = os.path.join(workdir, "squid.conf")
        with open(conf, "w") as handle:
            handle.write(squid_conf + "\npid_filename %s/squid.pid\ncache_log %s/cache.log\naccess_log stdio:%s/access.log\n"
                         % ((workdir,) * 3))
        squid_log = os.path.join(workdir, "squid.stderr")
        with open(squid_log, "w") as log:
            processes.append(subprocess.Popen(_netns(name, ["squid", "-N", "-f", conf]), stdout=subprocess.DEVNULL,
                                              stderr=log))

        def listening():
            if processes[-1].poll() is not None:
                with open(squid_log) as log:
                    raise AssertionError("squid ended: %s" % log.read()[-3000:])
            return ":%d " % SQUID_PORT in namespace.run(["ss", "-Hltn"]).stdout
        _wait_for("squid", listening)
        yield namespace
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        subprocess.run(["ip", "netns", "del", name], check=False)
        shutil.rmtree(workdir)


if __name__ == "__main__":
    if sys.argv[1] == "ask":
        _ask(*sys.argv[2:7])
    elif sys.argv[1] == "tls-late":
        _ask_tls_late(*sys.argv[2:6])
    else:
        _serve(json.loads(sys.argv[1]))
