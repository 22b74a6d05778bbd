"""How close ``eval estimate``'s time is to the job it estimates, run for real right after.

For each kind of job (the builtin agent; a metric job, BRISQUE and NIQE by default), on the
same random sample of LIVE-C photos (``--sample N --seed S`` of the dataset's ``mos.csv``):

1. ``agentic-iqa eval estimate MANIFEST --sample N --seed S ... --json`` (it measures
   ``--measure`` items, cold, and extrapolates);
2. ``agentic-iqa eval submit`` with the very same flags, on a fresh results database and a
   fresh tool-score cache (cold, as the estimate assumes).

Each command runs in its own process, and each kind ``--repeat`` times (estimate, run,
estimate, run, ...: a shared machine's load drifts, so each estimate is paired with the run
right after it).  The figures: the estimate's wall time, the job's own wall time (submitted to
finished, as ``eval status`` counts it) and the command's, the ratio estimate / job (1.00 is
exact; the target is within 0.77-1.30), and the median ratio of each kind.  "old model" is what
the estimate before issue 40 said from the same JSON's figures: seconds per measured item x
items / workers, with no warm-up term (it also measured its items one at a time, which on a
busy machine made each slower than the job's: see docs/benchmarks.md).

    python benchmarks/estimate_accuracy.py ../shared/data/livec-dev \\
        --weights-dir ../shared/data/pyiqa-weights [--sample 40] [--seed 1] [--workers 2] \\
        [--repeat 3]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "agentic_iqa"]


def write_manifest(livec: Path, folder: Path) -> Path:
    """Every photo of the dataset with its MOS: the subset is the CLI's own --sample."""
    with (livec / "mos.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    path = folder / "manifest.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos"])
        for row in rows:
            writer.writerow([str(livec / "images" / row["image"]), row["mos"]])
    return path


def run(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    result = subprocess.run(
        [*CLI, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=3600
    )
    seconds = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"{' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    return result, seconds


def measure_kind(
    label: str, flags: list[str], manifest: Path, work: Path, options: argparse.Namespace
) -> dict[str, float]:
    """Estimate, then run, one kind of job; each on its own database and tool cache."""
    env = {
        **os.environ,
        "AGENTIC_IQA_WEIGHTS_DIR": str(options.weights_dir),
        "AGENTIC_IQA_DEVICE": "cpu",
    }
    env.pop("AGENTIC_IQA_BROKER_URL", None)
    job = [
        str(manifest),
        "--sample",
        str(options.sample),
        "--seed",
        str(options.seed),
        "--workers",
        str(options.workers),
        *flags,
    ]
    for phase in ("estimate", "submit"):
        folder = work / f"{label}-{phase}"
        folder.mkdir()
        env.update(
            AGENTIC_IQA_DATABASE_URL=f"sqlite:///{folder / 'results.sqlite3'}",
            XDG_CACHE_HOME=str(folder / "cache"),
        )
        if phase == "estimate":
            result, _ = run(
                ["eval", "estimate", *job, "--measure", str(options.measure), "--json"], env
            )
            estimate = json.loads(result.stdout)
        else:
            _, command_seconds = run(["eval", "submit", *job], env)
            status, _ = run(["eval", "status", "--json"], env)
            document = json.loads(status.stdout)
    job_seconds = document["finished"] / document["items_per_second"]
    old = (
        estimate["sample_seconds"]
        / estimate["sample_items"]
        * estimate["total_items"]
        / max(estimate["concurrency"], 1)
    )
    return {
        "estimate": estimate["wall_seconds"],
        "old": old,
        "job": job_seconds,
        "command": command_seconds,
        "warmup": estimate["warmup_seconds"],
        "per_item": estimate["seconds_per_item"],
        "items": document["total"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("livec", type=Path, help="the LIVE-C folder: mos.csv and images/")
    parser.add_argument("--weights-dir", type=Path, required=True)
    parser.add_argument("--sample", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--measure", type=int, default=5)
    parser.add_argument("--tools", default="BRISQUE,NIQE", help="the metric job's tools")
    parser.add_argument("--repeat", type=int, default=3, help="estimate-and-run pairs per kind")
    options = parser.parse_args()
    kinds = {
        "agent (builtin)": ["--model", "builtin"],
        f"metric ({options.tools})": ["--tools", options.tools],
    }
    print(
        f"{options.sample} LIVE-C photos (--seed {options.seed}), --workers "
        f"{options.workers}, {options.measure} measured, {os.cpu_count()} cores"
    )
    print(
        f"{'job':<24} {'estimate':>9} {'job time':>9} {'ratio':>6} {'old model':>10} "
        f"{'old ratio':>9} {'command':>8}  warm-up + per item"
    )
    with tempfile.TemporaryDirectory(prefix="estimate-accuracy-") as scratch:
        work = Path(scratch)
        manifest = write_manifest(options.livec, work)
        medians = {}
        for label, flags in kinds.items():
            ratios = []
            for attempt in range(options.repeat):
                figures = measure_kind(
                    f"{label.split()[0]}{attempt}", flags, manifest, work, options
                )
                ratios.append(figures["estimate"] / figures["job"])
                print(
                    f"{label:<24} {figures['estimate']:>8.1f}s {figures['job']:>8.1f}s "
                    f"{ratios[-1]:>6.2f} {figures['old']:>9.1f}s "
                    f"{figures['old'] / figures['job']:>9.2f} {figures['command']:>7.1f}s  "
                    f"{figures['warmup']:.1f} s + {figures['per_item']:.2f} s",
                    flush=True,
                )
            medians[label] = statistics.median(ratios)
        print(
            "median estimate / job: "
            + ", ".join(f"{label} {ratio:.2f}" for label, ratio in medians.items())
        )


if __name__ == "__main__":
    main()
