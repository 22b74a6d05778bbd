"""Log a job's report to MLflow (``--mlflow URI``): one run per job, found again by its tag.

The run lives in the experiment ``MLFLOW_EXPERIMENT_NAME`` names (default ``agentic-iqa``) of
the tracking store at the URI: a server (``http://host:5000``), a SQLite file
(``sqlite:///mlflow.db``; an experiment made there keeps its artifacts in ``mlruns/`` beside
the file, not in the working folder), or any store MLflow's client opens.  Logging a job again
finds its run by the tag :data:`.JOB_TAG` and updates it: its metrics get their new values
(the latest is what MLflow shows), its tags and artifacts are replaced, params it lacks are
added (a job's params do not change; MLflow keeps a param once).  The run's status follows the
job's (done: FINISHED, cancelled: KILLED, running: RUNNING), its start and end are the job's.
MLflow's usage telemetry is off unless ``MLFLOW_DISABLE_TELEMETRY`` says otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..redact import redact
from .base import JOB_TAG, Logged, TrackerError
from .record import metrics, params, tags

DEFAULT_EXPERIMENT = "agentic-iqa"
#: A job's status as an MLflow run's.
STATUSES = {"done": "FINISHED", "cancelled": "KILLED", "failed": "FAILED"}
#: What one ``log_batch`` call may carry (MLflow's limits).
BATCH = {"metrics": 1000, "params": 100, "tags": 100}


def _millis(stamp: str | None) -> int | None:
    """Return an ISO date (the report's ``created_at``) as epoch milliseconds, or None."""
    return int(datetime.fromisoformat(stamp).timestamp() * 1000) if stamp else None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keep MLflow's and its store's migrations' INFO lines off the terminal while logging."""
    loggers = [logging.getLogger(name) for name in ("mlflow", "alembic")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _artifact_location(uri: str) -> str | None:
    """Return where a new experiment in a SQLite store keeps its artifacts: ``mlruns/`` beside
    the database file (MLflow's default is the working folder); None for other stores."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix) or uri == prefix + ":memory:":
        return None
    return (Path(uri[len(prefix) :]).resolve().parent / "mlruns").as_uri()


def _experiment(client: Any, uri: str) -> str:
    """Return the id of the experiment to log to, made when it is not there yet."""
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
    found = client.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    return str(client.create_experiment(name, artifact_location=_artifact_location(uri)))


def find_run(client: Any, experiment_id: str, job_id: str) -> Any | None:
    """Return the run logged for ``job_id`` in the experiment (the newest), or None."""
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{JOB_TAG}` = '{job_id}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def log_to_mlflow(target: str, document: Mapping[str, Any], artifacts: Sequence[Path]) -> Logged:
    """Log the report ``document`` and ``artifacts`` to the MLflow store at URI ``target``."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = target
    try:
        with _quiet():
            return _log(uri, document, artifacts)
    except TrackerError:
        raise
    except Exception as exc:  # the store, the server, what MLflow refused: one line
        raise TrackerError(
            f"MLflow at {redact(uri)} refused the run: {type(exc).__name__}: "
            f"{redact(str(exc)).splitlines()[0] if str(exc) else ''}"
        ) from exc


def _log(uri: str, document: Mapping[str, Any], artifacts: Sequence[Path]) -> Logged:
    """Find or make the job's run, then log its metrics, params, tags and files."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    job = document.get("job") or {}
    job_id = str(job.get("id") or "")
    if not job_id:
        raise TrackerError("the report names no job: nothing to log it by")
    client = MlflowClient(tracking_uri=uri)
    experiment_id = _experiment(client, uri)
    found = find_run(client, experiment_id, job_id)
    if found is None:
        run = client.create_run(
            experiment_id,
            start_time=_millis(job.get("created_at")),
            tags={JOB_TAG: job_id},
            run_name=redact(str(job.get("name") or job_id[:8])),
        )
        run_id, logged_params = run.info.run_id, {}
    else:
        run_id, logged_params = found.info.run_id, dict(found.data.params)
        client.update_run(run_id, status="RUNNING")
    now = int(time.time() * 1000)
    batch_metrics = [Metric(name, value, now, 0) for name, value in metrics(document).items()]
    batch_params = [
        Param(name, value) for name, value in params(document).items() if name not in logged_params
    ]
    batch_tags = [RunTag(name, value) for name, value in tags(document).items()]
    for part in _chunks(batch_metrics, BATCH["metrics"]):
        client.log_batch(run_id, metrics=part)
    for part in _chunks(batch_params, BATCH["params"]):
        client.log_batch(run_id, params=part)
    for part in _chunks(batch_tags, BATCH["tags"]):
        client.log_batch(run_id, tags=part)
    for path in artifacts:
        client.log_artifact(run_id, str(path))
    status = STATUSES.get(str(job.get("status")))
    if status is not None:
        client.set_terminated(run_id, status, end_time=_millis(job.get("finished_at")) or now)
    return Logged("mlflow", run_id, f"{redact(uri)} run {run_id}", updated=found is not None)
