"""Read the objects a query names ("the car", "the person's face") from determiner phrases."""

from __future__ import annotations

import re

from ..vocabulary import DISTORTION_TERMS
from .regions import region_of

#: Words of a question about taste rather than technical quality.
AESTHETIC_TERMS = (
    "aesthetic",
    "aesthetically",
    "aesthetics",
    "beautiful",
    "beauty",
    "pleasing",
    "pretty",
    "attractive",
    "artistic",
    "art",
    "style",
    "stylish",
    "mood",
    "emotion",
    "emotional",
    "feel",
    "feeling",
    "feelings",
    "happy",
    "sad",
    "composition",
    "lovely",
    "ugly",
    "appealing",
    "romantic",
    "calm",
    "cozy",
    "elegant",
    "gorgeous",
    "nostalgic",
    "evoke",
    "evokes",
)


_NOT_OBJECTS = {
    "image",
    "images",
    "photo",
    "photos",
    "picture",
    "pictures",
    "photograph",
    "pic",
    "shot",
    "quality",
    "overall",
    "following",
    "options",
    "option",
    "question",
    "answer",
    "one",
    "level",
    "distortion",
    "distortions",
    "most",
    "main",
    "best",
    "worst",
    "type",
    "kind",
    "degree",
    "severity",
    "whole",
    "entire",
    "reference",
    "original",
    "tool",
    "score",
    "rating",
    "way",
    "visual",
    "first",
    "second",
    "same",
    "other",
    "image's",
    "photo's",
    "it",
    "scene's",
}


_STOP = {
    "in",
    "on",
    "of",
    "at",
    "is",
    "are",
    "was",
    "were",
    "be",
    "look",
    "looks",
    "appear",
    "appears",
    "seem",
    "seems",
    "and",
    "or",
    "with",
    "to",
    "for",
    "from",
    "by",
    "that",
    "this",
    "which",
    "than",
    "as",
    "have",
    "has",
    "affected",
    "suffer",
    "suffers",
    "there",
    "very",
    "too",
    "so",
    "how",
    "what",
    "a",
    "an",
    "the",
    "using",
    "use",
    "according",
    "compared",
    "say",
    "says",
    "read",
    "reads",
    "show",
    "shows",
    "mean",
    "means",
    "depict",
    "depicts",
    "compare",
    "compares",
    "differ",
    "differs",
    "match",
    "matches",
    "without",
    "against",
    "within",
    "under",
    "behind",
    "near",
    "inside",
    "across",
    "through",
    "over",
    "about",
    "into",
    "during",
    "after",
    "before",
    "like",
}


_WORD = r"[a-z][a-z'\-]*"


#: A determiner and up to three words after it ("the bright red jacket"); a lookahead, so that
#: the words read do not hide the next determiner ("the car and the sky").
_DETERMINER_PHRASE = re.compile(
    rf"\b(?:the|this|that|these|those|its)\s+(?=({_WORD}(?:\s+{_WORD}){{0,2}}))"
)


#: Words that end an object's name once it has one ("the sky natural?", "this photo taken"):
#: what is said of the object, not part of it.
_AFTER_NAME = {
    "good",
    "bad",
    "natural",
    "balanced",
    "visible",
    "clear",
    "readable",
    "acceptable",
    "fine",
    "accurate",
    "correct",
    "realistic",
    "free",
    "enough",
    "taken",
    "okay",
    "ok",
    "nice",
    "poor",
    "fair",
    "excellent",
    "properly",
    "correctly",
    "well",
    "looking",
    "overall",
    "make",
    "makes",
}


#: A preposition between an object and the next determiner phrase, which is then where the
#: object is ("the leaves of the plant", "the car in the driveway"), not another object.
_LOCATOR = re.compile(
    r"\s+(?:of|in|on|at|near|behind|inside|under|along|from|over|above|"
    r"below|beside)\s+"
)


def _distortion_words() -> set[str]:
    return {word for terms in DISTORTION_TERMS.values() for term in terms for word in term.split()}


#: Comparatives that end an object's name: "is the sky sharper than the car" names the sky.
_COMPARATIVES = frozenset(
    {
        "sharper",
        "noisier",
        "blurrier",
        "brighter",
        "darker",
        "clearer",
        "cleaner",
        "crisper",
        "softer",
        "grainier",
        "dimmer",
        "fuzzier",
        "lighter",
        "duller",
        "smoother",
        "richer",
        "hazier",
        "flatter",
        "better",
        "worse",
        "more",
        "less",
        "most",
        "least",
    }
)


def objects_in(text: str) -> list[str]:
    """Return the objects ``text`` names with a determiner ("the car", "the person's face"), less
    distortion, picture and taste words; a phrase that only says where the previous object is
    ("the leaves of the plant") is no object of its own, unless it is a region ("on the left")."""
    excluded = _NOT_OBJECTS | _distortion_words() | set(AESTHETIC_TERMS)
    lowered = text.lower()
    objects: list[str] = []
    previous_end = -1
    for match in _DETERMINER_PHRASE.finditer(lowered):
        words: list[str] = []
        end = match.start(1)
        for word in re.finditer(r"\S+", match.group(1)):
            if (
                word.group() in _STOP
                or word.group() in _COMPARATIVES
                or (words and word.group() in _AFTER_NAME)
            ):
                break
            words.append(word.group())
            end = match.start(1) + word.end()
        words = [w for w in words if w not in excluded]
        if not words:
            continue
        name = " ".join(words)
        locator = previous_end >= 0 and _LOCATOR.fullmatch(lowered[previous_end : match.start()])
        previous_end = end
        if locator and region_of(name, text) is None:
            continue
        if name not in objects:
            objects.append(name)
    return objects


def fold_object_name(name: object) -> str:
    """Return an object's name as names are compared: casefolded, no leading article.

    "The Car" and "car" are the same object; the planner and the executor both compare so."""
    return re.sub(r"^(?:the|a|an)\s+", "", str(name).strip().casefold())
