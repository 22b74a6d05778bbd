"""One value describes a job.  A :class:`JobSpec` is checked once when built, stored
as the job's record beside the columns old readers read, copied per sweep cell, and read back
(reconstructed from the columns for a job stored before specs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select, text

from agentic_iqa.db.about import job_summary
from agentic_iqa.db.engine import read_scope
from agentic_iqa.db.jobs import get_job
from agentic_iqa.db.models import Job, JobItem
from agentic_iqa.jobs.spec import JobSpec, JobSpecError
from agentic_iqa.runtime.lifecycle import job_spec
from agentic_iqa.runtime.progress import progress
from agentic_iqa.runtime.submission import submit
from tests.conftest import livec_manifest
from tests.dataset_roots import koniq_root, livec_root, livec_rows


def _job(engine, job_id: str) -> Job:
    with read_scope(engine) as session:
        job = get_job(session, job_id)
        session.expunge(job)
        return job


def test_a_spec_round_trips_through_the_database_and_fills_the_old_columns(
    engine, tmp_path, livec_dir
):
    manifest = livec_manifest(livec_dir, tmp_path / "m.csv", 4)
    spec = JobSpec.build(
        manifest=manifest,
        tools=["PIQE"],
        group="g1",
        limit=3,
        query="How good is it?",
        mos_range=(0, 100),
        vlm_cache=False,
        check_images=False,
    )
    job_id = submit(engine, spec)
    stored = job_spec(engine, job_id)
    assert (
        stored.group,
        stored.limit,
        stored.tools,
        stored.mode,
        stored.query,
        stored.mos_range,
        stored.vlm_cache,
        stored.manifest,
    ) == ("g1", 3, ("PIQE",), "tools", "How good is it?", (0.0, 100.0), False, manifest.resolve())
    assert stored.name == "m.csv" and stored.max_replan_iterations == 2
    assert stored.config is not None and stored.config.metric_tools == ["PIQE"]
    job = _job(engine, job_id)
    assert (job.name, job.tools, job.mode, job.default_query, job.job_group, job.vlm_cache) == (
        "m.csv",
        "PIQE",
        "tools",
        "How good is it?",
        "g1",
        False,
    )
    assert job.config_json == stored.config.to_json()
    with read_scope(engine) as session:
        assert len(session.scalars(select(JobItem).where(JobItem.job_id == job_id)).all()) == 3
        about = job_summary(session, job_id)
    assert about["group"] == "g1" and about["spec"]["limit"] == 3
    assert about["spec"]["tools"] == ["PIQE"] and "config" not in about["spec"]


def test_a_job_stored_before_specs_gets_one_from_its_columns(engine, tmp_path, livec_dir):
    root = koniq_root(livec_dir, tmp_path / "koniq", 2)
    job_id = submit(
        engine,
        JobSpec.build(dataset="koniq", root=root, tools=["PIQE"], query="q?", check_images=False),
    )
    with engine.begin() as connection:
        connection.execute(text("UPDATE jobs SET spec_json = NULL, job_group = NULL"))
    spec = job_spec(engine, job_id)
    assert (
        spec.dataset,
        spec.split,
        spec.root,
        spec.mode,
        spec.tools,
        spec.query,
        spec.mos_range,
        spec.score,
        spec.group,
        spec.manifest,
    ) == (
        "koniq10k",
        "all",
        root.resolve(),
        "tools",
        ("PIQE",),
        "q?",
        (1.0, 5.0),
        "mos",
        None,
        None,
    )
    assert spec.config is not None and spec.config.metric_tools == ["PIQE"]
    assert spec.batch is False and spec.max_replan_iterations == 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"manifest": "m.csv", "mode": "tools"}, "--mode tools runs the tools alone"),
        ({"manifest": "m.csv", "mode": "vlm", "tools": ["PIQE"]}, "--mode vlm asks no tool"),
        ({"manifest": "m.csv", "mode": "agent", "tools": ["PIQE"]}, "tools alone are --mode tools"),
        ({"manifest": "m.csv", "mode": "both"}, "unknown --mode 'both': agent, vlm or tools"),
        ({"manifest": "m.csv", "dataset": "livec", "root": "/d"}, "not both"),
        ({}, "give a manifest, or a dataset: --dataset NAME --root DIR"),
        ({"dataset": "livec"}, "--dataset livec needs --root"),
        (
            {"dataset": "livec", "root": "/d", "score": "zscore"},
            "--score zscore: dataset livec publishes no MOS_zscore (only koniq10k does)",
        ),
        ({"manifest": "m.csv", "score": "zscore"}, "a manifest publishes no MOS_zscore"),
        ({"dataset": "koniq", "root": "/d", "score": "median"}, "unknown --score 'median'"),
        ({"manifest": "m.csv", "limit": 0}, "limit: Input should be greater than or equal to 1"),
    ],
)
def test_the_rules_are_checked_once_when_the_spec_is_built(fields, message):
    with pytest.raises(JobSpecError) as caught:
        JobSpec.build(**fields)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_sweep_cell_is_a_copy_checked_again():
    base = JobSpec.build(dataset="koniq", root="/d", tools=["PIQE"], group="g")
    cell = base.cell(dataset="livec", split="all")
    assert (cell.dataset, cell.split, cell.group, cell.tools) == ("livec", "all", "g", ("PIQE",))
    assert base.dataset == "koniq"
    with pytest.raises(JobSpecError, match="--mode vlm asks no tool"):
        base.cell(mode="vlm")
    assert isinstance(JobSpec.build(dataset="koniq", root="s3://bucket/koniq").root, str)
    assert JobSpec.build(dataset="koniq", root="/d").root == Path("/d")


def test_a_dataset_job_is_named_for_dataset_split_mode_and_model(engine, tmp_path, livec_dir):
    koniq = koniq_root(livec_dir, tmp_path / "koniq", 1)
    livec = livec_root(livec_dir, tmp_path / "livec", 1)
    metric = submit(
        engine, JobSpec.build(dataset="KonIQ-10k", root=koniq, tools=["PIQE"], check_images=False)
    )
    agent = submit(engine, JobSpec.build(dataset="livec", root=livec, check_images=False))
    assert _job(engine, metric).name == "koniq10k-all-tools-PIQE"
    assert _job(engine, agent).name == "livec-all-agent-builtin"
    named = submit(
        engine, JobSpec.build(dataset="livec", root=livec, name="mine", check_images=False)
    )
    assert _job(engine, named).name == job_spec(engine, named).name == "mine"


def _mos(engine, job_id: str) -> list[float]:
    with read_scope(engine) as session:
        return list(
            session.scalars(
                select(JobItem.mos).where(JobItem.job_id == job_id).order_by(JobItem.line)
            )
        )


def test_koniq_scored_against_the_zscore_reads_the_mos_zscore_column(engine, tmp_path, livec_dir):
    root = koniq_root(livec_dir, tmp_path / "koniq", 3)
    by_mos = submit(
        engine, JobSpec.build(dataset="koniq", root=root, tools=["PIQE"], check_images=False)
    )
    by_z = submit(
        engine,
        JobSpec.build(
            dataset="koniq", root=root, tools=["PIQE"], score="zscore", check_images=False
        ),
    )
    published = [mos for _, mos in livec_rows(livec_dir, 3)]
    assert _mos(engine, by_z) == pytest.approx(published, abs=1e-4)
    assert _mos(engine, by_mos) == pytest.approx([1 + 4 * m / 100 for m in published], abs=1e-4)
    spec = job_spec(engine, by_z)
    assert (spec.score, spec.scored_against, spec.mos_range) == (
        "zscore",
        "MOS_zscore",
        (0.0, 100.0),
    )
    with read_scope(engine) as session:
        about = job_summary(session, by_z)
    assert about["scored_against"] == "MOS_zscore"
    assert about["dataset"]["mos_range"] == [0.0, 100.0] and about["dataset"]["score"] == "zscore"


def test_resume_reads_how_the_job_runs_from_its_record(tmp_path, results, livec_dir, monkeypatch):
    """The record is what a resume honours: a job submitted on openai with a key, resumed from
    a shell without one, is refused before anything runs, even with the old configuration
    column emptied."""
    from typer.testing import CliRunner

    from agentic_iqa.cli import app
    from agentic_iqa.db import make_engine, upgrade
    from agentic_iqa.runconfig import capture
    from agentic_iqa.vlm.settings import ROLES, BackendConfig

    monkeypatch.setenv("OPENAI_API_KEY", "sk-sim-submitter")
    roles = {
        role: BackendConfig(backend="openai", model="gpt-4o", base_url="http://127.0.0.1:9/v1")
        for role in ROLES
    }
    upgrade(results)
    engine = make_engine(results)
    config = capture(max_replan_iterations=1, vlm_cache=True, roles=roles)
    job_id = submit(
        engine,
        JobSpec.build(manifest=livec_manifest(livec_dir, tmp_path / "m.csv", 2), config=config),
    )
    with engine.begin() as connection:
        connection.execute(text("UPDATE jobs SET config_json = NULL"))
    monkeypatch.delenv("OPENAI_API_KEY")
    refused = CliRunner().invoke(app, ["eval", "resume", job_id[:8]])
    assert refused.exit_code == 2, refused.output
    assert "cannot run here" in refused.output and "OPENAI_API_KEY" in refused.output
    assert progress(engine, job_id).counts == {"pending": 2}
    assert job_spec(engine, job_id).config.max_replan_iterations == 1
