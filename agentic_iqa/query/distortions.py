"""Read the distortion categories a query names, and the words that only may be one.

A distortion word that may describe the content ("the dark car", "what colour is the car?") is
only *possibly* a distortion (:func:`distortion_words`); a model's reading decides.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from iqa_tools.catalog import Catalog

from ..vocabulary import DISTORTION_TERMS
from .tools import masked_tools

#: Contrast words that, in a sentence about colour ("are the colours washed out?"), describe the
#: colours (saturation), not the tonal range: there they count as Color distortions only.
COLOUR_QUALIFIERS = ("washed out", "washed-out", "faded")


def _term_positions(text: str, terms: Iterable[str]) -> list[tuple[int, str]]:
    return [
        (m.start(), t)
        for t in terms
        for m in re.finditer(rf"(?<![\w-]){re.escape(t)}(?![\w-])", text)
    ]


def _sentence_terms(text: str) -> dict[str, list[tuple[int, str]]]:
    """Per category, (position, term) of its words, with :data:`COLOUR_QUALIFIERS` moved from
    Contrast to Color distortions in the sentences that name colour."""
    hits = {category: _term_positions(text, terms) for category, terms in DISTORTION_TERMS.items()}
    colour_sentences = {_sentence_at(text, position) for position, _ in hits["Color distortions"]}
    moved = [
        (position, term)
        for position, term in hits["Contrast"]
        if term in COLOUR_QUALIFIERS and _sentence_at(text, position) in colour_sentences
    ]
    hits["Contrast"] = [hit for hit in hits["Contrast"] if hit not in moved]
    hits["Color distortions"] += moved
    return hits


def _sentence_at(text: str, position: int) -> int:
    """Return which sentence of ``text`` the character at ``position`` is in (0, 1, ...)."""
    return len(re.findall(r"[.?!;](?:\s|$)", text[:position]))


def categories_in(text: str) -> list[str]:
    """Distortion categories named in ``text``, in order of first mention.  "Washed out" and
    "faded" are a contrast problem ("is the photo washed out?") except where the sentence is
    about colour ("are the colours washed out or distorted?": a colour question only)."""
    lowered = text.lower()
    found = [
        (min(position for position, _ in hits), category)
        for category, hits in _sentence_terms(lowered).items()
        if hits
    ]
    return [category for _, category in sorted(found)]


#: Distortion words that as often say what is in the picture as what is wrong with it: "the
#: dark car", "what colour is the car?", "the details of the sign", "wood grain", "a hazy
#: morning".  Reconciliation never makes a distortion Explicit from these alone: where a model
#: read them, its reading stands.  ("Clear" and "soft" name no category here at all.)
AMBIGUOUS_DISTORTION_TERMS = frozenset(
    {
        "bright",
        "dark",
        "darkness",
        "dim",
        "lighting",
        "illumination",
        "exposed",
        "flat",
        "faded",
        "hazy",
        "haze",
        "color",
        "colour",
        "colors",
        "colours",
        "colored",
        "coloured",
        "hue",
        "tint",
        "detail",
        "details",
        "grain",
        "fuzzy",
    }
)


#: Of those, the adjectives: before a noun they describe a thing ("the dark car", "a flat
#: roof"), unless the noun is the picture or its quality ("a dark photo", "dim lighting").
_AMBIGUOUS_ADJECTIVES = frozenset(
    {"bright", "dark", "dim", "exposed", "flat", "faded", "hazy", "colored", "coloured", "fuzzy"}
)


_QUALITY_NOUNS = frozenset(
    {
        "image",
        "images",
        "photo",
        "photos",
        "picture",
        "pictures",
        "photograph",
        "shot",
        "scene",
        "frame",
        "pic",
        "version",
        "focus",
        "exposure",
        "lighting",
        "light",
        "colours",
        "colors",
        "contrast",
        "detail",
        "details",
        "quality",
    }
)


#: Words after an adjective that leave it a predicate ("is it dark enough?", "dark or noisy").
_PREDICATE_FOLLOWERS = frozenset(
    {
        "enough",
        "overall",
        "here",
        "there",
        "now",
        "at",
        "all",
        "throughout",
        "or",
        "and",
        "but",
        "than",
        "to",
        "for",
        "in",
        "on",
        "compared",
        "because",
        "though",
        "although",
        "too",
        "please",
        "then",
        "everywhere",
        "anywhere",
        "somewhere",
        "is",
        "are",
        "was",
        "were",
        "with",
        "from",
        "by",
        "as",
        "so",
        "of",
    }
)


#: Questions about what the picture shows ("what colour is the car?", "how many people are
#: there?", "what does the sign say?"): their ambiguous distortion words describe content.
_CONTENT_QUESTION = re.compile(
    r"what\s+colou?rs?\b|which\s+colou?rs?\b|what\s+(?:is|are|was|were)\s+the\s+colou?rs?\s+of\b"
    r"|how\s+many\b|what(?:'s|\s+is|\s+are)\s+(?:in|on|inside|shown|depicted|happening|visible|"
    r"written|there)\b|what\s+(?:time|season|year|weather|animals?|breed|species|brand|sport|"
    r"language|country|city|place|room|objects?|food|fruit|vehicle|kind\s+of\s+(?:animal|dog|"
    r"cat|bird|car|food|plant|tree|flower|building))\b|which\s+(?:animals?|person|people|"
    r"objects?|breed|species|brand|team|country|city|season|sport|birds?|flowers?|fruits?|"
    r"cars?|vehicles?|buildings?|of\s+the\s+(?:animals|people|objects|cars|buildings))\b"
    r"|who\b|what\s+(?:does|do|did)\s+(?:the|this|that|these|those|its|a|an)\s+[\w' -]{1,40}?"
    r"\s(?:say|read|show|depict|mean|represent)\b|what\s+(?:is|are|was|were)\s+(?:the|this|"
    r"that|a)\s+(?:\w+\s+){1,2}?(?:doing|wearing|holding|eating|reading|carrying)\b"
    r"|where\s+(?:is|was|are|were)\s+(?:this|the)\s+(?:photo|picture|image|photograph|shot)\s+"
    r"taken\b|is\s+it\s+(?:day|night|daytime|night-?time|morning|afternoon|evening|dusk|dawn|"
    r"sunny|raining|snowing|winter|summer|spring|autumn)\b|count\b|read\s+the\b",
    re.I,
)


#: What may come before a content question in its clause: nothing, or a polite lead-in.
_CLAUSE_LEAD = re.compile(
    r"(?:^|[.?!;:,\n]|\b(?:and|but|or|also|then|so))\s*(?:(?:please|can you|could you|"
    r"would you|tell me|do you know|i wonder|i want to know)\b[\s,]*)*$",
    re.I,
)


#: Where a clause ends: punctuation, or "and"/"but" starting a new question.
_CLAUSE_END = re.compile(
    r"[.?!;,\n]|\b(?:and|but)\s+(?=(?:is|are|was|were|does|do|did|how|what|which|can|could|"
    r"would|should|has|have)\b)",
    re.I,
)


def content_questions(text: str) -> list[tuple[int, int]]:
    """Return the spans of ``text`` that ask what the picture shows, each from its question word to
    the end of its clause ("What colour is the car, and is it blurry?": the first clause)."""
    spans: list[tuple[int, int]] = []
    for found in _CONTENT_QUESTION.finditer(text):
        start = found.start()
        if re.match(r"\w", text[start - 1 : start]) or not _CLAUSE_LEAD.search(text[:start]):
            continue
        close = _CLAUSE_END.search(text, found.end())
        spans.append((start, close.start() if close else len(text)))
    return spans


@dataclass(frozen=True)
class DistortionWords:
    """The distortion categories a query names: ``certain`` by words that only ever name a
    distortion ("blurry", "too dark", "JPEG"), ``possible`` by words that may describe content
    (:data:`AMBIGUOUS_DISTORTION_TERMS`) where the wording reads them as distortions ("is it
    dark?", not "the dark car" or "what colour is it?") and by no certain word."""

    certain: tuple[str, ...]
    possible: tuple[str, ...]
    order: tuple[str, ...]

    @property
    def read(self) -> tuple[str, ...]:
        """Certain and possible together, in order of first mention: a reader's best guess."""
        return self.order


def _content_use(text: str, position: int, term: str, content: list[tuple[int, int]]) -> bool:
    """Tell whether the ambiguous word ``term`` at ``position`` of (lower-case) ``text`` describes
    content: in a content question, or an adjective before a noun that is not the picture."""
    if any(start <= position < end for start, end in content):
        return True
    if term not in _AMBIGUOUS_ADJECTIVES:
        return False
    following = re.match(r"\s+([a-z][\w'-]*)", text[position + len(term) :])
    if following is None:
        return False
    word = following.group(1)
    return not (word in _PREDICATE_FOLLOWERS or word in _QUALITY_NOUNS or word.endswith("ly"))


def distortion_words(text: str, tools: Iterable[str] | Catalog = ()) -> DistortionWords:
    """Return the categories ``text`` names, split by how sure its words are
    (:class:`DistortionWords`); the words of a tool's name ("peak signal-to-noise ratio") name
    none."""
    lowered = masked_tools(text, tools).lower()
    content = content_questions(lowered)
    certain: dict[str, int] = {}
    possible: dict[str, int] = {}
    for category, hits in _sentence_terms(lowered).items():
        for position, term in hits:
            if term not in AMBIGUOUS_DISTORTION_TERMS:
                certain[category] = min(position, certain.get(category, position))
            elif not _content_use(lowered, position, term, content):
                possible[category] = min(position, possible.get(category, position))
    first = {**possible, **certain}
    return DistortionWords(
        certain=tuple(sorted(certain, key=certain.__getitem__)),
        possible=tuple(sorted(set(possible) - set(certain), key=possible.__getitem__)),
        order=tuple(
            sorted(first, key=lambda c: min(certain.get(c, len(text)), possible.get(c, len(text))))
        ),
    )
