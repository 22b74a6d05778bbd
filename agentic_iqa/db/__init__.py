"""Store the distributed pipeline's runs, steps, jobs and items, and read them back.

SQLite by default (a file in the working directory), PostgreSQL for many workers; the URL comes
from ``AGENTIC_IQA_DATABASE_URL``.  :mod:`.engine` opens the database: create or update the
schema with :func:`upgrade` (or ``alembic upgrade head`` in the repository), open sessions with
:func:`session_scope`, and a :func:`read_scope` for displays and polls.  :mod:`.models` holds the
tables.  Each entity's writes and reads live together, in one module: :mod:`.runs` (a run's
row: created, leased, ended, described), :mod:`.steps` (a run's steps, tool calls and replans),
:mod:`.vlm_calls` (its VLM calls and their usage), :mod:`.jobs` (a dataset job: created, fed,
cancelled, reopened, found), :mod:`.about` (what a job is, for listings and reports),
:mod:`.items` (a job's items: stored, closed, counted), :mod:`.batch_requests` (a batch job's
requests and parked runs), :mod:`.batches` (the batches they are sent in),
:mod:`.exports` (a job's rows and report columns, a page at a time), :mod:`.traces` (an
item's trace, one or a page at a time).  :mod:`.queries` holds the
statement helpers they share.  The writers are idempotent under Celery's redelivery.

The names below load on first use (PEP 562): ``from agentic_iqa.db.engine import ...``
(what ``eval status`` needs) does not drag in the models, reads and writers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "DATABASE_URL_ENV": "engine",
    "alembic_config": "engine",
    "build_engine": "engine",
    "database_url": "engine",
    "dispose_engines": "engine",
    "ensure_schema": "engine",
    "make_engine": "engine",
    "migrations_dir": "engine",
    "read_scope": "engine",
    "session_scope": "engine",
    "upgrade": "engine",
    "RUN_STATUSES": "models",
    "STEP_STATUSES": "models",
    "Base": "models",
    "ReplanRow": "models",
    "Run": "models",
    "StepRecord": "models",
    "ToolLog": "models",
    "RunNotFound": "runs",
    "create_run": "runs",
    "fail_run": "runs",
    "finish_run": "runs",
    "get_run": "runs",
    "load_state": "runs",
    "begin_step": "steps",
    "complete_step": "steps",
    "current_step": "steps",
    "fail_step": "steps",
}

if TYPE_CHECKING:
    from .engine import (
        DATABASE_URL_ENV,
        alembic_config,
        build_engine,
        database_url,
        dispose_engines,
        ensure_schema,
        make_engine,
        migrations_dir,
        read_scope,
        session_scope,
        upgrade,
    )
    from .models import (
        RUN_STATUSES,
        STEP_STATUSES,
        Base,
        ReplanRow,
        Run,
        StepRecord,
        ToolLog,
    )
    from .runs import RunNotFound, create_run, fail_run, finish_run, get_run, load_state
    from .steps import begin_step, complete_step, current_step, fail_step


def __getattr__(name: str) -> Any:
    """Import an exported name from its module on first use, and keep it here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "DATABASE_URL_ENV",
    "RUN_STATUSES",
    "STEP_STATUSES",
    "Base",
    "ReplanRow",
    "Run",
    "RunNotFound",
    "StepRecord",
    "ToolLog",
    "alembic_config",
    "begin_step",
    "build_engine",
    "complete_step",
    "create_run",
    "current_step",
    "database_url",
    "dispose_engines",
    "ensure_schema",
    "fail_run",
    "fail_step",
    "finish_run",
    "get_run",
    "load_state",
    "make_engine",
    "migrations_dir",
    "read_scope",
    "session_scope",
    "upgrade",
]
