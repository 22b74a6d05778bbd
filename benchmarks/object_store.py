"""The same metric job with its images on local files and in an S3 bucket (a local moto server):
items done, scores, objects fetched against cache hits, throughput, and a bucket that throttles.

``--items`` distinct small photos (crops, flips and brightness steps of the example photos, or
of ``$AGENTIC_IQA_DATA_DIR``'s LIVE-C photos with ``--from-data``) are written to a folder and
uploaded to a bucket on moto's S3 server, started as a process of its own.  The same manifest
is then run as a ``--tools PIQE`` job (submit with its image check, then ``run_local`` with
``--workers`` threads), all in this process on SQLite:

* local files (the baseline) and the bucket, alternately ``--repeats`` times, each bucket run
  with an empty object cache of its own; the best wall time of each is kept;
* the bucket through a front that answers every ``--throttle-every``-th request with
  ``503 SlowDown`` before passing the rest on to moto (the front of tests/iqa_tools/
  test_storage.py), with an empty cache.

Printed: items done, items whose raw PIQE score differs from the local run in any digit (must
be 0), objects fetched (cache misses) and cache hits, requests to the store and throttled
answers, items per second and the bucket's ratio to local files (aim: 0.90 or more), the CPU
time moto's server spent (a real store's is not this machine's), and the throttled run's items
lost (must be 0).  A few warm-up items run first (imports, tools).

Settings from the shell (``AGENTIC_IQA_*``, ``AWS_*``) are replaced by a sandbox of its own.

    python benchmarks/object_store.py                   # 200 items, 2 repeats, 1 in 10 throttled
    python benchmarks/object_store.py --items 50 --repeats 1
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agentic_iqa.db.exports import export_rows  # noqa: E402
from agentic_iqa.jobs.spec import JobSpec  # noqa: E402
from tests.iqa_tools.storage.servers import Front, front_handler  # noqa: E402


@dataclass
class Throttling(Front):
    """A front that answers every ``every``-th request (HEAD or GET) with 503 SlowDown."""

    every: int = 10
    requests: int = 0
    throttled: int = 0
    counter: threading.Lock = field(default_factory=threading.Lock)

    def take_fault(self) -> tuple[int, str] | str | None:
        with self.counter:
            self.requests += 1
            if self.requests % self.every:
                return None
            self.throttled += 1
        return (503, "SlowDown")


@dataclass
class Outcome:
    """One job: wall time, per-item raw scores, the process's object cache counts."""

    seconds: float
    scores: dict[str, Any]
    statuses: dict[str, str]
    fetched: int = 0
    hits: int = 0
    store_cpu: float = 0.0

    @property
    def done(self) -> int:
        return sum(status == "done" for status in self.statuses.values())


def photos(
    count: int, folder: Path, data_dir: Path | None, size: tuple[int, int] = (256, 192)
) -> Path:
    """``count`` distinct PNGs of ``size`` in ``folder`` and a manifest (image) naming them."""
    sources = (
        sorted((data_dir / "ChallengeDB_release" / "Images").glob("*.bmp"))[:8] if data_dir else []
    )
    if not sources:
        sources = [REPO / "examples" / name for name in ("i03_blurred.png", "i03_reference.png")]
    width, height = size
    images = [
        np.asarray(Image.open(path).convert("RGB").resize((width * 2, height * 2)))
        for path in sources
    ]
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / "manifest.csv"
    with manifest.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image"])
        for index in range(count):
            source = images[index % len(images)]
            step = index // len(images)
            top, left = 8 * (step % 16), 8 * ((step // 16) % 32)
            crop = source[top : top + height, left : left + width].astype(np.int16)
            crop = np.clip(crop + (step // 512) * 3, 0, 255).astype(np.uint8)
            if index % 3 == 2:
                crop = crop[:, ::-1]
            name = f"photo{index:04d}.png"
            Image.fromarray(np.ascontiguousarray(crop)).save(folder / name)
            writer.writerow([name])
    return manifest


def sandbox(folder: Path) -> None:
    """This process's settings: none from the shell, dummy S3 credentials."""
    for name in list(os.environ):
        if name.startswith(("AGENTIC_IQA_", "AWS_")):
            del os.environ[name]
    os.environ.update(
        {
            "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{folder / 'jobs.sqlite3'}",
            "AGENTIC_IQA_TOOL_CACHE": "memory",
            "AGENTIC_IQA_DEVICE": "cpu",
            "AWS_ACCESS_KEY_ID": "dummy-key-id",
            "AWS_SECRET_ACCESS_KEY": "dummy-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )


def run_job(
    engine: Any, manifest: Path, image_dir: str, workers: int, cache_dir: Path | None
) -> Outcome:
    """Submit and run the PIQE job; a remote run with a fresh object cache in ``cache_dir``."""
    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit
    from iqa_tools import images, storage

    images._OBJECT_CACHE.clear()
    storage.forget_filesystems()
    if cache_dir is not None:
        os.environ["AGENTIC_IQA_OBJECT_CACHE"] = str(cache_dir)
    started = time.perf_counter()
    job = submit(
        engine,
        JobSpec.build(
            manifest=manifest,
            tools=["PIQE"],
            image_dir=image_dir,
            name=f"bench-{uuid.uuid4().hex[:6]}",
        ),
    )
    run_local(engine, job, AgentsCache(), workers=workers)
    seconds = time.perf_counter() - started
    with read_scope(engine) as session:
        rows = list(export_rows(session, job))
    outcome = Outcome(
        seconds,
        {Path(row["image"]).name: row["raw_scores"] for row in rows},
        {Path(row["image"]).name: row["status"] for row in rows},
    )
    if cache_dir is not None:
        cache = images.object_cache()
        outcome.fetched, outcome.hits = cache.misses, cache.hits
    return outcome


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def differing(outcome: Outcome, baseline: Outcome) -> int:
    return sum(outcome.scores.get(name) != scores for name, scores in baseline.scores.items())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"moto's server did not listen on {port}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2, help="threads of each local job")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--throttle-every", type=int, default=10)
    parser.add_argument("--size", default="256x192", help="WIDTHxHEIGHT of each photo")
    parser.add_argument(
        "--from-data",
        action="store_true",
        help="derive the photos from $AGENTIC_IQA_DATA_DIR's LIVE-C photos",
    )
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    data_dir = os.environ.get("AGENTIC_IQA_DATA_DIR") if args.from_data else None

    import boto3

    with tempfile.TemporaryDirectory(prefix="object-store-") as scratch:
        folder = Path(scratch)
        sandbox(folder)
        size = tuple(int(part) for part in args.size.lower().split("x"))
        manifest = photos(
            args.items, folder / "photos", Path(data_dir) if data_dir else None, (size[0], size[1])
        )
        warm = photos(4, folder / "warm", None)

        port = free_port()
        server = subprocess.Popen(  # a process of its own, as a store is: not this one's GIL
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        moto_url = f"http://127.0.0.1:{port}"
        wait_for(port)
        os.environ["AWS_ENDPOINT_URL"] = moto_url
        bucket = "photos"
        client = boto3.client("s3", endpoint_url=moto_url)
        client.create_bucket(Bucket=bucket)
        for path in [*sorted((folder / "photos").glob("*.png")), *(folder / "warm").glob("*.png")]:
            client.put_object(
                Bucket=bucket, Key=f"{path.parent.name}/{path.name}", Body=path.read_bytes()
            )
        source = f"s3://{bucket}/photos"

        from agentic_iqa.db import upgrade
        from agentic_iqa.db.engine import make_engine

        upgrade(os.environ["AGENTIC_IQA_DATABASE_URL"])
        engine = make_engine(os.environ["AGENTIC_IQA_DATABASE_URL"])
        run_job(engine, warm, str(folder / "warm"), args.workers, None)
        run_job(engine, warm, f"s3://{bucket}/warm", args.workers, folder / "cache-warm")

        local: list[Outcome] = []
        remote: list[Outcome] = []
        for repeat in range(args.repeats):
            local.append(run_job(engine, manifest, str(folder / "photos"), args.workers, None))
            before = cpu_seconds(server.pid)
            remote.append(
                run_job(engine, manifest, source, args.workers, folder / f"cache-{repeat}")
            )
            remote[-1].store_cpu = cpu_seconds(server.pid) - before
        baseline = min(local, key=lambda outcome: outcome.seconds)
        best = min(remote, key=lambda outcome: outcome.seconds)

        front = Throttling(upstream=moto_url, every=args.throttle_every)
        proxy = ThreadingHTTPServer(("127.0.0.1", 0), front_handler(front))
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{proxy.server_address[1]}"
        throttled = run_job(engine, manifest, source, args.workers, folder / "cache-throttled")
        proxy.shutdown()
        proxy.server_close()
        server.terminate()
        server.wait(timeout=10)

    n = args.items
    rate = {name: n / outcome.seconds for name, outcome in (("local", baseline), ("s3", best))}
    print(
        f"items: {n} photos of {args.size} px, PIQE, {args.workers} threads, best of "
        f"{args.repeats} runs each (submit with image check + run), SQLite, moto's S3 server "
        f"on localhost (a process of its own)"
    )
    print(
        f"local files:      {baseline.done}/{n} done, {baseline.seconds:6.2f} s, "
        f"{rate['local']:6.1f} items/s (baseline 1.00x)"
    )
    for index, outcome in enumerate(remote):
        print(
            f"s3 run {index + 1}:         {outcome.done}/{n} done, {outcome.seconds:6.2f} s, "
            f"{n / outcome.seconds:6.1f} items/s, scores differing {differing(outcome, baseline)}"
            f", objects fetched {outcome.fetched}, cache hits {outcome.hits}, the store's "
            f"own CPU {outcome.store_cpu:.2f} s (on this machine's cores)"
        )
    print(
        f"s3 (best):        {best.done}/{n} done, {best.seconds:6.2f} s, "
        f"{rate['s3']:6.1f} items/s, {rate['s3'] / rate['local']:.3f}x local files "
        f"(aim >= 0.90)"
    )
    lost = n - throttled.done
    print(
        f"s3 throttled 1 in {args.throttle_every}: {throttled.done}/{n} done, items lost "
        f"{lost}, scores differing {differing(throttled, baseline)}, requests "
        f"{front.requests}, answered 503 SlowDown {front.throttled}, objects fetched "
        f"{throttled.fetched}, cache hits {throttled.hits}, {throttled.seconds:6.2f} s, "
        f"{n / throttled.seconds:6.1f} items/s ({n / throttled.seconds / rate['local']:.3f}x)"
    )
    for name, outcome in (
        ("local", baseline),
        ("throttled", throttled),
        *((f"s3 run {i + 1}", o) for i, o in enumerate(remote)),
    ):
        assert outcome.done == n, f"{name}: {outcome.done}/{n} done"
    assert all(differing(outcome, baseline) == 0 for outcome in (*remote, throttled))


if __name__ == "__main__":
    main()
