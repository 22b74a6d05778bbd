"""``eval submit --mlflow URI`` with real Celery workers: ``--wait`` logs the job when it ends;
without it the command returns at once, logs nothing and says which command logs it later."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine
from agentic_iqa.runtime.progress import progress
from tests.workers.test_cli_distributed import QUERY, cli, manifest_of, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]
pytest.importorskip("mlflow")


def runs_of(store: str, job_id: str) -> list[dict[str, float]]:
    """Return the metrics of each MLflow run tagged with ``job_id`` (MLflow's own client)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("agentic-iqa")
    if experiment is None:
        return []
    found = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`agentic_iqa.job_id` = '{job_id}'"
    )
    return [dict(run.data.metrics) for run in found]


def test_submit_logs_a_job_it_waited_for_and_says_how_to_log_one_it_did_not(
    make_cluster, sqlite_url: str, tmp_path: Path
) -> None:
    upgrade(sqlite_url)
    cluster = make_cluster(
        sqlite_url,
        AGENTIC_IQA_TEST_SLOW_SECONDS="0.1",
        MLFLOW_DISABLE_TELEMETRY="true",
    )
    cluster.start("default", "default")
    cluster.start("gpu", "gpu")
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    manifest = manifest_of(tmp_path / "photos", 4)
    engine = make_engine(sqlite_url)

    waited = cli(cluster, "eval", "submit", str(manifest), "--query", QUERY, "--wait",
                 "--mlflow", store, timeout=240)  # fmt: skip
    assert waited.returncode == 0, waited.stderr[-3000:]
    job_id = waited.stdout.split()[0]
    assert progress(engine, job_id).status == "done"
    report = json.loads(cli(cluster, "eval", "report", job_id, "--json").stdout)
    (metrics,) = runs_of(store, job_id)
    assert report["agent"]["n"] == 4
    assert metrics["srcc"] == report["agent"]["srcc"]
    assert metrics["krcc_ci_high"] == report["agent"]["krcc_ci"][1]

    handed = cli(cluster, "eval", "submit", str(manifest), "--query", QUERY, "--mlflow", store)
    assert handed.returncode == 0, handed.stderr[-3000:]
    later = handed.stdout.split()[0]
    said = " ".join(handed.stderr.split())
    assert f"`agentic-iqa eval report {later[:8]} --mlflow {store}` logs it" in said
    assert runs_of(store, later) == []  # returned at once, logged nothing
    wait_until(lambda: progress(engine, later).status == "done", 180, "the second job")
    logged = cli(cluster, "eval", "report", later, "--mlflow", store)
    assert logged.returncode == 0, logged.stderr[-3000:]
    (metrics,) = runs_of(store, later)
    assert metrics["items/done"] == 4.0
    assert len(runs_of(store, job_id)) == 1  # each job its own run
