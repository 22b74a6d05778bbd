"""Seconds from SIGKILL of a local job to ``eval resume`` taking it over.

A local job (``eval submit FOLDER --workers 1``, the builtin backend, no broker) of generated
photos is SIGKILLed once two items are done; then ``eval resume`` is run at once, and again every
second for as long as it refuses ("is being run by another process"), as a user would.  Printed:
the seconds from the kill until a resume was accepted, how many were refused, and the seconds
until the job was done.  ``--checkout DIR`` runs another checkout's code (same interpreter), for
a before/after pair:

    git worktree add /tmp/old HEAD
    python benchmarks/resume_after_kill.py --checkout /tmp/old
    python benchmarks/resume_after_kill.py
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkout", type=Path, default=REPO)
    parser.add_argument("--items", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "photos"
        folder.mkdir()
        rng = np.random.default_rng(0)
        for index in range(args.items):
            smooth = Image.fromarray(rng.integers(0, 256, (8, 10, 3), np.uint8)).resize(
                (320, 240), Image.Resampling.BICUBIC
            )
            smooth.save(folder / f"{index:02d}.png")
        database = Path(scratch) / "r.sqlite3"
        env = {
            key: value for key, value in os.environ.items() if not key.startswith("AGENTIC_IQA_")
        }
        env.update(
            {
                "PYTHONPATH": str(args.checkout.resolve()),
                "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{database}",
                "AGENTIC_IQA_TOOL_CACHE": "memory",
                "AGENTIC_IQA_DEVICE": "cpu",
                "AGENTIC_IQA_VLM_CACHE": "false",
            }
        )
        command = [sys.executable, "-m", "agentic_iqa", "eval"]
        # cwd: the scratch folder, so that ``-m agentic_iqa`` imports the checkout's code
        # (the current folder comes first on sys.path), not the code of where this runs.
        submitter = subprocess.Popen(
            [*command, "submit", str(folder), "--workers", "1"],
            env=env,
            cwd=scratch,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        while True:
            time.sleep(0.1)
            try:
                with sqlite3.connect(database) as db:
                    done = db.execute(
                        "select count(*) from job_items where status = 'done'"
                    ).fetchone()[0]
            except sqlite3.Error:
                continue
            if done >= 2:
                break
        os.killpg(submitter.pid, signal.SIGKILL)
        submitter.wait()
        killed = time.monotonic()
        refused = 0
        while True:
            started = time.monotonic()
            resumed = subprocess.run(
                [*command, "resume"], env=env, cwd=scratch, capture_output=True, text=True
            )
            if "being run by another process" not in resumed.stderr:
                break
            refused += 1
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
        summary = next(
            (line.strip() for line in resumed.stderr.splitlines() if " done, " in line),
            resumed.stderr.strip()[-300:],
        )
        print(
            f"{args.checkout}: killed after {done} of {args.items} items; resume accepted "
            f"{started - killed:.1f} s after the kill ({refused} refused), job done "
            f"{time.monotonic() - killed:.1f} s after it (exit {resumed.returncode}): "
            f"{summary}"
        )


if __name__ == "__main__":
    main()
