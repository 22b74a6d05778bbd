"""``eval submit --batch`` against the same job online: answers, calls, cost, wall time; then the
batch job on a real worker, interrupted mid-round.

The simulated model (tests/conformance: deterministic, it knows each item's truth) answers
behind a local server speaking OpenAI's chat completions and its Files + Batches interface; a
batch stays open ``--batch-delay`` seconds.  The endpoint is priced at gpt-4o's list price with
the batch discount (0.5) by ``tests.conformance.batch_jobs.prices_file``.

Part 1: the same ``--items`` items (two thirds multiple choice, a third rating requests, small
degraded photos) run twice as a local job in this process with ``--workers`` threads: online
(the baseline), then with ``--batch``, each against a fresh server with the same seed.
Printed for each: items done, items whose answer (status, final answer, quality score) differs
from the online run (must be 0), model calls, rounds, cost and its ratio to online (must be
0.50-0.52), wall time, and the batch job's wall time explained as the rounds' batches open at
the provider (rounds x the batch delay, plus the polls' lag, measured from the batch rows) plus
the job's own time (walking the runs, gathering and reading), against the online job's wall.
Both are timed after a two-item warm-up job (imports, tools, SDKs).

Part 2 (``--interrupt``, on by default; needs Redis's ``redis-server`` and the ``redis``
package): the batch job of the same items on a real Celery worker (one, of every queue) with a
Redis of its own on a spare port and SQLite; while round ``--interrupt-round``'s batch is open
at the provider, the worker is SIGKILLed and Redis killed and started again empty, then a new
worker started.  Nobody resumes it.  Printed: items done, answers differing from the online run,
requests billed, distinct requests billed (by custom id), paid twice (custom ids billed more
than once: must be 0), bodies billed more often than the online job asked them (must be 0), and
online calls (must be 0).

Settings from the shell (``AGENTIC_IQA_*``) are ignored: the tests' sandbox is used (the
worker harness comes from tests/workers).

    python benchmarks/batch_jobs.py                        # 200 items, 5 s batches, interrupted
    python benchmarks/batch_jobs.py --items 30 --batch-delay 2 --no-interrupt
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_iqa.jobs.spec import JobSpec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: Starts the job on the workers as ``eval submit`` does (``workers.tasks.start_job``).
START_JOB = "import sys\nfrom workers.tasks import start_job\nstart_job(sys.argv[1])\n"
#: The worker harness owns these; the rest of the simulated environment goes to the worker.
HARNESS_OWNS = ("AGENTIC_IQA_BROKER_URL", "AGENTIC_IQA_DATABASE_URL", "AGENTIC_IQA_TOOL_CACHE")


@dataclass
class Outcome:
    """One job's results and the server's evidence of what was paid."""

    ran: Any
    billed: list[tuple[str, str]]
    online_billed: list[str]
    #: Seconds each round's batches were open at the provider (sent to seen ended).
    round_open: list[float]


def round_open_seconds(database_url: str, job_id: str) -> list[float]:
    """Per round, from the first batch sent to the last one seen ended (the batch rows)."""
    from sqlalchemy import func, select

    from agentic_iqa.db.engine import make_engine, read_scope
    from agentic_iqa.db.models import VlmBatch

    with read_scope(make_engine(database_url)) as session:
        rows = session.execute(
            select(VlmBatch.round, func.min(VlmBatch.submitted_at), func.max(VlmBatch.ended_at))
            .where(VlmBatch.job_id == job_id)
            .group_by(VlmBatch.round)
            .order_by(VlmBatch.round)
        ).all()
    return [(ended - sent).total_seconds() for _, sent, ended in rows if sent and ended]


def local_job(
    items: list[Any], folder: Path, *, batch: bool, delay: float, workers: int, seed: int
) -> Outcome:
    """The job run in this process against a fresh simulated server."""
    from tests.conformance.batch_jobs import environment, patched_env, run_job, simulated_batches
    from tests.conformance.simulated_model import Behaviour

    folder.mkdir(parents=True)
    with (
        simulated_batches(Behaviour.CLEAN, items, delay=delay, seed=seed) as (
            server,
            batches,
            _model,
        ),
        patched_env(environment(Behaviour.CLEAN, server, folder)),
    ):
        ran = run_job(folder, items, batch=batch, workers=workers)
        spans = round_open_seconds(os.environ["AGENTIC_IQA_DATABASE_URL"], ran.job_id)
    return Outcome(ran, list(batches.billed), list(batches.online_billed), spans)


def differing(answers: dict[str, Any], baseline: dict[str, Any]) -> int:
    """Items whose (status, final answer, score) differs from the baseline's, or are missing."""
    return sum(answers.get(item) != expected for item, expected in baseline.items()) + len(
        set(answers) - set(baseline)
    )


def done(answers: dict[str, Any]) -> int:
    return sum(status == "done" for status, _, _ in answers.values())


def interrupted_job(
    items: list[Any],
    folder: Path,
    *,
    delay: float,
    seed: int,
    interrupt_round: int,
    lease: float,
    concurrency: int,
) -> tuple[Outcome, float, float] | str:
    """The batch job on a worker, the worker SIGKILLed and Redis restarted empty while round
    ``interrupt_round``'s batch is open.  Returns the outcome, the wall time and when the
    fault struck, or why it could not run."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "the redis package is not installed"
    from agentic_iqa.db import upgrade
    from agentic_iqa.db.engine import make_engine
    from agentic_iqa.runtime.progress import progress, wait
    from agentic_iqa.runtime.submission import submit
    from tests.conformance.batch_jobs import environment, patched_env, read_ran, simulated_batches
    from tests.conformance.items import write_manifest
    from tests.conformance.simulated_model import Behaviour
    from tests.workers.cluster import Cluster, RedisServer

    folder.mkdir(parents=True)
    database_url = f"sqlite:///{folder / 'results.sqlite3'}"
    broker = RedisServer(folder)
    broker.start()
    with simulated_batches(Behaviour.CLEAN, items, delay=delay, seed=seed) as (
        server,
        batches,
        _model,
    ):
        simulated = environment(Behaviour.CLEAN, server, folder)
        worker_env = {key: value for key, value in simulated.items() if key not in HARNESS_OWNS}
        worker_env["AGENTIC_IQA_LEASE_SECONDS"] = str(lease)
        cluster = Cluster(broker.url, database_url, folder, worker_env)
        with patched_env(
            {
                **simulated,
                "AGENTIC_IQA_DATABASE_URL": database_url,
                "AGENTIC_IQA_BROKER_URL": broker.url,
            }
        ):
            try:
                upgrade(database_url)
                engine = make_engine(database_url)
                cluster.start("worker", "default,gpu", concurrency=concurrency)
                started = time.perf_counter()
                job_id = submit(
                    engine,
                    JobSpec.build(
                        manifest=write_manifest(items, folder / "manifest.csv"), batch=True
                    ),
                )
                result = subprocess.run(
                    [sys.executable, "-c", START_JOB, job_id],
                    cwd=REPO,
                    env=cluster.env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                if result.returncode != 0:
                    raise RuntimeError(f"start_job failed: {result.stderr[-2000:]}")
                while not round_open(engine, job_id, interrupt_round):
                    if progress(engine, job_id).status != "running":
                        raise RuntimeError(f"the job ended before round {interrupt_round}")
                    time.sleep(0.1)
                struck = time.perf_counter() - started
                for hostname in list(cluster.processes):
                    cluster.kill(hostname)
                broker.kill()
                broker.start()
                cluster.start("worker-again", "default,gpu", concurrency=concurrency)
                wait(engine, job_id, poll=0.5, timeout=3600)
                seconds = time.perf_counter() - started
                ran = read_ran(engine, job_id, seconds)
            finally:
                cluster.stop()
                broker.stop()
        spans = round_open_seconds(database_url, ran.job_id)
        return (
            Outcome(ran, list(batches.billed), list(batches.online_billed), spans),
            seconds,
            struck,
        )


def round_open(engine: Any, job_id: str, number: int) -> bool:
    """Round ``number``'s batch is with the provider (its id recorded) and not yet read."""
    from agentic_iqa.runtime.progress import progress

    batch = progress(engine, job_id).batch
    return bool(batch and any(view.round == number and view.provider_id for view in batch.open))


def cost(summary: dict[str, Any]) -> float:
    value = summary.get("cost_usd")
    if value is None:
        raise RuntimeError(f"the job's cost is unknown: {summary.get('unpriced_models')}")
    return float(value)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument(
        "--batch-delay", type=float, default=5.0, help="seconds a batch stays open at the provider"
    )
    parser.add_argument("--workers", type=int, default=2, help="threads of the local jobs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--interrupt",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="part 2: the batch job on a worker, interrupted mid-round",
    )
    parser.add_argument(
        "--interrupt-round", type=int, default=2, help="the round whose open batch sees the fault"
    )
    parser.add_argument(
        "--lease", type=float, default=30.0, help="the worker's run lease (seconds)"
    )
    parser.add_argument("--concurrency", type=int, default=2, help="the worker's processes")
    args = parser.parse_args()

    from tests.conformance.batch_jobs import make_items

    workdir = Path(tempfile.mkdtemp(prefix="iqa-batch-jobs-"))
    items = make_items(workdir, args.items, seed=args.seed)
    # Imports, tools and the SDKs warmed on two other items, so neither timed job pays for them.
    local_job(
        make_items(workdir / "warm-up", 2, seed=args.seed + 1),
        workdir / "warm-up" / "job",
        batch=False,
        delay=0.0,
        workers=args.workers,
        seed=args.seed + 1,
    )
    online = local_job(
        items, workdir / "online", batch=False, delay=0.0, workers=args.workers, seed=args.seed
    )
    batched = local_job(
        items,
        workdir / "batch",
        batch=True,
        delay=args.batch_delay,
        workers=args.workers,
        seed=args.seed,
    )

    base = online.ran
    asked = Counter(online.online_billed)
    print(
        f"{args.items} items (seed {args.seed}), simulated model, batches open "
        f"{args.batch_delay:g} s, local jobs with {args.workers} threads, "
        f"{os.cpu_count()} CPU cores; priced as gpt-4o, batch discount 0.5"
    )
    print(
        f"  {'':<8}{'done':>6}{'differ':>8}{'calls':>7}{'rounds':>8}{'cost USD':>11}"
        f"{'ratio':>7}{'wall s':>9}"
    )
    for label, outcome in (("online", online), ("batch", batched)):
        ran = outcome.ran
        print(
            f"  {label:<8}{done(ran.answers):>6}{differing(ran.answers, base.answers):>8}"
            f"{ran.summary['calls']:>7}{ran.rounds:>8}{cost(ran.summary):>11.4f}"
            f"{cost(ran.summary) / cost(base.summary):>7.3f}{ran.seconds:>9.1f}"
        )
    waiting = sum(batched.round_open)
    own = batched.ran.seconds - waiting
    print(
        f"  batch wall {batched.ran.seconds:.1f} s = {batched.ran.rounds} rounds x "
        f"{args.batch_delay:g} s ({batched.ran.rounds * args.batch_delay:.1f} s) + polls' lag "
        f"{waiting - batched.ran.rounds * args.batch_delay:.1f} s + the job's own "
        f"{own:.1f} s (online wall {base.seconds:.1f} s: {own / base.seconds:.2f}x)"
    )
    twice, line = paid_twice(batched.billed, asked)
    print(
        f"  batch requests billed {len(batched.billed)}, distinct requests billed "
        f"{len({request(custom_id) for custom_id, _ in batched.billed})}, online calls "
        f"{len(batched.online_billed)}, {line}"
    )
    ratio = cost(batched.ran.summary) / cost(base.summary)
    failed = check("batch", batched, base, twice, args.items)
    if not 0.50 <= ratio <= 0.52:
        failed.append(f"batch: cost ratio {ratio:.3f} outside 0.50-0.52")
    if not args.interrupt:
        print("interrupted on a worker: skipped (--no-interrupt)")
        finish(failed)
        return
    outcome = interrupted_job(
        items,
        workdir / "worker",
        delay=args.batch_delay,
        seed=args.seed,
        interrupt_round=args.interrupt_round,
        lease=args.lease,
        concurrency=args.concurrency,
    )
    if isinstance(outcome, str):
        print(f"interrupted on a worker: skipped: {outcome}")
        finish(failed)
        return
    interrupted, seconds, struck = outcome
    ran = interrupted.ran
    print(
        f"batch job on a worker ({args.concurrency} processes, Redis, SQLite), worker "
        f"SIGKILLed and Redis restarted empty at {struck:.1f} s (round "
        f"{args.interrupt_round}'s batch open), nobody resuming"
    )
    print(
        f"  done {done(ran.answers)} of {args.items}, differing from online "
        f"{differing(ran.answers, base.answers)}, rounds {ran.rounds}, wall {seconds:.1f} s"
    )
    print(
        f"  requests billed {len(interrupted.billed)}, distinct requests billed "
        f"{len({request(custom_id) for custom_id, _ in interrupted.billed})}, online "
        f"calls {len(interrupted.online_billed)}"
    )
    twice, line = paid_twice(interrupted.billed, asked)
    print(f"  {line}")
    finish(failed + check("interrupted", interrupted, base, twice, args.items))


def check(label: str, outcome: Outcome, base: Any, twice: int, items: int) -> list[str]:
    """What a batch job got wrong against the online one (nothing, when all is well)."""
    wrong = []
    if done(outcome.ran.answers) != items:
        wrong.append(f"{label}: {done(outcome.ran.answers)} of {items} items done")
    if differing(outcome.ran.answers, base.answers):
        wrong.append(f"{label}: {differing(outcome.ran.answers, base.answers)} answers differ")
    if twice:
        wrong.append(f"{label}: {twice} requests paid twice")
    if outcome.online_billed:
        wrong.append(f"{label}: {len(outcome.online_billed)} online calls")
    return wrong


def finish(failed: list[str]) -> None:
    """A figure that must hold and does not makes the run fail, saying which."""
    for reason in failed:
        print(f"CHECK FAILED: {reason}")
    if failed:
        sys.exit(1)


def request(custom_id: str) -> str:
    """The request a batch line stands for (``q<id>``): a custom id is its batch's id, then
    the request's."""
    return custom_id.rsplit("_", 1)[-1]


def paid_twice(billed: list[tuple[str, str]], asked: Counter[str]) -> tuple[int, str]:
    """Requests paid more often than asked, and the line saying so: custom ids billed twice,
    and bodies billed more often than the online job asked them (two items may ask one
    identical request, a tool selection for the same distortions: online pays it twice
    too)."""
    by_id = sum(
        count - 1 for count in Counter(request(custom_id) for custom_id, _ in billed).values()
    )
    by_body = sum(
        max(0, count - asked[body]) for body, count in Counter(body for _, body in billed).items()
    )
    return by_id + by_body, (
        f"paid twice: {by_id + by_body} ({by_id} custom ids billed "
        f"again, {by_body} bodies billed beyond the online job's asks)"
    )


if __name__ == "__main__":
    main()
