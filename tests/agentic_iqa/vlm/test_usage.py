"""Token usage as the SDKs report it, recorded per call, and priced."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_iqa.vlm import BackendConfig, VLMRequest, create_client
from agentic_iqa.vlm.base import Usage, VLMError
from agentic_iqa.vlm.usage import (
    CallRecord,
    Price,
    PriceTable,
    collect_calls,
    describe,
    group_records,
    summarize,
)
from tests.agentic_iqa.vlm.fake_servers import (
    FakeAPIServer,
    Reply,
    anthropic_message,
    openai_completion,
)

REQUEST = VLMRequest(task="answer", system="You summarize.", user="Is it sharp?")


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_USAGE_KEY", "sk-usage")


def client(backend: str, url: str, model: str, role: str = "summarizer"):  # noqa: ANN201
    config = BackendConfig(
        backend=backend,
        model=model,
        base_url=url,
        timeout=5,
        max_retries=0,
        api_key_env="TEST_USAGE_KEY",
        temperature=0.7,
    )
    return create_client(role, {role: config})  # type: ignore[arg-type]


def test_openai_usage_with_cached_prompt_tokens_is_recorded() -> None:
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 80,
        "total_tokens": 1280,
        "prompt_tokens_details": {"cached_tokens": 1024},
    }
    body = openai_completion('{"a": 1}', model="gpt-4o-2024-08-06", usage=usage)
    with FakeAPIServer(lambda _r: Reply(200, body)) as server, collect_calls() as calls:
        response = client("openai", f"{server.url}/v1", "gpt-4o").complete(REQUEST)
    assert response.usage == Usage(1200, 80, 1024)
    (record,) = calls.records
    assert (record.role, record.task, record.backend, record.model) == (
        "summarizer",
        "answer",
        "openai",
        "gpt-4o-2024-08-06",
    )
    assert (record.input_tokens, record.output_tokens, record.cached_tokens) == (1200, 80, 1024)
    assert record.cache_hit is False and record.latency_s > 0


def test_openai_without_usage_reports_none() -> None:
    body = openai_completion('{"a": 1}')
    del body["usage"]
    with FakeAPIServer(lambda _r: Reply(200, body)) as server:
        response = client("openai", f"{server.url}/v1", "gpt-4o").complete(REQUEST)
    assert response.usage is None


def test_anthropic_usage_counts_cache_reads_as_input() -> None:
    usage = {
        "input_tokens": 300,
        "output_tokens": 40,
        "cache_read_input_tokens": 2000,
        "cache_creation_input_tokens": 100,
    }
    body = anthropic_message('{"a": 1}', usage=usage)
    with FakeAPIServer(lambda _r: Reply(200, body)) as server, collect_calls() as calls:
        response = client("anthropic", server.url, "claude-test").complete(REQUEST)
    assert response.usage == Usage(2400, 40, 2000)
    assert calls.records[0].input_tokens == 2400


def test_no_collector_no_record() -> None:
    with FakeAPIServer(lambda _r: Reply(200, openai_completion("{}"))) as server:
        client("openai", f"{server.url}/v1", "gpt-4o").complete(REQUEST)
        with collect_calls() as calls:
            pass
    assert calls.records == []


def test_price_table_prices_snapshots_and_leaves_unknown_models_unknown(tmp_path: Path) -> None:
    shipped = PriceTable.load()
    assert shipped.price_for("gpt-4o") == Price(2.50, 10.00, 1.25)
    assert shipped.price_for("gpt-4o-2024-08-06") == Price(2.50, 10.00, 1.25)
    assert shipped.price_for("gpt-4o-mini-2024-07-18") == Price(0.15, 0.60, 0.075)
    assert shipped.price_for("claude-sonnet-4-5") == Price(3.00, 15.00, 0.30)
    assert shipped.price_for("gpt-4oops") is None and shipped.price_for("llava") is None

    def call(
        model: str, tokens: tuple[int | None, int | None, int | None], hit: bool = False
    ) -> CallRecord:
        return CallRecord("planner", "plan", "openai", model, *tokens, latency_s=0.1, cache_hit=hit)

    records = [
        call("gpt-4o", (1000, 100, 200)),
        call("gpt-4o", (500, 50, 0)),
        call("gpt-4o", (9999, 999, 0), hit=True),
    ]
    summary = summarize(group_records(records), shipped, items=2)
    expected = ((800 * 2.5 + 200 * 1.25 + 100 * 10) + (500 * 2.5 + 50 * 10)) / 1e6
    assert summary["cost_usd"] == pytest.approx(expected)
    assert summary["cost_per_item_usd"] == pytest.approx(expected / 2)
    assert (summary["calls"], summary["cache_hits"], summary["input_tokens"]) == (2, 1, 1500)
    unknown = summarize(group_records([*records, call("llava-13b", (10, 1, 0))]), shipped)
    assert unknown["cost_usd"] is None and unknown["unpriced_models"] == ["llava-13b"]
    assert "cost unknown (no price for llava-13b)" in describe(unknown)
    unmetered = summarize(group_records([call("gpt-4o", (None, None, None))]), shipped)
    assert unmetered["cost_usd"] is None

    own = tmp_path / "prices.yaml"
    own.write_text("models:\n  llava-13b: {input: 0, output: 0}\n", encoding="utf-8")
    free = summarize(group_records([call("llava-13b", (10, 1, 0))]), PriceTable.load(own))
    assert free["cost_usd"] == 0.0


def batch_call(
    backend: str, model: str, batch: str | None, endpoint: str | None = None
) -> CallRecord:
    return CallRecord(
        "planner",
        "plan",
        backend,
        model,
        1000,
        50,
        400,
        latency_s=0.1,
        cache_hit=False,
        endpoint=endpoint,
        batch=batch,
    )


@pytest.mark.parametrize(
    ("backend", "model", "endpoint"),
    [
        ("openai", "gpt-4o", "api.openai.com"),
        ("anthropic", "claude-sonnet-4-5", "api.anthropic.com"),
        ("anthropic", "claude-haiku-4-5-20251001", None),
    ],
)
def test_a_batch_call_costs_half_the_same_online_call(
    backend: str, model: str, endpoint: str | None
) -> None:
    shipped = PriceTable.load()
    assert shipped.batch_discount == {"openai": 0.5, "anthropic": 0.5}
    online = summarize(group_records([batch_call(backend, model, None, endpoint)]), shipped)
    batched = summarize(group_records([batch_call(backend, model, "batch_abc", endpoint)]), shipped)
    price = shipped.price_for(model)
    assert price is not None
    assert online["cost_usd"] == price.cost(1000, 50, 400) > 0
    assert batched["cost_usd"] == online["cost_usd"] * 0.5  # exactly, not approximately
    assert (online["batch_calls"], batched["batch_calls"]) == (0, 1)
    assert shipped.cost(backend, model, endpoint, 1000, 50, 400, batch=True) == (
        price.cost(1000, 50, 400) * 0.5
    )


def test_batch_and_online_calls_of_one_model_are_summed_apart_and_priced_apart() -> None:
    shipped = PriceTable.load()
    records = [
        batch_call("openai", "gpt-4o", None),
        batch_call("openai", "gpt-4o", "batch_1"),
        batch_call("openai", "gpt-4o", "batch_2"),
    ]
    usages = group_records(records)
    assert [(usage.calls, usage.batch) for usage in usages] == [(1, False), (2, True)]
    one = Price(2.50, 10.00, 1.25).cost(1000, 50, 400)
    summary = summarize(usages, shipped)
    assert summary["cost_usd"] == pytest.approx(one + 2 * one * 0.5)
    assert describe(summary).startswith("3 VLM calls (2 in batches, at the batch price), 0 cache")
    summary["unused_batch_answers"] = 1  # a cancelled job's run never took one of them
    assert describe(summary).startswith(
        "3 VLM calls (2 in batches, at the batch price; 1 answered for runs that ended without "
        "them, billed all the same), 0 cache"
    )


def test_a_provider_missing_from_batch_discount_makes_batch_cost_unknown(tmp_path: Path) -> None:
    own = tmp_path / "prices.yaml"
    own.write_text(
        "models:\n  gpt-4o: {input: 2.5, output: 10, cached_input: 1.25}\n"
        "  claude-sonnet-4-5: {input: 3, output: 15, cached_input: 0.3}\n"
        "batch_discount:\n  openai: 0.5\n",
        encoding="utf-8",
    )
    table = PriceTable.load(own)
    assert table.batch_factor("anthropic") is None and table.batch_factor("openai") == 0.5
    assert table.cost("anthropic", "claude-sonnet-4-5", None, 1000, 50, 400, batch=True) is None
    summary = summarize(
        group_records(
            [
                batch_call("anthropic", "claude-sonnet-4-5", "msgbatch_1"),
                batch_call("openai", "gpt-4o", "batch_1"),
            ]
        ),
        table,
    )
    assert summary["cost_usd"] is None  # not the online price of the anthropic call
    assert summary["unpriced_models"] == ["claude-sonnet-4-5 in batch"]
    assert "cost unknown (no price for claude-sonnet-4-5 in batch)" in describe(summary)
    online = summarize(group_records([batch_call("anthropic", "claude-sonnet-4-5", None)]), table)
    assert online["cost_usd"] == pytest.approx((600 * 3 + 400 * 0.3 + 50 * 15) / 1e6)
    # A provider's discount does not reach a batch sent to another server: that is its host's.
    local = batch_call("openai", "gpt-4o", "batch_1", endpoint="localhost:8000")
    assert summarize(group_records([local]), table)["cost_usd"] is None


def test_a_users_prices_file_overrides_the_batch_discount(tmp_path: Path) -> None:
    own = tmp_path / "prices.yaml"
    own.write_text(
        "models:\n  gpt-4o: {input: 2.5, output: 10, cached_input: 1.25}\n"
        "endpoints:\n  localhost:8000:\n    '*': {input: 1, output: 2}\n"
        "batch_discount:\n  OpenAI: 0.25\n  localhost:8000: 0.75\n",
        encoding="utf-8",
    )
    table = PriceTable.load(own)
    online = Price(2.50, 10.00, 1.25).cost(1000, 50, 400)
    batched = summarize(group_records([batch_call("openai", "gpt-4o", "batch_1")]), table)
    assert batched["cost_usd"] == online * 0.25
    local = summarize(group_records([batch_call("openai", "gpt-4o", "b", "localhost:8000")]), table)
    assert local["cost_usd"] == Price(1, 2, 1).cost(1000, 50, 400) * 0.75
    negative = tmp_path / "negative.yaml"
    negative.write_text("batch_discount:\n  openai: -0.5\n", encoding="utf-8")
    with pytest.raises(VLMError, match="batch_discount below 0 for openai"):
        PriceTable.load(negative)
