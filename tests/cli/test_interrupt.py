"""Ctrl-C (or SIGTERM) on a job run here.  The command says how to resume
(``interrupted: `agentic-iqa eval resume ID```) and exits 130 (143); ``eval status`` and
``eval list`` say "interrupted" at once, in text and ``--json``, with no ETA; ``eval resume``
finishes the job.

A real ``agentic-iqa eval submit`` process is sent the signal while it scores photo-like images
with PIQE (no weights needed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db import dispose_engines, make_engine
from agentic_iqa.runtime.progress import progress
from tests.conftest import REPO, natural_image

# Left out of the README's test command (CI runs it): a real Ctrl-C to a running job, waited
# out.
pytestmark = pytest.mark.slow

runner = CliRunner()


def _manifest(folder: Path, count: int) -> Path:
    folder.mkdir()
    lines = ["image,mos"]
    for index in range(count):
        Image.fromarray(natural_image(index, size=(256, 192))).save(folder / f"p{index:03d}.png")
        lines.append(f"p{index:03d}.png,{index % 100}")
    manifest = folder / "manifest.csv"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def _until(condition, seconds: float, what: str):  # noqa: ANN001, ANN202 - a polling helper
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds} s: {what}")


@pytest.mark.parametrize(
    ("signal_number", "code", "how"),
    [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")],
)
def test_ctrl_c_marks_the_job_interrupted_at_once_and_says_how_to_resume(
    signal_number: int, code: int, how: str, tmp_path, results
) -> None:
    manifest = _manifest(tmp_path / "photos", 40)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentic_iqa",
            "eval",
            "submit",
            str(manifest),
            "--tools",
            "PIQE",
            "--no-check-images",
            "--workers",
            "2",
        ],
        cwd=REPO,
        # Chunks of 4: the first items show as done while most are still to come (in chunks
        # of 32, 20 a thread for 40 items, the job would end before it is interrupted).
        env={**os.environ, "AGENTIC_IQA_METRIC_CHUNK_SIZE": "4"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        job_id = process.stdout.readline().strip()  # the id comes first, then the job runs
        assert len(job_id) == 36, process.stderr.read() if process.poll() is not None else job_id
        engine = make_engine(results)
        _until(lambda: progress(engine, job_id).finished >= 3, 120, "3 items done")
        process.send_signal(signal_number)
        # Marked as the signal is handled; the wait is wide because a loaded machine may be
        # slow to schedule the handler, not because marking waits for items in flight.
        interrupted = _until(
            lambda: progress(engine, job_id).interrupted or None,
            60,
            "the job marked interrupted",
        )
        assert interrupted
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == code, stderr
    assert f"interrupted: `agentic-iqa eval resume {job_id[:8]}` continues it" in " ".join(
        stderr.split()
    )
    assert "Traceback" not in stderr

    current = progress(engine, job_id)
    assert current.status == "running" and 3 <= current.finished < current.total
    assert current.interrupted and current.eta_seconds is None
    assert current.waiting.startswith(f"interrupted ({how})")
    document = json.loads(runner.invoke(app, ["eval", "status", job_id, "--json"]).stdout)
    assert (document["status"], document["interrupted"], document["eta_seconds"]) == (
        "interrupted",
        True,
        None,
    )
    text = runner.invoke(app, ["eval", "status", job_id], env={"COLUMNS": "200"}).stdout
    assert text.splitlines()[0].endswith(": interrupted") and "ETA" not in text
    assert f"`agentic-iqa eval resume {job_id[:8]}` continues it" in text
    listed = json.loads(runner.invoke(app, ["eval", "list", "--json"]).stdout)
    assert [row["status"] for row in listed if row["id"] == job_id] == ["interrupted"]

    resumed = runner.invoke(app, ["eval", "resume", job_id[:8]])
    assert resumed.exit_code == 0, resumed.output
    after = progress(engine, job_id)
    assert (after.status, after.interrupted, after.counts.get("done")) == ("done", False, 40)
    dispose_engines(results)
