"""What the summarizer's model writes against what the pipeline concludes.

The real OpenAI SDK against a local server speaking its protocol
(tests/agentic_iqa/vlm/fake_servers.py) plays the planner and the summarizer; the executor is
the builtin agent with real tools.  A number a model writes into its reply is never the score;
a replan whose plan cannot be made leaves the previous evidence to the summarizer; a correct
answer is never lost to a side field written loosely.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from agentic_iqa.agents.fusion import fuse, probabilities_from_logprobs
from agentic_iqa.agents.summarizer import UNABLE, summarize
from agentic_iqa.agents.team import Agents
from agentic_iqa.pipeline import (
    EXECUTE,
    PLAN,
    REPLAN,
    SUMMARIZE,
    TransientRetry,
    next_step,
    run_inprocess,
)
from agentic_iqa.prompts import QUALITY_LEVEL_OPTIONS
from agentic_iqa.state import (
    NO_REASONING,
    ExecutorOutput,
    PlannerOutput,
    ReplanEntry,
    SummarizerOutput,
    initial_state,
    merge_state,
    state_from_json,
    state_to_json,
)
from agentic_iqa.vlm import BackendConfig, create_client
from agentic_iqa.vlm.builtin import BuiltinClient
from tests.agentic_iqa.vlm.fake_servers import (
    FakeAPIServer,
    Recorded,
    Reply,
    openai_completion,
    openai_error,
)

EXPLAIN = "Is this image blurry? Use PIQE."
RATE = "Rate the quality of this image using PIQE."
MCQ = "Which distortion is most visible? A. Noise B. Blur C. Compression"
#: The answer letters' log-probabilities the server sends with the five-level answer.
LEVELS = [("A", -3.0), ("B", -0.4), ("C", -1.5), ("D", -3.5), ("E", -5.0)]
#: What a model has no business writing: the pipeline's own results.
WRITTEN_RESULTS = {
    "quality_score": 3.2,
    "probability_source": "logprobs",
    "answer_unparseable": False,
    "level_distribution": {"Excellent": 0.0, "Good": 0.0, "Fair": 1.0, "Poor": 0.0, "Bad": 0.0},
}


def plan(*, scoring: bool) -> dict[str, Any]:
    return {
        "query_type": "IQA",
        "query_scope": "Global",
        "distortion_source": "Inferred",
        "distortions": None,
        "reference_mode": "No-Reference",
        "required_tool": "PIQE",
        "answer_mode": "scoring" if scoring else "explanation",
        "plan": {
            "distortion_detection": False,
            "distortion_analysis": True,
            "tool_selection": False,
            "tool_execution": True,
        },
    }


def system_of(recorded: Recorded) -> str:
    return next(m["content"] for m in recorded.body["messages"] if m["role"] == "system")


def user_of(recorded: Recorded) -> str:
    return json.dumps(next(m["content"] for m in recorded.body["messages"] if m["role"] == "user"))


def completion(body: dict[str, Any] | str, **extra: Any) -> Reply:
    return Reply(
        200, openai_completion(body if isinstance(body, str) else json.dumps(body), **extra)
    )


class Remote:
    """The planner and the summarizer of one OpenAI-compatible server, by system prompt.

    ``planner``: the replies to plan requests in turn (the last one repeats);
    ``answers``: the summarizer's explanation-mode replies in turn (the last one repeats).
    The five-level question is answered "B" with :data:`LEVELS` and a score of its own."""

    def __init__(
        self,
        answers: list[dict[str, Any]],
        planner: list[Callable[[Recorded], Reply]] | None = None,
    ) -> None:
        self.answers = list(answers)
        self.planner = list(planner or [])

    def __call__(self, recorded: Recorded) -> Reply:
        system = system_of(recorded)
        if system.startswith("You are the planner"):
            if self.planner:
                respond = self.planner.pop(0) if len(self.planner) > 1 else self.planner[0]
                return respond(recorded)
            return completion(plan(scoring=RATE in user_of(recorded)))
        if system.startswith("You are the summarizer"):
            return completion(self.answers.pop(0) if len(self.answers) > 1 else self.answers[0])
        if "rate the\noverall quality" in system:
            return completion("B\nScore: 3.2", top_logprobs=LEVELS)
        return Reply(404, openai_error(f"not scripted: {system[:60]}"))


def remote(
    server: FakeAPIServer, monkeypatch: pytest.MonkeyPatch, role: str, *, max_retries: int = 1
):
    monkeypatch.setenv("TEST_VLM_KEY", "sk-test-summarizer-reply")
    monkeypatch.setenv("AGENTIC_IQA_VLM_CACHE", "false")
    config = BackendConfig(
        backend="openai",
        model="qwen2.5-vl",
        base_url=f"{server.url}/v1",
        api_key_env="TEST_VLM_KEY",
        timeout=5,
        max_retries=max_retries,
    )
    return create_client(role, {role: config})


def agents_on(
    server: FakeAPIServer, monkeypatch: pytest.MonkeyPatch, registry, *, planner_retries: int = 1
) -> Agents:
    return Agents(
        planner=remote(server, monkeypatch, "planner", max_retries=planner_retries),
        executor=BuiltinClient(),
        summarizer=remote(server, monkeypatch, "summarizer"),
        registry=registry,
    )


def tool_scores(state) -> list[float]:
    return [
        score
        for per in state["executor_evidence"].quality_scores.values()
        for _tool, score in per.values()
    ]


def fused_from_levels(scores: list[float]) -> float:
    by_level = {QUALITY_LEVEL_OPTIONS[letter]: value for letter, value in LEVELS}
    return fuse(scores, probabilities_from_logprobs(by_level))


# -- 1. a model's number is never the score ------------------------------------------------

ANSWER_WITH_A_SCORE = {
    "final_answer": "Yes, slightly",
    "quality_reasoning": "soft edges",
    "need_replan": False,
    **WRITTEN_RESULTS,
}


def rendered(state) -> str:
    from rich.console import Console

    from agentic_iqa.cli.render import render_state

    console = Console(record=True, width=200)
    render_state(state, console)
    return console.export_text()


def test_a_score_written_into_an_explanation_reply_is_no_score_in_the_state_or_its_rendering(
    monkeypatch, registry, example_images
):
    from agentic_iqa.cli.render import state_document

    with FakeAPIServer(Remote([ANSWER_WITH_A_SCORE])) as server:
        state = run_inprocess(
            EXPLAIN, str(example_images["blur3"]), agents=agents_on(server, monkeypatch, registry)
        )
    result = state["summarizer_result"]
    assert (result.final_answer, result.quality_reasoning) == ("Yes, slightly", "soft edges")
    assert result.quality_score is None and result.level_distribution is None
    assert result.probability_source is None and result.answer_unparseable is False
    ignored = [note for note in result.notes if "ignored" in note]
    assert any(note.startswith("quality_score 3.2 ignored") for note in ignored)
    assert any(note.startswith("level_distribution") for note in ignored)
    document = state_document(state)
    assert document["quality_score"] is None and document["level_distribution"] is None
    assert document["summarizer_result"]["probability_source"] is None
    text = rendered(state)
    assert "Score:" not in text and "Answer: Yes, slightly" in text
    assert "Note: quality_score 3.2 ignored" in text
    assert state_from_json(state_to_json(state))["summarizer_result"] == result


def test_in_scoring_mode_the_score_is_the_fusion_whatever_the_reply_wrote(
    monkeypatch, registry, example_images
):
    with FakeAPIServer(Remote([ANSWER_WITH_A_SCORE])) as server:
        state = run_inprocess(
            RATE, str(example_images["blur3"]), agents=agents_on(server, monkeypatch, registry)
        )
    result = state["summarizer_result"]
    assert result.probability_source == "logprobs"
    assert result.quality_score == pytest.approx(fused_from_levels(tool_scores(state)))
    assert result.quality_score != pytest.approx(3.2)


def test_stated_probabilities_with_a_score_beside_them_fuse_without_it(monkeypatch, example_images):
    """A server without log-probabilities: the second request's JSON carries a score of the
    model's own; only the stated probabilities count."""
    stated = {"A": 0.1, "B": 0.2, "C": 0.4, "D": 0.2, "E": 0.1}
    with FakeAPIServer() as server:
        server.enqueue(
            completion("C"), completion({"option_probabilities": stated, "quality_score": 4.9})
        )
        result = summarize(
            remote(server, monkeypatch, "summarizer"),
            RATE,
            str(example_images["original"]),
            None,
            PlannerOutput.model_validate(plan(scoring=True)),
            ExecutorOutput(quality_scores={"Global": {"Blurs": ("PIQE", 2.0)}}),
        )
    assert result.probability_source == "stated"
    expected = fuse([2.0], {5: 0.1, 4: 0.2, 3: 0.4, 2: 0.2, 1: 0.1})
    assert result.quality_score == pytest.approx(expected)


def openai_role_env(monkeypatch: pytest.MonkeyPatch, server: FakeAPIServer) -> None:
    """The planner and the summarizer on the server, the executor builtin (the default)."""
    for role in ("PLANNER", "SUMMARIZER"):
        monkeypatch.setenv(f"AGENTIC_IQA_{role}_BACKEND", "openai")
        monkeypatch.setenv(f"AGENTIC_IQA_{role}_BASE_URL", f"{server.url}/v1")
        monkeypatch.setenv(f"AGENTIC_IQA_{role}_MODEL", "qwen2.5-vl")
        monkeypatch.setenv(f"AGENTIC_IQA_{role}_MAX_RETRIES", "0")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-summarizer-reply")


def test_assess_and_a_jobs_export_show_no_score_a_model_wrote(
    monkeypatch, results, tmp_path, example_images
):
    """`agentic-iqa assess` (text and --json) and `eval export`: the explanation item has no
    score, the rated item the fusion."""
    from agentic_iqa.cli import app
    from agentic_iqa.db import make_engine
    from agentic_iqa.db.engine import session_scope
    from agentic_iqa.db.runs import load_state

    runner = CliRunner()
    image = str(example_images["blur3"])
    manifest = tmp_path / "items.csv"
    manifest.write_text(f"id,image,query,mos\nexplain,{image},{EXPLAIN},3\nrate,{image},{RATE},4\n")
    with FakeAPIServer(Remote([ANSWER_WITH_A_SCORE])) as server:
        openai_role_env(monkeypatch, server)
        shown = runner.invoke(
            app, ["assess", image, "-q", EXPLAIN, "--no-store"], env={"COLUMNS": "200"}
        )
        document = runner.invoke(app, ["assess", image, "-q", EXPLAIN, "--no-store", "--json"])
        submitted = runner.invoke(app, ["eval", "submit", str(manifest), "--workers", "1"])
    assert shown.exit_code == 0, shown.output
    assert "Answer: Yes, slightly" in shown.stdout and "Score:" not in shown.stdout
    assert json.loads(document.stdout)["quality_score"] is None
    assert submitted.exit_code == 0, submitted.output
    monkeypatch.chdir(tmp_path)
    exported = runner.invoke(app, ["eval", "export", "-o", "-"])
    rows = {row["item_id"]: row for row in csv.DictReader(io.StringIO(exported.stdout))}
    assert rows["explain"]["status"] == rows["rate"]["status"] == "done"
    assert rows["explain"]["final_answer"] == "Yes, slightly"
    assert rows["explain"]["quality_score"] == ""
    with session_scope(make_engine(results)) as session:
        rated = load_state(session, rows["rate"]["run_id"])
    assert float(rows["rate"]["quality_score"]) == pytest.approx(
        fused_from_levels(tool_scores(rated))
    )


# -- 2. a failed replan: the summarizer answers with the previous evidence -------------------

WANTS_MORE = {
    "final_answer": "Unable to determine",
    "quality_reasoning": "need a closer look",
    "need_replan": True,
    "replan_reason": "look closer at the edges",
}
ANSWER = {"final_answer": "Yes", "quality_reasoning": "the edges are soft", "need_replan": False}


def not_json(_recorded: Recorded) -> Reply:
    return completion("I would rather describe the image in words.")


def unavailable(_recorded: Recorded) -> Reply:
    return Reply(503, openai_error("overloaded"))


@pytest.mark.parametrize("failing", [not_json, unavailable], ids=["no-json", "503s"])
def test_a_replan_whose_plan_fails_leaves_the_previous_evidence_to_the_summarizer(
    failing, monkeypatch, registry, example_images
):
    first_plan = completion(plan(scoring=False))
    with FakeAPIServer(
        Remote([WANTS_MORE, ANSWER], planner=[lambda _r: first_plan, failing])
    ) as server:
        state = run_inprocess(
            EXPLAIN,
            str(example_images["blur3"]),
            agents=agents_on(server, monkeypatch, registry, planner_retries=0),
            retry=TransientRetry(attempts=2, initial=0, maximum=0, jitter=0),
        )
        summaries = [r for r in server.requests if system_of(r).startswith("You are the summ")]
        plans = [r for r in server.requests if system_of(r).startswith("You are the planner")]
    assert "error" not in state
    assert state["summarizer_result"].final_answer == "Yes"
    assert not state["summarizer_result"].need_replan
    (entry,) = state["replan_history"]
    assert (entry.iteration, entry.reason) == (1, "look closer at the edges")
    assert entry.failure and ("no valid plan" in entry.failure or "503" in entry.failure)
    assert state["iteration_count"] == 1 and next_step(state) is None
    # the first plan and its evidence: the tool ran once, in the first round
    assert state["plan"].required_tool == "PIQE"
    assert [log.tool_name for log in state["executor_evidence"].tool_logs] == ["PIQE"]
    assert state["executor_evidence"].distortion_analysis
    assert len(plans) == 1 + (3 if failing is not_json else 2)
    # the model was asked twice; the second time it was told what the replan could not add
    assert len(summaries) == 2
    told = user_of(summaries[1])
    assert "A new plan was asked for (look closer at the edges) but could not be made" in told
    assert "could not be made" not in user_of(summaries[0])
    assert any(
        "replan 1 (look closer at the edges) failed" in note
        for note in state["summarizer_result"].notes
    )
    assert f"Replan 1: look closer at the edges (failed: {entry.failure[:20]}" in rendered(
        state
    ).replace("\n", " ")


def test_a_replan_that_succeeds_drops_the_previous_evidence(monkeypatch, registry, example_images):
    second = plan(scoring=False) | {"query_scope": "Global"}
    with FakeAPIServer(
        Remote(
            [WANTS_MORE, ANSWER],
            planner=[lambda _r: completion(plan(scoring=False)), lambda _r: completion(second)],
        )
    ) as srv:
        state = run_inprocess(
            EXPLAIN, str(example_images["blur3"]), agents=agents_on(srv, monkeypatch, registry)
        )
    assert state["replan_history"][0].failure is None
    # the new round's PIQE call only: the first round's evidence was not carried over
    assert [log.tool_name for log in state["executor_evidence"].tool_logs] == ["PIQE"]
    assert state["summarizer_result"].final_answer == "Yes"


def test_next_step_replans_from_the_state_alone_and_reads_runs_stored_mid_replan():
    """After REPLAN the previous plan stays until the new one is made; a run stored by the
    previous version mid-replan (plan removed) plans as before."""
    first = PlannerOutput.model_validate(plan(scoring=False))
    state = merge_state(
        initial_state(EXPLAIN, "x.png"),
        {
            "plan": first,
            "steps_done": [PLAN, "distortion_analysis", EXECUTE, SUMMARIZE],
            "summarizer_result": SummarizerOutput(**WANTS_MORE),
        },
    )
    assert next_step(state) == REPLAN
    state = merge_state(
        state,
        {
            "iteration_count": 1,
            "summarizer_result": None,
            "steps_done": [],
            "replan_history": [ReplanEntry(iteration=1, reason="r")],
        },
    )
    assert next_step(state) == PLAN
    assert next_step(merge_state(state, {"plan": None})) == PLAN
    failed = merge_state(
        state,
        {
            "replan_history": [ReplanEntry(iteration=1, reason="r", failure="no valid plan")],
            "steps_done": [PLAN, "distortion_analysis", EXECUTE],
        },
    )
    assert next_step(failed) == SUMMARIZE
    asked_again = merge_state(
        failed,
        {
            "steps_done": [*failed["steps_done"], SUMMARIZE],
            "summarizer_result": SummarizerOutput(**WANTS_MORE),
            "max_replan_iterations": 5,
        },
    )
    assert next_step(asked_again) is None  # no replan after one whose plan failed


# -- 3. side fields are read leniently -------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "read", "noted"),
    [
        ("need_replan", None, False, "need_replan None is neither true nor false"),
        ("need_replan", "maybe", False, "need_replan 'maybe' is neither true nor false"),
        ("need_replan", "false", False, "need_replan 'false' read as false"),
        ("need_replan", 0, False, "need_replan 0 read as false"),
        ("replan_reason", 5, None, "replan_reason 5 is not text: ignored"),
        ("replan_reason", {"why": "x"}, None, "replan_reason {'why': 'x'} is not text"),
        (
            "used_evidence",
            ["PIQE 2.0", "soft edges"],
            {"items": ["PIQE 2.0", "soft edges"]},
            "used_evidence is a list",
        ),
        ("used_evidence", "", None, "used_evidence '' is empty: ignored"),
        ("quality_reasoning", "", NO_REASONING, "quality_reasoning '' is no text: ignored"),
        ("quality_reasoning", None, NO_REASONING, "quality_reasoning None is no text"),
        ("quality_reasoning", 7, NO_REASONING, "quality_reasoning 7 is no text"),
    ],
)
def test_a_right_answer_with_a_loose_side_field_is_taken_at_once_with_a_note(
    field, value, read, noted, monkeypatch, example_images, caplog
):
    reply = {
        "final_answer": "C",
        "quality_reasoning": "blocky edges",
        "need_replan": False,
        "replan_reason": None,
        field: value,
    }
    with (
        FakeAPIServer(lambda _r: completion(reply)) as server,
        caplog.at_level(logging.WARNING, logger="agentic_iqa.agents.summarizer"),
    ):
        result = summarize(
            remote(server, monkeypatch, "summarizer"),
            MCQ,
            str(example_images["original"]),
            None,
            PlannerOutput.model_validate(plan(scoring=False)),
            ExecutorOutput(quality_scores={"Global": {"Blurs": ("PIQE", 2.0)}}),
        )
        asked = len(server.requests)
    assert asked == 1
    assert (result.final_answer, result.answer_unparseable) == ("C", False)
    assert getattr(result, field) == read
    assert any(note.startswith(noted) for note in result.notes), result.notes
    assert noted in caplog.text


def test_need_replan_maybe_is_no_request_the_run_answers_without_replanning(
    monkeypatch, registry, example_images
):
    hedged = {**ANSWER, "need_replan": "maybe", "replan_reason": "perhaps more tools"}
    with FakeAPIServer(Remote([hedged])) as server:
        state = run_inprocess(
            EXPLAIN, str(example_images["blur3"]), agents=agents_on(server, monkeypatch, registry)
        )
    assert state["iteration_count"] == 0 and state["replan_history"] == []
    assert state["summarizer_result"].final_answer == "Yes"


def test_only_the_final_answer_decides_a_reply_is_unusable(monkeypatch, example_images):
    loose = {"answer_text": "C", "quality_reasoning": "", "need_replan": "maybe"}
    with FakeAPIServer(lambda _r: completion(loose)) as server:
        result = summarize(
            remote(server, monkeypatch, "summarizer"),
            MCQ,
            str(example_images["original"]),
            None,
            PlannerOutput.model_validate(plan(scoring=False)),
            ExecutorOutput(quality_scores={"Global": {"Blurs": ("PIQE", 2.0)}}),
        )
        asked = len(server.requests)
    assert asked == 3 and result.final_answer == UNABLE and result.answer_unparseable
    # each attempt failed on final_answer alone, never on the loose side fields
    assert (
        result.unparseable_reason.count(
            "1 validation error for SummarizerReply\nfinal_answer\n  Field required"
        )
        == 3
    )


def test_an_answer_stored_before_notes_loads_with_none():
    stored = json.loads(SummarizerOutput(**ANSWER).model_dump_json())
    del stored["notes"]
    assert SummarizerOutput.model_validate(stored).notes == []


def test_the_offline_agents_score_is_the_fusion_and_its_explanations_have_none(
    builtin_agents, example_images
):
    """The builtin backend writes its explanation-mode replies as JSON too: no score comes of
    them; its rating is the fusion of its level probabilities with the tools."""
    rated = run_inprocess(RATE, str(example_images["blur3"]), agents=builtin_agents)
    result = rated["summarizer_result"]
    by_level = {
        level: result.level_distribution[name]
        for level, name in ((5, "Excellent"), (4, "Good"), (3, "Fair"), (2, "Poor"), (1, "Bad"))
    }
    assert result.probability_source == "builtin-measurements"
    assert result.quality_score == pytest.approx(fuse(tool_scores(rated), by_level))
    explained = run_inprocess(EXPLAIN, str(example_images["blur3"]), agents=builtin_agents)
    assert explained["summarizer_result"].quality_score is None
    assert explained["summarizer_result"].notes == []
