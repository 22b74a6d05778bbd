"""Phone photos with the defaults: a 24-MP JPEG through a metric job and ``assess``;
``tools list`` shows each tool's largest image; the worker fits its tool budget in
``--max-memory``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from agentic_iqa.cli import app
from iqa_tools.memory import GB, PROCESS_BASE

runner = CliRunner()


@pytest.fixture(scope="module")
def phone_photo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 5657x4243 (24-MP) JPEG: a smooth random field with grain, as a phone might save."""
    folder = tmp_path_factory.mktemp("phone")
    rng = np.random.default_rng(24)
    width, height = 5657, 4243
    coarse = Image.fromarray(
        rng.integers(0, 256, (height // 64 + 2, width // 64 + 2, 3), dtype=np.uint8)
    )
    pixels = np.asarray(coarse.resize((width, height), Image.Resampling.BICUBIC), np.int16)
    pixels = pixels + rng.integers(-10, 11, pixels.shape, dtype=np.int16)
    path = folder / "phone.jpg"
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, quality=90)
    return path


def test_a_metric_job_scores_a_24_mp_photo_with_the_defaults(phone_photo, tmp_path, weights_dir):
    env = {
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'r.sqlite3'}",
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_BROKER_URL": "",
        "AGENTIC_IQA_WEIGHTS_DIR": str(weights_dir),
    }
    result = runner.invoke(
        app, ["eval", "submit", str(phone_photo.parent), "--tools", "BRISQUE,NIQE,PIQE"], env=env
    )
    assert result.exit_code == 0, result.output
    job = result.stdout.strip().splitlines()[0].split()[0]
    status = json.loads(runner.invoke(app, ["eval", "status", job, "--json"], env=env).stdout)
    assert status["counts"] == {"done": 1}
    export = tmp_path / "rows.jsonl"
    exported = runner.invoke(
        app, ["eval", "export", job, "--format", "jsonl", "-o", str(export)], env=env
    )
    assert exported.exit_code == 0, exported.output
    (row,) = [json.loads(line) for line in export.read_text().splitlines()]
    text = json.dumps(row)
    for tool in ("BRISQUE", "NIQE", "PIQE"):
        assert tool in text
    assert not row.get("error"), row


#: ``agentic-iqa assess`` run by ``runpy`` in a fresh process that prints its own peak RSS
#: (VmHWM; ``ru_maxrss`` would carry this process's peak across the exec) as it exits.
# Left out of the README's test command (CI runs it): 24-megapixel photos through the whole
# command.
pytestmark = pytest.mark.slow

ASSESS = """
import atexit, runpy, sys

atexit.register(lambda: print("VmHWM", open("/proc/self/status").read()
                              .split("VmHWM:")[1].split()[0], file=sys.stderr))
sys.argv = ["agentic-iqa", *sys.argv[1:]]
runpy.run_module("agentic_iqa", run_name="__main__")
"""


def test_assess_takes_a_24_mp_photo_with_the_defaults_within_1_5_gb(phone_photo, tmp_path):
    """The builtin backend, the default, and its tools: the whole command peaks under 1.5 GB
    (the builtin measures a reduced image)."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AGENTIC_IQA_TOOL_CACHE": "memory",
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'r.sqlite3'}",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            ASSESS,
            "assess",
            str(phone_photo),
            "-q",
            "Rate the quality of this image.",
            "--json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert 1.0 <= document["quality_score"] <= 5.0
    assert document["executor_evidence"]["tool_logs"]
    (peak,) = [
        int(line.split()[1]) * 1024
        for line in done.stderr.splitlines()
        if line.startswith("VmHWM ")
    ]
    assert peak < 1.5 * GB, f"{peak / GB:.2f} GB"


def test_tools_list_shows_each_tools_largest_image():
    listed = runner.invoke(app, ["tools", "list", "--json"])
    assert listed.exit_code == 0
    tools = {row["name"]: row for row in json.loads(listed.stdout)}
    for name in ("BRISQUE", "NIQE", "PIQE"):
        assert tools[name]["max_pixels"] >= 100_000_000
        assert tools[name]["memory_model"] == "measured"
    assert tools["DBCNN"]["max_pixels"] < 12_000_000
    assert tools["DBCNN"]["memory_model"].startswith("not measured")
    table = runner.invoke(app, ["tools", "list"], env={"COLUMNS": "250"})
    assert table.exit_code == 0
    (piqe,) = [line for line in table.stdout.splitlines() if "│ PIQE" in line]
    assert "up to 159 MP" in piqe
    (dbcnn,) = [line for line in table.stdout.splitlines() if "│ DBCNN" in line]
    assert "up to 1.7 MP*" in dbcnn
    assert "AGENTIC_IQA_TOOL_MEMORY=1.50 GB" in table.stdout
    smaller = runner.invoke(
        app, ["tools", "list", "--json"], env={"AGENTIC_IQA_TOOL_MEMORY": "500MB"}
    )
    small = {row["name"]: row for row in json.loads(smaller.stdout)}
    assert small["PIQE"]["max_pixels"] < tools["PIQE"]["max_pixels"]


def test_worker_lowers_the_tool_budget_to_fit_its_memory(monkeypatch):
    """--max-memory 2GB with one process: the budget becomes 2 GB less an idle process, said in
    one line, and Celery replaces a child that outgrows its share."""
    from agentic_iqa.cli import system

    started: list[list[str]] = []
    monkeypatch.setattr(system, "run_celery", lambda args: started.append(args) or 0)
    monkeypatch.delenv("AGENTIC_IQA_TOOL_MEMORY", raising=False)
    result = runner.invoke(
        app, ["worker", "--max-memory", "2GB", "-c", "1"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 0, result.output
    budget = 2 * GB - PROCESS_BASE
    import os

    assert os.environ.pop("AGENTIC_IQA_TOOL_MEMORY") == str(budget)
    assert "tool budget lowered from 1.50 GB to 1.20 GB per call" in result.output
    assert f"--max-memory-per-child={2 * GB // 1024}" in started[0]

    roomy = runner.invoke(app, ["worker", "--max-memory", "16GB", "-c", "2"])
    assert roomy.exit_code == 0 and "tool budget 1.50 GB per call fits" in roomy.output
    assert "AGENTIC_IQA_TOOL_MEMORY" not in os.environ

    refused = runner.invoke(app, ["worker", "--max-memory", "1GB", "-c", "4"])
    assert refused.exit_code == 2 and "leaves nothing for tool calls" in refused.output
    bad = runner.invoke(app, ["worker", "--max-memory", "lots"])
    assert bad.exit_code == 2 and "not a size in bytes" in bad.output
    assert len(started) == 2
