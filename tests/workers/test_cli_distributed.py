"""`agentic-iqa eval ...` run as a user runs it, against real Celery workers on real Redis.

Each command is a process of its own with the cluster's environment (broker, results database,
tool overrides), as on a submitting machine; the workers are the cluster's subprocesses.  The
tests check exit codes and the database, and only stable facts of the output (counts), not its
wording.  Items run the toy ``Slow`` tool (no pyiqa model), so an item takes a known time.

Time limits: a tool step that runs past its soft limit must end as a failed step whose reason
names the time limit, and the job must go on with its other items.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy import func, select

from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.models import Job, JobItem, Run, StepRecord, ToolLog
from agentic_iqa.runtime.progress import progress, wait
from tests.conftest import natural_image
from tests.workers.cluster import Cluster
from tests.workers.slow_tools import SLOW_WIDTH

pytestmark = [pytest.mark.redis, pytest.mark.slow]

QUERY = "Rate this image using Slow."
TIME_LIMIT = re.compile(r"time ?limit", re.IGNORECASE)


# -- toy tools for the time limits (built in the workers: see slow_tools) -------------------------


def _toy(factory: str, description: str) -> dict[str, Any]:
    return {
        "display_name": description,
        "factory": f"tests.workers.slow_tools:{factory}",
        "type": "NR",
        "lower_is_better": False,
        "score_range": [0, 1],
        "description": description,
        "default": False,
        "from_paper": False,
        "normalization": {"form": "linear", "params": {"x_at_1": 0, "x_at_5": 1}, "source": "test"},
    }


TIME_LIMIT_TOOLS = {
    "Dawdle": _toy("dawdling", "sleeps on one photo"),
    "Stubborn": _toy("stubborn", "ignores the soft time limit"),
}


@pytest.fixture(scope="module")
def time_limit_tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("meta") / "time-limit-tools.json"
    path.write_text(json.dumps({"tools": TIME_LIMIT_TOOLS}))
    return path


# -- helpers -------------------------------------------------------------------------------------


def manifest_of(folder: Path, count: int, *, slow: int = 0) -> Path:
    """A CSV manifest (image, mos) of ``count`` generated photos; the last ``slow`` of them are
    SLOW_WIDTH pixels wide."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "manifest.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "mos"])
        for index in range(count):
            width = SLOW_WIDTH if index >= count - slow else 96
            image = folder / f"photo{index:02d}.png"
            Image.fromarray(natural_image(index, (width, 72))).save(image)
            writer.writerow([image.name, 20 + 10 * index])
    return path


def cli(cluster: Cluster, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``agentic-iqa ARGS`` in a process of its own, configured like the workers."""
    return subprocess.run(
        [sys.executable, "-m", "agentic_iqa", *args],
        env=cluster.env,
        cwd=cluster.logs,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def the_job(engine: Any) -> str:
    """The id of the one job in the database (the command's output is not parsed for it)."""
    with session_scope(engine) as session:
        (job_id,) = session.scalars(select(Job.id)).all()
    return job_id


def items(engine: Any, job_id: str) -> dict[str, tuple[str, str | None, datetime | None]]:
    """item key -> (status, run id, finished at)."""
    with session_scope(engine) as session:
        rows = session.execute(
            select(JobItem.item_key, JobItem.status, JobItem.run_id, JobItem.finished_at).where(
                JobItem.job_id == job_id
            )
        ).all()
    return {key: (status, run_id, finished) for key, status, run_id, finished in rows}


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.2)


def job_steps(engine: Any, job_id: str) -> list[tuple[str, str, int, str, str | None, str | None]]:
    """(run, step, iteration, status, worker, queue) of every step of the job's runs."""
    with session_scope(engine) as session:
        return [
            tuple(row)
            for row in session.execute(
                select(
                    StepRecord.run_id,
                    StepRecord.step,
                    StepRecord.iteration,
                    StepRecord.status,
                    StepRecord.worker,
                    StepRecord.queue,
                )
                .join(Run, Run.id == StepRecord.run_id)
                .where(Run.job_id == job_id)
            ).all()
        ]


def assert_each_item_done_once(engine: Any, job_id: str, count: int) -> None:
    """Every item done by a run of its own that succeeded, and no result stored twice."""
    final = items(engine, job_id)
    assert len(final) == count and {status for status, _, _ in final.values()} == {"done"}
    run_ids = [run_id for _, run_id, _ in final.values()]
    assert None not in run_ids and len(set(run_ids)) == count
    with session_scope(engine) as session:
        succeeded = session.scalars(
            select(Run.id).where(Run.job_id == job_id, Run.status == "succeeded")
        ).all()
        tool_rows = session.execute(
            select(ToolLog.run_id, ToolLog.iteration, ToolLog.object_name, ToolLog.distortion)
            .join(Run, Run.id == ToolLog.run_id)
            .where(Run.job_id == job_id)
        ).all()
        step_keys = session.execute(
            select(StepRecord.run_id, StepRecord.step, StepRecord.iteration, func.count())
            .join(Run, Run.id == StepRecord.run_id)
            .where(Run.job_id == job_id)
            .group_by(StepRecord.run_id, StepRecord.step, StepRecord.iteration)
        ).all()
    assert sorted(succeeded) == sorted(run_ids)  # no item was assessed to the end twice
    assert {row[0] for row in tool_rows} >= set(run_ids)  # every item's run called its tool
    assert len(set(tool_rows)) == len(tool_rows)  # no tool call logged twice
    assert all(n == 1 for *_key, n in step_keys)


# -- eval submit --wait ----------------------------------------------------------------------------


def test_submit_wait_runs_the_job_on_the_workers_and_returns_when_it_is_done(
    make_cluster, sqlite_url, tmp_path
):
    upgrade(sqlite_url)
    cluster = make_cluster(
        sqlite_url, AGENTIC_IQA_TEST_SLOW_SECONDS="0.2", AGENTIC_IQA_JOB_WINDOW="2"
    )
    default = cluster.start("default", "default")
    gpu = cluster.start("gpu", "gpu")
    manifest = manifest_of(tmp_path / "photos", 4)

    result = cli(cluster, "eval", "submit", str(manifest), "--query", QUERY, "--wait")
    assert result.returncode == 0, result.stderr[-3000:]

    engine = make_engine(sqlite_url)
    job_id = the_job(engine)
    assert job_id in result.stdout
    done = progress(engine, job_id)  # at once: --wait returned only at the end
    assert (done.status, done.counts, done.finished, done.total) == ("done", {"done": 4}, 4, 4)
    assert_each_item_done_once(engine, job_id, 4)
    steps = job_steps(engine, job_id)
    assert {status for *_, status, _worker, _queue in steps} == {"succeeded"}
    # Through the broker: every step was run by this cluster's workers (a local run would be
    # "embedded", "in-process"), the tools by the one on the gpu queue.
    assert {
        (worker, queue) for _r, step, _i, _s, worker, queue in steps if step == "tool_execution"
    } == {(gpu, "gpu")}
    assert {
        (worker, queue) for _r, step, _i, _s, worker, queue in steps if step != "tool_execution"
    } == {(default, "default")}


# -- eval status --watch ---------------------------------------------------------------------------


def test_status_watch_follows_a_running_job_and_ends_with_its_final_counts(
    make_cluster, sqlite_url, tmp_path
):
    upgrade(sqlite_url)
    cluster = make_cluster(
        sqlite_url, AGENTIC_IQA_TEST_SLOW_SECONDS="1.0", AGENTIC_IQA_JOB_WINDOW="2"
    )
    cluster.start("default", "default")
    cluster.start("gpu", "gpu")
    manifest = manifest_of(tmp_path / "photos", 4)
    submitted = cli(cluster, "eval", "submit", str(manifest), "--query", QUERY)  # no --wait
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    engine = make_engine(sqlite_url)
    job_id = the_job(engine)

    started = datetime.now(UTC)
    command = [sys.executable, "-m", "agentic_iqa", "eval", "status", job_id, "--watch"]
    watchers = {
        name: subprocess.Popen(
            args,
            env=cluster.env,
            cwd=cluster.logs,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in (("json", [*command, "--json"]), ("text", command))
    }
    running = progress(engine, job_id)
    assert running.status == "running" and running.finished < 4, running
    outputs = {}
    for name, watcher in watchers.items():
        try:
            stdout, stderr = watcher.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            watcher.kill()
            pytest.fail(f"`eval status --watch` ({name}) did not end with the job")
        assert watcher.returncode == 0, stderr[-3000:]
        outputs[name] = stdout
    ended = datetime.now(UTC)

    with session_scope(engine) as session:
        finished_at = session.get(Job, job_id).finished_at
    assert finished_at is not None
    finished_at = finished_at if finished_at.tzinfo else finished_at.replace(tzinfo=UTC)
    assert started < finished_at <= ended  # they followed the job to its end, then stopped
    document = json.loads(outputs["json"])
    assert document["job_id"] == job_id and document["status"] == "done"
    assert document["counts"] == {"done": 4}
    assert (document["finished"], document["total"]) == (4, 4)
    assert "4/4" in outputs["text"] and re.search(r"\bdone\b", outputs["text"])
    assert_each_item_done_once(engine, job_id, 4)


# -- eval cancel, then eval resume -----------------------------------------------------------------


@pytest.mark.faults
def test_cancel_stops_a_distributed_job_and_resume_finishes_the_rest_exactly_once(
    make_cluster, sqlite_url, tmp_path
):
    upgrade(sqlite_url)
    cluster = make_cluster(
        sqlite_url, AGENTIC_IQA_TEST_SLOW_SECONDS="1.0", AGENTIC_IQA_JOB_WINDOW="2"
    )
    cluster.start("default", "default")
    cluster.start("gpu", "gpu")
    count = 6
    submitted = cli(
        cluster, "eval", "submit", str(manifest_of(tmp_path / "photos", count)), "--query", QUERY
    )
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    engine = make_engine(sqlite_url)
    job_id = the_job(engine)
    wait_until(
        lambda: progress(engine, job_id).counts.get("done", 0) >= 1,
        90,
        "a first item done",
    )

    cancelled = cli(cluster, "eval", "cancel", job_id)
    assert cancelled.returncode == 0, cancelled.stderr[-3000:]
    at_cancel = items(engine, job_id)
    never_ran = {
        key
        for key, (status, run_id, _) in at_cancel.items()
        if status == "cancelled" and run_id is None
    }
    assert never_ran, at_cancel  # a window of 2 of 6 items: some had not been handed out
    # Runs on the workers at that moment end as cancelled after their current step.
    wait_until(
        lambda: "queued" not in progress(engine, job_id).counts,
        30,
        "the runs in flight to end",
    )
    settled = (items(engine, job_id), len(job_steps(engine, job_id)))
    time.sleep(4.5)  # more than a lease (3 s) and many supervisor ticks: nothing moves now
    assert (items(engine, job_id), len(job_steps(engine, job_id))) == settled
    stopped = progress(engine, job_id)
    assert stopped.status == "cancelled"
    assert set(stopped.counts) <= {"done", "cancelled"}, stopped.counts
    assert stopped.counts.get("cancelled", 0) >= len(never_ran)
    final = settled[0]
    assert all(final[key][:2] == ("cancelled", None) for key in never_ran)  # never dispatched
    with session_scope(engine) as session:
        ended_by_cancel = session.execute(
            select(Run.status, Run.error)
            .join(JobItem, JobItem.run_id == Run.id)
            .where(JobItem.job_id == job_id, JobItem.status == "cancelled")
        ).all()
        open_runs = session.scalar(
            select(func.count()).where(Run.job_id == job_id, Run.status.in_(("pending", "running")))
        )
    assert open_runs == 0
    assert all(
        status == "failed" and "cancel" in (error or "") for status, error in ended_by_cancel
    ), ended_by_cancel
    again = cli(cluster, "eval", "cancel", job_id)
    assert again.returncode == 1  # already ended: nothing to cancel

    done_before = {key: value for key, value in final.items() if value[0] == "done"}
    assert done_before
    resumed = cli(cluster, "eval", "resume", job_id, "--wait", timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    current = progress(engine, job_id)
    assert (current.status, current.counts) == ("done", {"done": count})
    after = items(engine, job_id)
    assert {key: after[key] for key in done_before} == done_before  # not recomputed
    assert_each_item_done_once(engine, job_id, count)


# -- Celery time limits ----------------------------------------------------------------------------

#: Generous for a fast item's first tool step, which imports torch in a fresh worker process.
SOFT_LIMIT = 12


@pytest.mark.faults
def test_a_tool_step_past_its_soft_time_limit_fails_with_the_reason_and_the_job_goes_on(
    make_cluster, sqlite_url, tmp_path, time_limit_tools
):
    upgrade(sqlite_url)
    cluster = make_cluster(
        sqlite_url,
        (time_limit_tools,),
        AGENTIC_IQA_TOOL_SOFT_TIME_LIMIT=str(SOFT_LIMIT),
        AGENTIC_IQA_HARD_TIME_LIMIT_MARGIN="30",
    )
    cluster.start("default", "default")
    cluster.start("gpu", "gpu")
    manifest = manifest_of(tmp_path / "photos", 3, slow=1)
    submitted = cli(cluster, "eval", "submit", str(manifest), "--tools", "Dawdle")
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    engine = make_engine(sqlite_url)
    job_id = the_job(engine)

    final = wait(engine, job_id, poll=0.3, timeout=90)
    assert (final.status, final.counts) == ("done", {"done": 2, "failed": 1}), final
    with session_scope(engine) as session:
        slow_item = session.execute(
            select(JobItem).where(JobItem.job_id == job_id, JobItem.status == "failed")
        ).scalar_one()
        run = session.get(Run, slow_item.run_id)
        step = session.execute(
            select(StepRecord).where(
                StepRecord.run_id == run.id, StepRecord.step == "tool_execution"
            )
        ).scalar_one()
    assert slow_item.image.endswith("photo02.png")  # the wide one
    assert run.status == "failed" and TIME_LIMIT.search(run.error or ""), run.error
    assert TIME_LIMIT.search(slow_item.error or ""), slow_item.error
    assert step.status == "failed" and TIME_LIMIT.search(step.error or ""), (
        step.status,
        step.error,
    )
    took = (step.finished_at - step.started_at).total_seconds()
    assert SOFT_LIMIT - 1 <= took < 40, took  # cut at the soft limit, not after its minute


@pytest.mark.faults
def test_a_tool_step_inside_the_coordinating_task_gets_the_tool_time_limit(
    make_cluster, sqlite_url, tmp_path, time_limit_tools
):
    """One worker of every queue runs a metric item's tool step inside the task that
    coordinates it, whose own limit is a model step's (here 3 s): the step still gets the tool
    limit, and its error says which limit ran out and what to raise."""
    upgrade(sqlite_url)
    cluster = make_cluster(
        sqlite_url,
        (time_limit_tools,),
        AGENTIC_IQA_TOOL_SOFT_TIME_LIMIT=str(SOFT_LIMIT),
        AGENTIC_IQA_VLM_SOFT_TIME_LIMIT="3",
        AGENTIC_IQA_HARD_TIME_LIMIT_MARGIN="30",
    )
    cluster.start("every", "default,gpu")
    manifest = manifest_of(tmp_path / "photos", 1, slow=1)
    submitted = cli(cluster, "eval", "submit", str(manifest), "--tools", "Dawdle")
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    engine = make_engine(sqlite_url)
    job_id = the_job(engine)

    final = wait(engine, job_id, poll=0.3, timeout=90)
    assert (final.status, final.counts) == ("done", {"failed": 1}), final
    with session_scope(engine) as session:
        item = session.execute(select(JobItem).where(JobItem.job_id == job_id)).scalar_one()
        step = session.execute(
            select(StepRecord).where(
                StepRecord.run_id == item.run_id, StepRecord.step == "tool_execution"
            )
        ).scalar_one()
    took = (step.finished_at - step.started_at).total_seconds()
    assert SOFT_LIMIT - 1 <= took < 25, took  # the tool limit, not the task's 3 s
    assert item.error == (
        f"the tool step ran past its time limit of {SOFT_LIMIT} s (AGENTIC_IQA_TOOL_SOFT_TIME_"
        "LIMIT, or `agentic-iqa worker --tool-time-limit`): raise it for photos this large"
    )
    assert "SoftTimeLimitExceeded" not in (step.error or "")


@pytest.mark.faults
def test_a_tool_step_killed_by_the_hard_time_limit_fails_the_run_instead_of_looping(
    make_cluster, sqlite_url, tmp_path, time_limit_tools
):
    upgrade(sqlite_url)
    cluster = make_cluster(
        sqlite_url,
        (time_limit_tools,),
        AGENTIC_IQA_TOOL_SOFT_TIME_LIMIT="3",
        AGENTIC_IQA_HARD_TIME_LIMIT_MARGIN="1",
    )
    cluster.start("default", "default")
    cluster.start("gpu", "gpu")
    manifest = manifest_of(tmp_path / "photos", 1, slow=1)
    submitted = cli(cluster, "eval", "submit", str(manifest), "--tools", "Stubborn")
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    engine = make_engine(sqlite_url)
    job_id = the_job(engine)

    final = wait(engine, job_id, poll=0.3, timeout=90)
    assert (final.status, final.counts) == ("done", {"failed": 1}), final
    with session_scope(engine) as session:
        item = session.execute(select(JobItem).where(JobItem.job_id == job_id)).scalar_one()
    assert TIME_LIMIT.search(item.error or ""), item.error
