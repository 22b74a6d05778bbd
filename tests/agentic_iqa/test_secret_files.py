"""Every secret setting of the pipeline can come from a file, and its value stays masked."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest
from sqlalchemy.engine import make_url

from agentic_iqa.config import PipelineSettings
from agentic_iqa.db.engine import database_url
from agentic_iqa.redact import redact
from agentic_iqa.vlm.settings import BackendConfig, load_backend_configs, load_rate_limits
from iqa_tools.secret_env import SecretSettingError

PASSWORD = "p@ss:w/rd%42"
QUOTED = quote(PASSWORD, safe="")


@pytest.fixture
def secret_file(tmp_path: Path):
    def write(name: str, content: str) -> str:
        path = tmp_path / name
        path.write_text(content + "\n")
        return str(path)

    return write


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No secret variable of the caller's, and a configuration folder of the test's own."""
    for name in (
        "DATABASE_URL",
        "BROKER_URL",
        "RESULT_BACKEND",
        "TOOL_CACHE",
        "RATE_LIMIT_URL",
        "VLM_BASE_URL",
        "DATABASE_PASSWORD",
        "REDIS_PASSWORD",
    ):
        monkeypatch.delenv(f"AGENTIC_IQA_{name}", raising=False)
        monkeypatch.delenv(f"AGENTIC_IQA_{name}_FILE", raising=False)
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "configs"
    config.mkdir()
    monkeypatch.setenv("AGENTIC_IQA_CONFIG_DIR", str(config))
    return monkeypatch


@pytest.mark.parametrize("field", PipelineSettings.SECRET_FIELDS)
def test_each_url_setting_from_its_file_over_the_yaml(clean_env, secret_file, tmp_path, field):
    url = "redis://:from-file-pw@broker:6379/3" if field != "database_url" else "sqlite:////x.db"
    (tmp_path / "configs" / "pipeline.yaml").write_text(f"pipeline:\n  {field}: redis://yaml/0\n")
    assert getattr(PipelineSettings.load(), field) == "redis://yaml/0"
    clean_env.setenv(f"AGENTIC_IQA_{field.upper()}_FILE", secret_file("url", url))
    assert getattr(PipelineSettings.load(), field) == url
    clean_env.setenv(f"AGENTIC_IQA_{field.upper()}", url)
    with pytest.raises(SecretSettingError, match=f"AGENTIC_IQA_{field.upper()} and"):
        PipelineSettings.load()


def test_the_redis_password_goes_into_the_broker_backend_and_rate_limit_urls(
    clean_env, secret_file
):
    clean_env.setenv("AGENTIC_IQA_REDIS_PASSWORD_FILE", secret_file("pw", PASSWORD))
    clean_env.setenv("AGENTIC_IQA_BROKER_URL", "redis://redis:6379/0")
    clean_env.setenv("AGENTIC_IQA_RESULT_BACKEND", "rediss://redis:6380/1")
    settings = PipelineSettings.load()
    assert settings.broker_url == f"redis://:{QUOTED}@redis:6379/0"
    assert settings.result_backend == f"rediss://:{QUOTED}@redis:6380/1"
    assert load_rate_limits().storage_url == settings.broker_url  # shared limits: the broker
    clean_env.setenv("AGENTIC_IQA_RATE_LIMIT_URL_FILE", secret_file("rl", "redis://limits/4"))
    assert load_rate_limits().storage_url == f"redis://:{QUOTED}@limits/4"


def test_the_database_password_goes_into_the_database_url(clean_env, secret_file):
    clean_env.setenv("AGENTIC_IQA_DATABASE_PASSWORD_FILE", secret_file("pw", PASSWORD))
    clean_env.setenv(
        "AGENTIC_IQA_DATABASE_URL_FILE", secret_file("url", "postgresql://agentic@db/agentic")
    )
    for url in (PipelineSettings.load().database_url, database_url()):
        assert url is not None
        assert make_url(url).password == PASSWORD
        assert make_url(url).username == "agentic"
    clean_env.setenv("AGENTIC_IQA_BROKER_URL", "redis://redis/0")  # not the Redis password
    assert PipelineSettings.load().broker_url == "redis://redis/0"


def test_a_database_password_reaches_postgresql(clean_env, secret_file, postgres_url):
    """The quoted password is a password PostgreSQL is given (trust accepts any): it connects."""
    from sqlalchemy import create_engine, text

    bare = make_url(postgres_url).set(password=None).render_as_string(hide_password=False)
    clean_env.setenv("AGENTIC_IQA_DATABASE_URL", bare)
    clean_env.setenv("AGENTIC_IQA_DATABASE_PASSWORD_FILE", secret_file("pw", PASSWORD))
    url = PipelineSettings.load().database_url
    assert url is not None and make_url(url).password == PASSWORD
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("SELECT 1")).scalar() == 1
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("backend", "variable"), [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")]
)
def test_an_api_key_from_its_file_and_masked_everywhere(clean_env, secret_file, backend, variable):
    key = f"sk-{backend}-from-a-file-0123456789"
    clean_env.setenv(f"{variable}_FILE", secret_file("key", key))
    config = BackendConfig(backend=backend, model="m")
    assert config.read_api_key() == key
    assert redact(f"the server said: bad key {key}") == "the server said: bad key ***"
    clean_env.setenv(variable, key)
    with pytest.raises(SecretSettingError, match=f"{variable} and {variable}_FILE"):
        config.read_api_key()


def test_a_key_variable_named_in_model_backends_yaml_has_a_file_form_too(
    clean_env, secret_file, tmp_path
):
    (tmp_path / "configs" / "model_backends.yaml").write_text(
        "defaults:\n  backend: openai\n  model: gpt-4o\n  api_key_env: MY_TEAM_KEY\n"
    )
    clean_env.setenv("MY_TEAM_KEY_FILE", secret_file("key", "team-key-abcdef123456"))
    configs = load_backend_configs()
    assert {config.read_api_key() for config in configs.values()} == {"team-key-abcdef123456"}
    assert redact("echo team-key-abcdef123456") == "echo ***"


def test_a_base_url_with_a_key_from_its_file(clean_env, secret_file):
    url = "https://gateway.example/v1?key=q-secret-123456"
    clean_env.setenv("AGENTIC_IQA_VLM_BASE_URL_FILE", secret_file("base", url))
    clean_env.setenv("AGENTIC_IQA_VLM_BACKEND", "openai")
    clean_env.setenv("AGENTIC_IQA_VLM_MODEL", "gpt-4o")
    configs = load_backend_configs()
    assert {config.base_url for config in configs.values()} == {url}


def test_the_redis_password_from_its_file_is_masked_in_any_text(clean_env, secret_file):
    clean_env.setenv("AGENTIC_IQA_REDIS_PASSWORD_FILE", secret_file("pw", "plain-redis-pw-77"))
    assert redact("AUTH plain-redis-pw-77 failed") == "AUTH *** failed"
