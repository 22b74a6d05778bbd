"""Jobs with ``--batch`` through the simulated batch interfaces, with the real SDKs: the same
answers as online, at half the cost, nothing paid twice, cancel and resume."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentic_iqa.db.jobs import latest_job
from agentic_iqa.jobs.spec import JobSpec
from tests.conformance.batch_jobs import (
    environment,
    make_items,
    patched_env,
    read_ran,
    run_job,
    simulated_batches,
)
from tests.conformance.simulated_model import Behaviour

# Left out of the README's test command (CI runs it): end-to-end batch rounds against simulated
# providers, processes killed.
pytestmark = pytest.mark.slow


def _online_and_batch(tmp_path: Path, behaviour: Behaviour, count: int, **options: object):
    items = make_items(tmp_path, count, seed=3)
    runs = {}
    for batch in (False, True):
        folder = tmp_path / ("batch" if batch else "online")
        folder.mkdir()
        with (
            simulated_batches(behaviour, items, delay=0.1, seed=3, **options) as (
                server,
                batches,
                _model,
            ),
            patched_env(environment(behaviour, server, folder)),
        ):
            runs[batch] = (run_job(folder, items, batch=batch), batches)
    return items, runs


@pytest.mark.parametrize("behaviour", [Behaviour.CLEAN, Behaviour.ANTHROPIC])
def test_a_batch_job_answers_item_for_item_as_online_at_half_the_cost(
    tmp_path: Path, behaviour: Behaviour
) -> None:
    items, runs = _online_and_batch(tmp_path, behaviour, 6)
    (online, online_server), (batched, batch_server) = runs[False], runs[True]
    assert set(online.answers) == {item.id for item in items}
    assert batched.answers == online.answers  # status, final answer, score: item for item
    assert all(status == "done" for status, _, _ in online.answers.values())
    # Every call of the batch job went through a batch, none online, none paid twice.
    assert batch_server.online_billed == [] and batch_server.billed
    assert max(Counter(_request(c) for c, _ in batch_server.billed).values()) == 1
    assert len(online_server.online_billed) == online.summary["calls"]
    assert batched.summary["calls"] == online.summary["calls"] == len(batch_server.billed)
    assert batched.summary["batch_calls"] == batched.summary["calls"]
    assert batched.rounds >= 3  # plan, then each later model step, in rounds
    assert batched.summary["cost_usd"] == pytest.approx(0.5 * online.summary["cost_usd"])


def _request(custom_id: str) -> str:
    """The request a line stands for (``q<id>``), whichever batch carried it."""
    return custom_id.rsplit("_", 1)[-1]


@pytest.mark.parametrize("behaviour", [Behaviour.CLEAN, Behaviour.ANTHROPIC])
def test_a_bad_request_fails_at_once_and_a_transient_error_goes_to_the_next_round(
    tmp_path: Path, behaviour: Behaviour
) -> None:
    """q1 (an item's plan) is refused with HTTP 400 (the request itself is bad): its item
    fails at once with the provider's reason, the request sent in one batch only.  q2 meets a
    500 once and is answered in the next round; q3 expires and q4 meets a 529 (overloaded) in
    every batch: their items fail after three batches.  The fifth item is untouched."""
    items = make_items(tmp_path, 5, seed=3)
    seen: Counter[str] = Counter()

    def errored(custom_id: str) -> bool | int:
        request = _request(custom_id)
        seen[request] += 1
        if request == "q1":
            return True  # HTTP 400
        if request == "q2" and seen[request] == 1:
            return 500
        return 529 if request == "q4" else False

    folder = tmp_path / "job"
    folder.mkdir()
    with (
        simulated_batches(
            behaviour,
            items,
            seed=3,
            fail=errored,
            expire=lambda custom_id: _request(custom_id) == "q3",
        ) as (server, batches, _model),
        patched_env(environment(behaviour, server, folder)),
    ):
        ran = run_job(folder, items, batch=True)
        received = Counter(_request(custom_id) for custom_id, _ in batches.received)
    from agentic_iqa.db import make_engine
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.db.exports import export_rows

    with read_scope(make_engine(f"sqlite:///{folder / 'results.sqlite3'}")) as session:
        rows = {row["item_id"]: row for row in export_rows(session, ran.job_id)}
    failed = sorted((row["error"] or "") for row in rows.values() if row["status"] != "done")
    assert len(failed) == 3, rows
    bad = "HTTP 400: " if behaviour == Behaviour.CLEAN else "invalid_request_error: "
    busy = "HTTP 529: " if behaviour == Behaviour.CLEAN else "overloaded_error: "
    assert any(
        bad + "Could not process image" in error
        and "refused by the provider: not sent again" in error
        for error in failed
    )
    assert any(busy in error and "in 3 batches" in error for error in failed)
    assert any("expired" in error and "in 3 batches" in error for error in failed)
    assert sum(row["status"] == "done" for row in rows.values()) == 2
    assert (received["q1"], received["q2"], received["q3"], received["q4"]) == (1, 2, 3, 3)


@pytest.mark.parametrize("read_first", [True, False], ids=["read-before-resume", "resume-at-once"])
def test_a_batch_job_is_cancelled_and_resumed_paying_for_nothing_twice(
    tmp_path: Path, read_first: bool
) -> None:
    """Cancelled while its first batch is open; the batch is cancelled at the provider (the
    lines it processed are answered, and billed: the cancelled job's cost counts them); the
    resume takes those answers over and sends only the rest (whether the cancelled batch was
    read before the resume or after), then runs to the end."""
    import threading
    import time

    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.db import make_engine, upgrade
    from agentic_iqa.runtime.lifecycle import cancel, resume
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.progress import progress
    from agentic_iqa.runtime.submission import submit
    from agentic_iqa.vlm.usage import describe
    from tests.conformance.items import write_manifest

    items = make_items(tmp_path, 4, seed=5)
    folder = tmp_path / "job"
    folder.mkdir()
    with (
        simulated_batches(Behaviour.CLEAN, items, delay=30.0, seed=5, processed_on_cancel=2) as (
            server,
            batches,
            _model,
        ),
        patched_env(environment(Behaviour.CLEAN, server, folder)),
    ):
        import os

        url = os.environ["AGENTIC_IQA_DATABASE_URL"]
        upgrade(url)
        engine = make_engine(url)
        manifest = write_manifest(items, folder / "m.csv")
        job_id = submit(engine, JobSpec.build(manifest=manifest, batch=True))
        runner = threading.Thread(
            target=run_local, args=(engine, job_id, AgentsCache()), daemon=True
        )
        runner.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _sent(progress(engine, job_id)):
            time.sleep(0.05)
        assert len(batches.batches) == 1
        cancel(engine, job_id)
        runner.join(timeout=60)
        assert not runner.is_alive()
        assert progress(engine, job_id).status == "cancelled"
        batches.delay = 0.0
        if read_first:  # the cancelled batch's answers read before anything is resumed
            from agentic_iqa.runtime import batches as rounds

            while progress(engine, job_id).batch.open:
                rounds.tick(engine, dispatch=lambda _run: None, lease_seconds=None, job_id=job_id)
                time.sleep(0.05)
            cancelled = read_ran(engine, job_id).summary
            assert len(batches.billed) == 2  # what the provider processed before the cancel
            assert (
                cancelled["calls"],
                cancelled["batch_calls"],
                cancelled["unused_batch_answers"],
            ) == (2, 2, 2)
            assert cancelled["input_tokens"] > 0 and cancelled["output_tokens"] > 0
            assert "2 answered for runs that ended without them, billed" in describe(cancelled)
        resume(engine, job_id)
        run_local(engine, job_id, AgentsCache())
        ran = read_ran(engine, job_id)
        billed = list(batches.billed)
    assert all(status == "done" for status, _, _ in ran.answers.values()), ran.answers
    assert max(Counter(_request(custom_id) for custom_id, _ in billed).values()) == 1
    digests = Counter(digest for _, digest in billed)
    assert max(digests.values()) == 1  # no request body paid for twice, under any custom id
    assert ran.summary["batch_calls"] == ran.summary["calls"] == len(billed)
    assert ran.summary["unused_batch_answers"] == 0  # the resume took them: counted once
    assert len(batches.batches) >= 3  # the cancelled one, then the rounds after the resume
    first = next(iter(batches.batches.values()))
    assert sum(o.kind == "canceled" for o in first.outcomes.values()) == 2


def _sent(progress: object) -> bool:
    """The job's first batch is with the provider (its id recorded)."""
    batch = getattr(progress, "batch", None)
    return bool(batch and batch.open and batch.open[0].provider_id)


def test_batch_answers_land_in_the_response_cache_so_the_same_job_online_makes_no_call(
    tmp_path: Path,
) -> None:
    """Both jobs at the same endpoint (the cache key names it), each with its own database."""
    items = make_items(tmp_path, 3, seed=7)
    ran = {}
    with simulated_batches(Behaviour.CLEAN, items, seed=7) as (server, batches, _model):
        for batch in (True, False):
            folder = tmp_path / ("batch" if batch else "online")
            folder.mkdir()
            with patched_env(environment(Behaviour.CLEAN, server, folder, cache=True)):
                ran[batch] = run_job(folder, items, batch=batch)
            if batch:
                billed = list(batches.billed)
        online_calls = list(batches.online_billed)
        billed_after = batches.billed[len(billed) :]
    batched, online = ran[True], ran[False]
    assert billed and online_calls == [] and billed_after == []
    assert online.answers == batched.answers
    assert online.summary["calls"] == 0
    assert online.summary["cache_hits"] == batched.summary["calls"] == len(billed)


@pytest.mark.parametrize("behaviour", [Behaviour.CLEAN, Behaviour.ANTHROPIC])
def test_a_batch_refused_as_a_whole_stops_the_job_with_one_message(
    tmp_path: Path, behaviour: Behaviour
) -> None:
    """OpenAI fails the batch at validation; Anthropic refuses it with a 400 at create."""
    items = make_items(tmp_path, 3, seed=1)
    folder = tmp_path / "job"
    folder.mkdir()
    with (
        simulated_batches(behaviour, items, seed=1, reject=True) as (server, batches, _m),
        patched_env(environment(behaviour, server, folder)),
    ):
        ran = run_job(folder, items, batch=True)
        from agentic_iqa.db import make_engine
        from agentic_iqa.runtime.progress import progress

        current = progress(make_engine(f"sqlite:///{folder / 'results.sqlite3'}"), ran.job_id)
    assert current.status == "cancelled"
    assert current.error is not None and "refused a batch" in current.error
    assert "Enqueued token limit" in current.error and "\n" not in current.error
    assert not any(status == "done" for status, _, _ in ran.answers.values())
    assert batches.billed == [] and batches.online_billed == []


def test_a_server_without_a_batch_endpoint_or_the_builtin_backend_is_refused_at_submit(
    tmp_path: Path,
) -> None:
    from agentic_iqa.db import make_engine, upgrade
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.runtime.submission import submit
    from agentic_iqa.vlm.base import VLMConfigurationError
    from tests.conformance.items import write_manifest

    items = make_items(tmp_path, 2, seed=1)
    folder = tmp_path / "job"
    folder.mkdir()
    manifest = write_manifest(items, folder / "m.csv")
    with (
        simulated_batches(Behaviour.CLEAN, items, supports_batches=False) as (
            server,
            _batches,
            _model,
        ),
        patched_env(environment(Behaviour.CLEAN, server, folder)),
    ):
        import os

        url = os.environ["AGENTIC_IQA_DATABASE_URL"]
        upgrade(url)
        engine = make_engine(url)
        with pytest.raises(VLMConfigurationError) as refused:
            submit(engine, JobSpec.build(manifest=manifest, batch=True))
        with (
            patched_env(
                {
                    "AGENTIC_IQA_VLM_BACKEND": "builtin",
                    "AGENTIC_IQA_VLM_MODEL": None,
                    "AGENTIC_IQA_VLM_BASE_URL": None,
                }
            ),
            pytest.raises(VLMConfigurationError) as builtin,
        ):
            submit(engine, JobSpec.build(manifest=manifest, batch=True))
        with read_scope(engine) as session:
            assert latest_job(session) is None  # nothing stored
    assert "--batch" in str(refused.value) and "\n" not in str(refused.value)
    assert "builtin" in str(builtin.value) and "drop --batch" in str(builtin.value)


def test_eval_status_shows_the_rounds_and_the_batch_calls(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from agentic_iqa.cli import app

    items = make_items(tmp_path, 2, seed=2)
    folder = tmp_path / "job"
    folder.mkdir()
    with (
        simulated_batches(Behaviour.CLEAN, items, seed=2) as (server, _batches, _model),
        patched_env(environment(Behaviour.CLEAN, server, folder)) as _,
        patched_env({"COLUMNS": "300"}),
    ):
        ran = run_job(folder, items, batch=True)
        shown = CliRunner().invoke(app, ["eval", "status", ran.job_id])
        document = json.loads(
            CliRunner().invoke(app, ["eval", "status", ran.job_id, "--json"]).stdout
        )
    assert shown.exit_code == 0, shown.output
    assert f"batch: round {ran.rounds}; requests: {ran.summary['calls']} answered" in shown.output
    assert f"{ran.summary['calls']} in batches, at the batch price" in shown.output
    assert document["batch"]["round"] == ran.rounds and document["batch"]["open"] == []
    assert document["batch"]["requests"] == {"answered": ran.summary["calls"]}


def test_eval_submit_batch_on_the_builtin_backend_is_one_line_and_exit_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentic_iqa.cli import app
    from tests.conformance.items import write_manifest

    items = make_items(tmp_path, 2, seed=1)
    manifest = write_manifest(items, tmp_path / "m.csv")
    env = {
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'r.sqlite3'}",
        "AGENTIC_IQA_BROKER_URL": "",
        "AGENTIC_IQA_VLM_BACKEND": "builtin",
        "COLUMNS": "300",
    }
    with patched_env({"AGENTIC_IQA_VLM_MODEL": None, "AGENTIC_IQA_VLM_BASE_URL": None}):
        result = CliRunner().invoke(app, ["eval", "submit", str(manifest), "--batch"], env=env)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "builtin backend" in lines[0] and "drop --batch" in lines[0]


def test_a_local_batch_job_whose_process_is_killed_mid_round_is_resumed_from_the_database(
    tmp_path: Path,
) -> None:
    """`eval submit --batch` (no broker) SIGKILLed while its first batch is open; `eval
    resume` reads that batch's answers back from the provider and finishes the job, with
    nothing paid twice."""
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    from tests.conformance.harness import REPO
    from tests.conformance.items import write_manifest

    items = make_items(tmp_path, 3, seed=4)
    folder = tmp_path / "job"
    folder.mkdir()
    manifest = write_manifest(items, folder / "m.csv")
    with simulated_batches(Behaviour.CLEAN, items, delay=3.0, seed=4) as (server, batches, _model):
        env = {
            **os.environ,
            **environment(Behaviour.CLEAN, server, folder),
            "PYTHONPATH": str(REPO),
        }
        command = [
            sys.executable,
            "-m",
            "agentic_iqa",
            "eval",
            "submit",
            str(manifest),
            "--batch",
            "--backend",
            "openai",
            "--no-vlm-cache",
        ]
        submitter = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while not batches.batches and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # its id recorded
        os.killpg(submitter.pid, signal.SIGKILL)
        submitter.wait(timeout=10)
        batches.delay = 0.0  # the next rounds at once
        database = folder / "results.sqlite3"
        with sqlite3.connect(database) as db:  # a lease later: the process is gone
            db.execute("update runs set lease_until = datetime('now', '-1 minute')")
        resumed = subprocess.run(
            [sys.executable, "-m", "agentic_iqa", "eval", "resume"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        billed = list(batches.billed)
        created = len(batches.batches)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "3 done, 0 failed of 3 items" in resumed.stderr
    assert max(Counter(digest for _, digest in billed).values()) == 1
    assert created >= 3  # the first round went on from the database, then the next rounds


def _backdate(database: Path, minutes: float) -> None:
    """The batch rows and the runs' leases as they would be ``minutes`` later: the process
    that wrote them is long gone."""
    from datetime import timedelta

    from sqlalchemy import select, update

    from agentic_iqa.db import make_engine
    from agentic_iqa.db.engine import session_scope
    from agentic_iqa.db.models import Run, VlmBatch, utc_now

    with session_scope(make_engine(f"sqlite:///{database}")) as session:
        for row in session.scalars(select(VlmBatch)):
            row.created_at = row.created_at - timedelta(minutes=minutes)
        session.execute(update(Run).values(lease_until=utc_now() - timedelta(minutes=1)))


@dataclass
class Crashed:
    """What a job killed the moment its first batch was created, then resumed, left."""

    resumed: Any
    orphan: Any
    batches: Any
    received: list[tuple[str, str]]
    billed: list[tuple[str, str]]
    ran: Any


def _crash_then_resume(
    tmp_path: Path,
    behaviour: Behaviour,
    before_resume: Callable[[Any, Any, Any], None] | None = None,
) -> Crashed:
    """`eval submit --batch` SIGKILLed the moment the provider created its first batch,
    before the reply (the batch's id) reached it; ten minutes later (the batch row and the
    provider's batch backdated), `eval resume`.  ``before_resume(server, batches, orphan)``
    may add to the provider's state first."""
    import os
    import signal
    import subprocess
    import sys

    from agentic_iqa.db import make_engine
    from tests.conformance.harness import REPO
    from tests.conformance.items import write_manifest

    items = make_items(tmp_path, 3, seed=4)
    folder = tmp_path / "job"
    folder.mkdir()
    manifest = write_manifest(items, folder / "m.csv")
    victim: dict[str, Any] = {}

    def crash(batch: Any) -> None:  # the provider has the batch; its creator dies unanswered
        if "batch" not in victim:
            victim["batch"] = batch
            os.killpg(victim["pid"], signal.SIGKILL)

    with simulated_batches(behaviour, items, seed=4, after_create=crash) as (
        server,
        batches,
        _model,
    ):
        env = {**os.environ, **environment(behaviour, server, folder), "PYTHONPATH": str(REPO)}
        command = [
            sys.executable,
            "-m",
            "agentic_iqa",
            "eval",
            "submit",
            str(manifest),
            "--batch",
            "--backend",
            env["AGENTIC_IQA_VLM_BACKEND"],
            "--no-vlm-cache",
        ]
        submitter = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        victim["pid"] = submitter.pid
        code = submitter.wait(timeout=120)
        assert submitter.stderr is not None
        assert code == -signal.SIGKILL, submitter.stderr.read().decode()[-3000:]
        orphan = victim["batch"]
        orphan.created -= 600
        _backdate(folder / "results.sqlite3", 10)
        if before_resume is not None:
            before_resume(server, batches, orphan)
        resumed = subprocess.run(
            [sys.executable, "-m", "agentic_iqa", "eval", "resume"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        received = list(batches.received)
        billed = list(batches.billed)
    database = folder / "results.sqlite3"
    ran = read_ran(make_engine(f"sqlite:///{database}"), _latest_job(database))
    return Crashed(resumed, orphan, batches, received, billed, ran)


@pytest.mark.parametrize("behaviour", [Behaviour.CLEAN, Behaviour.ANTHROPIC])
def test_a_batch_created_as_its_process_is_killed_is_adopted_and_never_sent_again(
    tmp_path: Path, behaviour: Behaviour
) -> None:
    """The resume finds the batch at the provider (OpenAI: by our id in its metadata;
    Anthropic: by its creation time and size, its results by their custom_ids) and reads its
    answers: the provider received each request once, and the ledger (vlm_calls) counts
    every request it received."""
    crashed = _crash_then_resume(tmp_path, behaviour)
    assert crashed.resumed.returncode == 0, crashed.resumed.stderr[-2000:]
    assert "3 done, 0 failed of 3 items" in crashed.resumed.stderr
    assert next(iter(crashed.batches.batches.values())) is crashed.orphan
    assert crashed.orphan.outcomes is not None  # adopted and read
    assert all(outcome.kind == "succeeded" for outcome in crashed.orphan.outcomes.values())
    assert max(Counter(digest for _, digest in crashed.received).values()) == 1
    assert len(crashed.received) == len(crashed.billed) == crashed.ran.summary["calls"]
    assert crashed.ran.summary["batch_calls"] == crashed.ran.summary["calls"]


def test_a_look_alike_batch_of_another_user_is_set_aside_and_ours_adopted(tmp_path: Path) -> None:
    """Anthropic: someone else on the account created a batch of the same size a few seconds
    before ours.  Being the older, it is adopted first; its results carry none of our
    custom_ids, so it is set aside unread (kept as a closed row, never taken again) and ours
    is found next: nothing of ours sent twice, nothing of theirs used."""
    import anthropic

    def look_alike(server: Any, batches: Any, orphan: Any) -> None:
        client = anthropic.Anthropic(base_url=server.url, api_key="sk-someone-else")
        other = client.messages.batches.create(
            requests=[
                {
                    "custom_id": f"theirs-{index}",
                    "params": {
                        "model": "claude-other",
                        "max_tokens": 16,
                        "messages": [{"role": "user", "content": f"Hello {index}"}],
                    },
                }
                for index in range(len(orphan.lines))
            ]
        )
        client.close()
        batches.batches[other.id].created = orphan.created - 5
        lookalike.append(other.id)

    lookalike: list[str] = []
    crashed = _crash_then_resume(tmp_path, Behaviour.ANTHROPIC, look_alike)
    ours = [
        (custom_id, digest)
        for custom_id, digest in crashed.received
        if not custom_id.startswith("theirs-")
    ]
    import sqlite3

    with sqlite3.connect(tmp_path / "job" / "results.sqlite3") as db:
        set_aside = db.execute(
            "select provider_id, status, read from vlm_batches where status = 'not ours'"
        ).fetchall()
    assert crashed.resumed.returncode == 0, crashed.resumed.stderr[-2000:]
    assert "3 done, 0 failed of 3 items" in crashed.resumed.stderr
    assert set_aside == [(lookalike[0], "not ours", 1)]
    assert crashed.orphan.outcomes is not None  # ours, adopted next and read
    assert max(Counter(digest for _, digest in ours).values()) == 1
    assert len(ours) == crashed.ran.summary["calls"]


def test_a_batch_sent_with_the_previous_custom_ids_is_read_by_them(tmp_path: Path) -> None:
    """A batch sent before custom ids named their batch (``q<id>``: the previous version,
    read by this one after an upgrade) is read by those ids: every answer used, nothing sent
    again."""
    items = make_items(tmp_path, 3, seed=9)
    folder = tmp_path / "job"
    folder.mkdir()

    def as_before(batch: Any) -> None:
        batch.lines = [(custom_id.rsplit("_", 1)[-1], body) for custom_id, body in batch.lines]

    with (
        simulated_batches(Behaviour.CLEAN, items, seed=9, after_create=as_before) as (
            server,
            batches,
            _model,
        ),
        patched_env(environment(Behaviour.CLEAN, server, folder)),
    ):
        ran = run_job(folder, items, batch=True)
        sent = [custom_id for batch in batches.batches.values() for custom_id in batch.custom_ids]
        billed = list(batches.billed)
    assert all(status == "done" for status, _, _ in ran.answers.values()), ran.answers
    assert all(custom_id.startswith("q") for custom_id in sent)
    assert len(sent) == len(set(sent)) == len(billed) == ran.summary["calls"]


def _latest_job(database: Path) -> str:
    import sqlite3

    with sqlite3.connect(database) as db:
        return db.execute("select id from jobs order by created_at desc limit 1").fetchone()[0]


def _run_until_a_batch_is_open(engine: Any, job_id: str) -> Any:
    """A local job in a thread, until its first batch is with the provider."""
    import threading
    import time

    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.progress import progress

    runner = threading.Thread(target=run_local, args=(engine, job_id, AgentsCache()), daemon=True)
    runner.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _sent(progress(engine, job_id)):
        time.sleep(0.05)
    assert _sent(progress(engine, job_id))
    return runner


def _open_at_provider(batches: Any) -> list[str]:
    """Batches the provider is still working on (neither ended nor cancelled)."""
    return [
        batch.id
        for batch in batches.batches.values()
        if batch.outcomes is None and batch.cancel_at is None and not batch.rejection
    ]


@pytest.mark.parametrize("behaviour", [Behaviour.CLEAN, Behaviour.ANTHROPIC])
def test_eval_cancel_cancels_the_open_batch_at_the_provider(
    tmp_path: Path, behaviour: Behaviour
) -> None:
    import os

    from typer.testing import CliRunner

    from agentic_iqa.cli import app
    from agentic_iqa.db import make_engine, upgrade
    from agentic_iqa.runtime.progress import progress
    from agentic_iqa.runtime.submission import submit
    from tests.conformance.items import write_manifest

    items = make_items(tmp_path, 3, seed=5)
    folder = tmp_path / "job"
    folder.mkdir()
    with (
        simulated_batches(behaviour, items, delay=60.0, seed=5) as (server, batches, _m),
        patched_env({**environment(behaviour, server, folder), "COLUMNS": "300"}),
    ):
        url = os.environ["AGENTIC_IQA_DATABASE_URL"]
        upgrade(url)
        engine = make_engine(url)
        manifest = write_manifest(items, folder / "m.csv")
        job_id = submit(engine, JobSpec.build(manifest=manifest, batch=True))
        runner = _run_until_a_batch_is_open(engine, job_id)
        assert len(_open_at_provider(batches)) == 1
        shown = CliRunner().invoke(app, ["eval", "cancel", job_id])
        runner.join(timeout=60)
        open_after = _open_at_provider(batches)
        first = next(iter(batches.batches.values()))
        status = progress(engine, job_id).status
    assert shown.exit_code == 0, shown.output
    assert f"job {job_id} cancelled" in shown.output
    # The job's runner, in this process, may see the job cancelled and cancel the batch at the
    # provider before the command's own call (then recorded ended, and not named again): either
    # way it is cancelled there, once.
    assert f"batch {first.id} cancelled at the provider" in shown.output or _recorded_ended(
        engine, job_id
    )
    assert not runner.is_alive() and status == "cancelled"
    assert open_after == [] and first.cancel_at is not None


def _recorded_ended(engine: Any, job_id: str) -> bool:
    """Whether every batch of the job is recorded as ended."""
    from agentic_iqa.db import batches as store
    from agentic_iqa.db.engine import read_scope

    with read_scope(engine) as session:
        return all(batch.ended for batch in store.open_batches(session, job_id))


@pytest.mark.parametrize("retry", ["supervisor", "cancel-again"])
def test_a_cancel_that_cannot_reach_the_provider_is_done_by_the_next_tick(
    tmp_path: Path, retry: str
) -> None:
    """The job on workers (fed and polled by the supervisor, its runs walked here as a
    worker would): `eval cancel` while the provider answers 503 cancels the job in the
    database and says the batch is left to the next tick; once the provider is back, the
    supervisor's next pass cancels it there, or `eval cancel` run again does."""
    import os
    import time

    from typer.testing import CliRunner

    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.cli import app
    from agentic_iqa.db import jobs as job_store
    from agentic_iqa.db import make_engine, upgrade
    from agentic_iqa.db.engine import session_scope
    from agentic_iqa.runtime import embedded
    from agentic_iqa.runtime.progress import progress
    from agentic_iqa.runtime.submission import submit
    from agentic_iqa.runtime.supervisor import supervise_once
    from tests.conformance.items import write_manifest

    items = make_items(tmp_path, 2, seed=6)
    folder = tmp_path / "job"
    folder.mkdir()
    agents = AgentsCache()
    with (
        simulated_batches(Behaviour.ANTHROPIC, items, delay=60.0, seed=6) as (server, batches, _m),
        patched_env({**environment(Behaviour.ANTHROPIC, server, folder), "COLUMNS": "300"}),
    ):
        url = os.environ["AGENTIC_IQA_DATABASE_URL"]
        upgrade(url)
        engine = make_engine(url)
        manifest = write_manifest(items, folder / "m.csv")
        job_id = submit(engine, JobSpec.build(manifest=manifest, batch=True))
        with session_scope(engine) as session:
            job_store.set_dispatch(session, job_id, "workers")

        def supervise() -> Any:
            runs: list[str] = []
            done = supervise_once(engine, window=8, lease_seconds=60, dispatch=runs.append)
            for run_id in runs:
                embedded.walk_embedded(engine, agents, run_id, lease_seconds=60)
            return done

        deadline = time.monotonic() + 60
        while not _sent(progress(engine, job_id)):
            assert time.monotonic() < deadline, "no batch sent"
            supervise()
        (provider_id,) = _open_at_provider(batches)
        batches.down = True
        shown = CliRunner().invoke(app, ["eval", "cancel", job_id])
        status = progress(engine, job_id).status
        open_while_down = _open_at_provider(batches)
        batches.down = False
        if retry == "supervisor":
            ticked = supervise()
            again = None
        else:
            again = CliRunner().invoke(app, ["eval", "cancel", job_id])
        open_after = _open_at_provider(batches)
    assert shown.exit_code == 0, shown.output
    assert status == "cancelled" and open_while_down == [provider_id]
    assert "not cancelled at the provider yet" in shown.output
    assert "503" in shown.output and "the next round tick cancels it" in shown.output
    if again is None:
        assert ticked.batched.cancelled == [provider_id], ticked
    else:
        assert again.exit_code == 0, again.output
        assert f"batch {provider_id} cancelled at the provider" in again.output
    assert open_after == [] and batches.batches[provider_id].cancel_at is not None


def test_a_batch_created_while_its_job_is_cancelled_is_cancelled_by_its_sender(
    tmp_path: Path,
) -> None:
    """The cancel lands while the provider is creating the round's batch: the cancel sees no
    provider id to cancel, so the process that sent the batch cancels it once it has one."""
    import os

    from sqlalchemy import update

    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.db import make_engine, upgrade
    from agentic_iqa.db.engine import session_scope
    from agentic_iqa.db.models import Job
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit
    from tests.conformance.items import write_manifest

    items = make_items(tmp_path, 2, seed=8)
    folder = tmp_path / "job"
    folder.mkdir()
    state: dict[str, Any] = {}

    def cancelled_meanwhile(_batch: Any) -> None:
        with session_scope(state["engine"]) as session:
            session.execute(update(Job).values(status="cancelled"))

    with (
        simulated_batches(
            Behaviour.CLEAN, items, delay=60.0, seed=8, after_create=cancelled_meanwhile
        ) as (server, batches, _m),
        patched_env(environment(Behaviour.CLEAN, server, folder)),
    ):
        url = os.environ["AGENTIC_IQA_DATABASE_URL"]
        upgrade(url)
        state["engine"] = engine = make_engine(url)
        manifest = write_manifest(items, folder / "m.csv")
        job_id = submit(engine, JobSpec.build(manifest=manifest, batch=True))
        run_local(engine, job_id, AgentsCache())
        created = list(batches.batches.values())
    assert len(created) == 1 and created[0].cancel_at is not None
