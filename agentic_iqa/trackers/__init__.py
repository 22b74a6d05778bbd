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
from typing import Any, Protocol

#: The tag (MLflow) and the run id (W&B) by which a job's run is found again.
JOB_TAG = "agentic_iqa.job_id"


class TrackerError(RuntimeError):
    """A tracker refused the run: its store, its server or what was logged (redacted)."""


class TrackerMissing(TrackerError):
    """The library a tracker needs is not installed; ``extra`` is the package extra for it."""

    def __init__(self, tracker: str, module: str, extra: str) -> None:
        self.tracker, self.module, self.extra = tracker, module, extra
        super().__init__(
            f"--{tracker} needs the {module} package, which is not installed: "
            f"pip install 'agentic-iqa[{extra}]'"
        )


@dataclass(frozen=True)
class Logged:
    """Where a job was logged: the tracker, its run's id, a place to find it, and whether an
    earlier run of the job was found and updated (rather than a new one made)."""

    tracker: str
    run_id: str
    where: str
    updated: bool


class Log(Protocol):
    """Log one job's report to a tracker at ``target`` (a URI, a project) and say where."""

    def __call__(
        self, target: str, document: Mapping[str, Any], artifacts: Sequence[Path]
    ) -> Logged: ...


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
