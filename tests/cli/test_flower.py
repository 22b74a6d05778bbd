"""`agentic-iqa flower` refuses to start without usable credentials: one line, exit 2, nothing
quoted from a credentials file.  (It running behind them: tests/workers/test_flower.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentic_iqa.cli.flower import flower_credentials
from tests.conftest import REPO


def flower(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWER_", "AGENTIC_IQA_"))}
    return subprocess.run(
        [sys.executable, "-m", "agentic_iqa", "flower", "--port", "1", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**base, "COLUMNS": "250", **env},
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_no_credentials_refuses_to_start() -> None:
    line = one_line(flower(env={}))
    assert "no credentials" in line and "--auth-file" in line and "FLOWER_BASIC_AUTH" in line


@pytest.mark.parametrize(
    "content", ["", "\n\n", "admin\n", "admin:\n", ":hunter2-pw\n", "ok:fine\nhunter2-pw\n"]
)
def test_a_file_without_usable_credentials_refuses_without_quoting_it(
    tmp_path: Path, content: str
) -> None:
    path = tmp_path / "auth"
    path.write_text(content)
    for result in (
        flower("--auth-file", str(path), env={}),
        flower(env={"AGENTIC_IQA_FLOWER_AUTH_FILE": str(path)}),
    ):
        line = one_line(result)
        assert str(path) in line
        assert "hunter2" not in result.stderr + result.stdout


def test_a_missing_file_and_two_sources_refuse(tmp_path: Path) -> None:
    assert "no such file" in one_line(flower("--auth-file", str(tmp_path / "nope"), env={}))
    path = tmp_path / "auth"
    path.write_text("admin:from-file\n")
    line = one_line(flower("--auth-file", str(path), env={"FLOWER_BASIC_AUTH": "a:from-env"}))
    assert "--auth-file" in line and "FLOWER_BASIC_AUTH" in line
    assert "from-file" not in line and "from-env" not in line


def test_every_entry_of_the_file_or_the_variable_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "auth"
    path.write_text("admin:a:b:c\n\n ops:p@ss word \n")
    assert flower_credentials(path, {}) == ["admin:a:b:c", "ops:p@ss word"]
    assert flower_credentials(None, {"FLOWER_BASIC_AUTH": "a:1, b:2"}) == ["a:1", "b:2"]
