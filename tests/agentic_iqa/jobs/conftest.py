"""Fixtures of the job tests: a migrated SQLite results database per test, and the CLI's settings
for a module of big jobs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine


@pytest.fixture
def engine(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    upgrade(url)
    return make_engine(url)


@pytest.fixture(scope="module")
def cli_env(data_dir: Path) -> Iterator[None]:
    """The CLI's settings for a module's jobs: a local run, the tools on the CPU, no VLM cache,
    and none of the caller's other ``AGENTIC_IQA_*`` settings."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("AGENTIC_IQA_")]:
            if name != "AGENTIC_IQA_DATA_DIR" and not name.startswith("AGENTIC_IQA_TEST_"):
                patch.delenv(name)
        patch.setenv("AGENTIC_IQA_WEIGHTS_DIR", str(data_dir / "pyiqa-weights"))
        patch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
        patch.setenv("AGENTIC_IQA_DEVICE", "cpu")
        patch.setenv("AGENTIC_IQA_VLM_CACHE", "false")
        yield
