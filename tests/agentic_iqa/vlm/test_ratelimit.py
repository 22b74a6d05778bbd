"""Fleet-wide VLM rate limits: the real ``openai`` SDK against a local rate-limited server.

Processes are real (multiprocessing, spawn) and share their limits through Redis; each one
sends its own API key, so the server's log tells which process made every call.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis

from agentic_iqa.vlm.base import TransientVLMError, VLMRequest
from agentic_iqa.vlm.openai import OpenAIClient
from agentic_iqa.vlm.ratelimit import (
    ModelLimiter,
    RateLimitedClient,
    estimate_tokens,
    full_jitter,
    rate_limited,
)
from agentic_iqa.vlm.settings import (
    BackendConfig,
    RateLimitConfig,
    RateLimits,
    VLMConfigurationError,
    load_rate_limits,
)

from .fake_servers import FakeAPIServer, RateLimitedResponder, Reply, openai_completion

KEY_ENV = "FAKE_RATE_LIMIT_KEY"


def _answer(_request: Any) -> Reply:
    return Reply(200, openai_completion('{"ok": true}'))


def _config(base_url: str, **overrides: Any) -> BackendConfig:
    values: dict[str, Any] = {
        "backend": "openai",
        "model": "gpt-limited",
        "base_url": f"{base_url}/v1",
        "api_key_env": KEY_ENV,
        "timeout": 10,
        "max_retries": 2,
        "max_tokens": 100,
    }
    values.update(overrides)
    return BackendConfig(**values)


def _request() -> VLMRequest:
    return VLMRequest(task="plan", system="Plan.", user="Is the sky noisy?")


def _limits(storage_url: str, prefix: str, **config: Any) -> RateLimits:
    return RateLimits(
        defaults=RateLimitConfig(**config), storage_url=storage_url, key_prefix=prefix
    )


def _calls(
    base_url: str,
    storage_url: str,
    prefix: str,
    key: str,
    calls: int,
    threads: int,
    config: dict[str, Any],
    start_at: float,
) -> list[tuple[float, float]]:
    """One process of the fleet: ``calls`` calls (one, then the rest on ``threads`` threads at
    ``start_at``); (start, end) of each."""
    os.environ[KEY_ENV] = key
    client = rate_limited(OpenAIClient(_config(base_url)), _limits(storage_url, prefix, **config))
    # One call first, through the limits too: the SDK's first call in a process is slow
    # (lazy set-up), which would delay its arrival well after the turn it took.
    warm_up = time.time()
    client.complete(_request())
    calls_made = [(warm_up, time.time())]
    time.sleep(max(0.0, start_at - time.time()))

    def one(_: int) -> tuple[float, float]:
        began = time.time()
        response = client.complete(_request())
        assert response.text == '{"ok": true}'
        return began, time.time()

    with ThreadPoolExecutor(threads) as pool:
        return calls_made + list(pool.map(one, range(calls - 1)))


def _fleet(processes: int, *args: Any) -> list[list[tuple[float, float]]]:
    """Run :func:`_calls` in ``processes`` processes at once, key ``proc-<i>`` each."""
    base_url, storage_url, prefix, calls, threads, config = args
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 5.0  # imports in the new processes take a while
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        futures = [
            pool.submit(
                _calls,
                base_url,
                storage_url,
                prefix,
                f"proc-{index}",
                calls,
                threads,
                config,
                start_at,
            )
            for index in range(processes)
        ]
        return [future.result(timeout=120) for future in futures]


@pytest.fixture
def limit_redis(redis_url: str) -> Iterator[tuple[str, str]]:
    """The test Redis and a key prefix of this test's own (removed afterwards)."""
    prefix = f"test-ratelimit-{uuid.uuid4().hex[:8]}"
    yield redis_url, prefix
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)
    client.close()


# --- across processes, through Redis -------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_share_one_requests_per_minute_limit(limit_redis: tuple[str, str]) -> None:
    storage, prefix = limit_redis
    # The server allows 30 per 2-second window; the fleet is configured below, 20 per 2 s: a
    # turn is taken just before the request is sent, and arrivals lag it by a few ms, by
    # hundreds on a loaded machine (CI's, with tests on every core), so turns of two windows
    # can arrive in one.  Unshared, the two processes would send 40 per window: still refused.
    responder = RateLimitedResponder(_answer, limit=30, window=2.0, retry_after=1)
    with FakeAPIServer(responder) as server:
        config = {"requests_per_minute": 600, "window_seconds": 2}
        started = time.time()
        results = _fleet(2, server.url, storage, prefix, 30, 8, config)
        elapsed = time.time() - started - 5.0

    assert [len(calls) for calls in results] == [30, 30]
    assert responder.rejected() == 0
    assert len(responder.accepted()) == 60
    assert responder.max_per_window() <= 30
    # 60 calls at 20 per 2 s need a third window: the limit held them back.
    assert elapsed >= 3.5
    senders = {who for _, _, who in responder.accepted()}
    assert senders == {"Bearer proc-0", "Bearer proc-1"}
    # Nor does any span of arrivals a little under a window (turns are taken just before the
    # requests leave, so arrivals lag them by a few ms, more on a loaded machine).
    arrivals = sorted(when for when, _, _ in responder.accepted())
    assert max(sum(1 for t in arrivals if a <= t < a + 1.8) for a in arrivals) <= 30


@pytest.mark.slow
def test_a_429_with_retry_after_pauses_both_processes(limit_redis: tuple[str, str]) -> None:
    storage, prefix = limit_redis
    responder = RateLimitedResponder(_answer, latency=0.05)
    with FakeAPIServer(responder) as server:
        # Throttle once the fleet is under way: the request in flight then gets 429 + 2.5 s.
        def throttle_soon() -> None:
            while len(responder.log) < 20:
                time.sleep(0.005)
            responder.throttle_next(2.5)

        watcher = threading.Thread(target=throttle_soon, daemon=True)
        watcher.start()
        config = {"max_attempts": 3, "backoff_base": 0.05, "backoff_max": 0.1}
        results = _fleet(2, server.url, storage, prefix, 40, 4, config)
        watcher.join(timeout=5)

    assert [len(calls) for calls in results] == [40, 40]  # the throttled call was retried
    throttled = [entry for entry in responder.log if entry[1] == 429]
    assert len(throttled) == 1
    paused_at, _, paused_who = throttled[0]
    # Requests already on their way may land just after the 429 (by hundreds of ms on a loaded
    # machine); then nobody calls until the pause ends: neither the process that got the 429
    # nor the other one.
    during = [entry for entry in responder.log if paused_at + 0.6 < entry[0] < paused_at + 2.45]
    assert during == []
    after = {who for when, _, who in responder.log if when >= paused_at + 2.45}
    before = {who for when, _, who in responder.log if when < paused_at}
    assert before == after == {"Bearer proc-0", "Bearer proc-1"}
    assert paused_who in after


@pytest.mark.slow
def test_max_concurrent_calls_hold_across_processes(limit_redis: tuple[str, str]) -> None:
    storage, prefix = limit_redis
    responder = RateLimitedResponder(_answer, latency=0.15)
    with FakeAPIServer(responder) as server:
        results = _fleet(2, server.url, storage, prefix, 12, 6, {"max_concurrent": 3})

    assert [len(calls) for calls in results] == [12, 12]
    assert responder.max_in_flight == 3  # 12 threads wanted to, 3 at a time were let through
    assert len(responder.accepted()) == 24


def _hold_slot_and_die(storage_url: str, prefix: str) -> None:
    limiter = ModelLimiter(
        "openai",
        "gpt-limited",
        RateLimitConfig(max_concurrent=1),
        storage_url=storage_url,
        key_prefix=prefix,
        slot_seconds=1.0,
    )
    with limiter.turn():
        os._exit(0)  # killed mid-call: the slot is never released


def test_a_killed_process_frees_its_slot_when_the_slot_expires(
    limit_redis: tuple[str, str],
) -> None:
    storage, prefix = limit_redis
    process = multiprocessing.get_context("spawn").Process(
        target=_hold_slot_and_die, args=(storage, prefix)
    )
    process.start()
    process.join(timeout=60)
    assert process.exitcode == 0
    limiter = ModelLimiter(
        "openai",
        "gpt-limited",
        RateLimitConfig(max_concurrent=1, max_wait=10),
        storage_url=storage,
        key_prefix=prefix,
        slot_seconds=1.0,
    )
    assert limiter.slots_held() == 1

    started = time.monotonic()
    with limiter.turn():
        waited = time.monotonic() - started
        assert limiter.slots_held() == 1
    assert 0.0 < waited <= 1.5
    assert limiter.slots_held() == 0


# --- in one process, without Redis -------------------------------------------------------------


class _GrantLog(OpenAIClient):
    """The real client, noting when the limiter let each call through (before any network)."""

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self.granted: list[float] = []
        self._lock = threading.Lock()

    def complete(self, request: VLMRequest) -> Any:
        with self._lock:
            self.granted.append(time.monotonic())
        return super().complete(request)


def _most_in_any_window(times: list[float], width: float) -> int:
    ordered = sorted(times)
    return max(
        sum(1 for later in ordered[i:] if later < start + width) for i, start in enumerate(ordered)
    )


def test_in_process_limiter_without_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "solo")
    responder = RateLimitedResponder(_answer, limit=10, window=1.0)
    with FakeAPIServer(responder) as server:
        limits_config = _limits("memory://", "solo", requests_per_minute=540, window_seconds=1)
        inner = _GrantLog(_config(server.url))
        client = rate_limited(inner, limits_config)
        assert isinstance(client, RateLimitedClient)
        started = time.monotonic()
        with ThreadPoolExecutor(6) as pool:
            texts = list(pool.map(lambda _: client.complete(_request()).text, range(25)))
        elapsed = time.monotonic() - started

    # Every call answered, a 429 included: it paused the model and was retried.
    assert texts == ['{"ok": true}'] * 25
    assert len(inner.granted) == 25 + responder.rejected()
    # The limiter's own rule, read where it acts: at most 9 calls let through in any second
    # (0.8 s: the note is taken a few lines after the grant, up to tenths of a second later on
    # a loaded machine).  What the server counts also depends on delivery delays, which are
    # outside the limiter's reach.  Without the limiter all 25 calls go in well under 0.8 s.
    assert _most_in_any_window(inner.granted, 0.8) <= 9
    assert _most_in_any_window(inner.granted, 1.05) >= 9  # and not slower than it
    assert elapsed >= 2.0  # 25 calls at 9 per second: two waits for a window


def test_in_process_429_pauses_every_thread_and_is_not_retried_by_the_sdk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, "solo")
    responder = RateLimitedResponder(_answer, latency=0.02)
    with FakeAPIServer(responder) as server:
        limits_config = _limits("memory://", "pause", backoff_base=0.01, backoff_max=0.02)
        client = rate_limited(OpenAIClient(_config(server.url, max_retries=2)), limits_config)
        responder.throttle_next(1.0)
        with ThreadPoolExecutor(4) as pool:
            texts = list(pool.map(lambda _: client.complete(_request()).text, range(12)))

    assert texts == ['{"ok": true}'] * 12
    assert responder.rejected() == 1
    paused_at = next(when for when, status, _ in responder.log if status == 429)
    # Other threads' calls already sent may land just after; then none until the pause ends.
    assert not [when for when, _, _ in responder.log if paused_at + 0.15 < when < paused_at + 0.95]
    assert len(responder.log) == 13  # the SDK did not retry the 429 on its own


def test_a_429_repeated_past_max_attempts_reaches_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, "solo")
    responder = RateLimitedResponder(_answer)
    with FakeAPIServer(responder) as server:
        limits_config = _limits("memory://", "give-up", max_attempts=3, backoff_base=0.01)
        client = rate_limited(OpenAIClient(_config(server.url)), limits_config)
        for _ in range(3):
            responder.throttle_next(0.1)
        with pytest.raises(TransientVLMError) as failure:
            client.complete(_request())

    assert failure.value.status == 429
    assert failure.value.retry_after == 0.1
    assert responder.rejected() == 3 and len(responder.log) == 3


def test_tokens_per_minute_limit_uses_the_rough_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "solo")
    responder = RateLimitedResponder(_answer)
    with FakeAPIServer(responder) as server:
        # Each call is estimated at len("Plan." + "Is the sky noisy?") // 4 + 100 = 105 tokens;
        # 300 per 1-second window lets two calls through per window.
        limits_config = _limits("memory://", "tokens", tokens_per_minute=18_000, window_seconds=1)
        client = rate_limited(OpenAIClient(_config(server.url)), limits_config)
        started = time.monotonic()
        for _ in range(5):
            client.complete(_request())
        elapsed = time.monotonic() - started

    assert len(responder.accepted()) == 5
    assert elapsed >= 1.0


def test_waiting_longer_than_max_wait_is_a_transient_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, "solo")
    responder = RateLimitedResponder(_answer)
    with FakeAPIServer(responder) as server:
        limits_config = _limits(
            "memory://", "max-wait", requests_per_minute=1, window_seconds=60, max_wait=0.3
        )
        client = rate_limited(OpenAIClient(_config(server.url)), limits_config)
        client.complete(_request())
        with pytest.raises(TransientVLMError, match="waited"):
            client.complete(_request())

    assert len(responder.log) == 1


# --- pieces ------------------------------------------------------------------------------------


def test_token_estimate_is_characters_over_four_plus_images_plus_reply_budget(
    tmp_path: Path,
) -> None:
    request = VLMRequest(
        task="plan", system="s" * 40, user="u" * 60, images=(tmp_path / "a.png", tmp_path / "b.png")
    )
    assert estimate_tokens(request, max_tokens=512, tokens_per_image=765) == 25 + 2 * 765 + 512


def test_full_jitter_stays_within_the_exponential_bound() -> None:
    delays = [full_jitter(attempt, 1.0, 10.0) for attempt in range(8) for _ in range(50)]
    assert all(0.0 <= delay <= 10.0 for delay in delays)
    assert max(full_jitter(0, 1.0, 10.0) for _ in range(200)) <= 1.0
    assert max(full_jitter(6, 1.0, 10.0) for _ in range(200)) > 5.0  # capped at 10, not 64


def test_builtin_backend_is_not_limited() -> None:
    from agentic_iqa.vlm.builtin import BuiltinClient

    client = BuiltinClient(BackendConfig())
    assert rate_limited(client, _limits("memory://", "builtin")) is client


def test_limits_come_from_the_file_per_model_and_env_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model_backends.yaml"
    path.write_text(
        "limits:\n"
        "  defaults: {requests_per_minute: 100, max_concurrent: 8}\n"
        "  openai/gpt-4o: {requests_per_minute: 450, tokens_per_minute: 30000}\n"
        "  openai/Qwen/Qwen2.5-VL-7B-Instruct: {max_concurrent: 64}\n"
    )
    limits_config = load_rate_limits(path)
    assert limits_config.storage_url == "memory://"
    gpt = limits_config.for_model("openai", "gpt-4o")
    assert (gpt.requests_per_minute, gpt.tokens_per_minute, gpt.max_concurrent) == (450, 30000, 8)
    qwen = limits_config.for_model("openai", "Qwen/Qwen2.5-VL-7B-Instruct")
    assert (qwen.requests_per_minute, qwen.max_concurrent) == (100, 64)
    assert limits_config.for_model("anthropic", "claude").requests_per_minute == 100

    monkeypatch.setenv("AGENTIC_IQA_RATE_LIMIT_REQUESTS_PER_MINUTE", "300")
    monkeypatch.setenv("AGENTIC_IQA_RATE_LIMIT_MAX_CONCURRENT", "")
    monkeypatch.setenv("AGENTIC_IQA_BROKER_URL", "redis://broker:6379/0")
    overridden = load_rate_limits(path)
    assert overridden.for_model("openai", "gpt-4o").requests_per_minute == 300
    assert overridden.for_model("openai", "gpt-4o").max_concurrent is None
    assert overridden.storage_url == "redis://broker:6379/0"
    monkeypatch.setenv("AGENTIC_IQA_RATE_LIMIT_URL", "redis://limits:6379/3")
    assert load_rate_limits(path).storage_url == "redis://limits:6379/3"

    monkeypatch.setenv("AGENTIC_IQA_RATE_LIMIT_REQUESTS_PER_MINUTE", "many")
    with pytest.raises(VLMConfigurationError, match="requests_per_minute"):
        load_rate_limits(path)


def test_the_shipped_config_has_a_limits_section_that_loads() -> None:
    from agentic_iqa.config import config_file
    from agentic_iqa.vlm.settings import load_backend_configs

    load_backend_configs()  # the limits section is not an unknown section
    limits_config = load_rate_limits(config_file("model_backends.yaml"))
    defaults = limits_config.for_model("openai", "anything")
    assert defaults.window_seconds == 60 and defaults.max_attempts == 5
