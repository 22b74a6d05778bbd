"""A followed job's progress: plain lines with counts, rate and ETA when stderr is a log file
(nohup, Slurm), and the ETA on the terminal's bar."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from agentic_iqa.cli.progress import (
    Pace,
    clock,
    eta_seconds,
    eta_text,
    pace_text,
    progress_line,
    rate,
    rate_text,
)
from agentic_iqa.jobs.spec import JobSpec
from tests.conftest import natural_image

#: A log line: counts, elapsed time, rate and ETA (or "unknown" before the first item ends).
LINE = re.compile(
    r"^job [0-9a-f]{8}: (\d+)/(\d+) finished \((\d+) done, (\d+) failed\) after "
    r"\S+( \S+)?, (no item ended yet|[\d.]+ items/(s|min)), ETA (unknown|\S+)",
    re.MULTILINE,
)


def test_rate_and_eta_from_counts_and_seconds() -> None:
    assert rate(10, 20.0) == 0.5
    assert rate(0, 20.0) is None and rate(5, 0.0) is None
    assert eta_seconds(30, 0.5) == 60.0
    assert eta_seconds(0, None) == 0.0 and eta_seconds(3, None) is None
    assert Pace(started=100.0, finished_then=40).per_second(52, now=106.0) == 2.0
    assert Pace(started=100.0, finished_then=40).per_second(40, now=160.0) is None


def test_rate_and_eta_are_written_for_people() -> None:
    assert rate_text(2.5) == "2.5 items/s"
    assert rate_text(0.25) == "15.0 items/min"
    assert rate_text(None) == "no item ended yet"
    assert [clock(s) for s in (0, 45.4, 200, 3723, 97200)] == [
        "0s",
        "45s",
        "3m 20s",
        "1h 02m",
        "1d 03h",
    ]
    assert eta_text(200) == "ETA 3m 20s" and eta_text(None) == "ETA unknown"
    assert pace_text(0.25, 30) == "15.0 items/min, ETA 2m 00s"


def test_progress_line_counts_rate_and_eta() -> None:
    counts = {"done": 118, "failed": 2, "running": 4, "pending": 276}
    line = progress_line("1a2b3c4d-0000", counts, elapsed=507, per_second=120 / 507)
    assert line == (
        "job 1a2b3c4d: 120/400 finished (118 done, 2 failed) after 8m 27s, "
        "14.2 items/min, ETA 19m 43s"
    )
    stalled = progress_line(
        "1a2b3c4d", {"done": 1, "queued": 3}, elapsed=60, per_second=1 / 60, stalled=3
    )
    assert stalled.endswith("1.0 items/min, 3 stalled: no ETA") and "ETA " not in stalled
    cancelled = progress_line("1a2b3c4d", {"done": 1, "cancelled": 2}, elapsed=5, per_second=None)
    assert cancelled.startswith("job 1a2b3c4d: 3/3 finished (1 done, 0 failed, 2 cancelled)")
    assert cancelled.endswith("no item ended yet, ETA 0s")


@pytest.fixture
def folder_of_24(tmp_path: Path) -> Path:
    """A folder of 24 generated photos, p00.png .. p23.png, 128x96."""
    folder = tmp_path / "photos"
    folder.mkdir()
    for index in range(24):
        Image.fromarray(natural_image(index, (128, 96))).save(folder / f"p{index:02d}.png")
    return folder


def _environment(tmp_path: Path) -> dict[str, str]:
    return {
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'r.sqlite3'}",
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "COLUMNS": "160",
    }


#: A local metric job (no broker, no VLM), one thread, a progress line every tenth of a second.
SUBMIT = ["eval", "submit", "--tools", "PIQE", "--workers", "1", "--progress-every", "0.1"]


@pytest.mark.slow
def test_a_local_job_logs_progress_lines_with_counts_and_eta(
    folder_of_24: Path, tmp_path: Path
) -> None:
    """stderr in a file, as under nohup or Slurm: plain lines while the job runs."""
    log = tmp_path / "job.log"
    with log.open("w") as stderr:
        done = subprocess.run(
            [sys.executable, "-m", "agentic_iqa", *SUBMIT, str(folder_of_24)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=300,
            # Chunks of 4: items end (and an ETA shows) while the job runs; one thread would
            # walk all 24 as one chunk, ending them together at the end.
            env={**os.environ, **_environment(tmp_path), "AGENTIC_IQA_METRIC_CHUNK_SIZE": "4"},
            cwd=tmp_path,
        )
    text = log.read_text()
    assert done.returncode == 0, text
    lines = LINE.findall(text)
    assert lines, text
    assert all(int(total) == 24 for _finished, total, *_ in lines)
    finished = [int(found[0]) for found in lines]
    assert finished == sorted(finished)  # counts only grow
    assert any(found[-1] != "unknown" for found in lines), text  # an ETA once items end
    assert "\x1b[" not in text  # no bar's control sequences in a log file


def test_the_terminal_bar_shows_the_eta_and_no_log_lines(
    folder_of_24: Path, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from agentic_iqa.cli import app

    result = CliRunner().invoke(
        app, [*SUBMIT, str(folder_of_24)], env={**_environment(tmp_path), "TTY_COMPATIBLE": "1"}
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"items/(s|min), ETA \d", result.stderr), result.stderr
    assert not LINE.search(result.stderr), result.stderr


def test_status_watch_logs_progress_lines_while_another_process_runs_the_job(
    folder_of_24: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`eval status --watch`, the follower `submit --wait` and `resume --wait` use too, with
    stderr in a pipe: plain lines while the job runs elsewhere (here, another thread)."""
    import threading
    import time

    from typer.testing import CliRunner

    from agentic_iqa.agents.team import Agents
    from agentic_iqa.cli import app
    from agentic_iqa.db.engine import make_engine, upgrade
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit
    from agentic_iqa.vlm.builtin import BuiltinClient
    from iqa_tools import ToolRegistry, ToolSettings

    for name, value in _environment(tmp_path).items():
        monkeypatch.setenv(name, value)
    url = os.environ["AGENTIC_IQA_DATABASE_URL"]
    upgrade(url)
    engine = make_engine(url)
    job_id = submit(engine, JobSpec.build(manifest=folder_of_24, tools=["PIQE"]))
    watched = {}
    watcher = threading.Thread(
        target=lambda: watched.update(
            result=CliRunner().invoke(
                app, ["eval", "status", job_id[:8], "--watch", "--progress-every", "0.1"]
            )
        )
    )
    watcher.start()
    time.sleep(1.0)  # the watcher finds the job running before anything ends
    client = BuiltinClient()
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="memory"))
    run_local(
        engine,
        job_id,
        Agents(planner=client, executor=client, summarizer=client, registry=registry),
        workers=1,
    )
    watcher.join(timeout=60)
    result = watched["result"]
    assert result.exit_code == 0, result.output
    lines = LINE.findall(result.stderr)
    assert lines and all(int(total) == 24 for _finished, total, *_ in lines), result.stderr
    assert "24/24 finished" in result.stdout
