"""Rate limits shared by the whole fleet, per backend+model, around any :class:`VLMClient`.

Before each call a :class:`RateLimitedClient` takes its turn from a :class:`ModelLimiter`:

1. it waits while the model is **paused**: a 429 with ``Retry-After`` sets a key with that
   expiry, which every process checks before calling, so the whole fleet stops, not one worker;
2. it takes a **concurrency slot** (``max_concurrent``): a Redis sorted set of holders whose
   entries expire after ``slot_seconds``, so a killed process cannot hold a slot forever;
3. it takes its **tokens** (``tokens_per_minute``; sliding-window counter, cheap for large
   costs) and one **request** (``requests_per_minute``; moving window, exact) from the
   ``limits`` library's Redis strategies.

The token cost is a documented rough estimate made before the call and never reconciled:
prompt characters / 4 + ``tokens_per_image`` per image + the reply budget (``max_tokens``).

With a Redis URL (``AGENTIC_IQA_RATE_LIMIT_URL``, else a Redis broker) the state lives in
Redis and binds every worker process; otherwise it lives in this process.  A 429 is retried
here (the SDKs are told not to, see :class:`Handover429`) with exponential backoff and full
jitter, at most ``max_attempts`` calls (fewer when the role's ``max_retries`` says so); other
transient errors keep the SDK's retries and then go to the caller (Celery retries the step).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import limits
import limits.storage
import limits.strategies

from .base import ClientProxy, TransientVLMError, VLMClient, VLMRequest, VLMResponse
from .settings import RateLimitConfig, RateLimits, load_rate_limits

log = logging.getLogger(__name__)

#: Characters per token of the rough estimate (English prose averages about 4).
CHARS_PER_TOKEN = 4
#: Longest single sleep while waiting for a turn, so a lifted pause or a freed slot is seen soon.
_POLL_MAX = 0.5


class Handover429:
    """httpx response hook of an SDK client: when on, a 429 is marked "do not retry".

    The SDKs honour ``x-should-retry``, so the 429 comes back at once to the limiter, which
    pauses the model for the whole fleet; the SDK's own retry would hide it and wait in one
    thread only.  Off by default (a bare client keeps the SDK's retries); a
    :class:`RateLimitedClient` turns its inner client's hook on.  Other statuses are untouched.
    """

    def __init__(self) -> None:
        self.enabled = False

    def __call__(self, response: Any) -> None:
        if self.enabled and response.status_code == 429:
            response.headers["x-should-retry"] = "false"


def estimate_tokens(request: VLMRequest, max_tokens: int, tokens_per_image: int) -> int:
    """Rough token cost of a call: prompt characters / 4 + images + the reply budget."""
    characters = len(request.system) + len(request.user)
    return characters // CHARS_PER_TOKEN + tokens_per_image * len(request.images) + max_tokens


def full_jitter(attempt: int, base: float, cap: float) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2**attempt)]."""
    return random.uniform(0.0, min(cap, base * 2**attempt))


class RateLimitTimeout(TransientVLMError):
    """The call did not get its turn within ``max_wait`` seconds (retry the step later)."""


# --- shared state: pauses and concurrency slots -------------------------------------------------


class _MemoryState:
    """Pauses and slots of this process only (no broker configured)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pauses: dict[str, float] = {}
        self._slots: dict[str, dict[str, float]] = {}

    def pause(self, key: str, seconds: float) -> None:
        with self._lock:
            until = time.monotonic() + seconds
            self._pauses[key] = max(until, self._pauses.get(key, 0.0))

    def paused_for(self, key: str) -> float:
        with self._lock:
            return max(0.0, self._pauses.get(key, 0.0) - time.monotonic())

    def acquire_slot(self, key: str, limit: int, holder: str, seconds: float) -> bool:
        now = time.monotonic()
        with self._lock:
            holders = self._slots.setdefault(key, {})
            for name in [name for name, until in holders.items() if until <= now]:
                del holders[name]
            if len(holders) >= limit:
                return False
            holders[holder] = now + seconds
            return True

    def release_slot(self, key: str, holder: str) -> None:
        with self._lock:
            self._slots.get(key, {}).pop(holder, None)

    def slots_held(self, key: str) -> int:
        now = time.monotonic()
        with self._lock:
            return sum(1 for until in self._slots.get(key, {}).values() if until > now)


#: Take a slot if fewer than ARGV[1] unexpired holders remain; Redis' clock for every process.
_ACQUIRE_SLOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""


class _RedisState:
    """Pauses and slots in Redis, seen by every process of the fleet.

    A pause is a key with an expiry (``SET NX PX``, then ``PEXPIRE GT`` so the longest pause
    wins).  The semaphore is a sorted set of holder ids scored by their expiry (Redis time, so
    clocks of different hosts do not matter); a holder that never releases drops out when its
    expiry passes.  No library offers a counting semaphore with expiry on Redis, hence this.
    """

    def __init__(self, url: str) -> None:
        import redis

        self._redis = redis.Redis.from_url(url)
        self._acquire = self._redis.register_script(_ACQUIRE_SLOT)

    def pause(self, key: str, seconds: float) -> None:
        milliseconds = max(1, int(seconds * 1000))
        if not self._redis.set(key, "1", px=milliseconds, nx=True):
            self._redis.pexpire(key, milliseconds, gt=True)

    def paused_for(self, key: str) -> float:
        remaining = self._redis.pttl(key)
        return remaining / 1000 if remaining and remaining > 0 else 0.0

    def acquire_slot(self, key: str, limit: int, holder: str, seconds: float) -> bool:
        return bool(self._acquire(keys=[key], args=[limit, max(1, int(seconds * 1000)), holder]))

    def release_slot(self, key: str, holder: str) -> None:
        self._redis.zrem(key, holder)

    def slots_held(self, key: str) -> int:
        now_s, now_us = self._redis.time()
        return int(self._redis.zcount(key, now_s * 1000 + now_us // 1000 + 1, "+inf"))


# --- one model's limiter ------------------------------------------------------------------------


class ModelLimiter:
    """Turns to call one backend+model, shared through ``storage_url`` by every process."""

    def __init__(
        self,
        backend: str,
        model: str,
        config: RateLimitConfig,
        *,
        storage_url: str = "memory://",
        key_prefix: str = "agentic_iqa:vlm",
        slot_seconds: float = 300.0,
    ) -> None:
        self.backend = backend
        self.model = model
        self.config = config
        self.identity = f"{backend}/{model}"
        self._key = f"{key_prefix}:{self.identity}"
        self.slot_seconds = config.slot_seconds or slot_seconds
        if storage_url.startswith("memory://"):
            self.state: _MemoryState | _RedisState = _MemoryState()
            storage: limits.storage.Storage = limits.storage.MemoryStorage()
        else:
            self.state = _RedisState(storage_url)
            storage = cast(  # a redis:// URL: the synchronous storage (async+ schemes are not)
                limits.storage.Storage,
                limits.storage.storage_from_string(storage_url, key_prefix=key_prefix),
            )
        window = config.window_seconds
        self._requests = self._tokens = None
        if config.requests_per_minute:
            self._requests = limits.RateLimitItemPerSecond(
                config.per_window(config.requests_per_minute), window
            )
            self._request_limiter = limits.strategies.MovingWindowRateLimiter(storage)
        if config.tokens_per_minute:
            self._tokens = limits.RateLimitItemPerSecond(
                config.per_window(config.tokens_per_minute), window
            )
            self._token_limiter = limits.strategies.SlidingWindowCounterRateLimiter(storage)

    def __repr__(self) -> str:
        return f"ModelLimiter({self.identity!r}, {self.config!r})"

    # -- the pause ----------------------------------------------------------------------------

    def pause(self, seconds: float) -> None:
        """Stop every process from calling this model for ``seconds`` (the longest pause wins)."""
        log.warning(
            "VLM %s answered 429: pausing it for %.1f s across the fleet", self.identity, seconds
        )
        self.state.pause(self._key + ":pause", seconds)

    def paused_for(self) -> float:
        return self.state.paused_for(self._key + ":pause")

    def slots_held(self) -> int:
        return self.state.slots_held(self._key + ":slots")

    # -- a turn -------------------------------------------------------------------------------

    @contextmanager
    def turn(self, tokens: int = 0) -> Iterator[None]:
        """Wait for the pause, a slot, the tokens and one request; hold the slot meanwhile."""
        deadline = time.monotonic() + self.config.max_wait
        holder = self._take_slot(deadline)
        try:
            self._take_budget(tokens, deadline)
            yield
        finally:
            if holder is not None:
                self.state.release_slot(self._key + ":slots", holder)

    def _take_slot(self, deadline: float) -> str | None:
        if not self.config.max_concurrent:
            return None
        holder = uuid.uuid4().hex
        delay = 0.01
        while not self.state.acquire_slot(
            self._key + ":slots", self.config.max_concurrent, holder, self.slot_seconds
        ):
            self._sleep(random.uniform(delay / 2, delay), deadline, "a concurrency slot")
            delay = min(_POLL_MAX, delay * 2)
        return holder

    def _take_budget(self, tokens: int, deadline: float) -> None:
        """Tokens first, then the request; a request that must wait keeps its tokens (so the
        budget errs on the safe side)."""
        tokens_taken = self._tokens is None
        while True:
            paused = self.paused_for()
            if paused > 0:
                self._sleep(paused + random.uniform(0, 0.05), deadline, "the pause to end")
                continue
            if not tokens_taken:
                assert self._tokens is not None
                cost = max(1, min(tokens, self._tokens.amount))
                if not self._token_limiter.hit(self._tokens, self.identity, "tokens", cost=cost):
                    self._wait_window(self._token_limiter, self._tokens, "tokens", deadline)
                    continue
                tokens_taken = True
            if self._requests is None or self._request_limiter.hit(
                self._requests, self.identity, "requests"
            ):
                return
            self._wait_window(self._request_limiter, self._requests, "requests", deadline)

    def _wait_window(
        self,
        limiter: limits.strategies.RateLimiter,
        item: limits.RateLimitItem,
        what: str,
        deadline: float,
    ) -> None:
        reset = limiter.get_window_stats(item, self.identity, what).reset_time
        wait = min(max(reset - time.time(), 0.005), _POLL_MAX * 2)
        self._sleep(wait + random.uniform(0, 0.02), deadline, f"{what} per minute")

    def _sleep(self, seconds: float, deadline: float, waiting_for: str) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RateLimitTimeout(
                f"VLM {self.identity}: waited {self.config.max_wait:.0f} s for {waiting_for}"
            )
        time.sleep(min(seconds, left, _POLL_MAX * 4))


# --- the client wrapper -------------------------------------------------------------------------


class RateLimitedClient(ClientProxy):
    """A :class:`VLMClient` that calls ``inner`` only when the fleet-wide limits allow it.

    A 429 pauses the model for everyone for its ``Retry-After`` and is retried here with
    exponential backoff and full jitter, at most ``max_attempts`` calls in all; any other
    error, or the last 429, goes to the caller.  Anything else is delegated to ``inner``.
    """

    def __init__(self, inner: VLMClient, limiter: ModelLimiter) -> None:
        super().__init__(inner)
        self.limiter = limiter
        handover = getattr(inner, "handover_429", None)
        if isinstance(handover, Handover429):
            handover.enabled = True
        config = getattr(inner, "config", None)
        self._max_tokens = int(getattr(config, "max_tokens", 0) or 0)
        # The role's max_retries bounds 429 retries too, as it did inside the SDK.
        retries = getattr(config, "max_retries", None)
        self._max_attempts = (
            limiter.config.max_attempts
            if retries is None
            else max(1, min(limiter.config.max_attempts, int(retries) + 1))
        )

    def complete(self, request: VLMRequest) -> VLMResponse:
        config = self.limiter.config
        tokens = estimate_tokens(request, self._max_tokens, config.tokens_per_image)
        attempt = 0
        while True:
            try:
                with self.limiter.turn(tokens):
                    return self.inner.complete(request)
            except TransientVLMError as exc:
                if exc.status != 429 or isinstance(exc, RateLimitTimeout):
                    raise
                if exc.retry_after:
                    self.limiter.pause(exc.retry_after)
                attempt += 1
                if attempt >= self._max_attempts:
                    raise
                # The pause itself is waited for in the next turn; the jitter spreads the fleet.
                time.sleep(full_jitter(attempt - 1, config.backoff_base, config.backoff_max))


_limiters: dict[tuple[Any, ...], ModelLimiter] = {}
_limiters_lock = threading.Lock()


def limiter_for(
    backend: str, model: str, limits_config: RateLimits, slot_seconds: float = 300.0
) -> ModelLimiter:
    """One limiter per backend+model and storage in this process, shared by all roles."""
    config = limits_config.for_model(backend, model)
    key = (backend, model, config, limits_config.storage_url, limits_config.key_prefix)
    with _limiters_lock:
        if key not in _limiters:
            _limiters[key] = ModelLimiter(
                backend,
                model,
                config,
                storage_url=limits_config.storage_url,
                key_prefix=limits_config.key_prefix,
                slot_seconds=slot_seconds,
            )
        return _limiters[key]


def rate_limited(client: VLMClient, limits_config: RateLimits | None = None) -> VLMClient:
    """``client`` behind the fleet-wide limits of its backend+model (``builtin`` is unlimited).

    ``limits_config`` defaults to :func:`~agentic_iqa.vlm.settings.load_rate_limits`.
    """
    if client.backend == "builtin" or isinstance(client, RateLimitedClient):
        return client
    limits_config = limits_config or load_rate_limits()
    config = getattr(client, "config", None)
    slot_seconds = 300.0
    if config is not None and hasattr(config, "timeout"):
        slot_seconds = config.timeout * (getattr(config, "max_retries", 0) + 1) + 30
    return RateLimitedClient(
        client, limiter_for(client.backend, client.model, limits_config, slot_seconds)
    )
