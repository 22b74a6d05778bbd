"""A secret variable from its value or from the file ``NAME_FILE`` names; passwords into URLs."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from kombu.utils.url import url_to_parts
from sqlalchemy.engine import make_url

from iqa_tools.secret_env import (
    SecretSettingError,
    is_set,
    read_variable,
    with_database_password,
    with_password,
    with_redis_password,
)
from iqa_tools.settings import ToolSettings

NAME = "AGENTIC_IQA_DATABASE_URL"
VALUE = "postgresql://agentic:hunter2-secret@db/agentic"
#: Passwords with every character a URL gives a meaning to, and some it does not expect.
PASSWORDS = ["p@ss:w/rd%42", "a#b?c&d=e", "sp ace+plus", "ünï/cödé", "%41%", "::@@//"]


def test_the_value_itself_when_no_file_is_named() -> None:
    assert read_variable(NAME, {NAME: VALUE}) == VALUE
    assert read_variable(NAME, {}) is None
    assert read_variable(NAME, {NAME: VALUE, f"{NAME}_FILE": "  "}) == VALUE  # empty: unset


@pytest.mark.parametrize("ending", ["", "\n", "\r\n", "\n\n"])
def test_the_files_content_without_its_trailing_newline(tmp_path: Path, ending: str) -> None:
    path = tmp_path / "secret"
    path.write_bytes((VALUE + ending).encode())
    assert read_variable(NAME, {f"{NAME}_FILE": str(path)}) == VALUE
    assert is_set(NAME, {f"{NAME}_FILE": str(path)})


def test_a_file_keeps_inner_and_leading_whitespace(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("  two words \n")
    assert read_variable("K", {"K_FILE": str(path)}) == "  two words "


def test_both_forms_set_is_one_line_naming_both_and_not_the_value(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text(VALUE)
    with pytest.raises(SecretSettingError) as caught:
        read_variable(NAME, {NAME: VALUE, f"{NAME}_FILE": str(path)})
    message = str(caught.value)
    assert NAME in message and f"{NAME}_FILE" in message
    assert "hunter2" not in message and "\n" not in message


@pytest.mark.parametrize("problem", ["missing", "folder", "empty", "blank", "binary"])
def test_an_unusable_file_is_one_line_naming_the_variable_and_the_path(
    tmp_path: Path, problem: str
) -> None:
    path = tmp_path / "secret"
    if problem == "folder":
        path.mkdir()
    elif problem == "empty":
        path.write_text("")
    elif problem == "blank":
        path.write_text("\n")
    elif problem == "binary":
        path.write_bytes(b"\xff\xfehunter2-secret")
    with pytest.raises(SecretSettingError) as caught:
        read_variable(NAME, {f"{NAME}_FILE": str(path)})
    message = str(caught.value)
    assert f"{NAME}_FILE={path}" in message
    assert "hunter2" not in message and "\n" not in message


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_password_goes_into_a_redis_url_so_that_redis_and_kombu_read_it_back(
    password: str,
) -> None:
    url = with_password("redis://cache.internal:6380/2", password)
    assert url == f"redis://:{quote(password, safe='')}@cache.internal:6380/2"
    assert url_to_parts(url).password == password
    pool = redis.ConnectionPool.from_url(url)
    assert pool.connection_kwargs["password"] == password
    assert pool.connection_kwargs["host"] == "cache.internal"
    assert pool.connection_kwargs["db"] == 2


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_password_goes_into_a_database_url_so_that_sqlalchemy_reads_it_back(
    password: str,
) -> None:
    url = with_password("postgresql+psycopg://agentic@db:5432/agentic", password)
    parsed = make_url(url)
    assert (parsed.username, parsed.password, parsed.host) == ("agentic", password, "db")
    assert parsed.database == "agentic"


@pytest.mark.parametrize(
    "url",
    [
        "redis://:already@host/0",  # has a password: kept
        "redis://user:already@host/0",
        "sqlite:////var/lib/runs.sqlite3",  # no host: nothing to authenticate to
        "memory://",
    ],
)
def test_a_url_with_a_password_or_without_a_host_is_left_alone(url: str) -> None:
    assert with_password(url, "new-password") == url


def test_only_redis_urls_get_the_redis_password(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text("r3dis-pw\n")
    env = {"AGENTIC_IQA_REDIS_PASSWORD_FILE": str(path)}
    assert with_redis_password("rediss://h:6380/1", env) == "rediss://:r3dis-pw@h:6380/1"
    assert with_redis_password("redis://user@h/1", env) == "redis://user:r3dis-pw@h/1"
    assert with_redis_password("postgresql://u@h/db", env) == "postgresql://u@h/db"
    assert with_redis_password("redis://h/1", {}) == "redis://h/1"
    assert with_database_password("postgresql://u@h/db", env) == "postgresql://u@h/db"


def test_the_tool_cache_from_a_file_with_the_redis_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cache").write_text("redis://cache:6379/2\n")
    (tmp_path / "password").write_text("p@ss:w/rd%42\n")
    (tmp_path / "tools.yaml").write_text("tools:\n  tool_cache: sqlite:///from-yaml.sqlite3\n")
    monkeypatch.delenv("AGENTIC_IQA_TOOL_CACHE", raising=False)
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE_FILE", str(tmp_path / "cache"))
    monkeypatch.setenv("AGENTIC_IQA_REDIS_PASSWORD_FILE", str(tmp_path / "password"))
    for settings in (ToolSettings(), ToolSettings.from_yaml(tmp_path / "tools.yaml")):
        assert settings.tool_cache == "redis://:p%40ss%3Aw%2Frd%2542@cache:6379/2"
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
    with pytest.raises(SecretSettingError, match="AGENTIC_IQA_TOOL_CACHE and"):
        ToolSettings()
    assert "AGENTIC_IQA_TOOL_CACHE" in os.environ
