"""A run's unread kind, and the job's count of done items whose model said it cannot see the
image: kept by the UPDATE that closes each item, so that ``eval status`` reads one number."""

from __future__ import annotations

import csv
from pathlib import Path

from PIL import Image
from sqlalchemy import Engine, select

from agentic_iqa.db import jobs as store
from agentic_iqa.db.engine import read_scope, session_scope
from agentic_iqa.db.models import Job, Run
from agentic_iqa.db.runs import fail_run, finish_run
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.options import UNREAD_REASONS
from agentic_iqa.runtime.progress import progress
from agentic_iqa.runtime.submission import submit
from agentic_iqa.state import AgenticIQAState, SummarizerOutput, merge_state

QUESTION = "Which distortion is most visible? A. Noise B. Blur"
BLIND = f"{UNREAD_REASONS['cannot see']}: 'I cannot see the image, but B is common'"
SCORING_BLIND = f"attempt 1: no quality level in 'Hmm'; attempt 2: {BLIND}"
HEDGED = f"attempt 1: {UNREAD_REASONS['several']}: 'A or B'"


def _job(engine: Engine, folder: Path, items: int) -> str:
    for i in range(items):
        Image.new("RGB", (16, 16), (i * 40, 90, 160)).save(folder / f"{i}.png")
    path = folder / "manifest.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "query", "id"])
        writer.writerows([str(folder / f"{i}.png"), QUESTION, f"item{i}"] for i in range(items))
    return submit(engine, JobSpec.build(manifest=path, check_images=False, mode="vlm"))


def _answered(state: AgenticIQAState, reason: str | None) -> AgenticIQAState:
    result = SummarizerOutput(
        final_answer="Unable to determine" if reason else "B",
        quality_reasoning="As it says.",
        answer_unparseable=reason is not None,
        unparseable_reason=reason,
    )
    return merge_state(state, {"summarizer_result": result})


def test_done_items_that_could_not_see_are_counted_once_and_no_other_item_is(
    engine: Engine, tmp_path: Path
) -> None:
    """Of six items: two explanation-mode replies and one scoring-mode reply that say the model
    cannot see the image count (three); a hedge, a read letter and a failed run do not; a run
    ended a second time (a redelivered task) does not count its item again."""
    job_id = _job(engine, tmp_path, 6)
    with session_scope(engine) as session:
        claimed = store.claim_items(session, store.get_job(session, job_id), 6)
    reasons = [BLIND, BLIND, SCORING_BLIND, HEDGED, None]
    for run, reason in zip(claimed, reasons, strict=False):
        with session_scope(engine) as session:
            finish_run(session, run.run_id, state=_answered(run.state, reason))
    with session_scope(engine) as session:
        fail_run(session, claimed[5].run_id, error="the server refused every request")
    with session_scope(engine) as session:  # the first run's task delivered twice
        finish_run(session, claimed[0].run_id, state=_answered(claimed[0].state, BLIND))
    with read_scope(engine) as session:
        unread = dict(session.execute(select(Run.id, Run.unread).where(Run.job_id == job_id)).all())
        count = session.scalar(select(Job.items_cannot_see).where(Job.id == job_id))
    assert [unread[run.run_id] for run in claimed] == [
        "cannot see",
        "cannot see",
        "cannot see",
        "other",
        None,
        None,
    ]
    assert count == 3
    current = progress(engine, job_id)
    assert (current.counts, current.cannot_see) == ({"done": 5, "failed": 1}, 3)
    (warning,) = current.warnings
    assert warning.startswith("3 items (60% of 5 done): the model (builtin/")
