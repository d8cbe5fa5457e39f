"""A compromised guest's agent, run inside a booted test guest (python3, root) by test_kvm_proxy_boot.

Started in a systemd unit of its own once qemu-guest-agent is stopped (the test's unit starts it again
after), it answers on the agent's virtio port itself: libvirt's guest-sync (and guest-sync-delimited) and
guest-ping correctly, so libvirt takes it for the agent; guest-file-read with a read that never ends (count 1,
no bytes, eof false); guest-exec without a pid; every other command with an error. It exits on the command
eptest-restore, or after the seconds given as its argument.
"""

import json
import os
import select
import sys
import time

PORT = "/dev/virtio-ports/org.qemu.guest_agent.0"
VERSION = "eptest-hostile"
NEVER_ENDING_READ = {"count": 1, "buf-b64": "", "eof": False}


def answer(request):
    """(reply object or None, whether to stop) for one request."""
    command = request.get("execute")
    arguments = request.get("arguments") or {}
    if command in ("guest-sync", "guest-sync-delimited"):
        return {"return": arguments.get("id")}, False
    if command == "eptest-restore":
        return {"return": {}}, True
    replies = {
        "guest-ping": {}, "guest-info": {"version": VERSION, "supported_commands": []},
        "guest-file-open": 1000, "guest-file-read": NEVER_ENDING_READ, "guest-file-close": {}, "guest-exec": {},
    }
    if command in replies:
        return {"return": replies[command]}, False
    return {"error": {"class": "CommandNotFound", "desc": "%s is not served here" % command}}, False


def serve(port, until):
    decoder = json.JSONDecoder()
    pending = ""
    while time.monotonic() < until:
        ready = select.select([port], [], [], 1)[0]
        if not ready:
            continue
        try:
            data = os.read(port, 65536)
        except BlockingIOError:
            continue
        if not data:
            time.sleep(0.2)  # nobody on the host side yet
            continue
        delimited = b"\xff" in data
        pending += data.replace(b"\xff", b"").decode("utf-8", "replace")
        while True:
            pending = pending.lstrip()
            if not pending:
                break
            try:
                request, end = decoder.raw_decode(pending)
            except ValueError:
                break  # the rest of it has not arrived yet
            pending = pending[end:]
            request = request if isinstance(request, dict) else {}
            reply, stop = answer(request)
            prefix = b"\xff" if delimited and request.get("execute") == "guest-sync-delimited" else b""
            os.write(port, prefix + json.dumps(reply).encode() + b"\n")
            if stop:
                return


def main():
    until = time.monotonic() + float(sys.argv[1])
    port = os.open(PORT, os.O_RDWR | os.O_NONBLOCK)
    try:
        serve(port, until)
    finally:
        os.close(port)


if __name__ == "__main__":
    main()
