"""Every model call has a total deadline and a byte cap, against real servers and the real SDKs.

The servers (:mod:`.hostile_servers`) send a valid answer one byte at a time, or one far larger
than any answer: the SDKs' per-read timeout lets the first run for minutes and reads the second
whole into memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentic_iqa.vlm.anthropic import AnthropicClient
from agentic_iqa.vlm.base import FatalVLMError, TransientVLMError, VLMError, VLMRequest
from agentic_iqa.vlm.deadline import StepOverrun, response_cap, step_deadline
from agentic_iqa.vlm.openai import OpenAIClient
from agentic_iqa.vlm.settings import BackendConfig
from tests.agentic_iqa.vlm.hostile_servers import HostileServer, Protocol
from tests.conftest import REPO

KEY = "sk-test-hostile-server-key"
REQUEST = VLMRequest(task="answer", system="You judge images.", user="Rate it.")
PROTOCOLS = ("openai", "anthropic")


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


def client_for(server: HostileServer, **fields: Any) -> OpenAIClient | AnthropicClient:
    config = BackendConfig(
        backend=server.protocol, model="hostile-vl", base_url=server.url, **fields
    )
    return OpenAIClient(config) if server.protocol == "openai" else AnthropicClient(config)


def ended_within(seconds: float, call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    """Run ``call`` in a thread; fail unless it ends within ``seconds``.  Returns how long it
    took and what it raised."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"the call still ran after {seconds} s"
    return time.monotonic() - started, outcome[0]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_dripping_answer_ends_at_the_deadline_with_a_clear_error(protocol: Protocol) -> None:
    """One byte every 0.5 s: each read is quick, so a per-read timeout never fires."""
    with HostileServer(protocol, "drip", interval=0.5) as server:
        client = client_for(server, timeout=2, max_retries=0)
        elapsed, error = ended_within(10, lambda: client.complete(REQUEST))
    assert isinstance(error, TransientVLMError)  # retried like any timeout
    assert str(error).endswith("failed: model call exceeded its 2 s deadline"), error
    assert 1.9 <= elapsed < 3.0, elapsed
    assert server.requests == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_deadline_holds_while_a_read_still_waits(protocol: Protocol) -> None:
    """A byte every 1.5 s, deadline 2 s: the read waiting from 1.5 s to 3 s is cut at 2 s."""
    with HostileServer(protocol, "drip", interval=1.5) as server:
        client = client_for(server, timeout=2, max_retries=0)
        elapsed, error = ended_within(10, lambda: client.complete(REQUEST))
    assert isinstance(error, TransientVLMError) and "2 s deadline" in str(error)
    assert 1.9 <= elapsed < 2.9, elapsed  # not 3 s: the next byte


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_headers_sent_a_byte_at_a_time_are_cut_at_the_deadline(protocol: Protocol) -> None:
    with HostileServer(protocol, "drip-headers", interval=0.4) as server:
        client = client_for(server, timeout=2, max_retries=0)
        elapsed, error = ended_within(10, lambda: client.complete(REQUEST))
    assert isinstance(error, TransientVLMError) and "2 s deadline" in str(error), error
    assert 1.9 <= elapsed < 2.9, elapsed


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_each_sdk_retry_gets_a_deadline_of_its_own(protocol: Protocol) -> None:
    with HostileServer(protocol, "drip", interval=0.3) as server:
        client = client_for(server, timeout=1, max_retries=1)
        elapsed, error = ended_within(15, lambda: client.complete(REQUEST))
    assert isinstance(error, TransientVLMError) and "1 s deadline" in str(error)
    assert server.requests == 2
    assert 2.0 <= elapsed < 5.0, elapsed  # two attempts and the SDK's backoff between


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", ["huge", "huge-length"])
def test_an_answer_past_its_cap_is_refused_while_read(protocol: Protocol, mode: str) -> None:
    """200 MB, chunked or with its length announced: refused at the cap, never retried."""
    with HostileServer(protocol, mode, size=200 * 1024 * 1024) as server:  # type: ignore[arg-type]
        client = client_for(server, max_retries=2, max_response_bytes=1024 * 1024)
        elapsed, error = ended_within(30, lambda: client.complete(REQUEST))
    assert type(error) is VLMError  # neither transient (the item fails) nor fatal (the job goes on)
    assert "the model's answer exceeded its cap of 1,048,576 bytes" in str(error), error
    assert "max_response_bytes" in str(error)
    assert server.requests == 1  # the SDK's retries got the same refusal without asking again
    assert elapsed < 10, elapsed


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_cap_follows_the_requests_max_tokens(protocol: Protocol) -> None:
    """A 1 MB answer: refused at max_tokens 16 (cap 128 KiB), taken at 4096 (16 MiB)."""
    size = 1024 * 1024
    assert response_cap(16, 16 * 1024 * 1024) == 128 * 1024
    with HostileServer(protocol, "huge", size=size) as server:
        small = client_for(server, max_tokens=16, max_retries=0)
        with pytest.raises(VLMError, match=r"cap of 131,072 bytes .*max_tokens 16\b"):
            small.complete(REQUEST)
        answer = client_for(server, max_tokens=4096, max_retries=0).complete(REQUEST)
    assert len(answer.text) == size


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_steps_deadline_ends_a_call_with_the_steps_error(protocol: Protocol) -> None:
    """A step with 1.5 s left, a call allowed 30 s: the call ends at 1.5 s with the step's own
    error, and the SDK's retries never run (a step's limit is not a timeout)."""
    with HostileServer(protocol, "drip", interval=0.5) as server:
        client = client_for(server, timeout=30, max_retries=2)

        def step() -> None:
            with step_deadline(1.5, lambda: StepOverrun("the step ran past its 1.5 s")):
                try:
                    client.complete(REQUEST)
                finally:
                    # Every later call of the step fails at once, without a request.
                    with pytest.raises(StepOverrun):
                        client.complete(REQUEST)

        elapsed, error = ended_within(10, step)
    assert isinstance(error, StepOverrun) and str(error) == "the step ran past its 1.5 s"
    assert not isinstance(error, VLMError | FatalVLMError)
    assert 1.4 <= elapsed < 2.3, elapsed
    assert server.requests == 1


RSS_PROBE = """
import json, os, resource, sys
from agentic_iqa.vlm.base import VLMError, VLMRequest
from agentic_iqa.vlm.openai import OpenAIClient
from agentic_iqa.vlm.settings import BackendConfig
from tests.agentic_iqa.vlm.hostile_servers import HostileServer

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

with HostileServer("openai", "huge", size=int(sys.argv[1])) as server:
    client = OpenAIClient(BackendConfig(backend="openai", model="m", base_url=server.url))
    request = VLMRequest(task="answer", system="s", user="u")
    before = peak_mb()
    try:
        client.complete(request)
        outcome = "accepted"
    except VLMError as exc:
        outcome = str(exc)
    print(json.dumps({"before_mb": before, "after_mb": peak_mb(), "outcome": outcome}))
"""


@pytest.mark.slow
def test_a_200_mb_answer_keeps_memory_bounded() -> None:
    """Peak RSS of a process asked a 200 MB answer (the server makes it as it sends it)."""
    probe = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, str(200 * 1024 * 1024)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "OPENAI_API_KEY": KEY},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    measured = json.loads(probe.stdout.strip().splitlines()[-1])
    assert "exceeded its cap of 16,777,216 bytes" in measured["outcome"], measured
    # Default cap 16 MiB: the body, its joined copy and the error at most; not 200 MB.
    assert measured["after_mb"] - measured["before_mb"] < 80, measured
