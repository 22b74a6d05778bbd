"""The supervisor on a real database: jobs fed without their submitter, quiet runs re-sent once
per lease, lost closings repaired, and a broker that refuses messages costs nothing but time."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sqlalchemy import update

from agentic_iqa.db import Run, dispose_engines, make_engine, session_scope, upgrade
from agentic_iqa.db import jobs as store
from agentic_iqa.db.models import JobItem, utc_now
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime import lifecycle
from agentic_iqa.runtime.supervisor import supervise_once


@pytest.fixture
def engine(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    upgrade(url)
    yield make_engine(url)
    dispose_engines(url)


def _job(engine, folder: Path, count: int) -> str:
    images = folder / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for index in range(count):
        pixels = rng.integers(0, 255, size=(64, 64, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(images / f"img{index:02d}.png")
    return lifecycle.submit(engine, JobSpec.build(manifest=images))


def _expire_all(engine) -> None:
    with session_scope(engine) as session:
        session.execute(update(Run).values(lease_until=utc_now() - timedelta(seconds=1)))


def test_a_job_stored_by_a_submitter_that_died_is_fed_up_to_the_window(engine, tmp_path):
    job_id = _job(engine, tmp_path, 7)  # stored, never handed over: the submitter died
    sent: list[str] = []
    first = supervise_once(engine, window=3, lease_seconds=60, dispatch=sent.append)
    assert first.fed == {job_id: 3} and len(sent) == 3 and not first.resent
    again = supervise_once(engine, window=3, lease_seconds=60, dispatch=sent.append)
    assert again.fed == {job_id: 0} and len(sent) == 3  # the window is full: nothing more
    assert lifecycle.progress(engine, job_id).counts == {"queued": 3, "pending": 4}


def test_local_jobs_are_not_fed_by_workers(engine, tmp_path):
    job_id = _job(engine, tmp_path, 2)
    with session_scope(engine) as session:
        store.set_dispatch(session, job_id, "local")
    tick = supervise_once(engine, window=3, lease_seconds=60, dispatch=lambda _r: None)
    assert tick.fed == {}


def test_runs_whose_lease_passed_are_re_sent_once_and_shown_as_stalled(engine, tmp_path):
    job_id = _job(engine, tmp_path, 2)
    sent: list[str] = []
    supervise_once(engine, window=5, lease_seconds=60, dispatch=sent.append)
    assert lifecycle.progress(engine, job_id).stalled == 0
    _expire_all(engine)  # the messages were lost with the broker
    stalled = lifecycle.progress(engine, job_id)
    assert stalled.stalled == 2 and stalled.eta_seconds is None
    tick = supervise_once(engine, window=5, lease_seconds=60, dispatch=sent.append)
    assert sorted(tick.resent) == sorted(sent[:2]) and len(sent) == 4
    assert supervise_once(engine, window=5, lease_seconds=60, dispatch=sent.append).resent == []
    assert lifecycle.progress(engine, job_id).stalled == 0


def test_a_broker_that_refuses_messages_is_retried_a_lease_later(engine, tmp_path):
    job_id = _job(engine, tmp_path, 2)

    def broker_down(_run_id: str) -> None:
        raise ConnectionRefusedError("Error 111 connecting to redis://:hunter22@127.0.0.1:6390")

    tick = supervise_once(engine, window=5, lease_seconds=60, dispatch=broker_down)
    assert tick.errors and "hunter22" not in " ".join(tick.errors)
    assert lifecycle.progress(engine, job_id).counts == {"queued": 2}  # claimed, not lost
    sent: list[str] = []
    assert supervise_once(engine, window=5, lease_seconds=60, dispatch=sent.append).resent == []
    _expire_all(engine)
    assert len(supervise_once(engine, window=5, lease_seconds=60, dispatch=sent.append).resent) == 2


def test_an_item_whose_run_ended_without_closing_it_is_closed(engine, tmp_path):
    job_id = _job(engine, tmp_path, 1)
    supervise_once(engine, window=5, lease_seconds=60, dispatch=lambda _r: None)
    with session_scope(engine) as session:
        (run_id,) = [item.run_id for item in session.query(JobItem).filter_by(job_id=job_id)]
        # The run failed, but the worker died before the item was closed.
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(status="failed", error="boom", finished_at=utc_now())
        )
    tick = supervise_once(engine, window=5, lease_seconds=60, dispatch=lambda _r: None)
    assert tick.closed == 1
    final = lifecycle.progress(engine, job_id)
    assert final.counts == {"failed": 1} and final.status == "done"


def test_status_shows_stalled_items_instead_of_an_eta(engine, tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from agentic_iqa.cli import app

    job_id = _job(engine, tmp_path, 3)
    supervise_once(engine, window=2, lease_seconds=60, dispatch=lambda _r: None)
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", str(engine.url))
    runner = CliRunner()
    healthy = json.loads(runner.invoke(app, ["eval", "status", job_id, "--json"]).stdout)
    assert healthy["stalled"] == 0
    _expire_all(engine)  # no worker has touched the two runs for a whole lease
    text = runner.invoke(app, ["eval", "status", job_id]).stdout
    assert "2 stalled" in text and "ETA" not in text
    document = json.loads(runner.invoke(app, ["eval", "status", job_id, "--json"]).stdout)
    assert document["stalled"] == 2 and document["eta_seconds"] is None


def test_a_job_whose_last_closings_raced_is_finished_by_the_supervisor(engine, tmp_path):
    from agentic_iqa.db.models import Job

    job_id = _job(engine, tmp_path, 2)
    with session_scope(engine) as session:  # both items done, but nobody saw the job complete
        session.execute(
            update(JobItem)
            .where(JobItem.job_id == job_id)
            .values(status="done", finished_at=utc_now())
        )
    assert lifecycle.progress(engine, job_id).status == "running"
    tick = supervise_once(engine, window=5, lease_seconds=60, dispatch=lambda _r: None)
    assert tick.finished == 1
    with session_scope(engine) as session:
        job = session.get(Job, job_id)
        assert job.status == "done" and job.finished_at is not None
