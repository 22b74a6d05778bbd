"""Tool steps in batches on a real tool worker: grouped forward passes, results per item."""

from __future__ import annotations

import json
import time

import pytest
import redis
from PIL import Image
from sqlalchemy import select

from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.models import JobItem, StepRecord, ToolLog
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.progress import wait
from agentic_iqa.runtime.submission import submit
from iqa_tools import ToolSettings
from iqa_tools.images import read_image
from tests.conftest import natural_image
from tests.iqa_tools.test_batches import BATCHER

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_queued_tool_steps_run_as_batches_with_per_item_results(
    make_cluster, broker_url, sqlite_url, tmp_path
):
    folder = tmp_path / "photos"
    folder.mkdir()
    for seed in range(8):
        Image.fromarray(natural_image(seed, (80, 64))).save(folder / f"p{seed}.png")
    (folder / "p9-corrupt.png").write_bytes(b"\x89PNG, but no image")  # failed at submit
    overrides = tmp_path / "batcher.json"
    overrides.write_text(json.dumps({"tools": BATCHER}))
    batch_log = tmp_path / "batches.txt"
    upgrade(sqlite_url)
    engine = make_engine(sqlite_url)
    cluster = make_cluster(
        sqlite_url,
        (overrides,),
        AGENTIC_IQA_TOOL_BATCH_SIZE="4",
        AGENTIC_IQA_TOOL_BATCH_WAIT="0.2",
        AGENTIC_IQA_TEST_BATCH_LOG=str(batch_log),
    )
    cluster.start("default", "default")
    settings = ToolSettings(device="cpu", tool_cache="none", metadata_overrides=[overrides])
    job_id = submit(
        engine, JobSpec.build(manifest=folder, tools=["Batcher"], tool_settings=settings)
    )
    cluster.client.send_task("agentic_iqa.feed_job", args=(job_id,), queue="default")
    # Every item's tool step waits in the queue before a tool worker exists.
    broker = redis.Redis.from_url(broker_url)
    deadline = time.monotonic() + 60
    while broker.llen("gpu") < 8:
        assert time.monotonic() < deadline, "the tool steps were never queued"
        time.sleep(0.2)
    tool_worker = cluster.start("gpu", "gpu")
    final = wait(engine, job_id, poll=0.3, timeout=120)

    assert (final.status, final.counts) == ("done", {"done": 8, "failed": 1})
    sizes = [int(n) for n in batch_log.read_text().split()]
    assert sum(sizes) == 8 and max(sizes) == 4  # eight good images, four per forward pass
    with session_scope(engine) as session:
        scores = dict(
            session.execute(
                select(JobItem.image, ToolLog.raw_score)
                .join(ToolLog, ToolLog.run_id == JobItem.run_id)
                .where(JobItem.job_id == job_id)
            ).all()
        )
        steps = session.execute(select(StepRecord.worker, StepRecord.status)).all()
        failed = session.scalars(select(JobItem.error).where(JobItem.status == "failed")).all()
    assert len(scores) == 8 and len(steps) == 8  # one log row, one step per item: no repeats
    for image, raw in scores.items():
        assert raw == pytest.approx(float(read_image(image).pixels.mean()), rel=1e-5)
    assert {worker for worker, _ in steps} == {tool_worker}
    assert len(failed) == 1 and "p9-corrupt.png" in failed[0]
