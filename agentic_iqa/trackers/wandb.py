"""Log a job's report to Weights & Biases (``--wandb PROJECT``, or ``ENTITY/PROJECT``).

One run per job, whose id is the job's: logging the job again resumes that run (online) or
writes another offline copy of it that ``wandb sync`` merges into the same run.  The params are
the run's config, the metrics its summary (the report's floats, unchanged), the files one
artifact ``job-ID`` of type :data:`ARTIFACT_TYPE`.  W&B's own settings apply: ``WANDB_MODE``
(``offline`` writes the run under ``WANDB_DIR``, ``./wandb`` by default, and touches no
network), ``WANDB_API_KEY``, ``WANDB_ENTITY``.  Nothing is logged about the machine (no system
metrics, no git state, no code, no package list: the run is a job's report, not this
process), and W&B's own error reporting is off unless ``WANDB_ERROR_REPORTING`` says otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..redact import redact
from .base import Logged, TrackerError
from .record import metrics, params, tags

ARTIFACT_TYPE = "agentic-iqa-report"
#: W&B's settings that keep the machine out of the run (those this W&B version knows).
QUIET: dict[str, object] = {
    "silent": True,
    "console": "off",
    "disable_git": True,
    "disable_code": True,
    "x_save_requirements": False,
    "x_disable_stats": True,
    "x_disable_machine_info": True,
}


def project_of(target: str) -> tuple[str | None, str]:
    """Return (entity, project) of ``PROJECT`` or ``ENTITY/PROJECT``."""
    entity, _, project = target.strip().rpartition("/")
    if not project or "/" in entity:
        raise TrackerError(f"--wandb takes PROJECT or ENTITY/PROJECT, not {target!r}")
    return entity or None, project


def log_to_wandb(target: str, document: Mapping[str, Any], artifacts: Sequence[Path]) -> Logged:
    """Log the report ``document`` and ``artifacts`` to the W&B project ``target``."""
    entity, project = project_of(target)
    os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
    os.environ.setdefault("WANDB_SILENT", "true")
    job = document.get("job") or {}
    job_id = str(job.get("id") or "")
    if not job_id:
        raise TrackerError("the report names no job: nothing to log it by")
    try:
        return _log(entity, project, job_id, document, artifacts)
    except TrackerError:
        raise
    except Exception as exc:  # the server, a key, what W&B refused: one line
        first = redact(str(exc)).splitlines()[0] if str(exc) else ""
        raise TrackerError(
            f"W&B refused the run of project {target}: {type(exc).__name__}: {first}"
        ) from exc


def _log(
    entity: str | None,
    project: str,
    job_id: str,
    document: Mapping[str, Any],
    artifacts: Sequence[Path],
) -> Logged:
    """Start (or resume) the job's run, set its config, summary and tags, add its files."""
    import wandb

    job = document.get("job") or {}
    labels = tags(document)
    known = getattr(wandb.Settings, "model_fields", {})
    settings = wandb.Settings(**{name: value for name, value in QUIET.items() if name in known})
    run = wandb.init(
        entity=entity,
        project=project,
        id=job_id,
        name=redact(str(job.get("name") or job_id[:8])),
        group=job.get("group") or None,
        job_type="eval",
        resume="allow",
        config={**params(document), **labels},
        tags=[value for value in (document.get("kind"), job.get("status")) if value],
        settings=settings,
    )
    try:
        run.config.update(labels, allow_val_change=True)
        run.summary.update(metrics(document))
        if artifacts:
            files = wandb.Artifact(f"job-{job_id}", type=ARTIFACT_TYPE)
            for path in artifacts:
                files.add_file(str(path), name=path.name)
            run.log_artifact(files)
        offline = bool(run.settings._offline)
        resumed = bool(getattr(run, "resumed", False))
        where = str(Path(run.dir).parent) if offline else str(run.url or project)
    finally:
        run.finish()
    note = f"{where} (offline: `wandb sync {where}` uploads it)" if offline else where
    return Logged("wandb", job_id, note, updated=resumed)
