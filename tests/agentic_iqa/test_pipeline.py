"""The whole agent in one process with the builtin backend, on a real photo."""

from __future__ import annotations

import json
import math

import pytest

from agentic_iqa.agents.team import Agents
from agentic_iqa.pipeline import (
    ANALYSE,
    DETECT,
    EXECUTE,
    PLAN,
    REPLAN,
    SELECT,
    SUMMARIZE,
    next_step,
    run_inprocess,
    run_step,
    tool_step_cached,
)
from agentic_iqa.state import (
    PlannerOutput,
    SummarizerOutput,
    initial_state,
    merge_state,
    state_from_json,
    state_to_json,
)
from agentic_iqa.vlm.base import VLMRequest, VLMResponse
from agentic_iqa.vlm.builtin import BuiltinClient
from agentic_iqa.vocabulary import QUALITY_LEVELS
from iqa_tools import ToolRegistry, ToolSettings
from iqa_tools.catalog import load_catalog
from iqa_tools.images import read_image
from tests.agentic_iqa.conftest import always_nan_catalog

SEVERITY = ["none", "slight", "moderate", "severe", "extreme"]


def severity_of(state, distortion: str) -> int:
    items = state["executor_evidence"].distortion_analysis
    return max(
        SEVERITY.index(i.severity) for per in items.values() for i in per if i.type == distortion
    )


def test_blurred_copy_is_detected_as_blur_more_severe_than_the_original(
    builtin_agents, example_images
):
    query = "What distortions affect this image?"
    blurred = run_inprocess(query, str(example_images["blur3"]), agents=builtin_agents)
    original = run_inprocess(query, str(example_images["original"]), agents=builtin_agents)
    assert blurred["plan"].plan.distortion_detection
    assert "Blurs" in blurred["executor_evidence"].distortion_set["Global"]
    assert blurred["executor_evidence"].distortion_set["Global"][0] == "Blurs"
    original_blur = (
        severity_of(original, "Blurs")
        if "Blurs" in original["executor_evidence"].distortion_set["Global"]
        else 0
    )
    assert severity_of(blurred, "Blurs") > original_blur


def test_full_reference_query_selects_full_reference_tools(builtin_agents, example_images):
    state = run_inprocess(
        "How good is the quality compared with the reference?",
        str(example_images["blur3"]),
        str(example_images["original"]),
        agents=builtin_agents,
    )
    assert state["plan"].reference_mode == "Full-Reference"
    selected = state["executor_evidence"].selected_tools
    catalog = load_catalog()
    tools = {tool for per in selected.values() for tool in per.values()}
    assert tools and all(catalog.get(tool).type == "FR" for tool in tools)
    logs = state["executor_evidence"].tool_logs
    assert logs and all(not log.fallback for log in logs)


def test_aesthetic_question_is_other_with_every_flag_off(builtin_agents, example_images):
    state = run_inprocess(
        "Is this photo aesthetically pleasing?",
        str(example_images["original"]),
        agents=builtin_agents,
    )
    plan = state["plan"]
    assert plan.query_type == "Other"
    assert not any(plan.plan.model_dump().values())
    assert state["steps_done"] == [PLAN, SUMMARIZE]
    assert state["executor_evidence"].tool_logs == []
    assert "taste" in state["summarizer_result"].final_answer


def test_named_tool_is_used_without_selection(builtin_agents, example_images):
    state = run_inprocess(
        "Use SSIM to judge this image against the reference.",
        str(example_images["jpeg4"]),
        str(example_images["original"]),
        agents=builtin_agents,
    )
    plan = state["plan"]
    assert plan.required_tool == "SSIM"
    assert plan.plan.tool_selection is False and plan.plan.tool_execution is True
    assert SELECT not in state["steps_done"]
    assert state["executor_evidence"].selected_tools is None
    assert {log.tool_name for log in state["executor_evidence"].tool_logs} == {"SSIM"}


def test_scoring_mode_ranks_a_heavily_degraded_copy_below_the_original(
    builtin_agents, example_images
):
    scores = {}
    for name in ("original", "blur4", "noise3"):
        state = run_inprocess(
            "Rate the quality of this image.", str(example_images[name]), agents=builtin_agents
        )
        result = state["summarizer_result"]
        assert 1.0 <= result.quality_score <= 5.0
        assert sum(result.level_distribution.values()) == pytest.approx(1.0)
        assert result.probability_source == "builtin-measurements"
        assert result.final_answer in {"Bad", "Poor", "Fair", "Good", "Excellent"}
        scores[name] = result.quality_score
    assert scores["blur4"] < scores["original"]
    assert scores["noise3"] < scores["original"]


def test_multiple_choice_about_the_distortion_type(builtin_agents, example_images):
    query = "Which distortion is most severe? A. Noise B. Blur C. JPEG compression D. Darkness"
    answers = {
        name: run_inprocess(query, str(example_images[name]), agents=builtin_agents)[
            "summarizer_result"
        ].final_answer
        for name in ("blur3", "noise3", "jpeg4")
    }
    assert answers == {"blur3": "B", "noise3": "A", "jpeg4": "C"}


def test_final_state_crosses_a_process_boundary_as_json(builtin_agents, example_images):
    state = run_inprocess("Rate this image.", str(example_images["noise3"]), agents=builtin_agents)
    again = state_from_json(state_to_json(state))
    assert again == state
    assert json.loads(state_to_json(state))["summarizer_result"]["quality_score"] == pytest.approx(
        state["summarizer_result"].quality_score
    )


def test_next_step_follows_the_plan_flags():
    state = initial_state("q", "x.png")
    assert next_step(state) == PLAN
    plan = PlannerOutput.model_validate(
        {
            "query_type": "IQA",
            "query_scope": ["car"],
            "distortion_source": "Explicit",
            "distortions": {"car": ["Blurs"]},
            "reference_mode": "No-Reference",
            "required_tool": None,
            "plan": {
                "distortion_detection": False,
                "distortion_analysis": True,
                "tool_selection": False,
                "tool_execution": False,
            },
        }
    )
    state = merge_state(state, {"plan": plan, "steps_done": [PLAN]})
    assert next_step(state) == ANALYSE
    state = merge_state(state, {"steps_done": [PLAN, ANALYSE]})
    assert next_step(state) == SUMMARIZE
    replan = SummarizerOutput(
        final_answer="?",
        quality_reasoning="x",
        need_replan=True,
        replan_reason="Missing tool scores for car",
    )
    state = merge_state(
        state, {"steps_done": [PLAN, ANALYSE, SUMMARIZE], "summarizer_result": replan}
    )
    assert next_step(state) == REPLAN
    assert next_step(merge_state(state, {"iteration_count": 2})) is None
    assert DETECT not in state["steps_done"] and EXECUTE not in state["steps_done"]


@pytest.mark.parametrize("bound", [0, 1, 2])
def test_tools_that_fail_are_not_replanned_and_the_summarizer_answers_from_what_there_is(
    bound, example_images
):
    """The only NR tool returns NaN and nothing can replace it: a new plan would fail the same
    way, so no replan; the summarizer answers at once from the image, saying what is missing
    (not "Unable to determine" after replanning to the bound)."""
    registry = ToolRegistry(
        ToolSettings(device="cpu", tool_cache="memory", fallback_chain=[]),
        catalog=always_nan_catalog(),
    )
    client = BuiltinClient()
    agents = Agents(planner=client, executor=client, summarizer=client, registry=registry)
    state = run_inprocess(
        "Rate this image using Broken.",
        str(example_images["original"]),
        agents=agents,
        max_replan_iterations=bound,
    )
    assert state["iteration_count"] == 0 and state["replan_history"] == []
    result = state["summarizer_result"]
    assert not result.need_replan and result.final_answer in QUALITY_LEVELS
    assert result.quality_score is not None
    assert "Missing tool scores for Global" in result.quality_reasoning
    logs = state["executor_evidence"].tool_logs
    assert logs and all(math.isnan(log.normalized_score) and log.error for log in logs)


class ScriptedPlanner(BuiltinClient):
    """The builtin agent, except that every plan is ``plan``."""

    def __init__(self, plan: dict) -> None:
        super().__init__()
        self.plan = plan

    def complete(self, request: VLMRequest) -> VLMResponse:
        if request.task == "plan":
            return VLMResponse(text=json.dumps(self.plan), model=self.model)
        return super().complete(request)


def test_evidence_a_new_plan_can_supply_is_replanned_for_then_the_summarizer_answers(
    builtin_agents, example_images
):
    """Scores for the right half are missing because the plan ran no tool on its crop: a new
    plan may, so the run replans to the bound; then the summarizer is asked with what there is
    and its answer stands (not "Unable to determine" without asking)."""
    plan = {
        "query_type": "IQA",
        "query_scope": ["left half", "right half"],
        "distortion_source": "Explicit",
        "distortions": {"left half": ["Blurs"]},
        "reference_mode": "No-Reference",
        "required_tool": "PIQE",
        "plan": {
            "distortion_detection": False,
            "distortion_analysis": True,
            "tool_selection": False,
            "tool_execution": True,
        },
    }
    client = ScriptedPlanner(plan)
    agents = Agents(
        planner=client,
        executor=builtin_agents.executor,
        summarizer=builtin_agents.summarizer,
        registry=builtin_agents.registry,
    )
    state = run_inprocess(
        "Are the left half and the right half blurry? A. Yes B. No",
        str(example_images["blur3"]),
        agents=agents,
        max_replan_iterations=2,
    )
    assert [entry.reason for entry in state["replan_history"]] == [
        "Missing tool scores for right half"
    ] * 2
    result = state["summarizer_result"]
    assert not result.need_replan and result.final_answer in {"A", "B"}
    assert "Missing tool scores for right half" in result.quality_reasoning


def test_a_whole_image_score_answers_every_object_and_no_replan_is_made(
    builtin_agents, example_images
):
    """The same plan for objects: the tool run for the car scores the whole image, which is
    all any plan could give the sky, so nothing is missing and no replan is made."""
    plan = {
        "query_type": "IQA",
        "query_scope": ["car", "sky"],
        "distortion_source": "Explicit",
        "distortions": {"car": ["Blurs"]},
        "reference_mode": "No-Reference",
        "required_tool": "PIQE",
        "plan": {
            "distortion_detection": False,
            "distortion_analysis": True,
            "tool_selection": False,
            "tool_execution": True,
        },
    }
    client = ScriptedPlanner(plan)
    agents = Agents(
        planner=client,
        executor=builtin_agents.executor,
        summarizer=builtin_agents.summarizer,
        registry=builtin_agents.registry,
    )
    state = run_inprocess(
        "Are the car and the sky blurry? A. Yes B. No",
        str(example_images["blur3"]),
        agents=agents,
        max_replan_iterations=2,
    )
    evidence = state["executor_evidence"]
    assert state["replan_history"] == [] and state["iteration_count"] == 0
    assert list(evidence.quality_scores) == ["Global"]
    assert [(entry.object_name, entry.requested_for) for entry in evidence.tool_logs] == [
        ("Global", ["car"])
    ]
    assert state["summarizer_result"].final_answer in {"A", "B"}


@pytest.fixture
def unreadable(tmp_path):
    """A truncated JPEG, a 1x1 PNG, and a good photo with a reference of another size."""
    import io

    from PIL import Image

    from tests.conftest import natural_image

    buffer = io.BytesIO()
    Image.fromarray(natural_image()).save(buffer, format="JPEG", quality=90)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    tiny = tmp_path / "tiny.png"
    Image.new("RGB", (1, 1), (90, 90, 90)).save(tiny)
    small_reference = tmp_path / "ref.png"
    Image.fromarray(natural_image(size=(128, 96))).save(small_reference)
    return {"cut": cut, "tiny": tiny, "ref": small_reference}


def test_inputs_no_tool_can_read_fail_the_run_before_planning(
    builtin_agents, unreadable, example_images
):
    from iqa_tools.images import MIN_IMAGE_SIDE

    cases = {
        "cut": (str(unreadable["cut"]), None, "corrupt or truncated image data"),
        "tiny": (
            str(unreadable["tiny"]),
            None,
            f"is 1x1 pixels; the IQA tools need at least {MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE}",
        ),
        "tiny reference": (
            str(example_images["original"]),
            str(unreadable["tiny"]),
            "is 1x1 pixels",
        ),
        "other size": (
            str(example_images["original"]),
            str(unreadable["ref"]),
            "is 128x96 pixels but the image",
        ),
    }
    for name, (image, reference, expected) in cases.items():
        state = run_inprocess(
            "Rate the quality of this image.", image, reference, agents=builtin_agents
        )
        assert expected in state["error"], name
        assert "plan" not in state and "summarizer_result" not in state, name
        assert state.get("replan_history", []) == [] and state.get("steps_done", []) == []


def test_a_stored_run_on_an_unreadable_image_fails_with_the_reason(
    builtin_agents, unreadable, tmp_path
):
    from agentic_iqa.db import upgrade
    from agentic_iqa.db.engine import make_engine, session_scope
    from agentic_iqa.db.runs import get_run
    from agentic_iqa.runtime import embedded, service

    url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    upgrade(url)
    engine = make_engine(url)
    run_id = service.create_run(engine, "Rate the quality of this image.", str(unreadable["tiny"]))
    state = embedded.run_embedded(engine, builtin_agents, run_id)
    with session_scope(engine) as session:
        run = get_run(session, run_id)
        status, error, answer = run.status, run.error, run.final_answer
    assert (status, answer) == ("failed", None)
    assert "tiny.png" in error and "is 1x1 pixels" in error
    assert state["error"] == error and "plan" not in state


def _up_to_the_tool_step(query: str, image: str, agents: Agents, reference: str | None = None):
    state = initial_state(query, image, reference)
    while next_step(state) != EXECUTE:
        step = next_step(state)
        assert step is not None, "the plan never reached the tool step"
        state = merge_state(state, run_step(step, state, agents))
    return state


def test_a_tool_step_counts_as_cached_only_when_every_call_it_makes_is(example_images):
    """What lets a worker without tools run a tool step: all of its scores are in the cache,
    for these very files; one uncached call, or a call it cannot foresee, says no."""
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="memory"))
    client = BuiltinClient()
    agents = Agents(planner=client, executor=client, summarizer=client, registry=registry)
    state = _up_to_the_tool_step(
        "Rate this image using PIQE.", str(example_images["noise3"]), agents
    )
    assert tool_step_cached(state, registry) is False  # nothing scored yet
    run_step(EXECUTE, state, agents)  # scores (and caches) the step's call
    assert tool_step_cached(state, registry) is True
    # The key is the files' content, not their names: a copy is cached, another image is not.
    copy = example_images["noise3"].with_name("copy-of-noise3.png")
    copy.write_bytes(example_images["noise3"].read_bytes())
    assert tool_step_cached(dict(state, image_path=str(copy)), registry) is True
    other = dict(state, image_path=str(example_images["blur3"]))
    assert tool_step_cached(other, registry) is False
    # Not at the tool step (done already): nothing to foresee.
    done = merge_state(state, run_step(EXECUTE, state, agents))
    assert next_step(done) != EXECUTE and tool_step_cached(done, registry) is False
    # A missing file is for the tool worker to report, not for this check.
    gone = dict(state, image_path=str(example_images["noise3"].with_name("gone.png")))
    assert tool_step_cached(gone, registry) is False


def test_one_uncached_call_of_a_metric_step_is_enough_to_send_it(example_images):
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="memory"))
    image, reference = str(example_images["jpeg4"]), str(example_images["original"])
    state = initial_state("metrics", image, reference, metric_tools=["PSNR", "SSIM"])
    assert next_step(state) == EXECUTE
    registry.execute_tool("PSNR", image, reference)
    assert tool_step_cached(state, registry) is False  # SSIM is not scored yet
    registry.execute_tool("SSIM", image, reference)
    assert tool_step_cached(state, registry) is True
    # The reference is part of the key: the same target against another reference is not.
    assert (
        tool_step_cached(dict(state, reference_path=str(example_images["blur3"])), registry)
        is False
    )


def test_a_full_reference_tool_without_a_reference_is_never_cached(example_images):
    """Its step falls back to another tool, which the check cannot foresee."""
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="memory"))
    client = BuiltinClient()
    agents = Agents(planner=client, executor=client, summarizer=client, registry=registry)
    state = _up_to_the_tool_step(
        "Rate this image using SSIM.", str(example_images["blur3"]), agents
    )
    logs = run_step(EXECUTE, state, agents)["executor_evidence"].tool_logs
    used = {log.tool_name for log in logs}
    assert "SSIM" not in used and used  # an NR tool stood in, and its score is cached ...
    image = read_image(example_images["blur3"])
    assert all(registry.cached_score(tool, image) is not None for tool in used)
    assert tool_step_cached(state, registry) is False  # ... but the step is still not foreseen
