# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one narrow seam between this collection and libvirt.

Everything else in module_utils talks to a ``Hypervisor`` and never imports
libvirt, so the unit tests drive the same flows through an in-memory fake
(tests/unit/fake_hypervisor.py) that implements exactly these methods. Every
libvirt failure leaves here as a typed error from _common/errors.py that keeps
libvirt's code and message. Handles (domains, pools, volumes) are opaque to
callers: they are only ever passed back into a ``Hypervisor`` method.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import threading

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import VIR_ERR_NO_SUPPORT, TransientError, classify
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.imports import lazy_import, optional_import

libvirt, LIBVIRT_REQUIREMENT = optional_import(
    "libvirt", "libvirt-python", "python3-libvirt on Debian/Ubuntu/RHEL, libvirt-python from PyPI")
# The guest agent's passthrough (virDomainQemuAgentCommand) ships in libvirt-python beside ``libvirt``, so
# LIBVIRT_REQUIREMENT covers it. Imported at the first agent call: most tasks make none.
libvirt_qemu = lazy_import("libvirt_qemu", "libvirt-python", LIBVIRT_REQUIREMENT[1])[0]

DEFAULT_URI = "qemu:///system"

# virDomainInterfaceAddressesSource
ADDRESS_SOURCE_AGENT = 1
ADDRESS_SOURCE_ARP = 2

# virDomainUndefineFlagsValues: remove everything libvirt may keep next to a
# definition, so an undefine never fails on leftover state.
UNDEFINE_MANAGED_SAVE = 1
UNDEFINE_SNAPSHOTS_METADATA = 2
UNDEFINE_NVRAM = 4
UNDEFINE_ALL = UNDEFINE_MANAGED_SAVE | UNDEFINE_SNAPSHOTS_METADATA | UNDEFINE_NVRAM

METADATA_ELEMENT = 2  # VIR_DOMAIN_METADATA_ELEMENT
METADATA_AFFECT_LIVE = 1  # VIR_DOMAIN_AFFECT_LIVE
METADATA_AFFECT_CONFIG = 2  # VIR_DOMAIN_AFFECT_CONFIG

# A hypervisor that stops answering (remote, or a local libvirtd that is
# stopped or wedged) is declared dead after interval * (count + 1) seconds
# instead of hanging the task forever.
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3

# Keepalive only starts once the connection is open, so the open itself has
# its own bound: a daemon that accepts the socket and never replies (frozen,
# or deadlocked) would otherwise hang virConnectOpen for ever. Generous
# enough for an SSH handshake through a jump host. A module's connect_timeout
# sets it per task (_common.argspec).
OPEN_TIMEOUT = 30

STREAM_CHUNK = 256 * 1024

_event_loop_lock = threading.Lock()
_event_loop_started = []


def _start_event_loop():
    # libvirt only sends keepalives while an event loop runs in the client;
    # one daemon thread per process serves every connection.
    with _event_loop_lock:
        if _event_loop_started:
            return
        libvirt.virEventRegisterDefaultImpl()

        def run():
            while True:
                libvirt.virEventRunDefaultImpl()

        thread = threading.Thread(target=run, name="libvirt-event-loop")
        thread.daemon = True
        thread.start()
        _event_loop_started.append(thread)


def _open_within(uri, seconds, hypervisor):
    """libvirt.open(uri), or TransientError when the hypervisor has not answered within ``seconds`` (None: no bound).

    ``hypervisor`` is how the messages name it. The open runs in a daemon
    thread: a connection that completes after the caller gave up is closed
    there, never leaked into a later call.
    """
    outcome = {}
    decided = threading.Lock()

    def connect():
        try:
            conn = libvirt.open(uri)
        except libvirt.libvirtError as exc:
            conn, outcome["error"] = None, exc
        with decided:
            if outcome.get("abandoned"):
                if conn is not None:
                    conn.close()
                return
            outcome["conn"] = conn

    thread = threading.Thread(target=connect, name="libvirt-open")
    thread.daemon = True
    thread.start()
    thread.join(seconds)
    with decided:
        if "conn" not in outcome:
            outcome["abandoned"] = True
            raise TransientError(
                "connecting to hypervisor %s: no answer within %s seconds (connect_timeout). Its libvirtd accepts"
                " connections but does not reply (stopped, frozen or overloaded), or the transport (SSH) hangs."
                " Nothing was changed; check libvirtd on that host and retry, or raise connect_timeout."
                % (hypervisor, seconds))
    if outcome["conn"] is None:
        exc = outcome["error"]
        raise _typed(exc, "connecting to hypervisor %s" % hypervisor) from exc
    return outcome["conn"]


def _silence_default_error_handler():
    # libvirt prints every error to stderr by default; the errors reach the
    # user through the task result instead.
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)


def _mutating(method):
    # The mark MUTATING_METHODS is built from; the method itself is unchanged.
    method.mutates_hypervisor = True
    return method


class Hypervisor:
    """One open libvirt connection, with exactly the calls this collection uses.

    The methods that change the hypervisor are marked ``@_mutating`` and
    listed in ``Hypervisor.MUTATING_METHODS``: check mode and the info paths
    call none of them, and the tests assert that from this one list.
    """

    def __init__(self, conn, uri):
        self._conn = conn
        self.uri = uri

    @classmethod
    def open(cls, uri=DEFAULT_URI, timeout=OPEN_TIMEOUT, name=None):
        """The connection to ``uri``, opened within ``timeout`` seconds (None: no bound); ``name`` is how a
        failure names the hypervisor besides its URI (a module's ``host``)."""
        _silence_default_error_handler()
        _start_event_loop()
        conn = _open_within(uri, timeout, uri if name is None else "%s (%s)" % (name, uri))
        try:
            conn.setKeepAlive(KEEPALIVE_INTERVAL, KEEPALIVE_COUNT)
        except libvirt.libvirtError as exc:
            # Drivers that run inside this process (test:///) have no daemon
            # that could stop answering, and no keepalive to turn on.
            if exc.get_error_code() != VIR_ERR_NO_SUPPORT:
                conn.close()
                raise _typed(exc, "enabling keepalive on %s" % uri) from exc
        return cls(conn, uri)

    def close(self):
        if self._conn is not None:
            try:
                self._conn.close()
            except libvirt.libvirtError:
                # The connection is already gone; nothing left to release.
                pass
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def _call(self, context, func, *args):
        try:
            return func(*args)
        except libvirt.libvirtError as exc:
            raise _typed(exc, context) from exc

    # --- host ---------------------------------------------------------------

    def hostname(self):
        return self._call("reading the hypervisor's host name", self._conn.getHostname)

    # --- domains --------------------------------------------------------------

    def lookup_domain(self, name):
        return self._call("looking up domain '%s'" % name, self._conn.lookupByName, name)

    def list_domains(self):
        """Every domain, running and defined-but-off."""
        return self._call("listing domains", self._conn.listAllDomains, 0)

    @_mutating
    def define_domain(self, xml):
        return self._call("defining domain", self._conn.defineXML, xml)

    def domain_name(self, dom):
        return dom.name()

    def domain_state(self, dom):
        """The virDomainState number."""
        return self._call("reading the state of domain '%s'" % dom.name(), dom.state)[0]

    def domain_xml(self, dom):
        return self._call("reading the definition of domain '%s'" % dom.name(), dom.XMLDesc, 0)

    @_mutating
    def set_domain_metadata(self, dom, xml, key, uri, live):
        """Replace the metadata element under ``uri`` in the persistent definition and, when ``live``, the running one.

        ``xml`` is unqualified (_libvirt.metadata.unqualified_xml): libvirt qualifies it with ``uri`` under prefix ``key``.
        """
        flags = METADATA_AFFECT_CONFIG | (METADATA_AFFECT_LIVE if live else 0)
        self._call("writing the metadata of domain '%s'" % dom.name(), dom.setMetadata, METADATA_ELEMENT, xml, key,
                   uri, flags)

    @_mutating
    def start_domain(self, dom):
        self._call("starting domain '%s'" % dom.name(), dom.create)

    @_mutating
    def shutdown_domain(self, dom):
        self._call("shutting down domain '%s'" % dom.name(), dom.shutdown)

    @_mutating
    def destroy_domain(self, dom):
        self._call("stopping domain '%s'" % dom.name(), dom.destroy)

    @_mutating
    def undefine_domain(self, dom, flags):
        self._call("undefining domain '%s'" % dom.name(), dom.undefineFlags, flags)

    def domain_autostart(self, dom):
        return bool(self._call("reading autostart of domain '%s'" % dom.name(), dom.autostart))

    @_mutating
    def set_domain_autostart(self, dom, enabled):
        self._call("setting autostart of domain '%s'" % dom.name(), dom.setAutostart, 1 if enabled else 0)

    def domain_addresses(self, dom, source):
        """``virDomainInterfaceAddresses`` for one source (ADDRESS_SOURCE_*)."""
        return self._call("reading the addresses of domain '%s'" % dom.name(), dom.interfaceAddresses, source, 0)

    def guest_query(self, dom, command, arguments, timeout):
        """One guest agent command that reads (guest-ping, guest-file-read, ...); the reply's ``return`` value."""
        return self._agent(dom, command, arguments, timeout)

    @_mutating
    def guest_change(self, dom, command, arguments, timeout):
        """One guest agent command that changes the guest (guest-file-write, guest-exec, ...); its ``return`` value."""
        return self._agent(dom, command, arguments, timeout)

    def _agent(self, dom, command, arguments, timeout):
        message = {"execute": command}
        if arguments is not None:
            message["arguments"] = arguments
        reply = self._call("running guest agent command %s in domain '%s'" % (command, dom.name()),
                           libvirt_qemu.qemuAgentCommand, dom, json.dumps(message), timeout, 0)
        return json.loads(reply).get("return")

    # --- networking -------------------------------------------------------------

    def lookup_interface(self, name):
        """A host interface (a bridge, say) by name; NotFoundError when the host has none of that name."""
        return self._call("looking up host interface '%s'" % name, self._conn.interfaceLookupByName, name)

    def lookup_network(self, name):
        return self._call("looking up libvirt network '%s'" % name, self._conn.networkLookupByName, name)

    # --- storage --------------------------------------------------------------

    def lookup_pool(self, name):
        return self._call("looking up storage pool '%s'" % name, self._conn.storagePoolLookupByName, name)

    @_mutating
    def refresh_pool(self, pool):
        self._call("refreshing storage pool '%s'" % pool.name(), pool.refresh, 0)

    def list_volumes(self, pool):
        return self._call("listing volumes of storage pool '%s'" % pool.name(), pool.listAllVolumes, 0)

    def lookup_volume(self, pool, name):
        return self._call("looking up volume '%s' in pool '%s'" % (name, pool.name()), pool.storageVolLookupByName, name)

    def volume_name(self, vol):
        return vol.name()

    def volume_path(self, vol):
        return self._call("reading the path of volume '%s'" % vol.name(), vol.path)

    def volume_xml(self, vol):
        return self._call("reading the definition of volume '%s'" % vol.name(), vol.XMLDesc, 0)

    @_mutating
    def create_volume(self, pool, xml):
        return self._call("creating a volume in pool '%s'" % pool.name(), pool.createXML, xml, 0)

    @_mutating
    def delete_volume(self, vol):
        self._call("deleting volume '%s'" % vol.name(), vol.delete, 0)

    @_mutating
    def upload_volume(self, vol, chunks):
        """Write the byte chunks from an iterable into the volume, from offset 0.

        The chunks are sent as they arrive, so memory stays flat whatever
        the size. If the iterable raises, the stream is aborted and the
        exception propagates: the volume is then incomplete, and callers
        decide whether it is removed.
        """
        context = "uploading to volume '%s'" % vol.name()
        stream = self._call(context, self._conn.newStream, 0)
        self._call(context, vol.upload, stream, 0, 0, 0)
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    # libvirt refuses a single message over its RPC limit
                    # ("Stream data too long"), so big chunks go in slices.
                    sent = self._call(context, stream.send, bytes(view[:STREAM_CHUNK]))
                    view = view[sent:]
            self._call(context, stream.finish)
        except BaseException:
            _abort(stream)
            raise

    def download_volume(self, vol, limit=None):
        """Yield the volume's bytes in chunks, at most ``limit`` bytes in all."""
        context = "downloading volume '%s'" % vol.name()
        stream = self._call(context, self._conn.newStream, 0)
        self._call(context, vol.download, stream, 0, limit or 0, 0)
        try:
            while True:
                chunk = self._call(context, stream.recv, STREAM_CHUNK)
                if not chunk:
                    break
                yield chunk
            self._call(context, stream.finish)
        except BaseException:
            _abort(stream)
            raise


Hypervisor.MUTATING_METHODS = frozenset(
    name for name, member in vars(Hypervisor).items() if getattr(member, "mutates_hypervisor", False))


def _abort(stream):
    try:
        stream.abort()
    except libvirt.libvirtError:
        # The stream already failed on the daemon's side.
        pass


def _typed(exc, context):
    code = exc.get_error_code()
    message = exc.get_error_message() or str(exc)
    if code is None:
        return TransientError("%s: %s" % (context, message))
    return classify(code, message, context)
