"""A deployment that shares no disk: a submitter, a coordination worker and a tool worker, each
a process with its own working directory, ``HOME`` and caches, meeting only through Redis, a
PostgreSQL results database reached by URL, and an S3 bucket (a local moto server).

The images exist only in the bucket; the manifest only in the submitter's folder; reports and
exports land where the submitter asks.  A counting S3 front between every process and moto,
which answers 1 request in 10 with ``503 SlowDown``, shows each object downloaded once per
worker and no item lost, and the scores match the same jobs run here on the same images as
local files: a 200-item metric job (the one ``benchmarks/object_store.py`` times) and an agent
job on its first 6 rows.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy import select

from agentic_iqa.jobs.spec import JobSpec
from tests.conftest import REPO, scratch_postgres
from tests.workers.cluster import Cluster

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")

from tests.iqa_tools.storage.servers import Front, front_handler  # noqa: E402

pytestmark = [pytest.mark.redis, pytest.mark.slow]

COUNT = 200
AGENT_COUNT = 6
PREFIX = "photos"


def _photos() -> dict[str, bytes]:
    """``COUNT`` distinct small PNGs: crops and flips of the example photos (512x384)."""
    photos = {}
    sources = [
        Image.open(REPO / "examples" / name).convert("RGB")
        for name in ("i03_blurred.png", "i03_reference.png")
    ]
    for index in range(COUNT):
        source, step = sources[index % 2], index // 2
        left, top = 16 * (step % 22), 12 * (step // 22)
        image = source.crop((left, top, left + 160, top + 120))
        if index % 3 == 2:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        photos[f"p{index:03d}.png"] = buffer.getvalue()
    return photos


@dataclass
class Throttling(Front):
    """A front that answers every 10th request with ``503 SlowDown``, as a busy bucket does."""

    requests: int = 0
    throttled: int = 0

    def take_fault(self) -> tuple[int, str] | str | None:
        with self.lock:
            self.requests += 1
            if self.requests % 10:
                return None
            self.throttled += 1
        return (503, "SlowDown")


@pytest.fixture
def front(moto_url: str) -> Iterator[Front]:
    """The S3 endpoint every process of the deployment talks to: counts requests, throttles
    1 in 10, passes the rest on to moto."""
    state = Throttling(upstream=moto_url)
    server = ThreadingHTTPServer(("127.0.0.1", 0), front_handler(state))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def _host(folder: Path, s3: dict[str, str]) -> dict[str, str]:
    """The environment of a machine of its own: its home, its caches, the S3 credentials."""
    for sub in ("home", "cache"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {
        "HOME": str(folder / "home"),
        "XDG_CACHE_HOME": str(folder / "cache"),
        "AGENTIC_IQA_OBJECT_CACHE": str(folder / "cache" / "objects"),
        **s3,
    }


def _cached_objects(folder: Path) -> list[Path]:
    """The objects a host keeps (not its note of each object's latest version)."""
    return [
        path
        for path in (folder / "cache" / "objects").glob("*/*")
        if not path.name.startswith(".tmp-") and path.suffix != ".latest"
    ]


def _rows(engine: Any, job_id: str) -> dict[str, tuple[str, dict, str | None, float | None]]:
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.db.exports import export_rows

    with read_scope(engine) as session:
        return {
            Path(row["image"]).name: (
                row["status"],
                row["raw_scores"],
                row["final_answer"],
                row["quality_score"],
            )
            for row in export_rows(session, job_id)
        }


def _local_jobs(folder: Path, manifest: Path) -> tuple[dict, dict]:
    """The same two jobs on the same images as local files, run in this process."""
    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.db import upgrade
    from agentic_iqa.db.engine import make_engine
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit

    url = f"sqlite:///{folder / 'local.sqlite3'}"
    upgrade(url)
    engine = make_engine(url)
    metric = submit(engine, JobSpec.build(manifest=manifest, tools=["PIQE"], image_dir=folder))
    agent = submit(engine, JobSpec.build(manifest=manifest, image_dir=folder, limit=AGENT_COUNT))
    for job in (metric, agent):
        run_local(engine, job, AgentsCache(), workers=1)
    return _rows(engine, metric), _rows(engine, agent)


def test_a_submitter_and_workers_sharing_no_disk_run_jobs_from_a_bucket(
    broker_url: str,
    postgres_admin_url: str,
    front: Front,
    moto_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentic_iqa.db import upgrade
    from agentic_iqa.db.engine import make_engine, session_scope
    from agentic_iqa.db.models import Job

    photos = _photos()
    bucket = f"photos-{uuid.uuid4().hex[:10]}"
    s3 = {
        "AWS_ENDPOINT_URL": front.url,
        "AWS_ACCESS_KEY_ID": "dummy-key-id",
        "AWS_SECRET_ACCESS_KEY": "dummy-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    client = boto3.client(
        "s3",
        endpoint_url=moto_url,
        region_name="us-east-1",
        aws_access_key_id="dummy-key-id",
        aws_secret_access_key="dummy-secret",
    )
    client.create_bucket(Bucket=bucket)
    for name, data in photos.items():
        client.put_object(Bucket=bucket, Key=f"{PREFIX}/{name}", Body=data)

    hosts = {name: tmp_path / name for name in ("submitter", "coordinator", "tools")}
    manifest = hosts["submitter"] / "manifest.csv"
    hosts["submitter"].mkdir()
    with manifest.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos"])
        writer.writerows([name, 10 + 7 * index] for index, name in enumerate(photos))

    environment = {name: _host(folder, s3) for name, folder in hosts.items()}
    for variable in (
        "AGENTIC_IQA_VLM_BACKEND",
        "AGENTIC_IQA_VLM_MODEL",
        "AGENTIC_IQA_VLM_BASE_URL",
        "AGENTIC_IQA_METADATA_OVERRIDES",
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL_S3",
        "AWS_SESSION_TOKEN",
    ):
        monkeypatch.delenv(variable, raising=False)
    with scratch_postgres(postgres_admin_url) as database_url:
        upgrade(database_url)
        engine = make_engine(database_url)
        (tmp_path / "logs").mkdir()
        cluster = Cluster(broker_url, database_url, tmp_path / "logs")
        try:
            cluster.start(
                "default", "default", cwd=hosts["coordinator"], env=environment["coordinator"]
            )
            cluster.start("gpu", "gpu", cwd=hosts["tools"], env=environment["tools"])

            def cli(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    [sys.executable, "-m", "agentic_iqa", *args],
                    cwd=hosts["submitter"],
                    env={**cluster.env, **environment["submitter"]},
                    capture_output=True,
                    text=True,
                    timeout=300,
                )

            source = f"s3://{bucket}/{PREFIX}"
            jobs = {}
            for kind, extra in (
                ("metric", ("--tools", "PIQE")),
                ("agent", ("--limit", str(AGENT_COUNT))),
            ):
                done = cli(
                    "eval",
                    "submit",
                    "manifest.csv",
                    "--image-dir",
                    source,
                    "--name",
                    kind,
                    "--wait",
                    *extra,
                )
                assert done.returncode == 0, done.stderr[-3000:]
                with session_scope(engine) as session:
                    jobs[kind] = session.scalars(select(Job.id).where(Job.name == kind)).one()
            report = cli("eval", "report", jobs["metric"], "--json")
            assert report.returncode == 0, report.stderr[-3000:]
            exported = cli("eval", "export", jobs["metric"], "-o", "out/metric.csv")
            assert exported.returncode == 0, exported.stderr[-3000:]
            html = cli("eval", "report", jobs["agent"], "--html", "out/agent.html")
            assert html.returncode == 0, html.stderr[-3000:]
        finally:
            cluster.stop()

        on_store = {kind: _rows(engine, job) for kind, job in jobs.items()}
        engine.dispose()

    # Every item done, with the scores and answers of the same jobs on local files.
    local_folder = tmp_path / "local"
    local_folder.mkdir()
    for name, data in photos.items():
        (local_folder / name).write_bytes(data)
    metric_local, agent_local = _local_jobs(local_folder, manifest)
    for kind, local in (("metric", metric_local), ("agent", agent_local)):
        rows = on_store[kind]
        assert set(rows) == set(list(photos)[: COUNT if kind == "metric" else AGENT_COUNT])
        assert {status for status, *_ in rows.values()} == {"done"}, rows
        assert rows == local, kind  # to the last digit
    assert all(set(raw) == {"PIQE"} for _, raw, _, _ in on_store["metric"].values())
    assert json.loads(report.stdout)  # a report of the metric job, on the submitter's screen

    # Each object downloaded once per worker that read it: one cache entry per object in the
    # tool worker's own cache, and GETs to the store equal to the cache entries everywhere.
    # (A GET answered "304 Not Modified" downloads nothing: a worker asking whether its copy
    # is still current.)
    gets = Counter({path: n for path, n in front.bodies.items() if n})
    keys = {f"/{bucket}/{PREFIX}/{name}" for name in photos}
    assert set(gets) == keys, gets
    cached = {name: len(_cached_objects(folder)) for name, folder in hosts.items()}
    assert cached["tools"] == COUNT
    # The submitter and the coordination worker may read the objects too (a check of the
    # images at submit, the VLM's view of the agent job's): then each once as well.  Never the
    # metric job's on the coordination worker: only the tool worker needs those bytes.
    assert cached["coordinator"] in (0, AGENT_COUNT), cached
    assert cached["submitter"] in (0, COUNT), cached
    assert sum(gets.values()) == sum(cached.values()), (gets, cached)
    # The bucket answered 1 request in 10 with 503 SlowDown: retried, no item lost (above).
    assert front.throttled >= COUNT // 10, (front.requests, front.throttled)

    # Outputs where the submitter asked, nowhere else.
    with (hosts["submitter"] / "out" / "metric.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == COUNT
    assert (hosts["submitter"] / "out" / "agent.html").stat().st_size > 0
    for name in ("coordinator", "tools"):
        assert not list(hosts[name].rglob("*.csv")) and not list(hosts[name].rglob("*.html"))
        assert not list(hosts[name].rglob("*.png"))  # images only in the bucket, cached by key
