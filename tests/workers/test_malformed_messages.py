"""Garbage on a queue never stops a worker; a worker that does stop on an error exits non-zero.

Real ``agentic-iqa worker`` subprocesses on real Redis: entries that are not messages are pushed
raw onto the queues they consume (as ``redis-cli lpush`` would), then a real job is submitted
and must finish on the same worker, which must still be running; the entries are logged one
line each and kept on ``<queue>.dead``.  A queue key of the wrong type (a Redis string where a
list belongs) is an error no worker can go past: it must stop with a non-zero exit code, so a
restart-on-failure policy brings it back.
"""

from __future__ import annotations

import base64
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from PIL import Image

from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine
from agentic_iqa.runtime.progress import progress
from tests.conftest import REPO, natural_image
from workers.broker import DEAD_KEEP, dead_letters, message_problem, transport_for

pytestmark = [pytest.mark.redis, pytest.mark.slow]

QUERY = "Rate this image using Slow."

ROUTE = {"exchange": "", "routing_key": "default"}

#: (what it is, the raw entry): every form that used to stop a worker or that could.
GARBAGE = [
    ("not JSON", "not json"),
    ("a JSON list", "[]"),
    ("an empty object", "{}"),
    ("a JSON string", '"x"'),
    ("a JSON number", "123"),
    ("no headers, no body", json.dumps({"properties": {"delivery_tag": "t"}})),
    (
        "no headers",
        json.dumps({"properties": {"delivery_tag": "t", "delivery_info": {}}, "body": "e30="}),
    ),
    ("no delivery_info", json.dumps({"properties": {"delivery_tag": "t"}, "headers": {}})),
    (
        "a task name that is a list",
        json.dumps(
            {
                "properties": {"delivery_tag": "t", "delivery_info": ROUTE},
                "headers": {"task": ["x"]},
                "body": "",
            }
        ),
    ),
    (
        "a body that is not base64",
        json.dumps(
            {
                "properties": {
                    "delivery_tag": "t",
                    "delivery_info": {"exchange": "", "routing_key": "default"},
                    "body_encoding": "base64",
                },
                "headers": {"task": "agentic_iqa.coordinate"},
                "body": "!!! not base64 !!!",
                "content-type": "application/json",
                "content-encoding": "utf-8",
            }
        ),
    ),
    ("kombu's type hook refuses it", '{"__type__": "datetime", "__value__": "nope"}'),
    ("huge and not JSON", "x" * 3_000_000),
]


def manifest_of(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "manifest.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos"])
        for index in range(count):
            Image.fromarray(natural_image(index, (96, 72))).save(folder / f"p{index}.png")
            writer.writerow([f"p{index}.png", 20 + 10 * index])
    return path


def test_every_malformed_entry_is_dead_lettered_and_the_worker_runs_the_next_job(
    make_cluster, sqlite_url, broker_url, tmp_path
):
    upgrade(sqlite_url)
    cluster = make_cluster(sqlite_url, AGENTIC_IQA_TEST_SLOW_SECONDS="0.05")
    worker = cluster.start("both", "default,gpu", cli=True)
    broker = redis.Redis.from_url(broker_url)
    for queue in ("default", "gpu"):
        for _what, raw in GARBAGE:
            broker.lpush(queue, raw)

    manifest = manifest_of(tmp_path / "photos", 2)
    result = subprocess.run(
        [sys.executable, "-m", "agentic_iqa", "eval", "submit", str(manifest), "-q", QUERY]
        + ["--wait"],
        env=cluster.env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    engine = make_engine(sqlite_url)
    (job,) = [progress(engine, job_id) for job_id in _job_ids(engine)]
    assert (job.status, job.counts) == ("done", {"done": 2})
    assert cluster.processes[worker].poll() is None  # still running

    # Each entry kept whole (what decodes at all), on its queue's dead-letter list, in order.
    for queue in ("default", "gpu"):
        kept = [entry.decode() for entry in broker.lrange(dead_letters(queue), 0, -1)][::-1]
        expected = [raw for what, raw in GARBAGE if what != "kombu's type hook refuses it"]
        assert [json.loads(k) if k.startswith(("{", "[")) else k for k in kept[:-1]] == [
            json.loads(r) if r.startswith(("{", "[")) else r for r in expected[:-1]
        ]
        assert kept[-1] == "x" * (1 << 20)  # the huge one cut at a megabyte
    assert broker.llen("default") == 0 and broker.llen("gpu") == 0

    log = "".join(path.read_text(errors="replace") for path in tmp_path.glob("both-*.log"))
    lines = [line for line in log.splitlines() if "dropped a malformed entry" in line]
    assert len(lines) == 2 * len(GARBAGE)
    assert all(len(line) < 400 for line in lines)  # one short line, not the entry
    assert "Unrecoverable error" not in log


def _job_ids(engine) -> list[str]:
    from sqlalchemy import select

    from agentic_iqa.db.engine import session_scope
    from agentic_iqa.db.models import Job

    with session_scope(engine) as session:
        return list(session.scalars(select(Job.id)).all())


def test_a_worker_stopped_by_an_unrecoverable_error_exits_non_zero(
    make_cluster, sqlite_url, broker_url, tmp_path
):
    """A queue key that is a string, not a list: Celery's "Unrecoverable error", then exit 1."""
    upgrade(sqlite_url)
    cluster = make_cluster(sqlite_url)
    redis.Redis.from_url(broker_url).set("default", "a string, not a list")
    result = subprocess.run(
        [sys.executable, "-m", "agentic_iqa", "worker", "--queues", "default", "--pool", "solo"],
        env=cluster.env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Unrecoverable error" in result.stdout + result.stderr
    assert result.returncode == 1


def test_the_shapes_that_are_messages_pass_and_every_other_is_named():
    good = {
        "properties": {"delivery_tag": "t", "delivery_info": ROUTE, "body_encoding": "base64"},
        "headers": {"task": "x"},
        "body": base64.b64encode(b"[[], {}, {}]").decode(),
        "content-type": "application/json",
        "content-encoding": "utf-8",
    }
    assert message_problem(good) is None
    for broken, reason in [
        ({**good, "headers": None}, "headers"),
        ({**good, "body": 3}, "body"),
        ({**good, "properties": {"delivery_info": ROUTE}}, "delivery_tag"),
        ({**good, "properties": {"delivery_tag": ["t"], "delivery_info": ROUTE}}, "delivery_tag"),
        ({**good, "properties": {"delivery_tag": "t", "delivery_info": {}}}, "routing_key"),
        ({**good, "headers": {"task": 3}}, "headers.task"),
        ({**good, "properties": {**good["properties"], "delivery_info": []}}, "delivery_info"),
        ({**good, "properties": {**good["properties"], "body_encoding": "rot13"}}, "rot13"),
        ({**good, "content-type": 5}, "content-type"),
        ([good], "list"),
    ]:
        assert reason in (message_problem(broken) or "")
    assert DEAD_KEEP > 0


@pytest.mark.parametrize(
    ("url", "guarded"),
    [
        ("redis://h:6379/0", True),
        ("rediss://h:6380/0?ssl_cert_reqs=required", False),  # kombu's TLS defaults kept
        ("sentinel://h:26379", False),
        ("memory://", False),
    ],
)
def test_only_redis_brokers_get_the_guarded_transport(url, guarded):
    assert (transport_for(url) is not None) is guarded
