"""Only a committed letter is an answer.  A letter mentioned in passing (in a clause
the reply concedes or sets aside, or as the label of a side point) is none, on every path that
reads a letter: the summarizer, scoring's five levels, the log-probabilities at the letter and
grading a stored answer.  A letter the reply then commits to still is."""

from __future__ import annotations

import math

import pytest

from agentic_iqa.agents.summarizer import UNABLE
from agentic_iqa.options import locate_option, parse_option
from agentic_iqa.prompts import QUALITY_LEVEL_CHOICES
from agentic_iqa.reports.metrics import answer_letter
from agentic_iqa.vlm.openai import option_logprobs_from_tokens
from tests.agentic_iqa.options.reply_corpus import CORPUS, OPTIONS
from tests.agentic_iqa.remote import MCQ, SCORING, answer_reply, ask, completion
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Reply

DISTORTION = OPTIONS["distortion"]  # A Noise, B Blur, C Compression
SEVERITY = OPTIONS["severity"]  # A None, B Slight, C Moderate, D Severe

#: How a letter is set off as an option in prose.
MARKS = {"parentheses": "({})", "option": "option {}", "bold": "**{}**", "bare": "{}"}
#: A clause that weighs the letter and commits to nothing, for each contrast word: ``{m}`` is
#: the marked letter.  Before the contrast, after it, in a concessive clause that opens or
#: closes the sentence, and set aside by the next sentence.
SET_ASIDE = {
    "but, before": "{m} is plausible, but the picture is mixed.",
    "yet, before": "{m} is plausible, yet the picture is mixed.",
    "though, before": "{m} is plausible, though the picture is mixed.",
    "although, before": "{m} is plausible, although the picture is mixed.",
    "whereas, before": "{m} is plausible, whereas the picture is mixed.",
    "while, before": "{m} is plausible, while the picture is mixed.",
    "but, after": "The picture is mixed, but {m} is plausible.",
    "yet, after": "The picture is mixed, yet {m} is plausible.",
    "though, after": "The picture is mixed, though {m} is plausible.",
    "whereas, after": "The picture is mixed, whereas {m} is plausible.",
    "although, opening": "Although {m} is plausible, the picture is mixed.",
    "though, opening": "Though {m} is plausible, the picture is mixed.",
    "even though, opening": "Even though {m} is plausible, the picture is mixed.",
    "while, opening": "While {m} is plausible, the picture is mixed.",
    "whereas, opening": "Whereas {m} is plausible, the picture is mixed.",
    "however, next sentence": "{m} is plausible; however, the picture is mixed.",
    "but, next sentence": "{m} is plausible. But the picture is mixed.",
    "tempting": "{m} is tempting.",
    "tempting to say": "It's tempting to say {m}.",
    "first thought": "{m} was my first thought.",
    "crossed my mind": "{m} crossed my mind.",
    "present but minor": "{m} is present but minor.",
    "visible but": "{m} is visible but the picture is mixed.",
    "barely noticeable": "{m} is barely noticeable.",
    "a minor point": "{m} is a minor point.",
}


def letters_only(options: dict[str, str]) -> dict[str, str]:
    """The options as the log-probability path and a stored answer's grading know them."""
    return {letter: "" for letter in options}


@pytest.mark.parametrize("clause", SET_ASIDE)
@pytest.mark.parametrize("mark", MARKS)
@pytest.mark.parametrize("letter", "ABC")
def test_a_letter_in_a_clause_the_reply_sets_aside_is_no_answer(clause, mark, letter):
    text = SET_ASIDE[clause].format(m=MARKS[mark].format(letter))
    if text[0].islower():
        text = text[0].upper() + text[1:]
    assert parse_option(text, DISTORTION) is None
    assert parse_option(text, letters_only(DISTORTION)) is None
    assert answer_letter(text) is None


@pytest.mark.parametrize("clause", SET_ASIDE)
@pytest.mark.parametrize("mark", MARKS)
@pytest.mark.parametrize(("aside", "answer"), [("A", "B"), ("B", "C"), ("C", "A")])
@pytest.mark.parametrize("ending", [" {}.", "\n\n**{}**", " So {}.", "\n\nAnswer: {}"])
def test_a_letter_standing_alone_after_a_set_aside_clause_is_the_answer(
    clause, mark, aside, answer, ending
):
    text = SET_ASIDE[clause].format(m=MARKS[mark].format(aside)) + ending.format(answer)
    if text[0].islower():
        text = text[0].upper() + text[1:]
    assert parse_option(text, DISTORTION) == answer
    assert parse_option(text, letters_only(DISTORTION)) == answer
    assert answer_letter(text) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("B is tempting, but the smearing is more than slight. C.", "C"),
        ("B is tempting, but the smearing is more than slight.", None),
        ("Slight (B) looks plausible, yet the blur is obvious at full size.\n\nC", "C"),
        ("While option C (Moderate) crossed my mind, the smearing is severe. D.", "D"),
        ("Whereas B might fit a thumbnail, at full size the blur is clearly moderate: C.", "C"),
    ],
)
def test_the_issue_severity_replies(text, answer):
    assert parse_option(text, SEVERITY) == answer
    assert parse_option(text, letters_only(SEVERITY)) == answer


@pytest.mark.parametrize("noise", ["noise", "Noise", "NOISE", "noisy grain", "noisiness"])
@pytest.mark.parametrize("letter", ["B", "C"])
def test_an_option_labelled_with_another_options_letter_contradicts_itself(noise, letter):
    """ "The noise (B)" where B is Blur: the reply's letter and its words disagree."""
    for text in (
        f"The {noise} ({letter}) is visible.",
        f"The {noise} ({letter}) dominates.",
        f"Option {letter} ({noise}) is the main issue.",
    ):
        assert parse_option(text, DISTORTION) is None, text


@pytest.mark.parametrize(
    "minor", ["some", "a little", "slight", "mild", "a few", "traces of", "a touch of", "faint"]
)
@pytest.mark.parametrize(
    "form",
    [
        "Mostly {main}, with {minor} ({x}) artefacts.",
        "{Main} throughout, plus {minor} ({x}) artefacts in the shadows.",
        "{Main} dominates; there is also {minor} grain ({x}) in the sky.",
        "Along with {minor} grain ({x}), there is strong {main} in the sky.",
    ],
)
@pytest.mark.parametrize(
    ("main", "x"), [("blur", "A"), ("blurring", "C"), ("compression", "B"), ("blocking", "A")]
)
def test_a_letter_labelling_a_side_point_is_no_answer(minor, form, main, x):
    text = form.format(main=main, Main=main.capitalize(), minor=minor, x=x)
    assert parse_option(text, DISTORTION) is None
    assert parse_option(text, letters_only(DISTORTION)) is None


@pytest.mark.parametrize(
    "text",
    [
        "The grain ({}) is also visible.",
        "There is grain ({}) in the sky too.",
        "The grain ({}) shows in the corners as well.",
    ],
)
@pytest.mark.parametrize("x", "ABC")
def test_a_letter_said_to_be_there_as_well_is_no_answer(text, x):
    assert parse_option(text.format(x), DISTORTION) is None
    assert parse_option(text.format(x), letters_only(DISTORTION)) is None


@pytest.mark.parametrize("leaning", ["Mostly", "Mainly", "Chiefly", "Predominantly", "Largely"])
@pytest.mark.parametrize("x", "ABC")
def test_a_letter_beside_the_clause_a_sentence_leans_on_is_no_answer(leaning, x):
    text = f"{leaning} smearing, with grain in the shadows ({x})."
    assert parse_option(text, DISTORTION) is None
    assert parse_option(text, letters_only(DISTORTION)) is None


@pytest.mark.parametrize("blur", ["blur", "Blur", "blurry edges", "blurred detail", "BLURRING"])
def test_a_letter_mentioned_beside_another_option_named_by_its_text_is_no_answer(blur):
    """The reply names two options and commits to neither: "Heavy blur, and noise (A)"."""
    for text in (
        f"Heavy {blur} throughout, and noise (A) in the shadows.",
        f"Noise (A) in the shadows; {blur} across the frame.",
    ):
        assert parse_option(text, DISTORTION) is None, text


@pytest.mark.parametrize(
    ("text", "options", "answer"),
    [
        # a reply whose only content is the letter
        ("(B)", DISTORTION, "B"),
        ("**B**", DISTORTION, "B"),
        ("Option C", DISTORTION, "C"),
        ("This image deserves a C.", QUALITY_LEVEL_CHOICES, "C"),
        ("Good (B)", QUALITY_LEVEL_CHOICES, "B"),
        # a label of its own option, in a sentence that weighs nothing
        ("The image looks Fair (C) to me.", QUALITY_LEVEL_CHOICES, "C"),
        ("The blurry edges (B) are the main distortion.", DISTORTION, "B"),
        ("Although the image is sharp, it is noisy (option A).", DISTORTION, "A"),
        ("Though the grain is visible, (B) blur is the main distortion.", DISTORTION, "B"),
        ("Mostly blur (B), with some blocking artefacts.", DISTORTION, "B"),
        # a correction: "not X, but Y"
        ("It is not A, but B.", DISTORTION, "B"),
        ("Nothing but B.", DISTORTION, "B"),
        ("The noise is not strong, but the blur (B) dominates.", DISTORTION, "B"),
        # a committed answer with a clause it sets aside, before or after
        ("C. B is tempting, but the blocking is too strong.", QUALITY_LEVEL_CHOICES, "C"),
        ("I'd go with B, but A is close.", QUALITY_LEVEL_CHOICES, "B"),
        ("B is tempting, but I'd go with C.", QUALITY_LEVEL_CHOICES, "C"),
        ("Although B is tempting, the answer is C.", QUALITY_LEVEL_CHOICES, "C"),
        (
            "The answer is D; while C (Fair) is possible, the noise is too heavy.",
            QUALITY_LEVEL_CHOICES,
            "D",
        ),
        ("B, although the noise is noticeable.", QUALITY_LEVEL_CHOICES, "B"),
        # a contrast that ends the sentence weighs nothing in it
        ("Definitely B, though.", QUALITY_LEVEL_CHOICES, "B"),
        ("This is a C, however.", QUALITY_LEVEL_CHOICES, "C"),
    ],
)
def test_a_letter_the_reply_commits_to_is_still_the_answer(text, options, answer):
    assert parse_option(text, options) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("While A fits best at first glance, C.", "C"),
        ("Although A is correct for the colours, the noise makes it a C.", "C"),
        ("Although A is correct for the colours, the noise is visible.", None),
        ("I'd say B, but the smearing is more than slight. C.", None),
    ],
)
def test_a_commitment_inside_a_conceded_clause_or_taken_back_is_none(text, answer):
    """A concessive clause concedes even "A fits best" (the sentence's point comes after it);
    a commitment and a final letter that differ are two answers, so none."""
    assert parse_option(text, QUALITY_LEVEL_CHOICES) == answer


# -- every path -------------------------------------------------------------------------------


def test_where_only_the_letters_are_known_the_corpus_reads_no_letter_the_model_did_not_give():
    """The log-probability path and a stored answer's grading know the letters, not their
    texts: they may read fewer letters, never another one."""
    read = 0
    for graded in CORPUS:
        options = OPTIONS[graded.options]
        letter = parse_option(graded.text, letters_only(options), cut_off=graded.cut)
        assert letter in (None, graded.expected), graded.text
        read += letter is not None
        if not graded.cut:
            stored = answer_letter(graded.text)
            assert stored is None or stored not in options or stored == graded.expected, graded.text
    assert read >= 230


def tokens(text: str, letters: dict[int, list[tuple[str, float]]]) -> list[dict]:
    """``text`` as chat-completion tokens split at spaces, with top log-probabilities at the
    positions in ``letters``."""
    pieces, at = [], 0
    for word in text.split(" "):
        piece = word if at == 0 else " " + word
        top = letters.get(at, [])
        pieces.append(
            {
                "token": piece,
                "logprob": top[0][1] if top else -0.01,
                "top_logprobs": [{"token": token, "logprob": logprob} for token, logprob in top],
            }
        )
        at += len(piece)
    return pieces


def test_the_logprobs_are_read_at_the_letter_the_reply_commits_to():
    text = "B is tempting, but the smearing is more than slight. C."
    at_c = text.index(" C.")
    found = tokens(
        text, {0: [("B", -0.1), ("C", -2.0)], at_c: [(" C.", -0.3), (" D.", -1.2), (" B.", -2.2)]}
    )
    assert locate_option(text, letters_only(SEVERITY)).start == at_c + 1
    assert option_logprobs_from_tokens(found, "ABCD") == {
        "A": -math.inf,
        "B": -2.2,
        "C": -0.3,
        "D": -1.2,
    }


@pytest.mark.parametrize(
    "text",
    [
        "The noise (B) is visible but the blur dominates.",
        "Option B (noise) is present but minor; the main issue is the blur.",
        "Mostly blur, with some (C) blocking artefacts",
    ],
)
def test_the_logprobs_are_not_read_at_a_letter_mentioned_in_passing(text):
    assert locate_option(text, letters_only(DISTORTION)) is None
    assert option_logprobs_from_tokens(tokens(text, {}), "ABC") is None


@pytest.mark.parametrize(("follow_up", "asked"), [(False, 3), (True, 2)])
def test_the_summarizer_asks_again_when_the_letter_was_only_mentioned_in_passing(
    monkeypatch, example_images, follow_up, asked
):
    """Off: three attempts with a stricter prompt; on: the question and one follow-up, whose
    reply (the same words) is read by the same rule and gives no letter either."""
    reply = "The noise (B) is visible but the blur dominates."
    with FakeAPIServer(lambda _r: answer_reply(reply)) as srv:
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]), follow_up=follow_up)
        count = len(srv.requests)
    assert count == asked
    assert result.answer_unparseable and result.final_answer == UNABLE
    assert reply in result.unparseable_reason


def test_the_summarizer_takes_the_letter_after_the_clause_it_set_aside(monkeypatch, example_images):
    with FakeAPIServer(
        lambda _r: answer_reply("A is tempting given the grain, but the softness dominates. B.")
    ) as srv:
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 1
    assert result.final_answer == "B" and not result.answer_unparseable


def test_scoring_reads_the_level_and_its_logprobs_after_a_set_aside_clause(
    monkeypatch, example_images
):
    pieces = [
        ("B", [("B", -0.1), ("C", -2.5)]),
        (" is", []),
        (" tempting", []),
        (",", []),
        (" but", []),
        (" the", []),
        (" noise", []),
        (" pulls", []),
        (" it", []),
        (" down", []),
        (".", []),
        (" C", [(" C", -0.2), (" D", -1.9), (" B", -3.0)]),
        (".", []),
    ]
    with FakeAPIServer(lambda _r: Reply(200, completion(pieces))) as srv:
        result = ask(srv, monkeypatch, SCORING, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 1 and result.probability_source == "logprobs"
    assert max(result.level_distribution, key=result.level_distribution.get) == "Fair"


@pytest.mark.parametrize(("follow_up", "asked"), [(False, 3), (True, 2)])
def test_scoring_asks_again_when_the_level_was_only_set_aside(
    monkeypatch, example_images, follow_up, asked
):
    pieces = [
        ("B", [("B", -0.1), ("C", -2.5)]),
        (" is", []),
        (" tempting", []),
        (",", []),
        (" but", []),
        (" the", []),
        (" noise", []),
        (" pulls", []),
        (" it", []),
        (" down", []),
        (".", []),
    ]
    with FakeAPIServer(lambda _r: Reply(200, completion(pieces))) as srv:
        result = ask(
            srv, monkeypatch, SCORING, str(example_images["original"]), follow_up=follow_up
        )
        count = len(srv.requests)
    assert count == asked  # three attempts at a level, or the question and its follow-up
    assert result.answer_unparseable and result.quality_score is None
