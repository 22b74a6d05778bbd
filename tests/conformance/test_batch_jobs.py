"""Jobs with ``--batch`` through the simulated batch interfaces, with the real SDKs: the same
answers as online, at half the cost, nothing paid twice, cancel and resume."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.conformance.batch_jobs import (
    environment,
    make_items,
    patched_env,
    read_ran,
    run_job,
    simulated_batches,
)
from tests.conformance.simulated_model import Behaviour


def _online_and_batch(tmp_path: Path, behaviour: Behaviour, count: int, **options: object):
    items = make_items(tmp_path, count, seed=3)
    runs = {}
    for batch in (False, True):
        folder = tmp_path / ("batch" if batch else "online")
        folder.mkdir()
        with simulated_batches(behaviour, items, delay=0.1, seed=3, **options) as (
                server, batches, _model), \
                patched_env(environment(behaviour, server, folder)):
            runs[batch] = (run_job(folder, items, batch=batch), batches)
    return items, runs


@pytest.mark.parametrize("behaviour", [Behaviour.CLEAN, Behaviour.ANTHROPIC])
def test_a_batch_job_answers_item_for_item_as_online_at_half_the_cost(
        tmp_path: Path, behaviour: Behaviour) -> None:
    items, runs = _online_and_batch(tmp_path, behaviour, 6)
    (online, online_server), (batched, batch_server) = runs[False], runs[True]
    assert set(online.answers) == {item.id for item in items}
    assert batched.answers == online.answers  # status, final answer, score: item for item
    assert all(status == "done" for status, _, _ in online.answers.values())
    # Every call of the batch job went through a batch, none online, none paid twice.
    assert batch_server.online_billed == [] and batch_server.billed
    assert max(Counter(batch_server.billed).values()) == 1
    assert len(online_server.online_billed) == online.summary["calls"]
    assert batched.summary["calls"] == online.summary["calls"] == len(batch_server.billed)
    assert batched.summary["batch_calls"] == batched.summary["calls"]
    assert batched.rounds >= 3  # plan, then each later model step, in rounds
    assert batched.summary["cost_usd"] == pytest.approx(0.5 * online.summary["cost_usd"])


def test_errored_and_expired_requests_go_to_the_next_round_then_fail_their_item(
        tmp_path: Path) -> None:
    """q1 (an item's plan) errors in every batch: its item fails with the provider's reason
    after three; q2 errors once and q3 expires in every batch: q2 is answered in the next
    round, q3's item fails as expired.  The fourth item is untouched."""
    items = make_items(tmp_path, 4, seed=3)
    seen: Counter[str] = Counter()

    def errored(custom_id: str) -> bool:
        seen[custom_id] += 1
        return custom_id == "q1" or (custom_id == "q2" and seen[custom_id] == 1)

    folder = tmp_path / "job"
    folder.mkdir()
    with simulated_batches(Behaviour.CLEAN, items, seed=3, fail=errored, expire={"q3"}) as (
            server, _batches, _model), \
            patched_env(environment(Behaviour.CLEAN, server, folder)):
        ran = run_job(folder, items, batch=True)
    from agentic_iqa.db import make_engine, reads
    from agentic_iqa.db.engine import read_scope

    with read_scope(make_engine(f"sqlite:///{folder / 'results.sqlite3'}")) as session:
        rows = {row["item_id"]: row for row in reads.export_rows(session, ran.job_id)}
    failed = sorted((row["error"] or "") for row in rows.values() if row["status"] != "done")
    assert len(failed) == 2, rows
    assert any("not a valid image" in error and "in 3 batches" in error for error in failed)
    assert any("expired" in error and "in 3 batches" in error for error in failed)
    assert sum(row["status"] == "done" for row in rows.values()) == 2
    assert seen["q1"] == 3 and seen["q2"] == 2  # q2 answered at its second batch


@pytest.mark.parametrize("read_first", [True, False], ids=["read-before-resume", "resume-at-once"])
def test_a_batch_job_is_cancelled_and_resumed_paying_for_nothing_twice(
        tmp_path: Path, read_first: bool) -> None:
    """Cancelled while its first batch is open; the batch is cancelled at the provider (the
    lines it processed are answered); the resume takes those answers over and sends only the
    rest (whether the cancelled batch was read before the resume or after), then runs to the
    end."""
    import threading
    import time

    from agentic_iqa.db import make_engine, upgrade
    from agentic_iqa.pipeline import AgentsCache
    from agentic_iqa.runtime import lifecycle
    from tests.conformance.items import write_manifest

    items = make_items(tmp_path, 4, seed=5)
    folder = tmp_path / "job"
    folder.mkdir()
    with simulated_batches(Behaviour.CLEAN, items, delay=30.0, seed=5,
                           processed_on_cancel=2) as (server, batches, _model), \
            patched_env(environment(Behaviour.CLEAN, server, folder)):
        import os

        url = os.environ["AGENTIC_IQA_DATABASE_URL"]
        upgrade(url)
        engine = make_engine(url)
        job_id = lifecycle.submit(engine, write_manifest(items, folder / "m.csv"), batch=True)
        runner = threading.Thread(target=lifecycle.run_local,
                                  args=(engine, job_id, AgentsCache()), daemon=True)
        runner.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _sent(lifecycle.progress(engine, job_id)):
            time.sleep(0.05)
        assert len(batches.batches) == 1
        lifecycle.cancel(engine, job_id)
        runner.join(timeout=60)
        assert not runner.is_alive()
        assert lifecycle.progress(engine, job_id).status == "cancelled"
        batches.delay = 0.0
        if read_first:  # the cancelled batch's answers read before anything is resumed
            from agentic_iqa.runtime import batches as rounds

            while lifecycle.progress(engine, job_id).batch.open:
                rounds.tick(engine, dispatch=lambda _run: None, lease_seconds=None,
                            job_id=job_id)
                time.sleep(0.05)
        lifecycle.resume(engine, job_id)
        lifecycle.run_local(engine, job_id, AgentsCache())
        ran = read_ran(engine, job_id)
        billed = list(batches.billed)
    assert all(status == "done" for status, _, _ in ran.answers.values()), ran.answers
    assert max(Counter(billed).values()) == 1
    digests = Counter(digest for _, digest in billed)
    assert max(digests.values()) == 1  # no request body paid for twice, under any custom id
    assert ran.summary["batch_calls"] == ran.summary["calls"] == len(billed)
    assert len(batches.batches) >= 3  # the cancelled one, then the rounds after the resume
    first = next(iter(batches.batches.values()))
    assert sum(o.kind == "canceled" for o in first.outcomes.values()) == 2


def _sent(progress: object) -> bool:
    """The job's first batch is with the provider (its id recorded)."""
    batch = getattr(progress, "batch", None)
    return bool(batch and batch.open and batch.open[0].provider_id)


def test_batch_answers_land_in_the_response_cache_so_the_same_job_online_makes_no_call(
        tmp_path: Path) -> None:
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
        billed_after = batches.billed[len(billed):]
    batched, online = ran[True], ran[False]
    assert billed and online_calls == [] and billed_after == []
    assert online.answers == batched.answers
    assert online.summary["calls"] == 0
    assert online.summary["cache_hits"] == batched.summary["calls"] == len(billed)


@pytest.mark.parametrize("behaviour", [Behaviour.CLEAN, Behaviour.ANTHROPIC])
def test_a_batch_refused_as_a_whole_stops_the_job_with_one_message(
        tmp_path: Path, behaviour: Behaviour) -> None:
    """OpenAI fails the batch at validation; Anthropic refuses it with a 400 at create."""
    items = make_items(tmp_path, 3, seed=1)
    folder = tmp_path / "job"
    folder.mkdir()
    with simulated_batches(behaviour, items, seed=1, reject=True) as (server, batches, _m), \
            patched_env(environment(behaviour, server, folder)):
        ran = run_job(folder, items, batch=True)
        from agentic_iqa.db import make_engine
        from agentic_iqa.runtime import lifecycle

        current = lifecycle.progress(make_engine(
            f"sqlite:///{folder / 'results.sqlite3'}"), ran.job_id)
    assert current.status == "cancelled"
    assert current.error is not None and "refused a batch" in current.error
    assert "Enqueued token limit" in current.error and "\n" not in current.error
    assert not any(status == "done" for status, _, _ in ran.answers.values())
    assert batches.billed == [] and batches.online_billed == []


def test_a_server_without_a_batch_endpoint_or_the_builtin_backend_is_refused_at_submit(
        tmp_path: Path) -> None:
    from agentic_iqa.db import make_engine, reads, upgrade
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.runtime import lifecycle
    from agentic_iqa.vlm.base import VLMConfigurationError
    from tests.conformance.items import write_manifest

    items = make_items(tmp_path, 2, seed=1)
    folder = tmp_path / "job"
    folder.mkdir()
    manifest = write_manifest(items, folder / "m.csv")
    with simulated_batches(Behaviour.CLEAN, items, supports_batches=False) as (
            server, _batches, _model), \
            patched_env(environment(Behaviour.CLEAN, server, folder)):
        import os

        url = os.environ["AGENTIC_IQA_DATABASE_URL"]
        upgrade(url)
        engine = make_engine(url)
        with pytest.raises(VLMConfigurationError) as refused:
            lifecycle.submit(engine, manifest, batch=True)
        with patched_env({"AGENTIC_IQA_VLM_BACKEND": "builtin", "AGENTIC_IQA_VLM_MODEL": None,
                          "AGENTIC_IQA_VLM_BASE_URL": None}), \
                pytest.raises(VLMConfigurationError) as builtin:
            lifecycle.submit(engine, manifest, batch=True)
        with read_scope(engine) as session:
            assert reads.latest_job(session) is None  # nothing stored
    assert "--batch" in str(refused.value) and "\n" not in str(refused.value)
    assert "builtin" in str(builtin.value) and "drop --batch" in str(builtin.value)


def test_eval_status_shows_the_rounds_and_the_batch_calls(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from agentic_iqa.cli import app

    items = make_items(tmp_path, 2, seed=2)
    folder = tmp_path / "job"
    folder.mkdir()
    with simulated_batches(Behaviour.CLEAN, items, seed=2) as (server, _batches, _model), \
            patched_env(environment(Behaviour.CLEAN, server, folder)) as _, \
            patched_env({"COLUMNS": "300"}):
        ran = run_job(folder, items, batch=True)
        shown = CliRunner().invoke(app, ["eval", "status", ran.job_id])
        document = json.loads(CliRunner().invoke(
            app, ["eval", "status", ran.job_id, "--json"]).stdout)
    assert shown.exit_code == 0, shown.output
    assert f"batch: round {ran.rounds}; requests: {ran.summary['calls']} answered" \
        in shown.output
    assert f"{ran.summary['calls']} in batches, at the batch price" in shown.output
    assert document["batch"]["round"] == ran.rounds and document["batch"]["open"] == []
    assert document["batch"]["requests"] == {"answered": ran.summary["calls"]}


def test_eval_submit_batch_on_the_builtin_backend_is_one_line_and_exit_2(tmp_path: Path
                                                                        ) -> None:
    from typer.testing import CliRunner

    from agentic_iqa.cli import app
    from tests.conformance.items import write_manifest

    items = make_items(tmp_path, 2, seed=1)
    manifest = write_manifest(items, tmp_path / "m.csv")
    env = {"AGENTIC_IQA_DATABASE_URL": f"sqlite:///{tmp_path / 'r.sqlite3'}",
           "AGENTIC_IQA_BROKER_URL": "", "AGENTIC_IQA_VLM_BACKEND": "builtin", "COLUMNS": "300"}
    with patched_env({"AGENTIC_IQA_VLM_MODEL": None, "AGENTIC_IQA_VLM_BASE_URL": None}):
        result = CliRunner().invoke(app, ["eval", "submit", str(manifest), "--batch"], env=env)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "builtin backend" in lines[0] and "drop --batch" in lines[0]


def test_a_local_batch_job_whose_process_is_killed_mid_round_is_resumed_from_the_database(
        tmp_path: Path) -> None:
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
    with simulated_batches(Behaviour.CLEAN, items, delay=3.0, seed=4) as (
            server, batches, _model):
        env = {**os.environ, **environment(Behaviour.CLEAN, server, folder),
               "PYTHONPATH": str(REPO)}
        command = [sys.executable, "-m", "agentic_iqa", "eval", "submit", str(manifest),
                   "--batch", "--backend", "openai", "--no-vlm-cache"]
        submitter = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
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
        resumed = subprocess.run([sys.executable, "-m", "agentic_iqa", "eval", "resume"],
                                 env=env, capture_output=True, text=True, timeout=300)
        billed = list(batches.billed)
        created = len(batches.batches)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "3 done, 0 failed of 3 items" in resumed.stderr
    assert max(Counter(digest for _, digest in billed).values()) == 1
    assert created >= 3  # the first round went on from the database, then the next rounds
