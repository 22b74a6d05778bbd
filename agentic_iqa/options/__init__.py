"""Reading the option a model chose out of its reply, and only the one it chose.

One rule for every path that reads a letter (the summarizer's multiple-choice answer, the
five-level question of scoring mode, the token log-probabilities at the letter, grading a stored
answer), because a letter the model did not choose is worse than none: none is asked again.

- **A committed answer decides.**  In order: a final verdict ("Final answer: D"); else what
  the reply commits to: its first line opening with a letter ("C\\n\\nReasoning: ..."), a line
  that is only a letter, "answer is X" / "Answer: X" / "Rating: X", "I'd say X" / "I'll go
  with X", "X is correct" / "X fits best", a closing "So B.".  Options mentioned while
  reasoning afterwards ("Option B (Slight) would understate", "not Excellent (A)") do not
  displace it.  Two committed answers that differ are no answer, a change of mind included
  ("B. Actually, it's C").
- **A negated option is not an answer**: "Not A", "I wouldn't say D", "rather than C", "A is
  incorrect", "D (Poor) would be generous", "Is it A? No." (:mod:`.cues` holds the words).
- **A hedge is not an answer**: "A or B", "could be A or C", "between A and B", "B/C" leave
  the reply unread unless it commits elsewhere ("It could be A or B, but I'll go with B").
- Failing a commitment, a marked letter ("(B)", "**B**", "option B", "B. Good") or else a
  capital standing alone ("This image deserves a C") is the answer when it is the only one.
- **"A" is the article** before a word ("A good image") but the option before a verb or
  conjunction ("A is correct", "A, because", "A or B").  A lower-case letter counts only as
  the whole reply ("b") or closed after a marker ("answer: c"), and the option's text only as
  the whole reply ("Blur") or after a marker ("Answer: Blur").
- **A reply cut at the token cap** (``cut_off=True``) keeps a committed letter that is already
  written, followed by something that is not "or" ("C, because the blur", "Answer: D\\n\\nThe");
  anything less ("The answer is C", "I'd say B or") is no answer and is asked again.

:func:`locate_option` also says *where* the letter stands, so that a backend can read the
token log-probabilities at that very position.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property

from . import cues

_DECORATION = " \t\r\n*_`\"'#>"
_TRAILING = " \t\r\n.!,;:*_`\"'"


@dataclass(frozen=True)
class OptionMatch:
    """The option an answer gives and where its letter stands (``start`` is None when the
    option was recognised by its text, not a letter)."""

    letter: str
    start: int | None


@dataclass(frozen=True)
class _Reading:
    letter: str
    start: int | None


def _normalise_text(text: str) -> str:
    """Lower case, single spaces, no surrounding markdown, quotes or end punctuation."""
    return re.sub(r"\s+", " ", text.strip(_DECORATION).rstrip(_TRAILING).strip(_DECORATION)
                  ).casefold()


class _Reply:
    """One reply and the options it may name, read tier by tier."""

    def __init__(self, text: str, options: Mapping[str, str]) -> None:
        self.text = text
        self.options = {letter.upper(): body for letter, body in options.items()}
        self.letters = "|".join(re.escape(letter) for letter in sorted(self.options))
        self.capital = rf"(?-i:{self.letters})"

    # -- single mentions -----------------------------------------------------------------

    def valid(self, start: int) -> _Reading | None:
        """The letter at ``start`` as an answer, unless it is a word, negated or hedged."""
        text, letter = self.text, self.text[start]
        end = start + 1
        body = self.options.get(letter.upper(), "")
        own_text = bool(body) and re.match(rf"\s+{re.escape(body)}\b", text[end:], re.I)
        if letter.islower() and not cues.CLOSED.match(text, end):
            return None
        if (letter == "A" and re.match(r"\s+[a-z]", text[end:]) and not own_text
                and not cues.OPTION_WORDS.match(text, end)):
            return None  # the article: "A good image"
        if letter == "I" and re.match(r"\s+[a-z]|['’]", text[end:]):
            return None  # the pronoun: "I think"
        if start in self.hedged or self.negated(start):
            return None
        return _Reading(letter.upper(), start)

    def negated(self, start: int) -> bool:
        """A negation in the letter's clause before it ("not Excellent (A)"), or right after
        it and its option text ("Option B (Slight) would understate")."""
        letter = self.text[start].upper()
        body = self.options.get(letter, "")
        window = self.text[max(0, start - 100):start]
        if body:  # "No (B)" names option B by its text: the "No" is no negation
            window = re.sub(rf"{re.escape(body)}[\s*_]*[(（\[]*\s*$", "", window, flags=re.I)
        boundaries = list(cues.BOUNDARY.finditer(window))
        tail = window[boundaries[-1].end():] if boundaries else window
        negations = list(cues.NEGATION_BEFORE.finditer(tail))
        if negations and len(re.findall(r"[^\W_]+", tail[negations[-1].end():])) \
                <= cues.NEGATION_REACH:
            return True
        after = re.match(  # and "A and B both look wrong": the pair is negated together
            rf"[)\]）*_`\"']*(?:\s*[(（][^()\n]{{0,40}}[)）])?(?:\s*(?:,|and)\s*(?:option\s+)?"
            rf"[(\[]?(?:{self.capital}){cues.RIGHT}[)\]]?)?", self.text[start + 1:], re.I)
        rest = self.text[start + 1 + after.end():]
        if body:
            rest = re.sub(rf"^\s*[-–—:.]?\s*{re.escape(body)}\b[)\]）*_]*", "", rest,
                          flags=re.I)
        return cues.NEGATION_AFTER.match(rest) is not None

    @cached_property
    def hedged(self) -> set[int]:
        """Where the letters of a hedge stand: "A or B", "between B (Good) and C (Fair)"."""
        def one(name: str) -> str:
            return (rf"(?:options?\s+)?[\[（(]?(?P<{name}>{self.capital}){cues.RIGHT}[)\]）]?"
                    r"(?:\s*[(（][^()\n]{0,40}[)）])?")

        patterns = [
            rf"{cues.LEFT}{one('x')}{cues.HEDGE_OR}{one('y')}",
            rf"{cues.HEDGE_BETWEEN}{one('x')}{cues.HEDGE_AND}{one('y')}",
            rf"{cues.LEFT}(?P<x>{self.capital})\s*[-–]\s*(?P<y>{self.capital}){cues.RIGHT}",
        ]
        found: set[int] = set()
        for pattern in patterns:
            compiled = re.compile(pattern, re.I)
            position = 0
            while (match := compiled.search(self.text, position)) is not None:
                if match.group("x") != match.group("y"):
                    found.update((match.start("x"), match.start("y")))
                position = match.start("y")
        return found

    # -- tiers -----------------------------------------------------------------------------

    def after(self, marker: str, *, at_end: bool = False) -> Iterator[_Reading]:
        """Letters standing right after ``marker``, and option texts standing as its clause."""
        closing = r"[)\]*_]*\s*[.!]?\s*$" if at_end else ""
        pattern = rf"(?:{marker})(?P<l>{self.letters}){cues.RIGHT}{closing}"
        for match in re.finditer(pattern, self.text, re.I):
            reading = self.valid(match.start("l"))
            if reading is not None:
                yield reading
        if at_end:
            return
        for match in re.finditer(rf"(?:{marker})(?P<t>[^\n.;,!?(—–]+)", self.text, re.I):
            letter = self.by_text(match.group("t"))
            if letter is not None:
                yield _Reading(letter, None)

    def by_text(self, text: str) -> str | None:
        bare = _normalise_text(text)
        found = [letter for letter, body in self.options.items()
                 if body and _normalise_text(body) == bare]
        return found[0] if len(found) == 1 else None

    def before(self, verdict: str) -> Iterator[_Reading]:
        """Letters followed by ``verdict``: "A is correct", "C is my answer"."""
        pattern = rf"{cues.LEFT}(?:(?:option|choice)\s+)?[(\[]?(?P<l>{self.letters}){cues.RIGHT}"
        for match in re.finditer(pattern + verdict, self.text, re.I):
            reading = self.valid(match.start("l"))
            if reading is not None:
                yield reading

    def final(self) -> list[_Reading]:
        return list(self.after(cues.FINAL + cues.SEPARATOR))

    def committed(self) -> list[_Reading]:
        return [*self.after(cues.ANSWER + cues.SEPARATOR),
                *self.after(cues.LABEL + cues.SEPARATOR_REQUIRED),
                *self.after(cues.FIRST_PERSON), *self.after(cues.CORRECTION),
                *self.after(cues.CONCLUDING, at_end=True),
                *self.before(cues.VERDICT_AFTER),
                *self.first_line(), *self.letter_lines()]

    def first_line(self) -> Iterator[_Reading]:
        """The reply opening with a letter: "C\\n\\nReasoning", "A, because", "B - Good"."""
        line = next((m for m in re.finditer(r"[^\n]+", self.text) if m.group().strip()), None)
        if line is None:
            return
        lead = re.match(r"[\s*_`\"'#>•\-]*[\[（(]?", line.group())
        start = line.start() + lead.end()
        letter = self.text[start:start + 1]
        if (not letter or letter.upper() not in self.options
                or not re.match(cues.RIGHT, self.text[start + 1:])):
            return
        body = re.escape(self.options[letter.upper()])
        rest = self.text[start + 1:line.end()]
        if letter.isupper():
            follows = (rf"[)\]）]?(?:[*_`\"']*\s*$|[*_`\"']*\s*[.:,;!?)\]）(（\-–—]|\s+[(（]"
                       rf"|(?!\s+(?:and|or|nor)\b){cues.OPTION_WORDS.pattern}"
                       + (rf"|\s+{body}\b)" if body else ")"))
        else:
            follows = (rf"[)\]）.:]?\s*(?:{body}\b|$)" if body else r"[)\]）.:]?\s*$")
        if not re.match(follows, rest, re.I) or re.match(
                rf"[)\]）]?\s*,\s*[(\[]?(?:{self.capital}){cues.RIGHT}", rest):
            return  # "B, C" lists two letters
        reading = self.valid(start)
        if reading is None:
            return
        listed = {mention.letter for mention in self.listed(line.start(), line.end())}
        if listed - {reading.letter}:
            return  # the options echoed: "A. Excellent B. Good ..."
        yield reading

    def letter_lines(self) -> Iterator[_Reading]:
        """Lines that hold only a letter (and its text): "**C**", "> C", "### Answer\\nB"."""
        for line in re.finditer(r"[^\n]+", self.text):
            match = re.fullmatch(
                rf"[\s*_`\"'#>•\[（(]*(?P<l>{self.capital}){cues.RIGHT}[)\]）]?[.):]?(?P<rest>.*?)"
                r"[\s*_`\"'.\])）]*", line.group())
            if match is None:
                continue
            rest = match.group("rest").strip(" -–—:()（）*_")
            if rest and rest.casefold() != self.options[match.group("l")].casefold():
                continue
            reading = self.valid(line.start() + match.start("l"))
            if reading is not None:
                yield reading

    def marked(self) -> list[_Reading]:
        """Letters set off as options: "(B)", "**B**", "option B", "B. Good"."""
        patterns = [rf"[(（\[](?P<l>{self.letters})[)）\]]",
                    rf"\*\*[(\[]?(?P<l>{self.letters})[.):\]]?\*\*",
                    rf"\b(?:option|choice)\s+[(\[]?(?P<l>{self.letters}){cues.RIGHT}"]
        return [*self.matching(patterns), *self.listed()]

    def listed(self, begin: int = 0, end: int | None = None) -> list[_Reading]:
        """Letters written as in a list of options: "B. Good", "C) Fair"."""
        bodies = "|".join(re.escape(body) for body in self.options.values() if body)
        if not bodies:
            return []
        pattern = rf"{cues.LEFT}(?P<l>{self.capital})[.)]\s+(?:{bodies})\b"
        return self.matching([pattern], begin, end)

    def matching(self, patterns: list[str], begin: int = 0, end: int | None = None
                 ) -> list[_Reading]:
        span = self.text[:end] if end is not None else self.text
        return [reading for pattern in patterns
                for match in re.compile(pattern, re.I).finditer(span, begin)
                if (reading := self.valid(match.start("l"))) is not None]

    def standing(self) -> list[_Reading]:
        """Capitals standing alone: "I'd say B", "This image deserves a C"."""
        pattern = rf"{cues.LEFT}(?P<l>{self.capital}){cues.RIGHT}"
        return [reading for match in re.finditer(pattern, self.text)
                if (reading := self.valid(match.start("l"))) is not None]


def _one(readings: Iterable[_Reading]) -> OptionMatch | None | bool:
    """One letter: its match (the first place it stands); several: False; none: None."""
    starts: dict[str, list[int]] = {}
    for reading in readings:
        places = starts.setdefault(reading.letter, [])
        if reading.start is not None:
            places.append(reading.start)
    if len(starts) > 1:
        return False
    if not starts:
        return None
    letter, places = next(iter(starts.items()))
    return OptionMatch(letter, min(places) if places else None)


def _decide(reply: _Reply) -> tuple[OptionMatch | None, bool]:
    """The answer and whether the reply committed to it."""
    text = reply.text
    whole = re.fullmatch(rf"[\s*_`\"'#>\[（(]*(?P<l>{reply.letters})[)\]）]?[.):]?"
                         r"[\s*_`\"'\])）]*", text, re.I)
    if whole is not None:
        return OptionMatch(whole.group("l").upper(), whole.start("l")), True
    by_text = reply.by_text(text)
    if by_text is not None:
        return OptionMatch(by_text, None), True
    for tier in (reply.final, reply.committed):
        found = _one(tier())
        if found is False:
            return None, False
        if found is not None:
            return found, True
    if reply.hedged:
        return None, False
    for tier in (reply.marked, reply.standing):
        found = _one(tier())
        if found is not None:
            return (found or None), False
    return None, False


def locate_option(text: str | None, options: Mapping[str, str], *,
                  cut_off: bool = False) -> OptionMatch | None:
    """The option ``text`` gives and where, or None when it gives none, several, a negated
    one or a hedge.

    ``options`` maps each letter to its text (the text may be empty when only letters are
    known).  ``cut_off``: the reply stopped at the token cap, so only a committed letter
    that is already written counts.
    """
    if not text or not options:
        return None
    found, committed = _decide(_Reply(text, options))
    if found is None or not cut_off:
        return found
    if not committed or found.start is None:
        return None
    return found if cues.SETTLED.match(text, found.start + 1) else None


def parse_option(text: str | None, options: Mapping[str, str], *,
                 cut_off: bool = False) -> str | None:
    """The option letter ``text`` gives, or None (see :func:`locate_option`)."""
    found = locate_option(text, options, cut_off=cut_off)
    return None if found is None else found.letter


__all__ = ["OptionMatch", "locate_option", "parse_option"]
