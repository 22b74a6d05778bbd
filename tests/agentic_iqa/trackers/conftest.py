"""Fixtures of the tracker tests: real jobs in a results database of their own, the trackers'
settings pointed at temporary folders (MLflow's SQLite store, W&B offline), and readers of
what each tracker stored, by its own client (MLflow) or its own record format (W&B)."""

from __future__ import annotations

import csv
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db import dispose_engines, upgrade
from tests.agentic_iqa.conftest import write_csv

runner = CliRunner()
#: A key in the environment of every tracker test, also put in each job's name: it must be
#: masked wherever the trackers store something.
SECRET = "sk-tracker-test-8d1f0c6e2b"
#: The photos of ``livec-extra`` the jobs run on (never fitted on: no in-sample warning).
PHOTOS = 6


def cli(*args: str, code: int = 0) -> Any:
    """Run the CLI; assert its exit code; return the result."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result


def job_id_of(result: Any) -> str:
    """Return the job id ``eval submit`` printed first on stdout."""
    return str(result.stdout.strip().splitlines()[0])


def photos(data_dir: Path, count: int = PHOTOS) -> list[tuple[str, float]]:
    """Return the first ``count`` livec-extra photos with their MOS."""
    folder = data_dir / "livec-extra"
    with open(folder / "mos.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))[:count]
    return [(str(folder / "images" / row["image"]), float(row["mos"])) for row in rows]


@pytest.fixture(scope="module")
def trackers_env(
    cli_env: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    """A results database of the module's own, MLflow without telemetry, W&B offline in a
    temporary folder (its data, cache and settings too: nothing under $HOME, no network), and
    a key in the environment that must never reach a tracker."""
    folder = tmp_path_factory.mktemp("trackers")
    url = f"sqlite:///{folder / 'results.sqlite3'}"
    upgrade(url)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTIC_IQA_DATABASE_URL", url)
        patch.setenv("OPENAI_API_KEY", SECRET)
        patch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        patch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        for name in ("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_RUN_ID"):
            patch.delenv(name, raising=False)
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("WANDB_SILENT", "true")
        patch.setenv("WANDB_ERROR_REPORTING", "false")
        for name in ("DIR", "DATA_DIR", "CACHE_DIR", "CONFIG_DIR", "ARTIFACT_DIR"):
            (folder / name.lower()).mkdir()
            patch.setenv(f"WANDB_{name}", str(folder / name.lower()))
        patch.chdir(folder)  # anything a library writes in the working folder stays here
        yield {"folder": folder, "wandb": folder / "dir"}
    dispose_engines(url)


@pytest.fixture(scope="module")
def metric_job(trackers_env: dict[str, Path], data_dir: Path) -> str:
    """A finished PIQE job on six photos with their MOS (a metric job: no agent)."""
    folder = trackers_env["folder"]
    manifest = write_csv(
        folder / "piqe.csv", ["image", "mos"], [[image, mos] for image, mos in photos(data_dir)]
    )
    return job_id_of(
        cli("eval", "submit", str(manifest), "--tools", "PIQE", "--name", f"piqe {SECRET}")
    )


def report_json(job_id: str, *args: str) -> dict[str, Any]:
    """Return ``eval report JOB --json`` (with ``args``) as a document."""
    return json.loads(cli("eval", "report", job_id, "--json", *args).stdout)


def mlflow_runs(uri: str, job_id: str) -> list[Any]:
    """Return every MLflow run tagged with ``job_id``, read by MLflow's own client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("agentic-iqa")
    assert experiment is not None
    return list(
        client.search_runs(
            [experiment.experiment_id], filter_string=f"tags.`agentic_iqa.job_id` = '{job_id}'"
        )
    )


def wandb_records(path: Path) -> Iterator[Any]:
    """Yield the records of a W&B run's ``.wandb`` file, decoded by W&B's own protobuf
    (the file is a LevelDB-style log of 32 KiB blocks after a 7-byte ``:W&B`` header; W&B
    has no reader of an offline run in Python, nor any API for one)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run log ({len(data)} bytes)"
    position, block, parts = 7, 32 * 1024, b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # a block's tail too short for a header is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0 and length == 0:
            position += left
            continue
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 2):  # a whole record, or its first part
            parts = chunk
        else:
            parts += chunk
        if kind in (1, 4):  # whole, or its last part
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            yield record
            parts = b""


def wandb_run(folder: Path, job_id: str) -> dict[str, Any]:
    """Return the summary, config and artifact files of the newest offline run of ``job_id``
    under W&B's folder ``folder``: what ``wandb sync`` would upload."""
    logs = sorted(folder.glob(f"wandb/offline-run-*-{job_id}/run-{job_id}.wandb"))
    assert logs, f"no offline run of {job_id} under {folder}"
    summary: dict[str, Any] = {}
    config: dict[str, Any] = {}
    files: list[str] = []
    for record in wandb_records(logs[-1]):
        kind = record.WhichOneof("record_type")
        if kind == "summary":
            for item in record.summary.update:
                name = "/".join(item.nested_key) if item.nested_key else item.key
                summary[name] = json.loads(item.value_json)
        elif kind in ("config", "run"):
            updates = record.config.update if kind == "config" else record.run.config.update
            for item in updates:
                config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "artifact":
            files.extend(entry.path for entry in record.artifact.manifest.contents)
    return {"summary": summary, "config": config, "files": files, "log": logs[-1]}
