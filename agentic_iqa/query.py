"""Reading a user's query without a language model: distortions, objects, tools, options, intent.

Deliberately simple and predictable: word lists mapped to the paper's seven distortion
categories, determiner phrases for named objects ("the car", "the person's face"), the tool
catalogue's names and aliases for explicitly requested tools, and lettered options for multiple
choice.  What a word may mean either way is said so: a distortion word that may describe the
content ("the dark car", "what colour is the car?") is only *possibly* a distortion
(:func:`distortion_words`), and a family name ("WaDIQaM") is ambiguous until a qualifier
beside it ("no-reference") decides (:func:`tool_mentions`); a model's reading decides the rest.
Named image regions that need no model to find (a half, a quarter, the centre) are read by
:func:`region_of` so the offline backend can measure them on a crop.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from iqa_tools.catalog import Catalog, load_catalog

from .vocabulary import DISTORTION_TERMS

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

#: Words asking for a rating, which puts the summarizer in scoring mode (the builtin planner's
#: rule; a remote planner says so in the plan's ``answer_mode``).  English first, then a few
#: other languages' usual phrasings.
RATING_TERMS = (
    "rate",
    "rating",
    "score",
    "grade",
    "how good",
    "how is the quality",
    "overall quality",
    "quality of this",
    "quality of the",
    "assess the quality",
    "evaluate the quality",
    "quality level",
    "mos",
    # German, French, Spanish, Italian, Portuguese, Dutch
    "bewerte",
    "bewerten",
    "bewertung",
    "beurteile",
    "beurteilen",
    "benote",
    "wie gut ist",
    "wie ist die qualität",
    "évalue",
    "évaluez",
    "évaluer",
    "notez",
    "quelle est la qualité",
    "califica",
    "calificar",
    "evalúa",
    "evalúe",
    "evaluar",
    "puntúa",
    "puntuación",
    "qué calidad",
    "valuta",
    "valutare",
    "qual è la qualità",
    "avalie",
    "avaliar",
    "classifique",
    "qual é a qualidade",
    "beoordeel",
    "hoe goed is",
)
#: The same for scripts written without spaces between words (matched as substrings).
RATING_TERMS_UNSPACED = (
    "评分",
    "打分",
    "评价",
    "评估",
    "质量如何",
    "評価",
    "採点",
    "点数",
    "品質は",
)

#: Tool names that are also ordinary words: they name the tool only when written as the
#: catalogue does ("UNIQUE") or beside a word that makes them one ("using unique", "the unique
#: score"); "What is unique about the noise?" names no tool.
ORDINARY_WORD_TOOLS = frozenset({"unique", "tres"})
_TOOL_CUE_BEFORE = (
    "using",
    "use",
    "with",
    "by",
    "via",
    "run",
    "running",
    "apply",
    "applying",
    "according to",
    "measured by",
    "computed by",
)
_TOOL_CUE_AFTER = (
    "score",
    "scores",
    "metric",
    "metrics",
    "tool",
    "model",
    "index",
    "value",
    "values",
    "rating",
    "measure",
    "says",
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
_LETTERS = "ABCDEFGH"
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
_OPTION = re.compile(r"(?:^|\s|\()([A-H])[\.\):]\s*(.+?)(?=\s+\(?[A-H][\.\):]\s|\n|$)", re.M)


@dataclass(frozen=True)
class ParsedQuery:
    text: str
    distortions: tuple[str, ...]  # categories named anywhere in the query (ordered)
    objects: tuple[str, ...]  # named objects or regions
    tool: str | None  # canonical name of an explicitly named tool
    options: dict[str, str] = field(default_factory=dict)  # letter -> option text
    aesthetic: bool = False
    wants_rating: bool = False

    @property
    def is_multiple_choice(self) -> bool:
        return len(self.options) >= 2


def _contains(text: str, term: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", text) is not None


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
    """Which sentence of ``text`` the character at ``position`` is in (0, 1, ...)."""
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
    """The spans of ``text`` that ask what the picture shows, each from its question word to
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
    """Whether the ambiguous word ``term`` at ``position`` of (lower-case) ``text`` describes
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
    """The categories ``text`` names, split by how sure its words are (:class:`DistortionWords`);
    the words of a tool's name ("peak signal-to-noise ratio") name none."""
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
    """The objects ``text`` names with a determiner ("the car", "the person's face"), less
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


#: Words that say a tool is not wanted when they stand just before its name ("don't use NIQE",
#: "without BRISQUE", "not NIQE", "instead of PSNR"); a list after one ("not NIQE or BRISQUE")
#: is excluded whole.
_EXCLUDE_BEFORE = re.compile(
    r"(?:\b(?:do\s+not|don'?t|doesn'?t|never|please\s+don'?t)\s+(?:use|run|apply|rely\s+on|"
    r"trust|consider|want|need|include)|\bnot\s+(?:using|with|by|via)|\bwithout(?:\s+using)?|"
    r"\bnot|\bno|\bavoid(?:ing)?|\bexcept|\bexcluding|\bexclude|\bskip(?:ping)?|"
    r"\binstead\s+of|\brather\s+than|\bother\s+than|\bapart\s+from|\bbut\s+not|\bnor)"
    r"(?:\s+(?:the|a|any))?\s*$",
    re.I,
)
#: The same said after the name ("NIQE is not needed", "BRISQUE should not be used").
_EXCLUDE_AFTER = re.compile(
    r"^(?:'s)?(?:\s+(?:scores?|metric|tool))?\s+(?:is|are|should|must|shall|can|will)?\s*"
    r"(?:not|n't|never)\s+(?:be\s+)?(?:used|needed|wanted|applied|run|required|allowed)\b",
    re.I,
)
#: What may stand between a negation and the later names of a list it covers.
_LIST_JOINER = re.compile(r"\s*[,/]?\s*(?:(?:or|and|nor)\s+)?", re.I)
#: Words after an ordinary-word tool ("using unique") that keep it a tool: the end of the phrase.
_TOOL_PHRASE_END = (
    "to",
    "and",
    "or",
    "on",
    "for",
    "please",
    "instead",
    "as",
    "in",
    "then",
    "only",
    "alone",
    "here",
    "too",
    "rather",
    "again",
)
_TOKEN = re.compile(r"[A-Za-z0-9]+")
#: What may stand between the words of one tool's name ("MS SSIM", "Multi-Scale SSIM",
#: "TOPIQ (full-reference)", "blind/referenceless"), never a comma or a full stop.
_NAME_JOINER = re.compile(r"[ \t\-_/()]{0,3}")
#: The most words a catalogue spelling has ("unified no-reference image quality and ...").
_MAX_NAME_WORDS = 10
#: A word near a family name that says which variant is meant: "full-reference", "FR" ... or
#: "no-reference", "NR", "blind" ...
_QUALIFIER = (
    r"(?<![\w-])(?P<q>full[\s-]?reference|reference[\s-]based|no[\s-]?reference|"
    r"non[\s-]?reference|reference[\s-]?free|referenceless|blind|fr|nr)(?![\w-])"
)
#: A qualifier just before the family name: "full-reference TOPIQ", "the no-reference version
#: of WaDIQaM", "blind WaDIQaM".
_QUALIFIER_BEFORE = re.compile(
    _QUALIFIER + r"(?:\s+(?:version|variant|form|model|flavou?r)\s+of)?\s+(?:the\s+)?$", re.I
)
#: A qualifier just after it: "TOPIQ (full-reference)", "TOPIQ, the full-reference one",
#: "WaDIQaM in its no-reference form", "TOPIQ's FR variant".
_QUALIFIER_AFTER = re.compile(
    r"^(?:'s)?[\s,:(\-\u2013\u2014]*(?:(?:the|its|in|a|an|as|i\.e\.)\s+){0,3}" + _QUALIFIER, re.I
)


def _spelling_key(text: str) -> str:
    """A spelling reduced the way the catalogue looks names up: letters and digits, lower case."""
    return re.sub(r"[\W_]", "", text).lower()


@dataclass(frozen=True)
class ToolSpellings:
    """What a query may call the tools: each spelling's key (:func:`_spelling_key`) and the tool
    it names, each family name's key and its members, and each tool's type ("FR", "NR")."""

    tools: dict[str, str]
    families: dict[str, tuple[str, ...]]
    kinds: dict[str, str]


def tool_spellings(tools: Iterable[str] | Catalog) -> ToolSpellings:
    """The spellings of ``tools``: a catalogue's own (names, pyiqa names, display names,
    aliases, families), or for plain names those the shipped catalogue gives them."""
    if isinstance(tools, Catalog):
        return ToolSpellings(
            tools.spellings(), dict(tools.families), {spec.name: spec.type for spec in tools}
        )
    return _spellings_of_names(tuple(tools))


@functools.lru_cache(maxsize=64)
def _spellings_of_names(names: tuple[str, ...]) -> ToolSpellings:
    shipped = tool_spellings(_shipped_catalog())
    wanted = set(names)
    spellings = {key: name for key, name in shipped.tools.items() if name in wanted}
    for name in names:  # a name the shipped catalogue lacks is still its own spelling
        spellings.setdefault(_spelling_key(name), name)
    families = {
        key: kept
        for key, members in shipped.families.items()
        if (kept := tuple(name for name in members if name in wanted))
    }
    return ToolSpellings(
        spellings, families, {name: kind for name, kind in shipped.kinds.items() if name in wanted}
    )


@functools.lru_cache(maxsize=1)
def _shipped_catalog() -> Catalog:
    return load_catalog()


@dataclass(frozen=True)
class ToolMention:
    """One place where the query names a tool: which, where, and whether it is ruled out.

    ``tools`` holds the one tool named, or for a family name ("TOPIQ", "WaDIQaM") the members a
    qualifier beside it leaves; ``ambiguous`` when no qualifier decides between them (even a
    family with one member in the catalogue: the name does not say that variant).  A family
    whose qualifier leaves no member ("TOPIQ NR") names a tool the catalogue lacks: no tools.
    """

    tools: tuple[str, ...]
    start: int
    end: int
    excluded: bool
    ambiguous: bool = False

    @property
    def tool(self) -> str | None:
        """The tool named for certain, else None."""
        return self.tools[0] if len(self.tools) == 1 and not self.ambiguous else None


def _named_as_tool(text: str, name: str, start: int, end: int) -> bool:
    """Whether the ordinary-word spelling ``text[start:end]`` names the tool ``name`` (see
    :data:`ORDINARY_WORD_TOOLS`): written as the catalogue spells it, or beside a word that makes
    it one ("using unique.", "the unique score"), not as an adjective ("with unique colours")."""
    written = text[start:end]
    if written == name or (written.isupper() and len(written) > 1 and not text.isupper()):
        return True
    lowered = text.lower()
    before = "|".join(re.escape(cue) for cue in _TOOL_CUE_BEFORE)
    after = "|".join(re.escape(cue) for cue in _TOOL_CUE_AFTER)
    rest = lowered[end:]
    if re.match(rf"(?:'s)?\s+(?:{after})\b", rest):
        return True
    if not re.search(rf"\b(?:{before})\s+(?:the\s+)?$", lowered[:start]):
        return False
    following = re.match(r"\s*([a-z][\w'-]*)", rest)  # a noun after it: an adjective
    return (
        following is None
        or following.group(1) in _TOOL_PHRASE_END
        or re.match(r"\s*[,.;:!?)]", rest) is not None
    )


def _spelling_at(
    text: str, tokens: list[re.Match[str]], index: int, spellings: ToolSpellings
) -> tuple[str, int, int] | None:
    """The longest catalogue spelling starting at ``tokens[index]``: (key, words, end)."""
    for width in range(min(_MAX_NAME_WORDS, len(tokens) - index), 0, -1):
        group = tokens[index : index + width]
        if any(
            not _NAME_JOINER.fullmatch(text[a.end() : b.start()])
            for a, b in zip(group, group[1:], strict=False)
        ):
            continue
        key = "".join(token.group().lower() for token in group)
        if key not in spellings.tools and key not in spellings.families:
            continue
        start, end = group[0].start(), group[-1].end()
        if key in ORDINARY_WORD_TOOLS and not _named_as_tool(
            text, spellings.tools.get(key, key), start, end
        ):
            continue
        return key, width, end
    return None


def _kind_of(qualifier: str) -> str:
    return "FR" if _spelling_key(qualifier) in ("fullreference", "referencebased", "fr") else "NR"


def _family_mention(
    text: str, start: int, end: int, members: tuple[str, ...], kinds: dict[str, str]
) -> tuple[tuple[str, ...], bool, int, int]:
    """A family name's members, whether it stays ambiguous, and its span with the qualifier
    that decides it: one just before ("full-reference TOPIQ") or just after ("TOPIQ (FR)",
    "TOPIQ, the full-reference one").  Two qualifiers that disagree decide nothing."""
    before = _QUALIFIER_BEFORE.search(text[:start])
    after = _QUALIFIER_AFTER.match(text[end:])
    said = {_kind_of(found.group("q")) for found in (before, after) if found}
    if len(said) != 1:
        return members, True, start, end
    kind = said.pop()
    if before:
        start = before.start("q")
    if after:
        end += after.end("q")
    return tuple(name for name in members if kinds.get(name) == kind), False, start, end


def tool_mentions(text: str, tools: Iterable[str] | Catalog) -> list[ToolMention]:
    """Every tool ``text`` names, in order, in any spelling the catalogue accepts ("Q-Align",
    "CLIP IQA", "MS SSIM", "Multi-Scale SSIM", "peak signal-to-noise ratio"): the longest
    spelling at a place wins, so "Multi-Scale SSIM index" is MS-SSIM and not SSIM.  A family
    name is decided by a qualifier beside it (:func:`_family_mention`), else left ambiguous.
    An ordinary word is a tool only when named as one; a name after "don't use", "without",
    "not" ... (or before "is not needed") is ``excluded``."""
    spellings = tool_spellings(tools)
    tokens = list(_TOKEN.finditer(text))
    mentions: list[ToolMention] = []
    index = 0
    while index < len(tokens):
        found = _spelling_at(text, tokens, index, spellings)
        if found is None:
            index += 1
            continue
        key, width, end = found
        start = tokens[index].start()
        named: tuple[str, ...]
        if key in spellings.tools:
            named, ambiguous = (spellings.tools[key],), False
        else:
            named, ambiguous, start, end = _family_mention(
                text, start, end, spellings.families[key], spellings.kinds
            )
        mentions.append(
            ToolMention(named, start, end, _excluded(text, start, end, mentions), ambiguous)
        )
        index += width
        while index < len(tokens) and tokens[index].start() < end:
            index += 1  # past a qualifier read with the name
    return mentions


def _excluded(text: str, start: int, end: int, earlier: list[ToolMention]) -> bool:
    """Whether the name at ``text[start:end]`` is ruled out: a negation just before it, or
    before a list it ends ("not NIQE or BRISQUE"), or a refusal just after it."""
    if _EXCLUDE_AFTER.match(text[end:]):
        return True
    if earlier and earlier[-1].excluded and _LIST_JOINER.fullmatch(text[earlier[-1].end : start]):
        return True  # the list goes on from an excluded name
    return _EXCLUDE_BEFORE.search(text[:start]) is not None


def tool_in(text: str, tools: Iterable[str] | Catalog) -> str | None:
    """The tool the text names for certain as a tool: the first it names, unambiguously, and
    does not rule out."""
    return next(
        (m.tool for m in tool_mentions(text, tools) if not m.excluded and m.tool is not None), None
    )


def required_tool_in(
    text: str, tools: Iterable[str] | Catalog, *, reference: bool, chosen: str | None = None
) -> str | None:
    """The tool a query asks for: the first it names, does not rule out and that resolves.

    A family name without a qualifier ("Score it with TOPIQ") resolves to ``chosen`` (the
    model's reading) when that is one of the family, else to the one member that fits the
    input's reference mode when exactly one does, else to nothing."""
    spellings = tool_spellings(tools)
    kind = "FR" if reference else "NR"
    for mention in tool_mentions(text, tools):
        if mention.excluded:
            continue
        if not mention.ambiguous:
            if mention.tool is not None:
                return mention.tool
            continue
        if chosen in mention.tools:
            return chosen
        fitting = [name for name in mention.tools if spellings.kinds.get(name) == kind]
        if len(fitting) == 1:
            return fitting[0]
    return None


def excluded_tools_in(text: str, tools: Iterable[str] | Catalog) -> list[str]:
    """The tools the query rules out ("don't use NIQE", "without BRISQUE", "not PSNR"); a
    family name ruled out ("not WaDIQaM") rules out every member its qualifier leaves."""
    return list(
        dict.fromkeys(name for m in tool_mentions(text, tools) if m.excluded for name in m.tools)
    )


def masked_tools(text: str, tools: Iterable[str] | Catalog) -> str:
    """``text`` with each tool it names blanked out ("#"), so that the words of a tool's name
    ("peak signal to noise ratio", "the Multi-Scale SSIM index") name no distortion or object."""
    for mention in tool_mentions(text, tools):
        text = text[: mention.start] + "#" * (mention.end - mention.start) + text[mention.end :]
    return text


def wants_rating(text: str) -> bool:
    """Whether ``text`` asks for a rating of the image, in any of the languages known here."""
    lowered = text.lower()
    return any(_contains(lowered, term) for term in RATING_TERMS) or any(
        term in text for term in RATING_TERMS_UNSPACED
    )


def planned_subtasks(*, explicit: bool, region: bool, tool: bool) -> dict[str, bool]:
    """The paper's four flags for a technical question, from what it names: detection exactly
    when it names no distortion, analysis always, and tools: a tool (with or without a region)
    is run without selection, a region alone runs none, neither selects and runs one.  Here
    because two readers of a query alone use it: the builtin planner, and the planner's
    defaults for the flags a model's plan leaves out."""
    return {
        "distortion_detection": not explicit,
        "distortion_analysis": True,
        "tool_selection": not (region or tool),
        "tool_execution": tool or not region,
    }


def options_in(text: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for letter, body in _OPTION.findall(text):
        options.setdefault(letter, body.strip().rstrip(".;,"))
    letters = sorted(options)
    # Real option lists start at A and have no gaps; anything else is a false positive.
    if letters != [chr(ord("A") + i) for i in range(len(letters))]:
        return {}
    return options


def with_options(question: str, options: Sequence[str]) -> str:
    """``question`` with its candidate answers lettered beneath it, one per line ("A. Yes"):
    the one form every backend is shown, and the one :func:`options_in` reads back."""
    if not options:
        return question
    if len(options) > len(_LETTERS):
        raise ValueError(f"at most {len(_LETTERS)} options, not {len(options)}")
    lines = (
        f"{letter}. {' '.join(str(option).split())}"
        for letter, option in zip(_LETTERS, options, strict=False)
    )
    return question.rstrip() + "\n" + "\n".join(lines)


def parse_query(text: str, tool_names: Iterable[str] | Catalog = ()) -> ParsedQuery:
    """What ``text`` names; with ``tool_names``, the words of a tool's name are no object."""
    tools = tool_names if isinstance(tool_names, Catalog) else tuple(tool_names)
    options = options_in(text)
    stem = text
    if options:
        first = re.search(r"(?:^|\s|\()A[\.\):]\s", text)
        stem = text[: first.start()] if first else text
    lowered = text.lower()
    return ParsedQuery(
        text=text,
        distortions=tuple(categories_in(text)),
        objects=tuple(objects_in(masked_tools(stem, tools) if tools else stem)),
        tool=tool_in(text, tools),
        options=options,
        aesthetic=any(_contains(lowered, t) for t in AESTHETIC_TERMS),
        wants_rating=wants_rating(text),
    )


# -- image regions a query can name without a model to find them ------------------------------


@dataclass(frozen=True)
class Region:
    """A part of the image given by position alone: ``box`` is (left, top, right, bottom) as
    fractions of the width and height."""

    name: str
    box: tuple[float, float, float, float]

    def pixels(self, width: int, height: int) -> tuple[int, int, int, int]:
        """The box in pixels (at least one pixel each way), for ``Image.crop`` or slicing."""
        left, top, right, bottom = self.box
        x0, y0 = int(round(left * width)), int(round(top * height))
        x1, y1 = int(round(right * width)), int(round(bottom * height))
        return x0, y0, max(x1, x0 + 1), max(y1, y0 + 1)


_HALVES = {
    "left": (0.0, 0.0, 0.5, 1.0),
    "right": (0.5, 0.0, 1.0, 1.0),
    "top": (0.0, 0.0, 1.0, 0.5),
    "bottom": (0.0, 0.5, 1.0, 1.0),
}
_CENTRE = (0.25, 0.25, 0.75, 0.75)
_POSITION_SYNONYMS = {
    "upper": "top",
    "lower": "bottom",
    "center": "centre",
    "middle": "centre",
    "central": "centre",
    "leftmost": "left",
    "rightmost": "right",
}
_PART_WORDS = {
    "half",
    "side",
    "quarter",
    "quadrant",
    "corner",
    "part",
    "section",
    "area",
    "region",
    "portion",
    "edge",
    "hand",
}
_IMAGE_WORDS = {"image", "photo", "picture", "photograph", "frame", "shot", "pic", "scene"}


def _position_words(text: str) -> list[str]:
    words = re.findall(r"[a-z]+", text.lower().replace("'s", ""))
    return [_POSITION_SYNONYMS.get(word, word) for word in words]


def _region_from_words(words: list[str]) -> Region | None:
    vertical = [w for w in words if w in ("top", "bottom")]
    horizontal = [w for w in words if w in ("left", "right")]
    if vertical and horizontal:
        v, h = vertical[0], horizontal[0]
        left = 0.0 if h == "left" else 0.5
        top = 0.0 if v == "top" else 0.5
        return Region(f"{v}-{h} quarter", (left, top, left + 0.5, top + 0.5))
    if vertical or horizontal:
        side = (vertical or horizontal)[0]
        return Region(f"{side} half", _HALVES[side])
    if "centre" in words:
        return Region("centre", _CENTRE)
    return None


def region_of(name: str, query: str = "") -> Region | None:
    """The region a named object is, when it is one the offline backend can find: a side
    ("left half", "the right side"), a quarter ("top-left corner", "upper right quadrant") or the
    centre; else None ("the car", "the sky").

    A name made only of position and part words counts ("top left", "bottom half", "centre").
    A bare side or centre word ("left", "top", "middle") counts only where ``query`` uses it as a
    place ("on the left", "in the middle", "the top of the image"), so "the top of the car" or
    "is the exposure right?" name no region.
    """
    words = _position_words(name)
    if not words or any(w not in (*_HALVES, "centre", *_PART_WORDS) for w in words):
        return None
    region = _region_from_words(words)
    if region is None:
        return None
    positions = [w for w in words if w not in _PART_WORDS]
    if len(positions) >= 2 or len(words) > len(positions):
        return region
    word = positions[0]
    text = " ".join(_position_words(query))
    images = "|".join(_IMAGE_WORDS)
    place = (
        rf"\b(?:on|at|in|to|towards|from|along|near) the {word}\b"
        rf"(?! of (?:the|this|that|its|a) (?!{images})\w)"
    )
    of_image = rf"\bthe {word} of (?:the|this|that|its|a) (?:{images})\b"
    return region if re.search(place, text) or re.search(of_image, text) else None
