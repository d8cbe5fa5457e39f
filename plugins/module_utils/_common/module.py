# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The AnsibleModule wrapper every module of this collection uses (through _common.task.Task).

It merges the common options into a module's own argument spec, reports a
missing Python library with the package to install, and is the one place
where the typed errors of _common.errors become a failed task.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
from urllib.parse import unquote

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.argspec import common_argument_spec
from ansible_collections.egress_proxies.kvm.plugins.module_utils._common.text import url_passwords
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.hypervisor import LIBVIRT_REQUIREMENT
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt.xml import LXML_REQUIREMENT

# Every module talks to libvirt and reads or builds its XML.
BASE_REQUIREMENTS = (LIBVIRT_REQUIREMENT, LXML_REQUIREMENT)


def _masked_strings(value):
    """The strings Ansible masks in a result for a no_log value: its every non-empty string and number."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            yield from _masked_strings(item)
    elif isinstance(value, str) and value:
        yield value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield str(value)


def _url_secrets(params):
    """The passwords of the URLs in any parameter, as written and as sent (percent-decoded)."""
    secrets = set()
    for text in _masked_strings(params):
        for password in url_passwords(text):
            secrets.update((password, unquote(password)))
    return secrets


def _document(dictionary):
    """A no_log dictionary as the one string it is masked as: its JSON with sorted keys."""
    return json.dumps(dictionary, sort_keys=True)


def _shown(spec, params):
    """``params`` as the invocation shows them: each no_log dictionary as its _document.

    Containers on the way are copied; the task keeps the values it was given.
    """
    shown = dict(params)
    for name, option in spec.items():
        value = params.get(name)
        if option.get("no_log") and isinstance(value, dict):
            shown[name] = _document(value)
        elif option.get("options") and isinstance(value, dict):
            shown[name] = _shown(option["options"], value)
        elif option.get("options") and isinstance(value, list):
            shown[name] = [_shown(option["options"], item) if isinstance(item, dict) else item for item in value]
    return shown


def _no_log_values(spec, params):
    """Each no_log option's value in ``params`` and in its sub-options' (a list of dicts, such as a set's proxies)."""
    for name, option in spec.items():
        value = params.get(name)
        if option.get("no_log") and value is not None:
            yield value
        if option.get("options"):
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict):
                    yield from _no_log_values(option["options"], item)


class _AnsibleModule(AnsibleModule):
    """An AnsibleModule that hides URL passwords from the start.

    The parameters are loaded before Ansible validates them, and a value it
    refuses fails the task at once, its invocation showing every parameter.
    """

    def _load_params(self):
        super()._load_params()
        self.url_secrets = _url_secrets(self.params)
        self.no_log_values.update(self.url_secrets)


class KvmModule:
    """An AnsibleModule plus the collection's conventions.

    ``requirements`` lists (library, how to install it, import traceback or
    None) for the optional libraries the module needs besides libvirt and lxml.

    ``params`` are the task's values. The AnsibleModule's own ``params`` are
    what the result's invocation shows: a no_log dictionary as one document.
    """

    def __init__(self, argument_spec, requirements=(), **kwargs):
        spec = common_argument_spec()
        spec.update(argument_spec)
        # Every module of the collection predicts its changes in check mode.
        self.module = _AnsibleModule(argument_spec=spec, supports_check_mode=True, **kwargs)
        self.params = self.module.params
        self._mask_dictionaries()
        for library, install_hint, import_error in BASE_REQUIREMENTS + tuple(requirements):
            if import_error is not None:
                self.module.fail_json(
                    msg=missing_required_lib(library, reason="on the host that runs this module (%s)" % install_hint),
                    exception=import_error,
                )

    @property
    def check_mode(self):
        return self.module.check_mode

    @property
    def diff_mode(self):
        return self.module._diff

    def _mask_dictionaries(self):
        """Mask each no_log dictionary (cloud-config, meta-data) as one document, not value by value.

        Ansible masks each value of a no_log dictionary wherever it appears in
        the output: a cloud-config naming "default" or 1, or meta-data
        {"role": "proxy"}, would turn the pool name, every size, or
        proxy-1-seed.iso into "********". As one document (its sorted JSON) the
        dictionary is masked whole in the invocation, as a string always was,
        and nothing else is. A value that a no_log string or a URL password
        holds too stays masked. No message quotes these options' values.
        """
        spec = self.module.argument_spec
        values = list(_no_log_values(spec, self.params))
        dictionaries = [value for value in values if isinstance(value, dict)]
        if not dictionaries:
            return
        kept = set(self.module.url_secrets)
        kept.update(*(_masked_strings(value) for value in values if not isinstance(value, dict)))
        for value in dictionaries:
            self.module.no_log_values.difference_update(set(_masked_strings(value)) - kept)
            self.module.no_log_values.add(_document(value))
        self.module.params = _shown(spec, self.params)

    def result(self, result):
        """A flow's result dict as the task returns it: its warnings shown as Ansible warnings, its diff only in diff mode."""
        for warning in result.pop("warnings", ()):
            self.module.warn(warning)
        if not self.diff_mode:
            result.pop("diff", None)
        return result

    def fail(self, error, **result):
        """Fail the task for a typed error, naming the hypervisor it happened on."""
        result.update(error.to_result())
        result["uri"] = self.params["uri"]
        self.module.fail_json(msg="%s (hypervisor %s)" % (error.message, self.params["uri"]), **result)
