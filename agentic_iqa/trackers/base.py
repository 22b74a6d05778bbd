"""What every tracker shares: the tag a job's run is found by, what a log returns, its errors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
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
