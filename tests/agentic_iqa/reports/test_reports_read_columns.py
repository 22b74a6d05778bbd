"""``eval report``, ``eval compare`` and ``eval export`` of a big job read columns a
page at a time, never a run's stored state where a column says it, never a pending item's image,
and their memory does not grow with the job.

The big jobs are cloned from a real metric job's one run (its state, its tool call), with
scores that follow the MOS: the tables a worker writes, at a size a test can afford.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy import Engine, event, func, insert, select, update
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db import dispose_engines, make_engine, upgrade
from agentic_iqa.db.engine import read_scope, session_scope
from agentic_iqa.db.models import Job, JobItem, Run, ToolLog
from agentic_iqa.reports.report import build_report
from tests.agentic_iqa.reports.conftest import scratch_database
from tests.conftest import REPO, natural_image

# Left out of the README's test command (CI runs it): jobs of tens of thousands of items, memory
# measured.
pytestmark = pytest.mark.slow

runner = CliRunner()


@contextmanager
def statements() -> Iterator[list[str]]:
    """The SQL every engine sends while the block runs (the CLI makes its own engine)."""
    sent: list[str] = []

    def seen(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(Engine, "before_cursor_execute", seen)
    try:
        yield sent
    finally:
        event.remove(Engine, "before_cursor_execute", seen)


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _manifest(folder: Path, rows: list[tuple[str, float]], name: str) -> Path:
    path = folder / name
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos"])
        writer.writerows(rows)
    return path


def one_item_job(folder: Path, seed: int) -> str:
    """A real one-item PIQE job on a photo of its own, submitted to the database the
    environment names: the template :func:`clone` copies."""
    photo = folder / "photo.png"
    Image.fromarray(natural_image(seed, (96, 72))).save(photo)
    return (
        cli(
            "eval",
            "submit",
            str(_manifest(folder, [(str(photo), 50.0)], "one.csv")),
            "--tools",
            "PIQE",
        )
        .strip()
        .splitlines()[0]
    )


def clone(url: str, template: str, items: int, *, done: float, name: str) -> str:
    """A new metric job of ``items`` items like ``template`` (a finished job of one item): the
    first ``done`` of every ten items done (its run's state and tool call copied, the score
    following the MOS), one in fifty failed, the rest pending.  Returns its id."""
    engine = make_engine(url)
    with session_scope(engine) as session:
        job = session.get(Job, template)
        run = session.scalars(select(Run).where(Run.job_id == template)).one()
        log = session.scalars(select(ToolLog).where(ToolLog.run_id == run.id)).one()
        state = run.state_json
        after = int(session.scalar(select(func.max(JobItem.id))) or 0)
        copied = {column.key: getattr(job, column.key) for column in Job.__table__.columns}
        job_id = str(uuid.uuid4())
        session.execute(
            insert(Job).values({**copied, "id": job_id, "name": name, "items_after": after})
        )
        run_columns = {column.key: getattr(run, column.key) for column in Run.__table__.columns}
        log_columns = {
            column.key: getattr(log, column.key)
            for column in ToolLog.__table__.columns
            if column.key != "id"
        }
    with engine.begin() as connection:
        for start in range(0, items, 5000):
            rows, runs, logs = [], [], []
            for index in range(start, min(items, start + 5000)):
                mos = float((index * 37) % 101)
                row = {
                    "job_id": job_id,
                    "line": index + 2,
                    "item_key": f"photo{index}.png",
                    "image": f"/nowhere/photo{index}.png",
                    "mos": mos,
                    "status": "pending",
                    "error": None,
                    "run_id": None,
                }
                if index % 50 == 49:
                    row.update(
                        status="failed",
                        error=f"image 'photo{index}.png' on line {index + 2} not found",
                    )
                elif index % 10 < done * 10:
                    run_id = str(uuid.uuid4())
                    raw = 100.0 - mos + (index * 7919) % 41 - 20  # noisy, as photos are
                    runs.append(
                        {**run_columns, "id": run_id, "job_id": job_id, "state_json": state}
                    )
                    logs.append(
                        {
                            **log_columns,
                            "run_id": run_id,
                            "raw_score": raw,
                            "normalized_score": 5.0 - 4.0 * raw / 107.0,
                        }
                    )
                    row.update(status="done", run_id=run_id)
                rows.append(row)
            if runs:
                connection.execute(insert(Run), runs)
                connection.execute(insert(ToolLog), logs)
            connection.execute(insert(JobItem), rows)
        counts = dict(
            connection.execute(
                select(JobItem.status, func.count())
                .where(JobItem.job_id == job_id)
                .group_by(JobItem.status)
            ).all()
        )
        connection.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(
                {
                    f"items_{status}": counts.get(status, 0)
                    for status in ("pending", "queued", "done", "failed", "cancelled")
                }
            )
        )
    return job_id


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def metric_jobs(
    request: pytest.FixtureRequest, cli_env: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """A real one-item PIQE job, and clones of it: 2,000 items (30 % done) and two of 30,000
    (60 % done), on SQLite and PostgreSQL."""
    folder = tmp_path_factory.mktemp(f"metric-{request.param}")
    url = scratch_database(request.param, folder, request)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTIC_IQA_DATABASE_URL", url)
        template = one_item_job(folder, 1)
        yield {
            "url": url,
            "template": template,
            "small": clone(url, template, 2000, done=0.3, name="small"),
            "large": clone(url, template, 30_000, done=0.6, name="large"),
            "other": clone(url, template, 30_000, done=0.6, name="other"),
        }
    dispose_engines(url)


def test_a_report_reads_columns_not_states_and_says_what_the_export_says(metric_jobs, monkeypatch):
    """The report is the report of the exported rows, read without any run's stored state."""
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", metric_jobs["url"])
    with statements() as sent:
        report = json.loads(
            cli("eval", "report", metric_jobs["small"], "--json", "--bootstrap", "100")
        )
    exported = [
        json.loads(line)
        for line in cli(
            "eval", "export", metric_jobs["small"], "--format", "jsonl", "-o", "-"
        ).splitlines()
    ]
    assert sent and not [statement for statement in sent if "state_json" in statement]
    expected = build_report(exported, bootstrap=100, metric_job=True)
    assert {key: report[key] for key in expected} == json.loads(json.dumps(expected))
    assert report["counts"] == {
        "total": 2000,
        "done": 600,
        "failed": 40,
        "by_status": {"done": 600, "failed": 40, "pending": 1360},
    }
    (piqe,) = report["tools"]
    assert piqe["n"] == 600 and piqe["srcc"] > 0.8  # its raw score falls as the MOS rises


def test_a_metric_jobs_export_parses_no_state_and_pages_by_id(metric_jobs):
    """Every column of a metric job's export comes from columns; its items are read a page
    at a time by id, each page a bounded statement (a few per page, whatever the job)."""
    from agentic_iqa.db.exports import export_rows

    engine = make_engine(metric_jobs["url"])
    with statements() as sent, read_scope(engine) as session:
        rows = list(export_rows(session, metric_jobs["small"], 250))
    assert len(rows) == 2000
    assert not [statement for statement in sent if "state_json" in statement]
    pages = [statement for statement in sent if "job_items" in statement]
    assert len(pages) <= 2 * (2000 // 250 + 1)  # a page of items and its tool calls
    assert all("LIMIT" in statement or "<=" in statement for statement in pages)
    done = [row for row in rows if row["status"] == "done"]
    assert {row["scored_on"] for row in done} == {"whole image"}
    assert all(row["reasoning"] is None and row["severities"] is None for row in done)
    assert {row["tools"] for row in done} == {"PIQE"}


def test_a_comparison_of_two_big_jobs_matches_their_items(metric_jobs, monkeypatch):
    """Two jobs of 30,000 items compared by item: every item shared, no difference (the same
    scores), and the paired interval of a difference that is zero is zero."""
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", metric_jobs["url"])
    with statements() as sent:
        compared = json.loads(
            cli(
                "eval",
                "compare",
                metric_jobs["large"],
                metric_jobs["other"],
                "--json",
                "--bootstrap",
                "50",
            )
        )
    assert not [statement for statement in sent if "state_json" in statement]
    base, other = compared["jobs"]
    assert (base["items"], other["shared_with_baseline"], other["done"]) == (30_000, 30_000, 18_000)
    line = compared["lines"][1]
    assert line["difference"]["n"] == 18_000
    assert line["difference"]["srcc"] == 0.0 and line["difference"]["srcc_ci"] == [0.0, 0.0]
    assert line["mos"]["srcc"] == compared["lines"][0]["mos"]["srcc"] > 0.8


def _peak_mb(url: str, *args: str) -> float:
    """Peak memory (MB) of ``agentic-iqa ARGS`` in a process of its own."""
    code = (
        "import resource, runpy, sys\n"
        f"sys.argv = ['agentic-iqa', *{list(args)!r}]\n"
        "try:\n    runpy.run_module('agentic_iqa', run_name='__main__')\n"
        "except SystemExit as exit:\n    assert not exit.code, exit.code\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "AGENTIC_IQA_DATABASE_URL": url},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stderr.strip().splitlines()[-1]) / 1024


@pytest.mark.parametrize("metric_jobs", ["sqlite"], indirect=True)
def test_report_and_compare_memory_does_not_grow_with_the_job(metric_jobs):
    """From 2,000 items to 30,000 (18,000 done: their SRCC resampled 10,000 at a time) a report
    and a comparison take a few MB more, not a dict per item (about 2 KB each before)."""
    url, small, large, other = (metric_jobs[key] for key in ("url", "small", "large", "other"))
    report_small = _peak_mb(url, "eval", "report", small, "--bootstrap", "50")
    report_large = _peak_mb(url, "eval", "report", large, "--bootstrap", "50")
    assert report_large - report_small < 25, (report_small, report_large)
    compare_small = _peak_mb(
        url, "eval", "compare", small, metric_jobs["template"], "--bootstrap", "50"
    )
    compare_large = _peak_mb(url, "eval", "compare", large, other, "--bootstrap", "50")
    assert compare_large - compare_small < 35, (compare_small, compare_large)


@pytest.fixture(scope="module")
def builtin_job(
    cli_env: None, data_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The builtin agent on three livec-dev photos (fitted ones), two more items left
    pending whose images are gone, on SQLite."""
    folder = tmp_path_factory.mktemp("builtin")
    url = f"sqlite:///{folder / 'results.sqlite3'}"
    upgrade(url)
    with open(data_dir / "livec-dev" / "mos.csv", newline="", encoding="utf-8") as handle:
        photos = [
            (str(data_dir / "livec-dev" / "images" / row["image"]), float(row["mos"]))
            for row in list(csv.DictReader(handle))[:3]
        ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTIC_IQA_DATABASE_URL", url)
        job = (
            cli("eval", "submit", str(_manifest(folder, photos, "dev.csv"))).strip().splitlines()[0]
        )
    with session_scope(make_engine(url)) as session:
        session.execute(
            insert(JobItem),
            [
                {
                    "job_id": job,
                    "line": 10 + index,
                    "item_key": f"gone{index}",
                    "image": str(folder / f"gone{index}.png"),
                    "mos": 40.0,
                    "status": "pending",
                }
                for index in range(2)
            ],
        )
    yield {"url": url, "job": job, "photos": photos, "folder": folder}
    dispose_engines(url)


def _warnings(job: str) -> list[str]:
    return json.loads(cli("eval", "report", job, "--json", "--bootstrap", "0"))["job"]["warnings"]


def test_the_in_sample_check_reads_no_pending_image(builtin_job, monkeypatch):
    """The three photos that ran are fitted ones; the pending items' images are gone, and
    are not looked for: no "could not be read"."""
    short = builtin_job["job"][:8]
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", builtin_job["url"])
    assert _warnings(builtin_job["job"]) == [
        f"3 of 5 items of job {short} are images the builtin backend was fitted on: its figures "
        "on them are in-sample"
    ]


def test_the_in_sample_check_takes_the_digest_recorded_at_submit(builtin_job, monkeypatch):
    """An item whose SHA-256 was recorded when it was submitted is judged by it, its file
    not read: moved away since, it is still known for a fitted photo."""
    image, _mos = builtin_job["photos"][0]
    moved = builtin_job["folder"] / "moved.jpg"
    engine = make_engine(builtin_job["url"])
    with session_scope(engine) as session:
        session.execute(
            update(JobItem)
            .where(JobItem.job_id == builtin_job["job"], JobItem.image == image)
            .values(
                image=str(moved),
                image_digest="sha256:" + hashlib.sha256(Path(image).read_bytes()).hexdigest(),
            )
        )
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", builtin_job["url"])
    try:
        warnings = _warnings(builtin_job["job"])
    finally:
        with session_scope(engine) as session:
            session.execute(
                update(JobItem)
                .where(JobItem.job_id == builtin_job["job"], JobItem.image == str(moved))
                .values(image=image, image_digest=None)
            )
    assert not moved.exists()
    assert warnings == [
        f"3 of 5 items of job {builtin_job['job'][:8]} are images the builtin "
        "backend was fitted on: its figures on them are in-sample"
    ]
