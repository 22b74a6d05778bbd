"""A local job whose process died is resumed at once; a holder this host cannot check
is waited for (a countdown) or taken over after a confirmation.

The killed job is a real ``eval submit`` subprocess, SIGKILLed mid-job; the holders of the
other tests are real processes too (this one, or one that has exited)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import func, select
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db import jobs as store
from agentic_iqa.db import make_engine, upgrade
from agentic_iqa.db.engine import read_scope, session_scope
from agentic_iqa.db.models import Job, JobItem, Run
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.heartbeat import Holder
from agentic_iqa.runtime.local import take_over
from agentic_iqa.runtime.progress import progress
from agentic_iqa.runtime.submission import submit
from tests.conftest import REPO, natural_image

runner = CliRunner()


def _photos(folder: Path, count: int) -> Path:
    folder.mkdir()
    for index in range(count):
        Image.fromarray(natural_image(index)).save(folder / f"{index:02d}.png")
    return folder


def _gone_process() -> Holder:
    """A holder of this host whose process has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return replace(Holder.here(), pid=child.pid, started=None)


def _in_flight(engine, job_id: str, holder: Holder | None, seconds: float) -> None:
    """The job as a process that ran it leaves it: two items claimed, their leases live for
    ``seconds`` more, ``holder`` recorded as renewing them."""
    with session_scope(engine) as session:
        store.set_dispatch(session, job_id, "local", holder=holder.to_json() if holder else None)
        store.claim_items(session, store.get_job(session, job_id), 2, lease_seconds=seconds)


@pytest.fixture
def job(tmp_path: Path, results: str) -> tuple[object, str]:
    upgrade(results)
    engine = make_engine(results)
    return engine, submit(engine, JobSpec.build(manifest=_photos(tmp_path / "photos", 3)))


def test_holders_are_told_alive_gone_or_unknown() -> None:
    here = Holder.here()
    assert here.state() == "alive" and here.pid == os.getpid() and here.started
    assert Holder.from_json(here.to_json()) == here
    assert _gone_process().state() == "gone"
    assert replace(here, started=here.started + 1).state() == "gone"  # the pid was reused
    assert replace(here, boot="another-boot").state() == "unknown"
    assert Holder.from_json("not json") is None and Holder.from_json(None) is None


def test_a_gone_holder_is_taken_over_at_once_and_the_job_shows_stalled(job) -> None:
    engine, job_id = job
    _in_flight(engine, job_id, _gone_process(), seconds=300)
    current = progress(engine, job_id)
    assert current.orphaned and current.eta_seconds is None  # not after the lease: now
    taken = take_over(engine, job_id)
    assert taken.taken and taken.live == 2 and taken.state == "gone"
    with read_scope(engine) as session:
        assert Holder.from_json(session.get(Job, job_id).lease_holder) == Holder.here()
    # This process holds it now: a second resume beside it finds a live holder.
    second = take_over(engine, job_id)
    assert not second.taken and second.state == "alive"


def test_a_resume_beside_a_live_holder_exits_1_unless_taken_over(job) -> None:
    engine, job_id = job
    _in_flight(engine, job_id, Holder.here(), seconds=300)
    refused = runner.invoke(app, ["eval", "resume", job_id[:8]])
    assert refused.exit_code == 1
    assert f"process {os.getpid()} on host" in refused.output
    assert "--take-over" in refused.output
    declined = runner.invoke(app, ["eval", "resume", job_id[:8], "--take-over"], input="n\n")
    assert declined.exit_code == 1 and "still running" in declined.output
    with read_scope(engine) as session:
        assert session.get(Job, job_id).status == "running"
        assert (
            session.scalar(
                select(func.count()).where(JobItem.job_id == job_id, JobItem.status == "done")
            )
            == 0
        )
    taken = runner.invoke(app, ["eval", "resume", job_id[:8], "--take-over", "--yes"])
    assert taken.exit_code == 0, taken.output
    assert progress(engine, job_id).counts == {"done": 3}


def test_an_unknown_holder_is_waited_for_with_a_countdown_then_taken_over(job) -> None:
    engine, job_id = job
    elsewhere = replace(Holder.here(), boot="another-boot", host="gpu-07")
    _in_flight(engine, job_id, elsewhere, seconds=3)
    resumed = runner.invoke(app, ["eval", "resume", job_id[:8]])
    assert resumed.exit_code == 0, resumed.output
    text = " ".join(resumed.output.split())
    assert "runs hold a lease of process" in text and "on host gpu-07" in text
    assert re.search(r"waiting [1-3] s for it to run out", text), text
    assert progress(engine, job_id).counts == {"done": 3}


def test_an_unknown_holder_whose_leases_are_renewed_is_alive(job) -> None:
    engine, job_id = job
    _in_flight(engine, job_id, None, seconds=2)
    answered = threading.Event()

    def renew() -> None:
        """Renew the leases every quarter lease, as a process on another machine does, until
        the resume has answered: however late the resume first looks, it sees a lease that
        then moves on."""
        while not answered.wait(0.5):
            with session_scope(engine) as session:
                store.extend_leases(session, job_id, 2)

    renewer = threading.Thread(target=renew)
    renewer.start()
    try:
        refused = runner.invoke(app, ["eval", "resume", job_id[:8]])
    finally:
        answered.set()
        renewer.join()
    assert refused.exit_code == 1, refused.output
    assert "they are being renewed" in " ".join(refused.output.split())
    assert progress(engine, job_id).counts.get("done", 0) == 0  # nothing ran beside it


@pytest.mark.faults  # kills a process; about a minute on two busy cores
def test_a_local_job_killed_with_sigkill_is_resumed_at_once_each_item_run_once(
    tmp_path: Path, results: str
) -> None:
    """`eval submit` (no broker) SIGKILLed mid-job, then `eval resume` straight away: it takes
    the job over from the dead process (no wait for its leases) and finishes it, the items done
    before the kill kept as they were, each item answered by one run."""
    folder = _photos(tmp_path / "photos", 8)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    upgrade(results)
    engine = make_engine(results)
    submitter = subprocess.Popen(
        [sys.executable, "-m", "agentic_iqa", "eval", "submit", str(folder), "--workers", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120

    def done() -> dict[str, tuple[str, datetime]]:
        with read_scope(engine) as session:
            return {
                item.item_key: (item.run_id, item.finished_at)
                for item in session.scalars(select(JobItem).where(JobItem.status == "done"))
            }

    while time.monotonic() < deadline and submitter.poll() is None:
        try:
            if len(done()) >= 2:
                break
        except Exception:  # the database is not created yet
            pass
        time.sleep(0.1)
    assert submitter.poll() is None, submitter.stderr.read().decode()[-2000:]
    os.killpg(submitter.pid, signal.SIGKILL)
    submitter.wait(timeout=10)
    before = done()
    assert 2 <= len(before) < 8
    with read_scope(engine) as session:
        (job_id,) = session.scalars(select(Job.id))
        assert (
            session.scalar(
                select(func.count()).where(  # leases nobody renews any more
                    Run.job_id == job_id, Run.lease_until > datetime.now(UTC)
                )
            )
            > 0
        )

    resumed = subprocess.run(
        [sys.executable, "-m", "agentic_iqa", "eval", "resume"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"process {submitter.pid} on host" in resumed.stderr
    assert "is gone; taking over" in resumed.stderr
    assert "8 done, 0 failed of 8 items" in resumed.stderr
    after = done()
    assert len(after) == 8
    assert {key: after[key] for key in before} == before  # not recomputed
    with read_scope(engine) as session:
        runs = session.scalars(select(Run).where(Run.job_id == job_id)).all()
        assert session.get(Job, job_id).status == "done"
    assert len(runs) == 8 and {run.status for run in runs} == {"succeeded"}
    assert {run.id for run in runs} == {run_id for run_id, _ in after.values()}


def test_a_cancelled_job_whose_process_died_is_resumed_at_once(job) -> None:
    """`eval cancel` of a job whose process died, then resume: taken over at once too."""
    engine, job_id = job
    _in_flight(engine, job_id, _gone_process(), seconds=300)
    assert runner.invoke(app, ["eval", "cancel", job_id[:8]]).exit_code == 0
    resumed = runner.invoke(app, ["eval", "resume", job_id[:8]])
    assert resumed.exit_code == 0, resumed.output
    assert "is gone; taking over its 2 runs" in " ".join(resumed.output.split())
    assert progress(engine, job_id).counts == {"done": 3}
