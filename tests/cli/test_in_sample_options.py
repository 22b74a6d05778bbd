"""The in-sample warning in every format, and ``--exclude-in-sample`` on submit, report, compare.

Real builtin jobs on real photos: three of ``livec-dev`` (every one in the builtin's fitted list,
``vlm/builtin/fitted_images.json``) and three of ``livec-extra`` (none), so half a job is
in-sample.  The builtin answers an image the same way every time, so a report that leaves the
fitted photos out must give the figures of a job that never had them.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db import upgrade

pytestmark = pytest.mark.slow

runner = CliRunner()
EACH = 3


def _rows(folder: Path) -> list[list[str]]:
    with open(folder / "mos.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))[:EACH]
    return [[str(folder / "images" / row["image"]), row["mos"]] for row in rows]


def _submit(*args: str) -> tuple[str, str]:
    result = runner.invoke(app, ["eval", "submit", *args])
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[0], result.stderr


def _json(*args: str) -> dict:
    result = runner.invoke(app, ["eval", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def jobs(
    data_dir: Path, livec_extra_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    folder = tmp_path_factory.mktemp("in-sample")
    url = f"sqlite:///{folder / 'results.sqlite3'}"
    upgrade(url)
    manifest = folder / "mixed.csv"
    with open(manifest, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos"])
        writer.writerows(_rows(data_dir / "livec-dev") + _rows(livec_extra_dir))
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("AGENTIC_IQA_")]:
            if name != "AGENTIC_IQA_DATA_DIR" and not name.startswith("AGENTIC_IQA_TEST_"):
                patch.delenv(name)
        patch.setenv("AGENTIC_IQA_DATABASE_URL", url)
        patch.setenv("AGENTIC_IQA_WEIGHTS_DIR", str(data_dir / "pyiqa-weights"))
        patch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
        patch.setenv("AGENTIC_IQA_DEVICE", "cpu")
        patch.setenv("AGENTIC_IQA_VLM_CACHE", "false")
        mixed, _ = _submit(str(manifest), "--name", "mixed")
        clean, said = _submit(str(manifest), "--name", "clean", "--exclude-in-sample")
        yield {"mixed": mixed, "clean": clean, "said": said, "folder": str(folder)}


def _warning(job: str) -> str:
    return (
        f"{EACH} of {2 * EACH} items of job {job[:8]} are images the builtin backend was "
        "fitted on: its figures on them are in-sample"
    )


def test_submit_leaves_in_sample_rows_out_and_says_how_many(jobs):
    assert (
        f"--exclude-in-sample: {EACH} in-sample item(s) not submitted (images the builtin "
        "backend was fitted on)"
    ) in jobs["said"]
    status = _json("status", jobs["clean"])
    assert status["total"] == EACH
    exported = runner.invoke(app, ["eval", "export", jobs["clean"], "--format", "jsonl", "-o", "-"])
    images = [json.loads(line)["image"] for line in exported.stdout.splitlines()]
    assert len(images) == EACH and all("/livec-extra/" in image for image in images)


def test_the_in_sample_warning_is_in_every_format_of_compare_and_report(jobs, tmp_path):
    mixed, clean = jobs["mixed"], jobs["clean"]
    warning = _warning(mixed)
    compare = ["eval", "compare", mixed, clean, "--bootstrap", "20"]
    latex = runner.invoke(app, [*compare, "--format", "latex"]).stdout
    assert r"\textbf{Warning:} " + warning + "}" in latex
    assert latex.index("Warning:") < latex.index(r"\end{table}")
    markdown = runner.invoke(app, [*compare, "--format", "markdown"]).stdout
    assert f"**Warning:** {warning}" in markdown
    table_csv = runner.invoke(app, [*compare, "--format", "csv"]).stdout
    assert f"# warning: {warning}" in table_csv.splitlines()
    assert f"warning: {warning}" in runner.invoke(app, compare).stdout
    assert warning in _json(*compare[1:])["warnings"]
    page = tmp_path / "compare.html"
    assert runner.invoke(app, [*compare, "--html", str(page)]).exit_code == 0
    assert warning in re.sub(r"\s+", " ", page.read_text(encoding="utf-8"))
    # The report's text, JSON and page.
    report = ["eval", "report", mixed, "--bootstrap", "20"]
    assert f"Warning:    {warning}" in runner.invoke(app, report).stdout
    assert warning in _json(*report[1:])["job"]["warnings"]
    page = tmp_path / "report.html"
    assert runner.invoke(app, [*report, "--html", str(page)]).exit_code == 0
    assert warning in re.sub(r"\s+", " ", page.read_text(encoding="utf-8"))


def test_report_without_in_sample_items_gives_the_figures_of_a_job_without_them(jobs):
    mixed, clean = jobs["mixed"], jobs["clean"]
    whole = _json("report", mixed, "--bootstrap", "20")
    left = _json("report", mixed, "--bootstrap", "20", "--exclude-in-sample")
    never = _json("report", clean, "--bootstrap", "20")
    assert whole["agent"]["n"] == 2 * EACH and left["agent"]["n"] == EACH
    for metric in ("srcc", "plcc", "krcc", "srcc_ci"):
        assert left["agent"][metric] == never["agent"][metric], metric
    assert left["agent"]["srcc"] != whole["agent"]["srcc"]
    assert left["job"]["in_sample_excluded"] == EACH
    said = (
        f"--exclude-in-sample: {EACH} item(s) of job {mixed[:8]} are images the builtin backend "
        "was fitted on and are left out: every figure of the job here is computed without them"
    )
    assert said in left["job"]["warnings"]
    assert not any("are in-sample" in text for text in left["job"]["warnings"])
    text = runner.invoke(app, ["eval", "report", mixed, "--bootstrap", "0", "--exclude-in-sample"])
    assert f"Warning:    {said}" in text.stdout and f"Agent vs MOS (n={EACH}):" in text.stdout


def test_compare_without_in_sample_items_says_so_per_job(jobs):
    mixed, clean = jobs["mixed"], jobs["clean"]
    compare = ["compare", mixed, clean, "--bootstrap", "20", "--exclude-in-sample"]
    document = _json(*compare)
    assert document["in_sample_excluded"] == {mixed: EACH, clean: 0}
    first, second = document["lines"]
    assert first["mos"]["n"] == second["mos"]["n"] == EACH
    assert first["mos"]["srcc"] == second["mos"]["srcc"]
    assert not any("are in-sample" in text for text in document["warnings"])
    markdown = runner.invoke(app, ["eval", *compare, "--format", "markdown"]).stdout
    assert f"**Warning:** --exclude-in-sample: {EACH} item(s) of job {mixed[:8]}" in markdown
