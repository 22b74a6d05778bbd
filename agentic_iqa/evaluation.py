"""Run a dataset job from Python: submit it, run it in this process, and read its report.

What ``agentic-iqa eval submit`` followed by ``eval report --json`` does, for a notebook or a
script: :func:`evaluate` stores the job in the results database (SQLite by default, or the URL
given), runs every item here with a pool of threads, and returns an :class:`Evaluation` whose
``report`` is the report ``eval report --json`` prints.  The job stays in the database, so the
command line reads it afterwards (``eval status``, ``eval export``, ``eval compare``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .jobs.spec import JobSpec

__all__ = ["Evaluation", "evaluate"]


@dataclass(frozen=True)
class Evaluation:
    """Hold a finished job's identity, state and report (``eval report --json``'s document)."""

    job_id: str
    status: str
    report: Mapping[str, Any]

    @property
    def counts(self) -> Mapping[str, int]:
        """Return the job's item counts: ``total``, ``done``, ``failed`` and ``by_status``."""
        return dict(self.report["counts"])

    @property
    def correlations(self) -> Mapping[str, Any] | None:
        """Return the agent's SRCC, PLCC and KRCC against MOS (None for a metric job)."""
        agent = self.report.get("agent")
        return dict(agent) if agent is not None else None

    @property
    def srcc(self) -> float | None:
        """Return the agent's Spearman correlation with MOS (None without MOS, or a metric job)."""
        return None if self.correlations is None else self.correlations.get("srcc")

    @property
    def plcc(self) -> float | None:
        """Return the agent's Pearson correlation with MOS (None without MOS, or a metric job)."""
        return None if self.correlations is None else self.correlations.get("plcc")

    @property
    def krcc(self) -> float | None:
        """Return the agent's Kendall correlation with MOS (None without MOS, or a metric job)."""
        return None if self.correlations is None else self.correlations.get("krcc")

    @property
    def tools(self) -> Mapping[str, Mapping[str, Any]]:
        """Return each tool's own figures against MOS, by tool name."""
        return {entry["tool"]: dict(entry) for entry in self.report.get("tools", [])}

    @property
    def accuracy(self) -> float | None:
        """Return the share of multiple-choice questions answered right (None without any)."""
        mcq = self.report.get("mcq")
        return None if not mcq else mcq.get("accuracy")


def evaluate(
    spec: JobSpec,
    *,
    database_url: str | None = None,
    workers: int = 2,
    bootstrap: int = 1000,
    seed: int = 0,
) -> Evaluation:
    """Submit ``spec`` as a job, run every item in this process, and return its report.

    ``database_url``: where the job is stored (SQLAlchemy URL); None takes the configured one
    (``AGENTIC_IQA_DATABASE_URL``, else ``agentic-iqa.sqlite3`` in the working directory).
    ``workers``: threads that run items at once.  ``bootstrap`` resamples (0: no intervals)
    and ``seed`` make the report's confidence intervals, as ``eval report`` does.  Each item
    runs with the configuration the job stored at submit; a bad row is a failed item with its
    reason, never an exception.
    """
    from .agents.team import AgentsCache
    from .config import PipelineSettings
    from .db.engine import ensure_schema, make_engine, read_scope
    from .db.exports import report_for_job
    from .db.jobs import get_job
    from .runtime.local import run_local
    from .runtime.submission import submit

    engine = make_engine(database_url or PipelineSettings.load().database_url)
    ensure_schema(engine)
    job_id = submit(engine, spec)
    run_local(engine, job_id, AgentsCache(), workers=workers)
    with read_scope(engine) as session:
        status = get_job(session, job_id).status
        report = report_for_job(session, job_id, bootstrap=bootstrap, seed=seed)
    return Evaluation(job_id=job_id, status=status, report=report)
