"""A job whose tool queue has no worker is named by ``eval status``, ``eval list`` and the log.

Real ``agentic-iqa`` workers and commands on real Redis: the default queue's worker feeds the
job and sends its tool steps to ``gpu``, which nobody consumes (never started, or SIGKILLed);
every place a person looks names the queue, how many wait and since when.  Once a tool worker
starts, the line goes and the job finishes, each item once.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from PIL import Image
from sqlalchemy import select

from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.models import Job, JobItem, StepRecord
from agentic_iqa.runtime.consumers import UNCONSUMED
from agentic_iqa.runtime.progress import progress
from tests.conftest import natural_image
from tests.workers.cluster import Cluster

pytestmark = [pytest.mark.redis, pytest.mark.slow]

QUERY = "Rate this image using Slow."
#: Fast beats, so a killed worker's announcement lapses (three beats) within a second or two.
FAST = {"AGENTIC_IQA_WORKER_HEALTH_INTERVAL": "0.5", "AGENTIC_IQA_JOB_WINDOW": "4"}


def photos(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "manifest.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos"])
        for index in range(count):
            Image.fromarray(natural_image(index, (96, 72))).save(folder / f"p{index}.png")
            writer.writerow([f"p{index}.png", 20 + 10 * index])
    return path


def cli(cluster: Cluster, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "agentic_iqa", *args],
        env=env or cluster.env,
        cwd=cluster.logs,
        capture_output=True,
        text=True,
        timeout=120,
    )


def status(cluster: Cluster) -> dict[str, Any]:
    result = cli(cluster, "eval", "status", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout))


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.3)
    return value


def supervisor_lines(cluster: Cluster, text: str) -> list[str]:
    return [
        line
        for log in cluster.logs.glob("default-*.log")
        for line in log.read_text(errors="replace").splitlines()
        if text in line
    ]


def submit(cluster: Cluster, tmp_path: Path, count: int) -> str:
    result = cli(cluster, "eval", "submit", str(photos(tmp_path / "p", count)), "--query", QUERY)
    assert result.returncode == 0, result.stderr[-3000:]
    with session_scope(make_engine(cluster.database_url)) as session:
        (job_id,) = session.scalars(select(Job.id)).all()
    return job_id


def tool_steps_running(engine: Any) -> int:
    with session_scope(engine) as session:
        return len(
            session.scalars(
                select(StepRecord.run_id).where(
                    StepRecord.step == "tool_execution", StepRecord.status == "running"
                )
            ).all()
        )


def assert_named(cluster: Cluster, job_id: str, started: datetime) -> None:
    """``eval status`` (JSON and text), ``eval list`` and the supervisor's log name ``gpu``."""
    document = wait_for(
        lambda: (doc := status(cluster))["unconsumed_queues"] and doc, 180, "gpu to be named"
    )
    assert document["job_id"] == job_id and document["status"] == "running"
    (queue,) = document["unconsumed_queues"]
    since = datetime.fromisoformat(queue["since"])
    assert queue["queue"] == "gpu" and queue["waiting"] >= 1
    assert started - timedelta(seconds=2) <= since <= datetime.now(UTC)

    text = cli(cluster, "eval", "status")
    assert text.returncode == 0
    line = next(line for line in text.stdout.splitlines() if "queue 'gpu'" in line)
    assert "message(s) waiting and no worker consuming it since" in line
    assert since.strftime("%Y-%m-%d %H:%M:%S UTC") in line
    assert "agentic-iqa worker --queues gpu" in line

    for args in (("eval", "list"), ("eval", "list", "--json")):
        listed = cli(cluster, *args)
        assert listed.returncode == 0 and "queue 'gpu'" in listed.stderr, listed.stderr
        assert "queue 'gpu'" not in listed.stdout
    assert json.loads(cli(cluster, "eval", "list", "--json").stdout)[0]["id"] == job_id

    wait_for(
        lambda: supervisor_lines(cluster, "supervisor: queue 'gpu': "), 30, "the supervisor's line"
    )


def assert_finishes_once(cluster: Cluster, job_id: str, count: int) -> None:
    engine = make_engine(cluster.database_url)
    wait_for(lambda: progress(engine, job_id).status == "done", 120, "the job to finish")
    with session_scope(engine) as session:
        statuses = session.scalars(select(JobItem.status).where(JobItem.job_id == job_id)).all()
        tools = session.scalars(
            select(StepRecord.run_id).where(
                StepRecord.step == "tool_execution", StepRecord.status == "succeeded"
            )
        ).all()
    assert statuses == ["done"] * count
    assert len(tools) == len(set(tools)) == count
    assert status(cluster)["unconsumed_queues"] == []
    assert redis.Redis.from_url(cluster.broker_url).hget(UNCONSUMED, "gpu") is None
    wait_for(
        lambda: supervisor_lines(cluster, "supervisor: queue 'gpu' has a consumer again"),
        30,
        "the supervisor to say gpu is served again",
    )


def test_a_tool_queue_nobody_consumes_is_named_until_a_worker_starts(
    make_cluster, sqlite_url, tmp_path
):
    upgrade(sqlite_url)
    cluster = make_cluster(sqlite_url, AGENTIC_IQA_TEST_SLOW_SECONDS="0.1", **FAST)
    cluster.start("default", "default", cli=True)
    started = datetime.now(UTC)
    job_id = submit(cluster, tmp_path, 3)
    assert_named(cluster, job_id, started)

    cluster.start("gpu", "gpu", cli=True)
    assert_finishes_once(cluster, job_id, 3)


@pytest.mark.faults
def test_a_sigkilled_tool_worker_leaves_its_queue_named_while_it_is_gone(
    make_cluster, sqlite_url, tmp_path
):
    upgrade(sqlite_url)
    cluster = make_cluster(sqlite_url, AGENTIC_IQA_TEST_SLOW_SECONDS="1.0", **FAST)
    cluster.start("default", "default", cli=True)
    gpu = cluster.start("gpu", "gpu", cli=True)
    job_id = submit(cluster, tmp_path, 4)
    engine = make_engine(sqlite_url)
    wait_for(lambda: tool_steps_running(engine), 60, "tool steps running on gpu")
    assert status(cluster)["unconsumed_queues"] == []  # served: nothing said
    killed = datetime.now(UTC)
    cluster.kill(gpu)
    # Its runs go quiet, the supervisor re-sends them to gpu after a lease (3 s), and the
    # worker's announcement lapses after three beats: gpu is named.
    assert_named(cluster, job_id, killed)

    cluster.start("gpu", "gpu", cli=True)
    assert_finishes_once(cluster, job_id, 4)


def test_nothing_is_said_about_queues_in_embedded_mode(make_cluster, sqlite_url, tmp_path):
    """No broker configured: a running job's status names no queue and asks no broker."""
    upgrade(sqlite_url)
    cluster = make_cluster(sqlite_url)
    job_id = submit(cluster, tmp_path, 1)  # stored for workers that never come
    embedded = {k: v for k, v in cluster.env.items() if k != "AGENTIC_IQA_BROKER_URL"}
    result = cli(cluster, "eval", "status", "--json", env=embedded)
    assert result.returncode == 0, result.stderr[-2000:]
    document = json.loads(result.stdout)
    assert document["job_id"] == job_id and document["unconsumed_queues"] == []
    text = cli(cluster, "eval", "status", env=embedded)
    listed = cli(cluster, "eval", "list", env=embedded)
    assert "queue" not in text.stdout + text.stderr + listed.stderr
