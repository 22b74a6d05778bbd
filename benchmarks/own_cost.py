"""The pipeline's own cost: CPU milliseconds per item in every process, every score cached.

One definition (issue 51): **own cost** = the CPU time of all the processes that run a job
(submitter, local runner or workers, Redis, PostgreSQL backends), added together, divided by
the job's items, on a second run: the builtin VLM backend's answers and every tool score come
from caches, so what is left is the pipeline itself (database, queue, state, logs).

Cases: a metric job (``--tools PIQE``) and an agent job (builtin backend), each

* local: ``submit`` then ``run_local`` (``--threads``) on embedded SQLite, in a child process;
* distributed: the job submitted from this process, fed and run by a default-queue worker
  and a tool (gpu-queue) worker (``agentic-iqa worker``, prefork, one child each, product
  defaults), on a Redis of its own (``redis-server`` on a spare port, so that nobody else's
  commands are in its CPU; ``--redis-url`` uses an existing one) and a scratch PostgreSQL
  database on ``--postgres-url``'s server.

Every row of a job names the same 64x64 photo (``scale.write_image``), so per-image work is
memoised after the first item; a warm-up job (``--warmup`` items) fills the caches and starts
every process first.  Per process group: CPU read from ``/proc/<pid>/stat`` (utime + stime)
before and after (:mod:`proc_cpu`); the workers are their process trees, Redis the pid its
``INFO server`` names, the PostgreSQL backends every pid ``pg_stat_activity`` lists for the
scratch database (sampled every ``--poll`` seconds, less this benchmark's own observing
connection; the server's shared background processes, which serve every database, are left
out).  Also: wall time per item, rows and bytes written per item (SQLite: row counts and file
size; PostgreSQL: ``pg_stat_user_tables`` inserts/updates/deletes, commits, ``pg_database_size``),
Redis commands and bytes received per item.

``--ceiling 1,2,4``: items/s of a metric job with every score cached (tools that cost nothing)
as workers of both queues are added, with the CPU share of Redis (of its one core) and of the
PostgreSQL backends (of the machine's cores); it stops once Redis or PostgreSQL saturates or
the machine has no idle CPU left, and prints what one Redis and one PostgreSQL would carry at
their measured CPU per item (1000 / Redis ms, cores x 1000 / PostgreSQL ms).  The job window
is raised to ``--ceiling-window`` there, so that the feeder's top-up is not the limit.

    nice -n 10 .venv/bin/python benchmarks/own_cost.py                     # 1k items
    nice -n 10 .venv/bin/python benchmarks/own_cost.py --items 100k --ceiling ''
    .venv/bin/python benchmarks/own_cost.py --cases metric --modes local --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import footprint  # noqa: E402
import proc_cpu  # noqa: E402
import scale  # noqa: E402

REPO = scale.REPO


def job_spec(case: str, manifest: Path) -> Any:
    """The job of ``case``: ``metric`` (PIQE, no agent) or ``agent`` (builtin backend)."""
    from agentic_iqa.jobs.spec import JobSpec

    return JobSpec.build(manifest=manifest, tools=["PIQE"] if case == "metric" else None)


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


# -- local: one child process, embedded SQLite -------------------------------------------------


def child_local(case: str, url: str, manifest: str, warm: str, threads: int) -> dict[str, Any]:
    """In a child: a warm-up job, then the measured one: submit and ``run_local`` on SQLite,
    this process's CPU read from /proc before, between and after."""
    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.db.engine import dispose_engines, make_engine
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.progress import progress
    from agentic_iqa.runtime.submission import submit

    agents = AgentsCache()
    engine = make_engine(url)
    run_local(engine, submit(engine, job_spec(case, Path(warm))), agents, workers=threads)
    dispose_engines(url)  # the last connection checkpoints the log: the file holds the rows
    path = Path(url.removeprefix("sqlite:///"))
    before = footprint.sqlite_footprint(path)
    engine = make_engine(url)
    me = os.getpid()
    cpu0, wall0 = proc_cpu.read_stat(me), time.perf_counter()
    job_id = submit(engine, job_spec(case, Path(manifest)))
    cpu1, wall1 = proc_cpu.read_stat(me), time.perf_counter()
    run_local(engine, job_id, agents, workers=threads)
    cpu2, wall2 = proc_cpu.read_stat(me), time.perf_counter()
    final = progress(engine, job_id)
    dispose_engines(url)
    after = footprint.sqlite_footprint(path)
    assert cpu0 and cpu1 and cpu2
    return {
        "items": final.total,
        "done": final.counts.get("done", 0),
        "wall_seconds": wall2 - wall0,
        "submit_seconds": wall1 - wall0,
        "cpu_seconds": {
            "submitter": cpu1.cpu_seconds - cpu0.cpu_seconds,
            "local runner": cpu2.cpu_seconds - cpu1.cpu_seconds,
        },
        "writes": {
            "rows": sum(after["rows"].values()) - sum(before["rows"].values()),
            "bytes": after["bytes"] - before["bytes"],
            "rows by table": {
                t: n - before["rows"].get(t, 0)
                for t, n in after["rows"].items()
                if n != before["rows"].get(t, 0)
            },
        },
    }


def run_local_case(case: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{folder / f'tool-cache-local-{case}.sqlite3'}",
        "AGENTIC_IQA_DEVICE": "cpu",
        "SCALE_CWD": str(folder),
    }
    env.pop("AGENTIC_IQA_BROKER_URL", None)
    with scale.fresh_database("sqlite", folder, args.postgres_url, REPO) as url:
        code = (
            f"import sys, json; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            "import own_cost; "
            "print(json.dumps(own_cost.child_local(*json.loads(sys.argv[1]))))"
        )
        payload = [case, url, str(args.manifest), str(args.warm_manifest), args.threads]
        result = subprocess.run(
            [sys.executable, "-c", code, json.dumps(payload)],
            env=env,
            cwd=str(folder),
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        raise RuntimeError(f"local {case} failed: {result.stderr[-3000:]}")
    measured: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    measured.update(case=case, mode="local (SQLite)", threads=args.threads)
    return measured


# -- distributed: workers, Redis and PostgreSQL ------------------------------------------------


@contextlib.contextmanager
def redis_server(args: argparse.Namespace, folder: Path) -> Iterator[str]:
    """``--redis-url``, or a ``redis-server`` of this benchmark's own (stopped afterwards)."""
    if args.redis_url:
        yield args.redis_url
        return
    from tests.workers.cluster import RedisServer

    server = RedisServer(folder)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def worker_env(args: argparse.Namespace, folder: Path, extra: dict[str, str]) -> dict[str, str]:
    """The product's defaults (the test cluster's short leases and ticks undone), one shared
    tool-score cache file."""
    return {
        "AGENTIC_IQA_VISIBILITY_TIMEOUT": "3600",
        "AGENTIC_IQA_UNACKED_RESTORE_INTERVAL": "10",
        "AGENTIC_IQA_LEASE_SECONDS": "120",
        "AGENTIC_IQA_FEED_INTERVAL": "2",
        "AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{folder / 'tool-cache-workers.sqlite3'}",
        **extra,
    }


def hand_to_workers(engine: Any, job_id: str, client: Any) -> None:
    """What ``eval submit`` does with a broker (``workers.tasks.start_job``, whose settings
    are this process's): the job marked as fed by the workers, and a feed message sent."""
    from agentic_iqa.db import jobs as job_store
    from agentic_iqa.db.engine import session_scope

    with session_scope(engine) as session:
        job_store.set_dispatch(session, job_id, "workers")
    client.send_task("agentic_iqa.feed_job", args=(job_id,), queue="default")


def run_job_metered(
    engine: Any,
    client: Any,
    observer: footprint.Observer,
    groups: dict[str, int],
    case: str,
    manifest: Path,
    poll: float,
) -> dict[str, Any]:
    """Submit ``manifest``'s job from this process and wait for it; CPU per group (worker
    process trees by their root pid, Redis, the database's backends) from /proc."""
    from agentic_iqa.runtime.progress import progress
    from agentic_iqa.runtime.submission import submit

    meters = {name: proc_cpu.CpuMeter() for name in [*groups, "Redis", "PostgreSQL backends"]}

    def pids() -> dict[str, list[int]]:
        stats = proc_cpu.all_stats()
        found = {name: proc_cpu.descendants(root, stats) for name, root in groups.items()}
        found["Redis"] = [observer.redis_pid]
        found["PostgreSQL backends"] = observer.backends()
        return found

    writes0, redis0 = observer.pg_writes(), observer.redis_counters()
    now = pids()
    for name, meter in meters.items():
        meter.start(now[name])
    me = os.getpid()
    machine0 = proc_cpu.machine_ticks()
    cpu0, wall0 = proc_cpu.read_stat(me), time.perf_counter()
    job_id = submit(engine, job_spec(case, manifest))
    hand_to_workers(engine, job_id, client)
    cpu1 = proc_cpu.read_stat(me)
    submitted = time.perf_counter()
    while True:
        for name, found in pids().items():
            meters[name].sample(found)
        state = progress(observer.engine, job_id)
        if state.status != "running":
            break
        time.sleep(poll)
    wall = time.perf_counter() - wall0
    for name, found in pids().items():
        meters[name].sample(found)
    machine = proc_cpu.busy_share(machine0, proc_cpu.machine_ticks())
    assert cpu0 and cpu1
    cpu = {"submitter": cpu1.cpu_seconds - cpu0.cpu_seconds}
    cpu.update({name: meter.seconds for name, meter in meters.items()})
    return {
        "job_id": job_id,
        "items": state.total,
        "done": state.counts.get("done", 0),
        "wall_seconds": wall,
        "submit_seconds": submitted - wall0,
        "machine_busy": machine,
        "cpu_seconds": cpu,
        "writes0": writes0,
        "redis0": redis0,
    }


def run_distributed_case(
    case: str, args: argparse.Namespace, folder: Path, redis_url: str
) -> dict[str, Any]:
    """The job on a default-queue and a tool worker, Redis and a scratch PostgreSQL database."""
    import redis as redis_client

    from agentic_iqa.db.engine import dispose_engines, make_engine
    from agentic_iqa.runtime.progress import wait
    from agentic_iqa.runtime.submission import submit
    from tests.workers.cluster import Cluster

    redis_client.Redis.from_url(redis_url).flushdb()
    with scale.fresh_database("postgres", folder, args.postgres_url, REPO) as url:
        cluster = Cluster(redis_url, url, folder, worker_env(args, folder, {}))
        observer = footprint.Observer(url, redis_url)
        try:
            names = {
                "coordinator (default worker)": cluster.start("default", "default", cli=True),
                "tool worker (gpu queue)": cluster.start("tool", "gpu", cli=True),
            }
            groups = {label: cluster.processes[host].pid for label, host in names.items()}
            engine = make_engine(url)
            warm = submit(engine, job_spec(case, args.warm_manifest))
            hand_to_workers(engine, warm, cluster.client)
            wait(engine, warm, poll=0.5, timeout=args.timeout)
            time.sleep(2)  # the warm-up's statistics reach pg_stat_* (flushed when idle)
            measured = run_job_metered(
                engine, cluster.client, observer, groups, case, args.manifest, args.poll
            )
            cluster.stop()  # exiting backends flush their statistics
            time.sleep(1.5)
            measured["writes"] = footprint.delta(observer.pg_writes(), measured.pop("writes0"))
            measured["redis"] = footprint.delta(observer.redis_counters(), measured.pop("redis0"))
        finally:
            cluster.stop()
            observer.close()
            dispose_engines(url)
    measured.update(case=case, mode="distributed (Celery, Redis, PostgreSQL)")
    return measured


# -- the ceiling of one Redis and one PostgreSQL ----------------------------------------------


def run_ceiling(args: argparse.Namespace, folder: Path, redis_url: str) -> dict[str, Any]:
    """Items/s of a metric job with every score cached as workers of both queues are added
    (``--ceiling``), until Redis, PostgreSQL or the machine's CPU saturates."""
    from agentic_iqa.db.engine import dispose_engines, make_engine
    from agentic_iqa.runtime.progress import wait
    from agentic_iqa.runtime.submission import submit
    from tests.workers.cluster import Cluster

    cores = os.cpu_count() or 1
    rows: list[dict[str, Any]] = []
    with scale.fresh_database("postgres", folder, args.postgres_url, REPO) as url:
        observer = footprint.Observer(url, redis_url)
        engine = make_engine(url)
        extra = {"AGENTIC_IQA_JOB_WINDOW": str(args.ceiling_window)}
        try:
            for count in args.ceiling:
                cluster = Cluster(redis_url, url, folder, worker_env(args, folder, extra))
                try:
                    hosts = [
                        cluster.start(f"w{index}", "default,gpu", cli=True)
                        for index in range(count)
                    ]
                    groups = {f"worker {i}": cluster.processes[h].pid for i, h in enumerate(hosts)}
                    warm = submit(engine, job_spec("metric", args.warm_manifest))
                    hand_to_workers(engine, warm, cluster.client)
                    wait(engine, warm, poll=0.5, timeout=args.timeout)
                    time.sleep(2)
                    measured = run_job_metered(
                        engine,
                        cluster.client,
                        observer,
                        groups,
                        "metric",
                        args.ceiling_manifest,
                        args.poll,
                    )
                finally:
                    cluster.stop()
                cpu = measured["cpu_seconds"]
                run_wall = measured["wall_seconds"] - measured["submit_seconds"]
                row = {
                    "workers": count,
                    "items": measured["items"],
                    "done": measured["done"],
                    "items_per_second": measured["done"] / run_wall,
                    "redis_core_share": cpu["Redis"] / run_wall,
                    "postgres_cores_share": cpu["PostgreSQL backends"] / run_wall / cores,
                    "workers_cores_share": sum(cpu[g] for g in groups) / run_wall / cores,
                    "machine_busy": measured["machine_busy"],
                    "redis_ms_per_item": proc_cpu.ms_per_item(cpu["Redis"], measured["done"]),
                    "postgres_ms_per_item": proc_cpu.ms_per_item(
                        cpu["PostgreSQL backends"], measured["done"]
                    ),
                }
                row["saturated"] = saturated(row)
                rows.append(row)
                print(f"  ceiling, {count} worker(s): {ceiling_line(row)}", flush=True)
                if row["saturated"]:
                    break
        finally:
            observer.close()
            dispose_engines(url)
    return {"cores": cores, "window": args.ceiling_window, "rows": rows}


def saturated(row: dict[str, Any]) -> str:
    """What ran out: Redis (one core), PostgreSQL (the cores), the machine, or nothing yet."""
    if row["redis_core_share"] >= 0.9:
        return "Redis"
    if row["postgres_cores_share"] >= 0.9:
        return "PostgreSQL"
    if row["machine_busy"] >= 0.95:
        return "machine CPU"
    return ""


def ceiling_line(row: dict[str, Any]) -> str:
    return (
        f"{row['items_per_second']:7.1f} items/s, Redis {100 * row['redis_core_share']:4.0f} % of "
        f"a core, PostgreSQL {100 * row['postgres_cores_share']:4.0f} % of the cores, workers "
        f"{100 * row['workers_cores_share']:4.0f} %, machine busy "
        f"{100 * row['machine_busy']:4.0f} %"
        + (f"  <- {row['saturated']} saturated" if row["saturated"] else "")
    )


# -- the figures -------------------------------------------------------------------------------


def derive(measured: dict[str, Any]) -> dict[str, Any]:
    """Per-item figures of one case: CPU ms per process group and in all, wall, writes."""
    items = measured["done"]
    cpu = {name: proc_cpu.ms_per_item(s, items) for name, s in measured["cpu_seconds"].items()}
    servers = [name for name in cpu if name in ("Redis", "PostgreSQL backends")]
    writes = measured.get("writes", {})
    return {
        "cpu_ms_per_item": cpu,
        "own_cost_ms_per_item": sum(cpu.values()),
        "servers_ms_per_item": sum(cpu[name] for name in servers) if servers else None,
        "wall_ms_per_item": proc_cpu.ms_per_item(measured["wall_seconds"], items),
        "writes_per_item": {
            key: proc_cpu.per_item(value, items)
            for key, value in writes.items()
            if isinstance(value, int)
        },
        "redis_per_item": {
            key: proc_cpu.per_item(value, items) for key, value in measured.get("redis", {}).items()
        },
    }


def case_table(measured: dict[str, Any]) -> str:
    figures = measured["per_item"]
    lines = [
        f"{measured['case']} job, {measured['mode']}: {measured['done']} of {measured['items']} "
        f"items done, wall {figures['wall_ms_per_item']:.2f} ms/item "
        f"({measured['wall_seconds']:.1f} s)",
        f"  {'process':<34}{'CPU ms/item':>12}",
    ]
    for name, value in figures["cpu_ms_per_item"].items():
        lines.append(f"  {name:<34}{value:>12.2f}")
    lines.append(f"  {'own cost (all processes)':<34}{figures['own_cost_ms_per_item']:>12.2f}")
    if figures["servers_ms_per_item"] is not None:
        lines.append(
            f"  {'  of which Redis + PostgreSQL':<34}{figures['servers_ms_per_item']:>12.2f}"
        )
    writes = ", ".join(f"{k} {v:.1f}" for k, v in figures["writes_per_item"].items())
    lines.append(f"  written per item: {writes}")
    if "rows by table" in measured.get("writes", {}):
        by_table = measured["writes"]["rows by table"]
        lines.append(
            "  rows by table: "
            + ", ".join(f"{t} {n / max(1, measured['done']):.1f}" for t, n in by_table.items())
        )
    if figures["redis_per_item"]:
        redis = ", ".join(f"{k} {v:.1f}" for k, v in figures["redis_per_item"].items())
        lines.append(f"  Redis per item: {redis}")
    return "\n".join(lines)


def report(
    results: list[dict[str, Any]], ceiling: dict[str, Any] | None, args: argparse.Namespace
) -> str:
    lines = [
        f"benchmarks/own_cost.py {' '.join(sys.argv[1:])}",
        f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, load (/proc/loadavg) "
        f"{args.load_before} before, {loadavg()} after; {args.items} items per job, warm-up "
        f"{args.warmup}; one 64x64 photo in every row",
        "own cost: CPU ms per item of all the processes below together, every score cached "
        "(a second run); CPU from /proc/<pid>/stat utime+stime; PostgreSQL backends: the pids "
        "pg_stat_activity lists for the scratch database (not the server's shared background "
        "processes)",
        "",
    ]
    for measured in results:
        lines += [case_table(measured), ""]
    header = f"{'case':<8}{'mode':<42}{'own ms/item':>12}{'Redis+PG ms':>12}{'wall ms/item':>13}"
    lines += ["summary", header, "-" * len(header)]
    for measured in results:
        figures = measured["per_item"]
        servers = figures["servers_ms_per_item"]
        lines.append(
            f"{measured['case']:<8}{measured['mode']:<42}{figures['own_cost_ms_per_item']:>12.2f}"
            + f"{'-' if servers is None else f'{servers:.2f}':>12}"
            + f"{figures['wall_ms_per_item']:>13.2f}"
        )
    if ceiling:
        lines += [
            "",
            f"ceiling: a metric job of {args.ceiling_items} items, every score cached, workers of "
            f"both queues (-c 1 each), job window {ceiling['window']}, {ceiling['cores']} cores",
        ]
        lines += [f"  {row['workers']} worker(s): {ceiling_line(row)}" for row in ceiling["rows"]]
        if ceiling["rows"]:
            last, cores = ceiling["rows"][-1], ceiling["cores"]
            lines.append(
                "  at their measured CPU per item, one Redis (one core) carries "
                f"{1000 / last['redis_ms_per_item']:.0f} items/s and this PostgreSQL "
                f"({cores} cores) {cores * 1000 / last['postgres_ms_per_item']:.0f}"
                " items/s"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--items", type=scale.parse_size, default=1000, help="1k, 100k ...")
    parser.add_argument("--warmup", type=int, default=100, help="items of the warm-up job")
    parser.add_argument("--cases", default="metric,agent")
    parser.add_argument("--modes", default="local,distributed")
    parser.add_argument("--threads", type=int, default=2, help="the local runner's threads")
    parser.add_argument("--ceiling", default="1,2,4", help="worker counts ('' for none)")
    parser.add_argument("--ceiling-items", type=scale.parse_size, default=1000)
    parser.add_argument("--ceiling-window", type=int, default=2000)
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--postgres-url", default=scale.DEFAULT_POSTGRES)
    parser.add_argument(
        "--redis-url", default="", help="an existing Redis (flushed); default: one of its own"
    )
    parser.add_argument("--out", type=Path, help="also write the tables to this file")
    parser.add_argument("--json", type=Path, help="also write every figure as JSON here")
    args = parser.parse_args(argv)
    args.load_before = loadavg()
    args.ceiling = [int(n) for n in args.ceiling.split(",") if n.strip()]
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    results: list[dict[str, Any]] = []
    ceiling = None
    with tempfile.TemporaryDirectory(prefix="own-cost-") as scratch:
        folder = Path(scratch)
        image = scale.write_image(folder)
        args.manifest = scale.write_manifest(folder, image, args.items)
        args.warm_manifest = scale.write_manifest(folder, image, args.warmup)
        args.ceiling_manifest = scale.write_manifest(folder, image, args.ceiling_items)
        with redis_server(args, folder) as redis_url:
            os.environ["AGENTIC_IQA_BROKER_URL"] = redis_url
            for case in cases:
                for mode in modes:
                    if mode == "local":
                        measured = run_local_case(case, args, folder)
                    else:
                        measured = run_distributed_case(case, args, folder, redis_url)
                    measured["per_item"] = derive(measured)
                    print(case_table(measured), flush=True)
                    results.append(measured)
            if args.ceiling and "distributed" in modes:
                ceiling = run_ceiling(args, folder, redis_url)
    text = report(results, ceiling, args)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.json:
        document = {
            "argv": sys.argv[1:],
            "load_before": args.load_before,
            "load_after": loadavg(),
            "cpus": os.cpu_count(),
            "cases": results,
            "ceiling": ceiling,
        }
        args.json.write_text(json.dumps(document, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
