"""AnthropicClient against a local server speaking the Messages API wire protocol."""

from __future__ import annotations

import base64
import io
import json
import logging
import math
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from agentic_iqa.vlm import BackendConfig, VLMError, VLMRequest, create_client
from agentic_iqa.vlm.anthropic import AnthropicClient, options_from_reply

from .fake_servers import (
    FakeAPIServer,
    Reply,
    anthropic_error,
    anthropic_message,
    fast_retry,
)

KEY_ENV = "FAKE_ANTHROPIC_KEY"
KEY = "sk-ant-test-SECRET-123"
OPTIONS = ("A", "B", "C", "D", "E")


@pytest.fixture
def server() -> Iterator[FakeAPIServer]:
    with FakeAPIServer(lambda _request: Reply(200, anthropic_message('{"ok": true}'))) as running:
        yield running


@pytest.fixture
def make_client(
    server: FakeAPIServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., AnthropicClient]]:
    monkeypatch.setenv(KEY_ENV, KEY)
    created: list[AnthropicClient] = []

    def make(**overrides: Any) -> AnthropicClient:
        values: dict[str, Any] = {
            "backend": "anthropic",
            "model": "claude-test",
            "base_url": server.url,
            "api_key_env": KEY_ENV,
            "timeout": 5,
            "max_retries": 2,
            "max_image_side": 300,
        }
        values.update(overrides)
        client = create_client("summarizer", {"summarizer": BackendConfig(**values)})
        assert isinstance(client, AnthropicClient)
        created.append(client)
        return client

    yield make
    for client in created:
        client.close()


def request(**overrides: Any) -> VLMRequest:
    values: dict[str, Any] = {"task": "answer", "system": "You judge quality.", "user": "Rate it."}
    values.update(overrides)
    return VLMRequest(**values)


def credentials(headers: dict[str, str]) -> str:
    """SDK 2.x sends the key as ``Authorization: Bearer``; 0.x sent ``x-api-key``."""
    return headers.get("authorization", "") + headers.get("x-api-key", "")


def test_sends_system_model_and_base64_image_block(
    server: FakeAPIServer, make_client: Callable[..., AnthropicClient], tmp_path: Path
) -> None:
    photo = tmp_path / "photo.jpg"
    Image.fromarray(np.full((1000, 3000, 3), 90, dtype=np.uint8)).save(photo)

    response = make_client().complete(request(images=(photo,)))

    assert response.text == '{"ok": true}'
    assert response.model == "claude-test"
    assert response.option_logprobs is None
    [sent] = server.requests
    assert sent.path == "/v1/messages"
    assert KEY in credentials(sent.headers)
    assert "anthropic-version" in sent.headers
    body = sent.body
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 4096
    assert "temperature" not in body  # API version 2026-10-21 rejects sampling parameters
    assert body["system"].startswith("You judge quality.")
    assert "JSON" in body["system"]
    [message] = body["messages"]
    assert message["role"] == "user"
    image_block, text_block = message["content"]
    assert text_block == {"type": "text", "text": "Rate it."}
    source = image_block["source"]
    assert (image_block["type"], source["type"], source["media_type"]) == (
        "image",
        "base64",
        "image/jpeg",
    )
    assert Image.open(io.BytesIO(base64.b64decode(source["data"]))).size == (300, 100)


def test_plain_text_request_gets_no_json_instruction(
    server: FakeAPIServer, make_client: Callable[..., AnthropicClient]
) -> None:
    server.enqueue(Reply(200, anthropic_message("It is sharp.")))

    response = make_client().complete(request(json_output=False))

    assert response.text == "It is sharp."
    assert server.requests[0].body["system"] == "You judge quality."
    make_client().complete(request(system="", json_output=False))
    assert "system" not in server.requests[1].body


def test_self_reported_probabilities_become_normalised_logprobs(
    server: FakeAPIServer, make_client: Callable[..., AnthropicClient]
) -> None:
    reply = {"answer": "B", "option_probabilities": {"A": 0.2, "B": 1.2, "c": 0.4, "D": 0.2}}
    server.enqueue(Reply(200, anthropic_message(f"```json\n{json.dumps(reply)}\n```")))

    response = make_client().complete(
        request(task="quality_levels", json_output=False, answer_options=OPTIONS)
    )

    assert response.probability_source == "self-reported"
    assert response.text == "B"
    logprobs = response.option_logprobs
    assert logprobs is not None
    assert logprobs["E"] == -math.inf
    assert {k: round(math.exp(v), 6) for k, v in logprobs.items()} == {
        "A": 0.1,
        "B": 0.6,
        "C": 0.2,
        "D": 0.1,
        "E": 0.0,
    }
    system = server.requests[0].body["system"]
    assert "option_probabilities" in system
    assert "A, B, C, D, E" in system


def test_json_answers_keep_their_text(
    server: FakeAPIServer, make_client: Callable[..., AnthropicClient]
) -> None:
    text = '{"final_answer": "C", "answer": "C", "option_probabilities": {"C": 1}}'
    server.enqueue(Reply(200, anthropic_message(text)))

    response = make_client().complete(request(answer_options=("A", "B", "C")))

    assert response.text == text
    assert response.option_logprobs == {"A": -math.inf, "B": -math.inf, "C": 0.0}
    assert "Put these keys in the JSON object" in server.requests[0].body["system"]


@pytest.mark.parametrize(
    ("reply", "letter"),
    [
        ("The answer is C.", "C"),
        ('{"answer": "D", "option_probabilities": {"A": 0.1,', "D"),
        ('{"answer": "(A)", "option_probabilities": "unsure"}', "A"),
        ("E", "E"),
    ],
)
def test_unparseable_probabilities_fall_back_to_the_answered_letter(
    server: FakeAPIServer, make_client: Callable[..., AnthropicClient], reply: str, letter: str
) -> None:
    server.enqueue(Reply(200, anthropic_message(reply)))

    response = make_client().complete(request(json_output=False, answer_options=OPTIONS))

    assert response.probability_source == "argmax"
    assert response.text == letter
    assert response.option_logprobs == {o: 0.0 if o == letter else -math.inf for o in OPTIONS}


def test_no_letter_at_all_gives_none() -> None:
    assert options_from_reply("A hard call: B or C.", OPTIONS) == (None, None, None)
    assert options_from_reply("I cannot tell.", OPTIONS) == (None, None, None)
    # The article is not option A, however the reply is worded.
    assert options_from_reply("A good image overall.", OPTIONS) == (None, None, None)
    assert options_from_reply("This is a sharp photo.", OPTIONS) == (None, None, None)


def test_options_standing_as_options_are_read() -> None:
    for reply in ("Answer: C", "(C)", "C.", "**C**", "The answer is C."):
        assert options_from_reply(reply, OPTIONS)[1:] == ("argmax", "C"), reply


def test_invalid_probability_values_fall_back() -> None:
    reply = '{"answer": "B", "option_probabilities": {"A": "high", "B": 0.9}}'
    logprobs, source, answer = options_from_reply(reply, ("A", "B"))
    assert (source, answer) == ("argmax", "B")
    assert logprobs == {"A": -math.inf, "B": 0.0}


def test_sdk_retries_429_and_500_then_succeeds(
    server: FakeAPIServer, make_client: Callable[..., AnthropicClient]
) -> None:
    server.enqueue(
        fast_retry(429, anthropic_error("slow down", "rate_limit_error")),
        fast_retry(529, anthropic_error("busy", "overloaded_error")),
        Reply(200, anthropic_message('{"done": 1}')),
    )

    response = make_client(max_retries=3).complete(request())

    assert response.text == '{"done": 1}'
    assert len(server.requests) == 3


def test_permanent_server_error_becomes_vlm_error(
    server: FakeAPIServer, make_client: Callable[..., AnthropicClient]
) -> None:
    server.enqueue(*[fast_retry(500, anthropic_error("backend down"))] * 3)

    with pytest.raises(VLMError, match="HTTP 500.*backend down"):
        make_client(max_retries=2).complete(request())

    assert len(server.requests) == 3


def test_invalid_json_is_returned_as_is_for_the_agent_to_retry(
    server: FakeAPIServer, make_client: Callable[..., AnthropicClient]
) -> None:
    server.enqueue(
        Reply(200, anthropic_message("Sure! {broken")),
        Reply(200, anthropic_message('{"fixed": true}')),
    )
    client = make_client()

    assert client.complete(request()).text == "Sure! {broken"
    assert client.complete(request()).text == '{"fixed": true}'


@pytest.mark.parametrize("status", [500, 401])
def test_api_key_never_leaks_into_errors_or_logs(
    server: FakeAPIServer,
    make_client: Callable[..., AnthropicClient],
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    echo = anthropic_error(f"invalid x-api-key: {KEY}", "authentication_error")
    server.enqueue(*[fast_retry(status, echo)] * 3)
    for name in ("", "anthropic", "httpx", "httpx2", "httpcore", "httpcore2"):
        caplog.set_level(logging.DEBUG, logger=name)

    with pytest.raises(VLMError) as caught:
        make_client(max_retries=2).complete(request())

    assert all(KEY in credentials(r.headers) for r in server.requests)
    assert len(server.requests) == (3 if status == 500 else 1)
    shown = [
        str(caught.value),
        repr(caught.value),
        "".join(traceback.format_exception(caught.value)),
        caplog.text,
        *(record.getMessage() for record in caplog.records),
    ]
    assert caught.value.__cause__ is None
    assert any(record.name.startswith("anthropic") for record in caplog.records)
    assert not [text for text in shown if KEY in text]
    assert "invalid x-api-key: ***" in str(caught.value)
