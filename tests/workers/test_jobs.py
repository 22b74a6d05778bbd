"""A dataset job on real workers: fed in windows, survives losing every worker, resumes once."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from sqlalchemy import func, select

from agentic_iqa.db import jobs as job_store
from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine, session_scope
from agentic_iqa.db.models import JobItem, Run, StepRecord, ToolLog
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.lifecycle import resume
from agentic_iqa.runtime.progress import progress, wait
from agentic_iqa.runtime.submission import submit
from tests.conftest import REPO, livec_manifest
from tests.workers.cluster import Cluster

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.data]


def counts(engine, job_id: str) -> dict[str, int]:
    return progress(engine, job_id).counts


_START_JOB = (
    "import sys\nfrom workers.tasks import start_job\nstart_job(sys.argv[1], sys.argv[2:])\n"
)


def start_job(
    cluster: Cluster, job_id: str, restart_runs: list[str] | tuple[str, ...] = ()
) -> None:
    """The real ``workers.tasks.start_job``, as ``eval submit`` and ``eval resume`` call it: in
    a process of its own, configured like the workers (broker, database, lease) by the
    environment."""
    result = subprocess.run(
        [sys.executable, "-c", _START_JOB, job_id, *restart_runs],
        cwd=REPO,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.faults
def test_killing_every_worker_mid_job_then_resume_finishes_each_item_exactly_once(
    make_cluster, sqlite_url, livec_dir, tmp_path
):
    upgrade(sqlite_url)
    engine = make_engine(sqlite_url)
    cluster = make_cluster(sqlite_url, AGENTIC_IQA_JOB_WINDOW="4", AGENTIC_IQA_FEED_INTERVAL="0.5")
    workers = [cluster.start("default", "default"), cluster.start("gpu", "gpu")]
    manifest = livec_manifest(livec_dir, tmp_path / "manifest.csv", 24)
    job_id = submit(engine, JobSpec.build(manifest=manifest))
    # As a job begun without a broker is left (``eval submit`` run locally, then stopped): no
    # supervisor feeds it.  Only start_job hands it to the workers, and they must then feed
    # all of it, not just the first window that start_job's own message fills.
    with session_scope(engine) as session:
        job_store.set_dispatch(session, job_id, "local")
    time.sleep(1.5)  # three supervisor ticks: none touches a job that the workers do not own
    assert counts(engine, job_id) == {"pending": 24}
    start_job(cluster, job_id)
    with session_scope(engine) as session:
        assert job_store.get_job(session, job_id).dispatch == "workers"

    deadline = time.monotonic() + 120
    while counts(engine, job_id).get("done", 0) < 3:
        assert time.monotonic() < deadline, counts(engine, job_id)
        time.sleep(0.2)
    for hostname in workers:  # every worker dies mid-job
        cluster.kill(hostname)
    stranded = counts(engine, job_id)
    assert stranded.get("pending", 0) > 0 and stranded.get("done", 0) < 24

    cluster.start("default2", "default")
    cluster.start("gpu2", "gpu")
    reopened, unfinished = resume(engine, job_id)
    start_job(cluster, job_id, unfinished)
    final = wait(engine, job_id, poll=0.5, timeout=240)
    assert final.status == "done", final.counts
    assert final.counts == {"done": 24}

    with session_scope(engine) as session:
        runs = session.execute(select(Run.id, Run.status).where(Run.job_id == job_id)).all()
        items = session.execute(
            select(JobItem.item_key, JobItem.run_id).where(JobItem.job_id == job_id)
        ).all()
        succeeded_steps = session.execute(
            select(StepRecord.run_id, StepRecord.step, StepRecord.iteration, func.count())
            .where(StepRecord.status == "succeeded")
            .group_by(StepRecord.run_id, StepRecord.step, StepRecord.iteration)
        ).all()
        tool_rows = session.scalar(select(func.count()).select_from(ToolLog))
        tool_calls = session.scalar(
            select(func.count()).select_from(
                select(ToolLog.run_id, ToolLog.iteration, ToolLog.object_name, ToolLog.distortion)
                .distinct()
                .subquery()
            )
        )
    assert len(runs) == 24 and {status for _, status in runs} == {"succeeded"}
    assert len({run_id for _, run_id in items}) == 24  # one run per item, none duplicated
    assert all(count == 1 for *_key, count in succeeded_steps)
    assert tool_rows == tool_calls


def test_a_key_the_backend_refuses_stops_the_job_on_the_workers_with_one_message(
    make_cluster, sqlite_url, livec_dir, tmp_path, monkeypatch
):
    """Not one 401 per item and a job "done": the first refusal stops the job, the items not
    started are cancelled, and `eval resume` is what the message says to run."""
    from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Reply, openai_error

    upgrade(sqlite_url)
    engine = make_engine(sqlite_url)
    with FakeAPIServer(
        lambda _r: Reply(
            401, openai_error("Incorrect API key provided: sk-wrong", "invalid_request_error")
        )
    ) as server:
        backend = {
            "AGENTIC_IQA_VLM_BACKEND": "openai",
            "AGENTIC_IQA_VLM_MODEL": "gpt-4o",
            "AGENTIC_IQA_VLM_BASE_URL": f"{server.url}/v1",
            "OPENAI_API_KEY": "sk-wrong",
        }
        cluster = make_cluster(
            sqlite_url,
            AGENTIC_IQA_JOB_WINDOW="2",
            AGENTIC_IQA_FEED_INTERVAL="0.5",
            AGENTIC_IQA_VLM_CACHE="false",
            **backend,
        )
        cluster.start("default", "default")
        for name, value in backend.items():  # the job is submitted (and stored) with these
            monkeypatch.setenv(name, value)
        monkeypatch.setenv(
            "AGENTIC_IQA_METADATA_OVERRIDES", cluster.env["AGENTIC_IQA_METADATA_OVERRIDES"]
        )
        manifest = livec_manifest(livec_dir, tmp_path / "m.csv", 12)
        job_id = submit(engine, JobSpec.build(manifest=manifest))
        start_job(cluster, job_id)
        final = wait(engine, job_id, poll=0.3, timeout=120)
        calls = len(server.requests)
    assert final.status == "cancelled"
    assert "HTTP 401" in final.error and "eval resume" in final.error
    assert "sk-wrong" not in final.error
    assert final.counts.get("failed", 0) <= 2 and final.counts.get("done", 0) == 0
    assert final.counts.get("cancelled", 0) >= 10
    assert calls <= 2  # the items in the first window; the rest never asked the model


def test_a_job_runs_as_submitted_whatever_the_worker_environment_says(
    make_cluster, sqlite_url, tmp_path, monkeypatch
):
    """Submitted on the openai backend; a worker whose environment says builtin and has no
    key waits and says why (never answers on builtin); a worker with the key then finishes
    every item on openai, and the report's configuration matches who answered."""
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.db.models import VlmCall
    from tests.conformance.harness import read_job, simulated
    from tests.conformance.items import images, multiple_choice
    from tests.conformance.simulated_model import Behaviour

    items = multiple_choice(images(tmp_path / "images", 4), 4, seed=1)
    upgrade(sqlite_url)
    engine = make_engine(sqlite_url)
    with simulated(Behaviour.LETTERS, items) as (server, _model):
        cluster = make_cluster(sqlite_url, AGENTIC_IQA_VLM_CACHE="false")
        cluster.env.pop("OPENAI_API_KEY", None)
        for name, value in {
            "VLM_BACKEND": "openai",
            "VLM_MODEL": "sim-vl",
            "VLM_BASE_URL": f"{server.url}/v1",
        }.items():
            monkeypatch.setenv(f"AGENTIC_IQA_{name}", value)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-sim-submitter")  # submitted with a key
        from tests.conformance.items import write_manifest

        manifest = write_manifest(items, tmp_path / "m.csv")
        job_id = submit(engine, JobSpec.build(manifest=manifest))
        for name in ("VLM_BACKEND", "VLM_MODEL", "VLM_BASE_URL"):
            monkeypatch.delenv(f"AGENTIC_IQA_{name}")
        cluster.start("nokey", "default,gpu")
        start_job(cluster, job_id)
        deadline = time.monotonic() + 60
        while not progress(engine, job_id).waiting:
            assert time.monotonic() < deadline, "the worker without the key never said why"
            time.sleep(0.3)
        waiting = progress(engine, job_id)
        assert waiting.counts.get("done", 0) == 0 and waiting.status == "running"
        assert "openai (sim-vl)" in waiting.waiting and "OPENAI_API_KEY" in waiting.waiting
        assert len(server.requests) == 0  # nothing was answered on anything else

        cluster.env["OPENAI_API_KEY"] = "sk-sim-worker"
        cluster.start("withkey", "default,gpu")
        final = wait(engine, job_id, poll=0.3, timeout=120)
    assert final.status == "done" and final.counts == {"done": 4}, final
    assert final.waiting is None
    result = read_job(Behaviour.LETTERS, sqlite_url, job_id, items, None, {})
    assert result.share_right() == 1.0
    with read_scope(engine) as session:
        answered = set(session.execute(select(VlmCall.backend, VlmCall.model).distinct()).all())
    assert answered == {("openai", "sim-vl")}
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentic_iqa",
            "eval",
            "report",
            job_id,
            "--json",
            "--bootstrap",
            "0",
        ],
        cwd=REPO,
        env={**cluster.env, "OPENAI_API_KEY": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    import json

    document = json.loads(report.stdout)
    assert document["job"]["backend"] == "openai" and document["job"]["model"] == "sim-vl"
    assert document["job"]["answered_by"] == {"openai/sim-vl": 4}
    assert document["job"]["warnings"] == []
    roles = document["job"]["configuration"]["roles"]
    assert {role["model"] for role in roles.values()} == {"sim-vl"}
    assert "sk-sim" not in report.stdout
