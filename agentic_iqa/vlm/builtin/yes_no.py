"""Read a yes/no question: which distortions it names, and whether Yes means "there" or not.

"Is the image noisy?" asks whether noise is there; "Is it free of noise?", "clear of noise",
"noise-free", "Is noise absent?" and "Is it sharp?" ask whether it is not; "Is it not free of
noise?" and "Is it unsharp?" turn round again.  One rule reads them all, so that a new phrasing
is read the way its words say rather than by the nearest example:

* every word naming a category is a *defect* ("noise", "blurry": Yes means visible), a
  *quality* ("sharp", "clean", "in focus": Yes means not visible) or an *attribute*
  ("contrast", "detail"), which names its category either way and always asks whether the
  defect is there ("lacks contrast", "Is the contrast low?"), unless a good or bad word beside
  it says which ("enough detail", "Is the exposure correct?", "contrast problems");
* every negation ("not", "no", "without", "free of", "clear of", "lacks", "devoid of",
  "absent", "un-", "non-", "-free") turns round the mention it governs: the next one in its
  clause, or for words that follow what they negate ("absent", "gone", "not visible", "-free")
  the one before, with the mentions listed with it ("free of noise and blur");
* a mention turned round an odd number of times asks the opposite ("not free of noise": twice,
  presence; "not unsharp": twice, sharp).  "Isn't it blurry?" asks the same as "Is it blurry?":
  a negated verb opening the question negates nothing.

"Clear of" and "clean of" are negations, not the qualities "clear" and "clean".
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import lru_cache

from ...query import COLOUR_QUALIFIERS
from ...vocabulary import (
    ATTRIBUTE_TERMS,
    BAD_QUALIFIERS,
    DEFECT_HEADS,
    DISTORTION_TERMS,
    GOOD_QUALIFIERS,
    POSITIVE_TERMS,
)

DEFECT, QUALITY, ATTRIBUTE = "defect", "quality", "attribute"
#: The pseudo-category of words about overall quality ("good", "poor").
OVERALL = "overall"

#: Words of a yes/no question about overall quality: asked the good way round, or the bad.
GOOD_WORDS = (
    "good",
    "high quality",
    "high-quality",
    "acceptable",
    "fine",
    "nice",
    "usable",
    "decent",
    "great",
    "excellent",
    "perfect",
    "outstanding",
    "superb",
)
BAD_WORDS = ("bad", "poor", "low quality", "low-quality", "terrible", "awful", "unusable")
#: Words that ask for the top level, not for the good half of the scale.
TOP_WORDS = ("excellent", "perfect", "outstanding", "superb")

#: Where a negation's mention stands: the next one (BEFORE), the one before (AFTER), each
#: falling back to the other side when its own has none in the clause; the affixes only touch
#: the word they are written on ("un" + "sharp", "noise" + "free").
BEFORE, AFTER, ON_NEXT, ON_PREVIOUS = "before", "after", "on next", "on previous"
_NEGATIONS: dict[str, str] = {
    "not visible": AFTER,
    "not present": AFTER,
    "not noticeable": AFTER,
    "not apparent": AFTER,
    "not evident": AFTER,
    "not detectable": AFTER,
    "not there": AFTER,
    "nowhere to be seen": AFTER,
    "free of": BEFORE,
    "free from": BEFORE,
    "clear of": BEFORE,
    "clear from": BEFORE,
    "clean of": BEFORE,
    "devoid of": BEFORE,
    "rid of": BEFORE,
    "lack of": BEFORE,
    "absence of": BEFORE,
    "without": BEFORE,
    "lacks": BEFORE,
    "lack": BEFORE,
    "lacked": BEFORE,
    "lacking": BEFORE,
    "missing": BEFORE,
    "not": BEFORE,
    "no": BEFORE,
    "never": BEFORE,
    "neither": BEFORE,
    "nor": BEFORE,
    "zero": BEFORE,
    "absent": AFTER,
    "gone": AFTER,
    "lost": AFTER,
    "invisible": AFTER,
    "un": ON_NEXT,
    "non": ON_NEXT,
    "free": ON_PREVIOUS,
}
#: Words that may stand between mentions listed together under one negation ("free of noise,
#: blur or any visible artefacts"); "nor" is a negation of its own ("neither blurry nor noisy").
_LISTED = re.compile(
    r"(?:[\s,/&]|\b(?:and|or|of|from|any|visible|noticeable|obvious|"
    r"apparent|signs?|traces?|kinds?|types?|the|a|an|also|even|other|much|"
    r"either|both|too|some|heavy|strong|severe|slight|mild)\b)*"
)
_SPACE = re.compile(r"\s*")
#: Where a clause ends: punctuation, or a word that starts a clause of its own.
_CLAUSE_END = re.compile(
    r"[?.!;:()\[\]\n]|\b(?:but|while|although|though|whereas|yet|because|"
    r"(?:and|or),?\s+(?:is|are|was|were|does|do|did|has|have|can|could|will|would|should|"
    r"it|its|they|there|this|that))\b"
)
#: Asides that negate nothing: "yes or no", "or not", "whether or not", "not only".
_ASIDES = re.compile(
    r"\byes\s*(?:or|/)\s*no\b|\b(?:whether\s+)?or\s+not\b|"
    r"\bnot\s+(?:only|just|merely)\b"
)
#: A negated verb ("doesn't", "isn't"): a negation, except where it opens the question.
_NOT_VERB = re.compile(r"\b[a-z]+n't\b")
_FILLERS_AFTER_ATTRIBUTE = (
    r"(?:(?:is|are|looks?|seems?|appears?|not|quite|very|really|"
    r"overall|here|enough)\s+){0,3}"
)


@dataclass(frozen=True)
class Mention:
    """Words naming one or more categories (or :data:`OVERALL`), where, and of which kind."""

    start: int
    end: int
    words: str
    kind: str
    categories: tuple[str, ...]


@dataclass(frozen=True)
class Asked:
    """One thing a yes/no question asks: whether ``categories`` are visible (``present``) or
    not; ``positive``: named by a quality word not turned round ("sharp", "in focus")."""

    words: str
    categories: tuple[str, ...]
    present: bool
    positive: bool = False


def _alternation(phrases: list[str]) -> str:
    return "|".join(re.escape(p) for p in sorted(set(phrases), key=len, reverse=True))


@lru_cache(maxsize=1)
def _lexicon() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every single phrase that names something: phrase -> (kind, categories)."""
    table: dict[str, tuple[str, tuple[str, ...]]] = {}

    def add(phrase: str, kind: str, category: str) -> None:
        old_kind, categories = table.get(phrase, (kind, ()))
        if category not in categories:
            table[phrase] = (old_kind, (*categories, category))

    for category, terms in POSITIVE_TERMS.items():
        for term in terms:
            add(term, QUALITY, category)
    for category, terms in ATTRIBUTE_TERMS.items():
        for term in terms:
            if term not in table:
                add(term, ATTRIBUTE, category)
    for category, terms in DISTORTION_TERMS.items():
        for term in terms:
            if table.get(term, (DEFECT,))[0] == DEFECT:
                add(term, DEFECT, category)
    for word in GOOD_WORDS:
        table.setdefault(word, (QUALITY, (OVERALL,)))
    for word in BAD_WORDS:
        table.setdefault(word, (DEFECT, (OVERALL,)))
    return table


@lru_cache(maxsize=1)
def _patterns() -> dict[str, re.Pattern[str]]:
    table = _lexicon()
    attributes = _alternation([t for t, (kind, _) in table.items() if kind == ATTRIBUTE])
    good, bad = _alternation(list(GOOD_QUALIFIERS)), _alternation(list(BAD_QUALIFIERS))
    heads = _alternation(list(DEFECT_HEADS))
    # "un"/"non" turn round a quality ("unsharp", "unfocused", "unacceptable") and the defects
    # whose opposite they make ("unblurred", "non-noisy", "uncompressed"); elsewhere an
    # un-word names the defect itself ("unsaturated") and is left whole.
    flippable = [t for t, (kind, _) in table.items() if kind == QUALITY]
    flippable += [t for c in ("Blurs", "Noise", "Compression") for t in DISTORTION_TERMS[c]]
    word = r"(?<![\w-]){}(?![\w-])"
    return {
        "single": re.compile(word.format(f"(?:{_alternation(list(table))})")),
        "good_before": re.compile(word.format(f"(?:{good})\\s+(?P<a>{attributes})")),
        "bad_before": re.compile(word.format(f"(?:{bad})\\s+(?P<a>{attributes})")),
        "good_after": re.compile(
            word.format(f"(?P<a>{attributes})\\s+{_FILLERS_AFTER_ATTRIBUTE}(?:{good})")
        ),
        "bad_after": re.compile(
            word.format(f"(?P<a>{attributes})\\s+{_FILLERS_AFTER_ATTRIBUTE}(?:{bad})")
        ),
        "head_after": re.compile(word.format(f"(?P<a>{attributes})\\s+(?:{heads})")),
        "loss_of": re.compile(
            word.format(
                f"(?:loss\\s+of|(?:problems?|issues?)\\s+with)\\s+(?:the\\s+)?(?P<a>{attributes})"
            )
        ),
        "negation": re.compile(word.format(f"(?:{_alternation(list(_NEGATIONS))})")),
        "un": re.compile(rf"(?<![\w-])(un|non)-?(?=(?:{_alternation(flippable)})(?![\w-]))"),
    }


def _normalized(question: str) -> str:
    """Lower case, asides blanked, affixes split off ("unsharp" -> "un sharp", "noise-free" ->
    "noise free"), the same length and offsets except where an affix is split."""
    text = question.casefold().replace("\u2019", "'")
    text = _ASIDES.sub(lambda m: " " * len(m.group()), text)
    text = re.sub(r"(?<=\w)-free\b", " free", text)
    return _patterns()["un"].sub(lambda m: m.group(1) + " ", text)


def _clause_starts(text: str) -> list[int]:
    return [0] + [m.end() for m in _CLAUSE_END.finditer(text)]


def _mentions(text: str) -> list[Mention]:
    """Every mention, longest first where they overlap."""
    table, patterns = _lexicon(), _patterns()
    found: list[Mention] = []
    for match in patterns["single"].finditer(text):
        kind, categories = table[match.group()]
        found.append(Mention(match.start(), match.end(), match.group(), kind, categories))
    for name, kind in (
        ("good_before", QUALITY),
        ("bad_before", DEFECT),
        ("good_after", QUALITY),
        ("bad_after", DEFECT),
        ("head_after", DEFECT),
        ("loss_of", DEFECT),
    ):
        for match in patterns[name].finditer(text):
            categories = table[match.group("a")][1]
            found.append(Mention(match.start(), match.end(), match.group(), kind, categories))
    kept: list[Mention] = []
    for mention in sorted(found, key=lambda m: (m.start - m.end, m.start)):
        if all(mention.end <= k.start or mention.start >= k.end for k in kept):
            kept.append(mention)
    return sorted(kept, key=lambda m: m.start)


def _negations(text: str, starts: list[int]) -> list[tuple[int, int, str]]:
    """(start, end, where its mention stands) of every negation."""
    found = [
        (m.start(), m.end(), _NEGATIONS[m.group()]) for m in _patterns()["negation"].finditer(text)
    ]
    for match in _NOT_VERB.finditer(text):
        opening = text[starts[bisect.bisect_right(starts, match.start()) - 1] : match.start()]
        if opening.strip():  # "Isn't it blurry?" asks whether it is
            found.append((match.start(), match.end(), BEFORE))
    return found


def _listed_with(
    mentions: list[Mention], index: int, step: int, text: str, between: re.Pattern[str] = _LISTED
) -> list[int]:
    """``index`` and the mentions listed with it, going forward (1) or back (-1), with only
    ``between`` between each and the next."""
    chain = [index]
    while 0 <= chain[-1] + step < len(mentions):
        a, b = sorted((mentions[chain[-1]], mentions[chain[-1] + step]), key=lambda m: m.start)
        if not between.fullmatch(text[a.end : b.start]):
            break
        chain.append(chain[-1] + step)
    return chain


def _governed(negation: tuple[int, int, str], mentions: list[Mention], text: str) -> list[int]:
    start, end, where = negation
    if where == ON_NEXT:  # "un sharp"
        touching = [
            i for i, m in enumerate(mentions) if m.start >= end and not text[end : m.start].strip()
        ][:1]
        return _listed_with(mentions, touching[0], 1, text, _SPACE) if touching else []
    if where == ON_PREVIOUS:  # "jpeg artefacts free": the whole compound
        touching = [
            i for i, m in enumerate(mentions) if m.end <= start and not text[m.end : start].strip()
        ][-1:]
        return _listed_with(mentions, touching[0], -1, text, _SPACE) if touching else []
    after = [i for i, m in enumerate(mentions) if m.end > end]
    before = [i for i, m in enumerate(mentions) if m.end <= start]
    if where == BEFORE and after or where == AFTER and not before:
        return _listed_with(mentions, after[0], 1, text) if after else []
    return _listed_with(mentions, before[-1], -1, text) if before else []


def _recoloured(mention: Mention, clause: list[Mention]) -> Mention:
    """ "Washed out" and "faded" describe the colours in a clause about colour."""
    if mention.words in COLOUR_QUALIFIERS and any(
        "Color distortions" in m.categories for m in clause if m is not mention
    ):
        return Mention(
            mention.start, mention.end, mention.words, mention.kind, ("Color distortions",)
        )
    return mention


def read(question: str) -> list[Asked]:
    """What ``question`` asks, one entry per mention in order of mention, overall-quality words
    (categories ``(OVERALL,)``, ``present`` meaning "is it bad") included."""
    text = _normalized(question)
    starts = _clause_starts(text)
    negations = _negations(text, starts)
    spans = [(s, e) for s, e, where in negations if " " in text[s:e]]
    mentions = [
        m for m in _mentions(text) if not any(s <= m.start and m.end <= e for s, e in spans)
    ]
    flips = [0] * len(mentions)
    for clause_start, clause_end in zip(starts, [*starts[1:], len(text) + 1], strict=True):
        inside = [i for i, m in enumerate(mentions) if clause_start <= m.start < clause_end]
        clause = [mentions[i] for i in inside]
        for i in inside:
            mentions[i] = _recoloured(mentions[i], clause)
        for negation in negations:
            if clause_start <= negation[0] < clause_end:
                for j in _governed(negation, clause, text):
                    flips[inside[j]] += 1
    result = []
    for mention, flipped in zip(mentions, flips, strict=True):
        odd = flipped % 2 == 1
        present = {DEFECT: not odd, QUALITY: odd, ATTRIBUTE: True}[mention.kind]
        result.append(
            Asked(
                mention.words,
                mention.categories,
                present,
                positive=mention.kind == QUALITY and not odd,
            )
        )
    return result


def distortions_asked(question: str) -> list[Asked]:
    """What a yes/no question asks about distortions, each (categories, way round) once."""
    seen: set[tuple[tuple[str, ...], bool]] = set()
    result = []
    for asked in read(question):
        key = (asked.categories, asked.present)
        if OVERALL not in asked.categories and key not in seen:
            seen.add(key)
            result.append(asked)
    return result


def all_needed(question: str) -> bool:
    """Whether several distortions asked to be there must all be ("noisy and blurry", "not
    only noisy but also blurry"), not one of them ("noisy or blurry", "any noise, blur or
    artefacts")."""
    text = question.casefold()
    both = re.search(r"\b(?:and|both|as well as|but also)\b", text) is not None
    return both and re.search(r"\b(?:or|either)\b", _normalized(question)) is None


def overall_asked(question: str) -> Asked | None:
    """The first overall-quality word of ``question``, read the same way ("not of good
    quality" asks whether it is bad)."""
    return next((a for a in read(question) if a.categories == (OVERALL,)), None)


__all__ = [
    "BAD_WORDS",
    "GOOD_WORDS",
    "OVERALL",
    "TOP_WORDS",
    "Asked",
    "all_needed",
    "distortions_asked",
    "overall_asked",
    "read",
]
