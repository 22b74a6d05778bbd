"""Token usage as the SDKs report it, recorded per call, and priced."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_iqa.vlm import BackendConfig, VLMRequest, create_client
from agentic_iqa.vlm.base import Usage
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
    config = BackendConfig(backend=backend, model=model, base_url=url, timeout=5,
                           max_retries=0, api_key_env="TEST_USAGE_KEY", temperature=0.7)
    return create_client(role, {role: config})  # type: ignore[arg-type]


def test_openai_usage_with_cached_prompt_tokens_is_recorded() -> None:
    usage = {"prompt_tokens": 1200, "completion_tokens": 80, "total_tokens": 1280,
             "prompt_tokens_details": {"cached_tokens": 1024}}
    body = openai_completion('{"a": 1}', model="gpt-4o-2024-08-06", usage=usage)
    with FakeAPIServer(lambda _r: Reply(200, body)) as server, collect_calls() as calls:
        response = client("openai", f"{server.url}/v1", "gpt-4o").complete(REQUEST)
    assert response.usage == Usage(1200, 80, 1024)
    (record,) = calls.records
    assert (record.role, record.task, record.backend, record.model) == (
        "summarizer", "answer", "openai", "gpt-4o-2024-08-06")
    assert (record.input_tokens, record.output_tokens, record.cached_tokens) == (1200, 80, 1024)
    assert record.cache_hit is False and record.latency_s > 0


def test_openai_without_usage_reports_none() -> None:
    body = openai_completion('{"a": 1}')
    del body["usage"]
    with FakeAPIServer(lambda _r: Reply(200, body)) as server:
        response = client("openai", f"{server.url}/v1", "gpt-4o").complete(REQUEST)
    assert response.usage is None


def test_anthropic_usage_counts_cache_reads_as_input() -> None:
    usage = {"input_tokens": 300, "output_tokens": 40, "cache_read_input_tokens": 2000,
             "cache_creation_input_tokens": 100}
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

    def call(model: str, tokens: tuple[int | None, int | None, int | None], hit: bool = False
             ) -> CallRecord:
        return CallRecord("planner", "plan", "openai", model, *tokens, latency_s=0.1,
                          cache_hit=hit)

    records = [call("gpt-4o", (1000, 100, 200)), call("gpt-4o", (500, 50, 0)),
               call("gpt-4o", (9999, 999, 0), hit=True)]
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
