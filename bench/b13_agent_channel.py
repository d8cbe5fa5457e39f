"""Reaching inside a running guest through the qemu guest agent: community.libvirt's connection plugin against raw qemuAgentCommand.

Run as root on the lab after `scripts/demo` (egress-demo-1 on lab-hv1, egress-demo-2 on lab-hv2), from the
repository root: `python3 bench/b13_agent_channel.py [--runs 5] [--reps 20] [--poll 0.05] [--json out.json]`.
It changes nothing in the guests but two files under /tmp, removed at the end; the domains stay running.

Three ways, side by side, on egress-demo-1:

- the peer: community.libvirt's `libvirt_qemu` connection plugin (the pinned `ansible` package in the bench
  virtualenv under ~/.cache/egress-proxies-bench/, which has libvirt-python), from this controller over
  `qemu+ssh` to lab-hv1, inventory host = the domain name. Wall clock of `ansible-playbook` (start-up
  included), `--runs` runs each: one `ping` task, `copy` of 4 KiB and of 64 KiB to /tmp, `command: squid -k
  parse`, and five tasks (copy 4 KiB, copy 64 KiB, squid -k parse, squid -k check, fetch of the 4 KiB file):
  the cost of a task beyond the first is (five - ping) / 4;
- raw `libvirt_qemu.qemuAgentCommand` on the hypervisor itself (qemu:///system; this file piped to its
  /usr/bin/python3 over SSH, python3-libvirt 9.0), and the same from this controller over qemu+ssh
  (URI with `command=tests/lab/lab-ssh.sh`: libvirt's ssh transport takes no known_hosts from the URI).
  `--reps` repetitions each: opening the connection (open + lookupByName), guest-ping, guest-info,
  writing 4 KiB and 64 KiB (guest-file-open "w", one guest-file-write in base64, guest-file-close), reading
  them back (open "r", guest-file-read with count = size, close), guest-exec of /bin/true and of
  `/usr/sbin/squid -k parse` with capture-output, guest-exec-status polled every `--poll` seconds until it
  exited, and the sequence ping + write 2 files + 1 exec + read 2 files. Then the sequence from two threads:
  on one connection to the same domain, and (controller only) on both demo proxies, one connection each.

Also printed: the guest agent's facts (version, enabled commands, whether `qemu-ga --help` offers
--allow-rpcs/--block-rpcs, its config and the systemd unit's ExecStart), whether the domain is tainted
before and after (the domain log and `virsh dominfo`), and what happens to large guest-exec output.
Output larger than libvirt's 10 MiB agent reply limit is never asked for: on 2026-12-03 a 16 MiB reply
made libvirt drop the agent ("QEMU guest agent is not available due to an error") while qemu-ga spun at
100 % CPU trying to write the rest; only a live detach and re-attach of the agent channel brought it back.

Measured 2026-12-03 (2 host cores at load 2-3, medians): raw sequence 677 ms on the hypervisor, 1256 ms from the
controller; the plugin's one-task ping playbook 11.4 s and its five tasks 51.9 s, ~4.7 s of each module task being
the module's Python run in the TCG guest.
"""

import argparse
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

DOMAIN = "egress-demo-1"
OTHER_DOMAIN = "egress-demo-2"
SQUID_PARSE = ["/usr/sbin/squid", "-k", "parse"]
FILES = {"4k": 4096, "64k": 65536}
GUEST_DIR = "/tmp"
TIMEOUT = 30  # seconds libvirt waits for one agent reply
PARSE_CODES = []  # exit codes of every squid -k parse run by this process


# --- the worker: stdlib and libvirt-python only, so it runs on the hypervisor's /usr/bin/python3 from stdin ---

def payload(size, seed):
    return bytes((seed + index * 7) % 251 for index in range(size))


class Agent:
    def __init__(self, conn, name):
        import libvirt_qemu

        self._command = libvirt_qemu.qemuAgentCommand
        self.dom = conn.lookupByName(name)

    def __call__(self, command, arguments=None, timeout=TIMEOUT):
        message = {"execute": command}
        if arguments is not None:
            message["arguments"] = arguments
        return json.loads(self._command(self.dom, json.dumps(message), timeout, 0))["return"]

    def write(self, path, data):
        handle = self("guest-file-open", {"path": path, "mode": "w"})
        try:
            self("guest-file-write", {"handle": handle, "buf-b64": base64.b64encode(data).decode()})
        finally:
            self("guest-file-close", {"handle": handle})

    def read(self, path, count):
        handle = self("guest-file-open", {"path": path, "mode": "r"})
        data = b""
        try:
            while True:
                reply = self("guest-file-read", {"handle": handle, "count": count})
                data += base64.b64decode(reply.get("buf-b64", ""))
                if reply.get("eof") or not reply.get("count"):
                    return data
        finally:
            self("guest-file-close", {"handle": handle})

    def run(self, argv, poll):
        """(exit code, stdout, stderr, polls, status reply) of a program run to its end in the guest."""
        pid = self("guest-exec", {"path": argv[0], "arg": list(argv[1:]), "capture-output": True})["pid"]
        polls = 0
        while True:
            status = self("guest-exec-status", {"pid": pid})
            polls += 1
            if status["exited"]:
                break
            time.sleep(poll)
        return (status.get("exitcode"), base64.b64decode(status.get("out-data", "")),
                base64.b64decode(status.get("err-data", "")), polls, status)


def sequence(agent, poll, tag, program=True):
    """ping + write 2 files + squid -k parse (unless not ``program``) + read both back; the files checked."""
    agent("guest-ping")
    written = {}
    for name, size in FILES.items():
        path = "%s/agent-bench-%s-%s" % (GUEST_DIR, tag, name)
        written[path] = payload(size, len(tag) + size)
        agent.write(path, written[path])
    if program:
        # Its exit code is counted, not checked: squid.conf is the guest's, and someone else may be editing it.
        PARSE_CODES.append(agent.run(SQUID_PARSE, poll)[0])
    for path, data in written.items():
        if agent.read(path, len(data)) != data:
            raise RuntimeError("%s read back differs" % path)


def timings(reps, action):
    runs = []
    for _rep in range(reps):
        started = time.monotonic()
        action()
        runs.append(time.monotonic() - started)
    return {"runs": [round(value, 5) for value in runs], "median": round(statistics.median(runs), 5),
            "min": round(min(runs), 5)}


def threaded(actions):
    """Wall seconds of running every action at once, one thread each; the first error raised."""
    import libvirt
    errors = []

    def guarded(action):
        try:
            action()
        except (OSError, RuntimeError, ValueError, KeyError, libvirt.libvirtError) as error:  # raised below
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(action,)) for action in actions]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.monotonic() - started


def facts(agent, poll):
    info = agent("guest-info")
    enabled = sorted(command["name"] for command in info["supported_commands"] if command["enabled"])
    disabled = sorted(command["name"] for command in info["supported_commands"] if not command["enabled"])
    helptext = agent.run(["/usr/sbin/qemu-ga", "--help"], poll)[1].decode()
    unit = agent.run(["/bin/systemctl", "cat", "qemu-guest-agent"], poll)[1].decode()
    dumped = agent.run(["/usr/sbin/qemu-ga", "--dump-conf"], poll)[1].decode()
    config = agent.run(["/bin/sh", "-c", "cat /etc/qemu/qemu-ga.conf 2>&1; ls /etc/qemu"], poll)[1].decode()
    python = agent.run(["/bin/sh", "-c", "command -v python3 && python3 --version"], poll)[1].decode()
    return {
        "version": info["version"],
        "enabled": enabled,
        "disabled": disabled,
        "allow_rpcs": "--allow-rpcs" in helptext,
        "block_rpcs": "--block-rpcs" in helptext,
        "exec_start": [line for line in unit.splitlines() if line.startswith("ExecStart")],
        "unit_file": unit.splitlines()[0] if unit else "",
        "dump_conf": dumped.strip(),
        "etc_qemu": config.strip(),
        "python": python.strip(),
    }


def output_limits(agent, poll):
    """What guest-exec-status returns for programs writing 1 MiB, 2.9 MiB and 3 MiB (all below 10 MiB)."""
    import libvirt

    results = {}
    for label, size in (("1 MiB", 1 << 20), ("2.9 MiB", int(2.9 * (1 << 20))), ("3 MiB", 3 << 20)):
        try:
            status = agent.run(["/bin/sh", "-c", "head -c %d /dev/zero" % size], poll)[4]
            results[label] = "ok, %d bytes back, out-truncated %s" % (
                len(base64.b64decode(status.get("out-data", ""))), status.get("out-truncated", False))
        except libvirt.libvirtError as error:
            results[label] = "libvirt error %d: %s" % (error.get_error_code(), str(error).strip())
    agent("guest-ping")  # the agent still answers afterwards
    return results


def worker(uri, domain, reps, poll, with_facts):
    import libvirt

    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    result = {"uri": uri}

    def open_close():
        conn = libvirt.open(uri)
        conn.lookupByName(domain)
        conn.close()

    result["open"] = timings(reps, open_close)
    conn = libvirt.open(uri)
    agent = Agent(conn, domain)
    tag = "w%d" % os.getpid()
    try:
        result["guest-ping"] = timings(reps, lambda: agent("guest-ping"))
        result["guest-info"] = timings(reps, lambda: agent("guest-info"))
        for name, size in FILES.items():
            path = "%s/agent-bench-%s-%s" % (GUEST_DIR, tag, name)
            data = payload(size, size)
            result["write " + name] = timings(reps, lambda path=path, data=data: agent.write(path, data))
            result["read " + name] = timings(reps, lambda path=path, size=size: agent.read(path, size))
            if agent.read(path, size) != data:
                raise RuntimeError("%s read back differs" % path)
        result["exec /bin/true"] = timings(reps, lambda: agent.run(["/bin/true"], poll))
        result["exec python3 -c pass"] = timings(max(3, reps // 4), lambda: agent.run(["/usr/bin/python3", "-c", "pass"], poll))
        polls = []
        result["exec squid -k parse"] = timings(reps, lambda: polls.append(agent.run(SQUID_PARSE, poll)[3]))
        result["exec squid -k parse"]["codes"] = sorted(set(PARSE_CODES))
        result["exec polls"] = {"median": statistics.median(polls), "min": min(polls), "max": max(polls)}
        result["sequence"] = timings(reps, lambda: sequence(agent, poll, tag))
        pair = [lambda: sequence(agent, poll, tag + "a"), lambda: sequence(agent, poll, tag + "b")]
        result["2 threads, 1 connection, same domain"] = timings(max(3, reps // 4), lambda: threaded(pair))
        result["squid -k parse exit codes"] = {str(code): PARSE_CODES.count(code) for code in set(PARSE_CODES)}
        if with_facts:
            result["facts"] = facts(agent, poll)
            result["output limits"] = output_limits(agent, poll)
    finally:
        agent.run(["/bin/sh", "-c", "rm -f %s/agent-bench-%s*" % (GUEST_DIR, tag)], poll)
        conn.close()
    return result


# --- the controller -------------------------------------------------------------------------------------------------

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_VENV = os.path.expanduser("~/.cache/egress-proxies-bench/peer-ansible-12.3.0")
PEER_PLAYBOOKS = {
    "ping (1 task)": ["ansible.builtin.ping:"],
    "copy 4 KiB": ["ansible.builtin.copy: {src: '%(dir)s/file-4k', dest: /tmp/agent-bench-peer-4k}"],
    "copy 64 KiB": ["ansible.builtin.copy: {src: '%(dir)s/file-64k', dest: /tmp/agent-bench-peer-64k}"],
    "command squid -k parse": ["ansible.builtin.command: /usr/sbin/squid -k parse"],
    "5 tasks": ["ansible.builtin.copy: {src: '%(dir)s/file-4k', dest: /tmp/agent-bench-peer-4k}",
                "ansible.builtin.copy: {src: '%(dir)s/file-64k', dest: /tmp/agent-bench-peer-64k}",
                "ansible.builtin.command: /usr/sbin/squid -k parse",
                "ansible.builtin.command: /usr/sbin/squid -k check",
                "ansible.builtin.fetch: {src: /tmp/agent-bench-peer-4k, dest: '%(dir)s/fetched/', flat: false}"],
}


def lab():
    sys.path.insert(0, REPO_ROOT)
    from tests.lab import config

    return config, config.hypervisor_specs(2)


def controller_uri(config, spec):
    # libvirt's ssh transport runs `ssh` and passes it -i KEYFILE but no known_hosts (that parameter is the
    # libssh/libssh2 transports' only): without ?command= ssh reads ~/.ssh/known_hosts and fails
    # "Host key verification failed". lab-ssh.sh is ssh -F with the lab's key and known_hosts.
    return "qemu+ssh://root@%s/system?keyfile=%s&command=%s" % (spec.address, config.SSH_KEY, config.LAB_SSH)


def ssh(config, spec, command, stdin=None):
    return subprocess.run([config.LAB_SSH, spec.name, command], input=stdin, capture_output=True, text=True,
                          check=True).stdout


def taint(config, spec, domain):
    """The taint lines of the domain's current run in its log, and virsh dominfo's Messages."""
    log = ssh(config, spec, "sed -n \"$(grep -n 'starting up' /var/log/libvirt/qemu/%s.log | tail -1 | cut -d: -f1),\\$p\" "
              "/var/log/libvirt/qemu/%s.log | grep tainted || true" % (domain, domain))
    info = ssh(config, spec, "virsh dominfo %s | grep -i messages || true; virsh domstate --reason %s" % (domain, domain))
    return {"log": log.strip(), "dominfo": " / ".join(line.strip() for line in info.splitlines() if line.strip())}


def run_peer(config, spec, runs):
    if not os.path.exists(os.path.join(PEER_VENV, "bin", "ansible-playbook")):
        return {"error": "no peer virtualenv at %s (bench/run makes it)" % PEER_VENV}
    probe = subprocess.run([os.path.join(PEER_VENV, "bin", "python"), "-c", "import libvirt; print(libvirt.getVersion())"],
                           capture_output=True, text=True, check=False)
    result = {"libvirt-python": probe.stdout.strip() or probe.stderr.strip().splitlines()[-1]}
    workdir = tempfile.mkdtemp(prefix="agent-bench-")
    with open(os.path.join(workdir, "hosts.yml"), "w") as handle:
        handle.write("all:\n  hosts:\n    %s:\n      ansible_connection: community.libvirt.libvirt_qemu\n"
                     "      ansible_libvirt_uri: '%s'\n      ansible_python_interpreter: /usr/bin/python3\n"
                     # qemu-ga runs programs without HOME: with the default ~/.ansible/tmp the shell makes
                     # /~/.ansible/tmp, put_file writes there, but copy's module expands ~ to /root and finds
                     # no .source ("Source /root/.ansible/tmp/.../.source not found").
                     "      ansible_remote_tmp: /tmp/.ansible-agent-bench\n"
                     % (DOMAIN, controller_uri(config, spec)))
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    for label, tasks in PEER_PLAYBOOKS.items():
        path = os.path.join(workdir, "play.yml")
        with open(path, "w") as handle:
            handle.write("- hosts: all\n  gather_facts: false\n  tasks:\n")
            for task in tasks:
                handle.write("    - %s\n" % (task % {"dir": workdir}))
        seconds = []
        for _run in range(runs):
            for name, size in FILES.items():  # new content each run: copy skips a file whose checksum matches
                with open(os.path.join(workdir, "file-" + name), "wb") as handle:
                    handle.write(os.urandom(size))
            started = time.monotonic()
            done = subprocess.run([os.path.join(PEER_VENV, "bin", "ansible-playbook"), "-i",
                                   os.path.join(workdir, "hosts.yml"), path], capture_output=True, text=True, env=env,
                                  check=False)
            seconds.append(time.monotonic() - started)
            if done.returncode != 0:
                result[label] = {"error": (done.stdout + done.stderr)[-1500:]}
                break
        else:
            result[label] = {"runs": [round(value, 3) for value in seconds],
                             "median": round(statistics.median(seconds), 3), "min": round(min(seconds), 3)}
    import libvirt

    conn = libvirt.open(controller_uri(config, spec))
    Agent(conn, DOMAIN).run(["/bin/rm", "-rf", "--", "/tmp/.ansible-agent-bench", "/tmp/agent-bench-peer-4k",
                             "/tmp/agent-bench-peer-64k"], 0.05)
    conn.close()
    shutil.rmtree(workdir)
    return result


def controller_parallel(config, specs, reps, poll):
    import libvirt

    pairs = [(libvirt.open(controller_uri(config, spec)), domain) for spec, domain in zip(specs, (DOMAIN, OTHER_DOMAIN))]
    agents = [Agent(conn, domain) for conn, domain in pairs]
    single = [timings(reps, lambda agent=agent: sequence(agent, poll, "one")) for agent in agents]
    both = timings(reps, lambda: threaded([lambda agent=agent: sequence(agent, poll, "two") for agent in agents]))
    io_single = [timings(reps, lambda agent=agent: sequence(agent, poll, "one", False)) for agent in agents]
    io_both = timings(reps, lambda: threaded([lambda agent=agent: sequence(agent, poll, "two", False) for agent in agents]))
    for agent in agents:
        agent.run(["/bin/sh", "-c", "rm -f %s/agent-bench-one* %s/agent-bench-two*" % (GUEST_DIR, GUEST_DIR)], poll)
    for conn, _domain in pairs:
        conn.close()
    return {"sequence on %s alone" % DOMAIN: single[0], "sequence on %s alone" % OTHER_DOMAIN: single[1],
            "both at once, 2 threads, 1 connection each": both,
            "no exec (ping, 2 writes, 2 reads) on %s alone" % DOMAIN: io_single[0],
            "no exec on %s alone" % OTHER_DOMAIN: io_single[1],
            "no exec, both at once, 2 threads": io_both}


def ms(figure):
    if not isinstance(figure, dict) or "median" not in figure:
        return "n/a" if figure is None else "error"
    return "%.1f / %.1f" % (figure["median"] * 1000, figure["min"] * 1000)


def report(results, args):
    peer, local, remote = results["peer"], results["hypervisor"], results["controller"]
    print("## Guest agent channel, %s on lab-hv1 (TCG, 1 vCPU), ms median / min\n" % DOMAIN)
    print("| Operation | libvirt_qemu plugin, ansible-playbook over qemu+ssh (%d runs) | raw qemuAgentCommand on the "
          "hypervisor, qemu:///system (%d reps) | raw qemuAgentCommand from the controller, qemu+ssh (%d reps) |"
          % (args.runs, args.reps, args.reps))
    print("| --- | --- | --- | --- |")
    rows = [("open connection + lookup", None, "open"), ("guest-ping", "ping (1 task)", "guest-ping"),
            ("guest-info", None, "guest-info"), ("write 4 KiB", "copy 4 KiB", "write 4k"),
            ("write 64 KiB", "copy 64 KiB", "write 64k"), ("read 4 KiB", None, "read 4k"),
            ("read 64 KiB", None, "read 64k"), ("exec /bin/true", None, "exec /bin/true"),
            ("exec python3 -c pass", None, "exec python3 -c pass"),
            ("exec squid -k parse (poll %g s)" % args.poll, "command squid -k parse", "exec squid -k parse"),
            ("sequence: ping, 2 writes, exec, 2 reads", None, "sequence"),
            ("5 tasks: 2 copies, parse, check, fetch", "5 tasks", None),
            ("sequence x2, 2 threads, 1 connection, same domain", None, "2 threads, 1 connection, same domain")]
    for label, peer_key, raw_key in rows:
        print("| %s | %s | %s | %s |" % (label, ms(peer.get(peer_key)) if peer_key else "",
                                         ms(local.get(raw_key)) if raw_key else "", ms(remote.get(raw_key)) if raw_key else ""))
    if isinstance(peer.get("5 tasks"), dict) and "median" in peer["5 tasks"] and "median" in peer.get("ping (1 task)", {}):
        print("\nPeer, per task beyond the first: (5 tasks - ping) / 4 = %.0f ms (medians)"
              % ((peer["5 tasks"]["median"] - peer["ping (1 task)"]["median"]) / 4 * 1000))
    print("\nsquid -k parse exit codes (count): hypervisor %s, controller %s, parallel runs %s"
          % (local.get("squid -k parse exit codes"), remote.get("squid -k parse exit codes"),
             results.get("parallel parse codes")))
    print("\nPolls of guest-exec-status per squid -k parse: hypervisor %s, controller %s"
          % (local.get("exec polls"), remote.get("exec polls")))
    print("\n## Both demo proxies from the controller (one qemu+ssh connection per hypervisor), ms median / min\n")
    print("| Run | ms |\n| --- | --- |")
    for label, figure in results["parallel"].items():
        print("| %s | %s |" % (label, ms(figure)))
    print("\n## Facts\n")
    facts_ = local.get("facts", {})
    for key in ("version", "allow_rpcs", "block_rpcs", "exec_start", "unit_file", "python"):
        print("- %s: %s" % (key, facts_.get(key)))
    print("- enabled commands (%d): %s" % (len(facts_.get("enabled", [])), ", ".join(facts_.get("enabled", []))))
    print("- disabled: %s" % ", ".join(facts_.get("disabled", [])))
    print("- /etc/qemu: %s" % facts_.get("etc_qemu", "").replace("\n", " | "))
    print("- qemu-ga --dump-conf: %s" % facts_.get("dump_conf", "").replace("\n", " | "))
    print("- peer virtualenv libvirt-python: %s" % peer.get("libvirt-python"))
    for label, text in local.get("output limits", {}).items():
        print("- guest-exec output %s: %s" % (label, text))
    for when in ("taint before", "taint after"):
        for domain, found in results[when].items():
            print("- %s, %s: log [%s]; %s" % (when, domain, found["log"] or "no taint line", found["dominfo"]))
    for key in ("peer", "hypervisor", "controller"):
        for label, figure in results[key].items():
            if isinstance(figure, dict) and "error" in figure:
                print("- %s %s failed: %s" % (key, label, figure["error"].replace("\n", " ")[-600:]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="ansible-playbook runs per peer playbook")
    parser.add_argument("--reps", type=int, default=20, help="repetitions per raw agent figure")
    parser.add_argument("--poll", type=float, default=0.05, help="seconds between guest-exec-status polls")
    parser.add_argument("--json", help="also write every figure here")
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--worker", nargs=2, metavar=("URI", "DOMAIN"), help=argparse.SUPPRESS)
    parser.add_argument("--facts", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.reps, args.poll, args.facts)))
        return
    try:
        import libvirt  # noqa: F401  (the controller's own raw figures need it)
    except ImportError:
        for python in (os.path.join(REPO_ROOT, ".venv", "bin", "python"), "/usr/bin/python3"):
            if os.path.exists(python) and subprocess.run([python, "-c", "import libvirt"], check=False).returncode == 0:
                os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])
        sys.exit("b13_agent_channel.py: no Python with libvirt-python here")
    config, specs = lab()
    hv1 = specs[0]
    results = {"taint before": {DOMAIN: taint(config, hv1, DOMAIN), OTHER_DOMAIN: taint(config, specs[1], OTHER_DOMAIN)}}
    with open(os.path.abspath(__file__)) as handle:
        source = handle.read()
    results["hypervisor"] = json.loads(ssh(
        config, hv1, "/usr/bin/python3 - --worker qemu:///system %s --reps %d --poll %s --facts"
        % (DOMAIN, args.reps, args.poll), stdin=source))
    del PARSE_CODES[:]
    results["controller"] = worker(controller_uri(config, hv1), DOMAIN, args.reps, args.poll, False)
    del PARSE_CODES[:]
    results["parallel"] = controller_parallel(config, specs, max(3, args.reps // 4), args.poll)
    results["parallel parse codes"] = {str(code): PARSE_CODES.count(code) for code in set(PARSE_CODES)}
    results["peer"] = {} if args.skip_peer else run_peer(config, hv1, args.runs)
    results["taint after"] = {DOMAIN: taint(config, hv1, DOMAIN), OTHER_DOMAIN: taint(config, specs[1], OTHER_DOMAIN)}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    report(results, args)


if __name__ == "__main__":
    main()
