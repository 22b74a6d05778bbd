"""A dataset job on real workers: fed in windows, survives losing every worker, resumes once."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select

from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.models import JobItem, Run, StepRecord, ToolLog
from agentic_iqa.jobs import lifecycle
from tests.conftest import livec_manifest

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.data]


def counts(engine, job_id: str) -> dict[str, int]:
    return lifecycle.progress(engine, job_id).counts


def test_killing_every_worker_mid_job_then_resume_finishes_each_item_exactly_once(
        make_cluster, sqlite_url, livec_dir, tmp_path):
    upgrade(sqlite_url)
    engine = make_engine(sqlite_url)
    cluster = make_cluster(sqlite_url, AGENTIC_IQA_JOB_WINDOW="4",
                           AGENTIC_IQA_FEED_INTERVAL="0.5")
    workers = [cluster.start("default", "default"), cluster.start("gpu", "gpu")]
    job_id = lifecycle.submit(engine, livec_manifest(livec_dir, tmp_path / 'manifest.csv', 24))
    cluster.client.send_task("agentic_iqa.feed_job", args=(job_id,), queue="default")

    deadline = time.monotonic() + 120
    while counts(engine, job_id).get("done", 0) < 3:
        assert time.monotonic() < deadline, counts(engine, job_id)
        time.sleep(0.2)
    for hostname in workers:  # every worker dies mid-job
        cluster.kill(hostname)
    stranded = counts(engine, job_id)
    assert stranded.get("pending", 0) > 0 and stranded.get("done", 0) < 24

    cluster.start("default2", "default")
    cluster.start("gpu2", "gpu")
    reopened, unfinished = lifecycle.resume(engine, job_id)
    for run_id in unfinished:
        cluster.client.send_task("agentic_iqa.coordinate", args=(run_id,), queue="default")
    cluster.client.send_task("agentic_iqa.feed_job", args=(job_id,), queue="default")
    final = lifecycle.wait(engine, job_id, poll=0.5, timeout=240)
    assert final.status == "done", final.counts
    assert final.counts == {"done": 24}

    with session_scope(engine) as session:
        runs = session.execute(select(Run.id, Run.status).where(Run.job_id == job_id)).all()
        items = session.execute(select(JobItem.item_key, JobItem.run_id)
                                .where(JobItem.job_id == job_id)).all()
        succeeded_steps = session.execute(
            select(StepRecord.run_id, StepRecord.step, StepRecord.iteration, func.count())
            .where(StepRecord.status == "succeeded")
            .group_by(StepRecord.run_id, StepRecord.step, StepRecord.iteration)).all()
        tool_rows = session.scalar(select(func.count()).select_from(ToolLog))
        tool_calls = session.scalar(select(func.count()).select_from(
            select(ToolLog.run_id, ToolLog.iteration, ToolLog.object_name, ToolLog.distortion)
            .distinct().subquery()))
    assert len(runs) == 24 and {status for _, status in runs} == {"succeeded"}
    assert len({run_id for _, run_id in items}) == 24  # one run per item, none duplicated
    assert all(count == 1 for *_key, count in succeeded_steps)
    assert tool_rows == tool_calls
