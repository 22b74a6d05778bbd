"""Reconciling the planner's reply with the input changes only what the input proves: one test
per way a reading went wrong, and the graded planner corpus
(:mod:`tests.agentic_iqa.agents.planner_corpus`) read through the agent's own path."""

from __future__ import annotations

import json
import logging

import pytest

from agentic_iqa.agents import executor
from agentic_iqa.agents.jsonreply import extract_json_object
from agentic_iqa.pipeline import ANALYSE, SUMMARIZE, next_step
from agentic_iqa.query import excluded_tools_in, tool_in
from agentic_iqa.state import (
    PlannerOutput,
    initial_state,
    merge_state,
    state_from_json,
    state_to_json,
)
from agentic_iqa.vlm.base import VLMRequest, VLMResponse
from tests.agentic_iqa.agents.planner_corpus import (
    ALL_ON,
    CORPUS,
    TOOLS,
    differences,
    flags,
    model_plan,
    read,
    reconciled,
)

# -- tools are named by any catalogue spelling; a common word is not a tool; "don't use X" ----


@pytest.mark.parametrize(
    ("query", "tool"),
    [
        ("Rate this image with Q-Align.", "QAlign"),
        ("Use CLIP-IQA to check it.", "CLIPIQA"),
        ("Compare it using MS SSIM.", "MS-SSIM"),
        ("Score it with TOPIQ FR.", "TOPIQ_FR"),
        ("Check it with MS-SSIM please", "MS-SSIM"),
        ("Check it with ssim please", "SSIM"),
    ],
)
def test_a_tool_is_named_by_any_catalogue_spelling(query, tool):
    assert tool_in(query, TOOLS) == tool
    kept = reconciled(query, True, required_tool=tool, plan={**ALL_ON, "tool_selection": False})
    assert kept.required_tool == tool and flags(kept) == "1101"


@pytest.mark.parametrize(
    "query",
    [
        "Is this street scene with unique architecture too dark?",
        "Is the photo with unique colours noisy?",
    ],
)
def test_a_common_word_is_not_a_tool(query):
    assert tool_in(query, TOOLS) is None
    assert reconciled(query).required_tool is None


@pytest.mark.parametrize(
    ("query", "excluded", "required"),
    [
        ("Don't use NIQE; rate the image.", ["NIQE"], None),
        ("Rate it without NIQE or BRISQUE.", ["NIQE", "BRISQUE"], None),
        ("Use BRISQUE, not NIQE.", ["NIQE"], "BRISQUE"),
        ("NIQE is not needed here, just rate it.", ["NIQE"], None),
        ("Rate it with TOPIQ-FR instead of PSNR.", ["PSNR"], "TOPIQ_FR"),
    ],
)
def test_a_tool_the_query_rules_out_is_excluded_not_required(query, excluded, required):
    assert excluded_tools_in(query, TOOLS) == excluded
    plan = reconciled(query, True, required_tool="NIQE", plan={**ALL_ON, "tool_selection": False})
    assert plan.required_tool == required and plan.excluded_tools == excluded
    assert plan.plan.tool_selection is (required is None) and plan.plan.tool_execution


class Selecting:
    """An executor model that picks the first offered tool, and keeps what it was offered."""

    backend, model = "stub", "stub"

    def __init__(self) -> None:
        self.offered: list[str] = []

    def complete(self, request: VLMRequest) -> VLMResponse:
        self.offered = [tool["name"] for tool in request.context["tools"]]
        keys = request.context["distortion_set"]
        chosen = {key: {d: self.offered[0] for d in values} for key, values in keys.items()}
        return VLMResponse(json.dumps({"selected_tools": chosen}), self.model)


def test_an_excluded_tool_is_neither_offered_nor_run(registry):
    plan = reconciled("Don't use Q-Align or MUSIQ; is it noisy?")
    assert plan.excluded_tools == ["QAlign", "MUSIQ"]
    client = Selecting()
    distortion_set = {"Global": ["Noise"]}
    selected = executor.select_tools(
        client, registry, "q", distortion_set, "No-Reference", excluded=plan.excluded_tools
    )
    assert client.offered and not {"QAlign", "MUSIQ"} & set(client.offered)
    assert selected is not None and "QAlign" not in selected["Global"].values()
    generic = executor.selection_for(plan, distortion_set, None)  # QAlign is the generic one
    assert generic == {"Global": {"Noise": "CLIPIQA"}}
    chosen = executor.selection_for(plan, distortion_set, {"Global": {"Noise": "MUSIQ"}})
    assert chosen == {"Global": {"Noise": "CLIPIQA"}}


def test_a_stored_plan_without_excluded_tools_still_loads():
    written = PlannerOutput.model_validate(model_plan()).model_dump(mode="json")
    del written["excluded_tools"]
    state = merge_state(
        initial_state("q", "x.png"),
        {"plan": PlannerOutput.model_validate(written), "steps_done": ["plan"]},
    )
    again = state_from_json(state_to_json(state))
    assert again["plan"].excluded_tools == []


# -- a model's tool the catalogue lacks turns selection on, with a note -----------------------


def test_a_models_tool_that_is_not_in_the_catalogue_turns_selection_on(caplog):
    with caplog.at_level(logging.WARNING, logger="agentic_iqa.state"):
        plan = reconciled(
            "Rate this image.", required_tool="IQA-Net", plan={**ALL_ON, "tool_selection": False}
        )
    assert plan.required_tool is None and flags(plan) == "1111"
    assert "'IQA-Net' is no tool of the catalogue; a tool is selected instead" in caplog.text


@pytest.mark.parametrize(
    ("family", "query", "reference", "tool"),
    [
        ("TOPIQ", "Score it with TOPIQ, the full-reference one.", True, "TOPIQ_FR"),
        ("wadiqam", "Score it with WaDIQaM.", False, "WaDIQaM_NR"),
        ("WaDIQaM", "Score it with WaDIQaM.", True, "WaDIQaM_FR"),
        ("WaDIQaM", "Score it with the no-reference WaDIQaM.", True, "WaDIQaM_NR"),
        ("WaDIQaM", "Rate this image.", True, None),  # the query names no tool: none is run
    ],
)
def test_a_family_the_model_writes_is_no_unknown_tool(family, query, reference, tool, caplog):
    """A family name ("TOPIQ", "WaDIQaM") is no unknown tool: no warning says so; the query's
    qualifier, else the reference, says which member runs."""
    with caplog.at_level(logging.INFO, logger="agentic_iqa.state"):
        plan = reconciled(query, reference=reference, required_tool=family)
    assert plan.required_tool == tool
    assert "no tool of the catalogue" not in caplog.text
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert f"{family!r} is a family of tools (" in caplog.text


# -- detection follows whether the query names its distortions --------------------------------


def test_a_distortion_the_query_names_is_added_and_not_detected():
    plan = reconciled(
        "Is the sky overexposed?",
        query_scope=["sky"],
        plan={**ALL_ON, "tool_selection": False, "tool_execution": False},
    )
    assert plan.distortions == {"sky": ["Brightness change"]}
    assert plan.distortion_source == "Explicit" and flags(plan) == "0100"
    more = reconciled(
        "Is the image noisy and blurry?",
        distortion_source="Explicit",
        distortions={"Global": ["Noise"]},
    )
    assert more.distortions == {"Global": ["Noise", "Blurs"]}


def test_distortions_the_model_only_guessed_are_detected_instead():
    plan = reconciled(
        "Rate this image.",
        distortions={"Global": ["Blurs", "Noise"]},
        plan={**ALL_ON, "distortion_detection": False},
    )
    assert plan.distortions is None and plan.distortion_source == "Inferred"
    assert plan.plan.distortion_detection is True


# -- "Other" queries get no executor subtask ----------------------------------------------------


def test_an_other_query_runs_no_executor_subtask():
    plan = reconciled("Does this photo evoke a nostalgic mood?", query_type="Other")
    assert flags(plan) == "0000"
    state = merge_state(initial_state("q", "x.png"), {"plan": plan, "steps_done": ["plan"]})
    assert next_step(state) == SUMMARIZE
    named = reconciled(
        "According to NIMA, how pleasing is this photo?", query_type="Other", required_tool="NIMA"
    )
    assert named.required_tool == "NIMA" and flags(named) == "0001"


# -- distortions are keyed on the scope -------------------------------------------------------


def test_distortions_keyed_global_go_to_the_scoped_objects():
    one = reconciled(
        "Is the dog's fur noisy?",
        query_scope=["dog's fur"],
        distortion_source="Explicit",
        distortions={"Global": ["Noise"]},
        plan={**ALL_ON, "tool_selection": False, "tool_execution": False},
    )
    assert one.distortions == {"dog's fur": ["Noise"]}
    state = merge_state(initial_state("q", "x.png"), {"plan": one, "steps_done": ["plan"]})
    assert next_step(state) == ANALYSE
    assert executor.distortion_set_for(one, None) == {"dog's fur": ["Noise"]}
    two = reconciled(
        "Is the car or the sky blurry?",
        query_scope=["car", "sky"],
        distortion_source="Explicit",
        distortions={"global": ["blur"]},
    )
    assert two.distortions == {"car": ["Blurs"], "sky": ["Blurs"]}
    keyed = reconciled(
        "Are the leaves of the plant blurry?",
        distortion_source="Explicit",
        distortions={"leaves": ["Blurs"]},
    )
    assert keyed.query_scope == ["leaves"] and keyed.distortions == {"leaves": ["Blurs"]}


# -- shape variants of a plan are read, not voided --------------------------------------------


def test_common_shape_variants_are_read():
    plan = PlannerOutput.model_validate(
        model_plan(
            distortions="None",
            required_tool=["BRISQUE"],
            query_scope="car, sky",
            plan=["distortion_detection", "tool_execution"],
        )
    )
    assert plan.distortions is None and plan.required_tool == "BRISQUE"
    assert plan.query_scope == ["car", "sky"] and flags(plan) == "1001"
    assert PlannerOutput.model_validate(
        model_plan(query_scope="the car and the sky")
    ).query_scope == ["the car", "the sky"]
    assert PlannerOutput.model_validate(model_plan(distortions=["blur", "noise"])).distortions == {
        "Global": ["Blurs", "Noise"]
    }


def test_json_with_comments_is_read_whole():
    reply = """```json
{
  "query_type": "IQA", // a technical question
  "url": "http://example.org/a//b", /* not a comment inside a string */
  "plan": {"distortion_detection": false}  // flags
}
```"""
    assert extract_json_object(reply) == {
        "query_type": "IQA",
        "url": "http://example.org/a//b",
        "plan": {"distortion_detection": False},
    }


# -- the graded corpus -------------------------------------------------------------------------


def test_the_planner_corpus_gives_the_plans_a_human_derives():
    assert len(CORPUS) >= 40
    differing = {
        item.name: found for item in CORPUS if (found := differences(item, read(item, TOOLS)))
    }
    share = 1 - len(differing) / len(CORPUS)
    report = "\n".join(f"{name}: {found}" for name, found in differing.items())
    print(
        f"planner corpus: {len(CORPUS) - len(differing)}/{len(CORPUS)} plans as graded "
        f"({share:.1%}); differing:\n{report}"
    )
    assert share >= 0.90, report
