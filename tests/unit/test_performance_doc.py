"""docs/performance.md is what bench/report.py renders from the results files the page names (issue 41 item 4).

The page is generated, never edited by hand: a change to a section's text in bench/report_sections/ is a change of
the page, regenerated with `bench/run --report-only`. The render needs no lab: it reads bench/results/ only.
"""

import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = REPO_ROOT / "docs" / "performance.md"
# bench is a directory of the checkout, imported from its root as bench/run does.
RENDER = "import sys; from bench import report; report.write(sys.argv[3:], doc=sys.argv[1], images=sys.argv[2])"


def test_the_page_is_what_the_report_renders_from_its_results(tmp_path):
    page = DOC.read_text()
    head = page.split("\n\n")[1]
    sources = re.findall(r"`(bench/results/[^`]+\.json)`", head)
    assert sources, head
    rendered, images = tmp_path / "performance.md", tmp_path / "images"
    completed = subprocess.run([sys.executable, "-c", RENDER, str(rendered), str(images)] + sources, cwd=str(REPO_ROOT),
                               capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr
    assert rendered.read_text() == page
    linked = set(re.findall(r"\]\(images/(perf-[a-z0-9-]+\.png)\)", page))
    assert {path.name for path in images.iterdir()} == linked
