"""``--wandb PROJECT`` in W&B's offline mode: the run's summary holds the figures ``eval report
--json`` prints, its config the job, its artifact the report and the per-item table; read from
the run's own log, the file ``wandb sync`` uploads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agentic_iqa.trackers.conftest import SECRET, cli, report_json, wandb_run

pytest.importorskip("wandb")


def test_an_offline_runs_summary_holds_the_reports_figures(
    metric_job: str, trackers_env: dict[str, Path]
) -> None:
    result = cli("eval", "report", metric_job, "--wandb", "iqa-tests")
    said = " ".join(result.stderr.split())
    assert f"logged job {metric_job[:8]} in W&B" in said and "wandb sync" in said
    (piqe,) = report_json(metric_job)["tools"]
    run = wandb_run(trackers_env["wandb"], metric_job)
    assert str(run["log"].parent) in said  # where it is, so it can be synced
    summary = run["summary"]
    expected = {
        "srcc": piqe["srcc"],
        "plcc": piqe["plcc"],
        "krcc": piqe["krcc"],
        "plcc_logistic": piqe["plcc_logistic"],
        "srcc_ci_low": piqe["srcc_ci"][0],
        "srcc_ci_high": piqe["srcc_ci"][1],
        "krcc_ci_high": piqe["krcc_ci"][1],
        "tool/PIQE/srcc": piqe["srcc"],
        "tool/PIQE/plcc_ci_low": piqe["plcc_ci"][0],
    }
    assert {name: summary.get(name) for name in expected} == expected  # exact floats
    config = run["config"]
    assert config["job_id"] == metric_job and config["tools"] == "PIQE"
    assert config["agentic_iqa.status"] == "done"
    assert sorted(run["files"]) == ["items.csv", "report.html", "report.txt"]


def test_nothing_of_the_machine_nor_a_key_is_in_the_offline_run(
    metric_job: str, trackers_env: dict[str, Path]
) -> None:
    cli("eval", "report", metric_job, "--wandb", "iqa-tests")
    run = wandb_run(trackers_env["wandb"], metric_job)
    assert run["config"]["name"] == "piqe ***"
    folder = run["log"].parent
    assert not (folder / "files" / "requirements.txt").exists()  # no package list
    written = [
        path
        for name in ("dir", "data_dir", "cache_dir", "config_dir", "artifact_dir")
        for path in (trackers_env["folder"] / name).rglob("*")
        if path.is_file()
    ]
    assert run["log"] in written
    for path in written:  # the run, its logs, the artifact's staged files, W&B's settings
        assert SECRET.encode() not in path.read_bytes(), path


def test_a_project_that_is_not_one_is_refused(metric_job: str) -> None:
    result = cli("eval", "report", metric_job, "--wandb", "a/b/c", code=2)
    assert "--wandb takes PROJECT or ENTITY/PROJECT" in " ".join(result.output.split())
