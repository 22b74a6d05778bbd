"""A job remembers how it was run and says only what happened.

The OpenAI-compatible server is the simulated right model of ``tests/conformance`` (the real
SDK against a local server); the CLI is invoked as a user would.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db import jobs as store
from agentic_iqa.db import make_engine, upgrade
from agentic_iqa.db.engine import session_scope
from agentic_iqa.db.models import Job, VlmCall
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runconfig import RunConfig
from agentic_iqa.runtime.progress import progress
from agentic_iqa.runtime.submission import submit
from tests.conformance.harness import simulated
from tests.conformance.items import images, multiple_choice, scoring, write_manifest
from tests.conformance.simulated_model import Behaviour

runner = CliRunner()


@pytest.fixture
def items(tmp_path: Path):
    paths = images(tmp_path / "images", 6)
    return multiple_choice(paths, 4, seed=2) + scoring(paths, 2, seed=2)


def _openai_env(monkeypatch: pytest.MonkeyPatch, server, *, key: str | None) -> None:
    for name, value in {
        "VLM_BACKEND": "openai",
        "VLM_MODEL": "sim-vl",
        "VLM_BASE_URL": f"{server.url}/v1",
    }.items():
        monkeypatch.setenv(f"AGENTIC_IQA_{name}", value)
    if key is None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", key)


def _builtin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell that says nothing of the job's backend: the default is builtin."""
    for name in ("VLM_BACKEND", "VLM_MODEL", "VLM_BASE_URL"):
        monkeypatch.delenv(f"AGENTIC_IQA_{name}", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_the_job_stores_how_it_is_run_without_credentials(items, tmp_path, results, monkeypatch):
    with simulated(Behaviour.CLEAN, items) as (server, _model):
        _openai_env(monkeypatch, server, key="sk-sim-secret-key")
        monkeypatch.setenv("AGENTIC_IQA_MAX_REPLAN_ITERATIONS", "1")
        upgrade(results)
        job_id = submit(
            make_engine(results), JobSpec.build(manifest=write_manifest(items, tmp_path / "m.csv"))
        )
    with session_scope(make_engine(results)) as session:
        text = session.get(Job, job_id).config_json
    config = RunConfig.from_json(text)
    assert {c.backend for c in config.roles.values()} == {"openai"}
    assert {c.model for c in config.roles.values()} == {"sim-vl"}
    assert config.keyed == {"planner": True, "executor": True, "summarizer": True}
    assert config.max_replan_iterations == 1 and config.prompts.startswith("2:")
    assert "PIQE" in config.tools.catalog and config.tools.precision["PIQE"] == "float64"
    assert "sk-sim-secret-key" not in text


def test_a_job_resumed_from_a_shell_without_the_key_refuses_then_runs_on_its_backend(
    items, tmp_path, results, monkeypatch
):
    """Interrupted after submit; `eval resume` from a shell whose environment says builtin and
    has no key exits 2 and changes nothing; with the key it finishes every item on openai."""
    with simulated(Behaviour.LETTERS, items) as (server, _model):
        _openai_env(monkeypatch, server, key="sk-sim-submitter")
        upgrade(results)
        engine = make_engine(results)
        manifest = write_manifest(items, tmp_path / "m.csv")
        job_id = submit(engine, JobSpec.build(manifest=manifest))
        _builtin_env(monkeypatch)
        refused = runner.invoke(app, ["eval", "resume"])
        assert refused.exit_code == 2, refused.output
        assert "cannot run here" in refused.output and "OPENAI_API_KEY" in refused.output
        assert len(refused.output.strip().splitlines()) == 1
        assert progress(engine, job_id).counts == {"pending": len(items)}
        assert len(server.requests) == 0

        monkeypatch.setenv("OPENAI_API_KEY", "sk-sim-resumer")
        resumed = runner.invoke(app, ["eval", "resume", job_id[:8]])
        assert resumed.exit_code == 0, resumed.output
    assert progress(engine, job_id).counts == {"done": len(items)}
    with session_scope(engine) as session:
        answered = set(session.execute(select(VlmCall.backend, VlmCall.model)).all())
    assert answered == {("openai", "sim-vl")}
    report = json.loads(runner.invoke(app, ["eval", "report", "--json", "--bootstrap", "0"]).stdout)
    assert report["job"]["answered_by"] == {"openai/sim-vl": len(items)}
    assert report["job"]["warnings"] == []
    assert report["mcq"]["accuracy"] == 1.0


def test_submit_without_a_key_stores_nothing_and_exits_2_with_one_line(
    tmp_path, results, monkeypatch
):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    manifest = tmp_path / "m.csv"
    manifest.write_text("image\nx.png\n")
    result = runner.invoke(
        app, ["eval", "submit", str(manifest), "--backend", "openai", "--model", "gpt-4o"]
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: openai backend: the API key variable OPENAI_API_KEY is not set (or empty)"
    ]
    assert not Path(results.removeprefix("sqlite:///")).exists()


def test_a_model_the_server_does_not_serve_is_refused_before_anything_is_stored(
    tmp_path, results, monkeypatch
):
    from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Reply

    class Listing(FakeAPIServer):
        """A server that lists its models (GET /v1/models)."""

        def _handler_class(self):
            handler = super()._handler_class()

            class WithModels(handler):
                def do_GET(self) -> None:  # noqa: N802
                    payload = json.dumps(
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": "qwen2.5-vl-7b",
                                    "object": "model",
                                    "created": 0,
                                    "owned_by": "me",
                                }
                            ],
                        }
                    ).encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

            return WithModels

    manifest = tmp_path / "m.csv"
    manifest.write_text("image\nx.png\n")
    with Listing(lambda _r: Reply(500, {})) as server:
        result = runner.invoke(
            app,
            [
                "eval",
                "submit",
                str(manifest),
                "--backend",
                "openai",
                "--model",
                "qwen2.5-vl-72b",
                "--base-url",
                f"{server.url}/v1",
            ],
        )
    assert result.exit_code == 2
    assert "does not serve the model 'qwen2.5-vl-72b' (it serves: qwen2.5-vl-7b)" in " ".join(
        result.output.split()
    )
    assert not Path(results.removeprefix("sqlite:///")).exists()


def test_a_local_job_whose_process_died_shows_stalled_with_the_command_to_resume(
    tmp_path, results, monkeypatch
):
    from tests.conftest import natural_image

    folder = tmp_path / "photos"
    folder.mkdir()
    from PIL import Image

    for index in range(3):
        Image.fromarray(natural_image(index)).save(folder / f"{index}.png")
    upgrade(results)
    engine = make_engine(results)
    job_id = submit(engine, JobSpec.build(manifest=folder))
    # What a killed `eval submit` leaves: the job fed here, two items claimed with a lease that
    # nobody renews any more (here: already passed), one never started.
    with session_scope(engine) as session:
        store.set_dispatch(session, job_id, "local")
        store.claim_items(session, store.get_job(session, job_id), 2, lease_seconds=-1)
    current = progress(engine, job_id)
    assert current.orphaned and current.eta_seconds is None
    text = runner.invoke(app, ["eval", "status"], env={"COLUMNS": "200"}).stdout
    assert "): stalled" in text
    assert f"agentic-iqa eval resume {job_id[:8]}" in text and "ETA" not in text
    listed = json.loads(runner.invoke(app, ["eval", "list", "--json"]).stdout)
    assert [row["status"] for row in listed if row["id"] == job_id] == ["stalled"]
    assert (
        len(
            runner.invoke(app, ["eval", "list", "--status", "running", "--json"]).stdout.split(
                job_id
            )
        )
        == 2
    )  # still stored as running: the filter finds it
    # while a process works on it, it renews the leases: not stalled
    with session_scope(engine) as session:
        store.extend_leases(session, job_id, 30)
    assert not progress(engine, job_id).orphaned
    listed = json.loads(runner.invoke(app, ["eval", "list", "--json"]).stdout)
    assert [row["status"] for row in listed if row["id"] == job_id] == ["running"]


def test_export_has_the_reasoning_and_levels_and_writes_to_stdout(
    items, tmp_path, results, monkeypatch
):
    with simulated(Behaviour.CLEAN, items) as (server, _model):
        _openai_env(monkeypatch, server, key=None)
        submitted = runner.invoke(
            app,
            ["eval", "submit", str(write_manifest(items, tmp_path / "m.csv")), "--workers", "1"],
        )
        assert submitted.exit_code == 0, submitted.output
    monkeypatch.chdir(tmp_path)
    piped = runner.invoke(app, ["eval", "export", "-o", "-"])
    assert piped.exit_code == 0 and not (tmp_path / "-").exists()
    rows = list(csv.DictReader(io.StringIO(piped.stdout)))
    assert len(rows) == len(items)
    rated = [row for row in rows if row["item_id"].startswith("score")]
    assert all(row["reasoning"].startswith("Fused quality") for row in rated)
    assert all(
        set(json.loads(row["level_distribution"])) == {"Bad", "Poor", "Fair", "Good", "Excellent"}
        for row in rated
    )
    assert {row["answered_by"] for row in rows} == {"openai/sim-vl"}
    lines = runner.invoke(app, ["eval", "export", "--format", "jsonl", "-o", "-"]).stdout
    assert json.loads(lines.splitlines()[0])["reasoning"]
    default = runner.invoke(app, ["eval", "export"])
    written = next(tmp_path.glob("job-*.csv"))
    assert f"wrote {len(items)} rows to {written}" in " ".join(default.output.split())
    assert "-o - writes to standard output" in " ".join(default.output.split())
    parquet = runner.invoke(app, ["eval", "export", "--format", "parquet", "-o", "-"])
    assert parquet.exit_code == 2 and "needs a file" in parquet.output


def test_check_tries_each_backend_and_says_what_it_found(items, monkeypatch):
    with simulated(Behaviour.CLEAN, items) as (server, _model):
        _openai_env(monkeypatch, server, key=None)
        result = runner.invoke(app, ["check", "--json"])
        found = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    (probe,) = found
    assert probe["roles"] == ["planner", "executor", "summarizer"]
    assert probe["ok"] and probe["logprobs"] is True and probe["latency_s"] > 0
    assert probe["answered_model"] == "sim-vl"
    with simulated(Behaviour.BAD_KEY, items) as (server, _model):
        _openai_env(monkeypatch, server, key="sk-wrong-key-here")
        refused = runner.invoke(app, ["check"])
    assert refused.exit_code == 2
    assert "FAILED" in refused.output and "HTTP 401" in refused.output
    assert "sk-wrong-key-here" not in refused.output


def test_one_vocabulary_of_flags(items, tmp_path, results, monkeypatch):
    """--backend/--model/--base-url on assess; calibrate under eval, defaulting to the latest
    job; the old `calibrate` still works."""
    with simulated(Behaviour.CLEAN, items) as (server, _model):
        _builtin_env(monkeypatch)
        rated = next(item for item in items if item.truth.level is not None)
        assessed = runner.invoke(
            app,
            [
                "assess",
                str(rated.image),
                "-q",
                rated.truth.query,
                "--json",
                "--backend",
                "openai",
                "--model",
                "sim-vl",
                "--base-url",
                f"{server.url}/v1",
            ],
        )
        assert assessed.exit_code == 0, assessed.output
        usage = json.loads(assessed.stdout)["vlm_usage"]
        assert usage["calls"] >= 2 and usage["models"] == ["sim-vl"]
    _builtin_env(monkeypatch)
    upgrade(results)
    manifest = write_manifest(items, tmp_path / "m.csv")
    submit(make_engine(results), JobSpec.build(manifest=manifest))
    for command in (["eval", "calibrate", "--tool", "PIQE"], ["calibrate", "--tool", "PIQE"]):
        result = runner.invoke(app, command)
        # the latest job is taken: 2 of its items have a MOS, too few to fit
        assert result.exit_code == 1 and "only 2 items with MOS" in result.output, result.output
