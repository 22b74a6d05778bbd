"""Metric jobs (``eval submit --tools``): the named tools on every image, no agent, no VLM."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from PIL import Image
from scipy.stats import spearmanr
from sqlalchemy import func, select
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.cli.eval import export_rows
from agentic_iqa.db.engine import session_scope
from agentic_iqa.db.models import Job, JobItem, Run, StepRecord, ToolLog, VlmCall
from agentic_iqa.fitting.degradations import degrade
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.jobs.tools import MetricToolsError, parse_tools
from agentic_iqa.pipeline import EXECUTE, Agents, next_step
from agentic_iqa.reports.export import write_rows
from agentic_iqa.reports.report import build_report
from agentic_iqa.reports.report_html import render_html
from agentic_iqa.reports.report_text import render_text
from agentic_iqa.runtime import lifecycle
from agentic_iqa.state import initial_state
from agentic_iqa.vlm.builtin import BuiltinClient
from iqa_tools import ToolRegistry, ToolSettings
from tests.conftest import natural_image
from tests.workers.conftest import PIPELINE_TOOLS

runner = CliRunner()
TOOLS = ["PIQE", "SSIM", "PSNR"]
SIZE = (96, 72)


def save(pixels, path: Path) -> Path:
    Image.fromarray(pixels).save(path)
    return path


@pytest.fixture
def pairs_manifest(tmp_path: Path) -> Path:
    """Eight noisy copies of four photos with their references; MOS falls as noise grows."""
    rows = []
    for index in range(8):
        reference = save(natural_image(index % 4, SIZE), tmp_path / f"ref{index % 4}.png")
        level = 1 + index // 2
        noisy = degrade(Image.open(reference), "noise", level)
        noisy.save(tmp_path / f"noisy{index}.png")
        rows.append([f"noisy{index}.png", reference.name, 90 - 20 * level + index % 2, f"i{index}"])
    path = tmp_path / "pairs.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "reference", "mos", "id"])
        writer.writerows(rows)
    return path


def test_next_step_of_a_metric_run_is_only_tool_execution() -> None:
    state = initial_state("metrics: PIQE", "a.png", metric_tools=["piqe"])
    assert next_step(state) == EXECUTE
    assert next_step({**state, "steps_done": [EXECUTE]}) is None
    assert next_step(initial_state("q", "a.png")) == "plan"


@pytest.mark.slow
def test_metric_job_scores_are_the_registrys_and_export_and_report_them(
    engine, pairs_manifest, agents, tmp_path
):
    job_id = lifecycle.submit(
        engine, JobSpec.build(manifest=pairs_manifest, tools=["piqe", "SSIM", "psnr", "PIQE"])
    )
    lifecycle.run_local(engine, job_id, agents, workers=2)
    final = lifecycle.progress(engine, job_id)
    assert (final.status, final.counts, final.tools) == ("done", {"done": 8}, tuple(TOOLS))

    with session_scope(engine) as session:
        job = session.get(Job, job_id)
        assert (job.tools, job.default_query) == ("PIQE,SSIM,PSNR", "metrics: PIQE,SSIM,PSNR")
        runs = session.scalars(select(Run).where(Run.job_id == job_id)).all()
        assert {(run.status, run.final_answer, run.error) for run in runs} == {
            ("succeeded", None, None)
        }
        steps = session.execute(
            select(StepRecord.step, StepRecord.iteration, StepRecord.queue)
            .join(Run, Run.id == StepRecord.run_id)
            .where(Run.job_id == job_id)
        ).all()
        assert sorted(steps) == [(EXECUTE, 0, "in-process")] * 8  # no plan, no summary
        assert session.scalar(select(func.count()).select_from(VlmCall)) == 0
        logs = session.execute(
            select(JobItem.image, JobItem.reference, ToolLog)
            .join(ToolLog, ToolLog.run_id == JobItem.run_id)
            .where(JobItem.job_id == job_id)
        ).all()
    assert len(logs) == 8 * 3
    fresh = ToolRegistry(ToolSettings(device="cpu", tool_cache="none"))
    for image, reference, log in logs:
        expected = fresh.execute_tool(
            log.tool_name, image, reference if log.tool_name != "PIQE" else None
        )
        assert (log.object_name, log.distortion) == ("Global", f"metric:{log.tool_name}")
        assert (log.fallback, log.error) == (False, None)
        assert log.raw_score == pytest.approx(expected.raw_score, rel=1e-9, abs=1e-12)
        assert log.normalized_score == pytest.approx(expected.normalized_score, rel=1e-9)

    columns, rows = export_rows(engine, job_id)
    for tool in TOOLS:
        assert f"tool:{tool}" in columns and f"raw:{tool}" in columns
    path = write_rows(rows, tmp_path / "out.csv", "csv", columns) and tmp_path / "out.csv"
    with path.open() as handle:
        exported = list(csv.DictReader(handle))
    by_log = {(image, log.tool_name): log for image, _reference, log in logs}
    for row in exported:
        for tool in TOOLS:
            log = by_log[(row["image"], tool)]
            assert float(row[f"raw:{tool}"]) == pytest.approx(log.raw_score, rel=1e-9)
            assert float(row[f"tool:{tool}"]) == pytest.approx(log.normalized_score, rel=1e-9)
        assert row["quality_score"] == "" and row["final_answer"] == ""

    report = build_report(exported, bootstrap=50, metric_job=True)
    assert report["kind"] == "metric" and report["agent"] is None
    tools = {entry["tool"]: entry for entry in report["tools"]}
    assert sorted(tools) == sorted(TOOLS)
    mos = [float(row["mos"]) for row in exported]
    for tool in TOOLS:
        normalized = [float(row[f"tool:{tool}"]) for row in exported]
        raw = [float(row[f"raw:{tool}"]) for row in exported]
        # The headline is the tool's own score, sign-corrected; [1,5] beside it.
        own_sign = -1 if tool == "PIQE" else 1  # PIQE: lower is better
        assert tools[tool]["n"] == 8
        assert tools[tool]["srcc"] == pytest.approx(own_sign * spearmanr(raw, mos).statistic)
        assert tools[tool]["srcc_raw"] == pytest.approx(spearmanr(raw, mos).statistic)
        assert tools[tool]["normalized"]["srcc"] == pytest.approx(
            spearmanr(normalized, mos).statistic
        )
    assert tools["PSNR"]["srcc"] > 0.8  # more noise, lower PSNR, lower MOS
    text = render_text(report)
    assert "Metric job (no agent)" in text and "Agent vs MOS" not in text
    assert "PSNR" in text and "SRCC [1,5]" in text
    page = render_html(report, exported, tmp_path / "report.html").read_text()
    assert 'class="agent"' not in page and page.count('<tr class="tool">') == 3


def test_a_tool_that_fails_leaves_the_others_and_the_item_fails_only_when_all_did(
    engine, tmp_path, monkeypatch
):
    """``Broken`` (a toy tool registered by override) scores NaN on every image: logged with
    its error, no fallback ran, and PIQE's scores keep the items done."""
    overrides = tmp_path / "broken.json"
    overrides.write_text(json.dumps({"tools": {"Broken": PIPELINE_TOOLS["Broken"]}}))
    monkeypatch.setenv("AGENTIC_IQA_METADATA_OVERRIDES", json.dumps([str(overrides)]))
    settings = ToolSettings(device="cpu", tool_cache="memory", metadata_overrides=[overrides])
    client = BuiltinClient()
    agents = Agents(
        planner=client, executor=client, summarizer=client, registry=ToolRegistry(settings)
    )
    for seed in range(2):
        save(natural_image(seed, SIZE), tmp_path / f"p{seed}.png")

    both = lifecycle.submit(
        engine, JobSpec.build(manifest=tmp_path, tools=["PIQE", "Broken"], tool_settings=settings)
    )
    lifecycle.run_local(engine, both, agents, workers=1)
    broken_only = lifecycle.submit(
        engine, JobSpec.build(manifest=tmp_path, tools=["Broken"], tool_settings=settings)
    )
    lifecycle.run_local(engine, broken_only, agents, workers=1)

    rows = list(export_rows(engine, both)[1])
    assert [row["status"] for row in rows] == ["done", "done"]
    assert all(row["raw:PIQE"] is not None and row["raw:Broken"] is None for row in rows)
    with session_scope(engine) as session:
        broken_logs = session.execute(
            select(ToolLog.tool_name, ToolLog.fallback, ToolLog.error)
            .join(Run, Run.id == ToolLog.run_id)
            .where(Run.job_id == both, ToolLog.tool_name != "PIQE")
        ).all()
    assert [(name, fallback) for name, fallback, _ in broken_logs] == [("Broken", False)] * 2
    assert all("Broken returned nan" in error for *_, error in broken_logs)
    failed = list(export_rows(engine, broken_only)[1])
    assert [row["status"] for row in failed] == ["failed", "failed"]
    assert all(
        row["error"].startswith("every tool failed: Broken: Broken returned nan") for row in failed
    )


def test_resume_reruns_only_the_failed_item_and_recomputes_nothing_done(engine, agents, tmp_path):
    good = [save(natural_image(seed, SIZE), tmp_path / f"g{seed}.png") for seed in range(3)]
    broken = tmp_path / "broken.png"
    broken.write_bytes(good[0].read_bytes()[:200])  # truncated: fails when the run decodes it
    job_id = lifecycle.submit(
        engine, JobSpec.build(manifest=tmp_path, tools=["PIQE"], check_images=False)
    )
    lifecycle.run_local(engine, job_id, agents, workers=2)
    assert lifecycle.progress(engine, job_id).counts == {"done": 3, "failed": 1}

    def snapshot() -> tuple[dict[str, str | None], int, int]:
        with session_scope(engine) as session:
            runs = dict(
                session.execute(
                    select(JobItem.item_key, JobItem.run_id).where(JobItem.job_id == job_id)
                ).all()
            )
            attempts = session.scalar(select(func.sum(StepRecord.attempts)))
            return runs, attempts, session.scalar(select(func.count()).select_from(ToolLog))

    runs, attempts, tool_rows = snapshot()
    assert lifecycle.resume(engine, job_id) == (1, [])
    lifecycle.run_local(engine, job_id, agents, workers=2)
    after_runs, after_attempts, after_tool_rows = snapshot()
    assert lifecycle.progress(engine, job_id).counts == {"done": 3, "failed": 1}
    changed = {key for key in runs if runs[key] != after_runs[key]}
    assert changed == {"broken.png"}  # only the failed item got a new run
    assert (after_attempts, after_tool_rows) == (attempts + 1, tool_rows)
    assert lifecycle.resume(engine, job_id)[1] == [] and snapshot()[1] == after_attempts


def test_bad_tool_names_are_refused_before_anything_is_stored(engine, tmp_path):
    save(natural_image(0, SIZE), tmp_path / "a.png")
    with pytest.raises(MetricToolsError, match=r"unknown tool 'FOO'.*Known tools: .*PIQE"):
        lifecycle.submit(engine, JobSpec.build(manifest=tmp_path, tools=["PIQE", "FOO"]))
    with pytest.raises(
        MetricToolsError,
        match=r"line 1 \('a.png'\): SSIM is a full-reference tool and this "
        "row has no reference",
    ):
        lifecycle.submit(engine, JobSpec.build(manifest=tmp_path, tools=["PIQE", "SSIM"]))
    nothing_here = ToolSettings(device="cpu", weights_dir=tmp_path / "empty", allow_downloads=False)
    with pytest.raises(
        MetricToolsError,
        match=r"BRISQUE cannot run here \(no, needs: "
        r"brisque_svm_weights.pth\)",
    ):
        lifecycle.submit(
            engine, JobSpec.build(manifest=tmp_path, tools=["BRISQUE"], tool_settings=nothing_here)
        )
    with pytest.raises(MetricToolsError, match="names no tool"):
        parse_tools(" , ")
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0
        assert session.scalar(select(func.count()).select_from(JobItem)) == 0


def test_cli_metric_job_from_a_folder_runs_here_and_shows_its_tools(engine, tmp_path, monkeypatch):
    folder = tmp_path / "photos"
    folder.mkdir()
    for seed in range(3):
        save(natural_image(seed, SIZE), folder / f"p{seed}.png")
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", str(engine.url))
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
    monkeypatch.setenv("AGENTIC_IQA_DEVICE", "cpu")

    refused = runner.invoke(app, ["eval", "submit", str(folder), "--tools", "PIQE,nope"])
    assert refused.exit_code == 2 and "unknown tool 'nope'" in refused.output

    result = runner.invoke(app, ["eval", "submit", str(folder), "--tools", "piqe"])
    assert result.exit_code == 0, result.output
    job_id = result.stdout.strip().splitlines()[0]
    status = json.loads(runner.invoke(app, ["eval", "status", job_id, "--json"]).stdout)
    assert (status["kind"], status["tools"], status["counts"]) == ("metric", ["PIQE"], {"done": 3})
    text = runner.invoke(app, ["eval", "status", job_id]).stdout
    assert "metric job (no agent): PIQE" in text

    out = tmp_path / "scores.csv"
    assert runner.invoke(app, ["eval", "export", job_id, "-o", str(out)]).exit_code == 0
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    fresh = ToolRegistry(ToolSettings(device="cpu", tool_cache="none"))
    assert {Path(row["image"]).name: float(row["raw:PIQE"]) for row in rows} == {
        name: pytest.approx(fresh.execute_tool("PIQE", folder / name).raw_score, rel=1e-9)
        for name in ("p0.png", "p1.png", "p2.png")
    }


class CountingRegistry(ToolRegistry):
    """The real registry, counting the calls its batches computed ahead."""

    ahead = 0

    def score_batches(self, calls, *, max_batch=16):
        computed = super().score_batches(calls, max_batch=max_batch)
        self.ahead += computed
        return computed


@pytest.mark.parametrize("workers", [1, 2])
def test_a_local_job_with_a_tool_batch_scores_ahead_and_logs_what_each_call_computed(
    engine, pairs_manifest, tmp_path, workers
):
    registry = CountingRegistry(ToolSettings(device="cpu", tool_cache="memory"))
    client = BuiltinClient()
    agents = Agents(planner=client, executor=client, summarizer=client, registry=registry)
    job_id = lifecycle.submit(
        engine, JobSpec.build(manifest=pairs_manifest, tools=["PIQE", "PSNR"])
    )
    broken = tmp_path / "noisy3.png"  # readable at submit, broken by the time it runs
    broken.write_bytes(b"not a png any more")
    lifecycle.run_local(engine, job_id, agents, workers=workers, tool_batch_size=4)

    final = lifecycle.progress(engine, job_id)
    assert final.counts == {"done": 7, "failed": 1}
    assert registry.ahead == 14  # 7 readable images x 2 tools, none computed one by one
    assert registry._batch_memo() == {}  # nothing scored ahead outlives its batch
    with session_scope(engine) as session:
        failed = session.scalars(
            select(JobItem).where(JobItem.job_id == job_id, JobItem.status == "failed")
        ).one()
        assert failed.image.endswith("noisy3.png") and "noisy3.png" in failed.error
        logs = session.execute(
            select(JobItem.image, JobItem.reference, ToolLog)
            .join(ToolLog, ToolLog.run_id == JobItem.run_id)
            .where(JobItem.job_id == job_id)
        ).all()
    assert len(logs) == 7 * 2
    fresh = ToolRegistry(ToolSettings(device="cpu", tool_cache="none"))
    for image, reference, log in logs:
        expected = fresh.execute_tool(
            log.tool_name, image, reference if log.tool_name == "PSNR" else None
        )
        assert log.cached is False  # computed for this job, in a batch
        assert log.raw_score == pytest.approx(expected.raw_score, rel=1e-9, abs=1e-12)


def test_a_local_metric_job_batches_its_tools_by_default_only_on_a_gpu(
    engine, pairs_manifest, monkeypatch
):
    monkeypatch.delenv("AGENTIC_IQA_TOOL_BATCH_SIZE", raising=False)
    client = BuiltinClient()

    def agents_on(device: str) -> Agents:
        return Agents(
            planner=client,
            executor=client,
            summarizer=client,
            registry=ToolRegistry(ToolSettings(device=device, tool_cache="memory")),
        )

    metric_job = lifecycle.submit(engine, JobSpec.build(manifest=pairs_manifest, tools=["PIQE"]))
    agent_job = lifecycle.submit(engine, JobSpec.build(manifest=pairs_manifest))
    assert (
        lifecycle.local_batch_size(engine, metric_job, agents_on("cuda"))
        == lifecycle.GPU_TOOL_BATCH
        == 16
    )
    assert lifecycle.local_batch_size(engine, metric_job, agents_on("cpu")) == 1
    assert lifecycle.local_batch_size(engine, agent_job, agents_on("cuda")) == 1
    monkeypatch.setenv("AGENTIC_IQA_TOOL_BATCH_SIZE", "1")  # a setting the user made wins
    assert lifecycle.local_batch_size(engine, metric_job, agents_on("cuda")) == 1
    monkeypatch.setenv("AGENTIC_IQA_TOOL_BATCH_SIZE", "8")
    assert lifecycle.local_batch_size(engine, metric_job, agents_on("cpu")) == 8
    assert lifecycle.local_batch_size(engine, agent_job, agents_on("cuda")) == 1
