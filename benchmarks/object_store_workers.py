"""The 200-item metric job of ``benchmarks/object_store.py``, through Celery workers that share
no disk with the submitter: local files (a folder every process can read: the baseline) against
the same images only in an S3 bucket (moto's server, a process of its own), and that bucket
answering 1 request in 10 with ``503 SlowDown``.

A coordination worker (``-Q default``) and a tool worker (``-Q gpu``) run as processes with
their own working directory, ``HOME`` and object cache; the submitter runs
``agentic-iqa eval submit MANIFEST --tools PIQE --wait`` from a folder of its own.  They meet
through Redis and a scratch PostgreSQL database (``--redis``, ``--postgres``: the services of
``.ci/run``).  Each job's wall time is the submit command's, from start to its summary (submit
with the image check, the workers' run, the wait); the best of ``--repeats``.

Printed: items done, raw scores differing from the baseline (must be 0), GETs that downloaded
an object against the objects each host cached, items per second and the bucket's ratio to
local files (aim: 0.90 or more), and the throttled run's items lost (must be 0).

    python benchmarks/object_store_workers.py                  # 200 items, 2 repeats
    python benchmarks/object_store_workers.py --size 1024x768
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.object_store import (  # noqa: E402
    Throttling,
    free_port,
    photos,
    wait_for,
)
from tests.conftest import scratch_postgres  # noqa: E402
from tests.iqa_tools.storage.servers import Front, front_handler  # noqa: E402
from tests.workers.cluster import Cluster  # noqa: E402


def host(folder: Path, extra: dict[str, str]) -> dict[str, str]:
    """A machine of its own: its home, its caches."""
    for sub in ("home", "cache"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {
        "HOME": str(folder / "home"),
        "XDG_CACHE_HOME": str(folder / "cache"),
        "AGENTIC_IQA_OBJECT_CACHE": str(folder / "cache" / "objects"),
        **extra,
    }


def cached(folder: Path) -> int:
    return sum(
        1
        for path in (folder / "cache" / "objects").glob("*/*")
        if not path.name.startswith(".tmp-") and path.suffix != ".latest"
    )


def scores(database_url: str, name: str) -> dict[str, Any]:
    """(status, raw scores) per image name of the job named ``name``."""
    from sqlalchemy import select

    from agentic_iqa.db.engine import make_engine, read_scope
    from agentic_iqa.db.exports import export_rows
    from agentic_iqa.db.models import Job

    engine = make_engine(database_url)
    with read_scope(engine) as session:
        job = session.scalars(select(Job.id).where(Job.name == name)).one()
        rows = {
            Path(row["image"]).name: (row["status"], row["raw_scores"])
            for row in export_rows(session, job)
        }
    engine.dispose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--size", default="256x192", help="WIDTHxHEIGHT of each photo")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    import boto3
    import redis

    redis.Redis.from_url(args.redis).flushdb()
    with tempfile.TemporaryDirectory(prefix="object-store-workers-") as scratch:
        folder = Path(scratch)
        width, height = (int(part) for part in args.size.lower().split("x"))
        manifest = photos(args.items, folder / "shared" / "photos", None, (width, height))
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        moto_url = f"http://127.0.0.1:{port}"
        wait_for(port)
        credentials = {
            "AWS_ACCESS_KEY_ID": "dummy-key-id",
            "AWS_SECRET_ACCESS_KEY": "dummy-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        client = boto3.client(
            "s3",
            endpoint_url=moto_url,
            **{
                "aws_access_key_id": "dummy-key-id",
                "aws_secret_access_key": "dummy-secret",
                "region_name": "us-east-1",
            },
        )
        client.create_bucket(Bucket="photos")
        for path in sorted(manifest.parent.glob("*.png")):
            client.put_object(Bucket="photos", Key=f"photos/{path.name}", Body=path.read_bytes())
        plain = Front(upstream=moto_url)
        throttling = Throttling(upstream=moto_url, every=10)
        fronts = []
        for state in (plain, throttling):
            proxy = ThreadingHTTPServer(("127.0.0.1", 0), front_handler(state))
            threading.Thread(target=proxy.serve_forever, daemon=True).start()
            state.url = f"http://127.0.0.1:{proxy.server_address[1]}"
            fronts.append(proxy)
        submitter_manifest = folder / "submitter" / "manifest.csv"
        submitter_manifest.parent.mkdir()
        submitter_manifest.write_text(manifest.read_text())

        with scratch_postgres(args.postgres) as database_url:
            from agentic_iqa.db import upgrade

            upgrade(database_url)
            (folder / "logs").mkdir()

            def run(label: str, image_dir: str, endpoint: str | None) -> tuple[float, dict, int]:
                """One job through fresh workers (empty caches); wall time, scores, objects
                the hosts cached."""
                s3 = {**credentials, **({"AWS_ENDPOINT_URL": endpoint} if endpoint else {})}
                hosts = {
                    name: folder / f"{label}-{name}"
                    for name in ("submitter", "coordinator", "tools")
                }
                env = {name: host(path, s3) for name, path in hosts.items()}
                cluster = Cluster(args.redis, database_url, folder / "logs")
                try:
                    cluster.start(
                        "default", "default", cwd=hosts["coordinator"], env=env["coordinator"]
                    )
                    cluster.start("gpu", "gpu", cwd=hosts["tools"], env=env["tools"])
                    started = time.perf_counter()
                    done = subprocess.run(
                        [
                            sys.executable,
                            "-m",
                            "agentic_iqa",
                            "eval",
                            "submit",
                            str(submitter_manifest),
                            "--image-dir",
                            image_dir,
                            "--tools",
                            "PIQE",
                            "--name",
                            label,
                            "--wait",
                        ],
                        cwd=hosts["submitter"],
                        env={**cluster.env, **env["submitter"]},
                        capture_output=True,
                        text=True,
                        timeout=1800,
                    )
                    seconds = time.perf_counter() - started
                finally:
                    cluster.stop()
                if done.returncode != 0:
                    raise RuntimeError(f"{label}: {done.stderr[-2000:]}")
                return (
                    seconds,
                    scores(database_url, label),
                    sum(cached(path) for path in hosts.values()),
                )

            local: list[tuple[float, dict, int]] = []
            remote: list[tuple[float, dict, int]] = []
            for repeat in range(args.repeats):
                local.append(run(f"local-{repeat}", str(manifest.parent), None))
                before = plain.bodies.total()
                remote.append(run(f"s3-{repeat}", "s3://photos/photos", plain.url))
                remote[-1] = (*remote[-1][:2], (remote[-1][2], plain.bodies.total() - before))
            throttled = run("throttled", "s3://photos/photos", throttling.url)
        for proxy in fronts:
            proxy.shutdown()
            proxy.server_close()
        server.terminate()
        server.wait(timeout=10)

    n = args.items
    baseline = min(local, key=lambda outcome: outcome[0])
    best = min(remote, key=lambda outcome: outcome[0])

    def done(outcome: tuple[float, dict, Any]) -> int:
        return sum(status == "done" for status, _ in outcome[1].values())

    def differing(outcome: tuple[float, dict, Any]) -> int:
        return sum(
            outcome[1].get(name, (None, None))[1] != raw for name, (_, raw) in baseline[1].items()
        )

    print(
        f"items: {n} photos of {args.size} px, PIQE, a coordination worker and a tool worker "
        f"(1 process each) sharing no disk with the submitter, Redis, PostgreSQL, moto's S3 "
        f"server; submit --wait from start to summary, best of {args.repeats}"
    )
    print(
        f"local files:      {done(baseline)}/{n} done, {baseline[0]:6.2f} s, "
        f"{n / baseline[0]:6.1f} items/s (baseline 1.00x)"
    )
    for index, outcome in enumerate(remote):
        objects, gets = outcome[2]
        print(
            f"s3 run {index + 1}:         {done(outcome)}/{n} done, {outcome[0]:6.2f} s, "
            f"{n / outcome[0]:6.1f} items/s, scores differing {differing(outcome)}, GETs "
            f"with a body {gets}, objects cached on the hosts {objects}"
        )
    print(
        f"s3 (best):        {done(best)}/{n} done, {best[0]:6.2f} s, {n / best[0]:6.1f} "
        f"items/s, {baseline[0] / best[0]:.3f}x local files (aim >= 0.90)"
    )
    print(
        f"s3 throttled 1 in 10: {done(throttled)}/{n} done, items lost {n - done(throttled)}, "
        f"scores differing {differing(throttled)}, requests {throttling.requests}, answered "
        f"503 SlowDown {throttling.throttled}, {throttled[0]:6.2f} s "
        f"({baseline[0] / throttled[0]:.3f}x)"
    )
    assert all(done(outcome) == n for outcome in (*local, *remote, throttled))
    assert all(differing(outcome) == 0 for outcome in (*remote, throttled))


if __name__ == "__main__":
    os.environ.pop("AGENTIC_IQA_BROKER_URL", None)
    main()
