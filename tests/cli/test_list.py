"""``eval list`` shows the jobs (newest first, filtered, as text or JSON), and
``agentic-iqa models`` the backends, the configured models and their prices."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentic_iqa.cli import app
from tests.dataset_roots import koniq_root, livec_root

runner = CliRunner()


def _submit(*args: str) -> list[str]:
    result = runner.invoke(app, ["eval", "submit", *args])
    assert result.exit_code == 0, result.output
    return result.stdout.split()


def _listed(*args: str) -> list[dict]:
    result = runner.invoke(app, ["eval", "list", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_eval_list_shows_the_jobs_and_filters_them(tmp_path, results, livec_dir):
    koniq = koniq_root(livec_dir, tmp_path / "koniq", 3)
    livec = livec_root(livec_dir, tmp_path / "livec", 3)
    sweep = _submit(
        "--tools",
        "PIQE",
        "--group",
        "g1",
        "--dataset",
        "koniq",
        "--root",
        str(koniq),
        "--dataset",
        "livec",
        "--root",
        str(livec),
    )
    (vlm,) = _submit("--mode", "vlm", "--dataset", "livec", "--root", str(livec), "--limit", "2")
    every = _listed()
    assert [row["id"] for row in every] == [vlm, *reversed(sweep)]
    newest = every[0]
    assert (
        newest["name"],
        newest["group"],
        newest["dataset"],
        newest["mode"],
        newest["model"],
        newest["status"],
        newest["items"],
    ) == (
        "livec-all-vlm-builtin",
        None,
        "livec/all",
        "vlm",
        "builtin/builtin-v1",
        "done",
        {"done": 2, "failed": 0, "total": 2},
    )
    assert newest["figure"] == {"tool": None, "kind": None, "n": 0}  # 2 items: no correlation
    assert newest["cost_usd"] == 0 and newest["created_at"].startswith("20")
    metric = {row["dataset"]: row for row in every if row["group"] == "g1"}
    assert set(metric) == {"koniq10k/all", "livec/all"}
    for row in metric.values():
        assert (row["model"], row["mode"], row["items"]["total"]) == ("tools/PIQE", "tools", 3)
        assert row["figure"]["kind"] == "correlation" and -1 <= row["figure"]["srcc"] <= 1

    assert {row["id"] for row in _listed("--group", "g1")} == set(sweep)
    assert [row["id"] for row in _listed("--dataset", "LIVE-C")] == [vlm, sweep[1]]
    assert [row["id"] for row in _listed("--model", "builtin")] == [vlm]
    assert {row["id"] for row in _listed("--model", "tools/PIQE")} == set(sweep)
    assert [row["id"] for row in _listed("--limit", "1")] == [vlm]
    assert _listed("--status", "running") == []
    assert len(_listed("--status", "done")) == 3

    text = runner.invoke(app, ["eval", "list"]).stdout.splitlines()
    assert text[0].split()[:4] == ["id", "name", "group", "dataset"]
    assert len(text) == 4 and text[1].startswith(vlm[:8])
    assert "livec-all-vlm-builtin" in text[1] and "2/0/2" in text[1]
    koniq_line = next(line for line in text if "koniq10k-all-tools-PIQE" in line)
    assert "g1" in koniq_line and "3/0/3" in koniq_line and "SRCC" in koniq_line
    refused = runner.invoke(app, ["eval", "list", "--status", "finished"])
    assert refused.exit_code == 2 and "unknown --status 'finished'" in refused.output


def test_models_lists_backends_configured_models_and_prices(results, monkeypatch):
    monkeypatch.setenv("AGENTIC_IQA_PLANNER_BACKEND", "openai")
    monkeypatch.setenv("AGENTIC_IQA_PLANNER_MODEL", "gpt-4o")
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [backend["name"] for backend in document["backends"]] == [
        "builtin",
        "openai",
        "anthropic",
    ]
    roles = {role["role"]: role for role in document["roles"]}
    assert (roles["planner"]["backend"], roles["planner"]["model"]) == ("openai", "gpt-4o")
    assert roles["planner"]["price"]["input"] == 2.5
    assert (roles["executor"]["backend"], roles["executor"]["model"]) == ("builtin", "builtin-v1")
    prices = {row["model"]: row for row in document["prices"]}
    assert prices["gpt-4o"]["output"] == 10.0 and prices["claude-sonnet-4-5"]["input"] == 3.0
    assert document["batch_discount"]["openai"] == pytest.approx(0.5)
    text = runner.invoke(app, ["models"]).stdout
    assert "planner" in text and "openai/gpt-4o" in text and "$2.50" in text
    assert "claude-sonnet-4-5" in text


#: Tables holding a row (or more) per item: a listing that reads them reads every job's items.
PER_ITEM_TABLES = ("job_items", "runs", "step_records", "tool_logs", "vlm_calls")


def _big_job(engine, folder, photo, name: str, items: int) -> str:
    """A job of ``items`` rows (one photo each), stored and not run."""
    import csv

    from agentic_iqa.jobs.spec import JobSpec
    from agentic_iqa.runtime import lifecycle

    manifest = folder / f"{name}.csv"
    with manifest.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos", "id"])
        writer.writerows([str(photo), 20 + index % 70, f"{name}-{index}"] for index in range(items))
    return lifecycle.submit(
        engine, JobSpec.build(manifest=manifest, tools=("PIQE",), check_images=False, name=name)
    )


def _listing_with_statements(engine) -> tuple[list[dict], list[str]]:
    from sqlalchemy import event

    sent: list[str] = []

    def seen(_connection, _cursor, statement, *_args) -> None:
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        listed = _listed()
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    return listed, sent


@pytest.mark.slow
def test_eval_list_reads_no_item_of_jobs_of_ten_thousand_items(tmp_path, results, livec_dir):
    """`eval list` reads each job's row (its counts, its figures stored when it
    ended), never its items, so three 10,000-item jobs list as fast as three of ten; a job that
    ended without stored figures (stored before they were kept) gets them once."""
    from sqlalchemy import text

    from agentic_iqa.db.engine import make_engine

    livec = livec_root(livec_dir, tmp_path / "livec", 5)
    (small,) = _submit("--tools", "PIQE", "--dataset", "livec", "--root", str(livec))
    engine = make_engine(results)
    photo = next(path for path in (livec / "Images").iterdir() if path.is_file())
    cancelled = [_big_job(engine, tmp_path, photo, name, 10_000) for name in ("big-a", "big-b")]
    waiting = _big_job(engine, tmp_path, photo, "big-c", 10_000)
    for job_id in cancelled:
        result = runner.invoke(app, ["eval", "cancel", job_id])
        assert result.exit_code == 0, result.output

    listed, sent = _listing_with_statements(engine)
    assert [row["id"] for row in listed] == [waiting, *reversed(cancelled), small]
    assert [
        statement for statement in sent if any(table in statement for table in PER_ITEM_TABLES)
    ] == []
    by_id = {row["id"]: row for row in listed}
    assert by_id[small]["items"] == {"done": 5, "failed": 0, "total": 5}
    assert by_id[small]["figure"]["kind"] == "correlation" and by_id[small]["figure"]["n"] == 5
    assert by_id[small]["cost_usd"] == 0
    for job_id in cancelled:
        assert (by_id[job_id]["status"], by_id[job_id]["items"]) == (
            "cancelled",
            {"done": 0, "failed": 0, "total": 10_000},
        )
        assert by_id[job_id]["figure"]["kind"] is None
    assert (by_id[waiting]["status"], by_id[waiting]["items"]["total"]) == ("running", 10_000)
    assert by_id[waiting]["figure"] == {"tool": "PIQE", "kind": None, "n": 0}
    assert by_id[waiting]["cost_usd"] is None
    report = json.loads(runner.invoke(app, ["eval", "report", small, "--json"]).stdout)
    (tool,) = report["tools"]
    assert by_id[small]["figure"]["srcc"] == pytest.approx(tool["srcc"])

    with engine.begin() as connection:  # as a job stored before figures were kept
        connection.execute(
            text("UPDATE jobs SET headline_json = NULL WHERE id = :id"), {"id": small}
        )
    again, sent = _listing_with_statements(engine)
    assert again == listed
    assert [statement for statement in sent if "job_items" in statement]  # computed once
    once_more, sent = _listing_with_statements(engine)
    assert once_more == listed
    assert [
        statement for statement in sent if any(table in statement for table in PER_ITEM_TABLES)
    ] == []
