"""Fixtures of the job tests: a migrated SQLite results database per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine


@pytest.fixture
def engine(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    upgrade(url)
    return make_engine(url)
