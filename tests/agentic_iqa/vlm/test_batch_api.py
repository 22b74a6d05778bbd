"""The batch interfaces against a local server playing OpenAI's Batch API and Anthropic's
Message Batches, with the real SDKs: a batched request is the online request, and its answer
reads as the online answer."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agentic_iqa.prompts import PLANNER_SYSTEM, QUALITY_LEVELS_SYSTEM
from agentic_iqa.vlm import anthropic_batch, create_batch_api, openai_batch
from agentic_iqa.vlm.anthropic import AnthropicClient
from agentic_iqa.vlm.anthropic_batch import AnthropicBatchAPI
from agentic_iqa.vlm.base import FatalVLMError, VLMConfigurationError, VLMError, VLMRequest
from agentic_iqa.vlm.batch_api import BatchAPI, BatchLine, BatchState, encode_json
from agentic_iqa.vlm.openai import OpenAIClient
from agentic_iqa.vlm.openai_batch import OpenAIBatchAPI
from agentic_iqa.vlm.settings import BackendConfig
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Recorded, Reply, openai_error
from tests.conformance.batch_server import (
    EXPIRED_MESSAGE,
    FAIL_MESSAGE,
    REJECT_MESSAGE,
    BatchServer,
    digest,
    serve_batches,
)
from tests.conformance.simulated_model import Behaviour, SimulatedModel, Truth
from tests.conftest import natural_image

KEY_ENV = "FAKE_BATCH_KEY"
KEY = "sk-batch-SECRET-0042"
PROVIDERS = ("openai", "anthropic")
LEVELS = ("A", "B", "C", "D", "E")
ONLINE_PATH = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


class Clock:
    """A clock the test moves, for the server's ``delay``."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
def images(tmp_path: Path) -> list[Path]:
    paths = []
    for index in range(2):
        path = tmp_path / f"{index}.png"
        Image.fromarray(natural_image(index, (96, 64))).save(path)
        paths.append(path)
    return paths


def simulated(images: list[Path], provider: str) -> SimulatedModel:
    behaviour = Behaviour.CLEAN if provider == "openai" else Behaviour.ANTHROPIC
    model = SimulatedModel(behaviour, max_image_side=256)
    model.learn(images[0], Truth("Is it blurry?", level=4))
    model.learn(images[1], Truth("How noisy is it?", level=2, severity="slight"))
    return model


def requests(images: list[Path]) -> dict[str, VLMRequest]:
    """A plan and a five-level rating per image: JSON mode, images, answer options."""
    found: dict[str, VLMRequest] = {}
    for index, (image, query) in enumerate(
        zip(images, ("Is it blurry?", "How noisy is it?"), strict=True)
    ):
        found[f"plan-{index}"] = VLMRequest(
            "plan", PLANNER_SYSTEM, f"User's query: {query}", (image,)
        )
        found[f"levels-{index}"] = VLMRequest(
            "quality_levels",
            QUALITY_LEVELS_SYSTEM,
            f"User's query: {query}",
            (image,),
            json_output=False,
            answer_options=LEVELS,
        )
    return found


def config(provider: str, server: FakeAPIServer, **overrides: Any) -> BackendConfig:
    values: dict[str, Any] = {
        "backend": provider,
        "model": "gpt-sim" if provider == "openai" else "claude-sim",
        "base_url": f"{server.url}/v1" if provider == "openai" else server.url,
        "api_key_env": KEY_ENV,
        "timeout": 5,
        "max_retries": 0,
        "max_image_side": 256,
    }
    values.update(overrides)
    return BackendConfig(**values)


@pytest.fixture
def batches() -> Iterator[Callable[..., tuple[FakeAPIServer, BatchServer]]]:
    """Start a batch server around a responder; stopped after the test."""
    started: list[FakeAPIServer] = []

    def start(
        online: Callable[[Recorded], Reply], **options: Any
    ) -> tuple[FakeAPIServer, BatchServer]:
        server, batch_server = serve_batches(online, **options)
        started.append(server.__enter__())
        return server, batch_server

    yield start
    for server in started:
        server.__exit__(None, None, None)


@pytest.fixture
def apis() -> Iterator[Callable[[BackendConfig], BatchAPI]]:
    made: list[BatchAPI] = []

    def make(settings: BackendConfig) -> BatchAPI:
        made.append(create_batch_api(settings))
        return made[-1]

    yield make
    for api in made:
        api.close()


def lines_of(wanted: dict[str, VLMRequest]) -> list[BatchLine]:
    return [BatchLine(custom_id, request) for custom_id, request in wanted.items()]


def until_ended(api: BatchAPI, state: BatchState) -> BatchState:
    for _ in range(10):
        if state.ended:
            return state
        state = api.retrieve(state.provider_id)
    raise AssertionError(f"batch never ended: {state}")


def echo(request: Recorded) -> Reply:
    """A deterministic responder for any body: it answers with the body's digest."""
    body = request.body if isinstance(request.body, dict) else {}
    text = json.dumps({"digest": digest(body)[:12]})
    if request.path.endswith("/messages"):
        return Reply(
            200,
            {
                "id": "msg_e",
                "type": "message",
                "role": "assistant",
                "model": body.get("model"),
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 7, "output_tokens": 3},
            },
        )
    return Reply(
        200,
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "logprobs": None,
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        },
    )


def small(count: int) -> dict[str, VLMRequest]:
    return {
        f"r{index}": VLMRequest("plan", "Plan.", f"Question {index}?") for index in range(count)
    }


# -- the same request, the same answer -------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_batch_sends_the_online_bodies_and_reads_the_online_answers(
    provider: str, images: list[Path], batches: Any, apis: Any
) -> None:
    # The simulated model counts attempts (a question asked again is a retry): a fresh,
    # identical model answers the batch.
    models = [simulated(images, provider)]
    server, fake = batches(lambda request: models[-1](request), shuffle=7)
    settings = config(provider, server)
    wanted = requests(images)
    online_client = OpenAIClient(settings) if provider == "openai" else AnthropicClient(settings)
    online = {custom_id: online_client.complete(request) for custom_id, request in wanted.items()}
    online_client.close()
    online_bodies = [r for r in server.requests if r.path.endswith(ONLINE_PATH[provider])]
    models.append(simulated(images, provider))

    api = apis(settings)
    state = api.submit(lines_of(wanted), metadata={"job": "job-1"})
    assert state.status == ("validating" if provider == "openai" else "in_progress")
    assert state.ended is False
    ended = until_ended(api, state)
    got = list(api.results(state.provider_id, wanted))

    assert ended.status == ("completed" if provider == "openai" else "ended")
    assert ended.counts == {
        "total": 4,
        "succeeded": 4,
        "errored": 0,
        "expired": 0,
        "canceled": 0,
        "processing": 0,
    }
    assert sorted(result.custom_id for result in got) == sorted(wanted)
    for result in got:
        assert (result.kind, result.error) == ("succeeded", None)
        assert result.response == online[result.custom_id], result.custom_id
    levels = online["levels-0"]
    assert levels.text == "B" and levels.option_logprobs is not None
    assert max(levels.option_logprobs, key=levels.option_logprobs.__getitem__) == "B"
    assert levels.probability_source == ("logprobs" if provider == "openai" else "self-reported")
    # Byte for byte the online bodies, each answered (billed) once.
    assert sent_bodies(provider, server, fake, state.provider_id) == [
        (custom_id, online.raw) for custom_id, online in zip(wanted, online_bodies, strict=True)
    ]
    assert sorted(fake.billed) == sorted(zip(wanted, fake.online_billed, strict=True))


def sent_bodies(
    provider: str, server: FakeAPIServer, fake: BatchServer, batch_id: str
) -> list[tuple[str, bytes]]:
    """``(custom_id, body bytes)`` as the batch carried them: cut from the uploaded file's
    lines (OpenAI) or the create request (Anthropic), checking the wrapping around them."""
    if provider == "openai":
        rows = fake.files[fake.batches[batch_id].input_file_id].data  # type: ignore[index]
        found = re.findall(
            rb'^\{"custom_id":"([^"]+)","method":"POST","url":'
            rb'"/v1/chat/completions","body":(.*)\}$',
            rows,
            re.M,
        )
    else:
        create = next(r for r in server.requests if r.path == "/v1/messages/batches")
        assert create.raw.startswith(b'{"requests":[') and create.raw.endswith(b"]}")
        found = re.findall(
            rb'\{"custom_id":"([^"]+)","params":(.*?)\}(?=,\{"custom_id"|\]\}$)', create.raw
        )
    return [(custom_id.decode(), body) for custom_id, body in found]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_batch_is_in_progress_until_its_delay_and_then_answered_once(
    provider: str, batches: Any, apis: Any
) -> None:
    clock = Clock()
    server, fake = batches(echo, delay=3600, clock=clock)
    api = apis(config(provider, server))
    wanted = small(3)
    state = api.submit(lines_of(wanted), metadata={"job": "j"})

    polled = api.retrieve(state.provider_id)
    assert (polled.status, polled.ended) == ("in_progress", False)
    assert polled.counts["processing"] == 3 and polled.counts["succeeded"] == 0
    assert polled.expires_at == datetime.fromtimestamp(clock.now, UTC) + timedelta(hours=24)
    with pytest.raises(VLMError, match=r"has not ended \(status in_progress\)"):
        list(api.results(state.provider_id, wanted))
    assert fake.billed == []

    clock.now += 3600
    done = api.retrieve(state.provider_id)
    api.retrieve(state.provider_id)
    assert done.ended is True and done.counts["succeeded"] == 3
    got = {result.custom_id: result for result in api.results(state.provider_id, wanted)}
    assert (
        [got[i].response.text for i in wanted]
        == [  # type: ignore[union-attr]
            json.dumps({"digest": digest(body)[:12]})
            for _, body in fake.batches[state.provider_id].lines
        ]
    )
    assert [custom_id for custom_id, _ in fake.billed] == ["r0", "r1", "r2"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_failed_and_expired_lines_come_back_so(provider: str, batches: Any, apis: Any) -> None:
    server, fake = batches(echo, fail={"r1"}, expire={"r2"})
    api = apis(config(provider, server))
    wanted = small(3)
    state = until_ended(api, api.submit(lines_of(wanted), metadata={}))
    got = {result.custom_id: result for result in api.results(state.provider_id, wanted)}

    assert got["r0"].kind == "succeeded" and got["r0"].response is not None
    assert (got["r1"].kind, got["r1"].response) == ("errored", None)
    assert got["r1"].error == (
        f"HTTP 400: {FAIL_MESSAGE}"
        if provider == "openai"
        else f"invalid_request_error: {FAIL_MESSAGE}"
    )
    assert (got["r2"].kind, got["r2"].response) == ("expired", None)
    assert got["r2"].error == (f"{EXPIRED_MESSAGE}" if provider == "openai" else None)
    assert state.status == ("expired" if provider == "openai" else "ended")
    assert state.counts == {
        "total": 3,
        "succeeded": 1,
        "errored": 1,
        "expired": 1,
        "canceled": 0,
        "processing": 0,
    }
    assert [custom_id for custom_id, _ in fake.billed] == ["r0"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_responder_that_breaks_fails_its_line_only(
    provider: str, batches: Any, apis: Any
) -> None:
    def fragile(request: Recorded) -> Reply:
        if "Question 1?" in json.dumps(request.body):
            raise KeyError("unknown item")
        return echo(request)

    server, fake = batches(fragile, fail=lambda custom_id: custom_id == "r2")
    api = apis(config(provider, server))
    wanted = small(3)
    state = until_ended(api, api.submit(lines_of(wanted), metadata={}))
    got = {
        result.custom_id: (result.kind, result.error, result.permanent)
        for result in api.results(state.provider_id, wanted)
    }
    broke = "HTTP 500: " if provider == "openai" else "api_error: "
    refused = "HTTP 400: " if provider == "openai" else "invalid_request_error: "
    assert got == {
        "r0": ("succeeded", None, False),
        "r1": ("errored", f"{broke}KeyError: 'unknown item'", False),
        "r2": ("errored", refused + FAIL_MESSAGE, True),
    }
    assert [custom_id for custom_id, _ in fake.billed] == ["r0"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_errored_request_is_permanent_when_the_request_itself_is_bad(
    provider: str, batches: Any, apis: Any
) -> None:
    """400, 401, 403, 404, 422: the same request fails again in any batch; 408, 429, 500,
    529: the provider's trouble, worth another round."""
    statuses = {
        "r0": 400,
        "r1": 401,
        "r2": 403,
        "r3": 404,
        "r4": 422,
        "r5": 408,
        "r6": 429,
        "r7": 500,
        "r8": 529,
    }
    server, _fake = batches(echo, fail=statuses.__getitem__)
    api = apis(config(provider, server))
    wanted = small(len(statuses))
    state = until_ended(api, api.submit(lines_of(wanted), metadata={}))
    got = {
        result.custom_id: (result.kind, result.permanent)
        for result in api.results(state.provider_id, wanted)
    }
    permanent = {400, 401, 403, 404} | ({422} if provider == "openai" else set())
    assert got == {
        custom_id: ("errored", status in permanent) for custom_id, status in statuses.items()
    }


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_cancelled_batch_keeps_what_ran_and_cancels_the_rest(
    provider: str, batches: Any, apis: Any
) -> None:
    clock = Clock()
    server, fake = batches(echo, delay=3600, clock=clock, processed_on_cancel=1)
    api = apis(config(provider, server))
    wanted = small(3)
    state = api.submit(lines_of(wanted), metadata={})

    cancelling = api.cancel(state.provider_id)
    assert (cancelling.status, cancelling.ended) == (
        ("cancelling" if provider == "openai" else "canceling"),
        False,
    )
    ended = api.retrieve(state.provider_id)
    got = {result.custom_id: result for result in api.results(state.provider_id, wanted)}

    assert (ended.status, ended.ended) == (("cancelled" if provider == "openai" else "ended"), True)
    assert ended.counts == {
        "total": 3,
        "succeeded": 1,
        "errored": 0,
        "expired": 0,
        "canceled": 2,
        "processing": 0,
    }
    assert {custom_id: result.kind for custom_id, result in got.items()} == {
        "r0": "succeeded",
        "r1": "canceled",
        "r2": "canceled",
    }
    assert got["r1"].error is None and got["r1"].response is None
    assert [custom_id for custom_id, _ in fake.billed] == ["r0"]


def test_openai_rejects_a_whole_batch_with_its_reason(batches: Any, apis: Any) -> None:
    server, fake = batches(echo, reject=True)
    api = apis(config("openai", server))
    wanted = small(2)
    state = api.submit(lines_of(wanted), metadata={})
    failed = api.retrieve(state.provider_id)
    got = list(api.results(state.provider_id, wanted))

    assert (failed.status, failed.ended, failed.error) == ("failed", True, REJECT_MESSAGE)
    assert [(r.custom_id, r.kind, r.error) for r in got] == [
        ("r0", "errored", REJECT_MESSAGE),
        ("r1", "errored", REJECT_MESSAGE),
    ]
    assert fake.billed == []


def test_anthropic_rejects_a_whole_batch_at_create(batches: Any, apis: Any) -> None:
    server, fake = batches(echo, reject=True)
    api = apis(config("anthropic", server))
    with pytest.raises(FatalVLMError) as caught:
        api.submit(lines_of(small(2)), metadata={})
    assert caught.value.status == 400
    assert str(caught.value).startswith(
        "creating the batch: Anthropic request to model 'claude-sim'"
    )
    assert str(caught.value).endswith(f"HTTP 400: {REJECT_MESSAGE}")
    assert fake.batches == {} and fake.billed == []


def test_openai_refuses_an_input_file_mixing_models(batches: Any) -> None:
    server, fake = batches(echo)
    first = OpenAIBatchAPI(OpenAIClient(config("openai", server)))
    other = OpenAIClient(config("openai", server, model="gpt-other"))
    lines = lines_of(small(2))
    data = (
        first._encode(lines[0])
        + encode_json(
            {
                "custom_id": "r1",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": other._parameters(lines[1].request),
            }
        )
        + b"\n"
    )
    uploaded = first._sdk.files.create(file=("x.jsonl", data), purpose="batch")
    batch = first._sdk.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    state = first.retrieve(batch.id)
    first.close()
    other.close()
    assert (state.status, state.error) == (
        "failed",
        "All requests in a batch must use the same model.",
    )
    assert fake.billed == []


# -- recovery, support, limits ---------------------------------------------------------------


def test_openai_finds_a_batch_by_its_metadata_across_pages(
    batches: Any, apis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_batch, "FIND_PAGE", 2)
    server, _fake = batches(echo)
    api = apis(config("openai", server))
    created = [
        api.submit(lines_of(small(1)), metadata={"attempt": f"a{index}"}) for index in range(5)
    ]
    found = api.find("attempt", "a1")
    pages = [r.path for r in server.requests if r.path.startswith("/v1/batches?")]
    assert found is not None and found.provider_id == created[1].provider_id
    assert found.status == "completed" and found.ended
    assert pages == ["/v1/batches?limit=2", f"/v1/batches?limit=2&after={created[3].provider_id}"]
    monkeypatch.setattr(openai_batch, "FIND_LOOKBACK", 3)
    assert api.find("attempt", "a1") is None
    assert api.find("attempt", "nowhere") is None


def test_anthropic_has_no_metadata_to_find_a_batch_by(batches: Any, apis: Any) -> None:
    server, fake = batches(echo)
    api = apis(config("anthropic", server))
    api.submit(lines_of(small(1)), metadata={"attempt": "a0"})
    assert len(fake.batches) == 1
    assert api.find("attempt", "a0") is None


def test_anthropic_recovers_an_unrecorded_batch_by_its_creation_time_and_size(
    batches: Any, apis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The oldest batch of the row's size created since the row (less the clock skew) that
    no row holds yet, read across pages; older, taken or other-sized batches are passed by."""
    monkeypatch.setattr(anthropic_batch, "FIND_PAGE", 2)
    clock = Clock()
    server, _fake = batches(echo, clock=clock)
    api = apis(config("anthropic", server))
    made = {}
    for name, size, offset in (
        ("before", 2, -600),
        ("skewed", 1, -30),
        ("other", 2, 0),
        ("taken", 3, 1),
        ("ours", 3, 5),
        ("later", 3, 40),
        ("newest", 1, 50),
    ):
        clock.now = 1_800_000_000.0 + offset
        made[name] = api.submit(lines_of(small(size)), metadata={}).provider_id
    row_written = datetime.fromtimestamp(1_800_000_000.0, UTC)

    def recover(size: int, *taken: str) -> str | None:
        found = api.recover(
            {"agentic_iqa_batch": "row-1"},
            created_after=row_written,
            request_count=size,
            taken={made[name] for name in taken},
        )
        return None if found is None else found.provider_id

    assert recover(3, "taken") == made["ours"]
    assert recover(3) == made["taken"]  # created first: the one a crashed create made
    assert recover(3, "taken", "ours", "later") is None
    assert recover(1) == made["skewed"]  # within CLOCK_SKEW before the row
    assert recover(2) == made["other"]  # not "before", ten minutes older than the row
    listed = [r.path for r in server.requests if r.path.startswith("/v1/messages/batches?")]
    assert listed[0] == "/v1/messages/batches?limit=2" and len(listed) >= 4
    found = api.recover({}, created_after=row_written, request_count=3, taken=())
    assert found is not None and found.created_at == datetime.fromtimestamp(1_800_000_001.0, UTC)


def test_openai_recovers_a_batch_by_its_metadata_unless_a_row_holds_it(
    batches: Any, apis: Any
) -> None:
    server, _fake = batches(echo)
    api = apis(config("openai", server))
    mine = api.submit(lines_of(small(2)), metadata={"agentic_iqa_batch": "row-1"})
    api.submit(lines_of(small(2)), metadata={"agentic_iqa_batch": "row-2"})
    since = datetime.now(UTC) - timedelta(minutes=1)
    found = api.recover(
        {"agentic_iqa_batch": "row-1"}, created_after=since, request_count=2, taken=()
    )
    assert found is not None and found.provider_id == mine.provider_id
    assert (
        api.recover(
            {"agentic_iqa_batch": "row-1"},
            created_after=since,
            request_count=2,
            taken={mine.provider_id},
        )
        is None
    )
    assert (
        api.recover({"agentic_iqa_batch": "row-3"}, created_after=since, request_count=2, taken=())
        is None
    )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_batch_create_is_never_retried_by_the_sdk(provider: str, apis: Any) -> None:
    """A create answered 500 may have created the batch: a retry could pay for it twice, so
    the SDK (which retries other calls) leaves it to the runtime, which looks for it first."""
    from tests.conformance.batch_server import BATCH_METHODS

    fake = BatchServer(echo)
    creates: list[str] = []
    create_path = "/v1/batches" if provider == "openai" else "/v1/messages/batches"

    def front(request: Recorded) -> Reply:
        if request.method == "POST" and request.path == create_path:
            creates.append(request.path)
            if len(creates) == 1:
                return Reply(500, openai_error("upstream timed out"))
        return fake(request)

    with FakeAPIServer(front, methods=BATCH_METHODS) as server:
        api = apis(config(provider, server, max_retries=2))
        with pytest.raises(VLMError, match="creating the batch"):
            api.submit(lines_of(small(1)), metadata={})
        assert creates == [create_path] and fake.batches == {}
        state = api.submit(lines_of(small(1)), metadata={})
    assert len(creates) == 2 and list(fake.batches) == [state.provider_id]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_endpoint_without_batches_is_refused_in_one_line(
    provider: str, batches: Any, apis: Any
) -> None:
    server, _fake = batches(echo, supports_batches=False)
    api = apis(config(provider, server))
    with pytest.raises(VLMConfigurationError) as caught:
        api.check_supported()
    path = "/v1/batches" if provider == "openai" else "/v1/messages/batches"
    where = f"{server.url}/v1" if provider == "openai" else server.url
    assert str(caught.value) == (
        f"{where} has no batch interface (GET {path} answered HTTP "
        "404); drop --batch to send the calls one by one"
    )
    apis(config(provider, batches(echo)[0])).check_supported()


def test_a_server_that_only_answers_posts_has_no_batches(apis: Any) -> None:
    with FakeAPIServer(echo) as server:
        api = apis(config("openai", server))
        with pytest.raises(VLMConfigurationError, match=r"answered HTTP 501\); drop --batch"):
            api.check_supported()


def test_builtin_has_no_batch_interface() -> None:
    with pytest.raises(VLMConfigurationError) as caught:
        create_batch_api(BackendConfig())
    assert str(caught.value) == (
        "builtin has no batch interface: it is local and free; drop --batch"
    )


def test_a_custom_id_follows_anthropics_rule() -> None:
    request = VLMRequest("plan", "s", "u")
    assert BatchLine("item-1_plan", request).custom_id == "item-1_plan"
    for bad in ("", "a" * 65, "item 1", "item/1", "é"):
        with pytest.raises(ValueError, match="must match"):
            BatchLine(bad, request)


def test_openai_line_bytes_are_the_uploaded_file(
    batches: Any, apis: Any, images: list[Path]
) -> None:
    server, fake = batches(simulated(images, "openai"))
    api = apis(config("openai", server))
    lines = lines_of(requests(images))
    state = api.submit(lines, metadata={})
    uploaded = fake.files[fake.batches[state.provider_id].input_file_id]  # type: ignore[index]
    rows = uploaded.data.splitlines(keepends=True)
    assert [len(row) for row in rows] == [api.line_bytes(line) for line in lines]
    assert len(uploaded.data) == sum(api.line_bytes(line) for line in lines)
    assert [json.loads(row)["custom_id"] for row in rows] == [line.custom_id for line in lines]


def test_anthropic_line_bytes_add_up_to_the_create_body(
    batches: Any, apis: Any, images: list[Path]
) -> None:
    server, _fake = batches(simulated(images, "anthropic"))
    api = apis(config("anthropic", server))
    lines = lines_of(requests(images))
    api.submit(lines, metadata={})
    create = next(r for r in server.requests if r.path == "/v1/messages/batches")
    # {"requests":[ line , line ... ]}: each line counts its separating comma, one too many.
    assert len(create.raw) == len('{"requests":[]}') + sum(map(api.line_bytes, lines)) - 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_too_many_lines_or_bytes_or_a_repeated_id_are_refused_before_sending(
    provider: str, batches: Any, apis: Any
) -> None:
    server, _fake = batches(echo)
    api = apis(config(provider, server))
    lines = lines_of(small(3))
    assert api.max_requests == (50_000 if provider == "openai" else 100_000)
    api.max_requests = 2
    with pytest.raises(ValueError, match="3 lines exceed the .* limit of 2 requests"):
        api.submit(lines, metadata={})
    api.max_requests = 10
    api.max_bytes = sum(map(api.line_bytes, lines)) - 1
    with pytest.raises(ValueError, match="bytes exceed"):
        api.submit(lines, metadata={})
    api.max_bytes = 10**6
    with pytest.raises(ValueError, match="unique"):
        api.submit([lines[0], lines[0]], metadata={})
    with pytest.raises(ValueError, match="at least one line"):
        api.submit([], metadata={})
    assert [r for r in server.requests if r.method == "POST"] == []
    api.max_bytes = sum(map(api.line_bytes, lines))  # lines that add up to the limit fit
    assert api.submit(lines, metadata={}).counts["total"] == 3


# -- secrets ---------------------------------------------------------------------------------


def key_quoting(request: Recorded) -> Reply:
    """A provider that quotes the key it was sent in every refusal."""
    sent = request.headers.get("x-api-key") or request.headers.get(
        "authorization", ""
    ).removeprefix("Bearer ")
    return Reply(401, openai_error(f"Incorrect API key provided: {sent}.", "invalid_request_error"))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_key_quoted_by_a_failing_line_is_masked(provider: str, batches: Any, apis: Any) -> None:
    server, fake = batches(key_quoting)
    api = apis(config(provider, server))
    wanted = small(1)
    state = until_ended(api, api.submit(lines_of(wanted), metadata={}))
    [result] = api.results(state.provider_id, wanted)
    assert result.kind == "errored"
    assert result.error == (
        "HTTP 401: Incorrect API key provided: ***."
        if provider == "openai"
        else "invalid_request_error: Incorrect API key provided: ***."
    )
    assert fake.billed == []


def test_a_key_quoted_in_a_rejection_is_masked(batches: Any, apis: Any) -> None:
    server, _fake = batches(echo, reject=f"Bad key {KEY} for this batch")
    api = apis(config("openai", server))
    state = api.retrieve(api.submit(lines_of(small(1)), metadata={}).provider_id)
    assert state.error == "Bad key *** for this batch"
    server_a, _ = batches(echo, reject=f"Bad key {KEY} for this batch")
    with pytest.raises(FatalVLMError) as caught:
        apis(config("anthropic", server_a)).submit(lines_of(small(1)), metadata={})
    assert KEY not in str(caught.value) and "Bad key *** for this batch" in str(caught.value)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_sdk_errors_become_vlm_errors_without_the_key(
    provider: str, batches: Any, apis: Any
) -> None:
    server, _fake = batches(echo)
    api = apis(config(provider, server))
    with pytest.raises(FatalVLMError) as caught:
        api.retrieve("batch_unknown")
    assert caught.value.status == 404 and caught.value.__cause__ is None
    assert str(caught.value).startswith("reading batch batch_unknown: ")
    assert KEY not in str(caught.value)


def test_the_batch_interfaces_reuse_the_online_clients(batches: Any, apis: Any) -> None:
    server, _fake = batches(echo)
    openai_api = apis(config("openai", server))
    anthropic_api = apis(config("anthropic", server))
    assert isinstance(openai_api, OpenAIBatchAPI) and isinstance(openai_api.client, OpenAIClient)
    assert isinstance(anthropic_api, AnthropicBatchAPI)
    assert isinstance(anthropic_api.client, AnthropicClient)
    assert (openai_api.model, anthropic_api.model) == ("gpt-sim", "claude-sim")
    assert openai_api._sdk is openai_api.client._client
