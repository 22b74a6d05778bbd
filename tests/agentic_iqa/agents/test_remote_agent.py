"""The agent with a remote VLM: the real OpenAI SDK against a local server speaking its protocol."""

from __future__ import annotations

import json
import math

import pytest

from agentic_iqa.agents.fusion import fuse
from agentic_iqa.pipeline import Agents, run_inprocess
from agentic_iqa.prompts import STRICT_JSON_SUFFIX
from agentic_iqa.vlm import BackendConfig, create_client
from agentic_iqa.vlm.builtin import BuiltinClient
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Reply, openai_completion

PLAN = {
    "query_type": "IQA",
    "query_scope": "Global",
    "distortion_source": "Inferred",
    "distortions": None,
    "reference_mode": "No-Reference",
    "required_tool": "PIQE",
    "plan": {
        "distortion_detection": False,
        "distortion_analysis": True,
        "tool_selection": False,
        "tool_execute": True,
    },  # the paper's spelling
}


def remote(server: FakeAPIServer, monkeypatch: pytest.MonkeyPatch, role: str):
    monkeypatch.setenv("TEST_VLM_KEY", "sk-test-remote")
    # Every request must reach the server: identical replan prompts would come from the cache.
    monkeypatch.setenv("AGENTIC_IQA_VLM_CACHE", "false")
    config = BackendConfig(
        backend="openai",
        model="qwen2.5-vl",
        base_url=f"{server.url}/v1",
        api_key_env="TEST_VLM_KEY",
        timeout=5,
        max_retries=1,
    )
    return create_client(role, {role: config})


def system_prompt(recorded) -> str:
    return next(m["content"] for m in recorded.body["messages"] if m["role"] == "system")


def test_invalid_json_is_retried_with_a_stricter_prompt_then_the_run_completes(
    monkeypatch, registry, example_images
):
    levels = [("A", -3.0), ("B", -1.2), ("C", -0.6), ("D", -2.5), ("E", -4.0)]
    with FakeAPIServer() as server:
        server.enqueue(
            Reply(200, openai_completion("Sure! Here is the plan: {query_type: IQA")),
            Reply(200, openai_completion("```json\n" + json.dumps(PLAN) + "\n```")),
            Reply(200, openai_completion("B", top_logprobs=levels)),
        )
        client = remote(server, monkeypatch, "planner")
        builtin = BuiltinClient()
        agents = Agents(planner=client, executor=builtin, summarizer=client, registry=registry)
        state = run_inprocess(
            "Rate the quality of this image using PIQE.",
            str(example_images["original"]),
            agents=agents,
        )
        planner_requests = server.requests[:2]
        summary_request = server.requests[2]
    assert STRICT_JSON_SUFFIX.strip() not in system_prompt(planner_requests[0])
    assert STRICT_JSON_SUFFIX.strip() in system_prompt(planner_requests[1])
    assert state["plan"].plan.tool_execution is True  # alias accepted
    assert state["plan"].required_tool == "PIQE"
    assert summary_request.body["logprobs"] is True
    result = state["summarizer_result"]
    assert result.probability_source == "logprobs"
    # p_c from the answer letters' log-probabilities, fused with the one PIQE score
    weights = {
        5: math.exp(-3.0),
        4: math.exp(-1.2),
        3: math.exp(-0.6),
        2: math.exp(-2.5),
        1: math.exp(-4.0),
    }
    total = sum(weights.values())
    piqe = state["executor_evidence"].quality_scores["Global"]
    tool_scores = [score for _tool, score in piqe.values()]
    expected = fuse(tool_scores, {c: w / total for c, w in weights.items()})
    assert result.quality_score == pytest.approx(expected)
    assert result.level_distribution["Fair"] == pytest.approx(weights[3] / total)


def test_planner_that_never_returns_json_fails_the_run_with_the_reason(
    monkeypatch, registry, example_images
):
    with FakeAPIServer(lambda _r: Reply(200, openai_completion("I cannot do JSON."))) as server:
        client = remote(server, monkeypatch, "planner")
        builtin = BuiltinClient()
        agents = Agents(planner=client, executor=builtin, summarizer=builtin, registry=registry)
        state = run_inprocess("Rate this image.", str(example_images["original"]), agents=agents)
        attempts = len(server.requests)
    assert attempts == 3
    assert "plan" not in state and "summarizer_result" not in state
    error = json.loads(state["error"])
    assert error["error_type"] == "validation_error"
    assert error["retry_count"] == 2
    assert error["backend"] == "openai"
    assert "sk-test-remote" not in state["error"]


def test_region_plan_without_tools_and_a_summarizer_wanting_them_replans_to_the_bound(
    monkeypatch, registry, example_images
):
    region_plan = {
        **PLAN,
        "query_scope": ["car"],
        "required_tool": None,
        "plan": {
            "distortion_detection": False,
            "distortion_analysis": True,
            "tool_selection": False,
            "tool_execution": False,
        },
    }
    wants_tools = {
        "final_answer": "Unable to determine",
        "quality_reasoning": "no scores",
        "need_replan": True,
        "replan_reason": "Missing tool scores for car",
    }

    def respond(recorded) -> Reply:
        system = system_prompt(recorded)
        body = region_plan if "planner" in system else wants_tools
        return Reply(200, openai_completion(json.dumps(body)))

    with FakeAPIServer(respond) as server:
        client = remote(server, monkeypatch, "planner")
        agents = Agents(
            planner=client, executor=BuiltinClient(), summarizer=client, registry=registry
        )
        state = run_inprocess(
            "Is the car sharp?",
            str(example_images["original"]),
            agents=agents,
            max_replan_iterations=2,
        )
        replan_prompts = [r for r in server.requests if "planner" in system_prompt(r)]
    assert state["iteration_count"] == 2
    assert [e.reason for e in state["replan_history"]] == ["Missing tool scores for car"] * 2
    assert len(replan_prompts) == 3
    last_user = next(m for m in replan_prompts[-1].body["messages"] if m["role"] == "user")
    text = json.dumps(last_user["content"])
    assert "Missing tool scores for car" in text
