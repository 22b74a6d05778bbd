"""Engine settings, sessions and column types, on SQLite and PostgreSQL."""

from __future__ import annotations

import math
import os
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.exc import IntegrityError, StatementError
from sqlalchemy.orm import Session

from agentic_iqa.db import (
    DATABASE_URL_ENV,
    Run,
    StepRecord,
    ToolLog,
    build_engine,
    create_run,
    database_url,
    dispose_engines,
    make_engine,
    read_scope,
    session_scope,
    upgrade,
)
from tests.agentic_iqa.db import IMAGE, QUERY, execution_log, tool_log


def test_database_url_defaults_to_a_sqlite_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert database_url() == f"sqlite:///{tmp_path}/agentic-iqa.sqlite3"
    monkeypatch.setenv(DATABASE_URL_ENV, "postgresql+psycopg://u@db.example/iqa")
    assert database_url() == "postgresql+psycopg://u@db.example/iqa"


def test_engines_are_cached_per_url_and_postgres_urls_use_psycopg(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/a.sqlite3"
    try:
        assert make_engine(url) is make_engine(url)
        assert make_engine(url) is not make_engine(f"sqlite:///{tmp_path}/b.sqlite3")
        # Building an engine does not connect, so no server is needed here.
        assert make_engine("postgresql://u@db.example/iqa").url.drivername == "postgresql+psycopg"
        assert make_engine("postgres://u@db.example/iqa").url.drivername == "postgresql+psycopg"
    finally:
        dispose_engines()


def test_sqlite_connections_use_wal_a_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/nested/folder/db.sqlite3"
    try:
        with make_engine(url).connect() as connection:
            pragma = {
                name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")
            }
        assert pragma == {
            "journal_mode": "wal",
            "busy_timeout": 30000,
            "foreign_keys": 1,
            "synchronous": 1,
        }  # NORMAL: no fsync per commit in WAL mode
        assert (tmp_path / "nested" / "folder" / "db.sqlite3").is_file()
    finally:
        dispose_engines(url)


def test_session_scope_commits_on_success_and_rolls_back_on_error(engine: Engine) -> None:
    with session_scope(engine) as session:
        kept = create_run(session, query=QUERY, image_path=IMAGE)
    with pytest.raises(RuntimeError), session_scope(engine) as session:
        create_run(session, query=QUERY, image_path="other.png")
        raise RuntimeError("task failed")
    with session_scope(engine) as session:
        assert session.scalars(select(Run.id)).all() == [kept]


def test_a_read_scope_never_holds_the_write_lock_that_writers_wait_on(tmp_path: Path) -> None:
    """A status poll (read_scope) inside its transaction: another process's writer commits at
    once; a session_scope in the same place makes that writer wait for the lock."""
    url = f"sqlite:///{tmp_path}/db.sqlite3"
    upgrade(url)
    engine = make_engine(url)
    with session_scope(engine) as session:
        run_id = create_run(session, query=QUERY, image_path=IMAGE)

    def other_writer() -> None:
        other = sqlite3.connect(tmp_path / "db.sqlite3", timeout=0.2, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("UPDATE runs SET status = 'running'")
            other.execute("COMMIT")
        finally:
            other.close()

    try:
        with read_scope(engine) as session:
            assert session.get(Run, run_id).status == "pending"
            other_writer()
        with read_scope(engine) as session:
            assert session.get(Run, run_id).status == "running"
        with (
            session_scope(engine) as session,
            pytest.raises(sqlite3.OperationalError, match="locked"),
        ):
            session.get(Run, run_id)
            other_writer()
    finally:
        dispose_engines(url)


def test_timestamps_come_back_timezone_aware_in_utc(engine: Engine) -> None:
    created = datetime(2025, 3, 30, 1, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
    with session_scope(engine) as session:
        run_id = create_run(session, query=QUERY, image_path=IMAGE)
        session.get_one(Run, run_id).created_at = created
    with Session(engine) as session:
        if engine.dialect.name == "postgresql":
            session.execute(text("SET TIME ZONE 'Asia/Tokyo'"))
        if engine.dialect.name == "sqlite":  # stored as UTC text, plain SQL sees UTC
            stored = session.scalar(text("SELECT created_at FROM runs"))
            assert stored == "2025-03-29 23:30:15.123456"
        run = session.get_one(Run, run_id)
        assert run.created_at == created
        assert run.created_at.tzinfo is UTC
        assert run.created_at.hour == 23 and run.created_at.day == 29
        assert run.started_at is None


def test_naive_datetimes_are_refused(engine: Engine) -> None:
    with pytest.raises(StatementError, match="naive datetime"), session_scope(engine) as session:
        run_id = create_run(session, query=QUERY, image_path=IMAGE)
        session.get_one(Run, run_id).started_at = datetime(2025, 1, 1, 12)
        session.flush()


def test_nan_scores_are_stored_as_null_and_read_back_as_nan(engine: Engine) -> None:
    with session_scope(engine) as session:
        run_id = create_run(session, query=QUERY, image_path=IMAGE)
        failed = tool_log("MUSIQ", "Blurs", math.nan)
        session.add(ToolLog(**ToolLog.columns_from(failed, run_id=run_id, iteration=0)))
    with session_scope(engine) as session:
        row = session.execute(text("SELECT raw_score, normalized_score, error FROM tool_logs"))
        assert row.one() == (None, None, "MUSIQ failed")
        assert session.scalar(text("SELECT AVG(normalized_score) FROM tool_logs")) is None
        stored = session.scalars(select(ToolLog)).one()
        assert execution_log(stored) == failed


def test_deleting_a_run_deletes_its_rows(engine: Engine) -> None:
    with session_scope(engine) as session:
        run_id = create_run(session, query=QUERY, image_path=IMAGE)
        other = create_run(session, query=QUERY, image_path=IMAGE)
        for owner in (run_id, other):
            session.add(StepRecord(run_id=owner, step="plan", iteration=0, status="succeeded"))
            session.add(
                ToolLog(
                    **ToolLog.columns_from(
                        tool_log("NIQE", "Noise", 3.0), run_id=owner, iteration=0
                    )
                )
            )
    with session_scope(engine) as session:
        session.execute(text("DELETE FROM runs WHERE id = :id"), {"id": run_id})
    with session_scope(engine) as session:
        for model in (StepRecord, ToolLog):
            assert session.scalars(select(model.run_id)).all() == [other]


def test_an_unknown_status_is_rejected_by_the_database(engine: Engine) -> None:
    with pytest.raises(IntegrityError), session_scope(engine) as session:
        run_id = create_run(session, query=QUERY, image_path=IMAGE)
        session.execute(text("UPDATE runs SET status = 'done' WHERE id = :id"), {"id": run_id})


def test_a_forked_child_opens_its_own_connections(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    assert engine.pool.checkedin() == 1
    pid = os.fork()
    if pid == 0:  # the child: must not touch the parent's pooled connection
        code = 1
        try:
            inherited = engine.pool.checkedin()
            with session_scope(engine) as session:
                answer = session.scalar(select(func.count()).select_from(Run))
            code = 0 if inherited == 0 and answer == 0 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with engine.connect() as connection:
        assert connection.execute(text("SELECT 1")).scalar() == 1


def test_postgres_connections_are_pinged_before_use(postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    with engine.connect() as connection:
        backend = connection.execute(text("SELECT pg_backend_pid()")).scalar()
    killer = build_engine(postgres_url, pooled=False)
    try:
        with killer.connect() as connection:
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": backend})
    finally:
        killer.dispose()
    with session_scope(engine) as session:
        assert session.scalar(text("SELECT pg_backend_pid()")) != backend
