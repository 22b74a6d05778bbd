"""A metric job's items end a chunk at a time: one transaction of a few statements for many runs,
and still exactly what one-at-a-time writing records (fenced, cancelled, counted)."""

from __future__ import annotations

import csv
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import event, select, text

from agentic_iqa.config import PipelineSettings
from agentic_iqa.db import jobs as store
from agentic_iqa.db import steps, upgrade
from agentic_iqa.db.endings import hold_leases
from agentic_iqa.db.engine import dispose_engines, make_engine, read_scope, session_scope
from agentic_iqa.db.models import Job, JobItem, Run, StepRecord, ToolLog
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime import lifecycle
from agentic_iqa.runtime.embedded import (
    begin_new_runs,
    end_deferred,
    first_steps,
    walk_embedded,
)
from agentic_iqa.runtime.lifecycle import chunks
from agentic_iqa.runtime.local import run_local
from agentic_iqa.runtime.service import Deferred
from agentic_iqa.runtime.submission import submit
from tests.agentic_iqa.db.conftest import TABLES
from tests.conftest import natural_image


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path):
    """An engine on a migrated, empty results database, of each dialect."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
        upgrade(url)
        yield make_engine(url)
        dispose_engines(url)
        return
    engine = make_engine(request.getfixturevalue("postgres_url"))
    with engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
    yield engine


def manifest(folder: Path, count: int, *, photos: int = 3) -> Path:
    """``count`` rows over ``photos`` distinct photos (scores cached after each one's first)."""
    for index in range(photos):
        Image.fromarray(natural_image(index, (96, 72))).save(folder / f"p{index}.png")
    path = folder / "rows.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "id"])
        writer.writerows([f"p{index % photos}.png", f"i{index}"] for index in range(count))
    return path


def counting(engine) -> list[str]:
    """Every statement ``engine`` executes from now on (one entry per execute call)."""
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: seen.append(args[2]))
    return seen


def test_chunks_cut_in_order_and_keep_every_run():
    ids = [f"r{index}" for index in range(70)]
    cut = chunks(ids, 32)
    assert [len(part) for part in cut] == [32, 32, 6]
    assert [run_id for part in cut for run_id in part] == ids
    assert chunks([], 32) == [] and chunks(ids[:1], 32) == [["r0"]]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_local_metric_job_ends_its_items_in_chunks_and_records_each_as_alone(
    engine, agents, tmp_path, workers
):
    count = 2 * PipelineSettings().metric_chunk_size + 6
    job_id = submit(engine, JobSpec.build(manifest=manifest(tmp_path, count), tools=["PIQE"]))
    statements = counting(engine)
    run_local(engine, job_id, agents, workers=workers)
    with read_scope(engine) as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == "done" and job.finished_at is not None
        assert (job.items_done, job.items_queued, job.items_pending) == (count, 0, 0)
        items = session.scalars(select(JobItem).where(JobItem.job_id == job_id)).all()
        assert {item.status for item in items} == {"done"}
        assert all(item.finished_at is not None and item.error is None for item in items)
        runs = session.scalars(select(Run).where(Run.job_id == job_id)).all()
        assert len(runs) == count and {run.status for run in runs} == {"succeeded"}
        assert all(run.started_at and run.finished_at and run.lease_until is None for run in runs)
        assert all('"steps_done"' in run.state_json for run in runs)
        records = session.scalars(select(StepRecord)).all()
        assert len(records) == count
        assert {(r.status, r.attempts, r.worker, r.lease_until) for r in records} == {
            ("succeeded", 1, "embedded", None)
        }
        assert all(r.output_json and r.started_at <= r.finished_at for r in records)
        logs = session.scalars(select(ToolLog)).all()
        assert len(logs) == count and {log.tool_name for log in logs} == {"PIQE"}
        assert len({log.run_id for log in logs}) == count
        scores = {run.image_path: set() for run in runs}
        by_run = {run.id: run.image_path for run in runs}
        for log in logs:
            scores[by_run[log.run_id]].add(log.raw_score)
        assert all(len(values) == 1 for values in scores.values())  # one score per photo
    # one at a time, an item cost ten statements; in chunks, a handful for many
    assert len(statements) < 2 * count, len(statements)


def test_a_ctrl_c_stops_the_chunks_in_flight_and_a_resume_ends_the_rest(
    engine, agents, tmp_path, monkeypatch
):
    monkeypatch.setenv("AGENTIC_IQA_METRIC_CHUNK_SIZE", "8")
    count = 64  # a claim of 32 (2 threads, chunks of 8): 4 chunks, 2 of them in flight
    job_id = submit(engine, JobSpec.build(manifest=manifest(tmp_path, count), tools=["PIQE"]))
    ended: list[tuple[int, datetime]] = []

    def interrupt(done: int) -> None:  # the first chunk ends, then Ctrl-C
        ended.append((done, datetime.now(UTC)))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_local(engine, job_id, agents, workers=2, on_progress=interrupt)
    with read_scope(engine) as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == "running"
        assert [done for done, _ in ended] == [8] and 8 <= job.items_done < 32
        done_before = job.items_done
        # No run was begun after the Ctrl-C (one a thread may have been, in the instant
        # before the pool was told): the claimed runs left are not walked while it winds down.
        moment = ended[0][1]
        begun = [
            started if started.tzinfo else started.replace(tzinfo=UTC)
            for started in session.scalars(select(StepRecord.started_at))
        ]
        assert len(begun) == done_before
        assert sum(started > moment for started in begun) <= 2, (begun, moment)
    _, unfinished = lifecycle.resume(engine, job_id)
    run_local(engine, job_id, agents, workers=2, restart=unfinished)
    with read_scope(engine) as session:
        job = session.get(Job, job_id)
        assert job is not None and (job.status, job.items_done) == ("done", count)
        runs = session.scalars(select(Run).where(Run.job_id == job_id)).all()
        assert {run.status for run in runs} == {"succeeded"} and len(runs) == count
        assert len(session.scalars(select(ToolLog)).all()) == count  # none scored twice
    assert done_before < count


def _planner_rows(engine, table: str) -> float | None:
    """The row count the planner believes ``table`` has (None: never analysed)."""
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            rows = connection.execute(
                text("SELECT reltuples FROM pg_class WHERE relname = :t"), {"t": table}
            ).scalar()
            return None if rows is None or rows < 0 else float(rows)
        stats = connection.execute(
            text("SELECT name FROM sqlite_master WHERE name = 'sqlite_stat1'")
        ).scalar()
        if stats is None:
            return None
        row = connection.execute(
            text("SELECT stat FROM sqlite_stat1 WHERE tbl = :t LIMIT 1"), {"t": table}
        ).scalar()
        return None if row is None else float(str(row).split()[0])


def test_a_growing_job_refreshes_the_planners_statistics_of_its_tables(engine, agents, tmp_path):
    from agentic_iqa.db.items import FIRST_STATISTICS_AT, statistics_milestone

    assert [statistics_milestone(n) for n in (0, 999, 1000, 1999, 2000, 4000, 100_000)] == [
        -1, -1, 0, 0, 1, 2, 6,
    ]  # fmt: skip
    before = _planner_rows(engine, "step_records")
    assert before is None or before < FIRST_STATISTICS_AT / 4
    count = FIRST_STATISTICS_AT + 40
    job_id = submit(engine, JobSpec.build(manifest=manifest(tmp_path, count), tools=["PIQE"]))
    run_local(engine, job_id, agents, workers=2)
    # analysed as the job passed 1,000 done items: it then held 1,000 steps and tool calls
    # (PostgreSQL counts them; SQLite estimates from its sample of an index, roughly, and may
    # overshoot: 1,071 of 1,040 was seen)
    exact = engine.dialect.name == "postgresql"
    low, high = FIRST_STATISTICS_AT * (0.9 if exact else 0.25), count * (1.0 if exact else 2.0)
    for table in ("step_records", "tool_logs"):
        rows = _planner_rows(engine, table)
        assert rows is not None and low <= rows <= high, (table, rows)


def test_a_small_claim_is_spread_over_the_threads():
    from agentic_iqa.runtime.local import spread

    assert spread(40, 32, 2) == 20 and spread(128, 32, 2) == 32
    assert spread(3, 32, 4) == 1 and spread(0, 32, 2) == 1 and spread(7, 32, 1) == 7


def _deferred_ends(engine, agents, job_id: str) -> tuple[list[Deferred], list[str]]:
    """Claim the job's runs and walk each one's step, their ends held back, not written."""
    claim = lifecycle.claim_runs(engine, job_id, 10, 30.0)
    firsts = first_steps(
        agents, job_id, claim.runs, config_json=claim.config_json, vlm_cache=claim.vlm_cache
    )
    endings: list[Deferred] = []
    for run in claim.runs:
        walk_embedded(engine, agents, run.run_id, first=firsts.pop(run.run_id), endings=endings)
    return endings, [run.run_id for run in claim.runs]


def test_held_ends_are_written_only_together_and_a_taken_over_one_is_discarded(
    engine, agents, tmp_path
):
    job_id = submit(engine, JobSpec.build(manifest=manifest(tmp_path, 3), tools=["PIQE"]))
    endings, run_ids = _deferred_ends(engine, agents, job_id)
    assert [ending.run_id for ending in endings] == run_ids
    with read_scope(engine) as session:  # nothing written yet: still in flight
        assert session.scalars(select(StepRecord)).all() == []
        assert {item.status for item in session.scalars(select(JobItem)).all()} == {"queued"}
    taken = run_ids[1]
    with session_scope(engine) as session:  # another holder took that run over meanwhile
        steps.first_attempt(session, taken, endings[1].step, 0, worker="elsewhere")
    end_deferred(engine, endings)
    assert endings == []  # emptied: written once
    with read_scope(engine) as session:
        runs = {run.id: run for run in session.scalars(select(Run)).all()}
        items = {item.run_id: item for item in session.scalars(select(JobItem)).all()}
        record = session.scalars(select(StepRecord).where(StepRecord.run_id == taken)).one()
        assert (record.status, record.worker) == ("running", "elsewhere")  # its, untouched
        assert runs[taken].status == "running" and items[taken].status == "queued"
        assert session.scalars(select(ToolLog).where(ToolLog.run_id == taken)).all() == []
        for run_id in set(run_ids) - {taken}:
            assert runs[run_id].status == "succeeded" and items[run_id].status == "done"
        job = session.get(Job, job_id)
        assert job is not None and (job.items_done, job.items_queued) == (2, 1)
        assert job.status == "running"  # one item still open


def test_held_ends_of_a_job_cancelled_meanwhile_end_as_cancelled(engine, agents, tmp_path):
    job_id = submit(engine, JobSpec.build(manifest=manifest(tmp_path, 3), tools=["PIQE"]))
    endings, run_ids = _deferred_ends(engine, agents, job_id)
    with session_scope(engine) as session:
        store.cancel(session, job_id)
    end_deferred(engine, endings)
    with read_scope(engine) as session:
        runs = session.scalars(select(Run)).all()
        assert {run.status for run in runs} == {"failed"}
        assert {run.error for run in runs} == {"cancelled with its job"}
        items = session.scalars(select(JobItem)).all()
        assert {item.status for item in items} == {"cancelled"}
        job = session.get(Job, job_id)
        assert job is not None and job.items_done == 0
        assert job.items_cancelled == len(run_ids)


def test_when_the_chunk_cannot_be_written_together_each_end_is_written_alone(
    engine, agents, tmp_path, caplog
):
    """A run deleted meanwhile (``eval delete`` of its job's run) breaks the chunk's one
    transaction: the others are then written one at a time, the deleted one said lost."""
    job_id = submit(engine, JobSpec.build(manifest=manifest(tmp_path, 3), tools=["PIQE"]))
    endings, run_ids = _deferred_ends(engine, agents, job_id)
    gone = run_ids[0]
    with session_scope(engine) as session:
        session.execute(
            JobItem.__table__.update().where(JobItem.run_id == gone).values(run_id=None)
        )
        session.execute(Run.__table__.delete().where(Run.id == gone))
    end_deferred(engine, endings)
    assert "ending each alone" in caplog.text and gone in caplog.text
    with read_scope(engine) as session:
        runs = {run.id: run.status for run in session.scalars(select(Run)).all()}
        assert runs == {run_id: "succeeded" for run_id in run_ids[1:]}
        assert {r.run_id for r in session.scalars(select(StepRecord)).all()} == set(run_ids[1:])
        job = session.get(Job, job_id)
        assert job is not None and job.items_done == 2


def test_a_chunk_begins_only_new_runs_and_leaves_the_others_to_the_one_at_a_time_path(
    engine, agents, tmp_path
):
    job_id = submit(engine, JobSpec.build(manifest=manifest(tmp_path, 4), tools=["PIQE"]))
    claim = lifecycle.claim_runs(engine, job_id, 10, 30.0)
    fresh, resent, ended = (run.run_id for run in claim.runs[:3])
    with session_scope(engine) as session:
        steps.first_attempt(session, resent, "tool_execution", 0, worker="elsewhere")
        session.execute(Run.__table__.update().where(Run.id == ended).values(status="failed"))
    begun, left = begin_new_runs(engine, agents, [fresh, resent, ended, "no-such-run"])
    assert list(begun) == [fresh] and left == [resent, ended, "no-such-run"]
    first = begun[fresh]
    assert first.step == "tool_execution" and first.iteration == 0
    assert first.begun is not None and not first.begun.recorded and first.begun.job_id == job_id
    with read_scope(engine) as session:  # nothing written by beginning
        assert session.scalars(select(StepRecord.run_id)).all() == [resent]


def test_a_chunks_leases_move_for_its_runs_that_have_not_ended(engine, tmp_path):
    job_id = submit(engine, JobSpec.build(manifest=manifest(tmp_path, 3), tools=["PIQE"]))
    claim = lifecycle.claim_runs(engine, job_id, 10, 1.0)
    live, ended, _other = (run.run_id for run in claim.runs)
    with session_scope(engine) as session:
        session.execute(Run.__table__.update().where(Run.id == ended).values(status="succeeded"))
    with session_scope(engine) as session:
        assert hold_leases(session, [live, ended], 600.0) == 1
    with read_scope(engine) as session:
        leases = {run.id: run.lease_until for run in session.scalars(select(Run)).all()}
    assert leases[live] > leases[_other] + timedelta(seconds=500)
    assert leases[ended] < leases[live] - timedelta(seconds=500)  # ended: left as it was


@pytest.mark.parametrize(("tools", "expected"), [(["PIQE"], "chunks"), (None, "runs")])
def test_a_feeder_sends_a_metric_jobs_runs_in_chunks_and_an_agent_jobs_one_by_one(
    engine, tmp_path, tools, expected
):
    job_id = submit(engine, JobSpec.build(manifest=manifest(tmp_path, 9), tools=tools))
    one: list[str] = []
    many: list[list[str]] = []
    fed = lifecycle.feed(
        engine, job_id, 9, one.append, lease_seconds=30.0, dispatch_chunk=many.append, chunk_size=4
    )
    assert fed == 9
    if expected == "chunks":  # 4 + 4, and the ninth alone (a chunk of one is a plain run)
        assert [len(part) for part in many] == [4, 4] and len(one) == 1
    else:
        assert many == [] and len(one) == 9
    sent = [run_id for part in many for run_id in part] + one
    with read_scope(engine) as session:
        assert sorted(sent) == sorted(session.scalars(select(Run.id)).all())
