"""Databases for the persistence tests: a SQLite file and a scratch PostgreSQL database
(the PostgreSQL fixtures live in tests/conftest.py, shared with the worker tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from agentic_iqa.db import dispose_engines, make_engine, upgrade
from tests.conftest import scratch_postgres

TABLES = ("runs", "step_records", "tool_logs", "replan_history", "jobs", "job_items")


def sqlite_url(folder: Path) -> str:
    return f"sqlite:///{folder / 'agentic-iqa.sqlite3'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a migrated, empty database, of each dialect."""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path)
        upgrade(url)
        yield make_engine(url)
        dispose_engines(url)
        return
    url = request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
    yield engine


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database (no tables), of each dialect."""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path)
        yield url
        dispose_engines(url)
        return
    with scratch_postgres(request.getfixturevalue("postgres_admin_url")) as url:
        yield url
