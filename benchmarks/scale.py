"""What each command costs as a job grows, and how fast its items run (issue 42).

For each database (``--db sqlite,postgres``) and each job size (``--sizes 1k,10k,100k,1M``)
on a fresh results database: a PIQE metric job whose every row names the same 64x64 photo
(one image file reused: the cost measured is the system's, not the disk's), then

* ``eval submit`` with the images checked, and with ``--no-check-images`` (a broker is set, a
  scratch Redis database, so submit stores the job and returns: no worker runs it);
* 5 % of the items marked done in bulk, through the product's own write path
  (:func:`bulk_done`: claim, begin, complete and finish each run as a worker would, with the
  one real item's outcome and a score that varies with the MOS), so the read commands see a
  job under way; the figures of those commands are on such items, at every size;
* ``eval status``, ``eval list`` (three jobs of n items), ``runs list``, ``runs show``,
  ``eval report``, ``eval export`` (CSV), ``eval compare A B``, ``eval cancel``,
  ``eval resume``: each a fresh process, its wall time and peak memory;
* the local runner's items per second (``local.run_local`` on the job, ``--workers`` 1
  and 2 threads, the tool-score cache off so that PIQE runs on every item), over
  ``--items`` items after 5 % were done, the first tenth left out as warm-up.

The fixed start-up cost of a command (``eval list`` on an empty database) is measured apart,
and each command's growth exponent is the slope of log(time less start-up) against log(n)
over the sizes run: 1 is linear, 0 flat.  With ``--baseline``, ratios are against another
checkout measured in the same invocation.

    .venv/bin/python benchmarks/scale.py                       # quick: 1k and 10k, SQLite
    git worktree add /tmp/scale-before <commit before>          # a baseline to compare with
    .venv/bin/python benchmarks/scale.py --sizes 1k,10k,100k,1M --db sqlite,postgres \
        --baseline /tmp/scale-before --out docs/measurements/scale-2026-11-27.txt

``--baseline DIR``: another checkout measured the same way, size by size right after this one
(so both see the same load on a shared machine), up to ``--baseline-up-to`` (100k); its seconds
and the ratio this/baseline sit beside this checkout's.  Each checkout runs in its own
processes, with its own code and migrations (this file is loaded into them by path).

PostgreSQL: ``--postgres-url`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``)
is where scratch databases are created and dropped; Redis: ``--redis-url`` (database 12 of
127.0.0.1 by default, flushed at the end).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_iqa.db.runs import finish_run, load_state

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "from agentic_iqa.cli import app; app()"]
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/12"
#: Items marked done in bulk before the read commands (the user's jobs were about 5 % done).
DONE_FRACTION = 0.05


def parse_size(text: str) -> int:
    """``1k`` = 1,000, ``1M`` = 1,000,000, ``2500`` = 2,500."""
    text = text.strip()
    scale = {"k": 1_000, "K": 1_000, "m": 1_000_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def size_label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


# -- the data ------------------------------------------------------------------------------------


def write_image(folder: Path) -> Path:
    """One 64x64 photo-like image, reused by every row."""
    import numpy as np
    from PIL import Image

    y, x = np.mgrid[0:64, 0:64].astype(np.float32)
    pixels = np.stack(
        [
            0.5 + 0.3 * np.sin(x / 7) * np.cos(y / 9),
            0.5 + 0.3 * np.cos((x + y) / 11),
            0.45 + 0.3 * np.sin(y / 5),
        ],
        axis=2,
    )
    noise = np.random.default_rng(0).normal(0, 0.03, pixels.shape)
    path = folder / "photo.png"
    Image.fromarray((np.clip(pixels + noise, 0, 1) * 255).astype(np.uint8)).save(path)
    return path


def write_manifest(folder: Path, image: Path, n: int) -> Path:
    path = folder / f"manifest-{size_label(n)}.csv"
    if path.exists():
        return path
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos", "id"])
        for index in range(n):
            writer.writerow([str(image), f"{20 + (index * 7919) % 6000 / 100:.2f}", f"i{index}"])
    return path


# -- databases -------------------------------------------------------------------------------------


@contextlib.contextmanager
def fresh_database(kind: str, folder: Path, admin_url: str, checkout: Path) -> Iterator[str]:
    """An empty results database of ``kind`` migrated by ``checkout``'s own migrations;
    yields its URL, drops it afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    env = {**os.environ, "PYTHONPATH": str(checkout)}
    if kind == "sqlite":
        path = folder / f"results-{uuid.uuid4().hex[:8]}.sqlite3"
        url = f"sqlite:///{path}"
        in_child(checkout, "migrate", env, url)
        try:
            yield url
        finally:
            for suffix in ("", "-wal", "-shm", ".reserve"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    name = f"scale_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        in_child(checkout, "migrate", env, url)
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def migrate(url: str) -> str:
    """In a child: bring the database to this checkout's head."""
    from agentic_iqa.db import upgrade

    upgrade(url)
    return url


# -- commands as a user runs them ---------------------------------------------------------------


@dataclass
class Timed:
    seconds: float
    peak_mb: float
    stdout: str
    code: int


def run_cli(args: Sequence[str], env: dict[str, str], *, check: bool = True) -> Timed:
    """``agentic-iqa ARGS`` in a fresh process: wall time and that process's peak memory."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [*CLI, *args],
        env=env,
        cwd=env.get("SCALE_CWD", str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = process.communicate()
    seconds = time.perf_counter() - started
    peak = _peak_of(process.pid)
    if check and process.returncode not in (0,):
        raise RuntimeError(
            f"agentic-iqa {' '.join(args)} exited {process.returncode}: {stderr.strip()[-2000:]}"
        )
    return Timed(seconds, peak, stdout, process.returncode)


_peaks: dict[int, float] = {}


def _peak_of(pid: int) -> float:
    return _peaks.pop(pid, float("nan"))


class _Popen(subprocess.Popen):  # type: ignore[type-arg]
    """A Popen that reaps its child with wait4, keeping the child's own peak memory."""

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        try:
            pid, status, usage = os.wait4(self.pid, wait_flags)
        except ChildProcessError:
            return self.pid, 0
        if pid == self.pid:
            _peaks[pid] = usage.ru_maxrss / 1024
        return pid, status


subprocess.Popen = _Popen  # type: ignore[misc]


def startup_seconds(env: dict[str, str], repeat: int = 3) -> float:
    """The fixed cost of any command: ``agentic-iqa eval list`` on an empty database (the
    imports, the settings, a connection), the median of ``repeat``."""
    return statistics.median(run_cli(["eval", "list"], env).seconds for _ in range(repeat))


# -- items done in bulk, through the product's write path ---------------------------------------


def bulk_done(url: str, job_id: str, count: int, *, chunk: int = 1000) -> float:
    """Mark ``count`` pending items done as a worker would (claim, begin, complete, finish:
    the same functions, many items a transaction); the first one is run for real and its
    outcome, its score varied with each item's MOS, stands for the others.  Returns seconds."""
    from sqlalchemy import select

    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.db import jobs as store
    from agentic_iqa.db import steps
    from agentic_iqa.db.engine import make_engine, session_scope
    from agentic_iqa.db.jobs import get_job
    from agentic_iqa.db.models import JobItem, StepRecord
    from agentic_iqa.runtime import embedded

    engine = make_engine(url)
    started = time.perf_counter()
    with session_scope(engine) as session:
        (claimed,) = store.claim_items(session, get_job(session, job_id, lock=True), 1)
        first = claimed.run_id
    embedded.walk_embedded(engine, AgentsCache(), first)
    with session_scope(engine) as session:
        output = session.scalar(
            select(StepRecord.output_json).where(
                StepRecord.run_id == first, StepRecord.status == "succeeded"
            )
        )
        final = load_state(session, first)
    template = json.loads(output or "{}")
    done = 1
    while done < count:
        with session_scope(engine) as session:
            job = get_job(session, job_id, lock=True)
            run_ids = [c.run_id for c in store.claim_items(session, job, min(chunk, count - done))]
            if not run_ids:
                break
            mos = dict(
                session.execute(
                    select(JobItem.run_id, JobItem.mos).where(JobItem.run_id.in_(run_ids))
                ).all()
            )
            for run_id in run_ids:
                update = _scored(template, mos.get(run_id))
                steps.first_attempt(
                    session, run_id, "tool_execution", 0, worker="bulk", queue="bulk"
                )
                steps.complete_step(
                    session, run_id, "tool_execution", 0, state=final, update=update, attempt=1
                )
                finish_run(session, run_id, state=final, state_saved=True)
        done += len(run_ids)
    return time.perf_counter() - started


def _scored(template: dict[str, Any], mos: float | None) -> dict[str, Any]:
    """The real item's step update with its tool scores moved with ``mos`` (and a little
    noise), so that the report has something to correlate."""
    update = json.loads(json.dumps(template))
    wobble = (hash(mos) % 1000) / 1000
    for entry in (update.get("executor_evidence") or {}).get("tool_logs") or []:
        if isinstance(entry.get("raw_score"), (int, float)) and mos is not None:
            entry["raw_score"] = 100 - float(mos) + 10 * wobble
            entry["normalized_score"] = 1 + 4 * float(mos) / 100
    return update


# -- the local runner's pace --------------------------------------------------------------------


def child_throughput(url: str, job_id: str, workers: int, items: int) -> dict[str, Any]:
    """In this process: run the job's items locally until ``items`` have ended (then cancel,
    so that the runner stops after those in flight), and return items per second after the
    first tenth."""
    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.db.engine import make_engine
    from agentic_iqa.runtime.lifecycle import cancel
    from agentic_iqa.runtime.local import run_local

    engine = make_engine(url)
    ended: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()

    cpu_at: list[float] = []

    def progress(count: int) -> None:
        with lock:
            now = time.perf_counter()
            ended.extend([now] * count)
            cpu_at.extend([time.process_time()] * count)
            if len(ended) >= items and not stop.is_set():
                stop.set()
                cancel(engine, job_id)

    started = time.perf_counter()
    run_local(engine, job_id, AgentsCache(), workers=workers, on_progress=progress)
    wall = time.perf_counter() - started
    # Up to the item that made ``items``: those in flight then end after the cancel, which
    # at a million items holds the database for seconds (it is no part of the pace).
    paced = min(len(ended), items)
    warm = max(1, paced // 10)
    if paced <= warm:
        return {
            "items": len(ended),
            "items_per_second": float("nan"),
            "wall_seconds": wall,
            "cpu_ms_per_item": float("nan"),
        }
    counted = paced - warm
    return {
        "items": len(ended),
        "wall_seconds": wall,
        "items_per_second": counted / max(1e-9, ended[paced - 1] - ended[warm - 1]),
        "cpu_ms_per_item": 1000 * (cpu_at[paced - 1] - cpu_at[warm - 1]) / counted,
    }


def in_child(checkout: Path, function: str, env: dict[str, str], *args: Any) -> Any:
    """``function(*args)`` of this file in a fresh process running ``checkout``'s code (its
    imports, torch among them, stay out of this process, whose memory every command it starts
    would otherwise inherit); returns what it returned, through JSON."""
    code = (
        f"import importlib.util, json, sys; sys.path.insert(0, {str(checkout)!r}); "
        f"spec = importlib.util.spec_from_file_location('scale', {__file__!r}); "
        "scale = sys.modules['scale'] = importlib.util.module_from_spec(spec); "
        "spec.loader.exec_module(scale); "
        f"print(json.dumps(getattr(scale, {function!r})(*json.loads(sys.argv[1]))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(args)],
        env={**env, "PYTHONPATH": str(checkout)},
        cwd=str(checkout),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{function} failed: {result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- one size on one database --------------------------------------------------------------------


@dataclass
class Measured:
    checkout: str
    db: str
    n: int
    seconds: dict[str, float] = field(default_factory=dict)
    peak_mb: dict[str, float] = field(default_factory=dict)
    pace: dict[int, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def first_run(url: str, job_id: str) -> str | None:
    """In a child: a run of the job (for ``runs show``)."""
    from sqlalchemy import select

    from agentic_iqa.db.engine import make_engine, read_scope
    from agentic_iqa.db.models import JobItem

    with read_scope(make_engine(url)) as session:
        return session.scalar(
            select(JobItem.run_id)
            .where(JobItem.job_id == job_id, JobItem.run_id.is_not(None))
            .limit(1)
        )


def measure(
    label: str,
    checkout: Path,
    kind: str,
    n: int,
    args: argparse.Namespace,
    folder: Path,
    image: Path,
) -> Measured:
    """Every command on a job of ``n`` items in a fresh database of ``kind``, run by
    ``checkout``'s code; then the local runner's pace."""
    measured = Measured(label, kind, n)
    manifest = write_manifest(folder, image, n)
    with fresh_database(kind, folder, args.postgres_url, checkout) as url:
        env = {
            **os.environ,
            "AGENTIC_IQA_DATABASE_URL": url,
            "AGENTIC_IQA_BROKER_URL": args.redis_url,
            "AGENTIC_IQA_TOOL_CACHE": "none",
            "XDG_CACHE_HOME": str(folder / "cache"),
            "PYTHONPATH": str(checkout),
            "SCALE_CWD": str(folder),
        }

        def timed(name: str, *command: str) -> Timed:
            result = run_cli(command, env)
            measured.seconds[name] = result.seconds
            measured.peak_mb[name] = result.peak_mb
            print(
                f"  {label:8} {kind:8} {size_label(n):>5} {name:24} {result.seconds:8.2f} s "
                f"{result.peak_mb:7.0f} MB",
                flush=True,
            )
            return result

        base = ["eval", "submit", str(manifest), "--tools", "PIQE"]
        if "submit" in args.commands:
            job_a = timed("submit", *base, "--name", "A").stdout.split()[-1]
        else:
            job_a = run_cli([*base, "--no-check-images", "--name", "A"], env).stdout.split()[-1]
        job_b = timed(
            "submit --no-check-images", *base, "--no-check-images", "--name", "B"
        ).stdout.split()[-1]
        job_c = run_cli([*base, "--no-check-images", "--name", "C"], env).stdout.split()[-1]
        marked = max(1, int(n * DONE_FRACTION))
        spent = sum(
            in_child(checkout, "bulk_done", env, url, job, marked) for job in (job_a, job_b, job_c)
        )
        measured.notes.append(
            f"{marked} items of each job marked done in bulk ({spent:.0f} s for the three)"
        )
        run = in_child(checkout, "first_run", env, url, job_a)
        commands = {
            "status": ["eval", "status", job_a],
            "list": ["eval", "list"],
            "runs list": ["runs", "list", "--job", job_a],
            "runs show": ["runs", "show", str(run)],
            "report": ["eval", "report", job_a, "--json"],
            "export": [
                "eval",
                "export",
                job_a,
                "--format",
                "csv",
                "-o",
                str(folder / "export.csv"),
            ],
            "compare": ["eval", "compare", job_a, job_b, "--json"],
        }
        for name, command in commands.items():
            if name in args.commands:
                timed(name, *command)
        if "cancel" in args.commands:
            timed("cancel", "eval", "cancel", job_c)
        if "resume" in args.commands:
            timed("resume", "eval", "resume", job_c)
        for workers in args.workers if n >= args.pace_from else ():
            pace = in_child(checkout, "child_throughput", env, url, job_b, workers, args.items)
            measured.pace[workers] = pace
            print(
                f"  {label:8} {kind:8} {size_label(n):>5} runner, {workers} worker(s): "
                f"{pace['items_per_second']:.1f} items/s, "
                f"{pace['cpu_ms_per_item']:.1f} ms CPU an item",
                flush=True,
            )
            with contextlib.suppress(Exception):  # the next pace needs the job running
                run_cli(["eval", "resume", job_b], env)
    return measured


# -- the figures ----------------------------------------------------------------------------------


def exponent(sizes: Sequence[int], seconds: Sequence[float], startup: float) -> float | None:
    """Slope of log(seconds less start-up) against log(n), least squares; None below 2 sizes."""
    points = [
        (math.log(n), math.log(max(t - startup, 0.01)))
        for n, t in zip(sizes, seconds, strict=True)
        if t == t
    ]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else None


def _cell(value: float | None, unit: str, width: int = 9) -> str:
    return f"{'-':>{width}}" if value is None or value != value else f"{value:{width - 1}.2f}{unit}"


def table(results: list[Measured], startups: dict[str, float], args: argparse.Namespace) -> str:
    """Per database: a line per command, a column per size (seconds, peak MB, and with a
    baseline its seconds and the ratio), and the growth exponent of each checkout."""
    labels = list(startups)
    lines = [
        f"benchmarks/scale.py {' '.join(sys.argv[1:])}",
        f"machine: {os.cpu_count()} CPUs (shared with other work: figures vary), "
        f"{time.strftime('%Y-%m-%d %H:%M')}",
        *(
            f"start-up of {label} (eval list on an empty database, median of 3): "
            f"{startups[label]:.2f} s"
            for label in labels
        ),
        "cells: seconds and peak MB"
        + (f"; {labels[1]} seconds, ratio {labels[0]}/{labels[1]}" if len(labels) > 1 else ""),
        "exponent: slope of log(seconds less start-up) against log(items)",
        "",
    ]
    for kind in args.db:
        sizes = sorted({m.n for m in results if m.db == kind})
        if not sizes:
            continue
        found = {(m.checkout, m.n): m for m in results if m.db == kind}
        width = 30 if len(labels) > 1 else 18
        header = (
            f"{kind:<26}"
            + "".join(f"{size_label(n):>{width}}" for n in sizes)
            + "".join(f"{'exp ' + label:>14}" for label in labels)
        )
        lines += [header, "-" * len(header)]
        names = list(dict.fromkeys(name for m in results if m.db == kind for name in m.seconds))
        for name in names:
            cells = []
            for n in sizes:
                new = found.get((labels[0], n))
                cell = _cell(new.seconds.get(name) if new else None, "s") + _cell(
                    new.peak_mb.get(name) if new else None, "M", 8
                )
                if len(labels) > 1:
                    old = found.get((labels[1], n))
                    before = old.seconds.get(name) if old else None
                    after = new.seconds.get(name) if new else None
                    cell += _cell(before, "s") + _cell(
                        after / before if after and before else None, "x", 8
                    )
                cells.append(f"{cell:>{width}}")
            slopes = []
            for label in labels:
                measured = [
                    (n, found[(label, n)].seconds.get(name, float("nan")))
                    for n in sizes
                    if (label, n) in found
                ]
                slope = exponent(
                    [n for n, _ in measured], [t for _, t in measured], startups[label]
                )
                slopes.append(f"{'-' if slope is None else f'{slope:.2f}':>14}")
            lines.append(f"{name:<26}{''.join(cells)}{''.join(slopes)}")
        for workers in args.workers:
            cells = []
            for n in sizes:
                paces = [
                    found[(label, n)].pace.get(workers, {}).get("items_per_second")
                    if (label, n) in found
                    else None
                    for label in labels
                ]
                cell = _cell(paces[0], "/", 9) + f"{'':8}"
                if len(labels) > 1:
                    cell += _cell(paces[1], "/", 9) + _cell(
                        paces[0] / paces[1] if paces[0] and paces[1] else None, "x", 8
                    )
                cells.append(f"{cell:>{width}}")
            if any(
                found.get((label, n)) and found[(label, n)].pace.get(workers)
                for label in labels
                for n in sizes
            ):
                lines.append(f"{f'runner items/s, {workers} thr':<26}{''.join(cells)}")
        for workers in args.workers:
            cpu = [
                (label, n, found[(label, n)].pace[workers]["cpu_ms_per_item"])
                for label in labels
                for n in sizes
                if (label, n) in found and workers in found[(label, n)].pace
            ]
            if cpu:
                lines.append(
                    f"  runner CPU ms an item, {workers} thread(s): "
                    + ", ".join(f"{label} {size_label(n)} {value:.1f}" for label, n, value in cpu)
                )
        for (label, n), m in sorted(found.items(), key=lambda entry: entry[0][1]):
            lines += [f"  {label} {size_label(n)}: {note}" for note in m.notes]
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="1k,10k", help="job sizes: 1k,10k,100k,1M")
    parser.add_argument("--db", default="sqlite", help="sqlite,postgres")
    parser.add_argument(
        "--commands",
        default="submit,status,list,runs list,runs show,report,export,compare,cancel,resume",
        help="which commands to time (comma-separated)",
    )
    parser.add_argument("--workers", default="1,2", help="runner threads to measure")
    parser.add_argument(
        "--items", type=int, default=1000, help="items the runner runs for its pace"
    )
    parser.add_argument(
        "--pace-from",
        type=parse_size,
        default=10_000,
        help="measure the runner's pace from this size up",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (a git worktree of an earlier commit) measured "
        "the same way, size by size, right after this one",
    )
    parser.add_argument(
        "--baseline-up-to",
        type=parse_size,
        default=100_000,
        help="the largest size the baseline runs",
    )
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS)
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    args.db = [kind.strip().replace("postgresql", "postgres") for kind in args.db.split(",")]
    args.commands = {name.strip() for name in args.commands.split(",")}
    args.workers = [int(w) for w in args.workers.split(",") if w.strip()]
    sizes = [parse_size(size) for size in args.sizes.split(",")]
    checkouts = {"this": REPO}
    if args.baseline is not None:
        checkouts["baseline"] = args.baseline.resolve()
    results: list[Measured] = []
    startups: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="scale-") as scratch:
        folder = Path(scratch)
        image = write_image(folder)
        for label, checkout in checkouts.items():
            empty = folder / f"empty-{label}.sqlite3"
            env = {
                **os.environ,
                "PYTHONPATH": str(checkout),
                "SCALE_CWD": str(folder),
                "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{empty}",
            }
            in_child(checkout, "migrate", env, env["AGENTIC_IQA_DATABASE_URL"])
            startups[label] = startup_seconds(env)
            print(f"start-up of {label}: {startups[label]:.2f} s", flush=True)
        try:
            for kind in args.db:
                for n in sizes:
                    for label, checkout in checkouts.items():
                        if label == "baseline" and n > args.baseline_up_to:
                            continue
                        results.append(measure(label, checkout, kind, n, args, folder, image))
        finally:
            with contextlib.suppress(Exception):
                import redis

                redis.Redis.from_url(args.redis_url).flushdb()
    text = table(results, startups, args)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
