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


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A results database for jobs run through the CLI, and nothing from the caller's
    environment deciding the broker or the VLM (each test sets what it runs)."""
    url = f"sqlite:///{tmp_path / 'results.sqlite3'}"
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", url)
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
    monkeypatch.setenv("AGENTIC_IQA_DEVICE", "cpu")
    monkeypatch.setenv("AGENTIC_IQA_VLM_CACHE", "false")
    monkeypatch.delenv("AGENTIC_IQA_BROKER_URL", raising=False)
    for name in ("VLM_BACKEND", "VLM_MODEL", "VLM_BASE_URL"):
        monkeypatch.delenv(f"AGENTIC_IQA_{name}", raising=False)
    return url
