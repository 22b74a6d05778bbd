"""A sweep: ``eval submit`` with several models and several datasets makes one job
per (model, dataset) under one group, and ``eval compare --group`` puts them in one table.

The datasets are KonIQ-10k and LIVE-C in their own layouts, made of the shared LIVE-C photos
(tests/dataset_roots.py); the models are the offline builtin backend and ``openai:gpt-4o``
served by the simulated model on a local HTTP server (the real OpenAI SDK talks to it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db import make_engine
from agentic_iqa.runtime import lifecycle
from tests.conformance.harness import simulated
from tests.conformance.items import Item
from tests.conformance.simulated_model import Behaviour, Truth
from tests.dataset_roots import koniq_root, livec_root, livec_rows

runner = CliRunner()


@pytest.fixture
def results(results: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The CLI's results database, and a key for the simulated OpenAI-compatible model."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim-key")
    return results


def _roots(livec_dir: Path, folder: Path) -> tuple[Path, Path]:
    return koniq_root(livec_dir, folder / "koniq", 3), livec_root(livec_dir, folder / "livec", 3)


def _taught(koniq: Path, livec: Path, livec_dir: Path) -> list[Item]:
    """What the simulated model knows of each photo: a level from its real MOS."""
    items = []
    for folder, rows in (
        (koniq / "1024x768", livec_rows(livec_dir, 3)),
        (livec / "Images", livec_rows(livec_dir, 3, skip=10)),
    ):
        for name, mos in rows:
            level = min(5, max(1, round(mos / 20)))
            items.append(
                Item(name, folder / name, Truth("Rate the quality of this image.", level=level))
            )
    return items


def _ids(result) -> list[str]:
    assert result.exit_code == 0, result.output
    return result.stdout.split()


def test_two_models_by_two_datasets_make_four_jobs_in_one_group_and_one_table(
    tmp_path, results, livec_dir
):
    koniq, livec = _roots(livec_dir, tmp_path)
    with simulated(Behaviour.CLEAN, _taught(koniq, livec, livec_dir)) as (server, _model):
        result = runner.invoke(
            app,
            [
                "eval",
                "submit",
                "--mode",
                "vlm",
                "--limit",
                "3",
                "--group",
                "paper-table",
                "--model",
                "builtin",
                "--model",
                "openai:gpt-4o",
                "--base-url",
                f"{server.url}/v1",
                "--dataset",
                "koniq",
                "--root",
                str(koniq),
                "--data",
                "livec",
                "--root",
                str(livec),
            ],
        )
    ids = _ids(result)
    assert len(ids) == 4 and len(set(ids)) == 4
    assert "group paper-table: 4 jobs (2 models x 2 datasets)" in " ".join(result.stderr.split())
    engine = make_engine(results)
    specs = {job_id: lifecycle.job_spec(engine, job_id) for job_id in ids}
    assert {spec.group for spec in specs.values()} == {"paper-table"}
    assert sorted(spec.name for spec in specs.values()) == [
        "koniq10k-all-vlm-builtin",
        "koniq10k-all-vlm-gpt-4o",
        "livec-all-vlm-builtin",
        "livec-all-vlm-gpt-4o",
    ]
    assert {(spec.dataset, spec.limit, spec.mode) for spec in specs.values()} == {
        ("koniq10k", 3, "vlm"),
        ("livec", 3, "vlm"),
    }
    assert all(lifecycle.progress(engine, job_id).counts == {"done": 3} for job_id in ids)

    table = runner.invoke(app, ["eval", "compare", "--group", "paper-table", "--json"])
    assert table.exit_code == 0, table.output
    document = json.loads(table.stdout)
    assert document["rows"] == ["builtin/builtin-v1", "openai/gpt-4o"]
    assert document["columns"] == ["koniq10k/all", "livec/all"]
    cells = [
        document["cells"][row][column] for row in document["rows"] for column in document["columns"]
    ]
    assert sorted(cell["job"] for cell in cells) == sorted(ids)
    assert all(
        cell["kind"] == "correlation" and -1 <= cell["srcc"] <= 1 and cell["n"] == 3
        for cell in cells
    )
    text = runner.invoke(app, ["eval", "compare", "--group", "paper-table"])
    lines = text.stdout.splitlines()
    assert lines[0] == "group paper-table: 4 jobs"
    assert lines[1].split() == ["model", "koniq10k/all", "livec/all"]
    assert lines[2].startswith("builtin/builtin-v1") and lines[2].count("SRCC") == 2
    assert lines[3].startswith("openai/gpt-4o") and lines[3].count("SRCC") == 2


def test_a_sweep_without_a_group_gets_one_printed_and_one_job_gets_none(
    tmp_path, results, livec_dir
):
    koniq, livec = _roots(livec_dir, tmp_path)
    both = runner.invoke(
        app,
        [
            "eval",
            "submit",
            "--tools",
            "PIQE",
            "--limit",
            "2",
            "--dataset",
            "koniq",
            "--root",
            str(koniq),
            "--dataset",
            "livec",
            "--root",
            str(livec),
        ],
    )
    ids = _ids(both)
    engine = make_engine(results)
    groups = {lifecycle.job_spec(engine, job_id).group for job_id in ids}
    assert len(ids) == 2 and len(groups) == 1 and None not in groups
    (group,) = groups
    assert group.startswith("sweep-") and f"eval compare --group {group}" in both.stderr
    one = _ids(
        runner.invoke(
            app,
            [
                "eval",
                "submit",
                "--tools",
                "PIQE",
                "--limit",
                "2",
                "--dataset",
                "koniq",
                "--root",
                str(koniq),
            ],
        )
    )
    assert len(one) == 1 and lifecycle.job_spec(engine, one[0]).group is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [
                "--model",
                "gpt-4o",
                "--model",
                "gpt-4o-mini",
                "--backend",
                "openai",
                "--backend",
                "anthropic",
                "--backend",
                "openai",
            ],
            "3 --backend values for 2 --model values",
        ),
        (
            ["--model", "anthropic:claude-sonnet-4-5", "--backend", "openai"],
            "--model anthropic:claude-sonnet-4-5 names the anthropic backend and --backend says "
            "openai",
        ),
        (
            ["--dataset", "koniq", "--dataset", "livec", "--root", "a"],
            "give one --root per --dataset",
        ),
        (
            ["--tools", "PIQE", "--model", "builtin", "--model", "openai:gpt-4o"],
            "a metric job (--tools) asks no model",
        ),
    ],
)
def test_a_sweep_that_cannot_be_paired_exits_2_before_anything_is_stored(
    tmp_path, results, args, message
):
    result = runner.invoke(
        app,
        [
            "eval",
            "submit",
            *args,
            *([] if "--dataset" in args else ["--dataset", "koniq", "--root", str(tmp_path)]),
        ],
    )
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert (
        not Path(results.removeprefix("sqlite:///")).exists()
        or not runner.invoke(app, ["eval", "list", "--json"]).stdout.strip().strip("[]").strip()
    )


def test_koniq_scored_against_the_zscore_says_so_in_the_report(tmp_path, results, livec_dir):
    koniq = koniq_root(livec_dir, tmp_path / "koniq", 3)
    runs = {}
    for score in ("mos", "zscore"):
        (runs[score],) = _ids(
            runner.invoke(
                app,
                [
                    "eval",
                    "submit",
                    "--dataset",
                    "koniq",
                    "--root",
                    str(koniq),
                    "--tools",
                    "PIQE",
                    "--score",
                    score,
                ],
            )
        )
    reports = {
        score: json.loads(
            runner.invoke(app, ["eval", "report", job_id, "--json", "--bootstrap", "0"]).stdout
        )
        for score, job_id in runs.items()
    }
    assert reports["zscore"]["job"]["scored_against"] == "MOS_zscore"
    assert reports["mos"]["job"]["scored_against"] == "MOS"
    text = runner.invoke(app, ["eval", "report", runs["zscore"], "--bootstrap", "0"]).stdout
    assert "scored against MOS_zscore" in text
    refused = runner.invoke(
        app, ["eval", "submit", "--dataset", "livec", "--root", str(tmp_path), "--score", "zscore"]
    )
    assert refused.exit_code == 2
    assert (
        "--score zscore: dataset livec publishes no MOS_zscore (only koniq10k does); use "
        "--score mos"
    ) in " ".join(refused.output.split())


def test_estimate_takes_a_dataset_as_submit_does(tmp_path, results, livec_dir):
    """`eval estimate --dataset koniq --root DIR --limit 2 --mode vlm`: one item runs for real
    on the simulated model, and the figures are for the 2 rows the job would have."""
    koniq, livec = _roots(livec_dir, tmp_path)
    with simulated(Behaviour.CLEAN, _taught(koniq, livec, livec_dir)) as (server, _model):
        result = runner.invoke(
            app,
            [
                "eval",
                "estimate",
                "--dataset",
                "koniq",
                "--root",
                str(koniq),
                "--limit",
                "2",
                "--mode",
                "vlm",
                "--measure",
                "1",
                "--backend",
                "openai",
                "--model",
                "gpt-4o",
                "--base-url",
                f"{server.url}/v1",
                "--json",
            ],
        )
        calls = len([r for r in server.requests if r.path.endswith("/chat/completions")])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert (figures["sample_items"], figures["total_items"], figures["sample_failed"]) == (1, 2, 0)
    assert calls >= 1 and figures["calls"] == pytest.approx(2 * calls)
    assert figures["input_tokens"] > 0 and figures["wall_seconds"] > 0
    text = runner.invoke(
        app,
        [
            "eval",
            "estimate",
            "--dataset",
            "koniq",
            "--root",
            str(koniq),
            "--tools",
            "PIQE",
            "--measure",
            "1",
        ],
    )
    assert text.exit_code == 0, text.output
    assert "dataset koniq: 3 rows" in text.stdout and "0 VLM calls" in text.stdout
    refused = runner.invoke(
        app, ["eval", "estimate", "--dataset", "livec", "--root", str(livec), "--mode", "tools"]
    )
    assert refused.exit_code == 2 and "--mode tools runs the tools alone" in refused.output
