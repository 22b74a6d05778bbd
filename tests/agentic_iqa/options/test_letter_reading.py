"""Only the letter the model chose is its answer, one rule on every path (the summarizer's answer,
scoring mode's five levels, the log-probabilities at the letter, grading a stored answer).
Remote models are the real SDKs against a local server (fake_servers.py)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from agentic_iqa.options import locate_option, parse_option
from agentic_iqa.options.normalise import fold_width
from agentic_iqa.prompts import QUALITY_LEVEL_CHOICES
from agentic_iqa.reports.metrics import answer_letter
from agentic_iqa.vlm import BackendConfig, VLMRequest
from agentic_iqa.vlm.anthropic import AnthropicClient
from tests.agentic_iqa.options.reply_corpus import CORPUS, OPTIONS
from tests.agentic_iqa.remote import (
    MCQ,
    SCORING,
    answer_reply,
    ask,
    client_for,
    completion,
)
from tests.agentic_iqa.vlm.fake_servers import (
    FakeAPIServer,
    Reply,
    anthropic_message,
    openai_completion,
)

LEVELS = ("A", "B", "C", "D", "E")
SEVERITY = OPTIONS["severity"]


# -- the graded corpus ------------------------------------------------------------------------


def test_the_graded_corpus_reads_no_letter_the_model_did_not_choose():
    outcomes: Counter[str] = Counter()
    misread = []
    for graded in CORPUS:
        read = parse_option(graded.text, OPTIONS[graded.options], cut_off=graded.cut)
        if read == graded.expected:
            outcomes["right" if read else "none, rightly"] += 1
        else:
            kind = (
                "unread"
                if read is None
                else "letter where none given"
                if graded.expected is None
                else "wrong letter"
            )
            outcomes[kind] += 1
            misread.append((kind, graded.category, graded.text, graded.expected, read))
    letters = sum(1 for graded in CORPUS if graded.expected)
    assert len(CORPUS) >= 200
    wrong = [m for m in misread if m[0] != "unread"]
    assert not wrong, wrong
    assert outcomes["right"] / letters >= 0.85, misread


def test_the_corpus_covers_what_hosted_models_write():
    categories = {graded.category for graded in CORPUS}
    assert {
        "negation",
        "hedge",
        "committed then reasoning",
        "cut off",
        "option A as a word",
        "no answer",
        "lower case",
        "markdown",
        "set aside",
        "set aside, then a letter",
        "passing mention",
        "committed with a caveat",
    } <= categories
    assert {graded.style for graded in CORPUS} == {"gpt", "claude", "qwen"}
    assert sum(graded.expected is None for graded in CORPUS) >= 40


# -- each way a letter was misread ------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Not A.",
        "I wouldn't say D.",
        "definitely not B",
        "Rather than C.",
        "A or B",
        "Hard to say, it could be A or C",
        "Either B or C.",
        "Somewhere between A and B.",
    ],
)
def test_a_negated_option_or_a_hedge_is_no_answer(text):
    assert parse_option(text, QUALITY_LEVEL_CHOICES) is None


@pytest.mark.parametrize(
    ("text", "options", "letter"),
    [
        ("C\n\nReasoning: Option B (Slight) would understate the visible blur.", SEVERITY, "C"),
        (
            "B\nExplanation: the image is not Excellent (A) because of mild noise.",
            QUALITY_LEVEL_CHOICES,
            "B",
        ),
        (
            "Final answer: D\n\nI considered C, but the noise is too strong.",
            QUALITY_LEVEL_CHOICES,
            "D",
        ),
    ],
)
def test_a_committed_answer_is_not_displaced_by_options_mentioned_after_it(text, options, letter):
    assert parse_option(text, options) == letter
    assert answer_letter(text) == letter  # grading a stored answer reads it the same way


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("A is correct.", "A"),
        ("A, because the image is pristine.", "A"),
        ("A fits best.", "A"),
        ("A good image", None),
        ("A bit soft, but fine overall.", None),
    ],
)
def test_a_before_a_verb_or_comma_is_the_option_and_before_a_word_the_article(text, letter):
    assert parse_option(text, QUALITY_LEVEL_CHOICES) == letter


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("C\n\nReasoning: Option B would under", "C"),
        ("Answer: D\n\nThe heavy", "D"),
        ("C, because the blur", "C"),
        ("The answer is C", None),
        ("I'd say B or", None),
        ("B", None),
        ("The answer is", None),
    ],
)
def test_a_cut_off_reply_keeps_only_a_letter_it_has_already_written(text, letter):
    assert parse_option(text, QUALITY_LEVEL_CHOICES, cut_off=True) == letter


# -- the log-probability path -----------------------------------------------------------------


NOT_A = [
    ("Not", [("Not", -0.3), ("A", -1.5)]),
    (" A", [(" A", -0.05), (" B", -3.2), (" C", -4.0)]),
    (".", []),
]
COMMITTED_C = [
    ("C", [("C", -0.2), ("B", -1.8), ("D", -3.0)]),
    ("\n\n", []),
    ("Reason", []),
    ("ing", []),
    (":", []),
    (" Option", []),
    (" B", [(" B", -0.01)]),
    (" (", []),
    ("Slight", []),
    (")", []),
    (" would", []),
]


@pytest.mark.parametrize(("follow_up", "asked"), [(False, 3), (True, 2)])
def test_the_openai_logprobs_are_not_read_at_a_negated_letter(
    monkeypatch, example_images, follow_up, asked
):
    """The old reader read "Not A." at its "A" and fused Excellent, 4.72."""
    with FakeAPIServer(lambda _r: Reply(200, completion(NOT_A))) as srv:
        response = client_for(srv, monkeypatch).complete(
            VLMRequest(
                task="quality_levels",
                system="s",
                user="u",
                json_output=False,
                answer_options=LEVELS,
            )
        )
        result = ask(
            srv, monkeypatch, SCORING, str(example_images["original"]), follow_up=follow_up
        )
        count = len(srv.requests)
    assert response.option_logprobs is None and response.probability_source is None
    assert count == 1 + asked  # the direct call, then the attempts at a level
    assert result.answer_unparseable and result.quality_score is None


def test_the_openai_logprobs_are_read_at_the_committed_first_line_letter(monkeypatch):
    with FakeAPIServer(lambda _r: Reply(200, completion(COMMITTED_C))) as srv:
        response = client_for(srv, monkeypatch).complete(
            VLMRequest(
                task="quality_levels",
                system="s",
                user="u",
                json_output=False,
                answer_options=LEVELS,
            )
        )
    assert response.option_logprobs == {
        "A": -math.inf,
        "B": -1.8,
        "C": -0.2,
        "D": -3.0,
        "E": -math.inf,
    }


def test_a_reply_cut_at_the_letter_cap_keeps_its_letter_and_logprobs(monkeypatch, example_images):
    with FakeAPIServer(
        lambda _r: Reply(200, completion(COMMITTED_C, finish_reason="length"))
    ) as srv:
        result = ask(srv, monkeypatch, SCORING, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 1
    assert result.probability_source == "logprobs" and not result.answer_unparseable
    assert max(result.level_distribution, key=result.level_distribution.get) == "Fair"


def test_a_reply_cut_before_its_letter_is_asked_again(monkeypatch, example_images):
    with FakeAPIServer() as srv:
        srv.enqueue(
            Reply(
                200, completion([("The", []), (" answer", []), (" is", [])], finish_reason="length")
            ),
            Reply(200, completion([("B", [("B", -0.1), ("C", -2.5)])])),
        )
        result = ask(srv, monkeypatch, SCORING, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 2 and result.probability_source == "logprobs"
    assert max(result.level_distribution, key=result.level_distribution.get) == "Good"


def test_the_anthropic_path_reads_no_letter_from_a_negation(monkeypatch):
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", "sk-ant-test")
    with FakeAPIServer(lambda _r: Reply(200, anthropic_message("Not A."))) as srv:
        response = AnthropicClient(
            BackendConfig(
                backend="anthropic",
                model="claude-test",
                base_url=srv.url,
                api_key_env="TEST_ANTHROPIC_KEY",
                timeout=5,
                max_retries=0,
            )
        ).complete(
            VLMRequest(
                task="quality_levels",
                system="s",
                user="u",
                json_output=False,
                answer_options=LEVELS,
            )
        )
    assert response.option_logprobs is None


# -- the summarizer's multiple-choice answer --------------------------------------------------


@pytest.mark.parametrize(("follow_up", "asked"), [(False, 3), (True, 2)])
def test_a_hedged_final_answer_is_asked_again_then_unread(
    monkeypatch, example_images, follow_up, asked
):
    with FakeAPIServer(lambda _r: answer_reply("A or B")) as srv:
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]), follow_up=follow_up)
        count = len(srv.requests)
    assert count == asked
    assert result.answer_unparseable and "A or B" in result.unparseable_reason


def cut_json(text: str) -> Reply:
    body = openai_completion(text)
    body["choices"][0]["finish_reason"] = "length"
    return Reply(200, body)


def test_a_json_answer_cut_after_its_final_answer_keeps_it(monkeypatch, example_images):
    with FakeAPIServer(
        lambda _r: cut_json(
            '{"final_answer": "B", "quality_reasoning": "The edges are soft and the'
        )
    ) as srv:
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 1
    assert result.final_answer == "B" and not result.answer_unparseable
    assert result.quality_reasoning.startswith("The edges are soft and the...")
    assert "cut off" in result.quality_reasoning


def test_a_json_answer_cut_inside_its_final_answer_is_asked_again(monkeypatch, example_images):
    with FakeAPIServer() as srv:
        srv.enqueue(cut_json('{"final_answer": "B'), answer_reply("C"))
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 2 and result.final_answer == "C"


def test_the_logprob_path_reads_a_letter_only_where_the_text_reader_reads_it():
    """The OpenAI backend knows the letters, not their texts: where it reads a letter (and
    the summarizer fuses its log-probabilities), the summarizer's reader reads the same."""
    for graded in CORPUS:
        if graded.options != "quality":
            continue
        letters_only = locate_option(
            graded.text, {letter: "" for letter in LEVELS}, cut_off=graded.cut
        )
        if letters_only is not None:
            assert fold_width(graded.text[letters_only.start]).upper() == letters_only.letter
            assert (
                parse_option(graded.text, QUALITY_LEVEL_CHOICES, cut_off=graded.cut)
                == letters_only.letter
            ), graded.text


# -- the follow-up ----------------------------------------------------------------------------


def test_every_follow_up_of_the_corpus_is_read_as_graded():
    from agentic_iqa.agents.followup import read_follow_up
    from tests.agentic_iqa.options.follow_up_corpus import FOLLOW_UPS

    first_replies = {graded.text: graded for graded in CORPUS}
    assert set(FOLLOW_UPS) <= set(first_replies)  # each follows a reply of the corpus
    misread = {
        reply: (read_follow_up(answer, OPTIONS[first_replies[reply].options]).letter, graded)
        for reply, (answer, graded) in FOLLOW_UPS.items()
        if read_follow_up(answer, OPTIONS[first_replies[reply].options]).letter != graded
    }
    assert misread == {}


def test_with_the_follow_up_no_reply_with_a_commitment_is_left_unread():
    """The summarizer asks about a reply left unread for naming none or several, never one
    cut off (asked again shorter) or saying it cannot see (no answer): with the corpus's
    follow-ups, every committed reply is read, and none as another letter."""
    from agentic_iqa.agents.followup import read_follow_up
    from agentic_iqa.options import read_option
    from tests.agentic_iqa.options.follow_up_corpus import follow_up_for

    wrong, unread = [], []
    for graded in CORPUS:
        options = OPTIONS[graded.options]
        first = read_option(graded.text, options, cut_off=graded.cut)
        read = first.letter
        if read is None and first.unread in ("none", "several") and not graded.cut:
            read = read_follow_up(follow_up_for(graded.text)[0], options).letter
        if graded.expected is not None and read is None:
            unread.append(graded.text)
        elif graded.expected is not None and read != graded.expected:
            wrong.append(graded.text)
    assert wrong == [] and unread == []
