"""Tell a letter the reply commits to from one it mentions in passing, negates or hedges.

The rules are stated once, in :mod:`agentic_iqa.options`; :mod:`.cues` holds the words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from . import cues
from .normalise import fold_width, same_word


@dataclass(frozen=True)
class Reading:
    """A letter read at ``start`` (None: the option was recognised by its text)."""

    letter: str
    start: int | None


class Mentions:
    """One reply and the options it may name: where a letter stands and how it is meant."""

    def __init__(self, text: str, options: Mapping[str, str]) -> None:
        self.text = fold_width(text)  # "Ｃ" is "C", each character where it stands
        self.options = {letter.upper(): body for letter, body in options.items()}
        self.letters = "|".join(re.escape(letter) for letter in sorted(self.options))
        self.capital = rf"(?-i:{self.letters})"

    # -- single mentions -----------------------------------------------------------------

    def valid(self, start: int) -> Reading | None:
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
        return Reading(letter.upper(), start)

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
        if cues.SET_ASIDE_BEFORE.search(tail) or cues.NEGATED_THOUGHT.search(tail):
            return True
        if end is None:
            end = start + 1
            after = re.match(  # and "A and B both look wrong": the pair is negated together
                rf"[)\]）*_`\"'”’」』]*(?:\s*[(（][^()\n]{{0,40}}[)）])?(?:\s*(?:,|and)\s*"
                rf"(?:option\s+)?[(\[]?(?:{self.capital}){cues.RIGHT}[)\]]?)?",
                self.text[end:],
                re.I,
            )
        else:
            after = re.match(
                r"[)\]）*_`\"'”’」』]*(?:\s*[(（\[][^()\n]{0,40}[)）\]])?", self.text[end:]
            )
        assert after is not None  # every part of the pattern is optional
        rest = self.text[end + after.end() :]
        if body:
            rest = re.sub(rf"^\s*[-–—:.]?\s*{re.escape(body)}\b[)\]）*_]*", "", rest, flags=re.I)
        return (
            cues.NEGATION_AFTER.match(rest) is not None
            or cues.SET_ASIDE_AFTER.match(rest) is not None
        )

    def negated_anywhere(self, letter: str) -> bool:
        """The reply negates ``letter`` somewhere: a mention of it elsewhere is then no
        answer, unless the reply commits to it ("Maybe C. ... Answer: not (C)")."""
        pattern = rf"{cues.LEFT}(?P<l>(?-i:{re.escape(letter)})){cues.RIGHT}"
        return any(self.negated(match.start("l")) for match in re.finditer(pattern, self.text))

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
            re.fullmatch(r"[)\]）*_`\"'”’」』]*(?:\s*[(（][^()\n]{0,40}[)）])?[*_`\"']*\s*", after)
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
            if not body or not same_word(match.group(), body)
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

    def rival(self, chosen: Reading, read: set[int]) -> bool:
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
        """Where the letters of a hedge, or of two chosen together, stand: "A or B", "between
        B (Good) and C (Fair)", "B and C"."""

        def one(name: str) -> str:
            return (
                rf"(?:options?\s+)?[\[（(*_`\"']*(?P<{name}>{self.capital}){cues.RIGHT}"
                r"[)\]）*_`\"'”’」』]*"
                r"(?:\s*[(（][^()\n]{0,40}[)）])?"
            )

        patterns = [
            rf"{cues.LEFT}{one('x')}{cues.HEDGE_OR}{one('y')}",
            rf"{cues.HEDGE_BETWEEN}{one('x')}{cues.HEDGE_AND}{one('y')}",
            rf"{cues.LEFT}{one('x')}{cues.PAIR_AND}{one('y')}",
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
