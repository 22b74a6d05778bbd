"""The public Python API: what ``agentic_iqa`` exports, and ``assess`` on a shipped photo."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest

import agentic_iqa
from tests.conftest import REPO, livec_manifest

#: The names the package documents (its docstring and the README's "From Python").
DOCUMENTED = {
    "Assessment",
    "Evaluation",
    "JobSpec",
    "JobSpecError",
    "ToolScore",
    "__version__",
    "assess",
    "evaluate",
}

BLURRED = REPO / "examples" / "i03_blurred.png"


def test_all_is_exactly_the_documented_names() -> None:
    assert set(agentic_iqa.__all__) == DOCUMENTED
    assert len(agentic_iqa.__all__) == len(DOCUMENTED)


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_each_public_name_imports_from_the_package(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from agentic_iqa import {name}", namespace)
    assert namespace[name] is getattr(agentic_iqa, name)
    assert name in dir(agentic_iqa)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'run_inprocess'"):
        agentic_iqa.run_inprocess  # noqa: B018


def test_importing_the_package_loads_none_of_it() -> None:
    probe = "import sys, agentic_iqa; print(sorted(m for m in sys.modules if 'agentic_iqa' in m))"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "['agentic_iqa']"


def test_assess_rates_the_blurred_example_offline(
    results: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The builtin backend, no BRISQUE weights: PIQE stands in, and the answer says so."""
    monkeypatch.setenv("AGENTIC_IQA_WEIGHTS_DIR", str(tmp_path / "no-weights"))
    from agentic_iqa import Assessment, ToolScore, assess

    steps: list[str] = []
    result = assess(
        "Rate the quality of this image.", BLURRED, on_step=lambda step, _: steps.append(step)
    )

    assert isinstance(result, Assessment)
    assert result.error is None
    assert result.answer == "Bad"
    assert result.score is not None and 1 <= result.score <= 5
    assert result.score < 2  # heavily blurred
    assert result.reasoning and "PIQE stood in for BRISQUE" in result.reasoning
    assert result.plan is not None
    assert result.plan.query_type == "IQA"
    assert result.plan.answer_mode == "scoring"
    assert result.plan.query_scope == "Global"
    assert all(isinstance(tool, ToolScore) for tool in result.tools)
    assert {tool.tool for tool in result.tools} == {"PIQE"}
    assert {tool.in_place_of for tool in result.tools} == {"BRISQUE"}
    assert "Blurs" in {tool.distortion for tool in result.tools}
    assert all(1 <= tool.score <= 5 and tool.object == "Global" for tool in result.tools)
    assert [entry.type for entry in result.distortions["Global"]][0] == "Blurs"
    assert max(result.levels, key=result.levels.__getitem__) == "Bad"
    assert math.isclose(sum(result.levels.values()), 1, abs_tol=1e-3)
    assert result.replans == ()
    assert len(result.stand_ins) == 1 and result.stand_ins[0].startswith("PIQE stood in for")
    assert steps == ["plan", "distortion_detection", "distortion_analysis", "tool_selection",
                     "tool_execution", "summarize"]  # fmt: skip
    assert result.state["summarizer_result"].final_answer == result.answer
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.answer = "Good"  # type: ignore[misc]


def test_assess_refuses_a_missing_image_before_any_step(results: str, tmp_path: Path) -> None:
    from agentic_iqa import assess
    from iqa_tools.errors import ToolError

    with pytest.raises(ToolError):
        assess("Rate the quality of this image.", tmp_path / "missing.png")


def test_assess_refuses_an_overlong_query_before_any_step(results: str) -> None:
    """Past the limit: a ValueError naming both lengths, and no step is run."""
    from agentic_iqa import assess
    from agentic_iqa.query import MAX_QUERY_CHARS, QueryTooLong

    steps: list[str] = []
    with pytest.raises(QueryTooLong, match=f"{MAX_QUERY_CHARS + 1:,} characters") as raised:
        assess("x" * (MAX_QUERY_CHARS + 1), BLURRED, on_step=lambda s, _: steps.append(s))
    assert isinstance(raised.value, ValueError)
    assert steps == []


def test_evaluate_runs_a_job_here_and_reports_what_eval_report_does(
    results: str, livec_dir: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A metric job over eight LIVE-C photos and one missing file: the items run in this
    process, the bad row is a failed item, and the report is ``eval report --json``'s, with
    the tool's SRCC equal to scipy's over the exported scores."""
    import csv
    import json

    from scipy.stats import spearmanr
    from typer.testing import CliRunner

    from agentic_iqa import Evaluation, JobSpec, evaluate
    from agentic_iqa.cli import app
    from agentic_iqa.reports.export import raw_column

    monkeypatch.setenv("AGENTIC_IQA_WEIGHTS_DIR", str(data_dir / "pyiqa-weights"))
    missing = (str(livec_dir / "images" / "no-such-photo.jpg"), "50")
    manifest = livec_manifest(livec_dir, tmp_path / "m.csv", 8, (missing,))
    spec = JobSpec.build(manifest=manifest, mode="tools", tools="NIQE")

    evaluation = evaluate(spec, workers=1, bootstrap=200, seed=3)

    assert isinstance(evaluation, Evaluation)
    assert evaluation.status == "done"
    assert evaluation.counts["total"] == 9
    assert (evaluation.counts["done"], evaluation.counts["failed"]) == (8, 1)
    assert evaluation.correlations is None and evaluation.srcc is None  # a metric job
    assert set(evaluation.tools) == {"NIQE"}
    runner = CliRunner()
    shown = runner.invoke(
        app, ["eval", "report", evaluation.job_id, "--json", "--bootstrap", "200", "--seed", "3"]
    )
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["tools"] == json.loads(json.dumps(evaluation.report["tools"]))
    exported = tmp_path / "rows.csv"
    done = runner.invoke(app, ["eval", "export", evaluation.job_id, "-o", str(exported)])
    assert done.exit_code == 0, done.output
    rows = [row for row in csv.DictReader(exported.open()) if row["status"] == "done"]
    expected = spearmanr(
        [float(row[raw_column("NIQE")]) for row in rows], [float(row["mos"]) for row in rows]
    ).statistic
    assert math.isclose(abs(evaluation.tools["NIQE"]["srcc"]), abs(expected), abs_tol=1e-9)
