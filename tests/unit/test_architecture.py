# -*- coding: utf-8 -*-
# Copyright: Contributors to the egress_proxies.kvm collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""docs/dev/architecture.md draws every import between the collection's packages, and nothing more (issue 41 item 3).

The page holds two fenced blocks this test reads. ```imports lists the arrows, one a line, ``<from> -> <to>, <to>``
(``#`` starts a comment): a package is a folder of plugins/module_utils (``_proxy``) or a plugin folder
(``modules``, ``filter``...); ``<from>`` may be one file of a package (``_common/task.py``) when only that file may
import ``<to>``. ```layers lists the packages in rows, the top first, each row's names before a description: a
package arrow goes down the rows only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "dev" / "architecture.md"
PLUGINS = ROOT / "plugins"
PREFIX = "ansible_collections.egress_proxies.kvm.plugins."


def _package(dotted_parts):
    """The package of a path or module name below plugins/: a module_utils folder, else the plugin folder."""
    return dotted_parts[1] if dotted_parts[0] == "module_utils" else dotted_parts[0]


def code_imports():
    """{(package, its file that imports, package imported)} of every import from one package into another."""
    found = set()
    for path in sorted(PLUGINS.rglob("*.py")):
        parts = path.relative_to(PLUGINS).parts
        package = _package(parts)
        file_name = "/".join(parts[2:] if parts[0] == "module_utils" else parts[1:])
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, "%s: a relative import, which this test does not read" % path
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.startswith(PREFIX):
                    imported = _package(name[len(PREFIX):].split("."))
                    if imported != package:
                        found.add((package, file_name, imported))
    return found


def _block(text, kind):
    blocks = re.findall(r"^```%s\n(.*?)^```" % kind, text, re.S | re.M)
    assert len(blocks) == 1, "docs/dev/architecture.md needs exactly one ```%s block" % kind
    return [line.split("#")[0].strip() for line in blocks[0].splitlines() if line.split("#")[0].strip()]


def drawn_arrows(text):
    """{(from, to)} of the page's ```imports block."""
    arrows = set()
    for line in _block(text, "imports"):
        source, arrow, targets = line.partition(" -> ")
        assert arrow, "not an arrow: %r" % line
        arrows.update((source.strip(), target.strip()) for target in targets.split(","))
    return arrows


def drawn_layers(text):
    """{package: its row, 0 at the top} of the page's ```layers block."""
    rows = {}
    for row, line in enumerate(_block(text, "layers")):
        names = re.match(r"[\w, ]+?(?=\s{2,}|$)", line).group()
        rows.update((name.strip(), row) for name in names.split(","))
    return rows


def undrawn(imports, arrows):
    """The imports no arrow draws, as ``<package>/<file> -> <package>``."""
    return sorted("%s/%s -> %s" % (package, file_name, imported) for package, file_name, imported in imports
                  if (package, imported) not in arrows and ("%s/%s" % (package, file_name), imported) not in arrows)


def unused(imports, arrows):
    """The arrows no import of the code makes."""
    made = {(package, imported) for package, _file, imported in imports}
    made |= {("%s/%s" % (package, file_name), imported) for package, file_name, imported in imports}
    return sorted("%s -> %s" % arrow for arrow in arrows - made)


@pytest.fixture(scope="module")
def page():
    return PAGE.read_text(encoding="utf-8")


def test_every_import_between_packages_is_drawn(page):
    assert undrawn(code_imports(), drawn_arrows(page)) == []


def test_every_arrow_drawn_is_an_import_of_the_code(page):
    assert unused(code_imports(), drawn_arrows(page)) == []


def test_packages_import_down_the_layers_only(page):
    rows = drawn_layers(page)
    packages = {name for package, _file, imported in code_imports() for name in (package, imported)}
    assert sorted(packages - set(rows)) == []
    upwards = sorted("%s -> %s" % (source, target) for source, target in drawn_arrows(page)
                     if "/" not in source and rows[target] <= rows[source])
    assert upwards == []


def test_an_arrow_taken_off_the_page_fails_the_check(page):
    # Each arrow is needed: without it, an import of the code is no longer drawn.
    imports, arrows = code_imports(), drawn_arrows(page)
    for arrow in arrows:
        assert undrawn(imports, arrows - {arrow}), arrow
    assert unused(imports, arrows | {("_common", "_proxy")}) == ["_common -> _proxy"]
