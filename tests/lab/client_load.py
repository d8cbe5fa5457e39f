"""A client's load through a proxy, recorded request by request: what a client behind an egress proxy lives through.

`python -m tests.lab.client_load PROXY URL OUT [--rate N] [--timeout S] [--downloads N] [--download-url URL]` (run in
a client namespace, `ip netns exec`) starts a new request through PROXY (host:port) every 1/N s, each on a new TCP
connection with an S s bound (5 by default), and keeps N downloads of DOWNLOAD-URL going one after another (one that
failed tried again DOWNLOAD_RETRY_SECONDS later), until it receives SIGTERM. Each finished request is one JSON line
in OUT: {"kind": "request"|"download", "start", "end" (monotonic seconds), "ok", "status", "proxy" (the X-Egress-Proxy
header: the proxy that answered, also when the body was cut), "error"}. ``summary()`` reads OUT back.
"""

import http.client
import json
import signal
import sys
import threading
import time
import urllib.parse

REQUEST_TIMEOUT = 5.0
# A download's longest silence before it counts as cut.
DOWNLOAD_TIMEOUT = 10.0
# A failed download is tried again a second later, as a retrying client would: not thousands of times a second while a
# proxy refuses connections, each a record.
DOWNLOAD_RETRY_SECONDS = 1.0
PROXY_HEADER = "X-Egress-Proxy"


def fetch(proxy, url, timeout):
    """One GET of ``url`` through ``proxy`` (host:port) on a new connection, read to its end: a record (dict)."""
    host, port = proxy.rsplit(":", 1)
    record = {"start": time.monotonic(), "ok": False, "status": None, "proxy": None, "error": None}
    connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
    try:
        connection.request("GET", url, headers={"Host": urllib.parse.urlsplit(url).netloc, "Connection": "close"})
        response = connection.getresponse()
        # Who answered, before the body: a download cut halfway still names the proxy it was in flight on.
        record.update(status=response.status, proxy=response.getheader(PROXY_HEADER))
        while response.read(65536):
            pass
        record["ok"] = response.status == 200
    except (OSError, http.client.HTTPException) as error:
        record["error"] = "%s: %s" % (type(error).__name__, error)
    finally:
        connection.close()
    record["end"] = time.monotonic()
    return record


class Recorder:
    """Writes each record as one JSON line, from any thread."""

    def __init__(self, handle):
        self.handle = handle
        self.lock = threading.Lock()

    def write(self, kind, record):
        with self.lock:
            self.handle.write(json.dumps(dict(record, kind=kind), sort_keys=True) + "\n")
            self.handle.flush()


def run(proxy, url, out, rate, downloads, download_url, timeout=REQUEST_TIMEOUT):
    with open(out, "a", encoding="utf-8") as handle:
        _load(proxy, url, Recorder(handle), rate, downloads, download_url, timeout)


def _load(proxy, url, recorder, rate, downloads, download_url, timeout):
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_args: stopping.set())

    def one_request(number):
        recorder.write("request", dict(fetch(proxy, url, timeout), id=number))

    def downloading():
        while not stopping.is_set():
            downloaded = fetch(proxy, download_url, DOWNLOAD_TIMEOUT)
            recorder.write("download", downloaded)
            if not downloaded["ok"]:
                stopping.wait(DOWNLOAD_RETRY_SECONDS)

    for _index in range(downloads):
        threading.Thread(target=downloading, daemon=True).start()
    interval = 1.0 / rate
    next_start = time.monotonic()
    threads = []
    number = 0
    while not stopping.is_set():
        number += 1
        # Its start first: a reader tells a request still under way from one never started (pending()).
        recorder.write("start", {"id": number, "start": time.monotonic()})
        thread = threading.Thread(target=one_request, args=(number,), daemon=True)
        thread.start()
        threads.append(thread)
        next_start += interval
        stopping.wait(max(0.0, next_start - time.monotonic()))
    for thread in threads:
        thread.join(timeout + 1)


def records(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def pending(path, until):
    """How many requests started by ``until`` (monotonic seconds) have not finished yet."""
    found = records(path)
    finished = {record["id"] for record in found if record["kind"] == "request"}
    return len([record for record in found
                if record["kind"] == "start" and record["start"] <= until and record["id"] not in finished])


def summary(path, since=None, until=None):
    """What the client lived through between ``since`` and ``until`` (monotonic seconds, of the requests' starts):
    the requests and downloads, those that failed, the longest gap between two successful requests' ends (the time
    no new request got an answer), and the proxies that answered."""
    found = [record for record in records(path)
             if (since is None or record["start"] >= since) and (until is None or record["start"] <= until)]
    requests = sorted((record for record in found if record["kind"] == "request"), key=lambda record: record["start"])
    downloads = [record for record in found if record["kind"] == "download"]
    answered = sorted(record["end"] for record in requests if record["ok"])
    gaps = [later - earlier for earlier, later in zip(answered, answered[1:])]
    return {
        "requests": len(requests),
        "failed": [record for record in requests if not record["ok"]],
        "downloads": len(downloads),
        "downloads_cut": [record for record in downloads if not record["ok"]],
        "longest_gap": max(gaps) if gaps else None,
        "proxies": sorted({record["proxy"] for record in requests if record["proxy"]}),
    }


if __name__ == "__main__":
    arguments = sys.argv[1:]
    options = {"--rate": "20", "--timeout": str(REQUEST_TIMEOUT), "--downloads": "0", "--download-url": ""}
    positional = []
    while arguments:
        argument = arguments.pop(0)
        if argument in options:
            options[argument] = arguments.pop(0)
        else:
            positional.append(argument)
    run(positional[0], positional[1], positional[2], float(options["--rate"]), int(options["--downloads"]),
        options["--download-url"] or positional[1], float(options["--timeout"]))
