"""Evidence, not gates: every executor subtask keeps what is usable in a model's
reply and notes the rest; a reply is asked again only when nothing in it is usable; and the
summarizer always gets its turn, told what is missing, with its answer standing."""

from __future__ import annotations

import json

import pytest

from agentic_iqa.agents import executor
from agentic_iqa.agents.summarizer import summarize
from agentic_iqa.pipeline import Agents, run_inprocess
from agentic_iqa.state import (
    ExecutorOutput,
    missing_evidence,
    replan_can_supply,
    state_from_json,
    state_to_json,
)
from agentic_iqa.vlm.builtin import selection as builtin_selection
from tests.agentic_iqa.remote import answer_reply, client_for, plan_for
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Recorded, Reply, openai_completion


def replies(*documents: dict) -> list[Reply]:
    return [Reply(200, openai_completion(json.dumps(document))) for document in documents]


def item(kind: str, severity: str = "moderate") -> dict[str, str]:
    return {"type": kind, "severity": severity, "explanation": f"{kind} is {severity}"}


def analyse(srv, monkeypatch, image, distortion_set, notes=None):
    return executor.analyse_distortions(
        client_for(srv, monkeypatch), "Is it blurry?", image, None, distortion_set, notes=notes
    )


# -- distortion analysis ----------------------------------------------------------------------


def test_an_analysis_of_one_type_more_than_asked_is_kept_in_one_call(monkeypatch, example_images):
    """Asked for "Blurs", a reply analysing "Blurs" and "Noise" is kept in one call, not
    rejected three times with the analysis null."""
    notes: list[str] = []
    with FakeAPIServer() as srv:
        srv.enqueue(*replies({"distortion_analysis": {"Global": [item("Blurs"), item("Noise")]}}))
        result = analyse(
            srv, monkeypatch, str(example_images["original"]), {"Global": ["Blurs"]}, notes
        )
        calls = len(srv.requests)
    assert calls == 1
    assert [entry.type for entry in result["Global"]] == ["Blurs", "Noise"]
    assert any("Noise analysed too" in note for note in notes)


def test_an_analysis_of_one_type_fewer_is_kept_and_the_missing_type_noted(
    monkeypatch, example_images
):
    notes: list[str] = []
    with FakeAPIServer() as srv:
        srv.enqueue(*replies({"distortion_analysis": {"Global": [item("Blurs")]}}))
        result = analyse(
            srv, monkeypatch, str(example_images["original"]), {"Global": ["Blurs", "Noise"]}, notes
        )
        calls = len(srv.requests)
    assert calls == 1 and [entry.type for entry in result["Global"]] == ["Blurs"]
    assert "distortion analysis (Global): Noise not analysed" in notes


def test_unreadable_and_off_list_analysis_items_are_dropped_the_rest_kept(
    monkeypatch, example_images
):
    reply = {
        "distortion_analysis": {
            "Global": [
                item("lens flare"),
                {"type": "Blurs", "severity": "kind of"},
                item("blurry", "High"),
                item("Noise"),
            ]
        }
    }
    notes: list[str] = []
    with FakeAPIServer() as srv:
        srv.enqueue(*replies(reply))
        result = analyse(
            srv, monkeypatch, str(example_images["original"]), {"Global": ["Blurs", "Noise"]}, notes
        )
    assert [(e.type, e.severity) for e in result["Global"]] == [
        ("Blurs", "severe"),
        ("Noise", "moderate"),
    ]
    assert sum("dropped" in note for note in notes) == 2


def test_an_analysis_with_nothing_usable_is_asked_again(monkeypatch, example_images):
    with FakeAPIServer() as srv:
        srv.enqueue(
            *replies(
                {"distortion_analysis": {"Global": [item("lens flare")]}},
                {"distortion_analysis": {"Global": [item("Blurs")]}},
            )
        )
        result = analyse(srv, monkeypatch, str(example_images["original"]), {"Global": ["Blurs"]})
        calls = len(srv.requests)
    assert calls == 2 and [entry.type for entry in result["Global"]] == ["Blurs"]


def test_analysis_keys_are_put_on_the_scope_with_the_whole_image_for_each_object(
    monkeypatch, example_images
):
    reply = {
        "distortion_analysis": {
            "the car": [item("Blurs")],
            "whole image": [item("Noise")],
            "tree": [item("Contrast")],
        }
    }
    notes: list[str] = []
    with FakeAPIServer() as srv:
        srv.enqueue(*replies(reply))
        result = analyse(
            srv,
            monkeypatch,
            str(example_images["original"]),
            {"car": ["Blurs"], "sky": ["Noise"]},
            notes,
        )
    assert {key: [e.type for e in entries] for key, entries in result.items()} == {
        "car": ["Blurs", "Noise"],
        "sky": ["Noise"],
    }
    assert any("'tree'" in note for note in notes)


# -- detection --------------------------------------------------------------------------------


def test_detected_categories_off_the_list_are_mapped_or_dropped_with_a_note(
    monkeypatch, example_images
):
    reply = {
        "distortion_set": {"Global": ["haze", "lens flare", "motion blur", "chromatic aberration"]}
    }
    notes: list[str] = []
    with FakeAPIServer() as srv:
        srv.enqueue(*replies(reply))
        result = executor.detect_distortions(
            client_for(srv, monkeypatch),
            "What is wrong with it?",
            str(example_images["original"]),
            None,
            plan_for(),
            notes=notes,
        )
        calls = len(srv.requests)
    assert calls == 1 and result == {"Global": ["Contrast", "Blurs"]}
    assert [note for note in notes if "no distortion category" in note] == [
        note for note in notes if "'lens flare'" in note or "'chromatic aberration'" in note
    ]
    assert len(notes) == 2


def test_a_detection_naming_only_off_list_categories_is_asked_again(monkeypatch, example_images):
    with FakeAPIServer() as srv:
        srv.enqueue(
            *replies({"distortion_set": {"Global": ["lens flare"]}}, {"distortion_set": ["noise"]})
        )  # no object level: the whole image
        result = executor.detect_distortions(
            client_for(srv, monkeypatch),
            "What is wrong with it?",
            str(example_images["original"]),
            None,
            plan_for(),
        )
        calls = len(srv.requests)
    assert calls == 2 and result == {"Global": ["Noise"]}


# -- tool selection ---------------------------------------------------------------------------


def select(srv, monkeypatch, registry, distortion_set, notes=None):
    return executor.select_tools(
        client_for(srv, monkeypatch),
        registry,
        "Rate it.",
        distortion_set,
        "No-Reference",
        notes=notes,
    )


def test_unknown_and_unoffered_tools_fall_back_per_distortion_only(monkeypatch, registry):
    offered = executor.tool_descriptions(registry, "No-Reference")
    name = offered[0]["name"]
    unoffered = next(
        spec.name
        for spec in registry.catalog
        if spec.type == "NR" and spec.name not in {t["name"] for t in offered}
    )
    reply = {
        "selected_tools": {
            "Global": {
                "Blurs": name.lower(),
                "Noise": "SuperIQA-v9",
                "Compression": unoffered.lower(),
            }
        }
    }
    notes: list[str] = []
    with FakeAPIServer() as srv:
        srv.enqueue(*replies(reply))
        result = select(
            srv,
            monkeypatch,
            registry,
            {"Global": ["Blurs", "Noise", "Compression", "Contrast"]},
            notes,
        )
        calls = len(srv.requests)
    best = builtin_selection.select(
        {"Global": ["Noise", "Compression", "Contrast"]}, offered, "No-Reference"
    )["Global"]
    assert calls == 1
    assert result == {
        "Global": {
            "Blurs": name,
            "Noise": best["Noise"],
            "Compression": best["Compression"],
            "Contrast": best["Contrast"],
        }
    }
    assert any("'SuperIQA-v9' is no tool of the catalogue" in note for note in notes)
    assert any(f"{unoffered} is not offered here" in note for note in notes)
    assert any("Global/Contrast): no tool given" in note for note in notes)


def test_a_selection_without_an_object_level_and_in_other_spellings_is_read(monkeypatch, registry):
    name = executor.tool_descriptions(registry, "No-Reference")[0]["name"]
    with FakeAPIServer() as srv:
        srv.enqueue(*replies({"selected_tools": {"blur": f"the {name} metric"}}))
        result = select(srv, monkeypatch, registry, {"car": ["Blurs"]})
    assert result == {"car": {"Blurs": name}}


def test_a_selection_is_asked_again_only_when_no_tool_per_distortion_can_be_read(
    monkeypatch, registry
):
    offered = executor.tool_descriptions(registry, "No-Reference")
    with FakeAPIServer() as srv:
        srv.enqueue(
            *replies(
                {"selected_tools": {"Global": {"lens flare": "PIQE"}}},
                {"selected_tools": {"Global": {"Blurs": "SuperIQA"}}},
            )
        )
        result = select(srv, monkeypatch, registry, {"Global": ["Blurs"]})
        calls = len(srv.requests)
    best = builtin_selection.select({"Global": ["Blurs"]}, offered, "No-Reference")
    assert calls == 2 and result == best


# -- the plan's keys and the evidence check ---------------------------------------------------


def test_the_plans_global_distortions_go_to_the_one_object_in_scope():
    plan = plan_for(["car"]).model_copy(update={"distortions": {"Global": ["Blurs"]}})
    assert executor.distortion_set_for(plan, None) == {"car": ["Blurs"]}


def test_whole_image_tool_scores_count_for_every_object_in_scope():
    plan = plan_for(["car", "sky"], distortion_analysis=False).model_dump(mode="json")
    assert missing_evidence(plan, {"Global": {"Blurs": ["PIQE", 3.0]}}, None) is None
    assert (
        missing_evidence(plan, {"car": {"Blurs": ["PIQE", 3.0]}}, None)
        == "Missing tool scores for sky"
    )


@pytest.mark.parametrize(
    ("scores", "logs", "supplied"),
    [
        ({"car": {"Blurs": ["PIQE", 3.0]}}, [{"object_name": "car"}], True),  # sky never measured
        (None, [{"object_name": "car"}, {"object_name": "sky"}], False),  # both failed
        (None, [{"object_name": "Global"}], False),  # the image failed
    ],
)
def test_a_replan_is_only_for_scores_a_new_plan_can_supply(scores, logs, supplied):
    plan = plan_for(["car", "sky"]).model_dump(mode="json")
    assert replan_can_supply(plan, scores, logs) is supplied


# -- the summarizer always gets its turn ------------------------------------------------------

MCQ = "Is this image blurry? A. Yes B. No"


def test_at_the_bound_a_replan_request_is_read_as_the_answer_it_comes_with(
    monkeypatch, example_images
):
    wants_more = {
        "final_answer": "(A) Yes",
        "quality_reasoning": "soft edges",
        "need_replan": True,
        "replan_reason": "want another tool",
    }
    evidence = ExecutorOutput(
        distortion_analysis={"Global": [item("Blurs")]},
        quality_scores={"Global": {"Blurs": ("PIQE", 2.0)}},
    )
    with FakeAPIServer() as srv:
        srv.enqueue(*replies(wants_more, wants_more))
        client = client_for(srv, monkeypatch)
        early = summarize(client, MCQ, str(example_images["original"]), None, plan_for(), evidence)
        last = summarize(
            client,
            MCQ,
            str(example_images["original"]),
            None,
            plan_for(),
            evidence,
            can_replan=False,
        )
    assert early.need_replan  # while replans are left the model may ask for one
    assert (last.final_answer, last.need_replan) == ("A", False)


def test_missing_analysis_is_told_to_the_model_and_its_answer_stands(monkeypatch, example_images):
    """An analysis the model could not write is not supplied by a new plan: no replan."""
    evidence = ExecutorOutput(
        quality_scores={"Global": {"Blurs": ("PIQE", 2.0)}},
        notes=["distortion analysis: no usable reply after 3 attempts"],
    )
    with FakeAPIServer(lambda _r: answer_reply("A")) as srv:
        result = summarize(
            client_for(srv, monkeypatch),
            MCQ,
            str(example_images["original"]),
            None,
            plan_for(),
            evidence,
        )
        user = json.dumps(srv.requests[0].body["messages"][-1])
    assert (result.final_answer, result.need_replan) == ("A", False)
    assert "Evidence the plan asked for is missing: Missing distortion analysis" in user
    assert "Notes on the evidence: distortion analysis: no usable reply" in user


def test_a_right_executor_analysing_one_type_more_gives_the_right_answer(
    monkeypatch, registry, example_images
):
    """An executor analysing one type more, through the agent: the answer is the model's, the
    note is kept in the state and survives the trip through JSON (a state stored without notes
    loads)."""
    plan = {
        "query_type": "IQA",
        "query_scope": "Global",
        "distortion_source": "Explicit",
        "distortions": {"Global": ["Blurs"]},
        "reference_mode": "No-Reference",
        "required_tool": None,
        "plan": {
            "distortion_detection": False,
            "distortion_analysis": True,
            "tool_selection": False,
            "tool_execution": False,
        },
    }

    def respond(recorded: Recorded) -> Reply:
        system = recorded.body["messages"][0]["content"]
        if system.startswith("You are a distortion analysis expert"):
            return replies({"distortion_analysis": {"Global": [item("Blurs"), item("Noise")]}})[0]
        if system.startswith("You are the planner"):
            return replies(plan)[0]
        return answer_reply("A")

    with FakeAPIServer(respond) as srv:
        client = client_for(srv, monkeypatch)
        agents = Agents(planner=client, executor=client, summarizer=client, registry=registry)
        state = run_inprocess(MCQ, str(example_images["blur3"]), agents=agents)
        calls = len(srv.requests)
    assert calls == 3 and state["iteration_count"] == 0
    assert state["summarizer_result"].final_answer == "A"
    notes = state["executor_evidence"].notes
    assert any("Noise analysed too" in note for note in notes)
    assert state_from_json(state_to_json(state))["executor_evidence"].notes == notes
    stored = json.loads(state_to_json(state))
    del stored["executor_evidence"]["notes"]
    assert state_from_json(json.dumps(stored))["executor_evidence"].notes == []


def test_builtin_answers_with_complete_evidence_are_unchanged(builtin_agents, example_images):
    """The offline agent's own answer where nothing is missing: its context now says whether
    a replan is allowed, which it only reads when evidence is missing."""
    state = run_inprocess(
        "Which distortion is most visible? A. Noise B. Blur C. Compression",
        str(example_images["blur3"]),
        agents=builtin_agents,
    )
    assert state["summarizer_result"].final_answer == "B"
    assert state["iteration_count"] == 0


def test_the_notes_are_shown_with_the_answer():
    from rich.console import Console

    from agentic_iqa.cli.render import render_state
    from agentic_iqa.state import SummarizerOutput, initial_state, merge_state

    state = merge_state(
        initial_state(MCQ, "x.png"),
        {
            "plan": plan_for(),
            "summarizer_result": SummarizerOutput(final_answer="A", quality_reasoning="soft edges"),
            "executor_evidence": ExecutorOutput(
                notes=["distortion analysis (Global): Noise analysed too, not asked for"]
            ),
        },
    )
    console = Console(record=True, width=200)
    render_state(state, console)
    assert "Note: distortion analysis (Global): Noise analysed too" in console.export_text()
