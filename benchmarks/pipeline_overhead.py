"""Per-run overhead of the distributed pipeline against the in-process agent.

The same photos go through four paths: in-process (``run_inprocess``, nothing stored), embedded
(every step persisted to SQLite, still one process) and twice distributed (every step a Celery
task on real Redis, one default-queue and one gpu-queue worker, results in SQLite): as
configured by default, where a tool step whose scores are all cached runs on the default worker
(one message per run), and "sent", where every tool step goes to the gpu worker and back
(three messages per run: what a run costs when its tools compute).  Each path first runs once
over all photos to warm caches (tool scores in a shared SQLite cache, image features in each
process), then the timed pass; the figures are median milliseconds per run and ratios against
the in-process path measured in the same process.

    python benchmarks/pipeline_overhead.py ../shared/data/livec-dev/images --limit 50 \
        [--broker redis://127.0.0.1:6379/12]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QUERY = "Rate the quality of this image."


def start_worker(name: str, queue: str, env: dict[str, str], logs: Path) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.celery_app:app",
        "worker",
        "-Q",
        queue,
        "-n",
        f"{name}@bench",
        "-c",
        "1",
        "--without-gossip",
        "--without-mingle",
        "-l",
        "WARNING",
    ]
    return subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=(logs / f"{name}.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("images", type=Path)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/12")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="iqa-overhead-"))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{workdir / 'tool-cache.sqlite3'}",
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{workdir / 'runs.sqlite3'}",
        "AGENTIC_IQA_BROKER_URL": args.broker,
    }
    os.environ.update({k: v for k, v in env.items() if k.startswith("AGENTIC_IQA_")})

    import redis
    from celery import Celery
    from sqlalchemy import bindparam, select

    from agentic_iqa.agents.team import default_agents
    from agentic_iqa.db.engine import make_engine, read_scope, upgrade
    from agentic_iqa.db.models import Run
    from agentic_iqa.pipeline import run_inprocess
    from agentic_iqa.runtime import service
    from agentic_iqa.runtime.embedded import run_embedded

    redis.Redis.from_url(args.broker).flushdb()
    images = sorted(p for p in args.images.iterdir() if p.is_file())[: args.limit]
    upgrade(env["AGENTIC_IQA_DATABASE_URL"])
    engine = make_engine(env["AGENTIC_IQA_DATABASE_URL"])
    agents = default_agents()

    def in_process(path: Path) -> None:
        run_inprocess(QUERY, str(path), agents=agents)

    def embedded(path: Path) -> str:
        run_id = service.create_run(engine, QUERY, str(path))
        run_embedded(engine, agents, run_id)
        return run_id

    client = Celery(broker=args.broker)
    status = select(Run.status).where(Run.id == bindparam("run"))

    def distributed(path: Path) -> str:
        run_id = service.create_run(engine, QUERY, str(path))
        client.send_task("agentic_iqa.coordinate", args=(run_id,), queue="default")
        while True:
            with read_scope(engine) as session:  # a poll never blocks a worker's commit
                if session.scalar(status, {"run": run_id}) in {"succeeded", "failed"}:
                    return run_id
            time.sleep(0.002)

    def stored_ms(run_ids: list[str]) -> float:
        """Median created -> finished as the database recorded it: the pipeline's own time,
        without the client's polling interval."""
        with read_scope(engine) as session:
            spans = [
                (run.finished_at - run.created_at).total_seconds()
                for run in session.scalars(select(Run).where(Run.id.in_(run_ids)))
            ]
        return statistics.median(spans) * 1000

    def measure(run: Callable[[Path], str | None]) -> tuple[float, float | None]:
        for path in images:  # warm-up pass
            run(path)
        times, run_ids = [], []
        for path in images:
            started = time.perf_counter()
            run_ids.append(run(path))
            times.append(time.perf_counter() - started)
        ids = [run_id for run_id in run_ids if run_id is not None]
        return statistics.median(times) * 1000, stored_ms(ids) if ids else None

    # The distributed paths: one default-queue and one gpu-queue worker each; the second pair
    # sends every tool step to the gpu queue, cached or not (three messages per run).
    setups = {
        "distributed (Celery)": {},
        "distributed, sent": {"AGENTIC_IQA_CACHED_TOOLS_INLINE": "false"},
    }
    figures = {"in-process": measure(in_process), "embedded (SQLite)": measure(embedded)}
    for label, extra in setups.items():
        workers = [
            start_worker(name, name, {**env, **extra}, workdir) for name in ("default", "gpu")
        ]
        try:
            deadline = time.monotonic() + 60
            while len(client.control.ping(timeout=0.5)) < 2:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"workers did not start; logs in {workdir}")
            figures[label] = measure(distributed)
        finally:
            for worker in workers:
                os.killpg(worker.pid, signal.SIGTERM)
            for worker in workers:
                worker.wait(timeout=30)
    base = figures["in-process"][0]
    print(f"{len(images)} photos, '{QUERY}', builtin backend, tool scores cached")
    print(f"{'path':<22}{'median ms/run':>14}{'ratio':>8}{'stored ms/run':>15}{'overhead ms':>13}")
    for label, (value, stored) in figures.items():
        recorded = f"{stored:>15.1f}{stored - base:>13.1f}" if stored is not None else ""
        print(f"{label:<22}{value:>14.1f}{value / base:>8.2f}{recorded}")
    print(
        "stored: created -> finished as recorded in the database (no client polling); "
        "overhead: stored - in-process.  distributed: a tool step whose scores are all "
        "cached runs on the default worker (one message per run); sent: every tool step "
        "goes to the gpu worker and back (three messages per run)"
    )


if __name__ == "__main__":
    main()
