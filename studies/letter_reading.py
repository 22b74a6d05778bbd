"""Which letter does a reader take from a model's reply, against letters graded by hand?

Three readers over the graded replies of ``tests/agentic_iqa/options/reply_corpus.py`` (written as
GPT-4o, Claude and Qwen2.5-VL write; issue 29):

- **ours**: :func:`agentic_iqa.options.parse_option`, with ``cut_off`` for a reply that stopped
  at the token cap, as the summarizer calls it;
- **lm-eval**: lm-evaluation-harness's ``multi_choice_regex`` filter
  (``MultiChoiceRegexFilter``, lm_eval/filters/extraction.py) as its GPQA chain-of-thought
  tasks configure it for "flexible-extract": the pattern ``(\\([A-Z]\\))``, its last match;
  failing that, the options' texts in the reply with case and punctuation ignored, the last
  match; failing that, a letter after a colon, the last match;
- **VLMEvalKit**: ``can_infer`` (vlmeval/utils/matching_util.py): ``can_infer_option`` (known
  refusals; the reply split on punctuation, exactly one option letter among the words and
  among its last four; "answer is X"), else ``can_infer_text`` (exactly one option's text in a
  reply at most twice as long as all the texts together).

The two are our own reimplementations from their public source, not their code.  Per category:
right (the graded letter, or none where the model gave none), wrong letter, a letter where the
model gave none, unread (none where it gave one).

Then ours with the follow-up off and on (:mod:`agentic_iqa.agents.followup`): a reply left
unread for naming no option or several (not one cut off, which is asked again shorter, nor one
saying it cannot see the image) is asked once more, and the model's answer, written by hand in
``tests/agentic_iqa/options/follow_up_corpus.py`` ("NONE" where none is written), is read with
:func:`~agentic_iqa.agents.followup.read_follow_up`.  A reply the grader found a commitment in
is graded by it; one with none by the follow-up's graded letter.  The follow-up's cost per
1,000 items is estimated from its rendered request (4 characters a token) at the corpus's rate
of follow-ups, with prices from ``configs/prices.yaml``.

    python studies/letter_reading.py
"""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agentic_iqa.agents.followup import follow_up_request, read_follow_up  # noqa: E402
from agentic_iqa.options import parse_option, read_option  # noqa: E402
from agentic_iqa.vlm.usage import PriceTable  # noqa: E402
from tests.agentic_iqa.options.follow_up_corpus import follow_up_for  # noqa: E402
from tests.agentic_iqa.options.reply_corpus import CORPUS, OPTIONS, Graded  # noqa: E402

Reader = Callable[[Graded], str | None]


# -- lm-evaluation-harness: multi_choice_regex, "flexible-extract" ----------------------------


def _without_punctuation(text: str) -> str:
    return "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))


def lm_eval_flexible(reply: str, options: Mapping[str, str]) -> str | None:
    """The letter the filter extracts, or None for its fallback "[invalid]"."""
    marked = re.findall(r"\([A-Z]\)", reply)
    if marked:
        return marked[-1][1]
    by_text = {
        _without_punctuation(body.strip()).lower(): letter
        for letter, body in options.items()
        if body.strip()
    }
    if by_text:
        pattern = "|".join(re.escape(body) for body in by_text)
        named = re.findall(pattern, _without_punctuation(reply).lower())
        if named:
            return by_text[named[-1]]
    after_colon = re.findall(rf":\s*({'|'.join(options)})", reply)
    return after_colon[-1] if after_colon else None


# -- VLMEvalKit: can_infer ----------------------------------------------------------------------

_REFUSALS = (
    "Sorry, I can't help with images of people yet.",
    "I can't process this file.",
    "I'm sorry, but without the image provided",
    "Cannot determine the answer",
)
_ANSWER_IS = re.compile(r"(?i)(?:correct\s+)?answer\s+is\s+\**([ABCD])\**")


def _infer_option(reply: str, options: Mapping[str, str]) -> str | None:
    if "Failed to obtain answer via API" in reply:
        return None
    if any(refusal in reply for refusal in _REFUSALS):
        return "Z"  # VLMEvalKit's "no answer"
    words = re.sub(r"[.()\[\],:;!*#{}]", " ", reply).split()
    present = [letter for letter in options if letter in words]
    if len(present) == 1:
        if words.index(present[0]) > len(words) - 5:
            return present[0]
    elif not present and "Z" in words:
        return "Z"
    said = _ANSWER_IS.search(reply)
    if said and said.group(1).upper() in options:
        return said.group(1).upper()
    return None


def _infer_text(reply: str, options: Mapping[str, str]) -> str | None:
    lowered = reply.lower()
    if len(lowered) > 2 * sum(len(body) for body in options.values()):
        return None
    found = [letter for letter, body in options.items() if body.lower() in lowered]
    return found[0] if len(found) == 1 else None


def vlmevalkit_can_infer(reply: str, options: Mapping[str, str]) -> str | None:
    letter = _infer_option(reply, options) or _infer_text(reply, options)
    return None if letter == "Z" else letter


# -- the table ----------------------------------------------------------------------------------

READERS: dict[str, Reader] = {
    "ours": lambda g: parse_option(g.text, OPTIONS[g.options], cut_off=g.cut),
    "lm-eval": lambda g: lm_eval_flexible(g.text, OPTIONS[g.options]),
    "VLMEvalKit": lambda g: vlmevalkit_can_infer(g.text, OPTIONS[g.options]),
}
KINDS = ("right", "wrong", "none given", "unread")


def outcome(graded: Graded, read: str | None) -> str:
    if read == graded.expected:
        return "right"
    if read is None:
        return "unread"
    return "none given" if graded.expected is None else "wrong"


def row(name: str, replies: list[Graded]) -> str:
    cells = []
    for reader in READERS.values():
        counts = Counter(outcome(graded, reader(graded)) for graded in replies)
        cells.append("/".join(f"{counts[kind]:>3}" for kind in KINDS))
    return f"{name:<26}{len(replies):>4}  " + "   ".join(f"{cell:>15}" for cell in cells)


def letters_read(replies: list[Graded]) -> str:
    given = [graded for graded in replies if graded.expected]
    parts = []
    for name, reader in READERS.items():
        right = sum(reader(graded) == graded.expected for graded in given)
        parts.append(f"{name} {right}/{len(given)} ({right / len(given):.1%})")
    return ", ".join(parts)


# -- the follow-up ------------------------------------------------------------------------------

#: A reply's reasoning as the summarizer's JSON carries it, for the follow-up's quoted reply
#: (the corpus holds the answers alone): about 400 characters, as our prompts ask for.
REASONING = (
    "The distortion analysis reports moderate blur across the frame and slight noise in the "
    "shadows; the tool score of 2.6 agrees with a soft, somewhat degraded image. Fine texture "
    "in the foliage is lost, edges of the buildings are smeared, and the sky shows mild "
    "banding. Taken together the evidence points to the answer given above, with the blur "
    "as the dominant distortion."
)
MODELS = ("gpt-4o", "gpt-4o-mini", "claude-sonnet-4-5")


def asked_about(graded: Graded) -> bool:
    """Whether the summarizer would ask this reply about once more."""
    reading = read_option(graded.text, OPTIONS[graded.options], cut_off=graded.cut)
    return reading.letter is None and reading.unread in ("none", "several") and not graded.cut


def with_follow_up(graded: Graded) -> tuple[str | None, str | None]:
    """Return (the letter read with the follow-up on, the letter graded for it)."""
    options = OPTIONS[graded.options]
    first = parse_option(graded.text, options, cut_off=graded.cut)
    if not asked_about(graded):
        return first, graded.expected
    reply, graded_letter = follow_up_for(graded.text)
    read = read_follow_up(reply, options).letter
    return read, graded.expected if graded.expected is not None else graded_letter


def follow_up_table(replies: list[Graded]) -> None:
    committed = [graded for graded in replies if graded.expected]
    off = Counter(
        outcome(graded, parse_option(graded.text, OPTIONS[graded.options], cut_off=graded.cut))
        for graded in replies
    )
    on: Counter[str] = Counter()
    unread_committed = {"off": 0, "on": 0}
    for graded in replies:
        read, truth = with_follow_up(graded)
        on[outcome(Graded(graded.text, truth, graded.category, graded.style), read)] += 1
        first = parse_option(graded.text, OPTIONS[graded.options], cut_off=graded.cut)
        if graded.expected:
            unread_committed["off"] += first is None
            unread_committed["on"] += read is None
    print("ours, follow-up off and on (cells: right / wrong / letter where none given / unread):")
    for name, counts in (("follow-up off", off), ("follow-up on", on)):
        share = unread_committed["off" if name.endswith("off") else "on"] / len(committed)
        print(
            f"  {name:<14}"
            + "/".join(f"{counts[kind]:>3}" for kind in KINDS)
            + f"   unread among replies with a commitment: "
            f"{unread_committed['off' if name.endswith('off') else 'on']}/{len(committed)} "
            f"({share:.1%})"
        )
    asked = [graded for graded in replies if asked_about(graded)]
    print(
        f"  follow-ups asked: {len(asked)} of {len(replies)} replies "
        f"({len(asked) / len(replies):.1%})"
    )
    tokens = []
    for graded in asked:
        options = OPTIONS[graded.options]
        query = "Which option fits the image? " + " ".join(f"{k}. {v}" for k, v in options.items())
        reply = (
            '{"final_answer": '
            + repr(graded.text)
            + ', "quality_reasoning": "'
            + REASONING
            + '", "need_replan": false}'
        )
        request = follow_up_request(query, options, reply)
        tokens.append((len(request.system) + len(request.user)) / 4)
    mean_in = sum(tokens) / len(tokens) if tokens else 0.0
    prices = PriceTable.load()
    rate = len(asked) / len(replies)
    print(
        f"  a follow-up: about {mean_in:.0f} input tokens (its reply quoted with a "
        f"{len(REASONING)}-character reasoning), 2 output tokens, no image"
    )
    for model in MODELS:
        price = prices.prices.get(model)
        if price is None:
            continue
        each = price.cost(round(mean_in), 2, 0)
        print(
            f"  {model:<18} ${each * 1000:.3f} per 1,000 follow-ups; "
            f"${each * rate * 1000:.3f} per 1,000 items at this corpus's rate"
        )


def main() -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True, capture_output=True
    ).stdout.strip()
    print(
        f"studies/letter_reading.py on {len(CORPUS)} graded replies "
        f"(tests/agentic_iqa/options/reply_corpus.py), working tree on {commit}"
    )
    print("cells: right / wrong letter / letter where none given / unread")
    print(f"{'category':<26}{'n':>4}  " + "   ".join(f"{name:>15}" for name in READERS))
    for category in dict.fromkeys(graded.category for graded in CORPUS):
        print(row(category, [graded for graded in CORPUS if graded.category == category]))
    print(row("all", CORPUS))
    held_out = [graded for graded in CORPUS if graded.held_out]
    print(row("held out (after reader)", held_out))
    print(f"letters read right, all: {letters_read(CORPUS)}")
    print(f"letters read right, held out: {letters_read(held_out)}")
    follow_up_table(CORPUS)


if __name__ == "__main__":
    main()
