"""Reading an option out of a model's answer, only where it stands as an option.

A remote model answers in prose as often as with a bare letter, and prose is full of words that
look like letters: the article in "This is a good image" or "deserves a C" is not option A, and
the "I" of "I'd say B" is no option either.  So a letter counts only as a letter token: the whole
answer (``B``, ``(B)``, ``B.``, ``**B**``), a leading ``B.`` / ``B)`` / ``B:`` ("B. Slight"),
``Answer: B``, ``option B``, a parenthesised ``(B)`` or bold ``**B**`` anywhere, and, failing
those, a capital letter standing alone after words ("I'd say B", "This image deserves a C") that
is not the article "A" before a word.  A lower-case word never counts, nor does an option's
text inside a sentence ("This is a good image" is no answer); the whole answer being one
option's text ("Blur") is.  Two different options found at the same strength make the answer
ambiguous; none makes it unparseable.  Either way the caller gets ``None`` and asks
again, never a guessed letter.

:func:`locate_option` also says *where* the letter stands, so that a backend can read the
token log-probabilities at that very position.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_DECORATION = " \t\r\n*_`\"'"
_TRAILING = " \t\r\n.!,;:*_`\"'"
_END = r"(?=$|[\s.,;:!?)\]*_`\"'\-\u2013\u2014])"


@dataclass(frozen=True)
class OptionMatch:
    """The option an answer gives and where its letter stands (``start`` is None when the
    option was recognised by its text, not a letter)."""

    letter: str
    start: int | None


def _normalise_text(text: str) -> str:
    """Lower case, single spaces, no surrounding markdown, quotes or end punctuation."""
    return re.sub(r"\s+", " ", text.strip(_DECORATION).rstrip(_TRAILING).strip(_DECORATION)
                  ).casefold()


def _unique(found: dict[str, int | None]) -> OptionMatch | None | bool:
    """One option: its match; several: False (ambiguous); none: None."""
    if len(found) == 1:
        letter, start = next(iter(found.items()))
        return OptionMatch(letter, start)
    return False if found else None


def locate_option(text: str | None, options: Mapping[str, str]) -> OptionMatch | None:
    """The option ``text`` gives and where, or None when it gives none or several.

    ``options`` maps each letter to its text (the text may be empty when only letters are
    known).  Letters are compared upper case; only letters in ``options`` count.
    """
    if not text or not options:
        return None
    letters = {letter.upper(): body for letter, body in options.items()}
    alternatives = "|".join(re.escape(letter) for letter in sorted(letters))

    whole = re.fullmatch(rf"[\s*_`\"']*\(?({alternatives})\)?[.):]?[\s*_`\"']*", text,
                         flags=re.IGNORECASE)
    if whole is not None:
        return OptionMatch(whole.group(1).upper(), whole.start(1))

    bare = _normalise_text(text)
    by_text = [letter for letter, body in letters.items()
               if body and _normalise_text(body) == bare]
    if len(by_text) == 1:
        return OptionMatch(by_text[0], None)

    strong: dict[str, int | None] = {}

    def add(found: dict[str, int | None], match: re.Match[str]) -> None:
        found.setdefault(match.group(1).upper(), match.start(1))

    leading = re.match(rf"[\s*_`\"']*\(?({alternatives})[.):]\s", text + " ")
    if leading is not None:
        add(strong, leading)
    said = r"(?i:\b(?:answer|option|choice)\b(?:\s+(?:is|would be|:))?)[\s:*_`\"'=\-]*\(?"
    closing = r"\)?(?=\s*(?:$|[.,;:!?)\]*_`\"'\-\u2013\u2014]))"
    # "Answer: b." in any case; "The answer is B because" only as a capital (a lower-case
    # letter before a word is a word: "Answer: a good image").
    for match in re.finditer(rf"{said}((?i:{alternatives})){closing}", text):
        add(strong, match)
    for match in re.finditer(rf"{said}({alternatives})\)?(?=\s)", text):
        add(strong, match)
    for match in re.finditer(rf"\(({alternatives})\){_END}", text):
        add(strong, match)
    for match in re.finditer(rf"\*\*\(?({alternatives})[.)]?\*\*", text):
        add(strong, match)
    decided = _unique(strong)
    if decided is not False and decided is not None:
        return decided
    if decided is False:
        return None

    weak: dict[str, int | None] = {}
    for match in re.finditer(rf"(?<![\w'’-])({alternatives})(?![\w'’-])", text):
        after = text[match.end():]
        if match.group(1) == "A" and re.match(r"\s+[a-z]", after):
            continue  # the article: "A good image", "deserves a C" (lower case never counts)
        add(weak, match)
    return _unique(weak) or None


def parse_option(text: str | None, options: Mapping[str, str]) -> str | None:
    """The option letter ``text`` gives, or None when it gives none or several."""
    found = locate_option(text, options)
    return None if found is None else found.letter


__all__ = ["OptionMatch", "locate_option", "parse_option"]
