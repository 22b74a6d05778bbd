"""Object evidence is what it says: a tool score is never presented as an object's.

Tools cannot locate "the car", so a tool run for objects scores the whole image, once per
distortion, filed under "Global" and labelled so in the evidence, the summarizer's prompt and
every output.  A region the query names by position ("the left half") is a known box: its tool
score is measured on its crop.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from rich.console import Console
from typer.testing import CliRunner

from agentic_iqa.agents import executor
from agentic_iqa.cli import app
from agentic_iqa.cli.render import render_state
from agentic_iqa.pipeline import (
    EXECUTE,
    Agents,
    next_step,
    run_inprocess,
    run_step,
    tool_step_cached,
)
from agentic_iqa.query import region_of
from agentic_iqa.state import (
    initial_state,
    merge_state,
    missing_evidence,
    replan_can_supply,
    state_from_json,
    state_to_json,
    whole_image_objects,
)
from agentic_iqa.vlm import BackendConfig, create_client
from agentic_iqa.vlm.builtin import BuiltinClient
from iqa_tools import ToolRegistry, ToolSettings
from iqa_tools.images import read_image
from tests.agentic_iqa.conftest import EXAMPLE
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Recorded, Reply, openai_completion

OBJECTS = "Is the car or the sky sharper? Use PIQE."
REGIONS = "Which is noisier, the left half or the right half? Use PIQE."
runner = CliRunner()


def _text(state: Any) -> str:
    console = Console(record=True, width=240, force_terminal=False)
    render_state(state, console)
    return console.export_text()


@pytest.fixture(scope="module")
def objects_run(builtin_agents: Agents) -> dict[str, Any]:
    return run_inprocess(OBJECTS, str(EXAMPLE), agents=builtin_agents)


# -- the builtin backend, end to end --------------------------------------------------------


def test_no_object_is_given_a_tool_score_of_its_own(objects_run):
    state = objects_run
    objects = list(state["plan"].query_scope)
    evidence = state["executor_evidence"]
    assert len(objects) == 2 and objects[0] == "car"
    assert list(evidence.quality_scores) == ["Global"]
    distortions = [entry.distortion for entry in evidence.tool_logs]
    # once per distortion, not once per object with the number copied
    assert (
        sorted(distortions) == sorted(set(distortions)) == sorted(evidence.quality_scores["Global"])
    )
    assert {entry.object_name for entry in evidence.tool_logs} == {"Global"}
    assert all(entry.region is None for entry in evidence.tool_logs)
    distortion_set = executor.distortion_set_for(state["plan"], evidence.distortion_set)
    assert set(distortions) == {kind for key in objects for kind in distortion_set[key]}
    for entry in evidence.tool_logs:
        asked = [key for key in objects if entry.distortion in distortion_set[key]]
        assert sorted(entry.requested_for) == sorted(asked)


def test_the_evidence_and_the_answer_say_the_score_is_the_whole_images(objects_run):
    state = objects_run
    objects = list(state["plan"].query_scope)
    reasoning = state["summarizer_result"].quality_reasoning
    assert not any(f"PIQE rates {key}" in reasoning for key in objects)
    assert "PIQE rates the whole image" in reasoning
    assert f"no tool measured {objects[0]} or {objects[1]} on its own" in reasoning
    notes = state["executor_evidence"].notes
    assert any(
        f"no tool measured {objects[0]} and {objects[1]} on their own" in note for note in notes
    )
    assert executor.whole_image_note(objects) in notes


def test_assess_output_labels_the_score_as_the_whole_images(objects_run):
    text = _text(objects_run)
    objects = list(objects_run["plan"].query_scope)
    rows = [line for line in text.splitlines() if "PIQE" in line and "│" in line]
    assert rows and all(
        re.search(rf"│ whole image\s+│ {re.escape(', '.join(objects))}\s+│", row) for row in rows
    )
    assert "Note: tool execution: the tool scores are the whole image's (Global)" in " ".join(
        text.split()
    )


# -- a remote model, through the local fake server ------------------------------------------

PLAN = {
    "query_type": "IQA",
    "query_scope": ["car", "sky"],
    "distortion_source": "Explicit",
    "distortions": {"car": ["Blurs"], "sky": ["Blurs"]},
    "reference_mode": "No-Reference",
    "required_tool": "PIQE",
    "plan": {
        "distortion_detection": False,
        "distortion_analysis": True,
        "tool_selection": False,
        "tool_execution": True,
    },
}
ANALYSIS = {
    "distortion_analysis": {
        "car": [
            {"type": "Blurs", "severity": "slight", "explanation": "the car's edges are crisp"}
        ],
        "sky": [{"type": "Blurs", "severity": "moderate", "explanation": "the sky is soft"}],
    }
}
ANSWER = {
    "final_answer": "The car",
    "quality_reasoning": "its edges are crisper",
    "need_replan": False,
    "replan_reason": None,
}


def _system(recorded: Recorded) -> str:
    return next(m["content"] for m in recorded.body["messages"] if m["role"] == "system")


def _user(recorded: Recorded) -> str:
    content = next(m["content"] for m in recorded.body["messages"] if m["role"] == "user")
    return (
        content
        if isinstance(content, str)
        else " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    )


def _respond(recorded: Recorded) -> Reply:
    system = _system(recorded)
    body = PLAN if "planner" in system else ANALYSIS if "distortion analysis" in system else ANSWER
    return Reply(200, openai_completion(json.dumps(body)))


def test_a_remote_summarizer_is_told_the_tool_score_is_the_whole_images(monkeypatch, registry):
    monkeypatch.setenv("TEST_VLM_KEY", "sk-test-objects")
    monkeypatch.setenv("AGENTIC_IQA_VLM_CACHE", "false")
    with FakeAPIServer(_respond) as server:
        config = BackendConfig(
            backend="openai",
            model="qwen2.5-vl",
            base_url=f"{server.url}/v1",
            api_key_env="TEST_VLM_KEY",
            timeout=5,
            max_retries=1,
        )
        clients = {
            role: create_client(role, {role: config})
            for role in ("planner", "executor", "summarizer")
        }
        agents = Agents(registry=registry, **clients)
        state = run_inprocess(OBJECTS, str(EXAMPLE), agents=agents)
        summaries = [r for r in server.requests if "summarizer" in _system(r)]
    evidence = state["executor_evidence"]
    whole = registry.execute_tool("PIQE", read_image(EXAMPLE)).normalized_score
    assert evidence.quality_scores == {"Global": {"Blurs": ("PIQE", whole)}}
    assert [(e.object_name, e.distortion, e.requested_for) for e in evidence.tool_logs] == [
        ("Global", "Blurs", ["car", "sky"])
    ]
    assert state["replan_history"] == [] and len(summaries) == 1
    prompt = _user(summaries[0])
    assert 'Tool scores (1-5): {"Global": {"Blurs": ["PIQE"' in prompt
    assert '"car": {"Blurs"' not in prompt and '"sky": {"Blurs"' not in prompt
    assert "the tool scores are the whole image's (Global)" in prompt
    assert "no tool measured car and sky on their own: judge car and sky from the image" in prompt
    assert state["summarizer_result"].final_answer == "The car"


# -- regions named by position: a known box, scored on its crop -----------------------------


def test_a_region_is_scored_on_its_crop(builtin_agents, registry, tmp_path):
    state = run_inprocess(REGIONS, str(EXAMPLE), agents=builtin_agents)
    scope = list(state["plan"].query_scope)
    evidence = state["executor_evidence"]
    assert sorted(evidence.quality_scores) == sorted(scope) == ["left half", "right half"]
    photo = Image.open(EXAMPLE).convert("RGB")
    for entry in evidence.tool_logs:
        region = region_of(entry.object_name, REGIONS)
        assert region is not None
        crop = tmp_path / f"{entry.object_name}.png"
        photo.crop(region.pixels(*photo.size)).save(crop)
        # the score of that part as a file of its own: the crop, not the whole image
        alone = registry.execute_tool("PIQE", read_image(crop), use_cache=False)
        assert entry.raw_score == pytest.approx(alone.raw_score, rel=1e-9)
        assert evidence.quality_scores[entry.object_name][entry.distortion] == (
            "PIQE",
            pytest.approx(alone.normalized_score),
        )
        assert entry.region == region.name and entry.requested_for == []
    left, right = (evidence.tool_logs[0].raw_score, evidence.tool_logs[1].raw_score)
    assert not math.isclose(left, right)
    assert "PIQE rates left half (its crop)" in state["summarizer_result"].quality_reasoning
    rows = [line for line in _text(state).splitlines() if "PIQE" in line and "│" in line]
    assert sorted(
        re.search(r"│ (\w+ half) \(crop\)\s+│ (\w+ half)\s+│", row).groups() for row in rows
    ) == [("left half", "left half"), ("right half", "right half")]


def test_a_tool_step_is_a_cache_read_only_when_the_crops_are_cached():
    """Scoring the whole image does not make a region's tool step a cache read."""
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="memory"))
    client = BuiltinClient()
    agents = Agents(planner=client, executor=client, summarizer=client, registry=registry)
    state = initial_state(REGIONS, str(EXAMPLE))
    while next_step(state) != EXECUTE:
        state = merge_state(state, run_step(next_step(state), state, agents))
    registry.execute_tool("PIQE", read_image(EXAMPLE))
    assert tool_step_cached(state, registry) is False
    state = merge_state(state, run_step(EXECUTE, state, agents))
    before = merge_state(state, {"steps_done": [s for s in state["steps_done"] if s != EXECUTE]})
    assert next_step(before) == EXECUTE and tool_step_cached(before, registry) is True


# -- the rule of the calls, over every shape of a selection ---------------------------------


@pytest.mark.parametrize(
    "selected",
    [
        {"car": {"Blurs": "PIQE"}, "sky": {"Blurs": "PIQE", "Noise": "NIQE"}},
        {"Global": {"Blurs": "QAlign"}, "car": {"Blurs": "PIQE"}},
        {"car": {"Blurs": "PIQE"}, "left half": {"Blurs": "PIQE"}, "sky": {"Noise": "PIQE"}},
        {"the centre": {"Contrast": "NIQE"}, "top-left corner": {"Contrast": "NIQE"}},
        {"tree": {"Blurs": "NIQE", "Noise": "NIQE"}, "person": {"Noise": "PIQE"}},
    ],
)
def test_objects_share_one_whole_image_call_per_distortion_and_regions_their_crops(selected):
    query = "Compare them: the left half, the centre and the top-left corner."
    notes: list[str] = []
    calls = executor.tool_calls(selected, query, notes)
    whole = [call for call in calls if call.region is None]
    crops = [call for call in calls if call.region is not None]
    assert all(call.key == "Global" for call in whole)
    assert len({call.distortion for call in whole}) == len(whole)
    for key, per in selected.items():
        region = None if key == "Global" else region_of(key, query)
        for distortion, tool in per.items():
            if region is not None:
                assert executor.ToolCall(key, distortion, tool, region) in crops
                continue
            (call,) = [c for c in whole if c.distortion == distortion]
            assert (key in call.requested_for) is (key != "Global")
            if call.tool != tool:
                assert any(f"({key}/{distortion}): {tool} not run" in note for note in notes)
    assert len(crops) == sum(
        len(per) for key, per in selected.items() if key != "Global" and region_of(key, query)
    )


# -- the evidence check, and stored runs ----------------------------------------------------


def test_a_whole_image_score_answers_every_object_and_asks_for_no_replan():
    plan = {"query_scope": ["car", "sky", "left half"], "plan": {"tool_execution": True}}
    whole = {"Global": {"Blurs": ["PIQE", 3.0]}}
    logs = [{"object_name": "Global", "requested_for": ["car", "sky"]}]
    assert missing_evidence(plan, whole, None) is None
    assert replan_can_supply(plan, None, logs) is False  # it failed: no plan does better
    assert whole_image_objects(plan, whole) == ["car", "sky", "left half"]
    assert whole_image_objects(plan, {**whole, "left half": {"Blurs": ["PIQE", 2.0]}}) == [
        "car",
        "sky",
    ]
    assert whole_image_objects(plan, {"left half": {"Blurs": ["PIQE", 2.0]}}) == []
    only_crop = {"query_scope": ["left half", "right half"], "plan": {"tool_execution": True}}
    assert (
        replan_can_supply(
            only_crop,
            {"left half": {"Blurs": ["PIQE", 2.0]}},
            [{"object_name": "left half", "requested_for": []}],
        )
        is True
    )


def test_a_run_stored_before_keeps_loading_and_its_scores_are_shown_as_the_whole_images(
    objects_run,
):
    """Old JSON filed the whole image's score under each object, without ``region`` or
    ``requested_for``: it loads, and every output says what was measured."""
    document = json.loads(state_to_json(objects_run))
    evidence = document["executor_evidence"]
    objects = list(objects_run["plan"].query_scope)
    (pair,) = evidence["quality_scores"]["Global"].items()
    evidence["quality_scores"] = {key: dict([pair]) for key in objects}
    logs = []
    for key in objects:
        entry = {
            k: v
            for k, v in evidence["tool_logs"][0].items()
            if k not in {"region", "requested_for"}
        }
        logs.append({**entry, "object_name": key})
    evidence["tool_logs"], evidence["notes"] = logs, []
    old = state_from_json(json.dumps(document))
    assert [entry.object_name for entry in old["executor_evidence"].tool_logs] == objects
    rows = [line for line in _text(old).splitlines() if "PIQE" in line and "│" in line]
    assert [re.search(r"│ whole image\s+│ ([\w ]+?)\s+│", row).group(1) for row in rows] == objects


# -- the stored outputs: runs show and the export -------------------------------------------


def test_runs_show_and_the_export_say_what_the_tools_scored(results, tmp_path):
    manifest = tmp_path / "items.csv"
    with manifest.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "image", "query"])
        writer.writerow(["objects", str(EXAMPLE), OBJECTS])
        writer.writerow(["regions", str(EXAMPLE), REGIONS])
    submitted = runner.invoke(app, ["eval", "submit", str(manifest), "--workers", "1"])
    assert submitted.exit_code == 0, submitted.output
    exported = runner.invoke(app, ["eval", "export", "--format", "jsonl", "-o", "-"])
    assert exported.exit_code == 0, exported.output
    rows = {row["item_id"]: row for row in map(json.loads, exported.stdout.splitlines())}
    assert rows["objects"]["scored_on"] == "whole image"
    assert rows["regions"]["scored_on"] == "left half (crop);right half (crop)"
    csv_rows = list(
        csv.DictReader(io.StringIO(runner.invoke(app, ["eval", "export", "-o", "-"]).stdout))
    )
    assert {row["item_id"]: row["scored_on"] for row in csv_rows} == {
        key: row["scored_on"] for key, row in rows.items()
    }
    shown = runner.invoke(app, ["runs", "show", "--item", "objects"])
    assert shown.exit_code == 0, shown.output
    table = [line for line in shown.stdout.splitlines() if "PIQE" in line and "│" in line]
    assert table and all(re.search(r"│ whole image\s+│ car, [\w ]+│", row) for row in table)
    assert "the tool scores are the whole image's (Global)" in " ".join(shown.stdout.split())
    details = json.loads(runner.invoke(app, ["runs", "show", "--item", "regions", "--json"]).stdout)
    assert sorted(
        (log["object"], log["region"], log["requested_for"]) for log in details["tool_logs"]
    ) == [("left half", "left half", []), ("right half", "right half", [])]


def test_a_crop_is_cached_under_its_own_key_and_never_decoded_for_it(registry):
    image = read_image(EXAMPLE)
    region = region_of("left half")
    assert region is not None
    (call,) = executor.tool_calls({"left half": {"Blurs": "PIQE"}})
    crop, _ = executor.call_images(call, image, None)
    assert crop.digest != image.digest and crop.header_size == (256, 384)
    assert "stored" not in image.__dict__  # the size came from the header
    registry.execute_tool("PIQE", crop)
    again, _ = executor.call_images(call, read_image(Path(EXAMPLE)), None)
    assert registry.cached_score("PIQE", again) is not None
    assert "stored" not in again.__dict__ and "stored" not in again.source.__dict__
