# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One egress-proxy VM made present, stopped or absent: the flow behind kvm_proxy.

Public API::

    request = ProxyRequest.from_params(params)      # validated; raises ValidationError
    result = ProxyManager(hypervisor, request, check_mode=False).run()   # the module's result dict

The flow first observes and plans, then executes. Planning reads only
(lookups, XML, state, and the image cache's and seed's own check-mode
answers) and yields an ordered list of named actions; execution runs them
in that order unless in check mode. So check mode reports exactly the
actions a real run would take, from the same code path.

The order and its reasons, ported from the reference provider's lessons:

- The domain is looked up first, by name (never by listing every domain).
  If it exists and was built from the same spec, only its running state and
  autostart flag are made right; its volumes are never touched.
- If it does not exist, nothing can be using the VM's volumes: the overlay is
  reused when it is one this spec would create (same base, same size; a
  volume of that name that is not is replaced), and the seed is compared
  file by file and rewritten when it differs or is unreadable (a cut-off
  upload leaves a truncated seed a VM would boot without cloud-init from).
- The spec digest (sha256 over a canonical JSON of everything that shapes
  the VM) is stored in the domain's metadata next to the spec itself (which
  holds only digests of the cloud-init data, never its content). A
  mismatch is drift: the VM is replaced (these are stateless proxies), or,
  with on_drift=ignore, left alone and reported drifted.
- Removal destroys the domain, deletes its overlay and seed, and undefines
  it last. Deleting the volumes before the definition means a run cut off
  half-way still finds the domain next time and finishes the job, and an
  overlay without a domain is never one that a VM has booted from.
- A domain this collection did not create, or one recorded with another
  owner uid, is refused for replacement and deletion unless forced.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import hashlib
import json
import time
import uuid
from collections import namedtuple
from dataclasses import dataclass
from typing import Any, Optional, Union

from ansible_collections.egress_proxies.kvm.plugins.module_utils._addresses import domain_ipv4
from ansible_collections.egress_proxies.kvm.plugins.module_utils._domain_xml import (
    CPU_MODES,
    VIRT_TYPES,
    DomainParams,
    build_domain_xml,
    normalize_mac,
    parse_domain_element,
    parse_domain_xml,
    validate_domain_params,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._errors import (
    VIR_ERR_ARGUMENT_UNSUPPORTED,
    VIR_ERR_INVALID_ARG,
    VIR_ERR_NO_SUPPORT,
    VIR_ERR_OPERATION_INVALID,
    KvmError,
    NotFoundError,
    PermanentError,
    TransientError,
    ValidationError,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image_cache import (
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    ImageSpec,
    ensure_image,
    volume_lock,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._inventory import inspect_domain, resolve_host
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt import (
    UNDEFINE_ALL,
    UNDEFINE_MANAGED_SAVE,
    UNDEFINE_SNAPSHOTS_METADATA,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._metadata import (
    INSTANCE_TAG,
    METADATA_PREFIX,
    METADATA_URI,
    build_instance_element,
    unqualified_xml,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._names import (
    base_volume_name,
    format_domain_id,
    overlay_volume_name,
    seed_volume_name,
    validate_host_name,
    validate_sha256,
    validate_vm_name,
    validate_volume_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed import (
    META_DATA,
    NETWORK_CONFIG,
    USER_DATA,
    VENDOR_DATA,
    ensure_seed,
    seed_files,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._state import (
    VIR_DOMAIN_BLOCKED,
    VIR_DOMAIN_NOSTATE,
    VIR_DOMAIN_RUNNING,
    VIR_DOMAIN_SHUTDOWN,
    VIR_DOMAIN_SHUTOFF,
    is_active,
    libvirt_state_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._volume_xml import VolumeSpec, build_volume_xml, parse_volume_xml
from ansible_collections.egress_proxies.kvm.plugins.module_utils._xml import etree, parse_xml

STATE_PRESENT = "present"
STATE_STOPPED = "stopped"
STATE_ABSENT = "absent"
STATES = (STATE_PRESENT, STATE_STOPPED, STATE_ABSENT)

ON_DRIFT_REPLACE = "replace"
ON_DRIFT_IGNORE = "ignore"
ON_DRIFT_CHOICES = (ON_DRIFT_REPLACE, ON_DRIFT_IGNORE)

# The names of the actions, as the result's ``actions`` lists them.
FETCH_IMAGE = "fetch base image"
CREATE_OVERLAY = "create overlay"
DELETE_OVERLAY = "delete overlay"
WRITE_SEED = "write seed"
DELETE_SEED = "delete seed"
DEFINE_DOMAIN = "define domain"
START_DOMAIN = "start domain"
SHUTDOWN_DOMAIN = "shutdown domain"
DESTROY_DOMAIN = "destroy domain"
UNDEFINE_DOMAIN = "undefine domain"
ENABLE_AUTOSTART = "enable autostart"
DISABLE_AUTOSTART = "disable autostart"
RECORD_OWNER = "record owner"
# Once one of these ran, a replacement can no longer say it left the old VM as it was.
_REMOVAL_ACTIONS = frozenset((DESTROY_DOMAIN, DELETE_OVERLAY, DELETE_SEED, UNDEFINE_DOMAIN))

# How a task relates to an existing domain of its name.
OWN = "own"  # recorded with this task's uid, or the task gives none
ADOPTABLE = "adoptable"  # recorded with a uid listed in adopt_uids
FOREIGN = "foreign"  # recorded with another uid
UNMANAGED = "unmanaged"  # not created by this collection
# In adopt_uids: every domain this collection created, whatever its owner.
ADOPT_ANY = "*"

DEFAULT_VCPUS = 1
DEFAULT_MEMORY_MIB = 1024
DEFAULT_DISK_SIZE_GB = 10
DEFAULT_POOL = "default"
DEFAULT_MACHINE = "q35"
DEFAULT_WAIT_TIMEOUT = 300
DEFAULT_SHUTDOWN_TIMEOUT = 120
POLL_INTERVAL = 2
GIB = 1024 ** 3
MAX_DISK_SIZE_GB = 64 * 1024

# Under kvm the guest sees the host's CPU; TCG cannot emulate "host", and a
# named model is the safest choice on any QEMU.
DEFAULT_CPU_MODE = {"kvm": "host-passthrough", "qemu": "none"}

# Tried in turn: an older libvirt rejects a flag it does not know (NVRAM
# came last, in 1.2.9) with one of _UNSUPPORTED_FLAG_CODES.
UNDEFINE_FLAG_FALLBACKS = (UNDEFINE_ALL, UNDEFINE_MANAGED_SAVE | UNDEFINE_SNAPSHOTS_METADATA, UNDEFINE_MANAGED_SAVE, 0)
_UNSUPPORTED_FLAG_CODES = (VIR_ERR_NO_SUPPORT, VIR_ERR_ARGUMENT_UNSUPPORTED, VIR_ERR_INVALID_ARG)

# States in which an ACPI shutdown request reaches a guest that will act on it.
_SHUTTING_DOWN = (VIR_DOMAIN_RUNNING, VIR_DOMAIN_BLOCKED, VIR_DOMAIN_SHUTDOWN)

# Bumped when the meaning of a spec field changes, so every VM built from the
# old meaning counts as drifted.
SPEC_VERSION = 1
# The child of our metadata element that keeps the spec (JSON) next to its digest.
SPEC_TAG = "spec"

# Overlay volumes are "<name>.qcow2"; base volumes are "base-<image>[...].<fmt>".
# A VM named "base-debian" would own "base-debian.qcow2", the cached base
# of image "debian", and deleting that VM would delete the image.
_RESERVED_NAME_PREFIX = "base-"


def _utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def _canonical_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ProxyRequest:
    """What the task asks for, validated and with defaults resolved (build it with from_params)."""

    name: str
    state: str = STATE_PRESENT
    host: Optional[str] = None
    uid: Optional[str] = None
    adopt_uids: tuple = ()
    vcpus: int = DEFAULT_VCPUS
    memory_mib: int = DEFAULT_MEMORY_MIB
    disk_size_gb: int = DEFAULT_DISK_SIZE_GB
    pool: str = DEFAULT_POOL
    bridge: Optional[str] = None
    network: Optional[str] = None
    mac: Optional[str] = None
    image: Optional[ImageSpec] = None
    base_volume: Optional[str] = None
    user_data: Union[str, dict, None] = None
    vendor_data: Union[str, dict, None] = None
    meta_data: Optional[dict] = None
    network_config: Any = None
    virt_type: str = "kvm"
    cpu_mode: Optional[str] = None
    machine: str = DEFAULT_MACHINE
    autostart: bool = True
    wait_for_ip: bool = False
    wait_timeout: int = DEFAULT_WAIT_TIMEOUT
    shutdown_timeout: int = DEFAULT_SHUTDOWN_TIMEOUT
    on_drift: str = ON_DRIFT_REPLACE
    force: bool = False
    validate_certs: bool = True
    download_timeout: int = DEFAULT_TIMEOUT
    download_retries: int = DEFAULT_RETRIES

    @classmethod
    def from_params(cls, params):
        """Validate the module's parameters (a dict; None means "not given") and resolve defaults.

        Everything the hypervisor would reject later is refused here, before
        any connection: names, sizes, the NIC, CPU settings, the uid, the
        image and the cloud-init data.
        """
        given = {key: value for key, value in params.items() if value is not None and key in _FIELDS}
        image = given.pop("image", None)
        if isinstance(image, dict):
            image = ImageSpec(**{key: value for key, value in image.items() if value is not None})
        given["image"] = image
        virt_type = given.get("virt_type", "kvm")
        if virt_type not in VIRT_TYPES:
            raise ValidationError("virt_type %r is not supported: use one of %s" % (virt_type, ", ".join(VIRT_TYPES)))
        given.setdefault("cpu_mode", DEFAULT_CPU_MODE[virt_type])
        if given.get("mac") is not None:
            given["mac"] = normalize_mac(given["mac"])
        if "adopt_uids" in given:
            given["adopt_uids"] = tuple(given["adopt_uids"])
        request = cls(**given)
        request._validate()
        return request

    def _validate(self):
        validate_vm_name(self.name)
        if self.name.startswith(_RESERVED_NAME_PREFIX):
            raise ValidationError(
                "name %r is reserved: names starting with %r would give the VM's disk the name of a cached base "
                "image volume" % (self.name, _RESERVED_NAME_PREFIX))
        _choice("state", self.state, STATES)
        _choice("on_drift", self.on_drift, ON_DRIFT_CHOICES)
        _choice("cpu_mode", self.cpu_mode, CPU_MODES)
        if self.host is not None:
            validate_host_name(self.host)
        if self.uid is not None:
            # The metadata builder owns the uid rules; building it once refuses a bad uid now.
            build_instance_element(self.uid, _utcnow())
        if self.adopt_uids and self.uid is None:
            raise ValidationError("adopt_uids needs uid: the adopted domains are recorded with this task's uid")
        for adopted in self.adopt_uids:
            if adopted != ADOPT_ANY:
                build_instance_element(adopted, _utcnow())
        for option in ("wait_timeout", "shutdown_timeout", "download_timeout", "download_retries"):
            value = getattr(self, option)
            if not _is_int(value) or value < 0:
                raise ValidationError("%s must be a whole number of at least 0, got %r" % (option, value))
        if not _is_int(self.disk_size_gb) or not 1 <= self.disk_size_gb <= MAX_DISK_SIZE_GB:
            raise ValidationError("disk_size_gb must be a whole number from 1 to %d, got %r" % (MAX_DISK_SIZE_GB, self.disk_size_gb))
        if self.image is not None and self.base_volume is not None:
            raise ValidationError("image and base_volume are mutually exclusive: give the image to cache, or the "
                                  "name of a base volume already in the pool")
        if self.bridge is not None and self.network is not None:
            raise ValidationError("bridge and network are mutually exclusive: the VM has one NIC, on a host bridge "
                                  "or on a libvirt network")
        if self.base_volume is not None:
            validate_volume_name(self.base_volume)
        if self.state == STATE_ABSENT:
            return
        # Rendering the seed's files refuses meta_data or network_config that cannot be written.
        self.seed_files()
        if self.image is None and self.base_volume is None:
            raise ValidationError("state=%s needs image (to cache and boot) or base_volume (already cached in pool "
                                  "'%s')" % (self.state, self.pool))
        if self.image is not None:
            self.image.require_url()
        if self.bridge is None and self.network is None:
            raise ValidationError("state=%s needs bridge (a host bridge such as br0) or network (a libvirt network) "
                                  "for the VM's NIC" % self.state)
        validate_domain_params(self.domain_params(build_instance_element(self.uid or "validation", _utcnow())))

    def domain_params(self, metadata):
        return DomainParams(
            name=self.name,
            metadata=metadata,
            vcpus=self.vcpus,
            memory_mib=self.memory_mib,
            pool=self.pool,
            overlay_volume=overlay_volume_name(self.name),
            seed_volume=seed_volume_name(self.name),
            bridge=self.bridge,
            network=self.network,
            mac=self.mac,
            virt_type=self.virt_type,
            cpu_mode=self.cpu_mode,
            machine=self.machine,
        )

    def seed_files(self):
        """The seed's files ({file name: bytes}); the spec digest covers exactly these bytes."""
        return seed_files(self.name, self.user_data, self.meta_data, self.vendor_data, self.network_config)

    @property
    def disk_bytes(self):
        return self.disk_size_gb * GIB

    def image_identity(self, image_sha256=None):
        """What names the disk's content: the image's digest, or the base volume.

        ``image_sha256`` is the digest a checksum URL (SHA256SUMS) lists now:
        a new release there is another disk. The URL is left out on purpose:
        a mirror move serving the same checksum is the same disk, and without
        a checksum the cache never fetches a cached image again anyway.
        """
        if self.image is not None:
            checksum = self.image.checksum
            if self.image.pinned_sha256 is not None:
                checksum = "sha256:" + self.image.pinned_sha256  # the same digest in capitals is the same disk
            elif image_sha256 is not None:
                checksum = "sha256:" + image_sha256
            return {"name": self.image.name, "format": self.image.format, "checksum": checksum}
        return {"base_volume": self.base_volume}

    def spec(self, image_sha256=None):
        """Everything that shapes the VM, as stored in its metadata. Cloud-init data only as sha256 digests.

        ``image_sha256``: see image_identity.
        """
        files = self.seed_files()
        return {
            "version": SPEC_VERSION,
            "pool": self.pool,
            "disk_size_gb": self.disk_size_gb,
            "image": self.image_identity(image_sha256),
            "user_data_sha256": _sha256(files[USER_DATA]),
            "meta_data_sha256": _sha256(files[META_DATA]),
            "vendor_data_sha256": _sha256(files[VENDOR_DATA]),
            "network_config_sha256": _sha256(files[NETWORK_CONFIG]) if NETWORK_CONFIG in files else None,
            "bridge": self.bridge,
            "network": self.network,
            "mac": self.mac,
            "vcpus": self.vcpus,
            "memory_mib": self.memory_mib,
            "virt_type": self.virt_type,
            "cpu_mode": self.cpu_mode,
            "machine": self.machine,
        }


_FIELDS = frozenset(ProxyRequest.__dataclass_fields__)


def _choice(option, value, choices):
    if value not in choices:
        raise ValidationError("%s %r is not supported: use one of %s" % (option, value, ", ".join(choices)))


def spec_digest(spec):
    """The sha256 of the spec's canonical JSON: what the metadata's specDigest holds."""
    return _sha256(_canonical_json(spec).encode("ascii"))


def build_metadata_element(uid, created_at, spec):
    """Our metadata element with the spec's digest, plus the spec itself as a ``<spec>`` JSON child.

    The spec holds no secrets (cloud-init data appears as digests only) and
    lets diff mode show what a drifted VM was built from.
    """
    return _metadata_element(uid, created_at, spec_digest(spec), spec)


def _metadata_element(uid, created_at, digest, spec):
    element = build_instance_element(uid, created_at, digest)
    if spec is not None:
        etree.SubElement(element, etree.QName(METADATA_URI, SPEC_TAG)).text = _canonical_json(spec)
    return element


def _stored_spec(domain):
    """The spec JSON under our metadata element of a parsed domain, or None when absent or unreadable."""
    texts = domain.xpath(
        "metadata/*[local-name() = $tag and namespace-uri() = $uri]/*[local-name() = $spec]/text()",
        tag=INSTANCE_TAG, uri=METADATA_URI, spec=SPEC_TAG)
    if not texts:
        return None
    try:
        spec = json.loads(texts[0])
    except ValueError:
        return None
    return spec if isinstance(spec, dict) else None


@dataclass
class Observed:
    """The domain as planning found it."""

    handle: Any
    info: Any
    spec: Optional[dict]
    state: int
    autostart: Optional[bool] = None

    @property
    def metadata(self):
        return self.info.metadata

    @property
    def managed(self):
        return self.metadata is not None and self.metadata.managed


Step = namedtuple("Step", ["action", "run"])


class ProxyManager:
    """Plan and carry out one kvm_proxy task on one hypervisor.

    ``clock`` returns the aware UTC time recorded as createdAt; ``sleep`` and
    ``monotonic`` drive the shutdown and wait_for_ip polls (tests pass fakes
    so nothing really waits). ``http`` is handed to the image cache.
    """

    def __init__(self, hypervisor, request, check_mode=False, clock=_utcnow, sleep=time.sleep,
                 monotonic=time.monotonic, http=None, lock_dir=None, lock_timeout=DEFAULT_LOCK_TIMEOUT):
        self.hv = hypervisor
        self.request = request
        self.check_mode = check_mode
        self._clock = clock
        self._sleep = sleep
        self._monotonic = monotonic
        self._http = http
        self._lock_dir = lock_dir
        self._lock_timeout = lock_timeout
        # Filled while planning and executing.
        self._spec = None
        self._digest = None
        self._image_probe = None  # the image cache's check-mode answer, asked once
        self._plan = []
        self._pool = None
        self._base = None  # (volume name, path, format, virtual size) of the base image
        self._deleted = set()  # (pool, volume) planned for deletion
        self._dom = None
        self._uid = request.uid
        self._drifted = False
        self._kept = False  # the existing domain stays (only its state, autostart and owner are made right)
        self._replacing = None  # the Observed domain a replacement removes
        self._left_alone = False  # another owner's VM of this spec: reported, not touched
        self._warnings = []

    # --- the task --------------------------------------------------------------------------------

    def run(self):
        request = self.request
        host = resolve_host(self.hv, request.host)
        current = self._observe()
        if request.state == STATE_ABSENT:
            self._plan_absent(current)
        else:
            self._resolve_spec()
            self._plan_present(current)
        actions = [step.action for step in self._plan]
        if not self.check_mode:
            self._execute()
        result = {
            "changed": bool(actions),
            "actions": actions,
            "drifted": self._drifted,
            "name": request.name,
            "host": host,
            "id": format_domain_id(host, request.name),
            "volumes": self._volumes(current),
        }
        try:
            result.update(self._describe(host, current))
        except KvmError as error:
            # wait_for_ip gave up after the VM was built: the steps still happened.
            raise error.after(error.message, actions) from error
        result["diff"] = self._diff(current)
        if self._warnings:
            result["warnings"] = list(self._warnings)
        return result

    # --- observing -------------------------------------------------------------------------------

    def _observe(self):
        try:
            dom = self.hv.lookup_domain(self.request.name)
        except NotFoundError:
            return None
        root = parse_xml(self.hv.domain_xml(dom), "the XML of domain '%s'" % self.request.name)
        return Observed(handle=dom, info=parse_domain_element(root), spec=_stored_spec(root), state=self.hv.domain_state(dom),
                        autostart=self.hv.domain_autostart(dom))

    def _resolve_spec(self):
        """The spec this task asks for. A checksum given as a SHA256SUMS URL counts by the digest it lists now.

        So a new release at the same URL is drift, and a fleet converges on one image
        instead of keeping old VMs on the old base and new ones on the new.
        """
        image_sha256 = None
        if self.request.image is not None and self.request.image.checksum_url is not None:
            self._image_probe = self._image_result(check_mode=True)
            image_sha256 = self._image_probe.sha256
        self._spec = self.request.spec(image_sha256)
        self._digest = spec_digest(self._spec)

    def _owner(self, current):
        """How this task relates to the existing domain: OWN, ADOPTABLE, FOREIGN or UNMANAGED."""
        if not current.managed:
            return UNMANAGED
        owner = current.metadata.uid
        if self.request.uid is None or owner == self.request.uid:
            return OWN
        if ADOPT_ANY in self.request.adopt_uids or owner in self.request.adopt_uids:
            return ADOPTABLE
        return FOREIGN

    def _ownership_problem(self, current):
        """Why this task may not replace or delete ``current``, or None when it may."""
        owner = self._owner(current)
        name = self.request.name
        if owner == UNMANAGED:
            return ("domain '%s' exists but was not created by egress_proxies.kvm (it has no managed <%s> element in "
                    "namespace %s)" % (name, INSTANCE_TAG, METADATA_URI))
        if owner == FOREIGN:
            return "domain '%s' is owned by uid '%s', not by this task's uid '%s'" % (
                name, current.metadata.uid, self.request.uid)
        return None

    def _refuse(self, problem, what):
        return PermanentError(
            "%s; refusing to %s it. Nothing was changed. Choose another name, remove the domain yourself, or set "
            "force=true to let this task %s it" % (problem, what, what))

    def _missing_volumes(self, current):
        """The domain's pool-backed disks that are gone (deleted by hand): such a VM cannot start again."""
        missing = []
        pools = {}
        for pool_name, volume in current.info.volumes():
            if pool_name not in pools:
                pools[pool_name] = self._lookup_pool(pool_name)
            pool = pools[pool_name]
            if pool is None or self._lookup_volume(pool, volume) is None:
                missing.append((pool_name, volume))
        return missing

    # --- planning --------------------------------------------------------------------------------

    def _add(self, action, run):
        self._plan.append(Step(action, run))

    def _plan_absent(self, current):
        if current is not None:
            problem = self._ownership_problem(current)
            if problem is not None and not self.request.force:
                raise self._refuse(problem, "delete")
            self._plan_removal(current)
            return
        # A run that died between creating volumes and defining the domain
        # leaves them behind; they are found by name.
        self._plan_volume_removal(self._pools_to_clean(None))

    def _plan_present(self, current):
        request = self.request
        if current is None:
            self._plan_creation(None)
            return
        owner = self._owner(current)
        matches = current.managed and current.metadata.spec_digest == self._digest
        keepable = owner != UNMANAGED and (matches or request.on_drift == ON_DRIFT_IGNORE)
        # A running VM holds its disks open and keeps working; only one that must start again needs them.
        missing = self._missing_volumes(current) if keepable and not is_active(current.state) else []
        if owner == FOREIGN and matches and not missing and not request.force:
            self._plan_foreign(current)
            return
        problem = self._ownership_problem(current)
        if problem is not None and not request.force:
            raise self._refuse(problem, "replace")
        if keepable and not missing and problem is None:
            self._drifted = not matches
            self._plan_keep(current, adopt=owner == ADOPTABLE)
            return
        for pool_name, volume in missing:
            self._warnings.append(
                "volume '%s' of domain '%s' is missing from storage pool '%s' (deleted outside this collection?); the "
                "VM cannot boot without it and is rebuilt" % (volume, request.name, pool_name))
        self._drifted = problem is None and not matches
        if problem is None and current.metadata.uid is not None and self._uid is None:
            self._uid = current.metadata.uid  # the owner stays across a replacement
        self._plan_creation(current)

    def _plan_foreign(self, current):
        """A VM of this spec that another owner recorded: reported and left exactly as it is."""
        self._dom = current.handle
        self._kept = True
        self._left_alone = True
        self._uid = current.metadata.uid
        self._warnings.append(
            "domain '%s' matches this task's spec but is owned by uid '%s', not '%s'; it was left as it is (state and "
            "autostart included). Add '%s' to adopt_uids to take it over" % (
                self.request.name, current.metadata.uid, self.request.uid, current.metadata.uid))

    def _plan_keep(self, current, adopt):
        """The domain stays: only its running state, autostart flag and owner are made right."""
        state = current.state
        name = self.request.name
        self._dom = current.handle
        self._kept = True
        self._uid = current.metadata.uid
        if adopt:
            self._uid = self.request.uid
            self._add(RECORD_OWNER, lambda: self._record_owner(current))
        if self.request.state == STATE_PRESENT:
            if state == VIR_DOMAIN_SHUTOFF:
                self._add(START_DOMAIN, self._start)
            elif not is_active(state):
                raise PermanentError(
                    "domain '%s' is in state %s and kvm_proxy only starts domains that are shut off; resume it (virsh "
                    "resume) or stop it (virsh destroy) and run the task again" % (name, libvirt_state_name(state)))
        elif state in _SHUTTING_DOWN:
            self._add(SHUTDOWN_DOMAIN, self._shutdown)
        elif state != VIR_DOMAIN_SHUTOFF:
            # Paused, suspended, crashed: a guest in those states cannot act on an ACPI request.
            self._add(DESTROY_DOMAIN, self._destroy)
        if current.autostart != self.request.autostart:
            self._add(ENABLE_AUTOSTART if self.request.autostart else DISABLE_AUTOSTART, self._set_autostart)

    def _plan_removal(self, current):
        self._dom = current.handle
        if current.state != VIR_DOMAIN_SHUTOFF:
            self._add(DESTROY_DOMAIN, self._destroy)
        self._plan_volume_removal(self._pools_to_clean(current))
        self._add(UNDEFINE_DOMAIN, self._undefine)

    def _pools_to_clean(self, current):
        """Pools that may hold this VM's overlay or seed: those its disks name, then the requested one."""
        pools = []
        own = (overlay_volume_name(self.request.name), seed_volume_name(self.request.name))
        for pool, volume in current.info.volumes() if current is not None else ():
            if volume in own and pool not in pools:
                pools.append(pool)
        if self.request.pool not in pools:
            pools.append(self.request.pool)
        return pools

    def _plan_volume_removal(self, pool_names):
        """Delete the VM's own volumes, found by name; never anything else (so never a base image)."""
        for pool_name in pool_names:
            pool = self._lookup_pool(pool_name)
            if pool is None:
                continue  # a pool that is gone holds nothing left to clean
            for action, volume in ((DELETE_OVERLAY, overlay_volume_name(self.request.name)),
                                   (DELETE_SEED, seed_volume_name(self.request.name))):
                vol = self._lookup_volume(pool, volume)
                if vol is not None:
                    self._deleted.add((pool_name, volume))
                    self._add(action, self._deleter(vol))

    def _plan_creation(self, replacing):
        """Build the VM; a replacement removes ``replacing`` only once everything the new VM needs is known good.

        The pool, the NIC, the base image (fetched and verified: content-addressed,
        so this never disturbs the base the old VM runs on) and the disk size are
        all settled first; a failure there leaves the running proxy as it was.
        """
        request = self.request
        self._pool = self._lookup_pool(request.pool)
        if self._pool is None:
            raise PermanentError(
                "storage pool '%s' does not exist on the hypervisor; create it (virsh pool-define-as) or set pool to an "
                "existing one" % request.pool)
        self._replacing = replacing
        try:
            self._require_nic()
            fetch = self._plan_base()
        except KvmError as error:
            raise error.after(self._left_as_it_was(error.message, []), []) from error
        if replacing is not None:
            self._plan_removal(replacing)
        self._plan_overlay(fetch)
        self._plan_seed()
        self._add(DEFINE_DOMAIN, self._define)
        if request.state == STATE_PRESENT:
            self._add(START_DOMAIN, self._start)
        # A newly defined domain does not autostart.
        if request.autostart:
            self._add(ENABLE_AUTOSTART, self._set_autostart)

    def _require_nic(self):
        """The bridge or network must exist: a missing one fails at start, after define, and no retry helps."""
        request = self.request
        try:
            if request.bridge is not None:
                self.hv.lookup_interface(request.bridge)
            else:
                self.hv.lookup_network(request.network)
        except NotFoundError as error:
            what = ("bridge '%s' (option bridge) is not an interface of the hypervisor; create it or name an existing "
                    "bridge" % request.bridge if request.bridge is not None else
                    "libvirt network '%s' (option network) is not defined on the hypervisor; define it (virsh "
                    "net-define) or name an existing one" % request.network)
            raise PermanentError("%s. Nothing was changed" % what, error.code, error.libvirt_message) from error
        except PermanentError as error:
            # A connection without libvirt's interface driver cannot tell; start will.
            if not error.has_code(VIR_ERR_NO_SUPPORT):
                raise

    def _image_result(self, check_mode):
        request = self.request
        return ensure_image(
            self.hv, request.pool, request.image, check_mode=check_mode, http=self._http, timeout=request.download_timeout,
            retries=request.download_retries, validate_certs=request.validate_certs, lock_timeout=self._lock_timeout,
            # Planning checks the disk size itself, naming disk_size_gb; the fetch
            # refuses an image that changed since to a larger one before writing it.
            lock_dir=self._lock_dir, max_virtual_size=None if check_mode else request.disk_bytes)

    def _plan_base(self):
        """Find the base image; plan its download when it is not cached. Returns True when it must be fetched.

        The disk size is checked here against the image's virtual size (read
        from the cached volume, or from the image's header when not cached),
        so a too small disk fails before anything is downloaded or removed.
        """
        request = self.request
        if request.image is not None:
            if self._image_probe is None:
                self._image_probe = self._image_result(check_mode=True)
            probe = self._image_probe
            self._base = (probe.volume, probe.path, probe.format, probe.size)
            self._check_disk_size()
            if probe.changed:
                self._add(FETCH_IMAGE, self._fetch_image)
                return True
            return False
        vol = self._lookup_volume(self._pool, request.base_volume)
        if vol is None:
            raise PermanentError(
                "base volume '%s' is not in storage pool '%s'; cache it first (egress_proxies.kvm.kvm_base_image) or give "
                "image instead of base_volume" % (request.base_volume, request.pool))
        info = _volume_info(self.hv, vol)
        self._base = (request.base_volume, info.path, info.disk_format or "raw", info.capacity_bytes)
        self._check_disk_size()
        return False

    def _check_disk_size(self):
        volume, _path, _fmt, size = self._base
        if size is not None and size > self.request.disk_bytes:
            raise ValidationError(
                "disk_size_gb %d is smaller than the %s bytes (%.1f GiB) of base image '%s'; the VM's disk must be at "
                "least as large as its image" % (self.request.disk_size_gb, size, size / float(GIB), volume))

    def _plan_overlay(self, fetch):
        name = overlay_volume_name(self.request.name)
        vol = None if (self.request.pool, name) in self._deleted else self._lookup_volume(self._pool, name)
        if vol is not None:
            # A fetch rewrites the base, so an overlay made before it is stale whatever it says.
            if not fetch and self._overlay_fits(vol):
                return
            self._add(DELETE_OVERLAY, self._deleter(vol))
        self._add(CREATE_OVERLAY, self._create_overlay)

    def _overlay_fits(self, vol):
        """Whether an existing overlay is the one this spec would create: qcow2 on this base, this size."""
        info = _volume_info(self.hv, vol)
        _volume, base_path, _fmt, _size = self._base
        return info.disk_format == "qcow2" and info.backing_path == base_path and info.capacity_bytes == self.request.disk_bytes

    def _plan_seed(self):
        if (self.request.pool, seed_volume_name(self.request.name)) not in self._deleted:
            probe = ensure_seed(self.hv, self.request.pool, self.request.name, self.request.seed_files(), check_mode=True)
            if not probe.changed:
                return
        self._add(WRITE_SEED, self._write_seed)

    # --- executing -------------------------------------------------------------------------------

    def _execute(self):
        done = []
        for step in self._plan:
            try:
                step.run()
            except KvmError as error:
                # Say how far the run got: everything before this step stays
                # done, and running the task again resumes from here.
                message = "%s failed%s: %s" % (
                    step.action, " after %s" % ", ".join(done) if done else "", error.message)
                raise error.after(self._left_as_it_was(message, done + [step.action]), done) from error
            done.append(step.action)

    def _left_as_it_was(self, message, attempted):
        """``message``, saying so when a replacement failed before it touched the VM it replaces."""
        if self._replacing is None or _REMOVAL_ACTIONS.intersection(attempted):
            return message
        return "%s; domain '%s' was left as it was (%s) and still needs replacing" % (
            message, self.request.name, libvirt_state_name(self._replacing.state))

    def _fetch_image(self):
        result = self._image_result(check_mode=False)
        self._base = (result.volume, result.path, result.format, result.size)
        self._check_disk_size()

    def _create_overlay(self):
        volume, base_path, base_format, _size = self._base
        xml = _overlay_xml(overlay_volume_name(self.request.name), self.request.disk_bytes, base_path, base_format)
        # Holding the base's lock while the overlay appears keeps a concurrent
        # prune of the image cache from removing the base in between: prune
        # looks for overlays under the same lock.
        with volume_lock(self.hv.uri, self.request.pool, volume, self._lock_timeout, self._lock_dir):
            if self._lookup_volume(self._pool, volume) is None:
                raise TransientError(
                    "base volume '%s' disappeared from pool '%s' before the overlay of '%s' was created (removed by "
                    "another task?); run the task again" % (volume, self.request.pool, self.request.name))
            self.hv.create_volume(self._pool, xml)

    def _write_seed(self):
        ensure_seed(self.hv, self.request.pool, self.request.name, self.request.seed_files(), check_mode=False)

    def _define(self):
        if self._uid is None:
            self._uid = str(uuid.uuid4())
        metadata = build_metadata_element(self._uid, self._clock(), self._spec)
        self._dom = self.hv.define_domain(build_domain_xml(self.request.domain_params(metadata)))

    def _record_owner(self, current):
        """Write this task's uid over the adopted owner's, keeping createdAt and the recorded spec."""
        metadata = current.metadata
        element = _metadata_element(self._uid, metadata.created_at, metadata.spec_digest, current.spec)
        self.hv.set_domain_metadata(current.handle, unqualified_xml(element), METADATA_PREFIX, METADATA_URI,
                                    live=current.state != VIR_DOMAIN_SHUTOFF)

    def _start(self):
        try:
            self.hv.start_domain(self._dom)
        except TransientError as error:
            # Started by someone else since we looked: that is what we wanted.
            if not error.has_code(VIR_ERR_OPERATION_INVALID):
                raise

    def _set_autostart(self):
        self.hv.set_domain_autostart(self._dom, self.request.autostart)

    def _shutdown(self):
        """ACPI shutdown, then a hard stop when the guest has not powered off within shutdown_timeout."""
        try:
            self.hv.shutdown_domain(self._dom)
        except TransientError as error:
            if not error.has_code(VIR_ERR_OPERATION_INVALID):
                raise
        deadline = self._monotonic() + self.request.shutdown_timeout
        while self.hv.domain_state(self._dom) in _SHUTTING_DOWN:
            if self._monotonic() >= deadline:
                self._warnings.append(
                    "domain '%s' did not power off within %d s of the ACPI shutdown request and was stopped hard; raise "
                    "shutdown_timeout if the guest needs longer" % (self.request.name, self.request.shutdown_timeout))
                self._destroy()
                return
            self._sleep(POLL_INTERVAL)

    def _destroy(self):
        try:
            self.hv.destroy_domain(self._dom)
        except NotFoundError:
            pass  # undefined meanwhile: nothing left to stop
        except TransientError as error:
            # Already off (it shut down since we looked): that is what we wanted.
            if not error.has_code(VIR_ERR_OPERATION_INVALID):
                raise

    def _undefine(self):
        for flags in UNDEFINE_FLAG_FALLBACKS:
            try:
                self.hv.undefine_domain(self._dom, flags)
                return
            except NotFoundError:
                return  # undefined meanwhile
            except PermanentError as error:
                if error.code not in _UNSUPPORTED_FLAG_CODES or flags == 0:
                    raise

    def _deleter(self, vol):
        def delete():
            try:
                self.hv.delete_volume(vol)
            except NotFoundError:
                pass  # already gone: that is what we wanted
        return delete

    # --- reporting -------------------------------------------------------------------------------

    def _describe(self, host, current):
        """state, ip, uid, created_at, spec_digest, mac and autostart of the domain as the run leaves it.

        In check mode this is the domain as it is now (nothing ran), or the
        prediction for one that would be created.
        """
        request = self.request
        absent = dict.fromkeys(("state", "libvirt_state", "ip", "uid", "created_at", "spec_digest", "mac", "autostart"))
        absent["ip_sources"] = {}
        if request.state == STATE_ABSENT:
            return absent
        if self.check_mode:
            if not self._kept:
                absent.update(uid=self._uid, spec_digest=self._digest, mac=request.mac, autostart=request.autostart)
                return absent
            return dict(self._entry(host, current.handle, current.info), uid=self._uid)
        # A kept domain's definition did not change; a new one's XML carries the MAC libvirt chose.
        info = current.info if self._kept else parse_domain_xml(self.hv.domain_xml(self._dom))
        if request.wait_for_ip and request.state == STATE_PRESENT and not self._left_alone:
            macs = info.macs()
            self._wait_for_ip(macs[0] if macs else None)
        # An adopted domain's new owner is in its metadata, not in the XML read before.
        return dict(self._entry(host, self._dom, info), uid=self._uid)

    def _entry(self, host, dom, info):
        entry = inspect_domain(self.hv, dom, host, info)
        macs = entry["macs"]
        described = {key: entry[key] for key in (
            "state", "libvirt_state", "ip", "ip_sources", "uid", "created_at", "spec_digest", "autostart")}
        described["mac"] = macs[0] if macs else None
        return described

    def _wait_for_ip(self, mac):
        """Poll until the domain runs with a routable IPv4; fail at wait_timeout with what each source said."""
        request = self.request
        deadline = self._monotonic() + request.wait_timeout
        while True:
            state = self.hv.domain_state(self._dom)
            if not (is_active(state) or state == VIR_DOMAIN_NOSTATE):
                raise PermanentError(
                    "domain '%s' is %s while waiting for its IP address; its console (virsh console %s) or the QEMU log "
                    "on the hypervisor tells why it stopped" % (request.name, libvirt_state_name(state), request.name))
            lookup = domain_ipv4(self.hv, self._dom, mac=mac) if is_active(state) else None
            if lookup is not None and lookup.ip is not None:
                return
            if self._monotonic() >= deadline:
                said = "; ".join("%s: %s" % item for item in lookup.sources.items()) if lookup else "addresses not asked"
                raise TransientError(
                    "domain '%s' has no routable IPv4 after %d s (state %s; %s). The guest may still be booting (raise "
                    "wait_timeout), or its NIC gets no DHCP lease on %s" % (
                        request.name, request.wait_timeout, libvirt_state_name(state), said,
                        "bridge %s" % request.bridge if request.bridge else "network %s" % request.network))
            self._sleep(POLL_INTERVAL)

    def _volumes(self, current):
        """Names of the VM's volumes. The base is null when only a download would tell (checksum given as a URL)."""
        name = self.request.name
        if self._base is not None:
            base = self._base[0]
        elif self._kept and self._drifted:
            base = base_volume_of((current.spec or {}).get("image"))
        elif self._spec is not None:
            base = base_volume_of(self._spec["image"])
        else:
            base = None
        return {"pool": self.request.pool, "overlay": overlay_volume_name(name), "seed": seed_volume_name(name), "base": base}

    def _diff(self, current):
        before = {"state": STATE_ABSENT}
        if current is not None:
            metadata = current.metadata
            before = {
                "state": _diff_state(current.state),
                "managed": current.managed,
                "uid": metadata.uid if metadata is not None else None,
                "spec_digest": metadata.spec_digest if metadata is not None else None,
                "spec": current.spec,
            }
            if current.autostart is not None:
                before["autostart"] = current.autostart
        if self.request.state == STATE_ABSENT:
            return {"before": before, "after": {"state": STATE_ABSENT}}
        if self._left_alone:
            after = dict(before)
        elif self._kept:
            after = dict(before, state=self.request.state, autostart=self.request.autostart, uid=self._uid)
        else:
            after = {
                "state": self.request.state,
                "managed": True,
                "uid": self._uid,
                "spec_digest": self._digest,
                "spec": self._spec,
                "autostart": self.request.autostart,
            }
        return {"before": before, "after": after}

    # --- helpers ---------------------------------------------------------------------------------

    def _lookup_pool(self, name):
        try:
            return self.hv.lookup_pool(name)
        except NotFoundError:
            return None

    def _lookup_volume(self, pool, name):
        try:
            return self.hv.lookup_volume(pool, name)
        except NotFoundError:
            return None


def _diff_state(state):
    """A domain's state as the diff shows it: present, stopped, or libvirt's name (paused, crashed, ...)."""
    if is_active(state):
        return STATE_PRESENT
    if state == VIR_DOMAIN_SHUTOFF:
        return STATE_STOPPED
    return libvirt_state_name(state)


def _volume_info(hypervisor, vol):
    return parse_volume_xml(hypervisor.volume_xml(vol))


def base_volume_of(identity):
    """The base volume an image identity (ProxyRequest.image_identity) names, when that is known without a download.

    None when the checksum is a SHA256SUMS URL: the volume name holds the
    digest listed there, which only a fetch of that file tells.
    """
    if not isinstance(identity, dict):
        return None
    if identity.get("base_volume"):
        return identity["base_volume"]
    checksum = identity.get("checksum")
    try:
        if checksum is None:
            return base_volume_name(identity.get("name"), identity.get("format"))
        return base_volume_name(identity.get("name"), identity.get("format"), validate_sha256(checksum.partition(":")[2]))
    except ValidationError:
        return None


def _overlay_xml(name, capacity, base_path, base_format):
    return build_volume_xml(VolumeSpec(name=name, capacity_bytes=capacity, disk_format="qcow2", backing_path=base_path,
                                       backing_format=base_format))
