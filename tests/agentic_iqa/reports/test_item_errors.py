"""An item's error, as stored and shown, is one readable sentence: what failed and
what to do; never a planner's raw JSON record, a traceback, or "X: X()"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from billiard.exceptions import SoftTimeLimitExceeded
from sqlalchemy import select

from agentic_iqa.db import jobs as store
from agentic_iqa.db import make_engine, upgrade
from agentic_iqa.db.engine import read_scope, session_scope
from agentic_iqa.db.models import JobItem
from agentic_iqa.db.runs import fail_run, get_run
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.reports.errors import failure_reason as report_reason
from agentic_iqa.reports.errors import readable
from agentic_iqa.runtime.service import failure_reason
from agentic_iqa.runtime.submission import submit
from agentic_iqa.state import PlannerError
from tests.conftest import REPO, natural_image

PLANNER_JSON = PlannerError(
    error_type="internal_error",
    message="planner gave no valid plan: the model refused",
    backend="openai",
    attempt=3,
).model_dump_json()

TRACEBACK = """Traceback (most recent call last):
  File "agentic_iqa/pipeline.py", line 12, in run_step
    return plan(query)
ValueError: the query names no image"""


def test_readable_turns_records_tracebacks_and_empty_exceptions_into_sentences() -> None:
    assert json.loads(PLANNER_JSON)["error_type"] == "internal_error"  # what runs keep
    assert readable(PLANNER_JSON) == (
        "planner gave no valid plan: the model refused; `agentic-iqa eval resume` tries "
        "again; the log (--debug) has the details"
    )
    api = PlannerError(error_type="api_error", message="HTTP 502 from the endpoint")
    assert readable(api.model_dump_json()) == (
        "planning failed: HTTP 502 from the endpoint; the model's endpoint failed; check it "
        "(`agentic-iqa check`), then `agentic-iqa eval resume`"
    )
    assert readable(TRACEBACK) == "ValueError: the query names no image"
    assert readable(
        "tool_execution failed: SoftTimeLimitExceeded: SoftTimeLimitExceeded()"
    ).startswith("tool_execution ran past its worker's time limit (AGENTIC_IQA_TOOL_SOFT")
    assert readable("plan failed: KeyError: KeyError()") == "plan failed: KeyError"
    assert readable("line 3: missing\n  File 'x.py', line 9") == "line 3: missing"
    assert readable('{"not": "a planner record"}') == '{"not": "a planner record"}'
    assert readable(None) is None and len(readable("x" * 5000) or "") == 600


def test_a_step_error_names_what_failed_without_repeating_an_empty_exception() -> None:
    assert failure_reason("summarize", KeyError()) == "summarize failed: KeyError"
    assert failure_reason("plan", ValueError("no image")) == "plan failed: ValueError: no image"
    assert failure_reason("tool_execution", SoftTimeLimitExceeded()).startswith(
        "tool_execution ran past its worker task's time limit"
    )
    assert "ran out of memory" in failure_reason("tool_execution", MemoryError())


def test_a_run_that_failed_with_a_planner_record_closes_its_item_readably(
    tmp_path: Path, results: str
) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    from PIL import Image

    Image.fromarray(natural_image(0)).save(folder / "a.png")
    upgrade(results)
    engine = make_engine(results)
    job_id = submit(engine, JobSpec.build(manifest=folder))
    with session_scope(engine) as session:
        (claimed,) = store.claim_items(session, store.get_job(session, job_id), 1)
        run_id = claimed.run_id
        fail_run(session, run_id, error=PLANNER_JSON)
    with read_scope(engine) as session:
        item = session.scalars(select(JobItem).where(JobItem.job_id == job_id)).one()
        run_error = get_run(session, run_id).error
    assert run_error == PLANNER_JSON  # the run keeps the record, for debugging
    assert item.status == "failed" and item.error == readable(PLANNER_JSON)
    # An item stored before (its raw record) is read the same way by the report.
    assert report_reason(PLANNER_JSON) == report_reason(item.error)


@pytest.mark.slow
def test_a_job_whose_model_refuses_fails_each_item_with_one_sentence(tmp_path: Path) -> None:
    """`eval submit` (a local job) on a model that refuses every plan: the items' errors and
    the command's last line say what failed and what to do, with no record and no
    traceback."""
    from tests.conformance.harness import environment, simulated
    from tests.conformance.items import images, scoring, write_manifest
    from tests.conformance.simulated_model import Behaviour

    items = scoring(images(tmp_path / "images", 2), 2, seed=1)
    manifest = write_manifest(items, tmp_path / "m.csv")
    with simulated(Behaviour.ALWAYS_REFUSES, items) as (server, _model):
        env = {
            **os.environ,
            **environment(Behaviour.ALWAYS_REFUSES, server, tmp_path),
            "PYTHONPATH": str(REPO),
        }
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentic_iqa",
                "eval",
                "submit",
                str(manifest),
                "--backend",
                "openai",
                "--no-vlm-cache",
                "--workers",
                "1",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "error_type" not in done.stderr
    assert "every item failed (2); the first: planner gave no valid plan" in " ".join(
        done.stderr.split()
    )
    engine = make_engine(env["AGENTIC_IQA_DATABASE_URL"])
    with read_scope(engine) as session:
        errors = session.scalars(select(JobItem.error)).all()
    assert len(errors) == 2
    for error in errors:
        assert not error.startswith("{") and "\n" not in error, error
        assert "the model refused" in error and "eval resume" in error, error
