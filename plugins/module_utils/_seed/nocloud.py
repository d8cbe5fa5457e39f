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
    for a value it cannot write: not UTF-8 text, binary (control characters),
    larger than _common.text.MAX_FILE_BYTES, or user-data and vendor-data text that
    cloud-init would ignore (no first line it acts on, such as YAML without
    ``#cloud-config``).

Dictionaries are written as JSON with sorted keys, which cloud-init reads as
YAML: no YAML library is needed where the module runs, and the same
dictionary renders the same bytes whatever order its keys came in.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import json
import re
from collections import OrderedDict

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.errors import ValidationError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.names import validate_vm_name
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import text_bytes, within_file_limit

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


# What cloud-init acts on, by the start of user-data or vendor-data (after
# leading white space, any case); anything else it skips with a log line only.
CLOUD_INIT_STARTS = ("#cloud-config", "#!", "#include", "#cloud-boothook", "#part-handler", "#upstart-job",
                     "## template: jinja", "content-type:")
# cloud-init reads a MIME multi-part archive when its first 4096 bytes name a MIME version.
_MIME_VERSION = "mime-version:"
_MIME_SCAN_CHARS = 4096


def _require_cloud_init_start(text, option):
    """Refuse non-empty text that cloud-init would skip without a word (YAML that is not #cloud-config, plain text)."""
    start = text.lstrip().lower()
    if not start or start.startswith(CLOUD_INIT_STARTS) or _MIME_VERSION in start[:_MIME_SCAN_CHARS]:
        return
    raise ValidationError("%s does not start with a line cloud-init acts on (%s, or a MIME multi-part archive), "
                          "so cloud-init would ignore it: start cloud-config YAML with the line #cloud-config, or give "
                          "a dictionary" % (option, ", ".join(CLOUD_INIT_STARTS[:-1])))


def _render_dict(data, option):
    """The dictionary ``data`` of option ``option`` as deterministic JSON bytes, which cloud-init reads as YAML.

    JSON needs no YAML library where the module runs, and renders the same
    bytes whatever order the keys came in, so digests of it are stable.
    """
    for key in data:
        if not isinstance(key, str):
            raise ValidationError("%s keys must be strings, got %r" % (option, key))
    try:
        rendered = _render_json(data).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ValidationError("%s cannot be written as YAML: %s" % (option, exc)) from exc
    return within_file_limit(rendered, option)


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
    return text_bytes(network_config, "network_config")


def render_cloud_data(value, option):
    """A user-data or vendor-data file: a string verbatim, a dictionary as a cloud-config document.

    cloud-init acts on user-data only by its first line, so a dictionary
    needs the ``#cloud-config`` header; without it (as a Python repr of the
    dictionary once was) cloud-init ignores the file without a word. For the
    same reason a string must start with a line cloud-init acts on.
    """
    if isinstance(value, dict):
        return within_file_limit(b"#cloud-config\n" + _render_dict(value, option), option)
    if isinstance(value, (str, bytes)):
        data = text_bytes(value, option)
        _require_cloud_init_start(data.decode("utf-8"), option)
        return data
    raise ValidationError("%s must be a string or a dictionary (written as #cloud-config), got %s"
                          % (option, type(value).__name__))


# The header of the part that carries a policy's files: its write_files are appended to the user-data's own,
# rather than replacing them (cloud-init's default for a second cloud-config).
_MERGE_TYPE = "list(append)+dict(recurse_array)+str()"


def _mime_part(content_type, name, data, merge_type=None):
    # Base64, so no line of the content can ever read as the boundary.
    encoded = base64.encodebytes(data).decode("ascii")
    headers = ['Content-Type: %s; charset="utf-8"' % content_type, "MIME-Version: 1.0",
               "Content-Transfer-Encoding: base64", 'Content-Disposition: attachment; filename="%s"' % name]
    if merge_type is not None:
        headers.append("Merge-Type: %s" % merge_type)
    return "\n".join(headers) + "\n\n" + encoded


def with_cloud_config(user_data, cloud_config, name):
    """``user_data`` (the rendered bytes) and the cloud-config dictionary ``cloud_config`` as one MIME multi-part.

    cloud-init runs the user-data as it would alone (its type read from its
    first line) and merges the second part's lists into its cloud-config. The
    boundary is derived from the content, so the same data gives the same
    bytes (a seed is compared byte for byte). User-data that is a multi-part
    archive itself cannot be nested this way and is refused.
    """
    start = user_data[:_MIME_SCAN_CHARS].decode("utf-8", "replace").lstrip().lower()
    if start.startswith("content-type:") or _MIME_VERSION in start:
        raise ValidationError("user_data is a MIME multi-part archive, to which policy cannot add its files: give "
                              "user_data as cloud-config or a script")
    config = b"#cloud-config\n" + _render_dict(cloud_config, name)
    boundary = "==egress-proxies-kvm-%s==" % hashlib.sha256(user_data + b"\0" + config).hexdigest()[:32]
    parts = [_mime_part("text/cloud-config", name, config, _MERGE_TYPE)]
    if user_data:
        parts.insert(0, _mime_part("text/x-not-multipart", "user-data", user_data))
    text = 'Content-Type: multipart/mixed; boundary="%s"\nMIME-Version: 1.0\n\n' % boundary
    text += "".join("--%s\n%s" % (boundary, part) for part in parts) + "--%s--\n" % boundary
    return within_file_limit(text.encode("ascii"), "user_data with %s" % name)


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
