"""A server that echoes the request path and the Authorization header: no secret survives.

Real SDKs against the local fake server: a base URL's query goes to ``default_query`` (the
request path stays right and the key reaches the server), a password in the base URL becomes a
``Basic`` header, and whatever the server echoes back is masked before it leaves the client.
"""

from __future__ import annotations

import base64
import logging
import traceback
from collections.abc import Iterator
from typing import Any

import pytest

from agentic_iqa.redact import RedactingFilter, redact
from agentic_iqa.vlm import BackendConfig, VLMError, VLMRequest, create_client
from agentic_iqa.vlm.base import VLMConfigurationError
from agentic_iqa.vlm.settings import load_backend_configs

from .fake_servers import FakeAPIServer, Recorded, Reply, anthropic_error, openai_error

KEY_ENV = "FAKE_ECHO_KEY"
KEY = "sk-echo-SECRET-4242"
QUERY_KEY = "QUERYKEY-98765"
PASSWORD = "pa55w0rd-echo"


def _echo(request: Recorded) -> Reply:
    """401 quoting the path and the Authorization header, as careless servers do."""
    headers = request.headers
    message = (
        f"denied {request.path} with Authorization: {headers.get('authorization')} "
        f"x-api-key {headers.get('x-api-key')}"
    )
    if request.path.startswith("/v1/messages"):
        return Reply(401, anthropic_error(message, "authentication_error"))
    return Reply(401, openai_error(message, "invalid_request_error"))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAPIServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeAPIServer(_echo) as running:
        yield running


def _client(backend: str, base_url: str) -> Any:
    config = BackendConfig(
        backend=backend,
        model="m-test",
        base_url=base_url,
        api_key_env=KEY_ENV,
        timeout=5,
        max_retries=0,
    )
    return create_client("planner", {"planner": config})


def _secrets() -> list[str]:
    basic = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    return [KEY, QUERY_KEY, PASSWORD, basic]


@pytest.mark.parametrize(
    ("backend", "path", "wanted"),
    [
        ("openai", "/v1", "/v1/chat/completions"),
        ("anthropic", "", "/v1/messages"),
    ],
)
def test_query_key_goes_to_default_query_and_echo_is_masked(
    server: FakeAPIServer, caplog: pytest.LogCaptureFixture, backend: str, path: str, wanted: str
) -> None:
    host = server.url.removeprefix("http://")
    client = _client(backend, f"http://user:{PASSWORD}@{host}{path}?key={QUERY_KEY}")
    caplog.handler.addFilter(RedactingFilter())  # as every handler of the CLI and workers has
    caplog.set_level(logging.DEBUG)
    with pytest.raises(VLMError) as caught:
        client.complete(VLMRequest(task="plan", system="s", user="u"))
    client.close()

    seen = server.requests[0]
    assert seen.path == f"{wanted}?key={QUERY_KEY}"  # not /v1/?key=...chat/completions
    shown = [
        str(caught.value),
        repr(caught.value),
        "".join(traceback.format_exception(caught.value)),
        caplog.text,
    ]
    leaked = [secret for secret in _secrets() for text in shown if secret in text]
    assert not leaked
    assert "?key=***" in str(caught.value)


@pytest.mark.parametrize(
    "base_url",
    [
        "ftp://h/v1",
        "h/v1",
        "http:///v1",
        "http://h:99999/v1",
        "http://h/v1#frag",
    ],
)
def test_unusable_base_url_is_one_configuration_error(
    base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTIC_IQA_VLM_BASE_URL", base_url)
    with pytest.raises(VLMConfigurationError) as caught:
        load_backend_configs(overrides={"backend": "openai", "model": "m"})
    assert "base_url" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("denied /v1/?key=K3yValue99chat/completions", "K3yValue99"),
        ("GET /v1/models?alt=json&sig=ZZZsignature1 failed", "ZZZsignature1"),
        ('{"headers": {"Authorization": "Basic dXNlcjpodW50ZXIy"}}', "dXNlcjpodW50ZXIy"),
        ("'authorization': 'Token tok-abcdef123'", "tok-abcdef123"),
        (
            'Authorization: Digest username="bob", response="6629fae49393a05397450978507c4ef1"',
            "6629fae49393a05397450978507c4ef1",
        ),
        ("retry with Basic dXNlcjpodW50ZXIy please", "dXNlcjpodW50ZXIy"),
        ("proxy-authorization=ApiKey abc123def456", "abc123def456"),
    ],
)
def test_echoed_credentials_of_any_shape_are_masked(text: str, secret: str) -> None:
    assert secret not in (redact(text) or "")


def test_basic_prose_and_plain_questions_survive() -> None:
    for text in ("basic quality is fine", "Is it blurry? a=1 is not a query", "Token limit hit"):
        assert redact(text) == text
