# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The AnsibleModule wrapper every module of this collection uses.

It merges the common options into a module's own argument spec, reports a
missing Python library with the package to install, opens and closes the
libvirt connection, and is the one place where the typed errors of
_errors.py become a failed task.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.egress_proxies.kvm.plugins.module_utils._errors import KvmError
from ansible_collections.egress_proxies.kvm.plugins.module_utils._libvirt import (
    DEFAULT_URI,
    LIBVIRT_REQUIREMENT,
    Hypervisor,
)
from ansible_collections.egress_proxies.kvm.plugins.module_utils._xml import LXML_REQUIREMENT

# Every module talks to libvirt and reads or builds its XML.
BASE_REQUIREMENTS = (LIBVIRT_REQUIREMENT, LXML_REQUIREMENT)


def common_argument_spec():
    return dict(uri=dict(type="str", default=DEFAULT_URI))


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


class KvmModule:
    """An AnsibleModule plus the collection's conventions.

    ``requirements`` lists (library, how to install it, import traceback or
    None) for the optional libraries the module needs besides libvirt and lxml.
    """

    def __init__(self, argument_spec, requirements=(), supports_check_mode=True, **kwargs):
        spec = common_argument_spec()
        spec.update(argument_spec)
        self.module = AnsibleModule(argument_spec=spec, supports_check_mode=supports_check_mode, **kwargs)
        for library, install_hint, import_error in BASE_REQUIREMENTS + tuple(requirements):
            if import_error is not None:
                self.module.fail_json(
                    msg=missing_required_lib(library, reason="on the host that runs this module (%s)" % install_hint),
                    exception=import_error,
                )

    @property
    def params(self):
        return self.module.params

    @property
    def check_mode(self):
        return self.module.check_mode

    @property
    def diff_mode(self):
        return self.module._diff

    def mask_as_document(self, option, document):
        """Hide the no_log dictionary ``option`` as the one ``document`` it is written as, not value by value.

        Ansible masks each value of a no_log dictionary wherever it appears in
        the result: a cloud-config naming "default" or 1 would turn the pool
        name, the volume name and every size into "********". As the document
        string the option is masked whole, as a string always was. A value
        that another no_log option holds too stays masked.
        """
        others = set()
        for name, spec in self.module.argument_spec.items():
            if spec.get("no_log") and name != option:
                others.update(_masked_strings(self.params[name]))
        self.module.no_log_values.difference_update(set(_masked_strings(self.params[option])) - others)
        self.params[option] = document
        self.module.no_log_values.add(document)

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

    def run(self, work, validate=None):
        """Validate, connect, call ``work(hypervisor)`` and exit with its result dict.

        ``validate`` runs before any connection is opened, so bad input fails
        without touching the hypervisor.
        """
        try:
            if validate is not None:
                validate()
            with Hypervisor.open(self.params["uri"]) as hypervisor:
                result = work(hypervisor)
        except KvmError as error:
            self.fail(error)
        else:
            self.module.exit_json(**result)
