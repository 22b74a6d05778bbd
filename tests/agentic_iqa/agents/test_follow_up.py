"""The follow-up question: a reply that commits to no option readably is asked about once.

The real OpenAI SDK talks to a local server speaking its protocol, so each request the
summarizer makes (the question, the follow-up, the stricter retries) is seen as sent."""

from __future__ import annotations

import json

import pytest

from agentic_iqa.agents.followup import (
    FOLLOW_UP_TASK,
    QUOTED_CHARS,
    asks_follow_up,
    quoted,
    read_follow_up,
)
from agentic_iqa.agents.summarizer import UNABLE, summarize
from agentic_iqa.options import UNREAD_REASONS
from agentic_iqa.prompts import QUALITY_PROBABILITIES_SYSTEM
from agentic_iqa.vlm import BackendConfig, create_client
from agentic_iqa.vlm.batching import AwaitingBatch, BatchScope, batch_scope
from agentic_iqa.vlm.builtin import BuiltinClient
from agentic_iqa.vlm.cache import ResponseCache
from agentic_iqa.vlm.settings import load_backend_configs
from agentic_iqa.vlm.usage import collect_calls
from tests.agentic_iqa.remote import EVIDENCE, MCQ, SCORING, answer_reply, ask, plan_for
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Recorded, Reply, openai_completion

#: A first reply that commits to none of MCQ's options in a form a grader reads.
VAGUE = "The second one you listed, I think; the edges are soft everywhere."
OPTIONS = {"A": "Noise", "B": "Blur", "C": "Compression"}


def system_of(recorded: Recorded) -> str:
    return next(m["content"] for m in recorded.body["messages"] if m["role"] == "system")


def user_of(recorded: Recorded) -> str:
    """Return the text of the request's user message (its text parts joined)."""
    content = next(m["content"] for m in recorded.body["messages"] if m["role"] == "user")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part["type"] == "text")


def images_of(recorded: Recorded) -> int:
    content = next(m["content"] for m in recorded.body["messages"] if m["role"] == "user")
    return 0 if isinstance(content, str) else sum(p["type"] == "image_url" for p in content)


def follow_up_reply(text: str) -> Reply:
    return Reply(
        200,
        openai_completion(
            text, usage={"prompt_tokens": 180, "completion_tokens": 1, "total_tokens": 181}
        ),
    )


def test_an_unreadable_answer_is_asked_about_once_and_its_letter_is_the_answer(
    monkeypatch, example_images
):
    with FakeAPIServer() as srv:
        srv.enqueue(answer_reply(VAGUE), follow_up_reply("B"))
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
        question, follow_up = srv.requests
    assert result.final_answer == "B"
    assert result.answered_in_follow_up is True and not result.answer_unparseable
    assert result.quality_reasoning == "edges are soft"  # the first reply's reasoning stays
    assert any("asked once more" in note for note in result.notes)
    # The follow-up quotes the reply, lists the options, asks for a letter or NONE, no image.
    assert images_of(question) == 1 and images_of(follow_up) == 0
    assert "A, B, C" in system_of(follow_up) and "NONE" in system_of(follow_up)
    asked = user_of(follow_up)
    assert VAGUE in asked and "B. Blur" in asked and MCQ in asked
    assert "response_format" not in follow_up.body  # one letter, not JSON


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("NONE", "chose none of the options"),
        ("**None.**", "chose none of the options"),
        ("B or C", UNREAD_REASONS["several"]),
        ("I would not pick B.", UNREAD_REASONS["none"]),
        ("As a text-only model I can't see the photo, but B is common.", "cannot see"),
    ],
)
def test_a_follow_up_naming_no_single_option_is_no_answer_and_not_asked_again(
    monkeypatch, example_images, reply, reason
):
    with FakeAPIServer(lambda _r: follow_up_reply("C")) as srv:  # a third request would be C
        srv.enqueue(answer_reply(VAGUE), follow_up_reply(reply))
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 2  # asked once, never until it guesses
    assert result.final_answer == UNABLE and result.answer_unparseable is True
    assert result.answered_in_follow_up is False
    assert reason in result.unparseable_reason and reply[:20] in result.unparseable_reason


def test_a_follow_up_saying_it_cannot_see_is_recorded_as_a_blind_reply(monkeypatch, example_images):
    with FakeAPIServer() as srv:
        srv.enqueue(answer_reply(VAGUE), follow_up_reply("No image was attached, so: B."))
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
    assert result.unparseable_reason.startswith(UNREAD_REASONS["cannot see"])


def test_with_the_follow_up_off_the_stricter_question_is_asked_again_instead(
    monkeypatch, example_images
):
    with FakeAPIServer() as srv:
        srv.enqueue(answer_reply(VAGUE), answer_reply("B"))
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]), follow_up=False)
        first, retry = srv.requests
    assert result.final_answer == "B" and result.answered_in_follow_up is False
    assert images_of(retry) == 1  # the whole question again, image included
    assert "final_answer must be exactly one option letter (A, B, C)" in system_of(retry)


@pytest.mark.parametrize(
    "first",
    [
        "B",  # readable: nothing to ask
        "Unable to determine",  # the model chose none, and said so
        "I cannot see the image, but blur (B) is common in handheld shots.",
    ],
)
def test_no_follow_up_after_an_answer_a_blind_reply_or_a_stated_none(
    monkeypatch, example_images, first
):
    with FakeAPIServer(lambda _r: follow_up_reply("C")) as srv:
        srv.enqueue(answer_reply(first))
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 1
    assert result.answered_in_follow_up is False
    assert result.final_answer == ("B" if first == "B" else UNABLE)


def test_an_invalid_reply_is_retried_and_the_follow_up_still_asked_once(
    monkeypatch, example_images
):
    with FakeAPIServer(lambda _r: follow_up_reply("C")) as srv:
        srv.enqueue(
            Reply(200, openai_completion("{not json")),  # a format failure: the stricter retry
            answer_reply(VAGUE),
            follow_up_reply("A"),
        )
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
        requests = list(srv.requests)
    assert len(requests) == 3 and images_of(requests[2]) == 0
    assert result.final_answer == "A" and result.answered_in_follow_up is True


def test_scoring_mode_asks_which_level_once_then_asks_for_probabilities(
    monkeypatch, example_images
):
    stated = {"A": 0.1, "B": 0.6, "C": 0.3, "D": 0.0, "E": 0.0}
    with FakeAPIServer() as srv:
        srv.enqueue(
            Reply(200, openai_completion("It looks rather nice to me overall.")),
            follow_up_reply("B"),
            Reply(200, openai_completion(json.dumps({"option_probabilities": stated}))),
        )
        result = ask(srv, monkeypatch, SCORING, str(example_images["original"]))
        question, follow_up, statement = srv.requests
    assert images_of(follow_up) == 0 and "A. Excellent" in user_of(follow_up)
    assert system_of(statement) == QUALITY_PROBABILITIES_SYSTEM
    assert result.answered_in_follow_up is True and result.probability_source == "stated"
    assert result.level_distribution["Good"] == pytest.approx(0.6)


def test_scoring_mode_follow_up_with_no_level_is_no_score(monkeypatch, example_images):
    with FakeAPIServer(lambda _r: follow_up_reply("B")) as srv:
        srv.enqueue(
            Reply(200, openai_completion("It looks rather nice to me overall.")),
            follow_up_reply("NONE"),
        )
        result = ask(srv, monkeypatch, SCORING, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 2
    assert result.answer_unparseable and result.quality_score is None
    assert "chose none" in result.unparseable_reason


def test_the_follow_up_is_recorded_with_its_tokens_and_answered_from_the_cache(
    monkeypatch, example_images, tmp_path
):
    monkeypatch.setenv("TEST_VLM_KEY", "sk-test-follow-up")
    with FakeAPIServer() as srv:
        config = BackendConfig(
            backend="openai",
            model="qwen2.5-vl",
            base_url=f"{srv.url}/v1",
            api_key_env="TEST_VLM_KEY",
            timeout=5,
            max_retries=0,
        )
        cache = ResponseCache.open(f"sqlite:///{tmp_path / 'cache.sqlite3'}")
        client = create_client("summarizer", {"summarizer": config}, response_cache=cache)
        srv.enqueue(answer_reply(VAGUE), follow_up_reply("B"))
        image = str(example_images["original"])
        with collect_calls() as calls:
            first = summarize(client, MCQ, image, None, plan_for(), EVIDENCE)
        with collect_calls() as again:
            second = summarize(client, MCQ, image, None, plan_for(), EVIDENCE)
        sent = len(srv.requests)
    assert first.final_answer == second.final_answer == "B"
    assert second.answered_in_follow_up is True
    assert sent == 2  # the second run was answered from the cache, follow-up included
    question, asked = calls.records
    assert (question.task, question.cache_hit) == ("answer", False)
    assert (asked.task, asked.input_tokens, asked.output_tokens) == (FOLLOW_UP_TASK, 180, 1)
    assert asked.cache_hit is False
    assert [(r.task, r.cache_hit) for r in again.records] == [
        ("answer", True),
        (FOLLOW_UP_TASK, True),
    ]


def test_in_a_batch_job_the_follow_up_waits_for_the_next_round(monkeypatch, example_images):
    from agentic_iqa.vlm.batching import BatchingClient, response_json

    monkeypatch.setenv("TEST_VLM_KEY", "sk-test-follow-up")
    config = BackendConfig(
        backend="openai", model="gpt-4o", api_key_env="TEST_VLM_KEY", timeout=5, max_retries=0
    )
    from agentic_iqa.vlm.openai import OpenAIClient

    client = BatchingClient(OpenAIClient(config), "summarizer")
    image = str(example_images["original"])
    first_round = BatchScope()
    with pytest.raises(AwaitingBatch) as waiting, batch_scope(first_round):
        summarize(client, MCQ, image, None, plan_for(), EVIDENCE)
    (question,) = waiting.value.wanted
    from agentic_iqa.vlm.base import VLMResponse
    from agentic_iqa.vlm.batching import Answer

    vague = VLMResponse(
        text=json.dumps({"final_answer": VAGUE, "quality_reasoning": "soft", "need_replan": False}),
        model="gpt-4o",
    )
    second_round = BatchScope(
        answers={0: Answer(question.request_key, response_json(vague), batch="b1")}
    )
    with pytest.raises(AwaitingBatch) as waiting_again, batch_scope(second_round):
        summarize(client, MCQ, image, None, plan_for(), EVIDENCE)
    (follow_up,) = waiting_again.value.wanted
    assert follow_up.seq == 1 and json.loads(follow_up.request_json)["task"] == FOLLOW_UP_TASK
    assert json.loads(follow_up.request_json)["images"] == []
    letter = VLMResponse(text="B", model="gpt-4o")
    third_round = BatchScope(
        answers={
            0: second_round.answers[0],
            1: Answer(follow_up.request_key, response_json(letter), batch="b2"),
        }
    )
    with batch_scope(third_round):
        result = summarize(client, MCQ, image, None, plan_for(), EVIDENCE)
    assert result.final_answer == "B" and result.answered_in_follow_up is True


# -- the setting ------------------------------------------------------------------------------


def test_the_follow_up_is_on_for_hosted_models_and_off_for_the_builtin():
    hosted = BackendConfig(backend="openai", model="gpt-4o")
    assert hosted.asks_follow_up is True
    assert BackendConfig(backend="anthropic", model="claude-sonnet-4-5").asks_follow_up is True
    assert BackendConfig().asks_follow_up is False
    assert hosted.model_copy(update={"follow_up": False}).asks_follow_up is False
    assert BackendConfig(follow_up=True).asks_follow_up is True
    assert asks_follow_up(BuiltinClient()) is False  # no configuration at all
    assert asks_follow_up(BuiltinClient(BackendConfig(follow_up=True))) is True


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"AGENTIC_IQA_VLM_FOLLOW_UP": "false"}, {"planner": False, "summarizer": False}),
        ({"AGENTIC_IQA_VLM_FOLLOW_UP": "0"}, {"planner": False, "summarizer": False}),
        (
            {"AGENTIC_IQA_VLM_FOLLOW_UP": "false", "AGENTIC_IQA_SUMMARIZER_FOLLOW_UP": "true"},
            {"planner": False, "summarizer": True},
        ),
        ({}, {"planner": True, "summarizer": True}),
    ],
)
def test_the_environment_turns_the_follow_up_off_and_a_role_s_own_variable_wins(
    monkeypatch, variables, expected
):
    monkeypatch.setenv("AGENTIC_IQA_VLM_BACKEND", "openai")
    monkeypatch.setenv("AGENTIC_IQA_VLM_MODEL", "gpt-4o")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    configs = load_backend_configs()
    assert {role: configs[role].asks_follow_up for role in expected} == expected


def test_the_flag_overrides_the_environment(monkeypatch):
    monkeypatch.setenv("AGENTIC_IQA_VLM_FOLLOW_UP", "true")
    configs = load_backend_configs(
        overrides={"backend": "openai", "model": "gpt-4o", "follow_up": False}
    )
    assert not any(config.asks_follow_up for config in configs.values())


# -- reading the follow-up --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("B", "B"),
        ("(C)", "C"),
        ("**A**", "A"),
        ("Answer: B", "B"),
        ("Ｃ", "C"),
        ("b", "B"),
        ("NONE", None),
        ("none", None),
        ("None of them.", None),
        ("A or C", None),
        ("Not B", None),
        ("B, no wait, C", None),
        ("", None),
    ],
)
def test_a_follow_up_reply_is_read_by_the_rules_of_any_reply(text, letter):
    assert read_follow_up(text, OPTIONS).letter == letter


def test_a_long_reply_is_quoted_by_its_start_and_end():
    long = "start " + "x" * (3 * QUOTED_CHARS) + " Answer: B"
    shown = quoted(long)
    assert len(shown) < QUOTED_CHARS + 20
    assert shown.startswith("start ") and shown.endswith("Answer: B")
    assert quoted("short") == "short"


def test_the_builtin_answers_a_follow_up_by_reading_the_quoted_reply():
    from agentic_iqa.agents.followup import follow_up_request

    builtin = BuiltinClient()
    assert builtin.complete(follow_up_request(MCQ, OPTIONS, "Blur, clearly: B.")).text == "B"
    assert builtin.complete(follow_up_request(MCQ, OPTIONS, "Hard to say.")).text == "NONE"


def test_a_model_writing_that_it_answered_in_a_follow_up_is_ignored(monkeypatch, example_images):
    written = {"final_answer": "B", "quality_reasoning": "soft", "answered_in_follow_up": True}
    with FakeAPIServer() as srv:
        srv.enqueue(Reply(200, openai_completion(json.dumps(written))))
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
    assert result.final_answer == "B" and result.answered_in_follow_up is False


def test_unable_to_determine_because_it_cannot_see_is_a_blind_reply(monkeypatch, example_images):
    """ "Unable to determine", its reasoning saying no image came: counted as a reply that
    cannot see the image (the job's warning counts those), not as a model choosing none."""
    written = {
        "final_answer": "Unable to determine",
        "quality_reasoning": "No image was attached to the request.",
    }
    with FakeAPIServer() as srv:
        srv.enqueue(Reply(200, openai_completion(json.dumps(written))))
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 1 and result.final_answer == UNABLE
    assert result.unparseable_reason.startswith(UNREAD_REASONS["cannot see"])
