"""The collection's docs as users read them: antsibull-docs lint, a Sphinx docsite, and its pages in a real browser.

The docsite is built from the installed artifact, once per content (build/docsite/<content key>).
"""

import os
import shutil
import subprocess

import pytest
from lxml import html

from tests.integration import collection_artifact

VENV_BIN = os.path.join(collection_artifact.REPO_ROOT, ".venv", "bin")
DOCSITE_DIR = os.path.join(collection_artifact.ARTIFACT_DIR, os.pardir, "docsite")
# What Sphinx may warn about here: intersphinx cannot fetch docs.ansible.com's inventory on these
# machines, so references into ansible-core's own docs stay unresolved. Anything else is an error.
OFFLINE_WARNINGS = ("failed to reach any of the inventories", "intersphinx inventory",
                    "undefined label: 'common_return_values'", "undefined label: 'ansible_configuration_settings'",
                    "'envvar' reference target not found: ANSIBLE_")


def _env():
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update({"PATH": VENV_BIN + os.pathsep + env.get("PATH", ""), "ANSIBLE_NOCOLOR": "true",
                "ANSIBLE_COLLECTIONS_PATH": collection_artifact.COLLECTIONS_DIR,
                "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false"})
    return env


def _run(argv, cwd):
    completed = subprocess.run(argv, capture_output=True, text=True, env=_env(), cwd=cwd, check=False, timeout=900)
    assert completed.returncode == 0, "%s:\n%s%s" % (" ".join(argv), completed.stdout[-4000:], completed.stderr[-4000:])
    return completed


@pytest.fixture(scope="module")
def docsite():
    """The built site's directory: sphinx-init, antsibull-docs collection, sphinx-build (warnings in warnings.txt)."""
    site = os.path.join(DOCSITE_DIR, os.readlink(collection_artifact.COLLECTIONS_DIR))
    if os.path.exists(os.path.join(site, "built")):
        return site
    shutil.rmtree(DOCSITE_DIR, ignore_errors=True)
    os.makedirs(site, mode=0o755)
    os.chmod(site, 0o755)  # antsibull-docs refuses a directory others may write
    antsibull = os.path.join(VENV_BIN, "antsibull-docs")
    _run([antsibull, "sphinx-init", "--use-current", "--squash-hierarchy", "--fail-on-error", "--dest-dir", site,
          "egress_proxies.kvm"], site)
    os.makedirs(os.path.join(site, "rst"), mode=0o755, exist_ok=True)  # newer sphinx-init makes it
    _run([antsibull, "--config-file", "antsibull-docs.cfg", "collection", "--cleanup", "everything", "--fail-on-error",
          "--use-current", "--squash-hierarchy", "--dest-dir", "rst", "egress_proxies.kvm"], site)
    _run([os.path.join(VENV_BIN, "sphinx-build"), "-M", "html", "rst", "build", "-c", ".", "-q",
          "-w", "warnings.txt"], site)
    with open(os.path.join(site, "built"), "w"):
        pass
    return site


def _names(directory, suffix):
    path = os.path.join(collection_artifact.INSTALLED, directory)
    return sorted(name[:-len(suffix)] for name in os.listdir(path) if name.endswith(suffix) and not name.startswith("_"))


def test_lint_collection_docs_is_clean():
    _run([os.path.join(VENV_BIN, "antsibull-docs"), "lint-collection-docs", "--plugin-docs", "--check-extra-docs-refs",
          "."], collection_artifact.INSTALLED)


def test_sphinx_warns_only_about_references_it_cannot_fetch_offline(docsite):
    with open(os.path.join(docsite, "warnings.txt")) as handle:
        warnings = [line for line in handle.read().splitlines() if "WARNING" in line]
    assert [line for line in warnings if not any(allowed in line for allowed in OFFLINE_WARNINGS)] == []


def test_every_module_and_the_inventory_plugin_have_a_page_with_examples_and_every_role_a_page(docsite):
    pages = os.path.join(docsite, "build", "html")
    plugin_pages = ["%s_module.html" % name for name in _names("plugins/modules", ".py")]
    plugin_pages += ["%s_inventory.html" % name for name in _names("plugins/inventory", ".py")]
    assert "kvm_proxy_module.html" in plugin_pages and "kvm_proxies_inventory.html" in plugin_pages
    for page in plugin_pages:
        tree = html.parse(os.path.join(pages, page))
        assert tree.xpath('//section[@id="examples"]//div[contains(@class, "highlight")]'), page
    for role in sorted(os.listdir(os.path.join(collection_artifact.INSTALLED, "roles"))):
        tree = html.parse(os.path.join(pages, "%s_role.html" % role))
        assert tree.xpath('//section[@id="parameters"]'), role


def test_a_module_page_renders_its_options_table_and_examples_in_chromium(docsite, tmp_path):
    page = os.path.join(docsite, "build", "html", "kvm_proxy_module.html")
    completed = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=%s" % tmp_path,
         "--dump-dom", "file://" + os.path.abspath(page)], capture_output=True, text=True, check=False, timeout=120)
    assert completed.returncode == 0, completed.stderr
    dom = html.fromstring(completed.stdout)
    options = dom.xpath('//table[contains(@class, "ansible-option-table")]')
    assert options, completed.stdout[:2000]
    option_names = [name.strip() for name in options[0].xpath('.//*[contains(@class, "ansible-option-title")]//strong/text()')]
    assert "name" in option_names and "uri" in option_names
    examples = dom.xpath('//section[@id="examples"]')[0].text_content()
    assert "egress_proxies.kvm.kvm_proxy:" in examples
