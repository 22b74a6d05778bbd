from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentic_iqa.config import config_file
from agentic_iqa.vlm import (
    BackendConfig,
    Role,
    VLMConfigurationError,
    create_client,
    load_backend_configs,
)
from agentic_iqa.vlm.settings import NO_KEY_PLACEHOLDER, ROLES

REPO = Path(__file__).resolve().parents[3]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "model_backends.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_shipped_file_gives_builtin_for_every_role() -> None:
    configs = load_backend_configs()

    assert set(configs) == set(ROLES) == {"planner", "executor", "summarizer"}
    for config in configs.values():
        assert config.backend == "builtin"
        assert config.temperature == 0.0
        assert config.max_image_side == 1024
        assert config.base_url is None


def test_default_path_follows_the_config_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "defaults: {backend: openai, model: from-config-dir}\n")
    monkeypatch.setenv("AGENTIC_IQA_CONFIG_DIR", str(tmp_path))

    assert config_file("model_backends.yaml") == tmp_path / "model_backends.yaml"
    assert load_backend_configs()["executor"].model == "from-config-dir"


def test_missing_default_file_means_builtin_but_a_named_missing_file_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTIC_IQA_CONFIG_DIR", str(tmp_path))
    assert load_backend_configs()["planner"].backend == "builtin"

    with pytest.raises(VLMConfigurationError, match="not found"):
        load_backend_configs(tmp_path / "absent.yaml")


def test_defaults_are_merged_into_each_role(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        defaults:
          backend: openai
          model: gpt-base
          timeout: 30
        planner:
          model: gpt-planner
        summarizer:
          backend: anthropic
          model: claude-x
          max_image_side: 512
        """,
    )

    configs = load_backend_configs(path)

    assert configs["planner"].model == "gpt-planner"
    assert configs["planner"].timeout == 30
    assert configs["executor"].model == "gpt-base"
    assert configs["summarizer"].backend == "anthropic"
    assert configs["summarizer"].max_image_side == 512
    assert configs["summarizer"].key_variable == "ANTHROPIC_API_KEY"
    assert configs["executor"].key_variable == "OPENAI_API_KEY"


def test_global_env_overrides_every_role_and_role_env_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "planner: {model: from-file, base_url: http://file/v1}\n")
    monkeypatch.setenv("AGENTIC_IQA_VLM_BACKEND", "openai")
    monkeypatch.setenv("AGENTIC_IQA_VLM_MODEL", "global-model")
    monkeypatch.setenv("AGENTIC_IQA_VLM_BASE_URL", "http://global/v1")
    monkeypatch.setenv("AGENTIC_IQA_SUMMARIZER_BACKEND", "anthropic")
    monkeypatch.setenv("AGENTIC_IQA_SUMMARIZER_MODEL", "claude-role")
    monkeypatch.setenv("AGENTIC_IQA_SUMMARIZER_BASE_URL", "http://role/")
    monkeypatch.setenv("AGENTIC_IQA_SUMMARIZER_TEMPERATURE", "0.7")
    monkeypatch.setenv("AGENTIC_IQA_SUMMARIZER_TIMEOUT", "12.5")
    monkeypatch.setenv("AGENTIC_IQA_SUMMARIZER_MAX_RETRIES", "5")
    monkeypatch.setenv("AGENTIC_IQA_EXECUTOR_API_KEY_ENV", "EXECUTOR_KEY")

    configs = load_backend_configs(path)

    planner, executor, summarizer = (configs[role] for role in ROLES)
    assert (planner.backend, planner.model, planner.base_url) == (
        "openai",
        "global-model",
        "http://global/v1",
    )
    assert executor.model == "global-model"
    assert executor.key_variable == "EXECUTOR_KEY"
    assert (summarizer.backend, summarizer.model, summarizer.base_url) == (
        "anthropic",
        "claude-role",
        "http://role/",
    )
    assert summarizer.temperature == 0.7
    assert summarizer.timeout == 12.5
    assert summarizer.max_retries == 5
    assert planner.temperature == 0.0


def test_an_empty_variable_sets_null(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "defaults: {base_url: http://file/v1, temperature: 0.3}\n")
    monkeypatch.setenv("AGENTIC_IQA_VLM_BASE_URL", "")
    monkeypatch.setenv("AGENTIC_IQA_PLANNER_TEMPERATURE", "")

    configs = load_backend_configs(path)

    assert configs["executor"].base_url is None
    assert configs["planner"].temperature is None
    assert configs["executor"].temperature == 0.3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("defaults: {backend: openai}\n", "needs a model"),
        ("planner: {backend: gemini}\n", "backend"),
        ("planner: {timeout: -1}\n", "timeout"),
        ("planner: {colour: blue}\n", "colour"),
        ("planer: {model: x}\n", "unknown sections"),
        ("planner: [1, 2]\n", "must be a mapping"),
    ],
)
def test_invalid_settings_name_the_role_and_field(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(VLMConfigurationError, match=expected):
        load_backend_configs(write(tmp_path, text))


def test_bad_env_value_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTIC_IQA_EXECUTOR_MAX_RETRIES", "many")

    with pytest.raises(VLMConfigurationError, match="executor.*max_retries"):
        load_backend_configs(write(tmp_path, "{}\n"))


def test_a_key_pasted_into_api_key_env_is_refused_without_echoing_it(tmp_path: Path) -> None:
    key = "sk-test-SECRET-123"
    path = write(tmp_path, f"planner: {{backend: openai, model: m, api_key_env: {key}}}\n")

    with pytest.raises(VLMConfigurationError) as caught:
        load_backend_configs(path)

    assert "api_key_env" in str(caught.value)
    assert key not in str(caught.value)
    with pytest.raises(ValueError) as direct:
        BackendConfig(backend="openai", model="m", api_key_env=key)
    assert key not in str(direct.value)


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MY_VLM_KEY", raising=False)
    for backend in ("openai", "anthropic"):
        config = BackendConfig(backend=backend, model="m", api_key_env="MY_VLM_KEY")
        with pytest.raises(VLMConfigurationError, match="MY_VLM_KEY"):
            config.read_api_key()
        with pytest.raises(VLMConfigurationError, match="MY_VLM_KEY"):
            create_client("planner", {"planner": config})


def test_key_is_read_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_VLM_KEY", "sk-value")
    config = BackendConfig(backend="anthropic", model="m", api_key_env="MY_VLM_KEY")

    assert config.read_api_key() == "sk-value"
    assert "sk-value" not in repr(config)


def test_local_openai_compatible_server_may_go_without_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    local = BackendConfig(backend="openai", model="m", base_url="http://127.0.0.1:8000/v1")
    assert local.read_api_key() == NO_KEY_PLACEHOLDER

    proxied = BackendConfig(backend="anthropic", model="m", base_url="http://127.0.0.1:9/")
    with pytest.raises(VLMConfigurationError, match="ANTHROPIC_API_KEY"):
        proxied.read_api_key()


def test_create_client_picks_the_configured_sdk_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-a")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-b")
    configs: dict[Role, BackendConfig] = {
        "planner": BackendConfig(backend="openai", model="gpt-x"),
        "summarizer": BackendConfig(backend="anthropic", model="claude-y"),
    }

    planner = create_client("planner", configs)
    summarizer = create_client("summarizer", configs)

    assert (planner.backend, planner.model) == ("openai", "gpt-x")
    assert (summarizer.backend, summarizer.model) == ("anthropic", "claude-y")
    assert "sk-a" not in repr(planner) and "sk-b" not in repr(summarizer)
    with pytest.raises(VLMConfigurationError, match="no backend configuration"):
        create_client("executor", configs)
    with pytest.raises(VLMConfigurationError, match="unknown role"):
        create_client("critic", configs)  # type: ignore[arg-type]


def test_builtin_backend_never_imports_the_sdks() -> None:
    # The offline default backend is part of the product: its absence is a failure, not a skip.
    from agentic_iqa.vlm.builtin import BuiltinClient

    assert BuiltinClient.backend == "builtin"
    script = (
        "import sys\n"
        "from agentic_iqa.vlm import create_client\n"
        "client = create_client('planner')\n"
        "assert client.backend == 'builtin', client.backend\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('openai', 'anthropic')]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
