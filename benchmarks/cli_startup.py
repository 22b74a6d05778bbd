"""Start-up time of the ``agentic-iqa`` command line: what a user waits for before any work.

Median wall-clock seconds of ``--runs`` runs (default 5) of each command, each a fresh process,
against ``python -c pass`` (the interpreter's own start) measured in the same process:

- ``agentic-iqa --help``
- ``agentic-iqa tools list``
- ``agentic-iqa eval status`` on a scratch SQLite database holding one small job (two items,
  submitted without running: the database is migrated once, before the timed runs)

    .venv/bin/python benchmarks/cli_startup.py [--runs 5]

Heavy modules (torch, pyiqa, scipy, matplotlib, pyarrow, celery, the VLM SDKs) should load only
in the commands that use them; ``tests/cli/test_startup.py`` checks that by module name, this
script gives the times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SETUP = """
import sys
from pathlib import Path
from agentic_iqa.db import make_engine, upgrade
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime import lifecycle
url, manifest = sys.argv[1], Path(sys.argv[2])
upgrade(url)
spec = JobSpec.build(manifest=manifest, name="bench", check_images=False)
print(lifecycle.submit(make_engine(url), spec))
"""


def cli() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m agentic_iqa``."""
    script = Path(sys.executable).with_name("agentic-iqa")
    return [str(script)] if script.exists() else [sys.executable, "-m", "agentic_iqa"]


def median_seconds(command: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            command,
            env=env,
            cwd=REPO,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="iqa-cli-startup-"))
    try:
        database = f"sqlite:///{workdir / 'jobs.sqlite3'}"
        env = {**os.environ, "AGENTIC_IQA_DATABASE_URL": database}
        env.pop("AGENTIC_IQA_BROKER_URL", None)
        image = REPO / "examples" / "i03_blurred.png"
        manifest = workdir / "manifest.jsonl"
        manifest.write_text(
            f'{{"image": "{image}", "id": "a"}}\n{{"image": "{image}", "id": "b"}}\n',
            encoding="utf-8",
        )
        subprocess.run(
            [sys.executable, "-c", SETUP, database, str(manifest)],
            env=env,
            cwd=REPO,
            check=True,
            stdout=subprocess.DEVNULL,
        )

        base = cli()
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "agentic-iqa --help": [*base, "--help"],
            "agentic-iqa tools list": [*base, "tools", "list"],
            "agentic-iqa eval status": [*base, "eval", "status"],
        }
        for command in commands.values():  # warm the file cache; not timed
            subprocess.run(
                command,
                env=env,
                cwd=REPO,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        results = {
            label: median_seconds(command, env, args.runs) for label, command in commands.items()
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    interpreter = results["python -c pass"]
    print(f"median of {args.runs} runs, {sys.executable} (Python {sys.version.split()[0]})")
    print(f"{'command':<26} {'seconds':>8} {'x python':>9}")
    for label, seconds in results.items():
        print(f"{label:<26} {seconds:8.3f} {seconds / interpreter:9.1f}")


if __name__ == "__main__":
    main()
