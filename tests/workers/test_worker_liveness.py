"""Workers as the README starts them: told apart by name, and alive only while connected.

Real ``agentic-iqa worker`` subprocesses on real Redis: two started without ``--name`` on one
host answer a ping under names of their own and record them on the steps of their queues; the
liveness file (``AGENTIC_IQA_WORKER_HEALTH_FILE``) is touched while the broker answers, goes
stale while it is down, and is fresh again once it is back.
"""

from __future__ import annotations

import csv
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy import select

from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.models import StepRecord
from tests.conftest import natural_image
from tests.workers.cluster import Cluster, RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

QUERY = "Rate this image using Slow."
#: The healthcheck docs/deployment.md gives, with its threshold a parameter.
HEALTHCHECK = 'test $(( $(date +%s) - $(stat -c %Y "$F") )) -lt {seconds}'


def photos(folder: Path, count: int) -> Path:
    """A CSV manifest (image, mos) of ``count`` small generated photos."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "manifest.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos"])
        for index in range(count):
            Image.fromarray(natural_image(index, (96, 72))).save(folder / f"p{index}.png")
            writer.writerow([f"p{index}.png", 20 + 10 * index])
    return path


def healthy(path: Path, seconds: int) -> bool:
    """Whether the documented shell healthcheck passes on ``path`` with threshold ``seconds``."""
    check = subprocess.run(
        ["sh", "-c", HEALTHCHECK.format(seconds=seconds)], env={"F": str(path)}, check=False
    )
    return check.returncode == 0


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.2)


def test_workers_of_two_queues_get_names_of_their_own_and_record_them_on_their_steps(
    make_cluster, sqlite_url, tmp_path
):
    upgrade(sqlite_url)
    cluster = make_cluster(sqlite_url, AGENTIC_IQA_TEST_SLOW_SECONDS="0.1")
    # As the README starts them: no --name, one host.
    default = cluster.start("default", "default", cli=True, named=False)
    gpu = cluster.start("gpu", "gpu", cli=True, named=False)
    host = socket.gethostname()
    assert (default, gpu) == (f"default@{host}", f"gpu@{host}")
    answered = {name for reply in cluster.client.control.ping(timeout=2) for name in reply}
    assert answered == {default, gpu}  # two workers in Flower, not one

    result = subprocess.run(
        [sys.executable, "-m", "agentic_iqa", "eval", "submit", str(photos(tmp_path / "p", 2))]
        + ["--query", QUERY, "--wait"],
        env=cluster.env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with session_scope(make_engine(sqlite_url)) as session:
        steps = session.execute(select(StepRecord.step, StepRecord.worker, StepRecord.queue)).all()
    assert {(worker, queue) for step, worker, queue in steps if step == "tool_execution"} == {
        (gpu, "gpu")
    }
    assert {(worker, queue) for step, worker, queue in steps if step != "tool_execution"} == {
        (default, "default")
    }


@pytest.mark.faults
def test_the_liveness_file_is_fresh_only_while_the_broker_answers(
    make_cluster, sqlite_url, tmp_path
):
    upgrade(sqlite_url)
    broker = RedisServer(tmp_path)
    broker.start()
    health = tmp_path / "run" / "worker.alive"
    cluster = Cluster(
        broker.url, sqlite_url, tmp_path, {"AGENTIC_IQA_WORKER_HEALTH_INTERVAL": "0.5"}
    )
    try:
        cluster.start("gpu", "gpu", cli=True, env={"AGENTIC_IQA_WORKER_HEALTH_FILE": str(health)})
        wait_for(health.exists, 10, "the liveness file")
        assert healthy(health, 3)

        broker.kill()
        time.sleep(1.5)  # a beat in flight may still land
        health.unlink(missing_ok=True)
        time.sleep(3)
        assert not health.exists()  # nobody touched it while the broker was down
        assert not healthy(health, 3)  # no file: unhealthy, not an error of the check
        health.touch()
        os.utime(health, (time.time() - 10, time.time() - 10))
        assert not healthy(health, 3)  # what Docker sees: unhealthy

        broker.start()  # same port, empty: the worker reconnects
        wait_for(lambda: healthy(health, 3), 40, "the liveness file fresh again")
    finally:
        cluster.stop()
        broker.stop()


def test_a_worker_that_never_reached_its_broker_writes_no_liveness_file(
    make_cluster, sqlite_url, tmp_path
):
    upgrade(sqlite_url)
    health = tmp_path / "worker.alive"
    cluster = make_cluster(sqlite_url)
    dead = f"redis://127.0.0.1:{RedisServer(tmp_path).port}/0"  # a free port: nothing listens
    env = {
        **cluster.env,
        "AGENTIC_IQA_BROKER_URL": dead,
        "AGENTIC_IQA_WORKER_HEALTH_INTERVAL": "0.5",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "agentic_iqa", "worker", "-Q", "gpu", "--health-file", str(health)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        time.sleep(8)
        assert worker.poll() is None  # still trying to connect, not exited
        assert not health.exists()
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=20)
