"""Helpers for the tests that ask a remote model: the real OpenAI SDK against a local server
speaking its protocol (tests/agentic_iqa/vlm/fake_servers.py), a plan and its evidence to
summarize, and the replies such a server sends."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentic_iqa.agents.summarizer import summarize
from agentic_iqa.state import ExecutorOutput, PlannerOutput, SummarizerOutput
from agentic_iqa.vlm import BackendConfig
from agentic_iqa.vlm.openai import OpenAIClient
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Reply, openai_completion

#: A scoring query and a multiple-choice one, as the tests ask them.
SCORING = "Rate the quality of this image with PIQE."
MCQ = "Which distortion is most visible? A. Noise B. Blur C. Compression"


def client_for(
    server: FakeAPIServer,
    monkeypatch: pytest.MonkeyPatch,
    *,
    max_retries: int = 1,
    follow_up: bool | None = None,
) -> OpenAIClient:
    """Return a bare OpenAIClient of ``server`` (no response cache: every request must reach
    the server); ``follow_up`` as the role's setting (None: the default, on)."""
    monkeypatch.setenv("TEST_VLM_KEY", "sk-test-answers")
    return OpenAIClient(
        BackendConfig(
            backend="openai",
            model="qwen2.5-vl",
            base_url=f"{server.url}/v1",
            api_key_env="TEST_VLM_KEY",
            timeout=5,
            max_retries=max_retries,
            follow_up=follow_up,
        )
    )


def plan_for(scope: list[str] | str = "Global", **flags: bool) -> PlannerOutput:
    """Return a no-reference plan over ``scope`` that analyses and runs tools, ``flags`` on top."""
    wanted = {
        "distortion_detection": False,
        "distortion_analysis": True,
        "tool_selection": False,
        "tool_execution": True,
        **flags,
    }
    return PlannerOutput.model_validate(
        {
            "query_type": "IQA",
            "query_scope": scope,
            "distortion_source": "Inferred",
            "distortions": None,
            "reference_mode": "No-Reference",
            "required_tool": None,
            "plan": wanted,
        }
    )


#: What the executor found: moderate blur, PIQE's score.
EVIDENCE = ExecutorOutput(
    distortion_analysis={
        "Global": [{"type": "Blurs", "severity": "moderate", "explanation": "soft edges"}]
    },
    quality_scores={"Global": {"Blurs": ("PIQE", 2.0)}},
)


def ask(
    server: FakeAPIServer,
    monkeypatch: pytest.MonkeyPatch,
    query: str,
    image: str,
    *,
    follow_up: bool | None = None,
) -> SummarizerOutput:
    """Ask the summarizer behind ``server`` about ``image``, with :data:`EVIDENCE`."""
    client = client_for(server, monkeypatch, follow_up=follow_up)
    return summarize(client, query, image, None, plan_for(), EVIDENCE)


def answer_reply(final_answer: str) -> Reply:
    """Return the server's reply of a summarizer answering ``final_answer``."""
    return Reply(
        200,
        openai_completion(
            json.dumps(
                {
                    "final_answer": final_answer,
                    "quality_reasoning": "edges are soft",
                    "need_replan": False,
                    "replan_reason": None,
                }
            )
        ),
    )


def completion(
    pieces: list[tuple[str, list[tuple[str, float]]]], *, finish_reason: str = "stop"
) -> dict[str, Any]:
    """Return a chat.completion whose reply is ``pieces``, each token with its top
    log-probabilities."""

    def entry(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    body = openai_completion("".join(token for token, _ in pieces))
    choice = body["choices"][0]
    choice["finish_reason"] = finish_reason
    choice["logprobs"] = {
        "refusal": None,
        "content": [
            {
                **entry(token, top[0][1] if top else -0.01),
                "top_logprobs": [entry(other, logprob) for other, logprob in top],
            }
            for token, top in pieces
        ],
    }
    return body
