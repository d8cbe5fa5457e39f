"""The modules' documented examples and return values, read from their docs, and the examples adapted to the lab.

tests/integration/test_examples.py runs the adapted examples (its docstring has the rule's table);
tests/unit/test_examples_parse.py checks, without the lab, that the examples are tasks using only documented options.
"""

import copy
import importlib
import re

import yaml

COLLECTION = "egress_proxies.kvm"
PACKAGE = "ansible_collections.egress_proxies.kvm.plugins"
MODULES = ("kvm_base_image", "kvm_seed", "kvm_proxy", "kvm_proxy_set", "kvm_proxy_info")
# Task keywords an example may carry next to its module (everything else in a task is the module).
TASK_KEYWORDS = {"name", "register", "delegate_to", "check_mode", "diff", "loop", "loop_control", "when",
                 "changed_when", "failed_when", "become", "vars", "tags", "run_once", "ignore_errors"}


def _module(name):
    return importlib.import_module("%s.modules.%s" % (PACKAGE, name))


def documented_options(module):
    """The module's options as ansible-doc shows them: its own over those of its doc fragments."""
    doc = yaml.safe_load(_module(module).DOCUMENTATION)
    options = {}
    for fragment in doc.get("extends_documentation_fragment", []):
        fragment_name = fragment[len(COLLECTION) + 1:] if fragment.startswith(COLLECTION + ".") else fragment
        fragment_doc = yaml.safe_load(importlib.import_module("%s.doc_fragments.%s" % (PACKAGE, fragment_name))
                                      .ModuleDocFragment.DOCUMENTATION)
        options.update(fragment_doc.get("options") or {})
    options.update(doc.get("options") or {})
    return options


def examples(module):
    """The module's EXAMPLES as a list of tasks (YAML anchors and merge keys resolved)."""
    return yaml.safe_load(_module(module).EXAMPLES)


def return_docs(module):
    return yaml.safe_load(_module(module).RETURN)


def task_module(task):
    """(module name as written, its arguments) of one task."""
    (name,) = [key for key in task if key not in TASK_KEYWORDS]
    return name, task[name] or {}


def collection_module(task):
    """The collection's module a task calls (its short name), or None for any other module."""
    name, _args = task_module(task)
    prefix = COLLECTION + "."
    return name[len(prefix):] if name.startswith(prefix) else None


def undocumented_options(args, options, where=""):
    """The keys of ``args`` (nested dicts and lists of dicts too) that ``options`` does not document."""
    found = []
    for key, value in args.items():
        option = options.get(key)
        if option is None:
            found.append(where + key)
            continue
        suboptions = option.get("suboptions")
        if suboptions is None:
            continue
        items = [("%s%s[%d]." % (where, key, index), item) for index, item in enumerate(value)] \
            if isinstance(value, list) else [("%s%s." % (where, key), value)]
        for item_where, item in items:
            if isinstance(item, dict):
                found += undocumented_options(item, suboptions, item_where)
    return found


# --- Return values -------------------------------------------------------------------------------------------------
# Each `returned:` condition the RETURN docs use, as a test of the task's arguments. One the table lacks fails the test
# (add it here), so no documented condition goes unchecked.
RETURNED_WHEN = {
    "always": lambda args: True,
    "state is present": lambda args: args.get("state", "present") == "present",
    "state is absent, or O(prune=true)": lambda args: args.get("state") == "absent" or bool(args.get("prune")),
    "O(prune=true)": lambda args: bool(args.get("prune")),
}
PYTHON_TYPES = {"str": (str,), "int": (int,), "float": (float, int), "bool": (bool,), "list": (list,), "dict": (dict,)}


def _may_be_null(doc):
    description = doc.get("description", "")
    text = " ".join(description) if isinstance(description, list) else description
    return "null" in text.lower()


def _type_errors(value, doc, where):
    if value is None:
        return [] if _may_be_null(doc) else ["%s is null, and its description does not say it can be" % where]
    expected = doc["type"]
    if not isinstance(value, PYTHON_TYPES[expected]) or (expected == "int" and isinstance(value, bool)):
        return ["%s is %r (%s), documented as %s" % (where, value, type(value).__name__, expected)]
    items = value if expected == "list" else [value] if expected == "dict" else []
    contains = doc.get("contains")
    errors = []
    for index, item in enumerate(items):
        item_where = "%s[%d]" % (where, index) if expected == "list" else where
        if contains is not None:
            if not isinstance(item, dict):
                errors.append("%s is %r, documented as a dict" % (item_where, item))
                continue
            for key, key_doc in contains.items():
                if key not in item:
                    errors.append("%s has no %s" % (item_where, key))
                else:
                    errors += _type_errors(item[key], key_doc, "%s.%s" % (item_where, key))
        elif expected == "list" and doc.get("elements") in PYTHON_TYPES:
            errors += _type_errors(item, {"type": doc["elements"]}, item_where)
    return errors


def return_errors(module, args, result):
    """What in one successful result differs from the module's RETURN docs for these arguments."""
    errors = []
    for key, doc in return_docs(module).items():
        returned = RETURNED_WHEN[doc["returned"]]
        if not returned(args):
            continue
        if key not in result:
            errors.append("%s is not returned (documented as returned %s)" % (key, doc["returned"]))
        else:
            errors += _type_errors(result[key], doc, key)
    return errors


# --- The examples on the lab ---------------------------------------------------------------------------------------
BASE_VOLUME = re.compile(r"base-(?P<name>[a-z0-9._-]+)-[0-9a-f]{16}\.(?P<format>qcow2|raw)")
NAME_PREFIX = "eptest-examples-"


class LabRule:
    """The one rule that adapts an example to the lab (tests/integration/test_examples.py tabulates it).

    ``images`` maps a module to the lab image ({"url", "sha256"}) its examples' URLs become, by disk format;
    ``base_volume_name(name, format, sha256)`` names a cached base as the collection does.
    """

    def __init__(self, lab, images, base_volume_name):
        self.lab = lab
        self.images = images
        self.base_volume_name = base_volume_name

    def named(self, value):
        return value if "{{" in value else NAME_PREFIX + value

    def adapt(self, module, task):
        """A copy of ``task`` (one of ``module``'s examples) that runs on the lab."""
        task = copy.deepcopy(task)
        called = collection_module(task)
        if called is None:
            return task
        module_name = task_module(task)[0]
        args = task[module_name] = task[module_name] or {}
        options = documented_options(called)
        if "pool" in options:
            args["pool"] = self.lab.pool
        if "virt_type" in options:
            args["virt_type"] = self.lab.virt_type
        if "bridge" in args:
            args["bridge"] = self.lab.bridge
        if "name" in args:
            args["name"] = self.named(args["name"])
        for proxy in args.get("proxies", []):
            proxy["name"] = self.named(proxy["name"])
        image_args = args.get("image", args if called == "kvm_base_image" else None)
        if image_args is not None:
            self._adapt_image(module, image_args, rename=image_args is not args)
        if "base_volume" in args:
            base = BASE_VOLUME.fullmatch(args["base_volume"])
            args["base_volume"] = self.base_volume_name(self.named(base["name"]), base["format"],
                                                        self.images[module][base["format"]]["sha256"])
        return task

    def _adapt_image(self, module, image_args, rename):
        image = self.images[module][image_args.get("format", "qcow2")]
        if rename:
            image_args["name"] = self.named(image_args["name"])
        if "url" in image_args:
            image_args["url"] = image["url"]
        checksum = image_args.get("checksum")
        if checksum is not None:
            value = checksum.partition(":")[2]
            image_args["checksum"] = "sha256:" + (
                self.lab.mirror_url + "SHA256SUMS" if value.startswith(("http://", "https://")) else image["sha256"])
