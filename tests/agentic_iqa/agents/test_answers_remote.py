"""Exact answers from remote models: the real OpenAI SDK against a local server speaking its
protocol (tests/agentic_iqa/vlm/fake_servers.py), so every request the agent makes is counted."""

from __future__ import annotations

import json

import pytest

from agentic_iqa.agents import executor
from agentic_iqa.agents.fusion import fuse
from agentic_iqa.agents.summarizer import UNABLE
from agentic_iqa.agents.team import Agents
from agentic_iqa.options import parse_option
from agentic_iqa.pipeline import TransientRetry, run_inprocess
from agentic_iqa.prompts import (
    FR_PREFERENCE_INSTRUCTION,
    QUALITY_LEVEL_CHOICES,
    QUALITY_PROBABILITIES_SYSTEM,
    STRICT_JSON_SUFFIX,
)
from agentic_iqa.vlm.builtin import BuiltinClient
from agentic_iqa.vlm.builtin import selection as builtin_selection
from iqa_tools import ToolRegistry, ToolSettings
from tests.agentic_iqa.conftest import always_nan_catalog
from tests.agentic_iqa.remote import (
    EVIDENCE,
    MCQ,
    SCORING,
    answer_reply,
    ask,
    client_for,
    plan_for,
)
from tests.agentic_iqa.vlm.fake_servers import (
    FakeAPIServer,
    Recorded,
    Reply,
    openai_completion,
    openai_error,
)


def system_of(recorded: Recorded) -> str:
    return next(m["content"] for m in recorded.body["messages"] if m["role"] == "system")


# -- reading options --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("B", "B"),
        ("(B)", "B"),
        ("B.", "B"),
        ("B)", "B"),
        ("Answer: B", "B"),
        ("**B**", "B"),
        ("b", "B"),
        ("B. Good", "B"),
        ("The answer is (D).", "D"),
        ("**Answer:** E", "E"),
        ("Good", "B"),
        ("fair.", "C"),
        ("I'd say **C**.", "C"),
        ("This is a good image", None),
        ("A good image", None),
        ("Answer: a good image", None),
        ("(A) or (B)", None),
        ("", None),
        ("F", None),
        # a capital letter standing alone after words is the answer; a lower-case word never is
        ("I'd say B", "B"),
        ("This image deserves a C", "C"),
        ("B. Slight", "B"),
        # a negated option is no rival answer: "not E" leaves the D the model picked
        ("I'd pick D, not E", "D"),
        ("a", "A"),
        ("I think it is fair", None),
    ],
)
def test_options_are_read_only_where_they_stand_as_options(text, expected):
    assert parse_option(text, QUALITY_LEVEL_CHOICES) == expected


# -- scoring mode -----------------------------------------------------------------------------


def test_a_good_image_in_prose_is_not_option_a_and_no_letter_is_retried_then_unparseable(
    monkeypatch, example_images
):
    """The old parser read the article "a" as option A (and "no letter" as "C")."""
    with FakeAPIServer(lambda _r: Reply(200, openai_completion("This is a good image"))) as srv:
        result = ask(srv, monkeypatch, SCORING, str(example_images["original"]), follow_up=False)
        requests = list(srv.requests)
    assert len(requests) == 3
    assert "exactly one option letter" not in system_of(requests[0])
    assert all("exactly one option letter (A, B, C, D, E)" in system_of(r) for r in requests[1:])
    assert result.answer_unparseable is True
    assert result.final_answer == UNABLE
    assert "This is a good image" in result.unparseable_reason
    assert result.quality_score is None and result.level_distribution is None
    assert result.probability_source is None
    # Both outputs of `assess` say so, with what the model answered.
    from io import StringIO

    from rich.console import Console

    from agentic_iqa.cli.render import render_state, state_document
    from agentic_iqa.state import initial_state, merge_state

    state = merge_state(
        initial_state(SCORING, str(example_images["original"])),
        {"plan": plan_for(), "executor_evidence": EVIDENCE, "summarizer_result": result},
    )
    assert state_document(state)["answer_unparseable"] is True
    shown = StringIO()
    render_state(state, Console(file=shown, width=200))
    assert "No option could be read" in shown.getvalue()
    assert "This is a good image" in shown.getvalue()


def test_without_logprobs_stated_probabilities_are_asked_for_and_fused(monkeypatch, example_images):
    stated = {"A": 0.1, "B": 0.5, "C": 0.3, "D": 0.1, "E": 0.0}
    with FakeAPIServer() as srv:
        srv.enqueue(
            Reply(200, openai_completion("Answer: B")),
            Reply(200, openai_completion(json.dumps({"option_probabilities": stated}))),
        )
        result = ask(srv, monkeypatch, SCORING, str(example_images["original"]))
        question, statement = srv.requests
    assert question.body["logprobs"] is True
    assert "logprobs" not in statement.body
    assert statement.body["response_format"] == {"type": "json_object"}
    assert system_of(statement) == QUALITY_PROBABILITIES_SYSTEM
    assert result.probability_source == "stated"
    assert result.level_distribution == pytest.approx(
        {"Excellent": 0.1, "Good": 0.5, "Fair": 0.3, "Poor": 0.1, "Bad": 0.0}
    )
    expected = fuse([2.0], {5: 0.1, 4: 0.5, 3: 0.3, 2: 0.1, 1: 0.0})
    assert result.quality_score == pytest.approx(expected)
    assert result.quality_score != pytest.approx(4.0)  # the tool (2.0) still counts
    assert not result.answer_unparseable


def test_argmax_only_when_no_statement_comes_back_and_then_the_score_is_the_level(
    monkeypatch, example_images
):
    with FakeAPIServer(lambda _r: Reply(200, openai_completion("no idea, sorry"))) as srv:
        srv.enqueue(Reply(200, openai_completion("**B**")))
        result = ask(srv, monkeypatch, SCORING, str(example_images["original"]))
        requests = list(srv.requests)
    assert len(requests) == 4  # the question, then three tries at a statement
    assert STRICT_JSON_SUFFIX.strip() in system_of(requests[-1])
    assert result.probability_source == "argmax"
    assert result.quality_score == 4.0  # the tool's 2.0 does not move it
    assert result.final_answer == "Good"


# -- explanation mode, multiple choice --------------------------------------------------------


def test_a_multiple_choice_answer_in_prose_is_retried_then_recorded_as_unparseable(
    monkeypatch, example_images
):
    with FakeAPIServer(lambda _r: answer_reply("This is a good image")) as srv:
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]), follow_up=False)
        requests = list(srv.requests)
    assert len(requests) == 3
    assert "final_answer must be exactly one option letter (A, B, C)" not in system_of(requests[0])
    assert all(
        "final_answer must be exactly one option letter (A, B, C)" in system_of(r)
        for r in requests[1:]
    )
    assert result.answer_unparseable is True and result.final_answer == UNABLE
    assert "names none of the options" in result.unparseable_reason


@pytest.mark.parametrize(("answered", "letter"), [("Blur", "B"), ("(C)", "C"), ("A.", "A")])
def test_a_multiple_choice_answer_naming_an_option_becomes_its_letter(
    monkeypatch, example_images, answered, letter
):
    with FakeAPIServer(lambda _r: answer_reply(answered)) as srv:
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 1
    assert result.final_answer == letter and not result.answer_unparseable


# -- the executor -----------------------------------------------------------------------------


def test_a_remote_nr_choice_is_replaced_by_an_fr_tool_when_a_reference_is_given(
    monkeypatch, registry
):
    nr = next(
        t for t in executor.tool_descriptions(registry, "Full-Reference") if t["type"] == "NR"
    )["name"]
    chosen = {"selected_tools": {"Global": {"Compression": nr, "Blurs": "SSIM"}}}
    without_reference = {"selected_tools": {"Global": {"Blurs": nr}}}
    with FakeAPIServer() as srv:
        srv.enqueue(
            Reply(200, openai_completion(json.dumps(chosen))),
            Reply(200, openai_completion(json.dumps(without_reference))),
        )
        client = client_for(srv, monkeypatch)
        distortions = {"Global": ["Compression", "Blurs"]}
        with_reference = executor.select_tools(
            client, registry, "Rate it.", distortions, "Full-Reference"
        )
        without = executor.select_tools(
            client, registry, "Rate it.", {"Global": ["Blurs"]}, "No-Reference"
        )
        fr_prompt, nr_prompt = (system_of(r) for r in srv.requests)
    offered_fr = [
        t for t in executor.tool_descriptions(registry, "Full-Reference") if t["type"] == "FR"
    ]
    best = builtin_selection.select({"Global": ["Compression"]}, offered_fr, "Full-Reference")[
        "Global"
    ]["Compression"]
    assert with_reference == {"Global": {"Compression": best, "Blurs": "SSIM"}}
    assert registry.get(best).is_full_reference
    assert without == {"Global": {"Blurs": nr}}  # no reference: the NR choice stands
    assert FR_PREFERENCE_INSTRUCTION.strip() in fr_prompt
    assert FR_PREFERENCE_INSTRUCTION.strip() not in nr_prompt


def test_with_one_object_in_scope_every_other_name_is_that_object(monkeypatch, example_images):
    """Under "Global" the car would have no tool score and the run would replan for it."""
    found = {"distortion_set": {"Car": ["Blurs"], "Global": ["Noise"], "the vehicle": ["blur"]}}
    with FakeAPIServer(lambda _r: Reply(200, openai_completion(json.dumps(found)))) as srv:
        result = executor.detect_distortions(
            client_for(srv, monkeypatch),
            "Is the car blurry?",
            str(example_images["original"]),
            None,
            plan_for(["car"]),
        )
    assert result == {"car": ["Blurs", "Noise"]}


def test_with_several_objects_in_scope_an_unknown_name_is_dropped_and_the_rest_kept(
    monkeypatch, example_images
):
    """One stray object ("tree") does not void the reply; it is dropped with a
    note.  A reply with nothing usable is still asked again, with the scope's keys."""
    stray = {"distortion_set": {"car": ["Blurs"], "tree": ["Noise"], "Global": ["grain"]}}
    useless = {"distortion_set": {"car": ["lens flare"]}}
    right = {"distortion_set": {"The Car": ["Blurs"], "sky": ["noise"]}}
    notes: list[str] = []
    with FakeAPIServer() as srv:
        srv.enqueue(
            Reply(200, openai_completion(json.dumps(stray))),
            Reply(200, openai_completion(json.dumps(useless))),
            Reply(200, openai_completion(json.dumps(right))),
        )
        client = client_for(srv, monkeypatch)
        kept = executor.detect_distortions(
            client,
            "Is the car or the sky noisy?",
            str(example_images["original"]),
            None,
            plan_for(["car", "sky"]),
            notes=notes,
        )
        asked_again = executor.detect_distortions(
            client,
            "Is the car or the sky noisy?",
            str(example_images["original"]),
            None,
            plan_for(["car", "sky"]),
        )
        retry_system = srv.requests[2].body["messages"][0]["content"]
    assert kept == {"car": ["Blurs", "Noise"], "sky": ["Noise"]}  # the whole image's: both
    assert any("'tree'" in note and "dropped" in note for note in notes)
    assert asked_again == {"car": ["Blurs"], "sky": ["Noise"]}
    assert 'Use exactly these object keys: "car", "sky"' in retry_system


# -- the pipeline -----------------------------------------------------------------------------


def test_when_the_tools_failed_the_summarizer_is_asked_with_what_there_is_and_answers(
    monkeypatch, example_images
):
    """The only tool fails: a new plan would fail the same way, so no replan; the summarizer is
    asked once, told what is missing, and its answer stands (no replan, no "Unable to
    determine" without asking)."""
    broken = ToolRegistry(
        ToolSettings(device="cpu", tool_cache="memory", fallback_chain=[]),
        catalog=always_nan_catalog(),
    )
    builtin = BuiltinClient()
    with FakeAPIServer(lambda _r: answer_reply("B")) as srv:
        agents = Agents(
            planner=builtin,
            executor=builtin,
            summarizer=client_for(srv, monkeypatch),
            registry=broken,
        )
        state = run_inprocess(
            "Is this image noisy using Broken? A. Yes B. No",
            str(example_images["original"]),
            agents=agents,
            max_replan_iterations=1,
        )
        prompts = [json.dumps(r.body["messages"]) for r in srv.requests]
    assert len(prompts) == 1
    assert "Evidence the plan asked for is missing: Missing tool scores for Global" in prompts[0]
    assert state["iteration_count"] == 0 and state["replan_history"] == []
    result = state["summarizer_result"]
    assert result.final_answer == "B" and not result.need_replan


PLAN_JSON = {
    "query_type": "IQA",
    "query_scope": "Global",
    "distortion_source": "Inferred",
    "distortions": None,
    "reference_mode": "No-Reference",
    "required_tool": "PIQE",
    "plan": {
        "distortion_detection": False,
        "distortion_analysis": False,
        "tool_selection": False,
        "tool_execution": True,
    },
}
FAST = TransientRetry(attempts=3, initial=0.01, maximum=0.05, jitter=0.01)


def test_a_transient_503_is_retried_in_process_and_the_run_completes(
    monkeypatch, registry, example_images
):
    with FakeAPIServer(lambda _r: Reply(200, openai_completion(json.dumps(PLAN_JSON)))) as srv:
        srv.enqueue(Reply(503, openai_error("overloaded")))
        builtin = BuiltinClient()
        agents = Agents(
            planner=client_for(srv, monkeypatch, max_retries=0),
            executor=builtin,
            summarizer=builtin,
            registry=registry,
        )
        state = run_inprocess(SCORING, str(example_images["original"]), agents=agents, retry=FAST)
        statuses = len(srv.requests)
    assert statuses == 2
    assert "error" not in state
    assert state["plan"].required_tool == "PIQE"
    assert state["summarizer_result"].quality_score is not None


def test_a_503_that_persists_fails_the_run_after_the_attempts(
    monkeypatch, registry, example_images
):
    with FakeAPIServer(lambda _r: Reply(503, openai_error("overloaded"))) as srv:
        builtin = BuiltinClient()
        agents = Agents(
            planner=client_for(srv, monkeypatch, max_retries=0),
            executor=builtin,
            summarizer=builtin,
            registry=registry,
        )
        state = run_inprocess(SCORING, str(example_images["original"]), agents=agents, retry=FAST)
        count = len(srv.requests)
    assert count == 3
    assert state["error"].startswith("plan failed:") and "HTTP 503" in state["error"]


def test_a_transient_503_is_retried_in_a_stored_run(
    monkeypatch, registry, example_images, tmp_path
):
    from agentic_iqa.db import upgrade
    from agentic_iqa.db.engine import make_engine, session_scope
    from agentic_iqa.db.runs import get_run
    from agentic_iqa.runtime import embedded, service

    url = f"sqlite:///{tmp_path / 'runs.sqlite3'}"
    upgrade(url)
    engine = make_engine(url)
    run_id = service.create_run(engine, SCORING, str(example_images["original"]))
    with FakeAPIServer(lambda _r: Reply(200, openai_completion(json.dumps(PLAN_JSON)))) as srv:
        srv.enqueue(Reply(503, openai_error("overloaded")))
        builtin = BuiltinClient()
        agents = Agents(
            planner=client_for(srv, monkeypatch, max_retries=0),
            executor=builtin,
            summarizer=builtin,
            registry=registry,
        )
        state = embedded.run_embedded(engine, agents, run_id, retry=FAST)
        count = len(srv.requests)
    with session_scope(engine) as session:
        status = get_run(session, run_id).status
    assert count == 2
    assert status == "succeeded" and "error" not in state


@pytest.mark.parametrize(
    ("query", "image", "expected"),
    [
        ("   ", None, "query: String should have at least 1 character"),
        (SCORING, "missing.png", "image_path: Image file not found"),
        (SCORING, "notes.txt", "image_path: Invalid image format"),
    ],
)
def test_bad_inputs_fail_the_run_before_any_model_is_asked(
    monkeypatch, registry, example_images, tmp_path, query, image, expected
):
    (tmp_path / "notes.txt").write_text("not an image")
    path = str(tmp_path / image) if image else str(example_images["original"])
    with FakeAPIServer(lambda _r: Reply(200, openai_completion(json.dumps(PLAN_JSON)))) as srv:
        client = client_for(srv, monkeypatch)
        agents = Agents(planner=client, executor=client, summarizer=client, registry=registry)
        state = run_inprocess(query, path, agents=agents)
        count = len(srv.requests)
    assert count == 0
    assert state["error"].startswith("invalid input: ") and expected in state["error"]
    assert "plan" not in state
