# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""An in-memory stand-in for the ``Hypervisor`` seam, for unit tests and fault injection.

It implements exactly the seam's methods, with the same signatures
(tests/unit/test_fake_conformance.py holds it to that), and behaves like
libvirt 9.0 where the flows branch on it: the error codes of missing domains,
pools and volumes, "already running"/"not running" as
VIR_ERR_OPERATION_INVALID, metadata written the way virDomainSetMetadata
writes it, volume XML with paths and backing stores, and a pool refresh that
reads a qcow2 header's virtual size. Any method can be made to fail
(``fail``), and uploads can be cut off after some bytes
(``cut_upload_after``). ``calls`` records every call by name so tests can
assert how many libvirt round trips a flow costs, and that check mode calls
none of ``MUTATING_METHODS``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import struct
from dataclasses import dataclass

from lxml import etree

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common import errors
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest import policy as _policy
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt import state as _state
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import ADDRESS_SOURCE_AGENT, UNDEFINE_ALL, Hypervisor

# Short names for the tests' domain states.
NOSTATE = _state.VIR_DOMAIN_NOSTATE
RUNNING = _state.VIR_DOMAIN_RUNNING
BLOCKED = _state.VIR_DOMAIN_BLOCKED
PAUSED = _state.VIR_DOMAIN_PAUSED
SHUTDOWN = _state.VIR_DOMAIN_SHUTDOWN
SHUTOFF = _state.VIR_DOMAIN_SHUTOFF
CRASHED = _state.VIR_DOMAIN_CRASHED
PMSUSPENDED = _state.VIR_DOMAIN_PMSUSPENDED

# virIPAddrType of an IPv6 address: guests report them, the collection reads only IPv4 (_state).
IP_ADDR_TYPE_IPV6 = 1


class FakeVolume:
    def __init__(self, pool, name, fmt, capacity, backing_path=None, backing_format=None, content=b""):
        self.pool = pool
        self.name = name
        self.format = fmt
        self.capacity = capacity
        self.backing_path = backing_path
        self.backing_format = backing_format
        self.content = bytearray(content)

    @property
    def path(self):
        return "%s/%s" % (self.pool.path, self.name)

    def to_xml(self):
        vol = etree.Element("volume", type="file")
        etree.SubElement(vol, "name").text = self.name
        etree.SubElement(vol, "key").text = self.path
        etree.SubElement(vol, "capacity", unit="bytes").text = str(self.capacity)
        etree.SubElement(vol, "allocation", unit="bytes").text = str(len(self.content))
        target = etree.SubElement(vol, "target")
        etree.SubElement(target, "path").text = self.path
        etree.SubElement(target, "format", type=self.format)
        if self.backing_path:
            backing = etree.SubElement(vol, "backingStore")
            etree.SubElement(backing, "path").text = self.backing_path
            etree.SubElement(backing, "format", type=self.backing_format or "raw")
        return etree.tostring(vol, encoding="unicode")


class FakePool:
    def __init__(self, name, path):
        self.name = name
        self.path = path
        self.volumes = {}


class FakeDomain:
    def __init__(self, name, xml, state=SHUTOFF):
        self.name = name
        self.xml = xml
        self.state = state
        self.autostart = False
        self.addresses = {}  # source (ADDRESS_SOURCE_*) -> interfaceAddresses() result
        self.agent_error = None
        self.honours_acpi = True
        self.guest = FakeGuest()


@dataclass
class FakeFile:
    content: bytes
    owner: str = "root"
    group: str = "root"
    mode: str = "0644"


# The base64 of the largest guest-file-write the lab's qemu-ga 7.2 answers was measured between 160 KiB (answered) and
# 192 KiB (no answer): the fake refuses past 160 KiB's.
GA_WRITE_LIMIT_B64 = 4 * (160 * 1024) // 3


class FakeGuest:
    """What a guest's qemu-ga does with the commands the collection sends: files, and the programs it runs.

    The apply's fixed scripts (_guest.policy) are carried out by their
    meaning; any other program is looked up in ``programs`` ({path: function
    (argv, guest) -> (exit code, stdout bytes, stderr bytes)}), and a missing
    one fails like exec would. ``ran`` lists every argv run.

    A compromised guest answers what it likes: ``hostile`` ({command:
    function(arguments, honest reply) -> reply}) replaces the reply of a
    command; ``answered`` counts the replies given.
    """

    def __init__(self):
        # A guest whose first boot is over, as cloud-init marks it.
        self.files = {_policy.BOOT_FINISHED: FakeFile(b"1000.0 Wed, 02 Dec 2026 10:00:00 +0000\n")}
        self.groups = {"root", "proxy"}
        self.programs = {}
        self.hostile = {}
        self.answered = 0
        self.ran = []
        self._handles = {}
        self._exited = {}

    def run(self, argv):
        self.ran.append(list(argv))
        if argv[0] == _policy.SHELL and argv[1] == "-c":
            return self._script(argv[2], argv[4:])
        program = self.programs.get(argv[0])
        if program is None:
            return 127, b"", ("%s: not found" % argv[0]).encode()
        return program(argv, self)

    def _script(self, script, args):
        kept = _policy.KEPT_SUFFIX
        if script == _policy._STAGE:
            for index in range(0, len(args), 3):
                owner_group, mode, staged = args[index:index + 3]
                owner, group = owner_group.split(":")
                if group not in self.groups:
                    return 1, b"", ("chown: invalid group: '%s'" % owner_group).encode()
                self.files[staged] = FakeFile(b"", owner, group, mode)
        elif script == _policy._INSTALL:
            for index in range(0, len(args), 2):
                staged, path = args[index:index + 2]
                if path in self.files:
                    self.files[path + kept] = self.files[path]
                else:
                    self.files.pop(path + kept, None)
                self.files[path] = self.files.pop(staged)
        elif script == _policy._ROLLBACK:
            for path in args:
                if path + _policy.STAGED_SUFFIX in self.files:
                    self.files.pop(path + _policy.STAGED_SUFFIX)
                    self.files.pop(path + kept, None)
                elif path + kept in self.files:
                    self.files[path] = self.files.pop(path + kept)
                else:
                    self.files.pop(path, None)
        elif script == _policy._DISCARD:
            for path in args:
                self.files.pop(path, None)
        elif script == _policy._RECOVER:
            recovered = False
            for path in args:
                self.files.pop(path + _policy.STAGED_SUFFIX, None)
                if path + kept in self.files:
                    self.files[path] = self.files.pop(path + kept)
                    recovered = True
            return (_policy.RECOVERED if recovered else 0), b"", b""
        elif script == _policy._COMMIT:
            for path in args:
                self.files.pop(path + kept, None)
        else:
            raise AssertionError("a script the fake does not know: %r" % script)
        return 0, b"", b""

    def command(self, name, arguments):
        self.answered += 1
        reply = self._honest(name, arguments or {})
        if name in self.hostile:
            return self.hostile[name](arguments or {}, reply)
        return reply

    def _honest(self, name, arguments):
        if name == "guest-ping":
            return {}
        if name == "guest-file-open":
            path, mode = arguments["path"], arguments["mode"]
            if mode == "r" and path not in self.files:
                raise errors.classify(errors.VIR_ERR_INTERNAL_ERROR, "unable to execute QEMU agent command "
                                      "'guest-file-open': Failed to open file '%s' (mode: 'r'): No such file or "
                                      "directory" % path, "fake guest_query")
            if mode == "w":
                self.files.setdefault(path, FakeFile(b"")).content = b""  # an existing file keeps owner and mode
            handle = 1000 + len(self._handles) + len(self._exited)
            self._handles[handle] = [path, 0]
            return handle
        if name == "guest-file-read":
            path, offset = self._handles[arguments["handle"]]
            data = self.files[path].content[offset:offset + arguments["count"]]
            self._handles[arguments["handle"]][1] += len(data)
            return {"count": len(data), "buf-b64": base64.b64encode(data).decode(), "eof": offset + len(data) >= len(
                self.files[path].content)}
        if name == "guest-file-write":
            if len(arguments["buf-b64"]) > GA_WRITE_LIMIT_B64:
                raise errors.classify(errors.VIR_ERR_AGENT_UNRESPONSIVE, "Guest agent is not responding: Guest agent "
                                      "not available for now", "fake guest_query")
            path = self._handles[arguments["handle"]][0]
            self.files[path].content += base64.b64decode(arguments["buf-b64"])
            return {"count": len(base64.b64decode(arguments["buf-b64"])), "eof": False}
        if name == "guest-file-close":
            del self._handles[arguments["handle"]]
            return {}
        if name == "guest-exec":
            pid = 4000 + len(self._exited)
            self._exited[pid] = self.run([arguments["path"]] + list(arguments.get("arg", [])))
            return {"pid": pid}
        if name == "guest-exec-status":
            code, out, err = self._exited[arguments["pid"]]
            return {"exited": True, "exitcode": code, "out-data": base64.b64encode(out).decode(),
                    "err-data": base64.b64encode(err).decode()}
        raise errors.classify(errors.VIR_ERR_INTERNAL_ERROR, "unable to execute QEMU agent command '%s': The command "
                              "%s has not been found" % (name, name), "fake")


def _qcow2_virtual_size(content):
    if len(content) >= 32 and bytes(content[:4]) == b"QFI\xfb":
        return struct.unpack(">Q", bytes(content[24:32]))[0]
    return None


class FakeHypervisor:
    MUTATING_METHODS = Hypervisor.MUTATING_METHODS

    def __init__(self, hostname="hv1", uri="qemu:///system"):
        self.uri = uri
        self._hostname = hostname
        self.pools = {}
        self.domains = {}
        self.calls = []
        self.undefine_supported_flags = UNDEFINE_ALL
        self.interfaces = {"lo", "br0", "br1"}
        self.networks = {"default"}
        self._failures = {}
        self._upload_cuts = {}

    # --- test controls ------------------------------------------------------------

    def add_pool(self, name="default", path=None):
        pool = FakePool(name, path or "/var/lib/libvirt/images/%s" % name)
        self.pools[name] = pool
        return pool

    def add_volume(self, pool_name, name, content=b"", fmt="raw", capacity=None, backing_path=None, backing_format=None):
        pool = self.pools[pool_name]
        vol = FakeVolume(pool, name, fmt, len(content) if capacity is None else capacity, backing_path, backing_format, content)
        pool.volumes[name] = vol
        return vol

    def add_domain(self, name, xml=None, state=SHUTOFF):
        dom = FakeDomain(name, xml or "<domain type='kvm'><name>%s</name></domain>" % name, state)
        self.domains[name] = dom
        return dom

    def fail(self, method, code=errors.VIR_ERR_INTERNAL_ERROR, message="injected failure", times=None, when=None):
        """Make ``method`` raise libvirt error ``code`` (``times`` times, or always).

        ``when`` is an optional predicate over the call's arguments.
        """
        self._failures.setdefault(method, []).append([code, message, times, when])

    def cut_upload_after(self, volume_name, nbytes):
        """The next upload to ``volume_name`` dies after ``nbytes`` bytes, like a killed stream."""
        self._upload_cuts[volume_name] = nbytes

    def volume(self, pool_name, name):
        return self.pools[pool_name].volumes.get(name)

    def _enter(self, method, *args):
        self.calls.append(method)
        for failure in self._failures.get(method, []):
            code, message, times, when = failure
            if times == 0 or (when is not None and not when(*args)):
                continue
            if times is not None:
                failure[2] = times - 1
            raise errors.classify(code, message, "fake %s" % method)

    @staticmethod
    def _error(code, message):
        return errors.classify(code, message, "fake")

    # --- the seam ---------------------------------------------------------------------

    def close(self):
        self.calls.append("close")

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def hostname(self):
        self._enter("hostname")
        return self._hostname

    def lookup_domain(self, name):
        self._enter("lookup_domain", name)
        if name not in self.domains:
            raise self._error(errors.VIR_ERR_NO_DOMAIN, "Domain not found: no domain with matching name '%s'" % name)
        return self.domains[name]

    def list_domains(self):
        self._enter("list_domains")
        return list(self.domains.values())

    def define_domain(self, xml):
        self._enter("define_domain", xml)
        name = etree.fromstring(xml.encode("utf-8")).findtext("name")
        dom = self.domains.get(name)
        if dom is None:
            dom = self.domains[name] = FakeDomain(name, xml)
        else:
            dom.xml = xml
        return dom

    def _live(self, dom):
        if self.domains.get(dom.name) is not dom:
            raise self._error(errors.VIR_ERR_NO_DOMAIN, "Domain not found: '%s'" % dom.name)
        return dom

    def domain_name(self, dom):
        return dom.name

    def domain_state(self, dom):
        self._enter("domain_state", dom)
        return self._live(dom).state

    def domain_xml(self, dom):
        self._enter("domain_xml", dom)
        return self._live(dom).xml

    def set_domain_metadata(self, dom, xml, key, uri, live):
        self._enter("set_domain_metadata", dom, xml, key, uri, live)
        root = etree.fromstring(self._live(dom).xml.encode("utf-8"))
        metadata = root.find("metadata")
        if metadata is None:
            metadata = etree.SubElement(root, "metadata")
        for element in metadata.findall("*"):
            if etree.QName(element).namespace == uri:
                metadata.remove(element)
        element = etree.fromstring(xml.encode("utf-8"))
        if any(isinstance(node.tag, str) and etree.QName(node).namespace for node in element.iter()):
            # As libvirt 9.0 answers an element that brings its own namespace.
            raise self._error(errors.VIR_ERR_INTERNAL_ERROR, "internal error: failed to create a new XML namespace")
        qualified = etree.SubElement(metadata, etree.QName(uri, element.tag), nsmap={key: uri})
        for child in element:
            etree.SubElement(qualified, etree.QName(uri, child.tag)).text = child.text
        dom.xml = etree.tostring(root, encoding="unicode")

    def start_domain(self, dom):
        self._enter("start_domain", dom)
        if self._live(dom).state in (RUNNING, BLOCKED, PAUSED):
            raise self._error(errors.VIR_ERR_OPERATION_INVALID, "Requested operation is not valid: domain is already running")
        dom.state = RUNNING

    def shutdown_domain(self, dom):
        self._enter("shutdown_domain", dom)
        if self._live(dom).state not in (RUNNING, BLOCKED, PAUSED):
            raise self._error(errors.VIR_ERR_OPERATION_INVALID, "Requested operation is not valid: domain is not running")
        if dom.honours_acpi:
            dom.state = SHUTOFF

    def destroy_domain(self, dom):
        self._enter("destroy_domain", dom)
        if self._live(dom).state in (SHUTOFF, NOSTATE):
            raise self._error(errors.VIR_ERR_OPERATION_INVALID, "Requested operation is not valid: domain is not running")
        dom.state = SHUTOFF

    def undefine_domain(self, dom, flags):
        self._enter("undefine_domain", dom, flags)
        self._live(dom)
        if flags & ~self.undefine_supported_flags:
            raise self._error(errors.VIR_ERR_NO_SUPPORT, "this function is not supported by the connection driver: undefine flags")
        del self.domains[dom.name]

    def domain_autostart(self, dom):
        self._enter("domain_autostart", dom)
        return self._live(dom).autostart

    def set_domain_autostart(self, dom, enabled):
        self._enter("set_domain_autostart", dom, enabled)
        self._live(dom).autostart = bool(enabled)

    def domain_addresses(self, dom, source):
        self._enter("domain_addresses", dom, source)
        self._live(dom)
        if source == ADDRESS_SOURCE_AGENT and dom.agent_error is not None:
            raise self._error(dom.agent_error, "Guest agent is not responding: QEMU guest agent is not connected")
        if dom.state not in (RUNNING, BLOCKED):
            raise self._error(errors.VIR_ERR_OPERATION_INVALID, "Requested operation is not valid: domain is not running")
        return dom.addresses.get(source, {})

    def guest_query(self, dom, command, arguments, timeout):
        self._enter("guest_query", dom, command, arguments)
        return self._agent(dom, command, arguments)

    def guest_change(self, dom, command, arguments, timeout):
        self._enter("guest_change", dom, command, arguments)
        return self._agent(dom, command, arguments)

    def _agent(self, dom, command, arguments):
        self._live(dom)
        if dom.agent_error is not None:
            raise self._error(dom.agent_error, "Guest agent is not responding: QEMU guest agent is not connected")
        if dom.state not in (RUNNING, BLOCKED):
            raise self._error(errors.VIR_ERR_OPERATION_INVALID, "Requested operation is not valid: domain is not running")
        return dom.guest.command(command, arguments)

    def lookup_interface(self, name):
        self._enter("lookup_interface", name)
        if name not in self.interfaces:
            raise self._error(errors.VIR_ERR_NO_INTERFACE, "Interface not found: couldn't find interface named '%s'" % name)
        return name

    def lookup_network(self, name):
        self._enter("lookup_network", name)
        if name not in self.networks:
            raise self._error(errors.VIR_ERR_NO_NETWORK, "Network not found: no network with matching name '%s'" % name)
        return name

    def lookup_pool(self, name):
        self._enter("lookup_pool", name)
        if name not in self.pools:
            raise self._error(errors.VIR_ERR_NO_STORAGE_POOL, "Storage pool not found: no storage pool with matching name '%s'" % name)
        return self.pools[name]

    def refresh_pool(self, pool):
        self._enter("refresh_pool", pool)
        # Like a directory pool: libvirt probes every file, so a volume created
        # raw whose bytes are a qcow2 image reads back as qcow2 with the
        # virtual size of its header (measured on libvirt 9.0).
        for vol in pool.volumes.values():
            size = _qcow2_virtual_size(vol.content)
            if size is not None:
                vol.format = "qcow2"
                vol.capacity = size

    def list_volumes(self, pool):
        self._enter("list_volumes", pool)
        return list(pool.volumes.values())

    def lookup_volume(self, pool, name):
        self._enter("lookup_volume", pool, name)
        if name not in pool.volumes:
            raise self._error(errors.VIR_ERR_NO_STORAGE_VOL, "Storage volume not found: no storage vol with matching name '%s'" % name)
        return pool.volumes[name]

    def volume_name(self, vol):
        return vol.name

    def _live_volume(self, vol):
        if vol.pool.volumes.get(vol.name) is not vol:
            raise self._error(errors.VIR_ERR_NO_STORAGE_VOL, "Storage volume not found: '%s'" % vol.name)
        return vol

    def volume_path(self, vol):
        self._enter("volume_path", vol)
        return self._live_volume(vol).path

    def volume_xml(self, vol):
        self._enter("volume_xml", vol)
        return self._live_volume(vol).to_xml()

    def create_volume(self, pool, xml):
        self._enter("create_volume", pool, xml)
        root = etree.fromstring(xml.encode("utf-8"))
        name = root.findtext("name")
        if name in pool.volumes:
            raise self._error(errors.VIR_ERR_STORAGE_VOL_EXIST, "storage volume '%s' exists already" % name)
        capacity = root.find("capacity")
        if capacity.get("unit", "bytes") != "bytes":
            raise AssertionError("the collection always gives capacities in bytes, got %r" % capacity.get("unit"))
        fmt = root.find("target/format")
        backing = root.find("backingStore")
        vol = FakeVolume(
            pool,
            name,
            fmt.get("type") if fmt is not None else "raw",
            int(capacity.text),
            backing.findtext("path") if backing is not None else None,
            backing.find("format").get("type") if backing is not None and backing.find("format") is not None else None,
        )
        pool.volumes[name] = vol
        return vol

    def delete_volume(self, vol):
        self._enter("delete_volume", vol)
        del self._live_volume(vol).pool.volumes[vol.name]

    def upload_volume(self, vol, chunks):
        self._enter("upload_volume", vol)
        self._live_volume(vol)
        cut = self._upload_cuts.pop(vol.name, None)
        vol.content = bytearray()
        for chunk in chunks:
            if cut is not None and len(vol.content) + len(chunk) > cut:
                vol.content += chunk[: cut - len(vol.content)]
                raise self._error(errors.VIR_ERR_RPC, "stream aborted: connection reset")
            vol.content += chunk

    def download_volume(self, vol, limit=None):
        self._enter("download_volume", vol)
        data = bytes(self._live_volume(vol).content)
        if limit:
            data = data[:limit]
        for start in range(0, len(data), 65536):
            yield data[start:start + 65536]
