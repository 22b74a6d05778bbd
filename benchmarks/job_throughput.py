"""Items per second of a dataset job, by execution path, against a bare pyiqa loop.

Paths, each on a fresh results database and a fresh tool-score cache, over the same photos
with the builtin backend and the offline tools:

* bare loop: the pyiqa metrics the job used, called on every photo in one process (baseline);
* local: ``eval submit`` without a broker (thread pool, same steps, SQLite);
* distributed with 1 and with 2 Celery workers (each consuming both queues) on real Redis;
* second run: the local job again with the first run's tool-score cache (recomputes nothing).

Each path runs in its own process; peak resident memory is reported per process (submitter
and workers).  Ratios are against the bare loop measured in the same invocation.

``--metric-job``: a metric job (``eval submit --tools``, default BRISQUE,NIQE,PIQE: no agent, no
VLM) instead, locally (SQLite) and with 1 and 2 workers on a scratch PostgreSQL database
(``--postgres-url``, created and dropped here), against the bare pyiqa loop over the same tools
and photos: the price of the database, the queue, leases and the score cache per image.

    python benchmarks/job_throughput.py ../shared/data/livec-dev \
        --weights-dir ../shared/data/pyiqa-weights [--limit 250] [--broker redis://...]
    python benchmarks/job_throughput.py ../shared/data/livec-dev \
        --weights-dir ../shared/data/pyiqa-weights --metric-job --limit 60
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from agentic_iqa.jobs.spec import JobSpec

REPO = Path(__file__).resolve().parent.parent


def write_manifest(livec: Path, folder: Path, limit: int) -> Path:
    with (livec / "mos.csv").open() as handle:
        rows = list(csv.DictReader(handle))[:limit]
    path = folder / "manifest.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos"])
        for row in rows:
            writer.writerow([str(livec / "images" / row["image"]), row["mos"]])
    return path


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- the paths, each run as `--mode NAME` in a subprocess --------------------------------------


def mode_bare(args: argparse.Namespace) -> dict:
    import pyiqa
    import torch

    if os.environ.get("AGENTIC_IQA_TORCH_THREADS"):  # the same threads as the job's tools
        torch.set_num_threads(int(os.environ["AGENTIC_IQA_TORCH_THREADS"]))
    with args.manifest.open() as handle:
        images = [row["image"] for row in csv.DictReader(handle)]
    tools = [t for t in args.tools.split(",") if t]
    # "name" or "name:float64": the dtype the loop feeds the metric (pyiqa's own is float32).
    metrics = {}
    for entry in tools:
        tool, _, dtype_name = entry.partition(":")
        dtype = getattr(torch, dtype_name or "float32")
        kwargs = {}
        weight = {"brisque": "brisque_svm_weights.pth", "niqe": "niqe_modelparameters.mat"}
        if tool in weight and args.weights_dir:
            kwargs["pretrained_model_path"] = str(args.weights_dir / weight[tool])
        metric = pyiqa.create_metric(tool, device=torch.device(args.device), **kwargs)
        metrics[entry] = (metric.to(dtype) if dtype != torch.float32 else metric, dtype)
    measure = None
    if args.with_measurements:  # what the builtin backend computes on each image itself
        from agentic_iqa.vlm.builtin.measure import measure
        from iqa_tools import load_image
    # Warm-up (not timed), as the job's: CUDA context, kernels and caches of the first calls.
    with torch.inference_mode():
        for image in _warmup_images(args.workdir, 2):
            pixels = pyiqa.utils.imread2tensor(str(image)).unsqueeze(0)
            for metric, dtype in metrics.values():
                float(metric(pixels.to(device=args.device, dtype=dtype)))
    started = time.perf_counter()
    with torch.inference_mode():
        for image in images:
            pixels = pyiqa.utils.imread2tensor(image).unsqueeze(0)
            for metric, dtype in metrics.values():
                float(metric(pixels.to(device=args.device, dtype=dtype)))
            if measure is not None:
                measure(load_image(image).pixels)
    seconds = time.perf_counter() - started
    return {"items": len(images), "seconds": seconds, "peak_mb": peak_mb()}


def mode_local(args: argparse.Namespace) -> dict:
    from agentic_iqa.agents.team import default_agents, metric_agents
    from agentic_iqa.cli.common import open_engine
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.progress import progress
    from agentic_iqa.runtime.submission import submit

    engine = open_engine(create=True)
    agents = metric_agents() if args.job_tools else default_agents()
    # Warm-up (not timed): models built and torch started, as for the bare loop's metrics.
    warm = submit(
        engine, JobSpec.build(manifest=_warmup_manifest(args.workdir, 2), tools=_job_tools(args))
    )
    run_local(engine, warm, agents, workers=1)
    with _profiled(args.profile):
        started = time.perf_counter()
        job_id = submit(engine, JobSpec.build(manifest=args.manifest, tools=_job_tools(args)))
        run_local(engine, job_id, agents, workers=args.threads)
        seconds = time.perf_counter() - started
    final = progress(engine, job_id)
    return {
        "items": final.total,
        "done": final.counts.get("done", 0),
        "seconds": seconds,
        "peak_mb": peak_mb(),
        "job_id": job_id,
    }


@contextlib.contextmanager
def _profiled(path: Path | None) -> Iterator[None]:
    """With ``--profile FILE``: a wall-clock profile of every thread (yappi) of the timed part,
    written as text, by own time and by total time, so that the job's time over the bare loop
    can be traced to functions."""
    if path is None:
        yield
        return
    import yappi

    yappi.set_clock_type("wall")
    yappi.start(builtins=False, profile_threads=True)
    try:
        yield
    finally:
        yappi.stop()
        stats = yappi.get_func_stats()
        with path.open("w") as handle:
            for key, title in (("tsub", "own time"), ("ttot", "total time")):
                stats.sort(key, "desc")
                handle.write(f"== by {title} (wall, all threads) ==\n")
                for entry in list(stats)[:60]:
                    where = f"{Path(entry.module).name}:{entry.lineno} {entry.name}"
                    handle.write(
                        f"{entry.ncall:>9} {entry.tsub:>9.3f} {entry.ttot:>9.3f}  {where}\n"
                    )
            handle.write("== threads ==\n")
            for thread in yappi.get_thread_stats():
                handle.write(
                    f"{thread.name:<24}{thread.id:>6}{thread.ttot:>10.3f}{thread.sched_count:>8}\n"
                )


def mode_distributed(args: argparse.Namespace) -> dict:
    import psutil
    import redis
    from celery import Celery

    from agentic_iqa.cli.common import open_engine
    from agentic_iqa.runtime.progress import progress, wait
    from agentic_iqa.runtime.submission import submit

    redis.Redis.from_url(args.broker).flushdb()
    engine = open_engine(create=True)
    workers = []
    # --workers N: N workers on both queues; --tool-workers T: T on the tool queue alone and
    # N on the default queue (a GPU box: one CUDA tool worker, CPU workers for the rest).
    queues = (
        ["default,gpu"] * args.workers
        if not args.tool_workers
        else ["default"] * args.workers + ["gpu"] * args.tool_workers
    )
    for index, queue in enumerate(queues):
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
            f"w{index}@bench",
            "-c",
            "1",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "WARNING",
        ]
        log = (args.workdir / f"worker{index}.log").open("wb")
        workers.append(
            subprocess.Popen(
                command,
                cwd=REPO,
                env=os.environ.copy(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    client = Celery(broker=args.broker)
    try:
        deadline = time.monotonic() + 90
        while len(client.control.ping(timeout=0.5)) < len(queues):
            if time.monotonic() > deadline:
                raise TimeoutError("workers did not start")
        # Warm-up (not timed): every worker process imports torch and builds its models, as
        # the bare loop's metrics are built before its clock starts.
        warm_up = _warmup_manifest(args.workdir, 2 * len(queues))
        warm = submit(engine, JobSpec.build(manifest=warm_up, tools=_job_tools(args)))
        client.send_task("agentic_iqa.feed_job", args=(warm,), queue="default")
        wait(engine, warm, poll=0.2, timeout=300)
        started = time.perf_counter()
        job_id = submit(engine, JobSpec.build(manifest=args.manifest, tools=_job_tools(args)))
        client.send_task("agentic_iqa.feed_job", args=(job_id,), queue="default")
        peaks: dict[int, float] = {}
        while progress(engine, job_id).status == "running":
            for worker in workers:
                for process in [
                    psutil.Process(worker.pid),
                    *psutil.Process(worker.pid).children(recursive=True),
                ]:
                    try:
                        rss = process.memory_info().rss / 2**20
                    except psutil.Error:
                        continue
                    peaks[process.pid] = max(peaks.get(process.pid, 0.0), rss)
            time.sleep(0.5)
        seconds = time.perf_counter() - started
        final = progress(engine, job_id)
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=60)
    return {
        "items": final.total,
        "done": final.counts.get("done", 0),
        "seconds": seconds,
        "peak_mb": peak_mb(),
        "worker_peak_mb": max(peaks.values(), default=0.0),
    }


def _warmup_images(folder: Path, count: int) -> list[Path]:
    """Photo-sized noise images (not in the timed set, so its cache stays cold)."""
    import numpy as np
    from PIL import Image

    images = []
    for index in range(count):
        image = folder / f"warmup-{index}.png"
        if not image.exists():
            pixels = np.random.default_rng(index).integers(0, 256, (500, 500, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(image)
        images.append(image)
    return images


def _warmup_manifest(folder: Path, count: int) -> Path:
    """A manifest of :func:`_warmup_images`."""
    path = folder / "warmup.csv"
    path.write_text("image\n" + "\n".join(map(str, _warmup_images(folder, count))) + "\n")
    return path


def _job_tools(args: argparse.Namespace) -> list[str] | None:
    """A metric job's tools (``--job-tools``), or None for an agent job."""
    return [t for t in args.job_tools.split(",") if t] or None


MODES = {"bare": mode_bare, "local": mode_local, "distributed": mode_distributed}


def run_mode(mode: str, args: argparse.Namespace, env: dict[str, str], **extra: str) -> dict:
    command = [
        sys.executable,
        __file__,
        str(args.livec),
        "--mode",
        mode,
        "--manifest",
        str(args.manifest),
        "--workdir",
        str(args.workdir),
        "--broker",
        args.broker,
        "--threads",
        str(args.threads),
        "--device",
        args.device,
        "--tool-workers",
        str(args.tool_workers),
    ]
    for key, value in extra.items():
        command += [f"--{key.replace('_', '-')}", value]
    if args.weights_dir:
        command += ["--weights-dir", str(args.weights_dir)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("livec", type=Path)
    parser.add_argument("--weights-dir", type=Path, default=None)
    parser.add_argument("--limit", type=int, default=250)
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mode", choices=sorted(MODES), default=None)
    parser.add_argument("--manifest", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--tool-workers",
        type=int,
        default=0,
        help="distributed: this many tool-queue-only workers, and --workers "
        "default-queue workers (0: --workers workers on both queues)",
    )
    parser.add_argument(
        "--scaling", default="1,2", help="metric job: worker counts to run distributed"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=1,
        help="AGENTIC_IQA_TOOL_BATCH_SIZE for the workers (needs --tool-workers)",
    )
    parser.add_argument("--tools", default="")
    parser.add_argument("--job-tools", default="")
    parser.add_argument(
        "--with-measurements",
        default="",
        help="bare loop: also take the builtin backend's own measurements",
    )
    parser.add_argument(
        "--metric-job",
        action="store_true",
        help="a metric job (--metric-tools) instead of the agent",
    )
    parser.add_argument("--metric-tools", default="BRISQUE,NIQE,PIQE")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (bare loop and tools)")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="metric job: write a wall-clock profile of the local run (yappi) to this file",
    )
    parser.add_argument(
        "--local-batch",
        type=int,
        default=0,
        help="metric job: also the local job with AGENTIC_IQA_TOOL_BATCH_SIZE=N",
    )
    parser.add_argument(
        "--local-only",
        action="store_true",
        help="metric job: no distributed rows (no broker or PostgreSQL needed)",
    )
    parser.add_argument(
        "--postgres-url",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/test",
        help="server to create the metric job's scratch databases on ('': SQLite files instead)",
    )
    args = parser.parse_args()
    # The manifest lives in a temporary folder: its paths must not be relative to ours.
    args.livec = args.livec.resolve()
    args.weights_dir = args.weights_dir.resolve() if args.weights_dir else None
    if args.mode:
        print(json.dumps(MODES[args.mode](args)))
        return
    if args.metric_job:
        metric_main(args)
        return

    args.workdir = Path(tempfile.mkdtemp(prefix="iqa-jobs-"))
    args.manifest = write_manifest(args.livec, args.workdir, args.limit)
    base_env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_BROKER_URL": args.broker,
    }
    if args.weights_dir:
        base_env["AGENTIC_IQA_WEIGHTS_DIR"] = str(args.weights_dir)

    def fresh(name: str) -> dict[str, str]:
        return {
            **base_env,
            "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{args.workdir / (name + '.sqlite3')}",
            "AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{args.workdir / (name + '-cache.sqlite3')}",
        }

    local_env = {k: v for k, v in fresh("local").items() if k != "AGENTIC_IQA_BROKER_URL"}
    results = {"local (2 threads)": run_mode("local", args, local_env)}
    tools = _tools_used(local_env["AGENTIC_IQA_DATABASE_URL"])
    results["bare pyiqa loop"] = run_mode("bare", args, base_env, tools=",".join(tools))
    results["bare loop + builtin measurements"] = run_mode(
        "bare", args, base_env, tools=",".join(tools), with_measurements="1"
    )
    results["second run (cache)"] = run_mode("local", args, local_env)
    for count in (1, 2):
        results[f"distributed, {count} worker(s)"] = run_mode(
            "distributed", args, fresh(f"dist{count}"), workers=str(count)
        )

    base = results["bare loop + builtin measurements"]
    base_rate = base["items"] / base["seconds"]
    print(
        f"{args.limit} LIVE-C photos, builtin backend, tools used: {', '.join(tools)}; "
        f"{os.cpu_count()} CPU cores; ratios against the bare loop + builtin measurements"
    )
    print(f"{'path':<34}{'items/s':>9}{'ratio':>8}{'peak MB':>10}{'worker MB':>11}")
    for label, result in results.items():
        rate = result["items"] / result["seconds"]
        print(
            f"{label:<34}{rate:>9.2f}{rate / base_rate:>8.2f}{result['peak_mb']:>10.0f}"
            f"{result.get('worker_peak_mb', 0):>11.0f}"
        )


def metric_main(args: argparse.Namespace) -> None:
    """A metric job locally and on 1 and 2 workers (PostgreSQL), against the bare loop."""
    from iqa_tools import load_catalog

    args.workdir = Path(tempfile.mkdtemp(prefix="iqa-metric-jobs-"))
    args.manifest = write_manifest(args.livec, args.workdir, args.limit)
    tools = [t.strip() for t in args.metric_tools.split(",") if t.strip()]
    catalog = load_catalog()
    pyiqa_names = [catalog.get(name).pyiqa_name for name in tools]
    base_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "AGENTIC_IQA_DEVICE": args.device,
        "AGENTIC_IQA_BROKER_URL": args.broker,
        "AGENTIC_IQA_TOOL_BATCH_SIZE": str(args.batch_size),
    }
    if args.weights_dir:
        base_env["AGENTIC_IQA_WEIGHTS_DIR"] = str(args.weights_dir)

    def fresh(name: str, database_url: str) -> dict[str, str]:
        return {
            **base_env,
            "AGENTIC_IQA_DATABASE_URL": database_url,
            "AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{args.workdir / (name + '-cache.sqlite3')}",
        }

    job_tools = ",".join(tools)
    # Two yardsticks: pyiqa's default loop, what a user writes (float32 input; NIQE casts to
    # float64 itself), and the same loop with pyiqa in each tool's catalog precision (BRISQUE,
    # NIQE, PIQE in float64, for CPU/GPU agreement), the numerics the job's scores match.
    same_numerics = ",".join(
        f"{name}:{catalog.get(tool).precision}"
        for name, tool in zip(pyiqa_names, tools, strict=True)
    )
    results = {
        "pyiqa default loop": run_mode("bare", args, base_env, tools=",".join(pyiqa_names)),
        "pyiqa loop, catalog precision": run_mode("bare", args, base_env, tools=same_numerics),
    }
    local_env = {
        k: v
        for k, v in fresh("local", f"sqlite:///{args.workdir / 'local.sqlite3'}").items()
        if k != "AGENTIC_IQA_BROKER_URL"
    }
    local_env["AGENTIC_IQA_TOOL_BATCH_SIZE"] = "1"
    results["metric job, local (SQLite)"] = run_mode("local", args, local_env, job_tools=job_tools)
    if args.local_batch > 1:  # the same job with its tool steps scored together
        batched_env = {
            k: v
            for k, v in fresh(
                "local-batch", f"sqlite:///{args.workdir / 'local-batch.sqlite3'}"
            ).items()
            if k != "AGENTIC_IQA_BROKER_URL"
        }
        batched_env["AGENTIC_IQA_TOOL_BATCH_SIZE"] = str(args.local_batch)
        results[f"metric job, local, tool batch {args.local_batch}"] = run_mode(
            "local", args, batched_env, job_tools=job_tools
        )
    # The same job again: every score now comes from the cache, so what is left is the job's
    # own cost per item (database, state, logs), the ceiling on this machine.
    results["  again, every score cached"] = run_mode("local", args, local_env, job_tools=job_tools)
    if args.profile:  # a run of its own: the profiler's overhead must not touch the figures
        run_mode(
            "local",
            args,
            {
                **local_env,
                "AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{args.workdir / 'profile-cache.sqlite3'}",
            },
            job_tools=job_tools,
            profile=str(args.profile.resolve()),
        )
    shape = f"+{args.tool_workers} tool, batch {args.batch_size}" if args.tool_workers else ""
    for count in () if args.local_only else [int(n) for n in args.scaling.split(",")]:
        # Each worker's torch gets its share of the cores (docs/benchmarks.md: OpenMP threads
        # of several processes spin against each other), unless the caller chose.
        share = {
            "AGENTIC_IQA_TORCH_THREADS": os.environ.get(
                "AGENTIC_IQA_TORCH_THREADS", str(max(1, (os.cpu_count() or 1) // count))
            )
        }
        with _scratch_database(args, count) as url:
            kind = "PG" if url.startswith("postgresql") else "SQLite"
            results[f"metric job, {count}{shape} worker(s) ({kind})"] = run_mode(
                "distributed",
                args,
                {**fresh(f"dist{count}", url), **share},
                workers=str(count),
                job_tools=job_tools,
            )

    default = results["pyiqa default loop"]
    default_rate = default["items"] / default["seconds"]
    same = results["pyiqa loop, catalog precision"]
    same_rate = same["items"] / same["seconds"]
    print(
        "ratios against pyiqa's default loop (what a user runs) and against the same loop in "
        "the catalog's precision (the job's numerics), both measured in this invocation"
    )
    print(
        f"{args.limit} LIVE-C photos, metric job {', '.join(tools)} (pyiqa "
        f"{', '.join(pyiqa_names)}), {args.device}, {os.cpu_count()} cores, {args.threads} local "
        "threads, workers -c 1 ("
        + ("default + gpu queues apart" if args.tool_workers else "each on queues default,gpu")
        + "), warmed up"
    )
    print(
        f"{'path':<48}{'items':>6}{'done':>6}{'items/s':>9}{'ms/item':>9}{'vs default':>11}"
        f"{'vs same':>9}{'peak MB':>10}{'worker MB':>11}"
    )
    for label, result in results.items():
        rate = result["items"] / result["seconds"]
        print(
            f"{label:<48}{result['items']:>6}{result.get('done', result['items']):>6}"
            f"{rate:>9.2f}{1000 / rate:>9.1f}{rate / default_rate:>11.2f}{rate / same_rate:>9.2f}"
            f"{result['peak_mb']:>10.0f}{result.get('worker_peak_mb', 0):>11.0f}"
        )


@contextlib.contextmanager
def _scratch_database(args: argparse.Namespace, count: int) -> Iterator[str]:
    """PostgreSQL (``--postgres-url``), or with ``--postgres-url ''`` a migrated SQLite file
    (a machine without PostgreSQL, such as a lent GPU box)."""
    if args.postgres_url:
        with _scratch_postgres(args.postgres_url) as url:
            yield url
        return
    from agentic_iqa.db import upgrade

    url = f"sqlite:///{args.workdir / f'dist{count}-{time.time_ns()}.sqlite3'}"
    upgrade(url)
    yield url


@contextlib.contextmanager
def _scratch_postgres(admin_url: str) -> Iterator[str]:
    """A new migrated database on the server, dropped afterwards."""
    import uuid

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from agentic_iqa.db import upgrade

    name = f"agentic_iqa_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        upgrade(url)
        yield url
    finally:
        from agentic_iqa.db import dispose_engines

        dispose_engines(url)
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _tools_used(database_url: str) -> list[str]:
    from sqlalchemy import create_engine, text

    from iqa_tools import load_catalog

    catalog = load_catalog()
    with create_engine(database_url).connect() as connection:
        names = connection.execute(text("SELECT DISTINCT tool_name FROM tool_logs")).scalars()
        # In each tool's catalog precision (float64 for BRISQUE, NIQE, PIQE): the job's numerics.
        return sorted(
            f"{catalog.get(name).pyiqa_name}:{catalog.get(name).precision}" for name in names
        )


if __name__ == "__main__":
    main()
