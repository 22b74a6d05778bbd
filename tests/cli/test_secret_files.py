"""A secret variable's file that cannot be used is one line, exit 2, naming the variable and the
path; a secret read from a file is never printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SECRET_VARIABLES = (
    "AGENTIC_IQA_DATABASE_URL",
    "AGENTIC_IQA_BROKER_URL",
    "AGENTIC_IQA_DATABASE_PASSWORD",
    "AGENTIC_IQA_REDIS_PASSWORD",
    "OPENAI_API_KEY",
)


def cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not any(k.startswith(name) for name in SECRET_VARIABLES)
    }
    return subprocess.run(
        [sys.executable, "-m", "agentic_iqa", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**base, "PYTHONPATH": str(REPO), "COLUMNS": "200", **env},
    )


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("problem", ["missing", "empty", "folder"])
def test_an_unusable_secret_file_is_one_line_and_exit_2(tmp_path: Path, problem: str) -> None:
    path = tmp_path / "database-url"
    if problem == "empty":
        path.write_text("\n")
    elif problem == "folder":
        path.mkdir()
    result = cli("eval", "list", env={"AGENTIC_IQA_DATABASE_URL_FILE": str(path)}, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = error_lines(result)
    assert len(lines) == 1, result.stderr
    assert f"AGENTIC_IQA_DATABASE_URL_FILE={path}" in lines[0]
    assert "Traceback" not in result.stderr


def test_a_value_and_its_file_both_set_is_one_line_naming_both(tmp_path: Path) -> None:
    url = "postgresql://agentic:hunter2-in-env@db/agentic"
    path = tmp_path / "database-url"
    path.write_text("postgresql://agentic:hunter2-in-file@db/agentic\n")
    env = {"AGENTIC_IQA_DATABASE_URL": url, "AGENTIC_IQA_DATABASE_URL_FILE": str(path)}
    result = cli("db", "upgrade", env=env, cwd=tmp_path)
    assert result.returncode == 2
    (line,) = error_lines(result)
    assert "AGENTIC_IQA_DATABASE_URL and AGENTIC_IQA_DATABASE_URL_FILE" in line
    assert "hunter2" not in result.stderr + result.stdout


def test_a_database_url_from_a_file_is_used_and_never_printed(tmp_path: Path) -> None:
    database = tmp_path / "from-file.sqlite3"
    path = tmp_path / "database-url"
    path.write_text(f"sqlite:///{database}\n")
    env = {"AGENTIC_IQA_DATABASE_URL_FILE": str(path)}
    assert cli("db", "upgrade", env=env, cwd=tmp_path).returncode == 0
    assert database.is_file()
    listed = cli("eval", "list", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr


def test_models_says_a_key_from_its_file_is_set_and_never_shows_it(tmp_path: Path) -> None:
    key = "sk-from-a-file-0123456789abcdef"
    path = tmp_path / "openai-key"
    path.write_text(key + "\n")
    env = {
        "OPENAI_API_KEY_FILE": str(path),
        "AGENTIC_IQA_VLM_BACKEND": "openai",
        "AGENTIC_IQA_VLM_MODEL": "gpt-4o",
    }
    result = cli("models", "--json", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    roles = json.loads(result.stdout)["roles"]
    assert {role["key_set"] for role in roles} == {True}
    assert key not in result.stdout + result.stderr
    human = cli("models", env=env, cwd=tmp_path)
    assert human.returncode == 0 and key not in human.stdout + human.stderr
