"""Log a job's report to an experiment tracker (MLflow, Weights & Biases).

A tracker gets the document ``eval report --json`` prints and the files made from it (the
report as text and HTML, the per-item table as CSV): what it logs is read from that document
(:mod:`.record`), so a tracker's figures are the report's by construction.  Each tracker lives
in a module of its own that imports its library only when it logs; a missing library is a
:class:`TrackerMissing` naming the extra that installs it.  Nothing here knows of the database
or the workers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from .base import JOB_TAG, Log, Logged, TrackerError, TrackerMissing


@dataclass(frozen=True)
class Tracker:
    """A tracker by name: the module it imports, the extra that installs it, how it logs."""

    name: str
    module: str
    extra: str
    log: Callable[[], Log]


def _mlflow() -> Log:
    from .mlflow import log_to_mlflow

    return log_to_mlflow


def _wandb() -> Log:
    from .wandb import log_to_wandb

    return log_to_wandb


TRACKERS: dict[str, Tracker] = {
    "mlflow": Tracker("mlflow", "mlflow", "mlflow", _mlflow),
    "wandb": Tracker("wandb", "wandb", "wandb", _wandb),
}


def require(name: str) -> ModuleType:
    """Import and return the library of tracker ``name``; :class:`TrackerMissing` without it."""
    tracker = TRACKERS[name]
    try:
        return importlib.import_module(tracker.module)
    except ImportError as exc:
        raise TrackerMissing(tracker.name, tracker.module, tracker.extra) from exc


def check_target(name: str, target: str) -> None:
    """Raise :class:`TrackerError` when ``target`` cannot name a place of tracker ``name``
    (an empty URI, a W&B project with more than an entity before it), before any work."""
    if not target.strip():
        raise TrackerError(f"--{name} needs a value")
    if name == "wandb":
        from .wandb import project_of

        project_of(target)


def log_report(
    name: str, target: str, document: Mapping[str, Any], artifacts: Sequence[Path]
) -> Logged:
    """Log ``document`` (an ``eval report --json`` document) and ``artifacts`` to tracker
    ``name`` at ``target``; :class:`TrackerMissing` or :class:`TrackerError` when it cannot."""
    if name not in TRACKERS:
        raise TrackerError(f"unknown tracker {name!r}: use one of {', '.join(TRACKERS)}")
    require(name)
    return TRACKERS[name].log()(target, document, artifacts)


__all__ = [
    "JOB_TAG",
    "TRACKERS",
    "Log",
    "Logged",
    "Tracker",
    "TrackerError",
    "TrackerMissing",
    "check_target",
    "log_report",
    "require",
]
