"""A dataset job under scheduled faults, with nobody at the keyboard: does it heal, and how fast?

A job of ``--items`` generated photos (builtin backend, the offline tools) runs on real Celery
workers (one default-queue worker, one tool-queue worker), a Redis of its own on a spare port
without persistence, and a scratch PostgreSQL database.  Faults are injected on a schedule:

* ``kill-tool-worker``: SIGKILL the tool worker mid-job, start a new one;
* ``kill-default-worker``: SIGKILL the default worker (and its supervisor), start a new one;
* ``restart-broker``: SIGKILL Redis and start it again empty (every queued message is lost);
* ``drop-db-connections``: ``pg_terminate_backend`` every connection of the job's database;
* ``freeze-tool-worker``: SIGSTOP the tool worker for twice the lease, then SIGCONT (the woken
  worker's outcomes must be refused: the steps were taken over meanwhile);
* ``db-read-only``: the job's database turned read-only (``default_transaction_read_only``,
  its connections dropped so new ones get it) for ``--read-only-seconds``, then writable again.

No ``eval resume`` and no manual message: the supervisor re-sends what went quiet.  Printed:
items done / failed / duplicated (runs beyond one per item), steps taken over, runs re-sent, and
for each fault the seconds until the next item finished and until every item that was in flight
at the fault had finished (time to heal: the lost ones had to be re-sent), as a ratio to the
time a window of items takes to drain in the baseline: the same job on other photos, without
faults, run first on the same workers in the same process.

    python benchmarks/chaos.py [--items 200] [--lease 5] [--postgres-url postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from agentic_iqa.jobs.spec import JobSpec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
WINDOW = 20
FAULTS = (
    "kill-tool-worker",
    "kill-default-worker",
    "restart-broker",
    "drop-db-connections",
    "freeze-tool-worker",
    "db-read-only",
)


def make_images(folder: Path, count: int, seed: int = 0) -> Path:
    from PIL import Image

    from tests.conftest import natural_image

    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        Image.fromarray(natural_image(seed + index, (192, 144))).save(
            folder / f"img{index:04d}.png"
        )
    return folder


def finished(engine, job_id: str) -> int:
    from agentic_iqa.runtime.progress import progress

    return progress(engine, job_id).finished


def in_flight(engine, job_id: str) -> set[int]:
    from sqlalchemy import select

    from agentic_iqa.db.engine import session_scope
    from agentic_iqa.db.models import JobItem

    with session_scope(engine) as session:
        return set(
            session.scalars(
                select(JobItem.id).where(JobItem.job_id == job_id, JobItem.status == "queued")
            )
        )


def drop_connections(admin_url: str, database: str) -> int:
    from sqlalchemy import create_engine, text

    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            return len(
                connection.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :name AND pid <> pg_backend_pid()"
                    ),
                    {"name": database},
                ).all()
            )
    finally:
        admin.dispose()


def set_read_only(admin_url: str, database: str, on: bool) -> None:
    """The database read-only (or writable again) for every new session; existing ones are
    dropped so they reconnect under the new default."""
    from sqlalchemy import create_engine, text

    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(
                text(
                    f'ALTER DATABASE "{database}" SET '
                    f"default_transaction_read_only = {'on' if on else 'off'}"
                )
            )
    finally:
        admin.dispose()
    drop_connections(admin_url, database)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--lease", type=float, default=5.0, help="AGENTIC_IQA_LEASE_SECONDS")
    parser.add_argument(
        "--postgres-url",
        default=DEFAULT_POSTGRES,
        help="a database to create the scratch database from",
    )
    parser.add_argument("--fault-every", type=float, default=6.0, help="seconds between faults")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--read-only-seconds", type=float, default=4.0, help="how long the database stays read-only"
    )
    parser.add_argument("--faults", default=",".join(FAULTS), help="which, in order")
    args = parser.parse_args()

    from sqlalchemy import create_engine, func, select, text
    from sqlalchemy.engine import make_url

    from agentic_iqa.db.engine import dispose_engines, make_engine, session_scope, upgrade
    from agentic_iqa.db.models import JobItem, Run, StepRecord
    from agentic_iqa.runtime.progress import progress, wait
    from agentic_iqa.runtime.submission import submit
    from tests.workers.cluster import Cluster, RedisServer

    scratch = f"agentic_iqa_chaos_{uuid.uuid4().hex[:8]}"
    admin = create_engine(args.postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{scratch}"'))
    database_url = (
        make_url(args.postgres_url).set(database=scratch).render_as_string(hide_password=False)
    )
    work = Path(tempfile.mkdtemp(prefix="agentic-iqa-chaos-"))
    broker = RedisServer(work)
    broker.start()
    cluster = Cluster(
        broker.url,
        database_url,
        work,
        {
            "AGENTIC_IQA_VISIBILITY_TIMEOUT": "3600",  # Redis does not heal anything here
            "AGENTIC_IQA_LEASE_SECONDS": str(args.lease),
            "AGENTIC_IQA_FEED_INTERVAL": "1",
            "AGENTIC_IQA_JOB_WINDOW": str(WINDOW),
            "AGENTIC_IQA_TOOL_CACHE": "memory",
        },
    )
    report: dict = {"items": args.items, "lease_seconds": args.lease, "window": WINDOW}
    undo: list[tuple[float, object]] = []  # (when, action): the end of a fault still on
    try:
        upgrade(database_url)
        engine = make_engine(database_url)
        workers = {
            "default": cluster.start("default", "default"),
            "gpu": cluster.start("gpu", "gpu"),
        }
        # Baseline: the same job on other photos (no cache hits), no faults, same workers.
        calm = make_images(work / "calm", args.items, seed=10**6)
        calm_job = submit(engine, JobSpec.build(manifest=calm))
        calm_started = time.monotonic()
        wait(engine, calm_job, poll=0.2, timeout=args.timeout)
        calm_s = time.monotonic() - calm_started
        report["calm"] = {"seconds": round(calm_s, 1), "items_per_s": round(args.items / calm_s, 2)}
        drain = WINDOW * calm_s / args.items  # how long a full window takes, calmly

        def fault_now(fault: str) -> None:
            def ended(action):  # a fault with a duration: heal is counted from its end
                def end() -> None:
                    action()
                    recovery[fault]["ended_at"] = time.monotonic()

                return end

            if fault == "freeze-tool-worker":
                frozen = workers["gpu"]
                cluster.freeze(frozen)
                undo.append(
                    (time.monotonic() + 2 * args.lease, ended(lambda: cluster.thaw(frozen)))
                )
            elif fault == "db-read-only":
                set_read_only(args.postgres_url, scratch, True)
                undo.append(
                    (
                        time.monotonic() + args.read_only_seconds,
                        ended(lambda: set_read_only(args.postgres_url, scratch, False)),
                    )
                )
            elif fault == "kill-tool-worker":
                cluster.kill(workers["gpu"])
                workers["gpu"] = cluster.start(f"gpu-{fault}", "gpu")
            elif fault == "kill-default-worker":
                cluster.kill(workers["default"])
                workers["default"] = cluster.start(f"default-{fault}", "default")
            elif fault == "restart-broker":
                broker.kill()
                time.sleep(1.0)
                broker.start()
            else:
                drop_connections(args.postgres_url, scratch)

        started = time.monotonic()
        faulty = make_images(work / "faulty", args.items)
        job_id = submit(engine, JobSpec.build(manifest=faulty))
        last = 0
        schedule = [fault for fault in args.faults.split(",") if fault]
        next_fault = started + args.fault_every
        pending: list[tuple[str, float, int, frozenset[int]]] = []
        recovery: dict[str, dict] = {}
        while time.monotonic() - started < args.timeout:
            try:
                current = progress(engine, job_id)
                still = in_flight(engine, job_id) if pending else set()
            except Exception:  # the database connection was just dropped: look again
                time.sleep(0.2)
                continue
            now = time.monotonic()
            for entry in [entry for entry in undo if entry[0] <= now]:
                undo.remove(entry)
                entry[1]()  # type: ignore[operator]
            for entry in list(pending):
                fault, at, before, flying = entry
                record = recovery[fault]
                if current.finished > before and "next_item_s" not in record:
                    record["next_item_s"] = round(now - at, 2)
                if not flying & still:
                    since = record.get("ended_at", at)  # faults with a duration: their end
                    record["healed_s"] = round(now - at, 2)
                    record["healed_after_end_s"] = round(now - since, 2)
                    record["healed_vs_calm_drain"] = round((now - since) / drain, 1)
                    pending.remove(entry)
            last = current.finished
            if current.status != "running":
                break
            if schedule and now >= next_fault:
                fault, at = schedule.pop(0), time.monotonic()
                flying = frozenset(in_flight(engine, job_id))
                recovery[fault] = {"fault": fault, "at_s": round(at - started, 1)}
                fault_now(fault)
                pending.append((fault, at, last, flying))
                next_fault = time.monotonic() + args.fault_every
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        report["faults"] = [
            {key: value for key, value in record.items() if key != "ended_at"}
            for record in recovery.values()
        ]
        with session_scope(engine) as session:
            counts = progress(engine, job_id).counts
            run_ids = select(Run.id).where(Run.job_id == job_id)
            runs = session.scalar(select(func.count()).select_from(run_ids.subquery()))
            items = session.scalar(
                select(func.count()).select_from(JobItem).where(JobItem.job_id == job_id)
            )
            taken_over = session.scalar(
                select(func.count())
                .select_from(StepRecord)
                .where(StepRecord.run_id.in_(run_ids), StepRecord.attempts > 1)
            )
            resends = session.scalar(select(func.sum(Run.resends)).where(Run.job_id == job_id)) or 0
        report.update(
            {
                "status": progress(engine, job_id).status,
                "seconds": round(elapsed, 1),
                "done": counts.get("done", 0),
                "failed": counts.get("failed", 0),
                "duplicated": runs - items,
                "steps_taken_over": taken_over,
                "runs_resent": resends,
                "items_per_s": round(last / elapsed, 2),
                "slowdown_vs_calm": round(elapsed / calm_s, 2),
                "calm_window_drain_s": round(drain, 2),
            }
        )
    finally:
        for _when, action in undo:  # a fault still on: undo it before cleaning up
            action()  # type: ignore[operator]
        cluster.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
        dispose_engines(database_url)
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)'))
        admin.dispose()
    print(json.dumps(report, indent=2))
    print(
        f"\n{report['done']} done, {report['failed']} failed, {report['duplicated']} duplicated"
        f" of {report['items']} items in {report['seconds']} s ({report['status']}); "
        f"{report['steps_taken_over']} steps taken over, {report['runs_resent']} runs re-sent"
    )
    calm = report["calm"]
    print(
        f"  baseline, the same job without faults: {calm['seconds']} s "
        f"({calm['items_per_s']} items/s); with faults {report['seconds']} s "
        f"({report['slowdown_vs_calm']}x); a calm window of {WINDOW} items drains in "
        f"{report['calm_window_drain_s']} s"
    )
    for fault in report["faults"]:
        after, healed = fault.get("next_item_s"), fault.get("healed_s")
        lasted = (
            ""
            if healed is None or healed == fault.get("healed_after_end_s")
            else f", {fault['healed_after_end_s']} s after the fault ended"
        )
        ratio = f" ({fault['healed_vs_calm_drain']}x a calm drain)" if healed else ""
        print(
            f"  {fault['fault']:<22} at {fault['at_s']:>6.1f} s: next item after "
            f"{after if after is not None else '-'} s; every item in flight at the fault "
            f"finished after {healed if healed is not None else 'never'} s{lasted}{ratio}"
        )


if __name__ == "__main__":
    main()
