"""Persistence of the distributed pipeline: runs, step records, tool calls and replans.

SQLite by default (a file in the working directory), PostgreSQL for many workers; the URL comes
from ``AGENTIC_IQA_DATABASE_URL``.  Create or update the schema with :func:`upgrade` (or
``alembic upgrade head`` in the repository); then open sessions with :func:`session_scope` and
use the writers (:mod:`.steps` for a run's steps, :mod:`.jobs` for dataset jobs), which are
idempotent under Celery's redelivery; displays and polls read with :mod:`.reads` in a
:func:`read_scope`.
"""

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
