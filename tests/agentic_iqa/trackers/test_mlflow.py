"""``--mlflow URI``: a job's report in a real MLflow tracking store (SQLite), read back with
MLflow's own client: the figures ``eval report --json`` prints, the job as params, the report
and the per-item table as artifacts; a job logged again updates its run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agentic_iqa.db.engine import make_engine
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.local import run_local
from agentic_iqa.runtime.submission import submit
from tests.agentic_iqa.conftest import write_csv
from tests.agentic_iqa.trackers.conftest import (
    SECRET,
    cli,
    job_id_of,
    mlflow_runs,
    photos,
    report_json,
)

pytest.importorskip("mlflow")


def figures(entry: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The correlations of a report's entry as the run should hold them (none left out)."""
    expected = {f"{prefix}n": float(entry["n"])}
    for name in ("srcc", "plcc", "plcc_logistic", "krcc"):
        expected[f"{prefix}{name}"] = entry[name]
    for name in ("srcc", "plcc", "krcc"):
        expected[f"{prefix}{name}_ci_low"], expected[f"{prefix}{name}_ci_high"] = entry[
            f"{name}_ci"
        ]
    return expected


def artifact_files(run: Any, store: str) -> dict[str, Path]:
    """Return the run's artifacts by name, as files (a local store keeps them on disk)."""
    from mlflow.artifacts import download_artifacts

    folder = Path(download_artifacts(run_id=run.info.run_id, tracking_uri=store))
    return {path.name: path for path in folder.iterdir()}


@pytest.fixture(scope="module")
def store(trackers_env: dict[str, Path]) -> str:
    return f"sqlite:///{trackers_env['folder'] / 'mlflow.db'}"


def logged(store: str, job_id: str) -> Any:
    """Return the job's one run (asserting there is exactly one), with the store's URI."""
    runs = mlflow_runs(store, job_id)
    assert len(runs) == 1, [run.info.run_id for run in runs]
    return runs[0]


def test_a_metric_jobs_run_holds_the_reports_figures_params_and_files(
    metric_job: str, store: str, trackers_env: dict[str, Path]
) -> None:
    result = cli("eval", "report", metric_job, "--json", "--mlflow", store)
    assert f"logged job {metric_job[:8]} in MLflow" in result.stderr
    report = report_json(metric_job)
    (piqe,) = report["tools"]
    run = logged(store, metric_job)
    metrics = run.data.metrics
    # A metric job of one tool: the tool's figures are the job's headline and its own.
    expected = {**figures(piqe), **figures(piqe, "tool/PIQE/")}
    expected["tool/PIQE/srcc_raw"] = piqe["srcc_raw"]
    expected["items/total"] = expected["items/done"] = 6.0
    assert piqe["srcc_ci"][0] < piqe["srcc"] <= piqe["srcc_ci"][1]
    assert {name: metrics.get(name) for name in expected} == expected  # exact floats
    assert "accuracy" not in metrics  # a metric job gives scores, not answers
    params = run.data.params
    configuration = report["job"]["configuration"]
    assert params["job_id"] == metric_job
    assert params["tools"] == "PIQE" and params["mode"] == "tools" and params["kind"] == "metric"
    assert params["prompts"] == configuration["prompts"]
    assert params["agentic_iqa_version"] == configuration["version"]
    assert params["max_replans"] == "2" and params["batch"] == "false"
    assert run.data.tags["agentic_iqa.status"] == "done"
    assert run.info.status == "FINISHED"
    files = artifact_files(run, store)
    assert sorted(files) == ["items.csv", "report.html", "report.txt"]
    exported = cli("eval", "export", metric_job, "--format", "csv", "-o", "-").stdout
    table = files["items.csv"].read_text(encoding="utf-8")
    assert table.replace("\r\n", "\n") == exported.replace("\r\n", "\n").replace(SECRET, "***")
    assert len(table.splitlines()) == 1 + 6
    assert f"{piqe['srcc']:.3f}" in files["report.txt"].read_text(encoding="utf-8")
    assert "<svg" in files["report.html"].read_text(encoding="utf-8")  # with its figures
    # The SQLite store's artifacts lie beside it, not in the working folder.
    assert (trackers_env["folder"] / "mlruns").is_dir()


def test_logging_a_job_again_updates_its_run(metric_job: str, store: str) -> None:
    cli("eval", "report", metric_job, "--mlflow", store)
    first = logged(store, metric_job)
    result = cli("eval", "report", metric_job, "--mlflow", store, "--bootstrap", "200")
    assert f"updated job {metric_job[:8]} in MLflow" in result.stderr
    again = logged(store, metric_job)  # still one run
    assert again.info.run_id == first.info.run_id
    resampled = report_json(metric_job, "--bootstrap", "200")["tools"][0]
    assert resampled["srcc_ci"] != report_json(metric_job)["tools"][0]["srcc_ci"]
    assert again.data.metrics["srcc_ci_low"] == resampled["srcc_ci"][0]
    assert again.data.tags["agentic_iqa.bootstrap"].startswith("200 resamples")
    assert again.data.params == first.data.params
    assert again.info.status == "FINISHED"


def test_no_key_reaches_the_store(metric_job: str, store: str, trackers_env: dict[str, Path]):
    """The job's name holds a key from the environment: masked in the run and its files."""
    cli("eval", "report", metric_job, "--mlflow", store)
    run = logged(store, metric_job)
    assert run.data.params["name"] == "piqe ***"
    assert run.info.run_name == "piqe ***"
    stored = [Path(store.removeprefix("sqlite:///")), *artifact_files(run, store).values()]
    stored += [path for path in (trackers_env["folder"] / "mlruns").rglob("*") if path.is_file()]
    for path in stored:
        assert SECRET.encode() not in path.read_bytes(), path


def test_submit_logs_an_agent_job_it_ran_with_its_accuracy(
    trackers_env: dict[str, Path], data_dir: Path, store: str
) -> None:
    """The builtin agent on four photos with MOS and two questions, run here: logged when
    it ends, with the correlations and the MCQ accuracy ``eval report --json`` gives."""
    folder = trackers_env["folder"]
    rows: list[list[object]] = [[image, "", "", "", mos] for image, mos in photos(data_dir, 4)]
    rows += [
        [photos(data_dir)[4][0], "Is this image blurry?", "Yes|No", "No", ""],
        [photos(data_dir)[5][0], "Is this image noisy?", "Yes|No", "Yes", ""],
    ]
    manifest = write_csv(folder / "mixed.csv", ["image", "query", "options", "answer", "mos"], rows)
    result = cli("eval", "submit", str(manifest), "--mlflow", store)
    job_id = job_id_of(result)
    assert f"logged job {job_id[:8]} in MLflow" in result.stderr
    report = report_json(job_id)
    run = logged(store, job_id)
    metrics = run.data.metrics
    assert report["agent"]["n"] == 4
    assert {name: metrics.get(name) for name in figures(report["agent"])} == figures(
        report["agent"]
    )
    mcq = report["mcq"]
    assert mcq["n"] == 2 and mcq["accuracy"] is not None
    assert metrics["accuracy"] == mcq["accuracy"]
    assert [metrics["accuracy_ci_low"], metrics["accuracy_ci_high"]] == mcq["accuracy_ci"]
    params = run.data.params
    for role in ("planner", "executor", "summarizer"):
        assert params[f"{role}/backend"] == "builtin"
        assert params[f"{role}/model"] == "builtin-v1"
    assert "tools" not in params  # an agent job names no tools of its own
    assert params["prompts"] == report["job"]["configuration"]["prompts"]


def test_a_running_jobs_run_says_so_until_it_is_logged_again_when_done(
    trackers_env: dict[str, Path], data_dir: Path, store: str, agents
) -> None:
    """Logged while its items wait, the run is RUNNING with what there is; logged again once
    the job has ended, the same run is FINISHED with the final figures."""
    manifest = write_csv(
        trackers_env["folder"] / "later.csv",
        ["image", "mos"],
        [[image, mos] for image, mos in photos(data_dir, 3)],
    )
    engine = make_engine(os.environ["AGENTIC_IQA_DATABASE_URL"])
    job_id = submit(engine, JobSpec.build(manifest=manifest, tools=["PIQE"]))
    cli("eval", "report", job_id, "--mlflow", store)
    waiting = logged(store, job_id)
    assert waiting.info.status == "RUNNING"
    assert waiting.data.metrics["items/done"] == 0.0 and "srcc" not in waiting.data.metrics
    run_local(engine, job_id, agents, workers=1)
    cli("eval", "report", job_id, "--mlflow", store)
    ended = logged(store, job_id)
    assert ended.info.run_id == waiting.info.run_id and ended.info.status == "FINISHED"
    assert ended.data.metrics["items/done"] == 3.0
    assert ended.data.metrics["srcc"] == report_json(job_id)["tools"][0]["srcc"]
