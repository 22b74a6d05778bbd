"""What the model writes is read, nothing is invented, and the input decides what the input
decides: one test per way a reading went wrong.  Remote models are the real SDKs against a
local server."""

from __future__ import annotations

import json
import math

import pytest
from sqlalchemy import select

from agentic_iqa.agents import summarizer
from agentic_iqa.agents.jsonreply import ask_json
from agentic_iqa.agents.planner import make_plan, reconcile
from agentic_iqa.db import make_engine, upgrade
from agentic_iqa.db.engine import session_scope
from agentic_iqa.db.models import Job, VlmCall
from agentic_iqa.jobs.policy import stops_job
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.pipeline import DETECT, Agents, TransientRetry, next_step, run_inprocess
from agentic_iqa.prompts import TRUNCATED_SUFFIX
from agentic_iqa.query import parse_query
from agentic_iqa.runtime import lifecycle, service
from agentic_iqa.state import ExecutorOutput, PlannerOutput, initial_state, merge_state
from agentic_iqa.vlm import BackendConfig, create_client
from agentic_iqa.vlm.anthropic import AnthropicClient
from agentic_iqa.vlm.base import VLMRequest, VLMResponse
from agentic_iqa.vlm.builtin import BuiltinClient
from agentic_iqa.vlm.builtin import planner as builtin_planner
from agentic_iqa.vlm.builtin.answer import explain
from agentic_iqa.vlm.images import IMAGE_LABELS
from agentic_iqa.vlm.openai import OpenAIClient
from agentic_iqa.vlm.usage import collect_calls
from agentic_iqa.vocabulary import level_name
from iqa_tools import load_catalog
from tests.agentic_iqa.vlm.fake_servers import (
    FakeAPIServer,
    Reply,
    anthropic_message,
    openai_completion,
    openai_error,
)

TOOLS = [spec.name for spec in load_catalog()]
FAST = TransientRetry(attempts=2, initial=0.01, maximum=0.02, jitter=0.0)


def openai_client(
    server: FakeAPIServer, monkeypatch: pytest.MonkeyPatch, *, max_retries: int = 0
) -> OpenAIClient:
    monkeypatch.setenv("TEST_VLM_KEY", "sk-test-faithful")
    return OpenAIClient(
        BackendConfig(
            backend="openai",
            model="qwen2.5-vl",
            base_url=f"{server.url}/v1",
            api_key_env="TEST_VLM_KEY",
            timeout=5,
            max_retries=max_retries,
        )
    )


def plan(**changes) -> PlannerOutput:
    document = {
        "query_type": "IQA",
        "query_scope": "Global",
        "distortion_source": "Inferred",
        "distortions": None,
        "reference_mode": "No-Reference",
        "required_tool": None,
        "plan": {
            "distortion_detection": True,
            "distortion_analysis": True,
            "tool_selection": True,
            "tool_execution": True,
        },
    }
    return PlannerOutput.model_validate({**document, **changes})


# -- a tool is required only when the query names it as a tool -------------------------------


@pytest.mark.parametrize(
    ("query", "tool"),
    [
        ("What is unique about the noise?", None),
        ("Is this image unique?", None),
        ("Rate this image using UNIQUE.", "UNIQUE"),
        ("What does the unique score say?", "UNIQUE"),
        ("Score it with unique.", "UNIQUE"),
        ("Is the NIQE value high?", "NIQE"),
    ],
)
def test_an_ordinary_word_names_no_tool(query, tool):
    assert parse_query(query, TOOLS).tool == tool
    assert builtin_planner.plan(query, False, TOOLS)["required_tool"] == tool


def test_a_models_required_tool_that_the_query_does_not_name_is_dropped():
    model_plan = plan(
        required_tool="UNIQUE",
        plan={
            "distortion_detection": True,
            "distortion_analysis": True,
            "tool_selection": False,
            "tool_execution": True,
        },
    )
    fixed = reconcile(model_plan, "What is unique about the noise?", False, TOOLS)
    assert fixed.required_tool is None
    assert fixed.plan.tool_selection is True  # a tool is then selected, not skipped


@pytest.mark.parametrize(
    ("written", "tool"),
    [
        ("the NIQE metric", "NIQE"),
        ("ms_ssim", "MS-SSIM"),
        ("none", None),
        ("best tool", None),
    ],
)
def test_a_required_tool_is_a_real_tool_or_none(written, tool):
    assert plan(required_tool=written).required_tool == tool


# -- scoring or explanation: the planner decides, in any language ----------------------------


@pytest.mark.parametrize(
    "query",
    [
        "Bewerte die Qualität dieses Bildes",
        "Évaluez la qualité de cette photo",
        "Califica la calidad de esta imagen",
        "请给这张图片的质量评分",
    ],
)
def test_the_builtin_planner_reads_rating_requests_in_other_languages(query):
    document = builtin_planner.plan(query, False, TOOLS)
    assert document["answer_mode"] == "scoring"
    assert summarizer.scoring_mode(query, PlannerOutput.model_validate(document))


def test_a_remote_planners_answer_mode_decides_scoring_whatever_the_wording(
    monkeypatch, registry, example_images
):
    remote_plan = {
        **plan().model_dump(mode="json"),
        "answer_mode": "scoring",
        "plan": {
            "distortion_detection": False,
            "distortion_analysis": False,
            "tool_selection": False,
            "tool_execution": False,
        },
    }
    levels = [("B", -0.1), ("A", -3.0), ("C", -2.5), ("D", -5.0), ("E", -6.0)]

    def respond(request) -> Reply:
        if request.body.get("logprobs"):
            return Reply(200, openai_completion("B", top_logprobs=levels))
        return Reply(200, openai_completion(json.dumps(remote_plan)))

    with FakeAPIServer(respond) as server:
        client = openai_client(server, monkeypatch)
        agents = Agents(
            planner=client, executor=BuiltinClient(), summarizer=client, registry=registry
        )
        state = run_inprocess(
            "Wie ist dieses Foto gelungen?", str(example_images["original"]), agents=agents
        )
    result = state["summarizer_result"]
    assert result.final_answer == "Good" and result.quality_score is not None
    assert result.probability_source == "logprobs"


# -- the reference mode follows the input ------------------------------------------------------


def test_a_plan_saying_no_reference_is_corrected_when_a_reference_is_given(
    monkeypatch, example_images
):
    with FakeAPIServer(
        lambda _r: Reply(200, openai_completion(json.dumps(plan().model_dump(mode="json"))))
    ) as server:
        made = make_plan(
            openai_client(server, monkeypatch),
            "Compare with the reference.",
            str(example_images["blur3"]),
            str(example_images["original"]),
            TOOLS,
        )
    assert made.reference_mode == "Full-Reference"


def test_with_a_reference_each_image_is_labelled_for_the_model(monkeypatch, example_images):
    request = VLMRequest(
        task="plan",
        system="s",
        user="The image: <image>",
        images=(example_images["blur3"], example_images["original"]),
    )
    with FakeAPIServer(lambda _r: Reply(200, openai_completion("{}"))) as server:
        openai_client(server, monkeypatch).complete(request)
        content = server.requests[0].body["messages"][-1]["content"]
    assert [part["type"] for part in content] == ["text", "image_url", "text", "image_url", "text"]
    assert (content[0]["text"], content[2]["text"]) == IMAGE_LABELS

    monkeypatch.setenv("TEST_ANTHROPIC_KEY", "sk-ant-test")
    with FakeAPIServer(lambda _r: Reply(200, anthropic_message("{}"))) as server:
        AnthropicClient(
            BackendConfig(
                backend="anthropic",
                model="claude-test",
                base_url=server.url,
                api_key_env="TEST_ANTHROPIC_KEY",
                timeout=5,
                max_retries=0,
            )
        ).complete(request)
        content = server.requests[0].body["messages"][-1]["content"]
    assert [part["type"] for part in content] == ["text", "image", "text", "image", "text"]
    assert (content[0]["text"], content[2]["text"]) == IMAGE_LABELS


# -- named distortions are looked at, not detected and replaced --------------------------------


def test_distortions_the_query_names_are_not_detected_again():
    named = plan(distortion_source="Explicit", distortions={"Global": ["blur"]})
    assert named.plan.distortion_detection is True  # as the model wrote it
    state = merge_state(
        initial_state("Is it blurry?", "x.png"), {"plan": named, "steps_done": ["plan"]}
    )
    assert next_step(state) != DETECT
    assert reconcile(named, "Is it blurry?", False, TOOLS).plan.distortion_detection is False


# -- a subtask whose transient errors outlast the retries becomes null ------------------------


def test_an_executor_subtask_that_keeps_failing_transiently_is_given_up(
    monkeypatch, registry, example_images, tmp_path
):
    with FakeAPIServer(lambda _r: Reply(503, openai_error("overloaded"))) as server:
        remote = openai_client(server, monkeypatch)
        builtin = BuiltinClient()
        agents = Agents(planner=builtin, executor=remote, summarizer=builtin, registry=registry)
        state = run_inprocess(
            "Is this image noisy?", str(example_images["noise3"]), agents=agents, retry=FAST
        )
        assert "error" not in state
        assert state["summarizer_result"] is not None
        assert state["executor_evidence"].distortion_analysis is None
        assert any("HTTP 503" in reason for reason in state["step_errors"].values())

        url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
        upgrade(url)
        engine = make_engine(url)
        run_id = service.create_run(
            engine, "Is this image noisy?", str(example_images["noise3"]), max_replan_iterations=0
        )
        monkeypatch.setenv("AGENTIC_IQA_VLM_CACHE", "false")
        recorded = create_client("executor", {"executor": remote.config})
        agents = Agents(planner=builtin, executor=recorded, summarizer=builtin, registry=registry)
        stored = service.run_embedded(engine, agents, run_id, retry=FAST)
    assert "error" not in stored and stored["summarizer_result"] is not None
    with session_scope(engine) as session:
        failed = session.scalars(
            select(VlmCall).where(VlmCall.run_id == run_id, VlmCall.error.is_not(None))
        ).all()
    # every failed call is on record, with its status, though no call ever answered
    assert failed and all("HTTP 503" in call.error for call in failed)


# -- failed calls are facts too ----------------------------------------------------------------


def test_a_call_that_fails_inside_the_sdk_is_recorded(monkeypatch):
    monkeypatch.setenv("TEST_VLM_KEY", "sk-test-faithful")
    monkeypatch.setenv("AGENTIC_IQA_VLM_CACHE", "false")
    with FakeAPIServer(
        lambda _r: Reply(401, openai_error("bad key", "invalid_request_error"))
    ) as server:
        client = create_client(
            "planner",
            {
                "planner": BackendConfig(
                    backend="openai",
                    model="gpt-4o",
                    base_url=f"{server.url}/v1",
                    api_key_env="TEST_VLM_KEY",
                    max_retries=0,
                )
            },
        )
        with collect_calls() as calls, pytest.raises(Exception, match="HTTP 401"):
            client.complete(VLMRequest(task="plan", system="s", user="u"))
    (record,) = calls.records
    assert "HTTP 401" in record.error and record.input_tokens == 0


# -- replies that are cut off, empty or refused ------------------------------------------------


class Scripted:
    backend, model = "scripted", "m"

    def __init__(self, *responses: VLMResponse) -> None:
        self.responses = list(responses)
        self.requests: list[VLMRequest] = []

    def complete(self, request: VLMRequest) -> VLMResponse:
        self.requests.append(request)
        return self.responses.pop(0)


def test_a_reply_cut_off_at_the_token_limit_is_asked_again_shorter():
    client = Scripted(
        VLMResponse('{"a": [1, 2', "m", finish_reason="length"),
        VLMResponse("", "m"),
        VLMResponse('{"a": 1}', "m"),
    )
    outcome = ask_json(client, VLMRequest(task="plan", system="S", user="u"), dict)
    assert outcome.value == {"a": 1}
    assert "cut off at the token limit" in outcome.errors[0]
    assert "the reply was empty" in outcome.errors[1]
    assert TRUNCATED_SUFFIX in client.requests[1].system
    assert TRUNCATED_SUFFIX not in client.requests[2].system


def test_refusals_and_filters_are_recorded_as_what_they_are():
    client = Scripted(
        VLMResponse("", "m", refusal="I can't help with that."),
        VLMResponse("", "m", finish_reason="content_filter"),
        VLMResponse("I'm sorry, I cannot assess this image.", "m"),
    )
    outcome = ask_json(client, VLMRequest(task="plan", system="S", user="u"), dict)
    assert outcome.value is None
    assert "the model refused" in outcome.errors[0]
    assert "content filter" in outcome.errors[1]
    assert "the model declined" in outcome.errors[2]


# -- nothing invented --------------------------------------------------------------------------


def test_the_builtin_picks_no_option_when_none_is_measurable(example_images):
    context = {
        "query": "Which animal is shown? A. Cat B. Dog C. Horse",
        "image_path": str(example_images["original"]),
        "plan": {},
        "options": {},
        "distortion_analysis": None,
        "quality_scores": None,
    }
    reply = explain(context)
    assert reply["final_answer"] == summarizer.UNABLE


def test_an_abstention_is_recorded_not_asked_until_it_guesses(example_images):
    client = Scripted(
        VLMResponse(
            json.dumps(
                {"final_answer": "Unable to determine", "quality_reasoning": "no option fits"}
            ),
            "m",
        )
    )
    result = summarizer.summarize(
        client,
        "Which animal is shown? A. Cat B. Dog",
        str(example_images["original"]),
        None,
        plan(
            plan={
                "distortion_detection": False,
                "distortion_analysis": False,
                "tool_selection": False,
                "tool_execution": False,
            }
        ),
        ExecutorOutput(),
    )
    assert len(client.requests) == 1
    assert result.answer_unparseable and "chose none of the options" in result.unparseable_reason


@pytest.mark.parametrize(
    ("score", "level"),
    [(2.5, "Fair"), (3.5, "Good"), (1.49, "Bad"), (4.5, "Excellent"), (2.4999, "Poor")],
)
def test_levels_round_half_up(score, level):
    assert level_name(score) == level


# -- configuration is read, and a refusing backend stops a job ---------------------------------


def test_max_replan_iterations_comes_from_the_configuration(monkeypatch, tmp_path, example_images):
    monkeypatch.setenv("AGENTIC_IQA_MAX_REPLAN_ITERATIONS", "0")
    url = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    upgrade(url)
    manifest = tmp_path / "m.csv"
    manifest.write_text(f"image\n{example_images['original']}\n")
    engine = make_engine(url)
    job_id = lifecycle.submit(engine, JobSpec.build(manifest=manifest))
    with session_scope(engine) as session:
        assert session.get(Job, job_id).max_replan_iterations == 0


@pytest.mark.parametrize(
    ("status", "done", "alike", "stops"),
    [
        (401, 5, 1, True),
        (403, 0, 1, True),
        (404, 0, 1, True),
        (None, 0, 1, True),
        (400, 0, 1, False),
        (400, 0, 3, True),
        (400, 1, 9, False),
    ],
)
def test_which_backend_errors_stop_a_job(status, done, alike, stops):
    assert stops_job(status, done=done, failed_alike=alike) is stops


def test_a_cut_off_reply_is_not_kept_in_the_response_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TEST_VLM_KEY", "sk-test-faithful")
    monkeypatch.setenv("AGENTIC_IQA_TOOL_CACHE", f"sqlite:///{tmp_path / 'cache.sqlite3'}")
    cut = openai_completion('{"query_type": "IQ')
    cut["choices"][0]["finish_reason"] = "length"
    with FakeAPIServer() as server:
        server.enqueue(Reply(200, cut), Reply(200, openai_completion('{"ok": 1}')))
        config = BackendConfig(
            backend="openai",
            model="gpt-4o",
            base_url=f"{server.url}/v1",
            api_key_env="TEST_VLM_KEY",
            max_retries=0,
        )
        request = VLMRequest(task="plan", system="s", user="u")
        first = create_client("planner", {"planner": config}).complete(request)
        second = create_client("planner", {"planner": config}).complete(request)
    assert first.finish_reason == "length" and not first.cached
    assert second.text == '{"ok": 1}' and not second.cached
    assert not math.isnan(len(server.requests)) and len(server.requests) == 2
