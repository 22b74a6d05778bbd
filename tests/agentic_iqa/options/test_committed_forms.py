"""Every form in which a model commits to an option is read, as a careful grader reads it
(issue 49): a letter in quotes, bold or parentheses, full-width letters, a lower-case letter
standing as the answer, a final "Answer: (C)" after other letters, Chinese and Japanese
answer phrases, option text respelled.  For each form, the cases that would break it are no
answer: negated, set aside, hedged, two letters, in passing.  A reply that says it cannot see
the image is no answer whatever letter it names, and the reader says why."""

from __future__ import annotations

import pytest

from agentic_iqa.agents.summarizer import UNABLE
from agentic_iqa.options import (
    UNREAD_REASONS,
    locate_option,
    parse_option,
    read_option,
    says_it_cannot_see,
)
from agentic_iqa.options.normalise import fold_width, respells
from agentic_iqa.prompts import QUALITY_LEVEL_CHOICES
from agentic_iqa.reports.metrics import answer_letter
from agentic_iqa.vlm.openai import option_logprobs_from_tokens
from tests.agentic_iqa.options.reply_corpus import CORPUS, OPTIONS
from tests.agentic_iqa.remote import MCQ, SCORING, answer_reply, ask, completion
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Reply

Q = QUALITY_LEVEL_CHOICES
DISTORTION = OPTIONS["distortion"]  # A Noise, B Blur, C Compression
PROBLEM = OPTIONS["problem"]  # A Underexposure, B Motion blur, C Moderate noise, D Overexposure
LETTERS_ONLY = {letter: "" for letter in "ABCDE"}

# -- quotes, bold, parentheses ----------------------------------------------------------------

#: How a model wraps the letter it commits to.
WRAPS = ["'{}'", '"{}"', "**'{}'**", "“{}”", "‘{}’", "`{}`", "**{}**", "({})", "「{}」", "**“{}”**"]
#: Commitments, ``{m}`` the wrapped letter.
COMMITS = [
    "I'm choosing {m}.",
    "I am going with {m}.",
    "The answer is {m} — the sky is blown out.",
    "I'd go with {m}.",
    "My choice is {m}.",
    "Answer: {m}",
    "{m} is correct.",
    "It's {m}.",
    "答案是{m}",
    "选{m}。",
    "答えは{m}です。",
]
#: The same letters negated, set aside, hedged or chosen with another (``{n}``).
NOT_COMMITTED = [
    "Not {m}.",
    "I'm not choosing {m}.",
    "The answer is not {m}.",
    "{m} is incorrect.",
    "{m} is tempting, but the grain is too visible.",
    "I'm choosing {m} or {n}.",
    "The answer is {m} or {n}.",
    "I'm choosing {m} and {n}.",
    "It's between {m} and {n}.",
    "不选{m}",
    "答案不是{m}",
]


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("form", COMMITS)
@pytest.mark.parametrize("letter", "BD")
def test_a_wrapped_letter_the_reply_commits_to_is_read(wrap, form, letter):
    text = form.format(m=wrap.format(letter))
    assert parse_option(text, Q) == letter, text
    assert parse_option(text, LETTERS_ONLY) == letter, text
    found = locate_option(text, LETTERS_ONLY)
    assert found is not None and text[found.start] == letter  # where its token stands


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("form", NOT_COMMITTED)
def test_a_wrapped_letter_negated_set_aside_or_one_of_two_is_no_answer(wrap, form):
    text = form.format(m=wrap.format("B"), n=wrap.format("C"))
    assert parse_option(text, Q) is None, text
    assert parse_option(text, LETTERS_ONLY) is None, text


@pytest.mark.parametrize("wrap", ["'{}'", "“{}”", "({})", "**{}**"])
def test_a_wrapped_letter_mentioned_in_passing_is_no_answer(wrap):
    for text in (
        "The noise {} is visible but the blur dominates.",
        "Mostly blur, with some {} blocking artefacts.",
        "Although {} fits the grain, the smearing is heavy.",
    ):
        assert parse_option(text.format(wrap.format("A")), DISTORTION) is None, text


def test_an_apostrophe_inside_a_word_is_no_quote():
    assert parse_option("I'd say it's fine.", Q) is None  # the "d" of "I'd"
    assert parse_option("The B's edges are soft.", Q) is None
    assert parse_option("I'd say 'B'.", Q) == "B"


# -- full-width letters ------------------------------------------------------------------------


def full_width(text: str) -> str:
    """``text`` with every ASCII letter and digit full-width, as some models write them."""
    return "".join(chr(ord(ch) + 0xFEE0) if ch.isascii() and ch.isalnum() else ch for ch in text)


def test_full_width_letters_read_as_their_ascii_selves_on_the_whole_corpus():
    """The rule, on every graded reply: committed, negated, in passing, hedged, cut off.  The
    letter is found at the same position, so the log-probabilities are read at its token."""
    for graded in CORPUS:
        options = OPTIONS[graded.options]
        wide = full_width(graded.text)
        assert fold_width(wide) == fold_width(graded.text)
        ascii_read = locate_option(graded.text, options, cut_off=graded.cut)
        assert locate_option(wide, options, cut_off=graded.cut) == ascii_read, graded.text


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("答案：Ｃ", "C"),
        ("Answer: Ｄ", "D"),
        ("（Ｂ）", "B"),
        ("不是Ｃ，是Ｄ", "D"),
        ("Ｂ is tempting, but the smearing is heavy.", None),
        ("答案：Ｂ或Ｃ", None),
        ("答案是Ｂ和Ｃ", None),
        ("Not Ｃ.", None),
        ("The noise (Ｂ) is visible but the blur dominates.", None),
    ],
)
def test_a_full_width_letter_follows_the_same_rules(text, letter):
    options = DISTORTION if "noise" in text else Q
    assert parse_option(text, options) == letter
    assert answer_letter(text) == letter


def test_the_logprobs_are_read_at_a_full_width_letter():
    tokens = [
        {"token": "答案", "logprob": -0.01, "top_logprobs": []},
        {"token": "：", "logprob": -0.01, "top_logprobs": []},
        {
            "token": "Ｃ",
            "logprob": -0.2,
            "top_logprobs": [
                {"token": "Ｃ", "logprob": -0.2},
                {"token": "Ｂ", "logprob": -1.9},
                {"token": "D", "logprob": -3.0},
            ],
        },
    ]
    assert option_logprobs_from_tokens(tokens, "ABCD") == {
        "A": float("-inf"),
        "B": -1.9,
        "C": -0.2,
        "D": -3.0,
    }


# -- lower-case letters ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "form",
    [
        "i think it's {l}, the blocking is obvious.",
        "it's {l}",
        "it is {l}.",
        "i'm choosing {l}.",
        "i'd go with {l}.",
        "answer: {l}",
        "so it's {l}.",
        "答案是{l}",
    ],
)
@pytest.mark.parametrize("letter", "bcde")
def test_a_lower_case_letter_standing_as_the_answer_is_read(form, letter):
    assert parse_option(form.format(l=letter), Q) == letter.upper()


@pytest.mark.parametrize(
    "text",
    [
        "it's a good image overall.",
        "i think it's a bit soft.",
        "it is a",
        "it's a.",
        "answer: a good image",
        "i think it's b or c.",
        "it's b and c.",
        "it's not c.",
        "i don't think it's c.",
        "I don't really think it's C.",
        "I do not honestly believe it is C.",
        "b is tempting, but the grain is visible.",
        "it's b/c of the blur",
    ],
)
def test_a_lower_case_letter_not_standing_as_the_answer_is_none(text):
    assert parse_option(text, Q) is None, text
    assert answer_letter(text) is None, text


def test_a_lower_case_i_is_the_pronoun_where_i_is_an_option():
    options = {letter: "" for letter in "ABCDEFGHI"}
    assert parse_option("i think it's c, the blocking is obvious.", options) == "C"
    assert parse_option("i'd say c", options) == "C"
    assert parse_option("i think so.", options) is None
    assert parse_option("i", options) == "I"


# -- the answer after other letters ------------------------------------------------------------

OPENERS = [
    "Between {x} and {y}, it is hard to choose: {x} would suit a sharper photo.",
    "{x} or {y}? The edges are soft but the detail survives.",
    "Option {x} is out (too much noise); {y} and {z} both fit partly.",
    "{x} is tempting, but {y} fits the grain better.",
    "Not {x}. Maybe {y}.",
]


@pytest.mark.parametrize("opener", OPENERS)
@pytest.mark.parametrize(
    "ending", ["\n\nAnswer: ({a})", "\nFinal answer: {a}", "\n\n**Answer: {a}**", "\n答案：{a}"]
)
@pytest.mark.parametrize(("x", "y", "z", "a"), [("B", "C", "D", "C"), ("A", "B", "C", "B")])
def test_a_final_answer_line_after_a_discussion_of_other_letters_is_read(
    opener, ending, x, y, z, a
):
    text = opener.format(x=x, y=y, z=z) + ending.format(a=a)
    assert parse_option(text, Q) == a, text
    assert parse_option(text, LETTERS_ONLY) == a, text


@pytest.mark.parametrize("opener", OPENERS)
@pytest.mark.parametrize(
    "ending", ["\n\nAnswer: ({x}) or ({y})", "\n\nAnswer: not ({y})", "\n\nAnswer: {x} and {y}"]
)
def test_a_final_line_that_hedges_negates_or_names_two_is_no_answer(opener, ending):
    text = opener.format(x="B", y="C", z="D") + ending.format(x="B", y="C")
    assert parse_option(text, Q) is None, text


# -- Chinese and Japanese ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "form",
    [
        "答案是{x}",
        "答案：{x}",
        "答案应该是{x}。",
        "选{x}。",
        "我选{x}",
        "我选择{x}，因为噪声明显。",
        "我会选{x}",
        "我选择选项{x}",
        "正确答案是{x}。",
        "我认为答案是{x}，图像有明显模糊。",
        "我认为是{x}",
        "{x}是正确的",
        "不选A，选{x}。",
        "不是A，是{x}",
        "答えは{x}です。",
        "答え：{x}",
        "正解は{x}",
        "{x}を選びます",
        "{x}が正解です",
    ],
)
@pytest.mark.parametrize("x", "BCD")
def test_chinese_and_japanese_answer_phrases_are_read(form, x):
    text = form.format(x=x)
    assert parse_option(text, Q) == x, text
    assert parse_option(text, LETTERS_ONLY) == x, text


@pytest.mark.parametrize(
    "form",
    [
        "不选{x}",
        "我不选{x}。",
        "我不会选{x}",
        "答案不是{x}。",
        "不是{x}",
        "可能是{x}或{y}。",
        "选{x}或{y}",
        "选{x}和{y}",
        "我选{x}还是{y}呢",
        "答えは{x}か{y}",
        "{x}和{y}之间，很难说。",
    ],
)
def test_chinese_and_japanese_negations_hedges_and_pairs_are_no_answer(form):
    text = form.format(x="B", y="C")
    assert parse_option(text, Q) is None, text
    assert parse_option(text, LETTERS_ONLY) is None, text


def test_an_option_in_chinese_is_no_choice_verb():
    """ "选项" is "option": "选项C是正确的" reads C by its verdict, not by "选"."""
    assert parse_option("选项C是正确的", Q) == "C"
    assert parse_option("选项B和选项C都不对。", Q) is None


# -- option text -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "options", "letter"),
    [
        ('{"final_answer": "moderate noise"}', PROBLEM, "C"),
        ('{"final_answer": "Overexposed", "reason": "bright sky"}', PROBLEM, "D"),
        ('{"answer": "Overexposed"}', PROBLEM, "D"),
        ("Overexposed", PROBLEM, "D"),
        ("overexposed.", PROBLEM, "D"),
        ("**Underexposed**", PROBLEM, "A"),
        ("Answer: overexposed", PROBLEM, "D"),
        ("Motion blurred", PROBLEM, "B"),
        ("Noisy", DISTORTION, "A"),
        ("Blurry.", DISTORTION, "B"),
        ("Compressed", DISTORTION, "C"),
        ("I'd say blurry.", DISTORTION, "B"),
    ],
)
def test_option_text_respelled_as_exactly_one_option_is_read(text, options, letter):
    assert parse_option(text, options) == letter


@pytest.mark.parametrize(
    ("text", "options"),
    [
        ("Not overexposed", PROBLEM),
        ("Answer: not overexposed", PROBLEM),
        ("Overexposed or underexposed, hard to say.", PROBLEM),
        ("Noisy and blurry", DISTORTION),
        ("The sky looks overexposed, but the shadows are noisy.", PROBLEM),
        ("Blurring", {"A": "Blurred", "B": "Blurry"}),  # respells both
        ("Yeah", OPTIONS["yesno"]),  # a short word must be the same word
        ("Nope", OPTIONS["yesno"]),
        ("Moderately noisy", {"A": "Moderate", "B": "Noise"}),  # one option's words, not two
        ("Modern", OPTIONS["severity"]),  # "Mode-": the endings differ too much
    ],
)
def test_option_text_negated_hedged_or_matching_no_single_option_is_none(text, options):
    assert parse_option(text, options) is None, text


def test_a_respelling_keeps_its_stem_and_changes_only_an_ending():
    assert respells("Overexposed", "Overexposure")
    assert respells("noisy", "Noise") and respells("blurry", "Blur")
    assert respells("Motion blurred", "Motion blur")
    assert not respells("Underexposed", "Overexposure")
    assert not respells("Modern", "Moderate")
    assert not respells("Bad", "Badly")  # shorter than a stem: the same word only
    assert not respells("Motion", "Motion blur")


# -- a reply that cannot see the image ---------------------------------------------------------

BLIND = [
    "As a text-only model I can't see the photo",
    "I cannot see the image you provided",
    "I'm unable to view images",
    "I am not able to see the attached image",
    "I don't have access to the image",
    "No image was attached",
    "Without seeing the image",
    "The image was not provided",
    "As an AI language model, I cannot see pictures",
    "抱歉，我无法查看图片",
    "我看不到图片",
    "没有提供图片",
    "申し訳ありませんが、画像を見ることができません",
]
#: What a blind reply goes on to say, naming a letter in general terms or outright.
AFTER_BLIND = [
    ", but in general motion blur (B) is the most common distortion in handheld shots.",
    ". Typically, though, the answer would be B.",
    "; I'd guess B.",
    ". Answer: B",
    "，但一般来说答案是B。",
]


@pytest.mark.parametrize("blind", BLIND)
@pytest.mark.parametrize("after", AFTER_BLIND)
def test_a_reply_that_cannot_see_the_image_is_no_answer_whatever_letter_it_names(blind, after):
    text = blind + after
    reading = read_option(text, PROBLEM)
    assert reading.letter is None and reading.match is None, text
    assert reading.unread == "cannot see"
    assert (
        reading.reason == UNREAD_REASONS["cannot see"] == "the model says it cannot see the image"
    )
    assert parse_option(text, LETTERS_ONLY) is None
    assert answer_letter(text) is None
    assert says_it_cannot_see(text)


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("I can't see the image clearly at this size, but the blur is obvious: B.", "B"),
        ("I can't see any noise in the image, so the answer is B.", "B"),
        ("I see the image clearly; the answer is B.", "B"),
        ("I cannot see the image's noise at all, so B.", "B"),
        ("No noise is visible in the image: B.", "B"),
        ("No image artefacts are visible apart from blur. Answer: B", "B"),
        ("我看不到噪点，答案是B。", "B"),
    ],
)
def test_seeing_the_image_badly_or_seeing_no_distortion_is_seeing_it(text, letter):
    reading = read_option(text, DISTORTION)
    assert reading.letter == letter and reading.unread is None, text
    assert not says_it_cannot_see(text)


@pytest.mark.parametrize(
    ("text", "options", "unread"),
    [
        ("A or B", Q, "several"),
        ("I'd say B and C.", Q, "several"),
        ("B. Actually, it's C.", Q, "several"),
        ("Not A.", Q, "none"),
        ("The image is sharp and well exposed.", Q, "none"),
        ("", Q, "none"),
    ],
)
def test_the_reader_says_why_a_reply_gives_no_option(text, options, unread):
    reading = read_option(text, options)
    assert reading.letter is None and reading.unread == unread
    assert reading.reason == UNREAD_REASONS[unread]


def test_a_reply_cut_before_its_letter_says_so():
    assert read_option("The answer is", Q, cut_off=True).unread == "cut off"
    assert read_option("I'd say B or", Q, cut_off=True).unread == "cut off"
    assert read_option("Answer: D\n\nThe heavy", Q, cut_off=True).letter == "D"


def test_the_graded_corpus_says_which_replies_cannot_see_the_image():
    for graded in CORPUS:
        reading = read_option(graded.text, OPTIONS[graded.options], cut_off=graded.cut)
        assert (reading.unread == "cannot see") == graded.blind, graded.text


def test_the_summarizer_records_a_blind_answer_as_none_and_does_not_ask_again(
    monkeypatch, example_images
):
    reply = "I cannot see the image you provided. Typically, though, the answer would be B."
    with FakeAPIServer(lambda _r: answer_reply(reply)) as srv:
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 1  # asked again, it could only guess
    assert result.answer_unparseable and result.final_answer == UNABLE
    assert "the model says it cannot see the image" in result.unparseable_reason
    assert reply in result.unparseable_reason


def test_the_summarizer_takes_no_letter_whose_reasoning_says_it_cannot_see(
    monkeypatch, example_images
):
    body = answer_reply("B").body
    body["choices"][0]["message"]["content"] = body["choices"][0]["message"]["content"].replace(
        "edges are soft", "No image was attached, so I answered from the question alone"
    )
    with FakeAPIServer(lambda _r: Reply(200, body)) as srv:
        result = ask(srv, monkeypatch, MCQ, str(example_images["original"]))
    assert result.answer_unparseable and result.final_answer == UNABLE
    assert "cannot see the image" in result.unparseable_reason


def test_scoring_stops_at_a_reply_that_cannot_see_the_image(monkeypatch, example_images):
    pieces = [("I", []), (" cannot", []), (" see", []), (" the", []), (" image", [])]
    pieces += [(",", []), (" but", []), (" B", [(" B", -0.1), (" C", -2.0)]), (".", [])]
    with FakeAPIServer(lambda _r: Reply(200, completion(pieces))) as srv:
        result = ask(srv, monkeypatch, SCORING, str(example_images["original"]))
        count = len(srv.requests)
    assert count == 1
    assert result.answer_unparseable and result.quality_score is None
    assert "the model says it cannot see the image" in result.unparseable_reason
    assert "after 1 attempts" in result.quality_reasoning
