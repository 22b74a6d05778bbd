"""Submitting and ending jobs when the manifest or the job goes wrong: no crash, a clear reason."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import select
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.cli.eval import export_rows
from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.models import JobItem
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.reports.report import build_report
from agentic_iqa.runtime import lifecycle
from tests.agentic_iqa.conftest import write_csv
from tests.conftest import natural_image

runner = CliRunner()


def photo(path: Path, seed: int = 0, size: tuple[int, int] = (96, 72)) -> Path:
    Image.fromarray(natural_image(seed, size=size)).save(path)
    return path


def items(engine, job_id: str) -> dict[str, tuple[int, str, str | None]]:
    with session_scope(engine) as session:
        rows = session.execute(
            select(JobItem.item_key, JobItem.line, JobItem.status, JobItem.error).where(
                JobItem.job_id == job_id
            )
        ).all()
    return {key: (line, status, error) for key, line, status, error in rows}


def test_an_id_equal_to_a_bad_rows_old_key_and_a_bad_rows_id_do_not_break_submit(engine, tmp_path):
    photo(tmp_path / "a.png")
    manifest = write_csv(
        tmp_path / "m.csv",
        ["image", "mos", "id"],
        [
            ["gone.png", "", ""],  # 2: bad, no id (was keyed "line-2")
            ["a.png", "", "line-2"],  # 3: good: crashed submit with an IntegrityError
            ["a.png", "high", "x"],  # 4: bad, gives id x
            ["a.png", "", "x"],  # 5: good: was failed as a duplicate of line 4
        ],
    )
    job_id = lifecycle.submit(engine, JobSpec.build(manifest=manifest))
    found = items(engine, job_id)
    assert set(found) == {"<line 2>", "line-2", "<line 4>", "x"}
    assert found["line-2"][:2] == (3, "pending") and found["x"][:2] == (5, "pending")
    assert found["<line 4>"] == (
        4,
        "failed",
        "line 4 (id 'x'): mos 'high' on line 4 is not a number",
    )
    assert found["<line 2>"][1] == "failed" and "not found" in found["<line 2>"][2]


def unreadable_folder(folder: Path) -> Path:
    folder.mkdir()
    photo(folder / "a_good.png")
    buffer = io.BytesIO()
    Image.fromarray(natural_image(2)).save(buffer, format="JPEG", quality=90)
    (folder / "b_cut.jpg").write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    Image.new("RGB", (1, 1), (40, 40, 40)).save(folder / "c_dot.png")
    return folder


def test_unreadable_images_are_failed_items_with_the_reason(engine, agents, tmp_path):
    folder = unreadable_folder(tmp_path / "photos")
    checked = lifecycle.submit(engine, JobSpec.build(manifest=folder))
    assert lifecycle.progress(engine, checked).counts == {"pending": 1, "failed": 2}

    unchecked = lifecycle.submit(engine, JobSpec.build(manifest=folder, check_images=False))
    lifecycle.run_local(engine, unchecked, agents, workers=1)
    assert lifecycle.progress(engine, unchecked).counts == {"done": 1, "failed": 2}
    _columns, rows = export_rows(engine, unchecked)
    by_id = {row["item_id"]: row for row in rows}
    assert by_id["a_good.png"]["status"] == "done"
    assert by_id["b_cut.jpg"]["final_answer"] is None
    assert "corrupt or truncated image data" in by_id["b_cut.jpg"]["error"]
    assert "is 1x1 pixels; the IQA tools need at least" in by_id["c_dot.png"]["error"]
    report = build_report(list(export_rows(engine, unchecked)[1]), bootstrap=0)
    assert report["counts"]["done"] == 1 and report["failures"]["total"] == 2


@pytest.fixture
def cli_env(tmp_path, monkeypatch) -> str:
    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", url)
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
    monkeypatch.delenv("AGENTIC_IQA_BROKER_URL", raising=False)
    return url


def test_submit_mos_range_fails_rows_outside_it_and_warns_about_negative_mos(tmp_path, cli_env):
    photo(tmp_path / "a.png")
    manifest = write_csv(
        tmp_path / "m.csv",
        ["image", "mos", "id"],
        [["a.png", "50", "mid"], ["a.png", "-5", "below"], ["a.png", "-1", "also-below"]],
    )
    plain = runner.invoke(app, ["eval", "submit", str(manifest), "--no-check-images"])
    assert plain.exit_code == 0, plain.output
    assert "warning: 2 items have a negative MOS" in " ".join(plain.output.split())

    ranged = runner.invoke(app, ["eval", "submit", str(manifest), "--mos-range", "0", "100"])
    assert ranged.exit_code == 0, ranged.output
    assert "negative MOS" not in ranged.output and "(2 bad rows recorded" in ranged.output
    job_id = ranged.stdout.strip().splitlines()[0]
    errors = {key: error for key, (_l, _s, error) in items(make_engine(cli_env), job_id).items()}
    # a bad row is found under the id it gave (no other row has "below")
    assert "mos '-5' on line 3 is outside the declared range 0 to 100" in errors["below"]

    backwards = runner.invoke(app, ["eval", "submit", str(manifest), "--mos-range", "5", "1"])
    assert backwards.exit_code == 1 and "is not a range" in backwards.output


def test_cancelling_a_finished_job_says_so_and_exits_1(tmp_path, cli_env):
    folder = tmp_path / "photos"
    folder.mkdir()
    photo(folder / "a.png")
    submitted = runner.invoke(app, ["eval", "submit", str(folder)])
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.strip().splitlines()[0]
    cancelled = runner.invoke(app, ["eval", "cancel", job_id])
    assert cancelled.exit_code == 1
    assert f"job {job_id} already finished (done); nothing to cancel" in cancelled.output
    status = json.loads(runner.invoke(app, ["eval", "status", job_id, "--json"]).stdout)
    assert status["status"] == "done" and status["counts"] == {"done": 1}


def test_a_job_cancelled_while_the_command_waits_ends_with_exit_1(tmp_path, cli_env):
    folder = tmp_path / "photos"
    folder.mkdir()
    for index in range(12):
        photo(folder / f"{index:02d}.png", seed=index)
    engine = make_engine(cli_env)
    upgrade(cli_env)
    cancelled: list[str] = []

    def cancel_the_job_when_it_appears() -> None:
        deadline = time.monotonic() + 60
        while not cancelled and time.monotonic() < deadline:
            try:
                job_id = lifecycle.progress(engine).job_id
            except Exception:  # no job yet
                time.sleep(0.02)
                continue
            lifecycle.cancel(engine, job_id)
            cancelled.append(job_id)

    canceller = threading.Thread(target=cancel_the_job_when_it_appears)
    canceller.start()
    result = runner.invoke(app, ["eval", "submit", str(folder), "--workers", "1"])
    canceller.join()
    assert cancelled, "the job never appeared"
    assert result.exit_code == 1, result.output
    assert f"job {cancelled[0]} was cancelled" in " ".join(result.output.split())
    counts = lifecycle.progress(engine, cancelled[0]).counts
    assert counts.get("cancelled", 0) > 0 and sum(counts.values()) == 12
