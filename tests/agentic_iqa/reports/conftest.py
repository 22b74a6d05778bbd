"""Fixtures of the report tests: a scratch database of either kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_iqa.db import upgrade


def scratch_database(kind: str, folder: Path, request: pytest.FixtureRequest) -> str:
    """A migrated SQLite file in ``folder``, or the session's PostgreSQL database."""
    if kind == "sqlite":
        url = f"sqlite:///{folder / 'results.sqlite3'}"
        upgrade(url)
        return url
    return request.getfixturevalue("postgres_url")
