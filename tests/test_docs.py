"""The manual builds with warnings as errors (a broken link or anchor fails), and the README
stays a front door whose links lead somewhere."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_docs_site_builds_strictly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    for page in ("agent", "backends", "tools", "jobs", "pipeline", "deployment", "benchmarks"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def test_the_readme_is_a_front_door_whose_relative_links_exist():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200, "the README is the front door; the manual is docs/"
    targets = [t for t in LINK.findall(readme) if not re.match(r"[a-z]+://", t)]
    assert any(t.startswith("docs/") for t in targets), "the README links into the manual"
    missing = [t for t in targets if not (REPO / t.split("#", 1)[0]).exists()]
    assert missing == []
