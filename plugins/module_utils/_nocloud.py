# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The files of a cloud-init NoCloud seed, rendered from a task's values.

``seed_files(name, user_data="", meta_data=None, vendor_data=None, network_config=None)``
    The files as an ordered ``{file name: bytes}``: ``user-data`` (a string
    verbatim, a dictionary as a ``#cloud-config`` document), ``meta-data``
    (``meta_data`` merged over instance-id = local-hostname = name),
    ``vendor-data`` (like user-data; DEFAULT_VENDOR_DATA unless given), and
    ``network-config`` when given. Raises ValidationError naming the option
    for a value it cannot write.

Dictionaries are written as JSON with sorted keys, which cloud-init reads as
YAML: no YAML library is needed where the module runs, and the same
dictionary renders the same bytes whatever order its keys came in.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
from collections import OrderedDict

from ansible_collections.egress_proxies.kvm.plugins.module_utils._errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._names import validate_vm_name

USER_DATA = "user-data"
META_DATA = "meta-data"
VENDOR_DATA = "vendor-data"
NETWORK_CONFIG = "network-config"

# cloud-init merges vendor-data under the user's own user-data, so stock
# images grow a guest agent (through which the VM's address can be read
# before ARP has seen any traffic) without the user-data having to know.
DEFAULT_VENDOR_DATA = """#cloud-config
packages:
  - qemu-guest-agent
runcmd:
  - [systemctl, enable, --now, qemu-guest-agent]
"""

# Characters JSON leaves raw but YAML 1.1 (which cloud-init reads meta-data
# and network-config with) treats as line breaks or refuses outright. They
# are written as \u escapes, which JSON and YAML read alike. Everything they
# could appear in is a string, so the escapes never land outside one.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")


def _render_json(data):
    """Deterministic JSON (sorted keys) that YAML 1.1 loaders read back to the same data."""
    text = json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    return _YAML_UNSAFE.sub(lambda match: "\\u%04x" % ord(match.group()), text) + "\n"


def _to_bytes(value, what):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValidationError("%s cannot be written as UTF-8: %s" % (what, exc)) from exc
    raise ValidationError("%s must be a string, got %s" % (what, type(value).__name__))


def _render_dict(data, option):
    """The dictionary ``data`` of option ``option`` as deterministic JSON bytes, which cloud-init reads as YAML.

    JSON needs no YAML library where the module runs, and renders the same
    bytes whatever order the keys came in, so digests of it are stable.
    """
    for key in data:
        if not isinstance(key, str):
            raise ValidationError("%s keys must be strings, got %r" % (option, key))
    try:
        return _render_json(data).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ValidationError("%s cannot be written as YAML: %s" % (option, exc)) from exc


def render_meta_data(name, meta_data=None):
    """The meta-data file: ``meta_data`` merged over instance-id = local-hostname = ``name``.

    A fixed instance-id is what keeps cloud-init from taking a reboot for a
    new instance.
    """
    merged = {"instance-id": validate_vm_name(name), "local-hostname": name}
    if meta_data is not None:
        if not isinstance(meta_data, dict):
            raise ValidationError("meta_data must be a dictionary, got %s" % type(meta_data).__name__)
        merged.update(meta_data)
    return _render_dict(merged, "meta_data")


def render_network_config(network_config):
    """The network-config file: a string verbatim, a dictionary rendered like meta-data."""
    if isinstance(network_config, dict):
        return _render_dict(network_config, "network_config")
    return _to_bytes(network_config, "network_config")


def render_cloud_data(value, option):
    """A user-data or vendor-data file: a string verbatim, a dictionary as a cloud-config document.

    cloud-init acts on user-data only by its first line, so a dictionary
    needs the ``#cloud-config`` header; without it (as a Python repr of the
    dictionary once was) cloud-init ignores the file without a word.
    """
    if isinstance(value, dict):
        return b"#cloud-config\n" + _render_dict(value, option)
    if isinstance(value, (str, bytes)):
        return _to_bytes(value, option)
    raise ValidationError("%s must be a string or a dictionary (written as #cloud-config), got %s"
                          % (option, type(value).__name__))


def seed_files(name, user_data="", meta_data=None, vendor_data=None, network_config=None):
    """The seed's files, in the order they are written: ``{file name: bytes}``.

    ``user_data`` is a string written verbatim (cloud-config, a script, or
    empty: an empty file is still present, as NoCloud requires) or a
    dictionary written as cloud-config. ``vendor_data`` likewise; None means
    DEFAULT_VENDOR_DATA, an empty string an empty vendor-data.
    ``network_config`` None leaves the file out, so cloud-init keeps its
    default (DHCP on the first NIC).
    """
    files = OrderedDict()
    files[USER_DATA] = render_cloud_data(user_data if user_data is not None else "", "user_data")
    files[META_DATA] = render_meta_data(name, meta_data)
    files[VENDOR_DATA] = render_cloud_data(DEFAULT_VENDOR_DATA if vendor_data is None else vendor_data, "vendor_data")
    if network_config is not None:
        files[NETWORK_CONFIG] = render_network_config(network_config)
    return files
