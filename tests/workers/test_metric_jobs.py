"""A metric job on real workers: every item's one step runs on the tool (gpu) queue's worker."""

from __future__ import annotations

import pytest
from PIL import Image
from sqlalchemy import select

from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.models import JobItem, Run, StepRecord, ToolLog, VlmCall
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.progress import wait
from agentic_iqa.runtime.submission import submit
from iqa_tools import ToolRegistry, ToolSettings
from tests.conftest import natural_image

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_a_metric_job_completes_on_a_gpu_queue_worker(make_cluster, sqlite_url, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for seed in range(6):
        Image.fromarray(natural_image(seed, (96, 72))).save(folder / f"p{seed}.png")
    upgrade(sqlite_url)
    engine = make_engine(sqlite_url)
    cluster = make_cluster(sqlite_url, AGENTIC_IQA_JOB_WINDOW="3")
    cluster.start("default", "default")
    gpu = cluster.start("gpu", "gpu")
    job_id = submit(engine, JobSpec.build(manifest=folder, tools=["PIQE"]))
    cluster.client.send_task("agentic_iqa.feed_job", args=(job_id,), queue="default")
    final = wait(engine, job_id, poll=0.3, timeout=120)
    assert (final.status, final.counts) == ("done", {"done": 6})

    with session_scope(engine) as session:
        steps = session.execute(
            select(StepRecord.step, StepRecord.queue, StepRecord.worker, StepRecord.status)
            .join(Run, Run.id == StepRecord.run_id)
            .where(Run.job_id == job_id)
        ).all()
        scores = dict(
            session.execute(
                select(JobItem.image, ToolLog.raw_score)
                .join(ToolLog, ToolLog.run_id == JobItem.run_id)
                .where(JobItem.job_id == job_id, ToolLog.tool_name == "PIQE")
            ).all()
        )
        vlm_calls = session.scalars(select(VlmCall.id)).all()
    assert steps == [("tool_execution", "gpu", gpu, "succeeded")] * 6
    assert vlm_calls == []
    here = ToolRegistry(ToolSettings(device="cpu", tool_cache="none"))
    assert scores == {
        image: pytest.approx(here.execute_tool("PIQE", image).raw_score, rel=1e-9)
        for image in scores
    }
    assert len(scores) == 6
