"""An item's trace from the command line: ``eval show`` (text and ``--json``), ``eval export
--format jsonl --trace`` and ``--format hf`` read back with ``datasets.load_from_disk``, on a
finished job (tests/agentic_iqa/reports/traced_job.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db import make_engine
from agentic_iqa.db.engine import read_scope
from agentic_iqa.db.traces import item_trace, job_traces
from agentic_iqa.reports.export import export_columns
from tests.agentic_iqa.reports.traced_job import CALL_COST, HOSTILE, TracedJob, make_traced_job

runner = CliRunner()


@pytest.fixture(scope="module")
def traced(
    tmp_path_factory: pytest.TempPathFactory, example_images: dict[str, Path]
) -> Iterator[TracedJob]:
    yield from make_traced_job(tmp_path_factory.mktemp("traced-cli"), example_images)


@pytest.fixture(scope="module")
def traces(traced: TracedJob) -> dict[str, dict]:
    with read_scope(make_engine(traced.url)) as session:
        return {trace["item"]["id"]: trace for _, trace in job_traces(session, traced.job_id)}


def invoke(*args: str) -> object:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


# -- eval show ------------------------------------------------------------------------------------


def test_show_json_is_the_trace(traced, traces):
    for key in traces:
        shown = invoke("eval", "show", traced.job_id[:8], key, "--json")
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout) == json.loads(json.dumps(traces[key]))
    by_line = invoke("eval", "show", traced.job_id, "--line", "5", "--json")
    assert json.loads(by_line.stdout)["item"]["id"] == "mcq"


def test_show_prints_the_stored_values(traced, traces):
    trace = traces["rate-a"]
    shown = invoke("eval", "show", traced.job_id, "rate-a")
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert f"item rate-a of job {traced.job_id[:8]}" in text
    assert "Rate the quality of this image using PIQE." in text
    for tool in trace["tools"]:
        assert f"{tool['raw_score']:.4g}" in text and f"{tool['score']:.3f}" in text
    assert "whole image" in text
    assert f"{trace['answer']['quality_score']:.3f} / 5" in text
    assert f"${CALL_COST:.6f}" in text and "gpt-4o" in text
    truth = trace["truth"]
    assert f"rank error {truth['rank_error']:+.3f}" in text and "MOS 3;" in text
    for entry in trace["distortions"]:
        assert entry["explanation"] in text


def test_show_escapes_markup_from_ids_models_and_reasons(traced):
    hostile = invoke("eval", "show", traced.job_id, HOSTILE)
    assert hostile.exit_code == 0, hostile.output
    assert f"item {HOSTILE} of job" in hostile.stdout  # shown as written, not made bold
    replanned = invoke("eval", "show", traced.job_id, "blurry")
    assert "Replan 1: look closer at the [red]edges[/red]" in replanned.stdout
    mcq = invoke("eval", "show", traced.job_id, "mcq")
    assert "blur [i]dominates[/i]" in mcq.stdout
    assert "answer B: right (gave B)" in mcq.stdout
    assert "stood in for BRISQUE" in mcq.stdout


def test_show_of_a_failed_item_says_why(traced):
    shown = invoke("eval", "show", traced.job_id, "broken")
    assert shown.exit_code == 0, shown.output
    assert "failed" in shown.stdout and "is not a readable image" in shown.stdout
    assert "MOS 1 (no score to rank)" in shown.stdout


def test_show_of_an_unknown_item_names_close_ids(traced):
    unknown = invoke("eval", "show", traced.job_id, "rate-c")
    assert unknown.exit_code == 1
    assert unknown.output.startswith(
        f"error: job {traced.job_id[:8]} has no item 'rate-c'; close ids: 'rate-a', 'rate-b'"
    )
    no_line = invoke("eval", "show", traced.job_id, "--line", "42")
    assert no_line.exit_code == 1
    assert no_line.output.strip() == f"error: job {traced.job_id[:8]} has no item on line 42"
    neither = invoke("eval", "show", traced.job_id)
    assert neither.exit_code == 2 and "name one item" in neither.output
    no_job = invoke("eval", "show", "fedcba98", "rate-a")
    assert no_job.exit_code == 1 and "no job with id 'fedcba98'" in no_job.output


# -- eval export: jsonl with traces ---------------------------------------------------------------


def test_jsonl_export_carries_the_trace_only_when_asked(traced, traces, tmp_path):
    plain, with_traces = tmp_path / "plain.jsonl", tmp_path / "traced.jsonl"
    assert (
        invoke("eval", "export", traced.job_id, "--format", "jsonl", "-o", str(plain)).exit_code
        == 0
    )
    done = invoke(
        "eval", "export", traced.job_id, "--format", "jsonl", "--trace", "-o", str(with_traces)
    )
    assert done.exit_code == 0, done.output
    rows = [json.loads(line) for line in plain.read_text("utf-8").splitlines()]
    traced_rows = [json.loads(line) for line in with_traces.read_text("utf-8").splitlines()]
    assert list(rows[0]) == export_columns(["PIQE"], raw=True)  # unchanged by default
    assert len(traced_rows) == len(rows) == 6
    for row, traced_row in zip(rows, traced_rows, strict=True):
        trace = traced_row.pop("trace")
        assert traced_row == row
        assert trace == json.loads(json.dumps(traces[row["item_id"]]))
        assert trace["item"]["line"] == row["line"]
    on_stdout = invoke("eval", "export", traced.job_id, "--format", "jsonl", "--trace", "-o", "-")
    assert [json.loads(line)["trace"]["item"]["id"] for line in on_stdout.stdout.splitlines()] == (
        list(traces)
    )


def test_trace_and_embed_images_refuse_other_formats(traced):
    csv = invoke("eval", "export", traced.job_id, "--format", "csv", "--trace", "-o", "-")
    assert csv.exit_code == 2 and "--trace goes with --format jsonl" in csv.output
    embed = invoke("eval", "export", traced.job_id, "--format", "jsonl", "--embed-images")
    assert embed.exit_code == 2 and "--embed-images goes with --format hf" in embed.output


# -- eval export: a Hugging Face dataset ----------------------------------------------------------


def test_hf_dataset_round_trips_rows_and_traces_with_images_by_path(traced, traces, tmp_path):
    import datasets

    plain = tmp_path / "plain.jsonl"
    invoke("eval", "export", traced.job_id, "--format", "jsonl", "-o", str(plain))
    rows = [json.loads(line) for line in plain.read_text("utf-8").splitlines()]
    folder = tmp_path / "hf"
    done = invoke("eval", "export", traced.job_id, "--format", "hf", "-o", str(folder))
    assert done.exit_code == 0, done.output
    assert "wrote 6 rows to" in done.output and "load_from_disk" in done.output
    dataset = datasets.load_from_disk(str(folder))
    assert len(dataset) == 6
    assert dataset.column_names == [*export_columns(["PIQE"], raw=True), "trace"]
    assert dataset.features["line"].dtype == "int64"
    assert dataset.features["quality_score"].dtype == "float64"
    for record, row in zip(dataset, rows, strict=True):
        assert json.loads(record.pop("trace")) == json.loads(json.dumps(traces[row["item_id"]]))
        level = row["level_distribution"]
        assert record.pop("level_distribution") == (json.dumps(level) if level else None)
        row.pop("level_distribution")
        assert record == row
    assert dataset[0]["image"] == traces["rate-a"]["item"]["image"]
    assert not list(tmp_path.glob(".hf.*"))  # nothing staged left behind
    again = invoke("eval", "export", traced.job_id, "--format", "hf", "-o", str(folder))
    assert again.exit_code == 0 and len(datasets.load_from_disk(str(folder))) == 6
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    refused = invoke(
        "eval", "export", traced.job_id, "--format", "hf", "-o", str(tmp_path / "mine")
    )
    assert refused.exit_code == 2 and "is not a dataset folder" in refused.output
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_hf_dataset_embeds_the_images(traced, traces, tmp_path):
    import datasets

    folder = tmp_path / "embedded"
    done = invoke(
        "eval", "export", traced.job_id, "--format", "hf", "--embed-images", "-o", str(folder)
    )
    assert done.exit_code == 0, done.output
    dataset = datasets.load_from_disk(str(folder))
    assert dataset.column_names[-3:] == ["trace", "image_file", "reference_file"]
    by_id = {record["item_id"]: record for record in dataset}
    for key in ("rate-a", "rate-b", HOSTILE, "blurry", "mcq"):
        picture = by_id[key]["image_file"]
        with Image.open(traces[key]["item"]["image"]) as original:
            assert picture.size == original.size
            assert picture.convert("RGB").tobytes() == original.convert("RGB").tobytes()
        assert by_id[key]["reference_file"] is None
    assert by_id["broken"]["image_file"] is None  # its file is no image: nothing to decode
    # Embedded: the folder holds the bytes, readable with the originals gone.
    size = sum(path.stat().st_size for path in folder.rglob("*.arrow"))
    assert size > sum(Path(traces[k]["item"]["image"]).stat().st_size for k in ("rate-a", "mcq"))


def test_hf_without_the_library_names_the_extra(traced, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets: ImportError
    missing = invoke("eval", "export", traced.job_id, "--format", "hf", "-o", str(tmp_path / "x"))
    assert missing.exit_code == 2
    assert "pip install 'agentic-iqa[hf]'" in missing.output
    assert not (tmp_path / "x").exists()


def test_one_trace_read_directly_equals_the_shown_one(traced, traces):
    with read_scope(make_engine(traced.url)) as session:
        assert item_trace(session, traced.job_id, item="mcq") == traces["mcq"]
