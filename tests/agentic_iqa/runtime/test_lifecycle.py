"""Dataset jobs in one process (no broker): submit, run, cancel, resume, export, report."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from scipy.stats import spearmanr
from sqlalchemy import func, select
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.cli.results import export_rows
from agentic_iqa.db.engine import session_scope
from agentic_iqa.db.models import JobItem, Run, StepRecord
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.lifecycle import cancel, feed, resume
from agentic_iqa.runtime.local import run_local
from agentic_iqa.runtime.progress import progress
from agentic_iqa.runtime.submission import submit
from tests.conftest import livec_manifest

pytestmark = pytest.mark.data

runner = CliRunner()


@pytest.fixture
def manifest(livec_dir: Path, tmp_path: Path) -> Path:
    """16 LIVE-C photos with MOS, then two bad rows (a missing file, a bad MOS)."""
    with (livec_dir / "mos.csv").open() as handle:
        second = list(csv.DictReader(handle))[1]["image"]
    return livec_manifest(
        livec_dir,
        tmp_path / "manifest.csv",
        16,
        (
            (str(livec_dir / "images" / "no-such-photo.jpg"), "50"),
            (str(livec_dir / "images" / second) + "?", "high"),
        ),
    )


def test_bad_rows_become_failed_items_with_their_line_numbers(engine, manifest):
    job_id = submit(engine, JobSpec.build(manifest=manifest))
    with session_scope(engine) as session:
        failed = session.execute(
            select(JobItem.line, JobItem.error)
            .where(JobItem.job_id == job_id, JobItem.status == "failed")
            .order_by(JobItem.line)
        ).all()
    assert [line for line, _ in failed] == [18, 19]
    assert "line 18" in failed[0][1] and "not found" in failed[0][1]
    assert "line 19" in failed[1][1] and "'high'" in failed[1][1]
    assert progress(engine, job_id).counts == {"pending": 16, "failed": 2}


@pytest.mark.slow
def test_local_job_exports_and_reports_correlations_that_match_scipy(
    engine, manifest, agents, tmp_path, monkeypatch
):
    job_id = submit(engine, JobSpec.build(manifest=manifest))
    run_local(engine, job_id, agents, workers=2)
    final = progress(engine, job_id)
    assert final.status == "done"
    assert final.counts == {"done": 16, "failed": 2}

    columns, rows = export_rows(engine, job_id)
    rows = list(rows)
    assert len(rows) == 18 and "tool:PIQE" in columns
    done = [r for r in rows if r["status"] == "done"]
    assert all(1 <= r["quality_score"] <= 5 and r["severities"] for r in done)
    expected = spearmanr([r["quality_score"] for r in done], [r["mos"] for r in done]).statistic

    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", str(engine.url))
    csv_path = tmp_path / "export.csv"
    exported = runner.invoke(
        app, ["eval", "export", job_id, "--format", "csv", "-o", str(csv_path)]
    )
    assert exported.exit_code == 0, exported.output
    with csv_path.open() as handle:
        table = [row for row in csv.DictReader(handle) if row["status"] == "done"]
    from_file = spearmanr(
        [float(r["quality_score"]) for r in table], [float(r["mos"]) for r in table]
    ).statistic
    assert from_file == pytest.approx(expected)

    html = tmp_path / "report.html"
    reported = runner.invoke(
        app, ["eval", "report", job_id, "--json", "--bootstrap", "200", "--html", str(html)]
    )
    assert reported.exit_code == 0, reported.output
    document = json.loads(reported.stdout)
    assert document["agent"]["srcc"] == pytest.approx(expected)
    assert document["counts"]["failed"] == 2
    assert document["tools"][0]["tool"] == "PIQE"
    assert (
        html.is_file()
        and '<figure class="plot" id="figure-scatter-agent"><svg ' in html.read_text()
    )


def test_resume_after_cancel_recomputes_nothing(engine, manifest, agents):
    job_id = submit(engine, JobSpec.build(manifest=manifest))
    first: list[str] = []
    feed(engine, job_id, 5, first.append)
    from agentic_iqa.runtime import embedded

    for run_id in first:
        embedded.run_embedded(engine, agents, run_id)
    assert cancel(engine, job_id) == 11
    assert progress(engine, job_id).counts == {"done": 5, "cancelled": 11, "failed": 2}
    with session_scope(engine) as session:
        steps_before = session.scalar(select(func.count()).select_from(StepRecord))

    reopened, unfinished = resume(engine, job_id)
    assert (reopened, unfinished) == (11, [])
    run_local(engine, job_id, agents, workers=2)
    assert progress(engine, job_id).counts == {"done": 16, "failed": 2}
    with session_scope(engine) as session:
        runs = session.execute(select(Run.id, Run.status).where(Run.job_id == job_id)).all()
        first_steps = session.scalar(
            select(func.count()).select_from(StepRecord).where(StepRecord.run_id.in_(first))
        )
        steps_after = session.scalar(select(func.count()).select_from(StepRecord))
    assert len(runs) == 16 and all(status == "succeeded" for _, status in runs)
    assert set(first) <= {run_id for run_id, _ in runs}  # the done items kept their runs
    assert first_steps == steps_before  # and not one of their steps ran again
    assert steps_after > steps_before


def test_calibrate_fits_a_tool_to_the_jobs_mos_as_a_metadata_override(
    engine, manifest, tmp_path, monkeypatch
):
    from iqa_tools import load_catalog

    job_id = submit(engine, JobSpec.build(manifest=manifest))
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", str(engine.url))
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
    output = tmp_path / "piqe.json"
    result = runner.invoke(app, ["calibrate", job_id, "--tool", "piqe", "-o", str(output)])
    assert result.exit_code == 0, result.output
    # On 16 photos a free five-parameter logistic turns back: the first monotone form is kept,
    # and the summary says which and why.
    assert (
        "PIQE: logistic4 fitted on 16 items (logistic4: the five-parameter logistic turns "
        "back within the data's range)" in result.stdout
    )
    before, after = (
        float(x)
        for x in result.stdout.split("RMSE on the 1-5 scale ")[1]
        .split(" fitted")[0]
        .replace("with the current mapping -> ", "")
        .split()
    )
    assert after <= before
    override = json.loads(output.read_text())["tools"]["PIQE"]["normalization"]
    assert override["form"] == "logistic4" and job_id in override["source"]
    assert "not logistic5" in override["source"]
    recalibrated = load_catalog(overrides=[output]).get("PIQE")
    assert recalibrated.normalization.params == override["params"]
    raws = [recalibrated.normalize(raw) for raw in range(0, 101, 5)]
    assert raws == sorted(raws, reverse=True)  # PIQE: lower is better, so the map falls
    assert load_catalog().get("PIQE").normalization.form == "linear"


def test_calibrate_needs_mos(engine, tmp_path, monkeypatch):
    folder = tmp_path / "photos"
    folder.mkdir()
    from PIL import Image

    from tests.conftest import natural_image

    for index in range(3):
        Image.fromarray(natural_image(index)).save(folder / f"{index}.png")
    job_id = submit(engine, JobSpec.build(manifest=folder))
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", str(engine.url))
    result = runner.invoke(app, ["calibrate", job_id, "--tool", "PIQE"])
    assert result.exit_code == 1
    assert "only 0 items with MOS" in result.output


def test_cli_submit_a_folder_runs_locally_and_reports_status(tmp_path, monkeypatch):

    from agentic_iqa.fitting.degradations import degrade
    from tests.conftest import example_photo

    folder = tmp_path / "photos"
    folder.mkdir()
    clean = example_photo((320, 240))
    clean.save(folder / "a_clean.png")
    degrade(clean, "blur", 4).save(folder / "b_blurred.png")
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.sqlite3'}")
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
    monkeypatch.delenv("AGENTIC_IQA_BROKER_URL", raising=False)
    submitted = runner.invoke(app, ["eval", "submit", str(folder), "--name", "two photos"])
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.strip().splitlines()[-1]
    status = runner.invoke(app, ["eval", "status", "--json"])
    document = json.loads(status.stdout)
    assert document["job_id"] == job_id and document["status"] == "done"
    assert document["counts"] == {"done": 2} and document["eta_seconds"] == 0.0
    cancelled = runner.invoke(app, ["eval", "cancel", job_id])
    assert cancelled.exit_code == 1 and "already finished (done)" in cancelled.output
    exported = tmp_path / "rows.jsonl"
    runner.invoke(app, ["eval", "export", job_id, "--format", "jsonl", "-o", str(exported)])
    rows = {json.loads(line)["item_id"]: json.loads(line) for line in exported.open()}
    assert rows["b_blurred.png"]["quality_score"] < rows["a_clean.png"]["quality_score"]
    assert "Blurs=" in rows["b_blurred.png"]["severities"]
    missing = runner.invoke(app, ["eval", "status", "no-such-job"])
    assert missing.exit_code == 1 and "no job with id" in missing.output


#: Run in a fresh process: migrate a SQLite file, submit a tiny manifest (lazy imports and
#: caches are paid there), then the manifest under test; print the job id and the process's
#: peak resident memory in KiB (VmHWM starts afresh at exec; ru_maxrss would carry pytest's).
_SUBMIT_PEAK = """
import sys
from pathlib import Path
from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.submission import submit
url, warm_up, manifest = sys.argv[1:4]
upgrade(url)
engine = make_engine(url)
submit(engine, JobSpec.build(manifest=Path(warm_up), check_images=False))
job_id = submit(engine, JobSpec.build(manifest=Path(manifest), check_images=False))
status = Path("/proc/self/status")
if status.is_file():
    peak = next(int(line.split()[1]) for line in status.read_text().splitlines()
                if line.startswith("VmHWM:"))
else:
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(job_id, peak)
"""


def _big_manifest(folder: Path, count: int) -> Path:
    """``count`` rows of one image, each with a query of its own of about 1 kB: holding the
    rows (entries, ORM objects, one big INSERT) would cost about 1.5 kB each."""
    path = folder / f"big-{count}.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "image", "mos", "query"])
        for index in range(count):
            writer.writerow(
                [
                    f"item-{index}",
                    "one.png",
                    index % 100,
                    f"Is photo {index} sharp? " + "Look at every edge. " * 50,
                ]
            )
    return path


def _submit_in_a_fresh_process(tmp_path: Path, manifest: Path) -> tuple[str, str, int]:
    """(database URL, job id, peak RSS in KiB) of a process that submitted ``manifest``."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    url = f"sqlite:///{manifest.with_suffix('.sqlite3')}"
    warm_up = _big_manifest(manifest.parent, 10)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-c", _SUBMIT_PEAK, url, str(warm_up), str(manifest)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    job_id, peak = result.stdout.split()
    return url, job_id, int(peak)


@pytest.mark.slow
def test_submitting_ten_thousand_items_keeps_memory_flat(tmp_path):
    """Ten times the items, the same peak memory: the manifest is read, checked and inserted
    as a stream.  Peak RSS of two fresh processes (SQLite's page cache and every allocation
    outside Python count too), 1,000 against 10,000 rows of about 1 kB."""
    from PIL import Image

    from agentic_iqa.db.engine import make_engine
    from tests.conftest import natural_image

    Image.fromarray(natural_image(size=(64, 48))).save(tmp_path / "one.png")
    _url, _job, small = _submit_in_a_fresh_process(tmp_path, _big_manifest(tmp_path, 1_000))
    url, job_id, large = _submit_in_a_fresh_process(tmp_path, _big_manifest(tmp_path, 10_000))
    growth = (large - small) / 1024
    assert growth < 5, (
        f"peak RSS {small / 1024:.1f} MiB submitting 1,000 items, "
        f"{large / 1024:.1f} MiB for 10,000: +{growth:.1f} MiB"
    )
    engine = make_engine(url)
    assert progress(engine, job_id).counts == {"pending": 10_000}
    claimed: list[str] = []
    feed(engine, job_id, 50, claimed.append)
    assert len(claimed) == 50  # a window, not the dataset
    assert progress(engine, job_id).counts == {"pending": 9_950, "queued": 50}
