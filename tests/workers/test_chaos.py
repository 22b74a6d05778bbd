"""Faults with nobody at the keyboard: a tool worker SIGKILLed mid-step and the broker killed
and restarted empty, mid-job.  No ``eval resume``, no manual message: the supervisor in the
default-queue worker re-sends what went quiet, and every item still ends done exactly once.

Redis's visibility timeout is left at its production value (an hour), so it is the supervisor,
not Redis handing back an unacknowledged task, that heals these jobs.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import func, select

from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.models import JobItem, Run, StepRecord, ToolLog
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.progress import progress, wait
from agentic_iqa.runtime.submission import submit
from tests.conftest import natural_image, scratch_postgres
from tests.workers.cluster import Cluster, RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.faults]

QUERY = "Rate this image using Slow."
NO_REDIS_HEALING = {
    "AGENTIC_IQA_VISIBILITY_TIMEOUT": "3600",
    "AGENTIC_IQA_JOB_WINDOW": "4",
    "AGENTIC_IQA_TEST_SLOW_SECONDS": "0.6",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, sqlite_url):
    """Each fault on both results databases; PostgreSQL gets a scratch database of its own."""
    if request.param == "sqlite":
        yield sqlite_url
        return
    with scratch_postgres(request.getfixturevalue("postgres_admin_url")) as url:
        yield url


def _images(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        Image.fromarray(natural_image(index, (160, 128))).save(folder / f"img{index:02d}.png")
    return folder


def _wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _assert_each_item_done_exactly_once(engine, job_id: str, count: int) -> None:
    final = wait(engine, job_id, poll=0.5, timeout=180)
    assert final.status == "done" and final.counts == {"done": count}, final
    with session_scope(engine) as session:
        runs = session.execute(select(Run.id, Run.status).where(Run.job_id == job_id)).all()
        item_runs = session.scalars(select(JobItem.run_id).where(JobItem.job_id == job_id)).all()
        steps = session.execute(
            select(StepRecord.run_id, StepRecord.step, StepRecord.iteration, func.count()).group_by(
                StepRecord.run_id, StepRecord.step, StepRecord.iteration
            )
        ).all()
        tool_rows = session.execute(
            select(
                ToolLog.run_id,
                ToolLog.tool_name,
                ToolLog.iteration,
                ToolLog.object_name,
                ToolLog.distortion,
            )
        ).all()
    assert len(runs) == count and {status for _, status in runs} == {"succeeded"}
    assert len(set(item_runs)) == count  # one run per item: nothing was assessed twice
    assert steps and all(n == 1 for *_key, n in steps)
    # Every run called the Slow tool, and no call was logged twice.
    assert {row[0] for row in tool_rows} == {run for run, _ in runs}
    assert len({(row[0], *row[2:]) for row in tool_rows}) == len(tool_rows)
    assert {row[1] for row in tool_rows} == {"Slow"}


def test_tool_worker_sigkilled_mid_step_heals_without_resume(make_cluster, database_url, tmp_path):
    upgrade(database_url)
    engine = make_engine(database_url)
    cluster = make_cluster(database_url, **NO_REDIS_HEALING)
    cluster.start("default", "default")
    doomed = cluster.start("gpu", "gpu")
    job_id = submit(engine, JobSpec.build(manifest=_images(tmp_path / "images", 8), query=QUERY))
    # Nothing is sent by hand: the supervisor finds the stored job and feeds it.

    def tool_step_running() -> bool:
        with session_scope(engine) as session:
            return bool(
                session.scalar(
                    select(func.count())
                    .select_from(StepRecord)
                    .where(StepRecord.step == "tool_execution", StepRecord.status == "running")
                )
            )

    _wait_until(tool_step_running, 60, "a tool step to start")
    time.sleep(0.2)
    cluster.kill(doomed)
    cluster.start("gpu2", "gpu")
    _assert_each_item_done_exactly_once(engine, job_id, 8)
    with session_scope(engine) as session:
        taken_over = session.scalars(
            select(StepRecord).where(StepRecord.step == "tool_execution", StepRecord.attempts > 1)
        ).all()
        resent = session.scalar(select(func.sum(Run.resends)).where(Run.job_id == job_id))
    assert len(taken_over) == 1 and taken_over[0].worker.startswith("gpu2-")
    assert resent >= 1


def test_a_frozen_worker_woken_after_its_step_was_taken_over_changes_nothing(
    make_cluster, database_url, tmp_path
):
    """SIGSTOP a tool worker mid-step for longer than the lease; the other one takes the step
    over and the job finishes; SIGCONT: the woken attempt's outcome is refused (fencing): the
    run's state, end time, lease, step record and tool logs are as the new owner left them."""
    upgrade(database_url)
    engine = make_engine(database_url)
    cluster = make_cluster(
        database_url, **{**NO_REDIS_HEALING, "AGENTIC_IQA_TEST_SLOW_SECONDS": "2.5"}
    )
    cluster.start("default", "default")
    frozen = cluster.start("gpu", "gpu")
    job_id = submit(engine, JobSpec.build(manifest=_images(tmp_path / "images", 4), query=QUERY))

    def running_on_frozen() -> str | None:
        with session_scope(engine) as session:
            return session.scalar(
                select(StepRecord.run_id).where(
                    StepRecord.step == "tool_execution",
                    StepRecord.status == "running",
                    StepRecord.worker == frozen,
                )
            )

    _wait_until(running_on_frozen, 60, "a tool step to start on the worker to freeze")
    victim = running_on_frozen()
    cluster.freeze(frozen)
    cluster.start("gpu2", "gpu")
    try:
        _assert_each_item_done_exactly_once(engine, job_id, 4)

        def snapshot() -> tuple:
            with session_scope(engine) as session:
                run = session.get(Run, victim)
                step = session.scalars(
                    select(StepRecord).where(
                        StepRecord.run_id == victim, StepRecord.step == "tool_execution"
                    )
                ).one()
                logs = session.scalar(
                    select(func.count()).select_from(ToolLog).where(ToolLog.run_id == victim)
                )
                return (
                    run.state_json,
                    run.finished_at,
                    run.lease_until,
                    run.status,
                    run.final_answer,
                    step.attempts,
                    step.status,
                    step.worker,
                    step.output_json,
                    logs,
                )

        before = snapshot()
        assert before[5] >= 2 and before[7].startswith("gpu2-")  # taken over, by the other
    finally:
        cluster.thaw(frozen)
    # The woken attempt finishes its slow tool (2.5 s) and tries to write: refused.
    log = next(cluster.logs.glob("gpu-*.log"))
    _wait_until(
        lambda: "is stale" in log.read_text(errors="replace"),
        30,
        "the woken worker to find its attempt stale",
    )
    time.sleep(1.0)
    assert snapshot() == before
    assert progress(engine, job_id).counts == {"done": 4}


def test_broker_killed_and_restarted_empty_mid_job_heals_without_resume(
    tmp_path, database_url, tool_overrides, redis_url
):
    import json

    broker = RedisServer(tmp_path)
    broker.start()
    cluster = Cluster(
        broker.url,
        database_url,
        tmp_path,
        {"AGENTIC_IQA_METADATA_OVERRIDES": json.dumps([str(tool_overrides)]), **NO_REDIS_HEALING},
    )
    try:
        upgrade(database_url)
        engine = make_engine(database_url)
        cluster.start("default", "default")
        cluster.start("gpu", "gpu")
        job_id = submit(
            engine, JobSpec.build(manifest=_images(tmp_path / "images", 12), query=QUERY)
        )
        _wait_until(
            lambda: progress(engine, job_id).counts.get("done", 0) >= 2,
            90,
            "the first items",
        )
        broker.kill()  # every queued and unacknowledged message is gone
        time.sleep(1.0)
        broker.start()
        lost = progress(engine, job_id)
        assert lost.counts.get("done", 0) < 12
        _assert_each_item_done_exactly_once(engine, job_id, 12)
        with session_scope(engine) as session:  # healed by re-sending what the broker lost
            assert session.scalar(select(func.sum(Run.resends)).where(Run.job_id == job_id))
    finally:
        cluster.stop()
        broker.stop()


def _set_read_only(admin_url: str, url: str, on: bool) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = make_url(url).database
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(
                text(
                    f'ALTER DATABASE "{name}" SET default_transaction_read_only '
                    f"= {'on' if on else 'off'}"
                )
            )
            connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            )
    finally:
        admin.dispose()


def test_a_database_read_only_for_seconds_mid_job_heals_without_resume(
    make_cluster, postgres_admin_url, tmp_path
):
    """A failover's read-only standby (PostgreSQL raises InternalError, not OperationalError):
    the steps that met it are retried, taking over their own attempts at once; every item
    ends done exactly once."""
    with scratch_postgres(postgres_admin_url) as url:
        upgrade(url)
        engine = make_engine(url)
        cluster = make_cluster(url, **NO_REDIS_HEALING)
        cluster.start("default", "default")
        cluster.start("gpu", "gpu")
        job_id = submit(
            engine, JobSpec.build(manifest=_images(tmp_path / "images", 8), query=QUERY)
        )
        _wait_until(
            lambda: progress(engine, job_id).counts.get("done", 0) >= 2,
            90,
            "two items to finish",
        )
        _set_read_only(postgres_admin_url, url, True)
        time.sleep(3.0)
        _set_read_only(postgres_admin_url, url, False)
        _assert_each_item_done_exactly_once(engine, job_id, 8)
        logs = "".join(path.read_text(errors="replace") for path in cluster.logs.glob("*.log"))
        assert "read-only transaction" in logs  # the fault did hit the workers
