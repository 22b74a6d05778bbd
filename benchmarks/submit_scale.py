"""Seconds and peak memory of storing a metric job (``eval submit``'s part before anything
runs), from 10k to 1M rows, on SQLite and PostgreSQL, with the images checked or not.

Every case runs in its own process (its peak RSS is its own): a fresh SQLite file, or a
scratch PostgreSQL database created from ``--postgres-url`` and dropped after.  The manifest is
a CSV (``id``, ``image``, ``mos``) of PIQE metric items over 64x64 PNG photos: ``--images``
distinct files used in turn (one file is enough when the images are not checked; the checks
decode each row's file whatever it is).  Prints one line per case and, with ``--json``, the
figures as JSON.  Timed: ``submission.submit`` from the call to its return (every row stored);
``startup_rss_mb`` is the process's memory before the call, so ``peak_rss_mb`` above it is the
submit's own.

    python benchmarks/submit_scale.py --rows 10000 100000 --databases sqlite postgres \
        --checks on off [--images 300] [--postgres-url postgresql+psycopg://postgres@127.0.0.1/test]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def photos(folder: Path, count: int) -> list[Path]:
    """``count`` distinct 64x64 PNGs (smooth gradients with noise: every tool reads them)."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:64, 0:64].astype(np.float32)
    for index in range(count):
        path = folder / f"p{index:05d}.png"
        if not path.exists():
            base = 128 + 60 * np.sin(x / (7 + index % 13)) * np.cos(y / (5 + index % 11))
            pixels = np.clip(base[:, :, None] + rng.normal(0, 12, (64, 64, 3)), 0, 255)
            Image.fromarray(pixels.astype(np.uint8)).save(path)
        paths.append(path)
    return paths


def manifest(folder: Path, rows: int, images: list[Path]) -> Path:
    """A CSV of ``rows`` items with their own ids, cycling over ``images``."""
    path = folder / f"manifest-{rows}-{len(images)}.csv"
    if not path.exists():
        with path.open("w") as handle:
            handle.write("id,image,mos\n")
            names = [str(image) for image in images]
            for index in range(rows):
                handle.write(f"r{index},{names[index % len(names)]},{(index % 97) / 24:.3f}\n")
    return path


def rss_mb() -> float:
    """The process's resident memory now (Linux)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def case(args: argparse.Namespace) -> dict:
    """One submit, in this process."""
    from sqlalchemy import func, select

    from agentic_iqa.db import upgrade
    from agentic_iqa.db.engine import make_engine, read_scope
    from agentic_iqa.db.models import JobItem
    from agentic_iqa.jobs.spec import JobSpec
    from agentic_iqa.runtime.submission import submit

    upgrade(args.url)
    engine = make_engine(args.url)
    spec = JobSpec.build(manifest=args.manifest, tools=["PIQE"], check_images=args.check)
    startup = rss_mb()
    started = time.perf_counter()
    job_id = submit(engine, spec)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with read_scope(engine) as session:
        stored = session.scalar(
            select(func.count()).select_from(JobItem).where(JobItem.job_id == job_id)
        )
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(peak, 1),
        "startup_rss_mb": round(startup, 1),
        "items": stored,
    }


def scratch_postgres(admin: str) -> tuple[str, str]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"submit_scale_{uuid.uuid4().hex[:10]}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return name, make_url(admin).set(database=name).render_as_string(hide_password=False)


def drop_postgres(admin: str, name: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument(
        "--databases", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"]
    )
    parser.add_argument("--checks", nargs="+", default=["on", "off"], choices=["on", "off"])
    parser.add_argument(
        "--images", type=int, default=300, help="distinct image files the checked rows cycle over"
    )
    parser.add_argument(
        "--postgres-url", default=os.environ.get("AGENTIC_IQA_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    )
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "submit-scale"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--case", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--manifest", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(case(args)))
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    results = []
    for rows in args.rows:
        for checks in args.checks:
            files = photos(args.workdir / "photos", args.images if checks == "on" else 1)
            source = manifest(args.workdir, rows, files)
            for database in args.databases:
                name = None
                if database == "sqlite":
                    path = args.workdir / f"case-{uuid.uuid4().hex[:8]}.sqlite3"
                    url = f"sqlite:///{path}"
                else:
                    name, url = scratch_postgres(args.postgres_url)
                command = [
                    sys.executable,
                    __file__,
                    "--case",
                    "--url",
                    url,
                    "--manifest",
                    str(source),
                ] + (["--check"] if checks == "on" else [])
                try:
                    done = subprocess.run(
                        command,
                        cwd=REPO,
                        capture_output=True,
                        text=True,
                        env={**os.environ, "PYTHONPATH": str(REPO)},
                    )
                finally:
                    if name is not None:
                        drop_postgres(args.postgres_url, name)
                    else:
                        for suffix in ("", "-wal", "-shm"):
                            Path(f"{path}{suffix}").unlink(missing_ok=True)
                if done.returncode:
                    sys.exit(f"case {rows} {database} checks {checks} failed:\n{done.stderr}")
                result = {
                    "rows": rows,
                    "database": database,
                    "checks": checks,
                    **json.loads(done.stdout.strip().splitlines()[-1]),
                }
                results.append(result)
                print(
                    f"{rows:>8} rows  {database:<8} checks {checks:<3}  "
                    f"{result['seconds']:>8.2f} s  peak {result['peak_rss_mb']:>7.1f} MB "
                    f"(startup {result['startup_rss_mb']:.1f})  items {result['items']}",
                    flush=True,
                )
    if args.json:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
