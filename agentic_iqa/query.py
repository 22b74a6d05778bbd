"""Reading a user's query without a language model: distortions, objects, tools, options, intent.

Deliberately simple and predictable: word lists mapped to the paper's seven distortion
categories, determiner phrases for named objects ("the car", "the person's face"), the tool
catalogue's names for explicitly requested tools, and lettered options for multiple choice.
Named image regions that need no model to find (a half, a quarter, the centre) are read by
:func:`region_of` so the offline backend can measure them on a crop.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .vocabulary import DISTORTION_TERMS

#: Words of a question about taste rather than technical quality.
AESTHETIC_TERMS = (
    "aesthetic", "aesthetically", "aesthetics", "beautiful", "beauty", "pleasing", "pretty",
    "attractive", "artistic", "art", "style", "stylish", "mood", "emotion", "emotional", "feel",
    "feeling", "feelings", "happy", "sad", "composition", "lovely", "ugly", "appealing",
    "romantic", "calm", "cozy", "elegant", "gorgeous", "nostalgic", "evoke", "evokes",
)

#: Words asking for a rating, which puts the summarizer in scoring mode (the builtin planner's
#: rule; a remote planner says so in the plan's ``answer_mode``).  English first, then a few
#: other languages' usual phrasings.
RATING_TERMS = (
    "rate", "rating", "score", "grade", "how good", "how is the quality", "overall quality",
    "quality of this", "quality of the", "assess the quality", "evaluate the quality",
    "quality level", "mos",
    # German, French, Spanish, Italian, Portuguese, Dutch
    "bewerte", "bewerten", "bewertung", "beurteile", "beurteilen", "benote",
    "wie gut ist", "wie ist die qualität", "évalue", "évaluez", "évaluer", "notez",
    "quelle est la qualité", "califica", "calificar", "evalúa", "evalúe", "evaluar", "puntúa",
    "puntuación", "qué calidad", "valuta", "valutare", "qual è la qualità", "avalie", "avaliar",
    "classifique", "qual é a qualidade", "beoordeel", "hoe goed is",
)
#: The same for scripts written without spaces between words (matched as substrings).
RATING_TERMS_UNSPACED = ("评分", "打分", "评价", "评估", "质量如何", "評価", "採点", "点数",
                         "品質は")

#: Tool names that are also ordinary words: they name the tool only when written as the
#: catalogue does ("UNIQUE") or beside a word that makes them one ("using unique", "the unique
#: score"); "What is unique about the noise?" names no tool.
ORDINARY_WORD_TOOLS = frozenset({"unique", "tres"})
_TOOL_CUE_BEFORE = ("using", "use", "with", "by", "via", "run", "running", "apply", "applying",
                    "according to", "measured by", "computed by")
_TOOL_CUE_AFTER = ("score", "scores", "metric", "metrics", "tool", "model", "index", "value",
                   "values", "rating", "measure", "says")

_NOT_OBJECTS = {
    "image", "images", "photo", "photos", "picture", "pictures", "photograph", "pic", "shot",
    "quality", "overall", "following", "options", "option", "question", "answer", "one", "level",
    "distortion", "distortions", "most", "main", "best", "worst", "type", "kind", "degree",
    "severity", "whole", "entire", "reference", "original", "tool", "score", "rating", "way",
    "visual", "first", "second", "same", "other", "image's", "photo's", "it", "scene's",
}
_STOP = {
    "in", "on", "of", "at", "is", "are", "was", "were", "be", "look", "looks", "appear",
    "appears", "seem", "seems", "and", "or", "with", "to", "for", "from", "by", "that", "this",
    "which", "than", "as", "have", "has", "affected", "suffer", "suffers", "there", "very",
    "too", "so", "how", "what", "a", "an", "the", "using", "use", "according", "compared",
}
_LETTERS = "ABCDEFGH"
_WORD = r"[a-z][a-z'\-]*"
_DETERMINER_PHRASE = re.compile(rf"\b(?:the|this|that|these|those|its)\s+({_WORD}(?:\s+{_WORD})?)")
_OPTION = re.compile(r"(?:^|\s|\()([A-H])[\.\):]\s*(.+?)(?=\s+\(?[A-H][\.\):]\s|\n|$)", re.M)


@dataclass(frozen=True)
class ParsedQuery:
    text: str
    distortions: tuple[str, ...]          # categories named anywhere in the query (ordered)
    objects: tuple[str, ...]              # named objects or regions
    tool: str | None                      # canonical name of an explicitly named tool
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
    return [(m.start(), t) for t in terms
            for m in re.finditer(rf"(?<![\w-]){re.escape(t)}(?![\w-])", text)]


def _sentence_terms(text: str) -> dict[str, list[tuple[int, str]]]:
    """Per category, (position, term) of its words, with :data:`COLOUR_QUALIFIERS` moved from
    Contrast to Color distortions in the sentences that name colour."""
    hits = {category: _term_positions(text, terms)
            for category, terms in DISTORTION_TERMS.items()}
    colour_sentences = {_sentence_at(text, position)
                        for position, _ in hits["Color distortions"]}
    moved = [(position, term) for position, term in hits["Contrast"]
             if term in COLOUR_QUALIFIERS and _sentence_at(text, position) in colour_sentences]
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
    found = [(min(position for position, _ in hits), category)
             for category, hits in _sentence_terms(lowered).items() if hits]
    return [category for _, category in sorted(found)]


def _distortion_words() -> set[str]:
    return {word for terms in DISTORTION_TERMS.values() for term in terms for word in term.split()}


def objects_in(text: str) -> list[str]:
    excluded = _NOT_OBJECTS | _distortion_words() | set(AESTHETIC_TERMS)
    objects: list[str] = []
    for match in _DETERMINER_PHRASE.finditer(text.lower()):
        words: list[str] = []
        for word in match.group(1).split():
            if word in _STOP:
                break
            words.append(word)
        words = [w for w in words if w not in excluded]
        if words:
            name = " ".join(words)
            if name not in objects:
                objects.append(name)
    return objects


def _tool_key(text: str) -> str:
    """A spelling reduced the way the catalogue looks names up: case, spaces, '-' and '_' go."""
    return re.sub(r"[\s_\-]", "", text).lower()


#: Words that say a tool is not wanted when they stand just before its name ("don't use NIQE",
#: "without BRISQUE", "not NIQE", "instead of PSNR"); a list after one ("not NIQE or BRISQUE")
#: is excluded whole.
_EXCLUDE_BEFORE = re.compile(
    r"(?:\b(?:do\s+not|don'?t|doesn'?t|never|please\s+don'?t)\s+(?:use|run|apply|rely\s+on|"
    r"trust|consider|want|need|include)|\bnot\s+(?:using|with|by|via)|\bwithout(?:\s+using)?|"
    r"\bnot|\bno|\bavoid(?:ing)?|\bexcept|\bexcluding|\bexclude|\bskip(?:ping)?|"
    r"\binstead\s+of|\brather\s+than|\bother\s+than|\bapart\s+from|\bbut\s+not|\bnor)"
    r"(?:\s+(?:the|a|any))?\s*$", re.I)
#: The same said after the name ("NIQE is not needed", "BRISQUE should not be used").
_EXCLUDE_AFTER = re.compile(
    r"^(?:'s)?(?:\s+(?:scores?|metric|tool))?\s+(?:is|are|should|must|shall|can|will)?\s*"
    r"(?:not|n't|never)\s+(?:be\s+)?(?:used|needed|wanted|applied|run|required|allowed)\b",
    re.I)
#: What may stand between a negation and the later names of a list it covers.
_LIST_JOINER = re.compile(r"\s*[,/]?\s*(?:(?:or|and|nor)\s+)?", re.I)
#: Words after an ordinary-word tool ("using unique") that keep it a tool: the end of the phrase.
_TOOL_PHRASE_END = ("to", "and", "or", "on", "for", "please", "instead", "as", "in", "then",
                    "only", "alone", "here", "too", "rather", "again")
_TOKEN = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class ToolMention:
    """One place where the query names a tool: which, where, and whether it is ruled out."""

    tool: str
    start: int
    end: int
    excluded: bool


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
    return following is None or following.group(1) in _TOOL_PHRASE_END or \
        re.match(r"\s*[,.;:!?)]", rest) is not None


def tool_mentions(text: str, tool_names: Iterable[str]) -> list[ToolMention]:
    """Every tool ``text`` names, in order, in any spelling the catalogue accepts ("Q-Align",
    "CLIP IQA", "MS SSIM", "ms_ssim"): the longest spelling at a place wins, so "MS SSIM" is
    MS-SSIM and not SSIM.  An ordinary word is a tool only when named as one; a name after
    "don't use", "without", "not" ... (or before "is not needed") is ``excluded``."""
    by_key = {_tool_key(name): name for name in tool_names}
    tokens = list(_TOKEN.finditer(text))
    mentions: list[ToolMention] = []
    index = 0
    while index < len(tokens):
        found = None
        for width in (3, 2, 1):
            group = tokens[index:index + width]
            if len(group) < width or any(
                    not re.fullmatch(r"[ \-_]?", text[a.end():b.start()])
                    for a, b in zip(group, group[1:], strict=False)):
                continue
            name = by_key.get("".join(token.group().lower() for token in group))
            start, end = group[0].start(), group[-1].end()
            if name is None or (name.lower() in ORDINARY_WORD_TOOLS
                                and not _named_as_tool(text, name, start, end)):
                continue
            found = (name, start, end, width)
            break
        if found is None:
            index += 1
            continue
        name, start, end, width = found
        mentions.append(ToolMention(name, start, end, _excluded(text, start, end, mentions)))
        index += width
    return mentions


def _excluded(text: str, start: int, end: int, earlier: list[ToolMention]) -> bool:
    """Whether the name at ``text[start:end]`` is ruled out: a negation just before it, or
    before a list it ends ("not NIQE or BRISQUE"), or a refusal just after it."""
    if _EXCLUDE_AFTER.match(text[end:]):
        return True
    if earlier and earlier[-1].excluded and _LIST_JOINER.fullmatch(text[earlier[-1].end:start]):
        return True  # the list goes on from an excluded name
    return _EXCLUDE_BEFORE.search(text[:start]) is not None


def tool_in(text: str, tool_names: Iterable[str]) -> str | None:
    """The tool the query asks for as a tool: the first it names and does not rule out."""
    return next((m.tool for m in tool_mentions(text, tool_names) if not m.excluded), None)


def excluded_tools_in(text: str, tool_names: Iterable[str]) -> list[str]:
    """The tools the query rules out ("don't use NIQE", "without BRISQUE", "not PSNR")."""
    return list(dict.fromkeys(m.tool for m in tool_mentions(text, tool_names) if m.excluded))


def wants_rating(text: str) -> bool:
    """Whether ``text`` asks for a rating of the image, in any of the languages known here."""
    lowered = text.lower()
    return (any(_contains(lowered, term) for term in RATING_TERMS)
            or any(term in text for term in RATING_TERMS_UNSPACED))


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
    lines = (f"{letter}. {' '.join(str(option).split())}"
             for letter, option in zip(_LETTERS, options, strict=False))
    return question.rstrip() + "\n" + "\n".join(lines)


def parse_query(text: str, tool_names: Iterable[str] = ()) -> ParsedQuery:
    options = options_in(text)
    stem = text
    if options:
        first = re.search(r"(?:^|\s|\()A[\.\):]\s", text)
        stem = text[: first.start()] if first else text
    lowered = text.lower()
    return ParsedQuery(
        text=text,
        distortions=tuple(categories_in(text)),
        objects=tuple(objects_in(stem)),
        tool=tool_in(text, tool_names),
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


_HALVES = {"left": (0.0, 0.0, 0.5, 1.0), "right": (0.5, 0.0, 1.0, 1.0),
           "top": (0.0, 0.0, 1.0, 0.5), "bottom": (0.0, 0.5, 1.0, 1.0)}
_CENTRE = (0.25, 0.25, 0.75, 0.75)
_POSITION_SYNONYMS = {"upper": "top", "lower": "bottom", "center": "centre", "middle": "centre",
                      "central": "centre", "leftmost": "left", "rightmost": "right"}
_PART_WORDS = {"half", "side", "quarter", "quadrant", "corner", "part", "section", "area",
               "region", "portion", "edge", "hand"}
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
    place = (rf"\b(?:on|at|in|to|towards|from|along|near) the {word}\b"
             rf"(?! of (?:the|this|that|its|a) (?!{images})\w)")
    of_image = rf"\bthe {word} of (?:the|this|that|its|a) (?:{images})\b"
    return region if re.search(place, text) or re.search(of_image, text) else None
