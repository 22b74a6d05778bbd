"""Read the option a model chose out of its reply, and only the one it chose.

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
- **A conceded letter is not an answer**, even a committed one: a clause a concessive opens
  ("Although (B) fits the grain, ...", "While A fits best at first glance, C"), or words that
  set the letter aside ("B is tempting", "It's tempting to say D", "Slight (B) was my first
  thought", "(C) crossed my mind", "A (Noise): present, but minor", "compression (C) is
  barely noticeable").  A reply whose first line opens with a letter as the subject of a
  sentence that weighs it ("B looks plausible, but ...") has not committed to it either.
- **A reply ending on a sentence that is only a letter commits to it**: "B is tempting, but
  the smearing is more than slight. C." is C.
- Failing a commitment, a letter *mentioned* is the answer only when it is the one option
  the reply names, as its point.  A mention is a marked letter ("(B)", "**B**", "option B",
  "B. Good") or else a capital standing alone ("This image deserves a C").  It is no answer
  when it is mentioned in passing:

  - in a sentence that weighs one thing against another: a contrast ("but", "yet",
    "though", "although", "while", "whereas", "however") on either side of it ("The noise
    (B) is visible but the blur dominates", "a little blur (B), though the blocking is far
    more visible"), or the next sentence opening by setting it aside ("Option B is
    plausible; however, ...").  Which side is the point depends on meaning, so neither is
    read; the point of a sentence that opens with a concessive clause comes after it ("Though
    the grain is visible, (B) blur is the main distortion"), and a correction's after its
    "but" ("It is not A, but B").  A letter that closes its sentence after a separator ("...
    the dominant distortion is blur: B.") is a conclusion, not a mention;
  - as the label of a side point: after "some", "a little", "plus", "also", "a few", "mild"
    ("Mostly blur, with some (C) blocking artefacts"), or beside the clause its sentence
    leans on ("Mostly blocking, with grain in the shadows (A)");
  - beside another option named by its text (respelled too: "blurry", "noisy"), neither
    negated nor set aside: "Heavy blur throughout, and noise (A) in the shadows", "The noise
    (B) is visible" where B is Blur (the letter and the words disagree);
  - in parentheses after a word, where only the letters are known (the log-probability path,
    a stored answer): "The noise (B)" may label the wrong option, and nothing can tell.

  A reply that commits to nothing gives no letter, and is asked again.
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
from typing import Literal

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
    return re.sub(
        r"\s+", " ", text.strip(_DECORATION).rstrip(_TRAILING).strip(_DECORATION)
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
        if (
            letter == "A"
            and re.match(r"\s+[a-z]", text[end:])
            and not own_text
            and not cues.OPTION_WORDS.match(text, end)
        ):
            return None  # the article: "A good image"
        if letter == "I" and re.match(r"\s+[a-z]|['’]", text[end:]):
            return None  # the pronoun: "I think"
        if start in self.hedged or self.negated(start) or self.conceded(start):
            return None
        return _Reading(letter.upper(), start)

    def negated(self, start: int, end: int | None = None, body: str | None = None) -> bool:
        """A negation in the letter's clause before it ("not Excellent (A)"), or right after
        it and its option text ("Option B (Slight) would understate"); or words that set it
        aside ("B is tempting", "It's tempting to say D").  ``end`` and ``body``: a mention
        by the option's text, from ``start`` to ``end``, rather than a letter."""
        letter = self.text[start].upper()
        if body is None:
            body = self.options.get(letter, "")
        window = self.text[max(0, start - 100) : start]
        if body:  # "No (B)" names option B by its text: the "No" is no negation
            window = re.sub(rf"{re.escape(body)}[\s*_]*[(（\[]*\s*$", "", window, flags=re.I)
        tail = self.clause_before(window)
        negations = list(cues.NEGATION_BEFORE.finditer(tail))
        if (
            negations
            and len(re.findall(r"[^\W_]+", tail[negations[-1].end() :])) <= cues.NEGATION_REACH
        ):
            return True
        if cues.SET_ASIDE_BEFORE.search(tail):
            return True
        if end is None:
            end = start + 1
            after = re.match(  # and "A and B both look wrong": the pair is negated together
                rf"[)\]）*_`\"']*(?:\s*[(（][^()\n]{{0,40}}[)）])?(?:\s*(?:,|and)\s*"
                rf"(?:option\s+)?[(\[]?(?:{self.capital}){cues.RIGHT}[)\]]?)?",
                self.text[end:],
                re.I,
            )
        else:
            after = re.match(r"[)\]）*_`\"']*(?:\s*[(（\[][^()\n]{0,40}[)）\]])?", self.text[end:])
        assert after is not None  # every part of the pattern is optional
        rest = self.text[end + after.end() :]
        if body:
            rest = re.sub(rf"^\s*[-–—:.]?\s*{re.escape(body)}\b[)\]）*_]*", "", rest, flags=re.I)
        return (
            cues.NEGATION_AFTER.match(rest) is not None
            or cues.SET_ASIDE_AFTER.match(rest) is not None
        )

    @staticmethod
    def clause_before(window: str, *, labels: bool = False) -> str:
        """The part of ``window`` after its last clause boundary (``labels``: a colon does
        not end the clause, so "Minor: noise (A)" keeps its label)."""
        boundaries = [
            match
            for match in cues.BOUNDARY.finditer(window)
            if not (labels and match.group() in ":：")
        ]
        return window[boundaries[-1].end() :] if boundaries else window

    def conceded(self, start: int) -> bool:
        """The mention stands in a clause a concessive opens: "Although (B) fits the grain",
        "While option C crossed my mind", "The answer is D; while C (Fair) is possible"."""
        begin, _ = self.sentence(start)
        window = self.text[max(begin, start - 100) : start]
        boundaries = list(cues.BOUNDARY.finditer(window))
        if boundaries and cues.CONCESSIVE.fullmatch(boundaries[-1].group()):
            return True
        return cues.CONCESSIVE.search(self.clause_before(window)) is not None

    # -- the sentence around a mention -----------------------------------------------------

    @cached_property
    def sentence_ends(self) -> list[tuple[int, int]]:
        return [(match.start(), match.end()) for match in cues.SENTENCE_END.finditer(self.text)]

    def sentence(self, start: int) -> tuple[int, int]:
        """Where the sentence holding ``start`` begins and ends (before its full stop)."""
        begin = max((end for _, end in self.sentence_ends if end <= start), default=0)
        end = min((at for at, _ in self.sentence_ends if at > start), default=len(self.text))
        return begin, end

    def closing(self, start: int) -> bool:
        """The letter ends its sentence after a separator, or is the sentence: "... is blur:
        B.", "... clearly moderate — C.", "... more than slight. C."."""
        begin, end = self.sentence(start)
        after = self.text[start + 1 : end]
        before = self.text[begin:start]
        return (
            re.fullmatch(r"[)\]）*_`\"']*(?:\s*[(（][^()\n]{0,40}[)）])?[*_`\"']*\s*", after)
            is not None
            and re.search(
                r"(?:^|[:,—–]|\s-)[\s*_`\"'(\[（]*(?:(?:option|choice)\s+"
                r"[(\[（]*)?$",
                before,
                re.I,
            )
            is not None
        )

    def weighed(self, start: int) -> bool:
        """The mention stands in a sentence that weighs one thing against another: a contrast
        on either side of it ("The noise (B) is visible but the blur dominates", "a little
        blur (B), though the blocking is far more visible"), or the next sentence opening by
        setting it aside ("Option B is plausible; however, ...").  A sentence that opens with
        a concessive clause makes its point after it ("Though the grain is visible, (B) blur
        is the main distortion"), and so does a correction ("It is not A, but B")."""
        begin, end = self.sentence(start)
        sentence = self.text[begin:end]
        at = start - begin
        opener = re.match(
            rf"[\s*_`\"'#>•\-]*(?:even\s+)?(?:{cues.CONCESSIVE.pattern})", sentence, re.I
        )
        if opener is not None:
            cut = re.compile(r",|\s[—–-]\s|:").search(sentence, opener.end())
            if cut is None or at < cut.start():
                return True
            sentence, at = sentence[cut.end() :], at - cut.end()
        contrasts = [
            match
            for match in cues.CONTRAST.finditer(sentence)
            if sentence[match.end() :].strip(" *_`\"')")
        ]  # not "Definitely B, though."
        if contrasts and not (
            len(contrasts) == 1
            and at > contrasts[0].end()
            and cues.CORRECTIVE.fullmatch(contrasts[0].group())
            and cues.NOT.search(sentence, 0, contrasts[0].start())
        ):
            return True  # but not the correction "It is not A, but B"
        following = self.text[end:]
        stop = cues.SENTENCE_END.match(following)
        next_sentence = following[stop.end() :] if stop is not None else ""
        return stop is not None and cues.SETS_PREVIOUS_ASIDE.match(next_sentence) is not None

    def side_point(self, start: int, end: int, body: str) -> bool:
        """The mention labels a side point: "with some (C) blocking", "plus some noise (A)",
        "noise (A) is also visible", or stands apart from the clause its sentence leans on
        ("Mostly blur, with some (C) blocking")."""
        begin, stop = self.sentence(start)
        tail = self.clause_before(self.text[begin:start], labels=True)
        minor = [
            match
            for match in cues.MINOR_BEFORE.finditer(tail)
            if not body or not _same_word(match.group(), body)
        ]
        if minor and len(re.findall(r"[^\W_]+", tail[minor[-1].end() :])) <= cues.MINOR_REACH:
            return True
        after = self.text[end:stop]
        clause_end = cues.BOUNDARY.search(after)
        own_after = after[: clause_end.start()] if clause_end else after
        if cues.MINOR_AFTER.match(own_after):
            return True
        own_begin, own_end = start - len(tail), end + len(own_after)
        elsewhere = self.text[begin:own_begin] + " " + self.text[own_end:stop]
        return (
            cues.DOMINANT.search(elsewhere) is not None
            and cues.DOMINANT.search(self.text, own_begin, own_end) is None
        )

    def aside(self, start: int, end: int | None = None, body: str | None = None) -> bool:
        """A mention that the reply sets aside or makes in passing: no answer unless the
        reply commits to it (a letter that ends its sentence is a conclusion, not a
        mention)."""
        if end is None:
            if self.closing(start):
                return False
            end, body = start + 1, self.options.get(self.text[start].upper(), "")
        return self.weighed(start) or self.side_point(start, end, body or "")

    def unchecked_label(self, start: int) -> bool:
        """A letter in parentheses after a word labels that word ("The noise (B)"); where
        only the letters are known, nothing says the label is right, so it is no answer."""
        if self.options.get(self.text[start].upper()):
            return False
        word = re.search(r"([^\W_]+)[*_`\"']*\s*[(（\[]\s*$", self.text[max(0, start - 40) : start])
        return word is not None and not any(
            re.fullmatch(marker, word.group(1), re.I)
            for marker in (cues.LABEL, cues.ANSWER, r"letter")
        )

    # -- options named by their text -------------------------------------------------------

    @cached_property
    def named(self) -> list[tuple[str, int, int]]:
        """Where the reply names an option by its text, respelled too ("noisy", "blurred",
        "compressed"): ``(letter, start, end)``."""
        found = []
        for letter, body in self.options.items():
            words = body.split()
            if not words:
                continue
            if len(words) > 1:
                pattern = r"\b" + r"\s+".join(re.escape(word) for word in words) + r"\b"
            elif len(body) >= 4:
                pattern = rf"\b{re.escape(body[: max(4, len(body) - 3)])}\w*"
            else:
                pattern = rf"\b{re.escape(body)}\b"
            found += [
                (letter, match.start(), match.end())
                for match in re.finditer(pattern, self.text, re.I)
            ]
        return found

    def rival(self, chosen: _Reading, read: set[int]) -> bool:
        """The reply also names another option by its text, neither negated nor set aside
        ("Heavy blur throughout, plus noise (A)", "The noise (B) is visible" where noise is
        A): a letter mentioned without commitment is then no answer.  A text standing by its
        own letter ("the road (C)") counts only where that letter was read (``read``)."""
        for letter, start, end in self.named:
            if letter == chosen.letter:
                continue
            own = self.labelled(start, end, letter)
            if own is not None and own not in read:
                continue
            body = self.options[letter]
            if not (
                self.negated(start, end, body)
                or self.conceded(start)
                or self.aside(start, end, body)
            ):
                return True
        return False

    def labelled(self, start: int, end: int, letter: str) -> int | None:
        """Where ``letter`` labels the text from ``start`` to ``end``: "Noise (A)", "(A)
        noise", "A (Noise)", "A. Noise", "option A (noise)"."""
        after = re.match(
            rf"[*_]*\s*[(（\[]\s*(?:option\s+)?(?P<l>(?-i:{letter}))\s*[)）\]]",
            self.text[end:],
            re.I,
        )
        if after is not None:
            return end + after.start("l")
        before = re.search(
            rf"(?<![A-Za-z])(?P<l>(?-i:{letter}))[)）\].:]?[*_]*\s*[-–—:]?\s*"
            r"[(（\[]?\s*$",
            self.text[max(0, start - 12) : start],
        )
        if before is not None:
            return max(0, start - 12) + before.start("l")
        return None

    @cached_property
    def hedged(self) -> set[int]:
        """Where the letters of a hedge stand: "A or B", "between B (Good) and C (Fair)"."""

        def one(name: str) -> str:
            return (
                rf"(?:options?\s+)?[\[（(]?(?P<{name}>{self.capital}){cues.RIGHT}[)\]）]?"
                r"(?:\s*[(（][^()\n]{0,40}[)）])?"
            )

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
        for match in re.finditer(rf"(?:{marker})(?P<t>[^\n.;,:!?(—–]+)", self.text, re.I):
            letter = self.by_text(match.group("t"))
            if letter is not None:
                yield _Reading(letter, None)

    def by_text(self, text: str) -> str | None:
        bare = _normalise_text(text)
        found = [
            letter
            for letter, body in self.options.items()
            if body and _normalise_text(body) == bare
        ]
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
        return [
            *self.after(cues.ANSWER + cues.SEPARATOR),
            *self.after(cues.LABEL + cues.SEPARATOR_REQUIRED),
            *self.after(cues.FIRST_PERSON),
            *self.after(cues.CORRECTION),
            *self.after(cues.CONCLUDING, at_end=True),
            *self.before(cues.VERDICT_AFTER),
            *self.first_line(),
            *self.letter_lines(),
            *self.last_sentence(),
        ]

    def first_line(self) -> Iterator[_Reading]:
        """The reply opening with a letter: "C\\n\\nReasoning", "A, because", "B - Good"."""
        line = next((m for m in re.finditer(r"[^\n]+", self.text) if m.group().strip()), None)
        if line is None:
            return
        lead = re.match(r"[\s*_`\"'#>•\-]*[\[（(]?", line.group())
        assert lead is not None  # every part of the pattern is optional
        start = line.start() + lead.end()
        letter = self.text[start : start + 1]
        if (
            not letter
            or letter.upper() not in self.options
            or not re.match(cues.RIGHT, self.text[start + 1 :])
        ):
            return
        body = re.escape(self.options[letter.upper()])
        rest = self.text[start + 1 : line.end()]
        if letter.isupper():
            follows = (
                rf"[)\]）]?(?:[*_`\"']*\s*$|[*_`\"']*\s*[.:,;!?)\]）(（\-–—]|\s+[(（]"
                rf"|(?!\s+(?:and|or|nor)\b){cues.OPTION_WORDS.pattern}"
                + (rf"|\s+{body}\b)" if body else ")")
            )
        else:
            follows = rf"[)\]）.:]?\s*(?:{body}\b|$)" if body else r"[)\]）.:]?\s*$"
        if not re.match(follows, rest, re.I) or re.match(
            rf"[)\]）]?\s*,\s*[(\[]?(?:{self.capital}){cues.RIGHT}", rest
        ):
            return  # "B, C" lists two letters
        reading = self.valid(start)
        if reading is None:
            return
        if re.match(r"[)\]）*_]*(?:\s*[(（][^()\n]{0,40}[)）])?\s+[a-z]", rest) and self.weighed(
            start
        ):
            return  # the subject of a sentence that weighs it: "B looks plausible, but ..."
        listed = {mention.letter for mention in self.listed(line.start(), line.end())}
        if listed - {reading.letter}:
            return  # the options echoed: "A. Excellent B. Good ..."
        yield reading

    def last_sentence(self) -> Iterator[_Reading]:
        """A reply ending on a sentence that is only a letter: "... more than slight. C.",
        "Neither A nor B; C."."""
        match = re.search(
            rf"(?:[.!?;]\s+|[。！？；]\s*|\n)[\s*_`\"'#>(\[（]*(?P<l>{self.capital}){cues.RIGHT}"
            r"[)\]）]?(?:\s*[(（][^()\n]{0,40}[)）])?[*_`\"')\]）]*[.!]?[\s*_`\"'\])）]*$",
            self.text,
        )
        if match is not None and (reading := self.valid(match.start("l"))) is not None:
            yield reading

    def letter_lines(self) -> Iterator[_Reading]:
        """Lines that hold only a letter (and its text): "**C**", "> C", "### Answer\\nB"."""
        for line in re.finditer(r"[^\n]+", self.text):
            match = re.fullmatch(
                rf"[\s*_`\"'#>•\[（(]*(?P<l>{self.capital}){cues.RIGHT}[)\]）]?[.):]?(?P<rest>.*?)"
                r"[\s*_`\"'.\])）]*",
                line.group(),
            )
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
        patterns = [
            rf"[(（\[](?P<l>{self.letters})[)）\]]",
            rf"\*\*[(\[]?(?P<l>{self.letters})[.):\]]?\*\*",
            rf"\b(?:option|choice)\s+[(\[]?(?P<l>{self.letters}){cues.RIGHT}",
        ]
        return [*self.matching(patterns), *self.listed()]

    def listed(self, begin: int = 0, end: int | None = None) -> list[_Reading]:
        """Letters written as in a list of options: "B. Good", "C) Fair"."""
        bodies = "|".join(re.escape(body) for body in self.options.values() if body)
        if not bodies:
            return []
        pattern = rf"{cues.LEFT}(?P<l>{self.capital})[.)]\s+(?:{bodies})\b"
        return self.matching([pattern], begin, end)

    def matching(
        self, patterns: list[str], begin: int = 0, end: int | None = None
    ) -> list[_Reading]:
        span = self.text[:end] if end is not None else self.text
        return [
            reading
            for pattern in patterns
            for match in re.compile(pattern, re.I).finditer(span, begin)
            if (reading := self.valid(match.start("l"))) is not None
        ]

    def standing(self) -> list[_Reading]:
        """Capitals standing alone: "I'd say B", "This image deserves a C"."""
        pattern = rf"{cues.LEFT}(?P<l>{self.capital}){cues.RIGHT}"
        return [
            reading
            for match in re.finditer(pattern, self.text)
            if (reading := self.valid(match.start("l"))) is not None
        ]


def _same_word(word: str, body: str) -> bool:
    """``word`` is the option's own text: "slight" for severity's "Slight"."""
    return _normalise_text(word) == _normalise_text(body)


def _one(readings: Iterable[_Reading]) -> OptionMatch | None | Literal[False]:
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
    whole = re.fullmatch(
        rf"[\s*_`\"'#>\[（(]*(?P<l>{reply.letters})[)\]）]?[.):]?"
        r"[\s*_`\"'\])）]*",
        text,
        re.I,
    )
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
        readings = [
            reading
            for reading in tier()
            if reading.start is not None  # these tiers read letters where they stand
            and not reply.aside(reading.start)
            and not reply.unchecked_label(reading.start)
        ]
        found = _one(readings)
        if found is False:
            return None, False
        if found is not None:
            chosen = _Reading(found.letter, found.start)
            read = {reading.start for reading in readings if reading.start is not None}
            if reply.rival(chosen, read):
                return None, False
            return found, False
    return None, False


def locate_option(
    text: str | None, options: Mapping[str, str], *, cut_off: bool = False
) -> OptionMatch | None:
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


def parse_option(
    text: str | None, options: Mapping[str, str], *, cut_off: bool = False
) -> str | None:
    """The option letter ``text`` gives, or None (see :func:`locate_option`)."""
    found = locate_option(text, options, cut_off=cut_off)
    return None if found is None else found.letter


__all__ = ["OptionMatch", "locate_option", "parse_option"]
