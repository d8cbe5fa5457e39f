"""The built artifact holds what a user installing from Galaxy needs, and its docs point only inside it."""

import fnmatch
import os
import re
import subprocess

import yaml

from tests.integration import collection_artifact

REPO_ROOT = collection_artifact.REPO_ROOT
INSTALLED = collection_artifact.INSTALLED
# [text](target): relative targets only; a #fragment is not a file.
MARKDOWN_LINK = re.compile(r"\]\(([^)#\s]+)[^)]*\)")
# ansible-galaxy writes its content into MANIFEST.json instead of shipping it.
BUILD_METADATA = "galaxy.yml"


def _build_ignore():
    with open(os.path.join(REPO_ROOT, "galaxy.yml")) as handle:
        return yaml.safe_load(handle)["build_ignore"]


def _ignored(path, patterns):
    parts = path.split("/")
    return any(fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(parts[0], pattern)
               or any(fnmatch.fnmatch(part, pattern.replace("**/", "")) for part in parts)
               for pattern in patterns)


def _tracked_files():
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    return [path for path in listed.decode().split("\0")
            if path and path != BUILD_METADATA and os.path.exists(os.path.join(REPO_ROOT, path))]


def test_artifact_holds_every_tracked_file_outside_build_ignore():
    patterns = _build_ignore()
    tracked = _tracked_files()
    shipped = [path for path in tracked if not _ignored(path, patterns)]
    left_out = [path for path in tracked if _ignored(path, patterns)]
    assert "plugins/modules/kvm_proxy.py" in shipped and "scripts/test" in left_out
    missing = [path for path in shipped if not os.path.isfile(os.path.join(INSTALLED, path))]
    assert missing == []
    leaked = [path for path in left_out if os.path.exists(os.path.join(INSTALLED, path))]
    assert leaked == []


def test_readme_names_every_top_level_part_left_out():
    """README.md says which parts only the source repository has: each top-level one build_ignore leaves out."""
    with open(os.path.join(INSTALLED, "README.md")) as handle:
        readme = handle.read()
    section = readme[readme.index("## Only in the source repository"):]
    left_out = sorted({path.split("/")[0] for path in _tracked_files() if _ignored(path, _build_ignore())})
    assert [part for part in left_out if "`%s" % part not in section] == []


def test_markdown_links_in_the_artifact_resolve_inside_it():
    broken = []
    for directory, _dirs, files in os.walk(INSTALLED):
        for name in files:
            if not name.endswith(".md"):
                continue
            path = os.path.join(directory, name)
            with open(path) as handle:
                targets = MARKDOWN_LINK.findall(handle.read())
            for target in targets:
                if "://" in target or target.startswith("mailto:"):
                    continue
                if not os.path.exists(os.path.normpath(os.path.join(directory, target))):
                    broken.append("%s -> %s" % (os.path.relpath(path, INSTALLED), target))
    assert broken == []
