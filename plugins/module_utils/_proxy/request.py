# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a kvm_proxy or kvm_proxy_set task asks for: the validated requests, their defaults, and the spec that names a VM.

``ProxyRequest`` is one proxy; ``SetRequest`` a hypervisor's set of them, and
kvm_proxy's one proxy is a set of one (``SetRequest.of_one``).

The spec digest (sha256 over a canonical JSON of everything that shapes the
VM) is stored in the domain's metadata next to the spec itself, which holds
only digests of the cloud-init data, never its content. A stored digest that
differs from the request's is drift.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Optional, Union

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import (
    DEFAULT_POOL,
    base_volume_name,
    overlay_volume_name,
    seed_volume_name,
    validate_host_name,
    validate_sha256,
    validate_vm_name,
    validate_volume_name,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.states import STATE_ABSENT, STATE_PRESENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import normalize_mac, quoted
from ansible_collections.egress_proxies.kvm.plugins.module_utils._guest.policy import Policy
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.options import DEFAULT_DOWNLOAD_OPTIONS, DownloadOptions
from ansible_collections.egress_proxies.kvm.plugins.module_utils._image.spec import MAX_DISK_SIZE_GB, ImageSpec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.domain_xml import (
    VIRT_TYPES,
    DomainParams,
    validate_domain_settings,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.metadata import build_instance_element, validate_uid
from ansible_collections.egress_proxies.kvm.plugins.module_utils._proxy.interfaces import interfaces_from_params, interfaces_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.network_config import static_network_config
from ansible_collections.egress_proxies.kvm.plugins.module_utils._seed.nocloud import (
    META_DATA,
    NETWORK_CONFIG,
    USER_DATA,
    VENDOR_DATA,
    seed_files,
    with_cloud_config,
)

STATE_STOPPED = "stopped"  # asked for: defined and shut off (a result's "Stopped" is _libvirt.state.STATUS_STOPPED)
STATES = (STATE_PRESENT, STATE_STOPPED, STATE_ABSENT)

ON_DRIFT_REPLACE = "replace"
ON_DRIFT_IGNORE = "ignore"
ON_DRIFT_CHOICES = (ON_DRIFT_REPLACE, ON_DRIFT_IGNORE)

# A running proxy whose guest agent does not answer cannot get its policy: the task fails naming it, or it is
# replaced by a VM that boots with the policy in its seed.
ON_UNREACHABLE_AGENT_FAIL = "fail"
ON_UNREACHABLE_AGENT_REPLACE = "replace"
ON_UNREACHABLE_AGENT_CHOICES = (ON_UNREACHABLE_AGENT_FAIL, ON_UNREACHABLE_AGENT_REPLACE)

# In adopt_uids: every domain this collection created, whatever its owner.
ADOPT_ANY = "*"

DEFAULT_VCPUS = 1
DEFAULT_MEMORY_MIB = 1024
DEFAULT_DISK_SIZE_GB = 10
DEFAULT_MACHINE = "q35"
DEFAULT_WAIT_TIMEOUT = 300
DEFAULT_SHUTDOWN_TIMEOUT = 120
DEFAULT_VIRT_TYPE = VIRT_TYPES[0]
DEFAULT_GC_GRACE_PERIOD = 3600
DEFAULT_MAX_UNAVAILABLE = 1
GIB = 1024 ** 3

# Under kvm the guest sees the host's CPU; TCG cannot emulate "host", and a
# named model is the safest choice on any QEMU.
DEFAULT_CPU_MODE = {"kvm": "host-passthrough", "qemu": "none"}

# Bumped when the meaning of a spec field changes, so every VM built from the
# old meaning counts as drifted.
SPEC_VERSION = 1

# Overlay volumes are "<name>.qcow2"; base volumes are "base-<image>[...].<fmt>".
# A VM named "base-debian" would own "base-debian.qcow2", the cached base
# of image "debian", and deleting that VM would delete the image.
_RESERVED_NAME_PREFIX = "base-"


# The name of the user-data part that carries the policy's files.
POLICY_PART = "egress-proxies-kvm-policy"

# Options of the set that are not also a proxy's.
SET_OPTIONS = ("proxies", "gc", "gc_grace_period", "max_unavailable", "wait_for_port", "image_prune")
# A proxy's options that only the set gives: one owner and one hypervisor for all of them, one wait.
SET_WIDE_PROXY_OPTIONS = ("uid", "adopt_uids", "host", "force", "wait_for_ip", "wait_timeout")


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def _canonical_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def whole_number(option, value, least, most=None):
    """Refuse ``value`` unless it is an int (not a bool) from ``least`` to ``most`` (no upper bound when None)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least or (most is not None and value > most):
        bounds = "of at least %d" % least if most is None else "from %d to %d" % (least, most)
        raise ValidationError("%s must be a whole number %s, got %s" % (option, bounds, quoted(value)))


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
    interfaces: tuple = ()  # _interfaces.Interface, in device order; from_params fills it from bridge/network/mac too
    image: Optional[ImageSpec] = None
    base_volume: Optional[str] = None
    user_data: Union[str, dict, None] = None
    vendor_data: Union[str, dict, None] = None
    meta_data: Optional[dict] = None
    network_config: Any = None
    policy: Any = None  # _guest.policy.Policy, or None: the guest's files are the user-data's alone
    on_unreachable_agent: str = ON_UNREACHABLE_AGENT_FAIL
    virt_type: str = DEFAULT_VIRT_TYPE
    cpu_mode: Optional[str] = None
    machine: str = DEFAULT_MACHINE
    autostart: bool = True
    wait_for_ip: bool = False
    wait_timeout: int = DEFAULT_WAIT_TIMEOUT
    shutdown_timeout: int = DEFAULT_SHUTDOWN_TIMEOUT
    on_drift: str = ON_DRIFT_REPLACE
    force: bool = False
    download: DownloadOptions = DEFAULT_DOWNLOAD_OPTIONS
    # Not a module option: kvm_proxy_set removes what is ours and leaves (and reports) a listed proxy that another
    # owner, or nobody, created; kvm_proxy refuses it.
    leave_others: bool = False

    @classmethod
    def from_params(cls, params, download=None):
        """Validate the module's parameters (a dict; None means "not given") and resolve defaults.

        Everything the hypervisor would reject later is refused here, before
        any connection: names, sizes, the NIC, CPU settings, the uid, the
        image and the cloud-init data. ``download`` is the DownloadOptions the
        task built of them (None: built here).
        """
        given = {key: value for key, value in params.items() if value is not None and key in _FIELDS}
        given["download"] = download if download is not None else DownloadOptions.from_params(params)
        image = given.pop("image", None)
        if isinstance(image, dict):
            image = ImageSpec(**{key: value for key, value in image.items() if value is not None})
        given["image"] = image
        # virt_type and cpu_mode are validated with the domain's settings (validate_domain_settings), once.
        given.setdefault("cpu_mode", DEFAULT_CPU_MODE.get(given.get("virt_type", DEFAULT_VIRT_TYPE)))
        if given.get("mac") is not None:
            given["mac"] = normalize_mac(given["mac"])
        given["interfaces"] = interfaces_from_params(given)
        if "adopt_uids" in given:
            given["adopt_uids"] = tuple(given["adopt_uids"])
        if "policy" in given:
            given["policy"] = Policy.from_params(given["policy"])
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
        _choice("on_unreachable_agent", self.on_unreachable_agent, ON_UNREACHABLE_AGENT_CHOICES)
        if self.host is not None:
            validate_host_name(self.host)
        if self.uid is not None:
            validate_uid(self.uid)
        if self.adopt_uids and self.uid is None:
            raise ValidationError("adopt_uids needs uid: the adopted domains are recorded with this task's uid")
        for adopted in self.adopt_uids:
            if adopted != ADOPT_ANY:
                validate_uid(adopted)
        for option in ("wait_timeout", "shutdown_timeout"):
            whole_number(option, getattr(self, option), 0)
        whole_number("disk_size_gb", self.disk_size_gb, 1, MAX_DISK_SIZE_GB)
        if self.image is not None and self.base_volume is not None:
            raise ValidationError("image and base_volume are mutually exclusive: give the image to cache, or the "
                                  "name of a base volume already in the pool")
        if self.base_volume is not None:
            validate_volume_name(self.base_volume)
        if self.network_config is not None and any(nic.static for nic in self.interfaces):
            raise ValidationError("network_config and static interface addresses are mutually exclusive: give the "
                                  "addresses in interfaces, or the whole configuration in network_config")
        if self.state == STATE_ABSENT:
            return
        # Rendering the seed's files refuses meta_data or network_config that cannot be written.
        self.seed_files()
        if self.image is None and self.base_volume is None:
            raise ValidationError("state=%s needs image (to cache and boot) or base_volume (already cached in pool "
                                  "'%s')" % (self.state, self.pool))
        if self.image is not None:
            self.image.require_url()
        if not self.interfaces:
            raise ValidationError("state=%s needs bridge (a host bridge such as br0) or network (a libvirt network) "
                                  "for the VM's NIC, or interfaces for several" % self.state)
        # Without the metadata element: validating needs no lxml (the controller's filters run it).
        validate_domain_settings(self.domain_params(None))

    def domain_params(self, metadata):
        return DomainParams(
            name=self.name,
            metadata=metadata,
            vcpus=self.vcpus,
            memory_mib=self.memory_mib,
            pool=self.pool,
            overlay_volume=overlay_volume_name(self.name),
            seed_volume=seed_volume_name(self.name),
            interfaces=self.interfaces,
            virt_type=self.virt_type,
            cpu_mode=self.cpu_mode,
            machine=self.machine,
        )

    def machine_files(self):
        """The seed's files without the policy ({file name: bytes}): what the spec digest covers.

        Without network_config, NICs with static addresses bring their own (_network_config).
        """
        network_config = self.network_config
        if network_config is None:
            network_config = static_network_config(self.interfaces)
        return seed_files(self.name, self.user_data, self.meta_data, self.vendor_data, network_config)

    def seed_files(self):
        """The seed's files: the machine's, with the policy's files added to the user-data (a new VM boots with them)."""
        files = self.machine_files()
        if self.policy is not None:
            files[USER_DATA] = with_cloud_config(files[USER_DATA], self.policy.cloud_config(), POLICY_PART)
        return files

    @property
    def policy_digest(self):
        return self.policy.digest() if self.policy is not None else None

    @property
    def ha_group_json(self):
        """The HA group the policy names as the metadata records it (beside the policy's digest), or None."""
        return self.policy.group.recorded() if self.policy is not None and self.policy.group is not None else None

    @property
    def pooled_addresses_json(self):
        """The profiles' pooled egress addresses the policy names as the metadata records them, or None."""
        pooled = self.policy.pooled_addresses if self.policy is not None else None
        return pooled.recorded() if pooled is not None else None

    def may_be_first_booting(self, metadata, now):
        """Whether a running domain of this proxy (its InstanceMetadata ``metadata``) whose guest agent is silent may
        still be in its first boot: created less than wait_timeout before ``now`` (many images start the agent at the
        first boot's end). Not with on_unreachable_agent=replace, which asks for a proxy with a silent agent to be
        replaced rather than waited for."""
        return self.on_unreachable_agent != ON_UNREACHABLE_AGENT_REPLACE and metadata.created_within(self.wait_timeout, now)

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
        files = self.machine_files()
        first = self.interfaces[0]
        spec = {
            "version": SPEC_VERSION,
            "pool": self.pool,
            "disk_size_gb": self.disk_size_gb,
            "image": self.image_identity(image_sha256),
            "user_data_sha256": _sha256(files[USER_DATA]),
            "meta_data_sha256": _sha256(files[META_DATA]),
            "vendor_data_sha256": _sha256(files[VENDOR_DATA]),
            "network_config_sha256": _sha256(files[NETWORK_CONFIG]) if NETWORK_CONFIG in files else None,
            # The first NIC as one NIC always was; the whole list only when there is more to say.
            "bridge": first.bridge,
            "network": first.network,
            "mac": first.mac,
            "vcpus": self.vcpus,
            "memory_mib": self.memory_mib,
            "virt_type": self.virt_type,
            "cpu_mode": self.cpu_mode,
            "machine": self.machine,
        }
        listed = interfaces_spec(self.interfaces)
        if listed is not None:
            spec["interfaces"] = listed
        return spec


_FIELDS = frozenset(ProxyRequest.__dataclass_fields__)


@dataclass(frozen=True)
class SetRequest:
    """A hypervisor's set of proxies as the task asks for it: each a validated ProxyRequest, plus the set's own options.

    ``single`` marks kvm_proxy's proxy as a set of one (``of_one``): looked up
    by its name rather than in a listing, its messages and actions not
    prefixed with its name, and its address awaited whenever it should run
    (a set awaits only the proxies its run started).
    """

    proxies: tuple
    uid: Optional[str]
    pool: str
    gc: bool = True
    gc_grace_period: int = DEFAULT_GC_GRACE_PERIOD
    max_unavailable: int = DEFAULT_MAX_UNAVAILABLE
    wait_for_port: Optional[int] = None
    wait_for_ip: bool = False  # implied by wait_for_port: a port is asked on the address
    wait_timeout: int = DEFAULT_WAIT_TIMEOUT
    shutdown_timeout: int = DEFAULT_SHUTDOWN_TIMEOUT  # the set's own, for the proxies garbage collection stops
    image_prune: bool = False  # the older cached copies of each image the set made ready, removed when unused
    single: bool = False

    @classmethod
    def of_one(cls, proxy):
        """kvm_proxy's ``proxy`` (a ProxyRequest) as a set of one: no garbage collection, its own wait."""
        return cls(proxies=(proxy,), uid=proxy.uid, pool=proxy.pool, gc=False, wait_for_ip=proxy.wait_for_ip,
                   wait_timeout=proxy.wait_timeout, shutdown_timeout=proxy.shutdown_timeout, single=True)

    @classmethod
    def from_params(cls, params, download=None):
        """Validate kvm_proxy_set's parameters before any connection; a proxy's error names its entry.

        ``download`` is the DownloadOptions the task built of ``params``, which every proxy shares (None: built here).
        """
        download = download if download is not None else DownloadOptions.from_params(params)
        shared = {key: value for key, value in params.items() if key not in SET_OPTIONS}
        proxies, names = [], set()
        for index, entry in enumerate(params["proxies"] or []):
            given = {key: value for key, value in (entry or {}).items() if value is not None}
            label = "proxies[%d] (%s)" % (index, given.get("name", "no name"))
            _check_entry(label, given, shared, names)
            names.add(given.get("name"))
            try:
                proxies.append(ProxyRequest.from_params(dict(shared, **given, wait_for_ip=False, leave_others=True),
                                                        download))
            except ValidationError as error:
                raise ValidationError("%s: %s" % (label, error.message)) from error
        if params["gc"] and not params["uid"]:
            raise ValidationError("gc needs uid: garbage collection removes only the proxies recorded with this owner")
        whole_number("gc_grace_period", params["gc_grace_period"], 0)
        whole_number("max_unavailable", params["max_unavailable"], 1)
        if params["wait_for_port"] is not None:
            whole_number("wait_for_port", params["wait_for_port"], 1, 65535)
        # Checked here too: a set with no proxies never validates a ProxyRequest.
        whole_number("shutdown_timeout", params["shutdown_timeout"], 0)
        return cls(proxies=tuple(proxies), uid=params["uid"], pool=params["pool"], gc=params["gc"],
                   gc_grace_period=params["gc_grace_period"], max_unavailable=params["max_unavailable"],
                   wait_for_port=params["wait_for_port"],
                   wait_for_ip=bool(params["wait_for_ip"]) or params["wait_for_port"] is not None,
                   wait_timeout=params["wait_timeout"], shutdown_timeout=params["shutdown_timeout"],
                   image_prune=params["image_prune"])


def _check_entry(label, given, shared, names):
    """Refuse what one entry of proxies (``given``, labelled ``label``) may not say, given the set's own options."""
    overridden = sorted(set(given) & set(SET_WIDE_PROXY_OPTIONS))
    if overridden:
        raise ValidationError("%s sets %s, which only the set as a whole gives" % (label, ", ".join(overridden)))
    single = [option for option in ("bridge", "network") if shared.get(option) is not None]
    if single and given.get("interfaces"):
        raise ValidationError(
            "%s sets interfaces while the set gives %s for every proxy; they are mutually exclusive: leave %s "
            "out of the set and give each proxy its NICs, or drop this proxy's interfaces" % (
                label, " and ".join(single), " and ".join(single)))
    if given.get("name") in names:
        raise ValidationError("%s: the name appears more than once in proxies" % label)


def _choice(option, value, choices):
    if value not in choices:
        raise ValidationError("%s %r is not supported: use one of %s" % (option, value, ", ".join(choices)))


def spec_digest(spec):
    """The sha256 of the spec's canonical JSON: what the metadata's specDigest holds."""
    return _sha256(_canonical_json(spec).encode("ascii"))


def build_metadata_element(uid, created_at, spec, digest=None, policy_digest=None, ha_group_json=None,
                           pooled_addresses_json=None):
    """Our metadata element with the spec's digest, plus the spec itself, and the digest of the policy the guest holds
    with the HA group and the profiles' pooled egress addresses it names.

    The spec holds no secrets (cloud-init data appears as digests only) and
    lets diff mode show what a drifted VM was built from. ``digest`` defaults
    to the spec's own; an adopted VM keeps the digest it was recorded with.
    """
    return build_instance_element(uid, created_at, spec_digest(spec) if digest is None else digest,
                                  None if spec is None else _canonical_json(spec), policy_digest, ha_group_json,
                                  pooled_addresses_json)


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
