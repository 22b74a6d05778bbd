"""A tool the query names that the catalogue lacks ("IL-NIQE", "LPIPS-VGG+", "CLIP-IQA+") is never
another tool: the plan requires none and selects tools, whatever tool the model wrote; the
plan keeps the name; the answer says that it could not be used and which tools were chosen
instead.  A model that writes such a name (as required tool or in its selection) gets no
catalogue tool for it either."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentic_iqa.agents import executor
from agentic_iqa.agents.team import Agents
from agentic_iqa.evidence import uncatalogued_sentence
from agentic_iqa.pipeline import run_inprocess
from agentic_iqa.state import (
    PlannerOutput,
    initial_state,
    merge_state,
    state_from_json,
    state_to_json,
)
from agentic_iqa.vlm.base import VLMRequest, VLMResponse
from agentic_iqa.vlm.builtin import BuiltinClient
from iqa_tools import ToolRegistry, ToolSettings
from tests.agentic_iqa.agents.planner_corpus import ALL_ON, flags, model_plan, reconciled
from tests.conftest import REPO

BLURRED = REPO / "examples" / "i03_blurred.png"


@pytest.mark.parametrize(
    ("query", "reference", "written", "uncatalogued"),
    [
        ("Score this image with IL-NIQE.", False, "NIQE", "IL-NIQE"),
        ("Score this image with il niqe.", False, "NIQE", "il niqe"),
        ("How good is it by CLIP-IQA+?", False, "CLIPIQA", "CLIP-IQA+"),
        ("Compare it with the reference using LPIPS-VGG+.", True, "LPIPS", "LPIPS-VGG+"),
        ("Rate it with MUSIQ-AVA.", False, "MUSIQ", "MUSIQ-AVA"),
        ("Rate it with NIQE v2.", False, "NIQE", "NIQE v2"),
        ("Use CW-SSIM against the reference.", True, "SSIM", "CW-SSIM"),
    ],
)
def test_the_catalogue_tool_in_a_longer_name_is_not_required(
    query, reference, written, uncatalogued
):
    """The model read the shorter catalogue name and asked to run it without selection: the plan
    requires nothing, selects and runs tools, and keeps the name asked for."""
    plan = reconciled(
        query, reference, required_tool=written, plan={**ALL_ON, "tool_selection": False}
    )
    assert plan.required_tool is None
    assert plan.uncatalogued_tools == [uncatalogued]
    assert flags(plan) == "1111"


def test_a_region_question_naming_an_uncatalogued_tool_still_measures():
    """A region alone runs no tool; a tool asked for runs one, and one the catalogue lacks is
    replaced by the tools selected."""
    plan = reconciled(
        "Is the car blurry? Score it with LPIPS-VGG+.",
        True,
        query_scope=["car"],
        distortion_source="Explicit",
        distortions={"car": ["Blurs"]},
        required_tool="LPIPS",
        plan={**ALL_ON, "distortion_detection": False, "tool_selection": False},
    )
    assert plan.required_tool is None and plan.uncatalogued_tools == ["LPIPS-VGG+"]
    assert flags(plan) == "0111"
    alone = reconciled(
        "Is the car blurry?",
        query_scope=["car"],
        distortion_source="Explicit",
        distortions={"car": ["Blurs"]},
        plan={**ALL_ON, "distortion_detection": False, "tool_selection": False,
              "tool_execution": False},
    )  # fmt: skip
    assert flags(alone) == "0100" and alone.uncatalogued_tools == []


@pytest.mark.parametrize("written", ["IL-NIQE", "CLIP-IQA+", "LPIPS-VGG+", "MUSIQ-AVA", "NIQE v2"])
def test_a_model_writing_an_uncatalogued_tool_requires_none(written):
    """Read from the model's JSON alone (no query to reconcile with): no required tool, tools
    selected and run, the name kept."""
    plan = PlannerOutput.model_validate(
        model_plan(required_tool=written, plan={**ALL_ON, "tool_selection": False})
    )
    assert plan.required_tool is None
    assert plan.plan.tool_selection and plan.plan.tool_execution
    assert plan.uncatalogued_tools == [written]


def test_the_query_decides_which_names_are_kept():
    """A name the model wrote that the query does not name is dropped; the query's are kept."""
    plan = reconciled("Rate this image.", required_tool="IL-NIQE")
    assert plan.uncatalogued_tools == [] and plan.required_tool is None
    plan = reconciled("Use NIQE, not IL-NIQE.", required_tool="IL-NIQE")
    assert plan.required_tool == "NIQE" and plan.uncatalogued_tools == []


@pytest.mark.parametrize(
    ("written", "kept"),
    [("IL-NIQE", ["IL-NIQE"]), ("IL-NIQE, CLIP-IQA+", ["IL-NIQE", "CLIP-IQA+"]), (None, []),
     ("none", []), (7, []), ({"tool": "IL-NIQE"}, []), (["IL-NIQE", 3, " "], ["IL-NIQE"])],
)  # fmt: skip
def test_a_models_own_uncatalogued_tools_field_never_voids_its_plan(written, kept):
    plan = PlannerOutput.model_validate(model_plan(uncatalogued_tools=written))
    assert plan.uncatalogued_tools == kept


def test_a_stored_plan_without_uncatalogued_tools_still_loads():
    written = PlannerOutput.model_validate(model_plan()).model_dump(mode="json")
    del written["uncatalogued_tools"]
    state = merge_state(
        initial_state("q", "x.png"),
        {"plan": PlannerOutput.model_validate(written), "steps_done": ["plan"]},
    )
    assert state_from_json(state_to_json(state))["plan"].uncatalogued_tools == []


class Choosing:
    """An executor model that chooses ``tool`` for every distortion."""

    backend, model = "stub", "stub"

    def __init__(self, tool: str) -> None:
        self.tool = tool

    def complete(self, request: VLMRequest) -> VLMResponse:
        keys = request.context["distortion_set"]
        chosen = {key: {d: self.tool for d in values} for key, values in keys.items()}
        return VLMResponse(json.dumps({"selected_tools": chosen}), self.model)


def test_a_selection_naming_an_uncatalogued_tool_is_not_run_as_the_catalogues(registry):
    notes: list[str] = []
    selected = executor.select_tools(
        Choosing("CLIP-IQA+"), registry, "q", {"Global": ["Noise"]}, "No-Reference", notes=notes
    )
    assert selected is not None and selected["Global"]["Noise"] != "CLIPIQA"
    assert any("'CLIP-IQA+' is no tool of the catalogue" in note for note in notes), notes
    notes.clear()
    kept = executor.select_tools(
        Choosing("piqe"), registry, "q", {"Global": ["Noise"]}, "No-Reference", notes=notes
    )
    assert kept == {"Global": {"Noise": "PIQE"}} and not notes


def test_the_answer_says_which_tool_could_not_be_used_and_what_ran_instead(weights_dir: Path):
    """The whole run, offline: the answer's reasoning names IL-NIQE, why it was not used, and the
    tools that measured the image; NIQE is not run as IL-NIQE."""
    registry = ToolRegistry(
        ToolSettings(device="cpu", tool_cache="memory", weights_dir=weights_dir)
    )
    client = BuiltinClient()
    agents = Agents(planner=client, executor=client, summarizer=client, registry=registry)
    state = run_inprocess("Score this image with IL-NIQE.", str(BLURRED), agents=agents)
    plan = state["plan"]
    assert plan.required_tool is None and plan.uncatalogued_tools == ["IL-NIQE"]
    logs = state["executor_evidence"].tool_logs
    assert logs and not any(entry.requested_tool == "NIQE" for entry in logs)
    ran = ", ".join(dict.fromkeys(entry.tool_name for entry in logs))
    reasoning = state["summarizer_result"].quality_reasoning
    assert reasoning.endswith(
        f"IL-NIQE is not in the tool catalogue, so it could not be used; the tools were "
        f"chosen instead ({ran})."
    )
    named = run_inprocess("Score this image with NIQE.", str(BLURRED), agents=agents)
    assert named["plan"].required_tool == "NIQE"
    assert "not in the tool catalogue" not in named["summarizer_result"].quality_reasoning


def test_the_sentence_names_every_tool_and_what_scored():
    logs = [
        {"tool_name": "BRISQUE", "normalized_score": 2.5},
        {"tool_name": "MUSIQ", "normalized_score": float("nan")},
        {"tool_name": "PIQE", "normalized_score": 3.0},
        {"tool_name": "BRISQUE", "normalized_score": 2.0},
    ]
    assert uncatalogued_sentence([], logs) is None
    assert uncatalogued_sentence(["IL-NIQE", "LPIPS-VGG"], logs) == (
        "IL-NIQE and LPIPS-VGG are not in the tool catalogue, so they could not be used; the "
        "tools were chosen instead (BRISQUE, PIQE)."
    )
    assert uncatalogued_sentence(["CLIP-IQA+"]) == (
        "CLIP-IQA+ is not in the tool catalogue, so it could not be used; no tool was run in "
        "its place."
    )
