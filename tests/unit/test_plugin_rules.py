"""Rules over every file in plugins/: no shell or subprocess, XML only through lxml.

Modules run as root on a hypervisor with values from inventories: a shell would turn a name into a
command, and XML built as text would turn a name into markup. So nothing in plugins/ may start a
process, and every XML document is an lxml tree: no XML library but lxml, no string that spells a
tag, and parsing only through _xml.parse_xml (entities never resolved, nothing fetched).
"""

import ast
import os
import re

import pytest
import yaml

PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "plugins")
XML_HOME = os.path.join(PLUGINS, "module_utils", "_libvirt", "xml.py")

# Modules that start processes, and the standard library's XML (which resolves entities and invites text).
FORBIDDEN_MODULES = ("subprocess", "pty", "commands", "popen2", "multiprocessing", "xml", "defusedxml", "pexpect")
# Calls that start a process or a shell, whatever they are imported as.
FORBIDDEN_CALLS = frozenset((
    "system", "popen", "spawnl", "spawnle", "spawnlp", "spawnv", "spawnve", "spawnvp", "posix_spawn",
    "posix_spawnp", "execl", "execle", "execlp", "execv", "execve", "execvp", "execvpe", "fork", "forkpty",
    "run_command", "check_output", "check_call", "getoutput", "getstatusoutput",
))
# lxml's parsers; only _xml.parse_xml may call them, with its safe parser.
PARSER_CALLS = frozenset(("fromstring", "XML", "parse", "XMLParser", "HTMLParser", "iterparse", "fromstringlist"))
# Markup in a string: a closing tag, a tag with an attribute, an empty-element tag, a declaration.
# (An element named in a message, "domain XML has no <name>", is text, not markup.)
TAG = re.compile(r"</[A-Za-z_][\w:.-]*\s*>|<[A-Za-z_][\w:.-]*\s+[\w:.-]+\s*=|<[A-Za-z_][\w:.-]*\s*/>|<[?!][A-Za-z]")
# Module documentation is YAML and may show XML as an example.
DOC_NAMES = frozenset(("DOCUMENTATION", "EXAMPLES", "RETURN"))


def _python_files():
    for root, dirs, files in os.walk(PLUGINS):
        dirs[:] = [name for name in dirs if name != "__pycache__"]
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(root, name)


FILES = sorted(_python_files())


def _tree(path):
    with open(path, encoding="utf-8") as handle:
        return ast.parse(handle.read(), path)


def _docstrings(tree):
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _documentation(tree):
    found = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) in DOC_NAMES for target in node.targets):
            found.update(id(child) for child in ast.walk(node.value))
    return found


def _called_name(call):
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _on_etree(func):
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "etree"


def violations(path):
    """(line, what) of every rule the file breaks."""
    tree = _tree(path)
    skipped = _docstrings(tree) | _documentation(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + ["%s.%s" % (node.module, alias.name) for alias in node.names]
        else:
            names = []
        for name in names:
            if name.split(".")[0] in FORBIDDEN_MODULES:
                found.append((node.lineno, "imports %s" % name))
        if isinstance(node, ast.Call):
            called = _called_name(node)
            if called in FORBIDDEN_CALLS:
                found.append((node.lineno, "calls %s()" % called))
            if called in PARSER_CALLS and _on_etree(node.func) and path != XML_HOME:
                found.append((node.lineno, "parses with lxml's %s() instead of _xml.parse_xml" % called))
        if (isinstance(node, ast.Assign) and any(getattr(target, "id", None) in DOC_NAMES for target in node.targets)
                and not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))):
            # ansible-test's yamllint reads every such name as documentation, and crashes on anything but a string.
            found.append((node.lineno, "assigns a documentation name something other than a string"))
        elif isinstance(node, ast.Assign) and any(getattr(target, "id", None) in DOC_NAMES for target in node.targets):
            try:
                yaml.safe_load(node.value.value)
            except yaml.YAMLError as error:
                # ansible-doc and ansible-test's yamllint fail on it, ansible-doc naming neither line nor text.
                found.append((node.lineno, "has documentation that is not YAML: %s" % str(error).splitlines()[0]))
        text = node.value if isinstance(node, ast.Constant) and id(node) not in skipped else None
        if isinstance(text, str) and TAG.search(text):
            found.append((node.lineno, "spells XML as text: %r" % node.value[:60]))
    return found


@pytest.mark.parametrize("path", FILES, ids=[os.path.relpath(path, PLUGINS) for path in FILES])
def test_plugin_runs_no_process_and_builds_xml_only_with_lxml(path):
    assert violations(path) == []


SAMPLES = {
    "import subprocess\n": "imports subprocess",
    "from subprocess import run\n": "imports subprocess",
    "import os\nos.system('virsh list')\n": "calls system()",
    "module.run_command(['virsh'])\n": "calls run_command()",
    "import xml.etree.ElementTree as ET\n": "imports xml.etree.ElementTree",
    "from xml.dom import minidom\n": "imports xml.dom",
    "xml = '<domain type=\"kvm\">%s</domain>' % name\n": "spells XML as text",
    "xml = f'<name>{name}</name>'\n": "spells XML as text",
    "tail = '</disk>'\n": "spells XML as text",
    "disk = '<source file=\"%s\"/>' % path\n": "spells XML as text",
    "head = '<?xml version=\"1.0\"?>'\n": "spells XML as text",
    "element = etree.fromstring(text)\n": "parses with lxml's fromstring()",
    "EXAMPLES = {4: '203.0.113.0/24'}\n": "assigns a documentation name something other than a string",
    "RETURN = 'description: C({name: text})'\n": "has documentation that is not YAML",
}


@pytest.mark.parametrize("source, expected", sorted(SAMPLES.items()))
def test_the_rules_catch_each_kind_of_breach(tmp_path, source, expected):
    path = tmp_path / "sample.py"
    path.write_text(source)
    assert any(what.startswith(expected) for _line, what in violations(str(path))), violations(str(path))


def test_docstrings_comments_and_struct_formats_are_not_markup(tmp_path):
    path = tmp_path / "sample.py"
    path.write_text('"""Builds <domain> elements."""\nimport struct\n# "<hex>  <file>"\n'
                    'DOCUMENTATION = "<disk> in YAML"\nvalue = struct.unpack_from("<I", data, 0)\n'
                    'error = "domain XML has no <name>"\nrange = "(?P<length>[0-9]+)"\n')
    assert violations(str(path)) == []
