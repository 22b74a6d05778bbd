"""Peak memory of ``agentic-iqa assess`` on camera-sized photos (the builtin backend, the tools
on the CPU), and of the builtin's image features alone.

Each photo is generated (a smooth random field, gradients and grain, saved as a JPEG of quality
90), then each measurement runs in a fresh subprocess, which reports its own peak RSS (VmHWM of
/proc/self/status) as it exits:

* ``assess``: ``python -m agentic_iqa assess PHOTO -q "Rate the quality of this image." --json``
  (run through ``runpy``, so that the child can report its peak) with the default tools, a
  memory tool cache and the CPU;
* ``features``: the builtin's measurements (:func:`agentic_iqa.vlm.builtin.vision.measurements`)
  and its opinion's features (:func:`agentic_iqa.vlm.builtin.opinion_features.opinion_features`)
  on the photo, nothing else imported.

``--checkout DIR`` runs another checkout's code (the same interpreter), for a before/after pair
on the same machine:

    git worktree add /tmp/old HEAD
    python benchmarks/assess_memory.py --sizes 24,100 --checkout /tmp/old
    python benchmarks/assess_memory.py --sizes 24,100
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUERY = "Rate the quality of this image."

#: Run in the child, at its exit: its own peak RSS (VmHWM, kB).  Not ``ru_maxrss``, which a
#: child started by vfork or fork inherits from its parent's peak.
PEAK = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('VmHWM', open('/proc/self/status').read()"
    ".split('VmHWM:')[1].split()[0], file=sys.stderr))\n"
)
FEATURES = (
    PEAK
    + """
from agentic_iqa.vlm.builtin.opinion_features import opinion_features
from agentic_iqa.vlm.builtin.vision import measurements
measurements(sys.argv[1])
opinion_features(sys.argv[1])
"""
)
ASSESS = (
    PEAK
    + """
import runpy
sys.argv = ["agentic-iqa", *sys.argv[1:]]
runpy.run_module("agentic_iqa", run_name="__main__")
"""
)


def photo(megapixels: float, path: Path, seed: int = 24) -> tuple[int, int]:
    """A 4:3 JPEG of about ``megapixels`` MP: a smooth random field, a gradient and grain,
    built a band of rows at a time so that making a 100-MP one stays within a few hundred MB."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    width = round(math.sqrt(megapixels * 1e6 * 4 / 3))
    height = round(megapixels * 1e6 / width)
    coarse = Image.fromarray(
        rng.integers(0, 256, (height // 64 + 2, width // 64 + 2, 3), dtype=np.uint8)
    )
    field = coarse.resize((width, height), Image.Resampling.BICUBIC)
    canvas = Image.new("RGB", (width, height))
    band = 512
    ramp = np.linspace(-40, 40, width, dtype=np.float32)[None, :, None]
    for top in range(0, height, band):
        rows = np.asarray(field.crop((0, top, width, min(height, top + band))), np.float32)
        rows = rows + ramp + rng.normal(0.0, 6.0, rows.shape).astype(np.float32)
        canvas.paste(Image.fromarray(np.clip(rows, 0, 255).astype(np.uint8)), (0, top))
    canvas.save(path, quality=90)
    return width, height


def measured(command: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run ``command``; its peak RSS in GB, seconds, exit status (and its output's end when it
    failed) as JSON."""
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    peaks = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("VmHWM ")]
    return json.dumps(
        {
            "rss_gb": round(int(peaks[-1]) * 1024 / 1e9, 3) if peaks else None,
            "seconds": round(seconds, 1),
            "rc": done.returncode,
            "tail": "" if done.returncode == 0 else done.stderr[-400:],
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="24,100", help="megapixels, comma-separated")
    parser.add_argument("--checkout", type=Path, default=REPO, help="the code to measure")
    parser.add_argument("--what", default="features,assess")
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        env = {
            **os.environ,
            "PYTHONPATH": str(checkout),
            "AGENTIC_IQA_TOOL_CACHE": "memory",
            "AGENTIC_IQA_DEVICE": "cpu",
            "AGENTIC_IQA_BROKER_URL": "",
            "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{folder / 'r.sqlite3'}",
            "AGENTIC_IQA_VLM_BACKEND": "builtin",
        }
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True
        ).stdout.strip()
        tree = ", working tree" if checkout == REPO else ""
        print(f"# {checkout} ({commit}{tree}), {os.cpu_count()} cores", flush=True)
        for megapixels in [float(size) for size in args.sizes.split(",")]:
            path = folder / f"photo-{megapixels:g}mp.jpg"
            width, height = photo(megapixels, path)
            for what in args.what.split(","):
                command = (
                    [sys.executable, "-c", FEATURES, str(path)]
                    if what == "features"
                    else [sys.executable, "-c", ASSESS, "assess", str(path), "-q", QUERY, "--json"]
                )
                result = measured(command, env, folder)
                print(f"{megapixels:5g} MP {width}x{height} {what:9s} {result}", flush=True)
            path.unlink()


if __name__ == "__main__":
    main()
