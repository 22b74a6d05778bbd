"""The manual builds with warnings as errors (a broken link or anchor fails), and the README
stays a front door whose links lead somewhere."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_docs_site_builds_strictly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
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


# -- citing, the measurements, studies apart from benchmarks ------------------------------------

BIB_KEY = re.compile(r"^@\w+\{([^,\s]+),", re.MULTILINE)


def test_every_catalogue_tool_has_its_paper_in_how_to_cite():
    """A row per catalogue tool in docs/cite.md, and each row's BibTeX key an entry there: a
    tool added to the catalogue cannot go uncited."""
    from iqa_tools.catalog import load_catalog

    page = (REPO / "docs" / "cite.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([^`]+)` \| [^|]+ \| (`[^`]+`|—) \|$", page, re.MULTILINE))
    names = [tool.name for tool in load_catalog()]
    assert sorted(rows) == sorted(names)
    entries = BIB_KEY.findall(page)
    assert len(entries) == len(set(entries)), "a BibTeX key twice"
    cited = {key.strip("`") for key in rows.values() if key != "—"}
    assert cited - set(entries) == set()
    assert [name for name, key in rows.items() if key == "—"] == ["PSNR"]
    assert {"agentic_iqa", "zhu2025agenticiqa", "pyiqa"} <= set(entries)
    for block in re.findall(r"```bibtex\n(.*?)```", page, re.DOTALL):
        assert block.count("{") == block.count("}"), block[:80]


def test_citation_cff_names_the_project_the_paper_and_pyiqa():
    import yaml

    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    assert {"message", "title", "authors"} <= set(cff)
    titles = {reference["title"]: reference for reference in cff["references"]}
    paper = titles[
        "AgenticIQA: An Agentic Framework for Adaptive and Interpretable Image Quality Assessment"
    ]
    assert paper["url"] == "https://arxiv.org/abs/2509.26006"
    assert paper["authors"][0] == {"family-names": "Zhu", "given-names": "Hanwei"}
    pyiqa = titles["IQA-PyTorch: PyTorch Toolbox for Image Quality Assessment"]
    assert pyiqa["repository-code"] == "https://github.com/chaofengc/IQA-PyTorch"


def test_the_measurements_page_links_every_raw_output():
    folder = REPO / "docs" / "measurements"
    targets = {
        t.split("#", 1)[0] for t in LINK.findall((folder / "index.md").read_text(encoding="utf-8"))
    }
    outputs = {p.name for p in folder.iterdir() if p.is_file() and p.name != "index.md"}
    assert outputs - targets == set(), "raw outputs named but not linked"
    runs = {p.name for p in folder.iterdir() if p.is_dir()}
    assert {t.split("/", 1)[0] for t in targets if "/" in t} >= runs
    assert all((folder / t).is_file() for t in targets if not re.match(r"[a-z]+://|\.\./", t))


def test_the_docs_home_gives_the_readmes_two_commands():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", section, re.DOTALL)
    assert len(commands) == 2
    home = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    assert [c for c in commands if f"```bash\n{c}\n```" not in home] == []


STUDIES = (
    "opinion_selection.py",
    "question_models_keep_or_revert.py",
    "letter_reading.py",
    "monotone_opinion.py",
)


def test_one_off_studies_live_apart_from_the_benchmarks_and_nothing_points_at_the_old_paths():
    assert sorted(p.name for p in (REPO / "studies").glob("*.py")) == sorted(STUDIES)
    assert not any(
        (REPO / "benchmarks" / name).exists() for name in (*STUDIES, "questions_against_c20d270.py")
    )
    listing = (REPO / "studies" / "README.md").read_text(encoding="utf-8")
    assert all(f"]({name})" in listing for name in STUDIES)
    stale = re.compile(
        r"benchmarks/(opinion_selection|letter_reading|questions_against_c20d270)"
        r"\.py"
    )
    places = [
        REPO / "README.md",
        REPO / "pyproject.toml",
        REPO / "mkdocs.yml",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "docs" / "measurements").glob("*.md"),
        *(REPO / "benchmarks").glob("*.py"),
        *(REPO / "studies").glob("*.py"),
        *(REPO / "tests").rglob("*.py"),
        *(REPO / "agentic_iqa").rglob("*.py"),
        *(REPO / "agentic_iqa").rglob("*.json"),
        *(REPO / "scripts").glob("*"),
    ]
    this = Path(__file__).resolve()
    found = [
        str(p.relative_to(REPO))
        for p in places
        if p.is_file() and p.resolve() != this and stale.search(p.read_text("utf-8"))
    ]
    assert found == []
    benchmarks = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert "`studies/`" in benchmarks and all(f"studies/{name}" in benchmarks for name in STUDIES)
