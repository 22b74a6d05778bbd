"""Read the forms in which a reply commits to an option, tier by tier.

The rules are stated once, in :mod:`agentic_iqa.options`; :mod:`.cues` holds the words.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from . import cues
from .mentions import Mentions, Reading
from .normalise import normalise_text, respells


class Reply(Mentions):
    """One reply read tier by tier: final verdicts, commitments, marked and standing letters."""

    # -- tiers -----------------------------------------------------------------------------

    def after(self, marker: str, *, at_end: bool = False, texts: bool = True) -> Iterator[Reading]:
        """Letters standing right after ``marker``, and (``texts``) option texts standing as
        its clause."""
        closing = r"[)\]*_]*\s*[.!]?\s*$" if at_end else ""
        pattern = rf"(?:{marker})(?P<l>{self.letters}){cues.RIGHT}{closing}"
        for match in re.finditer(pattern, self.text, re.I):
            reading = self.valid(match.start("l"))
            if reading is not None:
                yield reading
        if at_end or not texts:
            return
        for match in re.finditer(rf"(?:{marker})(?P<t>[^\n.;,:!?(—–\"}}]+)", self.text, re.I):
            letter = self.by_text(match.group("t"))
            if letter is not None:
                yield Reading(letter, None)

    def by_text(self, text: str) -> str | None:
        """The one option ``text`` is, as written or respelled ("Overexposed" for
        "Overexposure"); None when it is none of them, or respells more than one."""
        bare = normalise_text(text)
        found = [
            letter for letter, body in self.options.items() if body and normalise_text(body) == bare
        ]
        if not found:
            found = [
                letter for letter, body in self.options.items() if body and respells(bare, body)
            ]
        return found[0] if len(found) == 1 else None

    def before(self, verdict: str) -> Iterator[Reading]:
        """Letters followed by ``verdict``: "A is correct", "C is my answer"."""
        pattern = rf"{cues.LEFT}(?:(?:option|choice)\s+)?[(\[]?(?P<l>{self.letters}){cues.RIGHT}"
        for match in re.finditer(pattern + verdict, self.text, re.I):
            reading = self.valid(match.start("l"))
            if reading is not None:
                yield reading

    def final(self) -> list[Reading]:
        return list(self.after(cues.FINAL + cues.SEPARATOR))

    def committed(self) -> list[Reading]:
        return [
            *self.after(cues.ANSWER + cues.SEPARATOR),
            *self.after(cues.LABEL + cues.SEPARATOR_REQUIRED),
            *self.after(cues.FIRST_PERSON),
            *self.after(cues.CHOOSE_CJK),
            *(  # "it's a ..." is the article, whatever follows it
                reading
                for reading in self.after(cues.COPULA, texts=False)
                if reading.start is None or self.text[reading.start] != "a"
            ),
            *self.after(cues.CORRECTION),
            *self.after(cues.CONCLUDING, at_end=True),
            *self.before(cues.VERDICT_AFTER),
            *self.first_line(),
            *self.letter_lines(),
            *self.last_sentence(),
        ]

    def first_line(self) -> Iterator[Reading]:
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

    def last_sentence(self) -> Iterator[Reading]:
        """A reply ending on a sentence that is only a letter: "... more than slight. C.",
        "Neither A nor B; C."."""
        match = re.search(
            rf"(?:[.!?;]\s+|[。！？；]\s*|\n)[\s*_`\"'#>(\[（]*(?P<l>{self.capital}){cues.RIGHT}"
            r"[)\]）]?(?:\s*[(（][^()\n]{0,40}[)）])?[*_`\"')\]）]*[.!]?[\s*_`\"'\])）]*$",
            self.text,
        )
        if match is not None and (reading := self.valid(match.start("l"))) is not None:
            yield reading

    def letter_lines(self) -> Iterator[Reading]:
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

    def marked(self) -> list[Reading]:
        """Letters set off as options: "(B)", "**B**", "option B", "B. Good"."""
        patterns = [
            rf"[(（\[](?P<l>{self.letters})[)）\]]",
            rf"\*\*[(\[]?(?P<l>{self.letters})[.):\]]?\*\*",
            rf"\b(?:option|choice)\s+[(\[]?(?P<l>{self.letters}){cues.RIGHT}",
        ]
        return [*self.matching(patterns), *self.listed()]

    def listed(self, begin: int = 0, end: int | None = None) -> list[Reading]:
        """Letters written as in a list of options: "B. Good", "C) Fair"."""
        bodies = "|".join(re.escape(body) for body in self.options.values() if body)
        if not bodies:
            return []
        pattern = rf"{cues.LEFT}(?P<l>{self.capital})[.)]\s+(?:{bodies})\b"
        return self.matching([pattern], begin, end)

    def matching(
        self, patterns: list[str], begin: int = 0, end: int | None = None
    ) -> list[Reading]:
        span = self.text[:end] if end is not None else self.text
        return [
            reading
            for pattern in patterns
            for match in re.compile(pattern, re.I).finditer(span, begin)
            if (reading := self.valid(match.start("l"))) is not None
        ]

    def standing(self) -> list[Reading]:
        """Capitals standing alone: "I'd say B", "This image deserves a C"."""
        pattern = rf"{cues.LEFT}(?P<l>{self.capital}){cues.RIGHT}"
        return [
            reading
            for match in re.finditer(pattern, self.text)
            if (reading := self.valid(match.start("l"))) is not None
        ]
