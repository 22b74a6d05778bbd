"""Commands that find nothing name the database they opened, and reading commands never
create one: run from another folder, `eval report` says which database has no job and
leaves no empty agentic-iqa.sqlite3 behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentic_iqa.cli import app
from agentic_iqa.db.engine import dispose_engines, upgrade

runner = CliRunner()

READING = [
    ["eval", "report"],
    ["eval", "status"],
    ["eval", "export"],
    ["eval", "compare", "aaaa", "bbbb"],
    ["eval", "calibrate", "--tool", "NIQE"],
    ["eval", "cancel", "aaaa"],
    ["eval", "resume"],
    ["eval", "list"],
    ["eval", "compare", "--group", "g"],
    ["runs", "list"],
    ["runs", "show", "aaaa"],
]


@pytest.fixture
def empty_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("AGENTIC_IQA_DATABASE_URL", raising=False)
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


@pytest.mark.parametrize("command", READING, ids=" ".join)
def test_a_reading_command_in_an_empty_folder_names_the_file_and_creates_none(
    command: list[str], empty_folder: Path
) -> None:
    result = runner.invoke(app, command)
    assert result.exit_code == 1, result.output
    expected = empty_folder / "agentic-iqa.sqlite3"
    assert result.output.startswith(f"error: no results database at {expected}"), result.output
    assert "AGENTIC_IQA_DATABASE_URL" in result.output
    assert list(empty_folder.iterdir()) == []


def test_a_configured_sqlite_file_that_does_not_exist_is_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no" / "such" / "jobs.sqlite3"
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", f"sqlite:///{missing}")
    result = runner.invoke(app, ["eval", "report"])
    assert result.exit_code == 1
    assert f"no results database at {missing}" in result.output
    assert "AGENTIC_IQA_DATABASE_URL" in result.output
    assert not (tmp_path / "no").exists()


def test_a_database_without_jobs_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    upgrade(url)
    monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", url)
    for command in (["eval", "report"], ["eval", "status"], ["eval", "export"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 1, command
        assert result.output.strip() == (
            f"error: no job in the database {url} yet: submit one with `agentic-iqa eval "
            "submit MANIFEST`, or set AGENTIC_IQA_DATABASE_URL to the database that holds "
            "your jobs"
        ), command
    unknown = runner.invoke(app, ["eval", "status", "fedcba98"])
    assert unknown.exit_code == 1
    assert unknown.output.strip() == f"error: no job with id 'fedcba98' in the database {url}"
    listed = runner.invoke(app, ["eval", "list"])
    assert f"no job in the database {url} yet" in listed.output
    group = runner.invoke(app, ["eval", "compare", "--group", "g"])
    assert group.exit_code == 1 and f"no job in group 'g' in the database {url}" in group.output
    run = runner.invoke(app, ["runs", "show", "ffff0000"])
    assert run.exit_code == 1
    assert run.output.strip() == f"error: no run with id 'ffff0000' in the database {url}"


def test_a_server_database_is_named_without_its_password(
    postgres_admin_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.engine import make_url

    from tests.conftest import scratch_postgres

    with scratch_postgres(postgres_admin_url) as scratch:
        parsed = make_url(scratch)
        secret = parsed.password or "s3cret-in-url"  # a trusting server ignores it
        url = parsed.set(password=secret).render_as_string(hide_password=False)
        upgrade(url)
        monkeypatch.setenv("AGENTIC_IQA_DATABASE_URL", url)
        result = runner.invoke(app, ["eval", "status"])
        dispose_engines(url)
    assert result.exit_code == 1, result.output
    named = f"postgresql+psycopg://***@{parsed.host}:{parsed.port}/{parsed.database}"
    assert f"no job in the database {named} yet" in result.output, result.output
    assert secret not in result.output


def test_a_default_database_that_cannot_be_opened_is_named_by_its_url(
    empty_folder: Path,
) -> None:
    """Unconfigured, the default SQLite file in the working directory is what was tried: the
    line names its URL (it said "the results database None")."""
    (empty_folder / "agentic-iqa.sqlite3").mkdir()  # unopenable, even for root
    image = Path(__file__).parents[2] / "examples" / "i03_blurred.png"
    result = runner.invoke(app, ["assess", str(image), "-q", "Rate the quality of this image."])
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    expected = f"sqlite:///{empty_folder / 'agentic-iqa.sqlite3'}"
    assert f"the results database {expected} cannot be used" in line, line
    assert "None" not in line
