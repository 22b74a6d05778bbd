"""Camera-sized photos through a real metric job: memory, time and scores per photo.

For each size (12, 24, 50, 100 MP by default), one generated photo (a mosaic of the shared
LIVE-C photos, as ``benchmarks/large_photos.py`` makes them; smooth noise without them) is
scored with BRISQUE+NIQE+PIQE three ways, each in its own subprocess:

* ``job``: ``agentic-iqa eval submit DIR --tools BRISQUE,NIQE,PIQE --workers 1`` with the
  defaults (no broker: the job runs in that process; memory budget per tool call, tiles), its
  peak RSS read with ``os.wait4``; seconds are the command's wall time (start-up, database,
  models and all three tools) per photo;
* ``pyiqa``: pyiqa's own loop, one subprocess per tool (``large_photos.child``), skipped above
  the size where its estimated peak exceeds the memory available; seconds are the sum over
  the three tools of one scoring call each (models built outside the timing);
* ``whole``: the registry without tiles, the whole-image computation the job's scores must
  equal (same skip rule).

The last columns are the largest relative difference between the job's raw scores and the
whole-image ones (or pyiqa's, where the whole-image way was skipped, marked ``p``).

    python benchmarks/large_photos_job.py --sizes 12,24
    python benchmarks/large_photos_job.py --sizes 50,100 --ways job,whole
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import large_photos  # noqa: E402  (the sibling benchmark: mosaics, pyiqa and whole-image ways)

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("BRISQUE", "NIQE", "PIQE")


def make_photo(megapixels: float, path: Path, photos: Path, seed: int) -> tuple[int, int]:
    sources = (
        sorted(p for p in photos.iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png", ".bmp"})
        if photos.is_dir()
        else []
    )
    if sources:
        return large_photos.mosaic(megapixels, sources, path, seed)
    sys.path.insert(0, str(REPO / "scripts"))
    from measure_tool_memory import photo

    return photo(megapixels, path, seed)


def run_job(folder: Path, workdir: Path, weights: Path | None) -> dict:
    """The metric job in a subprocess; its peak RSS, wall time and raw scores."""
    env = {
        **os.environ,
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{workdir / 'runs.sqlite3'}",
        "AGENTIC_IQA_TOOL_CACHE": "none",
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_BROKER_URL": "",
    }
    env.pop("AGENTIC_IQA_MAX_PIXELS", None)
    env.pop("AGENTIC_IQA_TOOL_MEMORY", None)
    if weights is not None:
        env["AGENTIC_IQA_WEIGHTS_DIR"] = str(weights)
    cli = (
        [sys.executable, "-m", "agentic_iqa.cli"]
        if (REPO / "agentic_iqa/cli/__main__.py").exists()
        else [str(Path(sys.executable).parent / "agentic-iqa")]
    )
    started = time.perf_counter()
    child = subprocess.Popen(
        [*cli, "eval", "submit", str(folder), "--tools", ",".join(TOOLS), "--workers", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=workdir,
    )
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    stdout, stderr = child.stdout.read(), child.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"eval submit failed: {stderr.strip()[-600:]}")
    job = stdout.strip().splitlines()[0].split()[0]
    export = workdir / "export.csv"
    subprocess.run(
        [*cli, "eval", "export", job, "--format", "csv", "-o", str(export)],
        env=env,
        check=True,
        capture_output=True,
        cwd=workdir,
    )
    with export.open() as handle:
        (row,) = list(csv.DictReader(handle))
    scores = {tool: float(row[f"raw:{tool}"]) for tool in TOOLS if row.get(f"raw:{tool}")}
    if len(scores) != len(TOOLS):
        raise RuntimeError(f"the job did not score every tool: {row}")
    return {"rss_gb": usage.ru_maxrss / 1024**2, "seconds": seconds, "raw": scores}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="12,24,50,100")
    parser.add_argument("--ways", default="job,pyiqa,whole")
    parser.add_argument("--photos", type=Path, default=large_photos.DATA / "livec-dev" / "images")
    parser.add_argument("--weights-dir", type=Path, default=large_photos.DATA / "pyiqa-weights")
    parser.add_argument(
        "--max-gb",
        type=float,
        default=None,
        help="skip pyiqa / whole where their estimated peak is above this "
        "(default: 80%% of the memory available at start)",
    )
    args = parser.parse_args()
    weights = args.weights_dir if args.weights_dir.is_dir() else None
    ways = args.ways.split(",")
    budget = args.max_gb if args.max_gb is not None else 0.8 * large_photos.available_gb()
    options = argparse.Namespace(device="cpu", repeat=1, weights_dir=weights)
    print(
        f"CPU, {os.cpu_count()} cores, memory for pyiqa/whole {budget:.1f} GB; "
        f"job: eval submit --tools {','.join(TOOLS)} --workers 1, default settings"
    )
    header = (
        f"{'MP':>4} {'size':>11} {'job GB':>7} {'job s':>7} {'pyiqa GB':>8} "
        f"{'pyiqa s':>8} {'whole GB':>8} {'whole s':>8} {'s ratio':>7} "
        f"{'max rel diff':>13}"
    )
    print(header)
    print("-" * len(header))
    for index, megapixels in enumerate(float(s) for s in args.sizes.split(",")):
        workdir = Path(tempfile.mkdtemp(prefix="large-job-"))
        folder = workdir / "photos"
        folder.mkdir()
        path = folder / f"photo_{megapixels:g}mp.jpg"
        width, height = make_photo(megapixels, path, args.photos, seed=index)
        job = run_job(folder, workdir, weights) if "job" in ways else None
        others: dict[str, dict[str, dict]] = {"pyiqa": {}, "whole": {}}
        notes = []
        for way in ("pyiqa", "whole"):
            if way not in ways:
                continue
            for tool in TOOLS:
                estimate = (
                    large_photos.BASE_GB + large_photos.GB_PER_MP[way][tool] * width * height / 1e6
                )
                if estimate > budget:
                    notes.append(f"{way} {tool} skipped: needs about {estimate:.0f} GB")
                    continue
                found = large_photos.run(way, tool, path, options)
                if found is not None:
                    others[way][tool] = found
        print(row(megapixels, width, height, job, others), flush=True)
        for note in notes:
            print(f"      {note}")
        path.unlink()


def row(
    megapixels: float, width: int, height: int, job: dict | None, others: dict[str, dict[str, dict]]
) -> str:
    def summed(way: str) -> tuple[str, str, float | None]:
        found = others[way]
        if len(found) != len(TOOLS):
            return f"{'-':>8}", f"{'-':>8}", None
        seconds = sum(r["seconds"] for r in found.values())
        return f"{max(r['rss_gb'] for r in found.values()):>8.2f}", f"{seconds:>8.2f}", seconds

    pyiqa_gb, pyiqa_s, pyiqa_seconds = summed("pyiqa")
    whole_gb, whole_s, _ = summed("whole")
    job_gb = f"{job['rss_gb']:>7.2f}" if job else f"{'-':>7}"
    job_s = f"{job['seconds']:>7.2f}" if job else f"{'-':>7}"
    ratio = f"{job['seconds'] / pyiqa_seconds:>7.2f}" if job and pyiqa_seconds else f"{'-':>7}"
    reference, mark = (
        (others["whole"], "") if len(others["whole"]) == len(TOOLS) else (others["pyiqa"], "p")
    )
    difference = f"{'-':>13}"
    if job and len(reference) == len(TOOLS):
        worst = max(
            abs(job["raw"][t] - reference[t]["raw"]) / abs(reference[t]["raw"]) for t in TOOLS
        )
        difference = f"{worst:>12.1e}{mark or ' '}"
    return (
        f"{megapixels:>4g} {f'{width}x{height}':>11} {job_gb} {job_s} {pyiqa_gb} "
        f"{pyiqa_s} {whole_gb} {whole_s} {ratio} {difference}"
    )


if __name__ == "__main__":
    main()
