"""OpenAIClient against a local server speaking the chat-completions wire protocol."""

from __future__ import annotations

import base64
import io
import logging
import math
import socket
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from agentic_iqa.vlm import BackendConfig, VLMError, VLMRequest, create_client
from agentic_iqa.vlm.images import ImageEncodingError
from agentic_iqa.vlm.openai import OpenAIClient, option_logprobs_from_tokens

from .fake_servers import FakeAPIServer, Reply, fast_retry, openai_completion, openai_error

KEY_ENV = "FAKE_OPENAI_KEY"
KEY = "sk-test-SECRET-123"
OPTIONS = ("A", "B", "C", "D", "E")


@pytest.fixture
def server() -> Iterator[FakeAPIServer]:
    with FakeAPIServer(lambda _request: Reply(200, openai_completion('{"ok": true}'))) as running:
        yield running


@pytest.fixture
def make_client(
    server: FakeAPIServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., OpenAIClient]]:
    monkeypatch.setenv(KEY_ENV, KEY)
    created: list[OpenAIClient] = []

    def make(**overrides: Any) -> OpenAIClient:
        values: dict[str, Any] = {
            "backend": "openai",
            "model": "gpt-test",
            "base_url": f"{server.url}/v1",
            "api_key_env": KEY_ENV,
            "timeout": 5,
            "max_retries": 2,
            "max_image_side": 256,
        }
        values.update(overrides)
        client = create_client("planner", {"planner": BackendConfig(**values)})
        assert isinstance(client, OpenAIClient)
        created.append(client)
        return client

    yield make
    for client in created:
        client.close()


@pytest.fixture
def wide_image(tmp_path: Path) -> Path:
    path = tmp_path / "wide.png"
    Image.fromarray(np.full((1000, 3000, 3), 128, dtype=np.uint8)).save(path)
    return path


def request(**overrides: Any) -> VLMRequest:
    values: dict[str, Any] = {"task": "plan", "system": "You plan IQA.", "user": "Is it blurry?"}
    values.update(overrides)
    return VLMRequest(**values)


def test_sends_model_messages_image_and_json_mode(
    server: FakeAPIServer, make_client: Callable[..., OpenAIClient], wide_image: Path
) -> None:
    response = make_client().complete(request(images=(wide_image,)))

    assert response.text == '{"ok": true}'
    assert response.model == "gpt-test"
    assert response.option_logprobs is None
    [sent] = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    body = sent.body
    assert body["model"] == "gpt-test"
    assert body["temperature"] == 0.0
    assert body["response_format"] == {"type": "json_object"}
    assert "logprobs" not in body
    assert body["max_tokens"] == 4096  # OpenAI-compatible server: the widely known parameter
    system, user = body["messages"]
    assert system["role"] == "system"
    assert system["content"].startswith("You plan IQA.")
    assert "json" in system["content"].lower()  # JSON mode needs the word in the messages
    image_part, text_part = user["content"]
    assert text_part == {"type": "text", "text": "Is it blurry?"}
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert image.size == (256, 85)


def test_plain_text_request_has_no_response_format(
    server: FakeAPIServer, make_client: Callable[..., OpenAIClient]
) -> None:
    make_client(temperature=None).complete(request(json_output=False))

    body = server.requests[0].body
    assert "response_format" not in body
    assert "temperature" not in body
    assert body["messages"][0]["content"] == "You plan IQA."


def test_official_endpoint_gets_max_completion_tokens(
    server: FakeAPIServer, make_client: Callable[..., OpenAIClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    # With base_url null the SDK itself honours OPENAI_BASE_URL: used here to reach the fake.
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")

    make_client(base_url=None).complete(request())

    body = server.requests[0].body
    assert body["max_completion_tokens"] == 4096
    assert "max_tokens" not in body


def test_answer_options_use_first_token_top_logprobs(
    server: FakeAPIServer, make_client: Callable[..., OpenAIClient]
) -> None:
    top = [(" A", -0.4), ("a", -0.1), ("B", -2.0), ("(C", -3.0), ("The", -4.0), ("D", -9999.0)]
    server.enqueue(Reply(200, openai_completion(" A", top_logprobs=top)))

    response = make_client().complete(
        request(task="quality_levels", json_output=False, answer_options=OPTIONS)
    )

    assert response.text == " A"
    assert response.probability_source == "logprobs"
    # " A" and "(C" are the letters; the lower-case "a" is the article, never option A
    assert response.option_logprobs == {
        "A": -0.4,
        "B": -2.0,
        "C": -3.0,
        "D": -math.inf,
        "E": -math.inf,
    }
    body = server.requests[0].body
    assert body["logprobs"] is True
    assert body["top_logprobs"] == 20
    assert body["max_tokens"] <= 16
    assert "response_format" not in body


def test_server_without_logprobs_gives_none(
    server: FakeAPIServer, make_client: Callable[..., OpenAIClient]
) -> None:
    server.enqueue(Reply(200, openai_completion("B")))

    response = make_client().complete(request(json_output=False, answer_options=OPTIONS))

    assert response.text == "B"
    assert response.option_logprobs is None
    assert response.probability_source is None


def test_no_option_among_top_tokens_gives_none(
    server: FakeAPIServer, make_client: Callable[..., OpenAIClient]
) -> None:
    server.enqueue(Reply(200, openai_completion("The", top_logprobs=[("The", -0.1), ("It", -1)])))

    response = make_client().complete(request(json_output=False, answer_options=OPTIONS))

    assert response.option_logprobs is None


def _tokens(*pieces: tuple[str, list[tuple[str, float]]]) -> list[dict]:
    return [
        {
            "token": token,
            "logprob": top[0][1] if top else -0.01,
            "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top],
        }
        for token, top in pieces
    ]


def test_logprobs_are_read_where_the_answer_letter_stands() -> None:
    tokens = _tokens(
        ('{"', []),
        ("answer", []),
        ('":', []),
        (' "', []),
        ("B", [("B", -0.3), ("C", -1.5), (" b", -0.9)]),
        ('"}', []),
    )
    assert option_logprobs_from_tokens(tokens, ("A", "B", "C")) == {
        "A": -math.inf,
        "B": -0.3,
        "C": -1.5,
    }
    assert option_logprobs_from_tokens([], ("A",)) is None


@pytest.mark.parametrize(
    "pieces",
    [
        # "This image deserves a C": the article "a" is not option A
        [
            ("This", []),
            (" image", []),
            (" deserves", []),
            (" a", [(" a", -0.1), (" an", -2.5)]),
            (" C", [(" C", -0.2), (" B", -1.9), (" D", -3.0)]),
        ],
        # "I'd say C": the "d" of "I'd" is not option D
        [
            ("I", [("I", -0.1)]),
            ("'d", [("'d", -0.1), ("'ll", -3.0)]),
            (" say", []),
            (" C", [(" C", -0.2), (" B", -1.9), (" D", -3.0)]),
        ],
    ],
)
def test_a_letter_after_words_is_read_at_its_own_token(pieces) -> None:
    assert option_logprobs_from_tokens(_tokens(*pieces), ("A", "B", "C", "D", "E")) == {
        "A": -math.inf,
        "B": -1.9,
        "C": -0.2,
        "D": -3.0,
        "E": -math.inf,
    }


def test_no_letter_standing_in_the_answer_gives_none() -> None:
    tokens = _tokens(("It", [("It", -0.1), ("A", -2.0)]), (" is", []), (" good", []))
    assert option_logprobs_from_tokens(tokens, ("A", "B", "C", "D", "E")) is None


def test_sdk_retries_429_and_500_then_succeeds(
    server: FakeAPIServer, make_client: Callable[..., OpenAIClient]
) -> None:
    server.enqueue(
        fast_retry(429, openai_error("slow down", "rate_limit_error")),
        fast_retry(500, openai_error("oops")),
        Reply(200, openai_completion('{"plan": 1}')),
    )

    response = make_client(max_retries=3).complete(request())

    assert response.text == '{"plan": 1}'
    assert len(server.requests) == 3
    assert [r.body for r in server.requests[1:]] == [server.requests[0].body] * 2


def test_permanent_server_error_becomes_vlm_error(
    server: FakeAPIServer, make_client: Callable[..., OpenAIClient]
) -> None:
    server.enqueue(*[fast_retry(500, openai_error("backend down"))] * 3)

    with pytest.raises(VLMError, match="HTTP 500.*backend down"):
        make_client(max_retries=2).complete(request())

    assert len(server.requests) == 3


def test_client_errors_are_not_retried(
    server: FakeAPIServer, make_client: Callable[..., OpenAIClient]
) -> None:
    server.enqueue(Reply(400, openai_error("bad image", "invalid_request_error")))

    with pytest.raises(VLMError, match="HTTP 400.*bad image"):
        make_client().complete(request())

    assert len(server.requests) == 1


def test_unreachable_server_becomes_vlm_error(make_client: Callable[..., OpenAIClient]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    with pytest.raises(VLMError, match="failed"):
        make_client(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0).complete(request())


def test_invalid_json_is_returned_as_is_for_the_agent_to_retry(
    server: FakeAPIServer, make_client: Callable[..., OpenAIClient]
) -> None:
    server.enqueue(
        Reply(200, openai_completion('{"plan": ')),
        Reply(200, openai_completion('{"plan": "ok"}')),
    )
    client = make_client()

    assert client.complete(request()).text == '{"plan": '
    assert client.complete(request()).text == '{"plan": "ok"}'


def test_local_server_without_key_gets_a_placeholder(
    server: FakeAPIServer, make_client: Callable[..., OpenAIClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)

    make_client(api_key_env="NO_SUCH_KEY").complete(request())

    assert server.requests[0].headers["authorization"] == "Bearer not-needed"


@pytest.mark.parametrize("status", [500, 401])
def test_api_key_never_leaks_into_errors_or_logs(
    server: FakeAPIServer,
    make_client: Callable[..., OpenAIClient],
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    # Real APIs quote the (masked) key in 401 messages; this server quotes it whole.
    echo = openai_error(f"Incorrect API key provided: {KEY}", "invalid_request_error")
    server.enqueue(*[fast_retry(status, echo)] * 3)
    for name in ("", "openai", "httpx", "httpx2", "httpcore", "httpcore2"):
        caplog.set_level(logging.DEBUG, logger=name)

    with pytest.raises(VLMError) as caught:
        make_client(max_retries=2).complete(request())

    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in server.requests)
    assert len(server.requests) == (3 if status == 500 else 1)
    shown = [
        str(caught.value),
        repr(caught.value),
        "".join(traceback.format_exception(caught.value)),
        caplog.text,
        *(record.getMessage() for record in caplog.records),
    ]
    assert caught.value.__cause__ is None
    assert any(record.name.startswith("openai") for record in caplog.records)
    assert not [text for text in shown if KEY in text]
    assert "Incorrect API key provided: ***" in str(caught.value)


def test_unreadable_image_fails_before_any_request(
    server: FakeAPIServer, make_client: Callable[..., OpenAIClient], tmp_path: Path
) -> None:
    missing = tmp_path / "missing.png"

    with pytest.raises(ImageEncodingError, match="missing.png"):
        make_client().complete(request(images=(missing,)))

    assert server.requests == []


@pytest.mark.parametrize(
    "status, transient",
    [(429, True), (503, True), (408, True), (401, False), (400, False), (404, False)],
)
def test_errors_say_whether_a_later_retry_can_help(server, make_client, status, transient):
    from agentic_iqa.vlm.base import TransientVLMError

    server.enqueue(Reply(status, openai_error(f"status {status}")))
    client = make_client(max_retries=0)
    with pytest.raises(VLMError) as failure:
        client.complete(request())
    assert isinstance(failure.value, TransientVLMError) is transient
    assert str(status) in str(failure.value)
