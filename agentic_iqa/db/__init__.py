"""Persistence of the distributed pipeline: runs, step records, tool calls and replans.

SQLite by default (a file in the working directory), PostgreSQL for many workers; the URL comes
from ``AGENTIC_IQA_DATABASE_URL``.  Create or update the schema with :func:`upgrade` (or
``alembic upgrade head`` in the repository); then open sessions with :func:`session_scope` and
use the writers (:mod:`.steps` for a run's steps, :mod:`.jobs` for dataset jobs), which are
idempotent under Celery's redelivery; displays and polls read with :mod:`.reads` in a
:func:`read_scope`.

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
    "check_schema": "engine",
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
    "EXAMPLE_QUERIES": "reads",
    "RunNotFound": "reads",
    "current_step": "reads",
    "get_run": "reads",
    "load_state": "reads",
    "replans_for": "reads",
    "run_example_query": "reads",
    "step_status": "reads",
    "steps_for": "reads",
    "tool_logs_for": "reads",
    "begin_step": "steps",
    "complete_step": "steps",
    "create_run": "steps",
    "fail_run": "steps",
    "fail_step": "steps",
    "finish_run": "steps",
}

if TYPE_CHECKING:
    from .engine import (
        DATABASE_URL_ENV,
        alembic_config,
        build_engine,
        check_schema,
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
    from .reads import (
        EXAMPLE_QUERIES,
        RunNotFound,
        current_step,
        get_run,
        load_state,
        replans_for,
        run_example_query,
        step_status,
        steps_for,
        tool_logs_for,
    )
    from .steps import (
        begin_step,
        complete_step,
        create_run,
        fail_run,
        fail_step,
        finish_run,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "DATABASE_URL_ENV",
    "EXAMPLE_QUERIES",
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
    "check_schema",
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
    "replans_for",
    "run_example_query",
    "session_scope",
    "step_status",
    "steps_for",
    "tool_logs_for",
    "upgrade",
]
