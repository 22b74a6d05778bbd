"""Answers to deterministic VLM requests, cached so a re-run costs no model calls.

Only requests whose answer is fixed by their inputs are cached: the ``openai`` backend at
temperature 0 (or, where a seed is configured, temperature null with that seed). Anthropic's
current API version rejects sampling parameters, so its answers are sampled at the server's
default temperature and never cached; the ``builtin`` backend is local, deterministic and free,
so caching would only add a store lookup.

The key is a SHA-256 over everything that shapes the answer: project version,
:data:`PROMPT_VERSION` and a digest of every template in :mod:`agentic_iqa.prompts` (a changed
prompt can never serve a stale answer), backend, model, the endpoint's scheme, host, port and
path (never its user, password or query string, which may hold credentials), task, the full
system and user text, the SHA-256 of each image's bytes, the answer options, JSON mode, token
limits, image size limit, temperature/seed and the log-probability settings. The value is the
whole response as JSON (text, model, option log-probabilities, probability source, usage); a
hit comes back with ``cached=True``.

Answers live in ``vlm_cache_url``, by default the tool-score store (``tool_cache``): the
``vlm_responses`` table of the SQLite file, or the ``agentic-iqa:vlm_responses:`` key prefix in
Redis.  Each entry expires ``vlm_cache_ttl`` seconds after it was stored (default 30 days; a
Redis key's ``EX``, a SQLite row's ``created_at``), and an answer larger than
``vlm_cache_max_entry_bytes`` is not stored at all (said once per cache): a store without
eviction (the broker's Redis) never fills up with answers.

A request asked again within one run is a retry: the caller rejected the first answer
(invalid JSON, see ``agents/jsonreply.py``) or replanned with the same prompt, and replaying the
same answer would lead to the same dead end; it goes to the model and its answer replaces the
cached one. Within a stored run "asked already" is known from the run's stored calls (their
``request_key``, via the step's collector); outside one, from the last
:data:`RECENT_KEYS` requests of this client in this thread.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import deque
from functools import cache
from pathlib import Path
from typing import Any

from iqa_tools.cache import TextStore, open_text_store

from .base import ClientProxy, Usage, VLMClient, VLMRequest, VLMResponse, reply_problem
from .settings import BackendConfig, endpoint_key
from .usage import current_collector

#: Bump when the way prompts are built or answers are read changes outside
#: :mod:`agentic_iqa.prompts` (whose templates are hashed into the key anyway).
PROMPT_VERSION = "2"

NAMESPACE = "vlm_responses"

log = logging.getLogger(__name__)

#: Without a step collector, a key among this client's last this-many requests (per thread)
#: counts as asked already.
RECENT_KEYS = 64


def is_deterministic(config: BackendConfig) -> bool:
    """Whether this backend's answers are fixed by the request (see the module docstring)."""
    if config.backend != "openai":
        return False
    if config.temperature == 0:
        return True
    return config.temperature is None and getattr(config, "seed", None) is not None


@cache
def prompts_digest() -> str:
    """SHA-256 of every template and table in :mod:`agentic_iqa.prompts`."""
    from .. import prompts

    values = {
        name: value
        for name, value in vars(prompts).items()
        if name.isupper() and isinstance(value, str | dict | tuple | list)
    }
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


def project_version() -> str:
    from .. import __version__

    return __version__


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def image_digest(path: str | Path) -> str:
    """SHA-256 of an image's bytes: a local file read here, an object's from the worker's
    disk cache (the same bytes give the same key wherever they are kept)."""
    from iqa_tools.storage import is_url

    if is_url(str(path)):
        from iqa_tools.images import read_bytes

        return hashlib.sha256(read_bytes(path)).hexdigest()
    return file_digest(Path(path))


def request_key(config: BackendConfig, request: VLMRequest) -> str:
    """The cache key of ``request`` sent with ``config``; reads each image to hash it."""
    options: dict[str, Any] = {}
    if config.backend == "openai":
        from .openai import ANSWER_MAX_TOKENS, TOP_LOGPROBS

        options = {
            "top_logprobs": TOP_LOGPROBS if request.answer_options else None,
            "answer_max_tokens": ANSWER_MAX_TOKENS,
        }
    document = {
        "versions": [project_version(), PROMPT_VERSION, prompts_digest()],
        "backend": config.backend,
        "model": config.model,
        "endpoint": endpoint_key(config),
        "task": request.task,
        "system": request.system,
        "user": request.user,
        "images": [image_digest(path) for path in request.images],
        "json_output": request.json_output,
        "answer_options": list(request.answer_options) if request.answer_options else None,
        "max_tokens": config.max_tokens,
        "max_image_side": config.max_image_side,
        "temperature": config.temperature,
        "seed": getattr(config, "seed", None),
        **options,
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def response_to_json(response: VLMResponse) -> str:
    usage = response.usage
    return json.dumps(
        {
            "text": response.text,
            "model": response.model,
            "option_logprobs": response.option_logprobs,
            "probability_source": response.probability_source,
            "usage": None
            if usage is None
            else [usage.input_tokens, usage.output_tokens, usage.cached_tokens],
        }
    )


def response_from_json(text: str) -> VLMResponse:
    document = json.loads(text)
    usage = document.get("usage")
    return VLMResponse(
        text=document["text"],
        model=document["model"],
        option_logprobs=document.get("option_logprobs"),
        probability_source=document.get("probability_source"),
        usage=None if usage is None else Usage(*usage),
        cached=True,
        finish_reason=document.get("finish_reason"),
        refusal=document.get("refusal"),
    )


class ResponseCache:
    """Responses by key in a :class:`~iqa_tools.cache.TextStore`."""

    def __init__(self, store: TextStore, *, max_entry_bytes: int | None = None) -> None:
        self.store = store
        self.max_entry_bytes = max_entry_bytes
        self._said_too_large = False

    @classmethod
    def open(
        cls, url: str, *, ttl: float | None = None, max_entry_bytes: int | None = None
    ) -> ResponseCache:
        """The cache at a tool cache URL; entries expire ``ttl`` seconds after they are put
        (None: never), and one larger than ``max_entry_bytes`` is not put (None: any size)."""
        return cls(open_text_store(url, NAMESPACE, ttl=ttl), max_entry_bytes=max_entry_bytes)

    def get(self, key: str) -> VLMResponse | None:
        text = self.store.get(key)
        if text is None:
            return None
        try:
            return response_from_json(text)
        except (ValueError, KeyError, TypeError):
            return None  # an unreadable entry is a miss; the fresh answer overwrites it

    def put(self, key: str, response: VLMResponse) -> None:
        """Store ``response`` under ``key``, unless it is larger than ``max_entry_bytes``."""
        text = response_to_json(response)
        size = len(text.encode("utf-8"))
        if self.max_entry_bytes is not None and size > self.max_entry_bytes:
            if not self._said_too_large:
                self._said_too_large = True
                log.warning(
                    "a VLM answer of %d bytes is not cached (above vlm_cache_max_entry_bytes "
                    "%d, AGENTIC_IQA_VLM_CACHE_MAX_ENTRY_BYTES); larger ones are not either",
                    size,
                    self.max_entry_bytes,
                )
            return
        self.store.set(key, text)

    def close(self) -> None:
        self.store.close()


_shared: dict[tuple[str, float | None, int | None], ResponseCache] = {}
_shared_lock = threading.Lock()


def shared_cache(
    url: str, *, ttl: float | None = None, max_entry_bytes: int | None = None
) -> ResponseCache:
    """One cache per store URL (and limits) per process (the SQLite store keeps a connection
    per thread)."""
    with _shared_lock:
        key = (url, ttl, max_entry_bytes)
        if key not in _shared:
            _shared[key] = ResponseCache.open(url, ttl=ttl, max_entry_bytes=max_entry_bytes)
        return _shared[key]


def default_cache() -> ResponseCache | None:
    """The configured cache: None when ``vlm_cache`` is off (``AGENTIC_IQA_VLM_CACHE=false``);
    at ``vlm_cache_url``, else the tool scores' store."""
    from ..config import PipelineSettings, load_tool_settings

    settings = PipelineSettings.load()
    if not settings.vlm_cache:
        return None
    return shared_cache(
        settings.vlm_cache_url or load_tool_settings().tool_cache,
        ttl=settings.vlm_cache_ttl or None,
        max_entry_bytes=settings.vlm_cache_max_entry_bytes,
    )


class CachingClient(ClientProxy):
    """Answers deterministic requests from a :class:`ResponseCache`, else asks ``inner`` and
    stores its answer. A step whose collector says ``use_cache=False`` bypasses it."""

    def __init__(self, inner: VLMClient, cache: ResponseCache, config: BackendConfig) -> None:
        super().__init__(inner)
        self.cache = cache
        self.backend_config = config
        self._local = threading.local()

    def complete(self, request: VLMRequest) -> VLMResponse:
        collector = current_collector()
        if collector is not None and not collector.use_cache:
            return self.inner.complete(request)
        try:
            key = request_key(self.backend_config, request)
        except OSError:
            return self.inner.complete(request)  # an unreadable image: the backend says why
        if collector is not None:
            retry = key in collector.seen
            collector.seen.add(key)
            collector.pending_key = key
        else:
            recent = getattr(self._local, "recent", None)
            if recent is None:
                recent = self._local.recent = deque(maxlen=RECENT_KEYS)
            retry = key in recent
            recent.append(key)
        if not retry:
            hit = self.cache.get(key)
            if hit is not None:
                return hit
        response = self.inner.complete(request)
        if reply_problem(response) is None:  # a cut-off, empty or refused reply is not kept
            self.cache.put(key, response)
        return response
