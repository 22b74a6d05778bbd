"""``eval compare``'s wall time per item is the time the job's steps were at work,
not its submitted-to-finished span: a job stopped for a while and then resumed is not charged
the wait.

The jobs are metric jobs (PIQE, no weights) run here; one is cancelled after its first items,
left alone for a few seconds, and resumed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import select
from typer.testing import CliRunner

from agentic_iqa.agents.team import metric_agents
from agentic_iqa.cli import app
from agentic_iqa.db import make_engine, upgrade
from agentic_iqa.db.about import busy_seconds
from agentic_iqa.db.engine import read_scope
from agentic_iqa.db.models import Run, StepRecord
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.lifecycle import cancel, resume
from agentic_iqa.runtime.local import run_local
from agentic_iqa.runtime.progress import progress
from agentic_iqa.runtime.submission import submit
from tests.conftest import natural_image

runner = CliRunner()
#: How long the interrupted job waits before it is resumed.
GAP = 3.0


def _manifest(folder: Path, count: int) -> Path:
    folder.mkdir()
    lines = ["image,mos"]
    for index in range(count):
        Image.fromarray(natural_image(index, size=(96, 96))).save(folder / f"p{index}.png")
        lines.append(f"p{index}.png,{index}")
    path = folder / "manifest.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_interrupted_jobs_wait_is_not_wall_time(tmp_path, results, monkeypatch):
    # One item a chunk: the progress hook that stops the job is told as each chunk ends, and
    # the job must still have items left to run when it is stopped.
    monkeypatch.setenv("AGENTIC_IQA_METRIC_CHUNK_SIZE", "1")
    upgrade(results)
    engine = make_engine(results)
    manifest = _manifest(tmp_path / "photos", 8)
    steady = submit(engine, JobSpec.build(manifest=manifest, tools=["PIQE"], name="steady"))
    run_local(engine, steady, metric_agents(), workers=2)
    stopped = submit(engine, JobSpec.build(manifest=manifest, tools=["PIQE"], name="stopped"))

    def stop_early(_ended: int) -> None:  # the first items end, then the job is stopped
        cancel(engine, stopped)

    run_local(engine, stopped, metric_agents(), workers=1, on_progress=stop_early)
    assert 0 < progress(engine, stopped).counts.get("done", 0) < 8
    time.sleep(GAP)
    resume(engine, stopped)
    run_local(engine, stopped, metric_agents(), workers=2)
    final = progress(engine, stopped)
    assert (final.status, final.counts.get("done")) == ("done", 8)
    assert final.elapsed > GAP

    with read_scope(engine) as session:
        busy = busy_seconds(session, stopped)
        spans = [
            (ended - begun).total_seconds()
            for begun, ended in session.execute(
                select(StepRecord.started_at, StepRecord.finished_at)
                .join(Run, Run.id == StepRecord.run_id)
                .where(Run.job_id == stopped)
            )
        ]
    assert busy is not None and max(spans) <= busy <= sum(spans)  # a union of the steps
    assert busy < final.elapsed - GAP  # the wait is not in it

    result = runner.invoke(app, ["eval", "compare", steady, stopped, "--json", "--bootstrap", "0"])
    assert result.exit_code == 0, result.output
    jobs = {job["id"]: job for job in json.loads(result.stdout)["jobs"]}
    assert jobs[stopped]["wall_time_per_item_s"] * 8 == pytest.approx(busy)
    assert jobs[stopped]["wall_time_per_item_s"] < (final.elapsed - GAP) / 8
    report = json.loads(
        runner.invoke(app, ["eval", "report", stopped, "--json", "--bootstrap", "0"]).stdout
    )
    assert report["job"]["busy_seconds"] == busy
