"""The VLM response cache through the real SDKs against the fake servers."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agentic_iqa.vlm import BackendConfig, VLMRequest, create_client
from agentic_iqa.vlm.base import Usage, VLMResponse
from agentic_iqa.vlm.cache import (
    CachingClient,
    ResponseCache,
    request_key,
    response_from_json,
    response_to_json,
)
from agentic_iqa.vlm.openai import OpenAIClient
from agentic_iqa.vlm.settings import endpoint_host
from agentic_iqa.vlm.usage import collect_calls
from iqa_tools.cache import MemoryTextStore
from tests.agentic_iqa.vlm.fake_servers import (
    FakeAPIServer,
    Reply,
    anthropic_message,
    openai_completion,
)

KEY_ENV = "TEST_CACHE_KEY"


@pytest.fixture
def server() -> Iterator[FakeAPIServer]:
    with FakeAPIServer(lambda _r: Reply(200, openai_completion('{"ok": true}'))) as running:
        yield running


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "photo.png"
    Image.new("RGB", (64, 48), (120, 80, 40)).save(path)
    return path


def config(server: FakeAPIServer, **overrides: Any) -> BackendConfig:
    values: dict[str, Any] = {
        "backend": "openai",
        "model": "gpt-4o",
        "base_url": f"{server.url}/v1",
        "api_key_env": KEY_ENV,
        "timeout": 5,
        "max_retries": 0,
        "temperature": 0.0,
    }
    values.update(overrides)
    return BackendConfig(**values)


def ask(
    server: FakeAPIServer, cache: ResponseCache, request: VLMRequest, **overrides: Any
) -> VLMResponse:
    """A fresh client each time, as a re-run in a new process would have."""
    client = create_client(
        "planner", {"planner": config(server, **overrides)}, response_cache=cache
    )
    return client.complete(request)


def plan_request(image: Path, user: str = "Is it blurry?") -> VLMRequest:
    return VLMRequest(task="plan", system="You plan IQA.", user=user, images=(image,))


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-cache-test-secret")


def test_a_deterministic_request_is_answered_from_the_cache(
    server: FakeAPIServer, image: Path, tmp_path: Path
) -> None:
    cache = ResponseCache.open(f"sqlite:///{tmp_path / 'scores.sqlite3'}")
    first = ask(server, cache, plan_request(image))
    reopened = ResponseCache.open(f"sqlite:///{tmp_path / 'scores.sqlite3'}")  # another process
    second = ask(server, reopened, plan_request(image))
    assert len(server.requests) == 1
    assert (first.cached, second.cached) == (False, True)
    assert second.text == first.text == '{"ok": true}'
    assert second.usage == first.usage == Usage(10, 1, None)


def test_the_wrapped_client_still_looks_like_its_backend(server: FakeAPIServer) -> None:
    client = create_client(
        "planner", {"planner": config(server)}, response_cache=ResponseCache(MemoryTextStore())
    )
    assert isinstance(client, OpenAIClient) and isinstance(client, CachingClient) is False
    assert client.config.model == "gpt-4o" and client.backend == "openai"


def test_a_sampled_request_is_never_cached(server: FakeAPIServer, image: Path) -> None:
    cache = ResponseCache(MemoryTextStore())
    for _ in range(2):
        response = ask(server, cache, plan_request(image), temperature=0.7)
        assert response.cached is False
    assert len(server.requests) == 2
    assert len(cache.store._data) == 0  # type: ignore[attr-defined]


def test_a_changed_prompt_or_image_or_model_misses(
    server: FakeAPIServer, image: Path, tmp_path: Path
) -> None:
    cache = ResponseCache(MemoryTextStore())
    ask(server, cache, plan_request(image))
    assert ask(server, cache, plan_request(image, "Is it noisy?")).cached is False
    other = tmp_path / "other.png"
    Image.new("RGB", (64, 48), (121, 80, 40)).save(other)
    assert ask(server, cache, plan_request(other)).cached is False
    assert ask(server, cache, plan_request(image), model="gpt-4o-mini").cached is False
    assert len(server.requests) == 4
    assert ask(server, cache, plan_request(image, "Is it noisy?")).cached is True
    assert len(server.requests) == 4


def test_asking_again_in_the_same_run_goes_to_the_model(server: FakeAPIServer, image: Path) -> None:
    """A repeat within a run means the first answer was rejected: no replay of it."""
    cache = ResponseCache(MemoryTextStore())
    ask(server, cache, plan_request(image))
    client = create_client("planner", {"planner": config(server)}, response_cache=cache)
    with collect_calls() as calls:
        assert client.complete(plan_request(image)).cached is True
        assert client.complete(plan_request(image)).cached is False
    assert [record.cache_hit for record in calls.records] == [True, False]
    assert len(server.requests) == 2


def test_a_step_that_turns_the_cache_off_asks_the_model(server: FakeAPIServer, image: Path) -> None:
    cache = ResponseCache(MemoryTextStore())
    ask(server, cache, plan_request(image))
    client = create_client("planner", {"planner": config(server)}, response_cache=cache)
    with collect_calls(use_cache=False) as calls:
        assert client.complete(plan_request(image)).cached is False
    assert len(server.requests) == 2 and calls.records[0].cache_hit is False


def test_the_cache_can_be_switched_off_by_environment(
    server: FakeAPIServer, image: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", f"sqlite:///{tmp_path / 's.sqlite3'}")
    for setting, requests in (("true", 1), ("false", 3)):
        monkeypatch.setenv("AGENTIC_IQA_VLM_CACHE", setting)
        for _ in range(2):
            create_client("planner", {"planner": config(server)}).complete(plan_request(image))
        assert len(server.requests) == requests


def test_answers_are_shared_through_redis(
    server: FakeAPIServer, image: Path, redis_url: str
) -> None:
    cache = ResponseCache.open(redis_url)
    cache.store._client.delete(
        *cache.store._client.keys(  # type: ignore[attr-defined]
            "agentic-iqa:vlm_responses:*"
        )
        or ["none"]
    )
    ask(server, cache, plan_request(image))
    assert ask(server, ResponseCache.open(redis_url), plan_request(image)).cached is True
    assert len(server.requests) == 1


def test_anthropic_answers_are_not_cached_because_they_are_sampled(image: Path) -> None:
    with FakeAPIServer(lambda _r: Reply(200, anthropic_message('{"ok": true}'))) as server:
        cache = ResponseCache(MemoryTextStore())
        for _ in range(2):
            response = ask(
                server,
                cache,
                plan_request(image),
                backend="anthropic",
                model="claude-test",
                base_url=server.url,
            )
            assert response.cached is False
        assert len(server.requests) == 2


def test_the_key_holds_no_credentials_and_the_response_round_trips(
    server: FakeAPIServer, image: Path
) -> None:
    secret = config(server, base_url="https://user:hunter2@llm.example.com:8443/v1?token=abc")
    assert endpoint_host(secret) == "llm.example.com:8443"
    key = request_key(secret, plan_request(image))
    assert len(key) == 64 and "hunter2" not in key
    # the user, password and query string are not part of the key; the path is (another
    # path on the same host is another server)
    assert (
        request_key(
            config(server, base_url="https://other:pw@llm.example.com:8443/v1"), plan_request(image)
        )
        == key
    )
    assert (
        request_key(
            config(server, base_url="https://user:hunter2@llm.example.com:8443/v2"),
            plan_request(image),
        )
        != key
    )
    response = VLMResponse(
        text="B",
        model="gpt-4o-2024-08-06",
        option_logprobs={"A": -math.inf, "B": -0.1},
        probability_source="logprobs",
        usage=Usage(5, 1, 2),
    )
    restored = response_from_json(response_to_json(response))
    assert restored.option_logprobs == {"A": -math.inf, "B": -0.1}
    assert (restored.usage, restored.cached, restored.model) == (
        Usage(5, 1, 2),
        True,
        "gpt-4o-2024-08-06",
    )
