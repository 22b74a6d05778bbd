"""What VLM calls cost: a per-step collector of call records, and a price table.

A :class:`RecordingClient` (applied by :func:`agentic_iqa.vlm.create_client`) appends one
:class:`CallRecord` per answer to the collector bound to the current context, if any.  The
persisted pipeline opens one around each step (:func:`collect_calls`) and stores the records;
code that opens none (plain ``run_inprocess``) records nothing and pays nothing for it.  A
:mod:`contextvars` variable keeps concurrent steps (a job's thread pool) apart with no locking
by the caller.

Token counts, as the SDKs report them, on one convention: ``input_tokens`` counts *every*
prompt token, including ``cached_tokens`` (the ones served from the provider's prompt cache at
a discount). OpenAI's ``prompt_tokens`` already includes its cached tokens; Anthropic reports
``input_tokens`` without ``cache_read_input_tokens`` / ``cache_creation_input_tokens``, so
those are added.

Cost of a call = (input - cached) x input price + cached x cached-input price + output x output
price, in USD per million tokens from ``configs/prices.yaml``. A model missing from the table,
or a call whose server reported no tokens, has an *unknown* cost (None), never 0; an answer
from our response cache made no call and costs 0. A call answered through a provider's batch
API (``CallRecord.batch``) costs its online cost x that provider's ``batch_discount``; a
provider without one makes the call's cost unknown, never the online price.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .base import ClientProxy, VLMClient, VLMError, VLMRequest, VLMResponse


@dataclass(frozen=True)
class CallRecord:
    """One answer a role got: from the model (a call) or from the response cache (a hit)."""

    role: str
    task: str
    backend: str
    model: str
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    latency_s: float
    cache_hit: bool
    #: The response-cache key of the request (a SHA-256), when the request was cacheable.
    request_key: str | None = None
    #: Why the call failed inside the backend (HTTP status and message); None: answered.
    #: A failed call is recorded with 0 tokens: providers bill no tokens for a refused request.
    error: str | None = None
    #: Host (and port) the call went to (``api.openai.com``, ``localhost:8000``): a price
    #: applies to a provider's own endpoint, or to an endpoint the price table names.
    endpoint: str | None = None
    #: The provider's batch id when the answer came from a batch (OpenAI Batch API, Anthropic
    #: Message Batches), billed at the batch price; None: an online call (or a cache hit).
    batch: str | None = None


@dataclass
class CallCollector:
    """The calls of one scope (a step); ``use_cache`` False makes every call go to the model.

    ``seen``: cache keys already answered in this run (earlier steps and this one); asking one
    again means the earlier answer led nowhere (a rejected reply, a replan), so it goes to the
    model instead of replaying the same answer.
    """

    use_cache: bool = True
    records: list[CallRecord] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    #: Set by the caching layer for the record being made (one thread per collector).
    pending_key: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: CallRecord) -> None:
        with self._lock:
            self.records.append(record)


_current: ContextVar[CallCollector | None] = ContextVar("agentic_iqa_vlm_calls", default=None)


def current_collector() -> CallCollector | None:
    return _current.get()


@contextmanager
def collecting(collector: CallCollector) -> Iterator[CallCollector]:
    """Record the VLM calls made in this context (this thread) in ``collector``."""
    token = _current.set(collector)
    try:
        yield collector
    finally:
        _current.reset(token)


def collect_calls(
    *, use_cache: bool = True, seen: Iterable[str] = ()
) -> contextlib.AbstractContextManager[CallCollector]:
    """Collect the VLM calls made in this context in a new collector until the block ends."""
    return collecting(CallCollector(use_cache=use_cache, seen=set(seen)))


class RecordingClient(ClientProxy):
    """Records every answer (call or cache hit) to the current :class:`CallCollector`."""

    def __init__(self, inner: VLMClient, role: str) -> None:
        super().__init__(inner)
        self.role = role
        config = getattr(inner, "config", None)
        if config is not None:
            from .settings import endpoint_host

            self.endpoint: str | None = endpoint_host(config)
        else:
            self.endpoint = None

    def complete(self, request: VLMRequest) -> VLMResponse:
        started = time.perf_counter()
        try:
            response = self.inner.complete(request)
        except VLMError as exc:
            collector = current_collector()
            if collector is not None:  # a failed call is a fact of the run too
                key, collector.pending_key = collector.pending_key, None
                collector.add(
                    CallRecord(
                        role=self.role,
                        task=request.task,
                        backend=self.backend,
                        model=self.model,
                        input_tokens=0,
                        output_tokens=0,
                        cached_tokens=0,
                        latency_s=time.perf_counter() - started,
                        cache_hit=False,
                        request_key=key,
                        error=str(exc) or type(exc).__name__,
                        endpoint=self.endpoint,
                    )
                )
            raise
        collector = current_collector()
        if collector is not None:
            key, collector.pending_key = collector.pending_key, None
            usage = response.usage
            collector.add(
                CallRecord(
                    role=self.role,
                    task=request.task,
                    backend=self.backend,
                    model=response.model or self.model,
                    input_tokens=usage.input_tokens if usage else None,
                    output_tokens=usage.output_tokens if usage else None,
                    cached_tokens=usage.cached_tokens if usage else None,
                    latency_s=time.perf_counter() - started,
                    cache_hit=response.cached,
                    request_key=key,
                    endpoint=self.endpoint,
                    batch=response.batch,
                )
            )
        return response


# -- prices ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cached_input: float

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int) -> float:
        uncached = max(input_tokens - cached_tokens, 0)
        return (
            uncached * self.input + cached_tokens * self.cached_input + output_tokens * self.output
        ) / 1_000_000


#: The providers' own endpoints, where their published prices apply.
VENDOR_ENDPOINTS = frozenset({"api.openai.com", "api.anthropic.com"})


def batch_key(backend: str, endpoint: str | None = None) -> str:
    """The ``batch_discount`` entry that prices a batch call: the backend (the provider) at its
    own endpoint, else the host, since a provider's discount says nothing of another server's."""
    if endpoint is not None and endpoint.lower() not in VENDOR_ENDPOINTS:
        return endpoint.lower()
    return backend


class PriceTable:
    """Prices per model name; a dated snapshot such as ``gpt-4o-2024-08-06`` takes the price
    of the longest listed name it starts with followed by ``-`` (``gpt-4o``).

    ``models`` are the providers' prices: they apply to calls to a provider's own endpoint.  A
    model of the same name served elsewhere (vLLM, Ollama, a proxy) costs what ``endpoints``
    says for that host (``{"localhost:8000": {"*": price}}``), and is unknown otherwise.
    ``batch_discount`` maps a provider (backend name, or host for another endpoint: see
    :func:`batch_key`) to the factor its batch API bills of the online price.
    """

    def __init__(
        self,
        prices: Mapping[str, Price],
        endpoints: Mapping[str, Mapping[str, Price]] | None = None,
        batch_discount: Mapping[str, float] | None = None,
    ) -> None:
        self.prices = dict(prices)
        self.endpoints = {host: dict(table) for host, table in (endpoints or {}).items()}
        self.batch_discount = {
            str(key).lower(): float(factor) for key, factor in (batch_discount or {}).items()
        }

    @classmethod
    def load(cls, path: str | Path | None = None) -> PriceTable:
        """From ``path``, else ``prices_file`` in the pipeline settings, else
        ``configs/prices.yaml``; no file means no known prices."""
        from ..config import PipelineSettings, config_file

        if path is None:
            path = PipelineSettings.load().prices_file or config_file("prices.yaml")
        source = Path(path).expanduser()
        if not source.is_file():
            return cls({})

        def table(entries: Mapping[str, Any]) -> dict[str, Price]:
            return {
                str(name): Price(
                    input=float(entry["input"]),
                    output=float(entry["output"]),
                    cached_input=float(entry.get("cached_input", entry["input"])),
                )
                for name, entry in entries.items()
            }

        try:
            document = yaml.safe_load(source.read_text(encoding="utf-8")) or {}
            prices = table(document.get("models") or {})
            endpoints = {
                str(host).lower(): table(entries or {})
                for host, entries in (document.get("endpoints") or {}).items()
            }
            discounts = {
                str(key).lower(): float(factor)
                for key, factor in (document.get("batch_discount") or {}).items()
            }
            negative = sorted(key for key, factor in discounts.items() if factor < 0)
            if negative:
                raise ValueError(f"batch_discount below 0 for {', '.join(negative)}")
        except (OSError, yaml.YAMLError, AttributeError, KeyError, TypeError, ValueError) as exc:
            raise VLMError(f"cannot read the price table {source}: {exc}") from None
        return cls(prices, endpoints, discounts)

    def price_for(self, model: str | None, endpoint: str | None = None) -> Price | None:
        """The price of ``model`` at ``endpoint`` (None: a call recorded before endpoints
        were, taken as the provider's)."""
        if not model:
            return None
        if endpoint is not None and endpoint.lower() not in VENDOR_ENDPOINTS:
            local = self.endpoints.get(endpoint.lower())
            if local is None:
                return None  # a model's name says nothing of what another server charges
            return _lookup(local, model) or local.get("*")
        return _lookup(self.prices, model)

    def batch_factor(self, backend: str, endpoint: str | None = None) -> float | None:
        """What a batch call costs as a fraction of the online price; None: unknown."""
        return self.batch_discount.get(batch_key(backend, endpoint).lower())

    def cost(
        self,
        backend: str,
        model: str | None,
        endpoint: str | None,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int,
        *,
        batch: bool = False,
    ) -> float | None:
        """The cost of these tokens, online or (``batch``) at the provider's batch discount;
        None when the price, or for a batch the discount, is unknown."""
        price = self.price_for(model, endpoint)
        if price is None:
            return None
        online = price.cost(input_tokens, output_tokens, cached_tokens)
        if not batch:
            return online
        factor = self.batch_factor(backend, endpoint)
        return None if factor is None else online * factor


def _lookup(prices: Mapping[str, Price], model: str) -> Price | None:
    if model in prices:
        return prices[model]
    matches = [name for name in prices if name != "*" and model.startswith(f"{name}-")]
    return prices[max(matches, key=len)] if matches else None


# -- totals ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelUsage:
    """Sums over the calls to one (backend, model); tokens count real calls only, not hits.

    ``unmetered`` counts real calls whose server reported no tokens (their cost is unknown);
    ``batch``: these calls were answered through the provider's batch API (batch price).
    """

    backend: str
    model: str
    calls: int
    cache_hits: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    unmetered: int = 0
    endpoint: str | None = None
    batch: bool = False


def group_records(records: Iterable[CallRecord]) -> list[ModelUsage]:
    """The per-model sums of in-memory records, batch and online calls apart (they are priced
    apart); the database computes the same by SQL."""
    sums: dict[tuple[str, str, str | None, bool], list[int]] = {}
    for record in records:
        key = (record.backend, record.model, record.endpoint, record.batch is not None)
        entry = sums.setdefault(key, [0] * 6)
        if record.cache_hit:
            entry[1] += 1
            continue
        entry[0] += 1
        entry[2] += record.input_tokens or 0
        entry[3] += record.output_tokens or 0
        entry[4] += record.cached_tokens or 0
        entry[5] += record.input_tokens is None or record.output_tokens is None
    usages = []
    for (backend, model, endpoint, batch), values in sorted(
        sums.items(), key=lambda item: (item[0][0], item[0][1], item[0][2] or "", item[0][3])
    ):
        calls, hits, inputs, outputs, cached, unmetered = values
        usages.append(
            ModelUsage(
                backend, model, calls, hits, inputs, outputs, cached, unmetered, endpoint, batch
            )
        )
    return usages


def summarize(
    usages: Iterable[ModelUsage], prices: PriceTable, *, items: int | None = None
) -> dict[str, Any]:
    """Calls, cache hits, tokens and cost (None when any call's price, or a batch call's
    discount, is unknown), and the cost per item when ``items`` is given."""
    usages = list(usages)
    cost: float | None = 0.0
    unpriced: list[str] = []
    for usage in usages:
        if usage.calls == 0:
            continue
        part = (
            None
            if usage.unmetered
            else prices.cost(
                usage.backend,
                usage.model,
                usage.endpoint,
                usage.input_tokens,
                usage.output_tokens,
                usage.cached_tokens,
                batch=usage.batch,
            )
        )
        if part is None:
            label = (
                usage.model
                if usage.endpoint is None or usage.endpoint.lower() in VENDOR_ENDPOINTS
                else f"{usage.model} at {usage.endpoint}"
            )
            unpriced.append(f"{label} in batch" if usage.batch else label)
            cost = None
        elif cost is not None:
            cost += part
    summary: dict[str, Any] = {
        "calls": sum(u.calls for u in usages),
        "batch_calls": sum(u.calls for u in usages if u.batch),
        "cache_hits": sum(u.cache_hits for u in usages),
        "input_tokens": sum(u.input_tokens for u in usages),
        "output_tokens": sum(u.output_tokens for u in usages),
        "cached_tokens": sum(u.cached_tokens for u in usages),
        "cost_usd": cost,
        "unpriced_models": sorted(set(unpriced)),
        "models": sorted({u.model for u in usages}),
    }
    if items is not None:
        summary["items"] = items
        summary["cost_per_item_usd"] = cost / items if cost is not None and items else None
        summary["calls_per_item"] = summary["calls"] / items if items else None
    return summary


def format_cost(cost: float | None) -> str:
    return "unknown" if cost is None else f"${cost:.4f}"


def describe(summary: Mapping[str, Any]) -> str:
    """One line: calls (those sent in batches, priced apart, and of them those answered for
    runs that ended without them), cache hits, tokens and cost."""
    unused = summary.get("unused_batch_answers")
    unused_text = (
        f"; {unused} answered for runs that ended without them, billed all the same"
        if unused
        else ""
    )
    batched = (
        f" ({summary['batch_calls']} in batches, at the batch price{unused_text})"
        if summary.get("batch_calls")
        else ""
    )
    text = (
        f"{summary['calls']} VLM calls{batched}, {summary['cache_hits']} cache hits, "
        f"{summary['input_tokens']} input tokens ({summary['cached_tokens']} cached), "
        f"{summary['output_tokens']} output tokens, cost {format_cost(summary['cost_usd'])}"
    )
    if summary.get("unpriced_models"):
        text += f" (no price for {', '.join(summary['unpriced_models'])})"
    follow_ups = summary.get("follow_ups") or {}
    if follow_ups.get("calls"):
        text += (
            f"; {follow_ups['calls']} of the calls were follow-up questions (a reply naming no "
            f"option, asked about once), cost {format_cost(follow_ups['cost_usd'])}"
        )
    if summary.get("cost_per_item_usd") is not None:
        text += f", {format_cost(summary['cost_per_item_usd'])} per item"
    return text
