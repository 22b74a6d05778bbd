"""Read what a query asks for: a rating, a choice among lettered options, which subtasks.

:func:`parse_query` puts every reading of the package together in one :class:`ParsedQuery`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from iqa_tools.catalog import Catalog

from .distortions import categories_in
from .objects import AESTHETIC_TERMS, objects_in
from .tools import masked_tools, tool_in

#: The longest query anyone may ask, and the longest option a question may offer, in
#: characters: far beyond any benchmark's question, and short enough that reading one costs
#: nothing (a query of a megabyte took minutes of CPU in the question readers and a gigabyte
#: of memory).  A manifest row, ``agentic-iqa assess -q`` and :func:`agentic_iqa.assess` all
#: hold to them.
MAX_QUERY_CHARS = 4_000
MAX_OPTION_CHARS = 500


class QueryTooLong(ValueError):
    """A query longer than :data:`MAX_QUERY_CHARS`: refused before anything reads it."""


def check_query_length(query: str) -> None:
    """Raise :class:`QueryTooLong` when ``query`` is longer than :data:`MAX_QUERY_CHARS`."""
    if len(query) > MAX_QUERY_CHARS:
        raise QueryTooLong(
            f"the query is {len(query):,} characters long: at most {MAX_QUERY_CHARS:,}"
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


_LETTERS = "ABCDEFGH"


_OPTION = re.compile(r"(?:^|\s|\()([A-H])[\.\):]\s*(.+?)(?=\s+\(?[A-H][\.\):]\s|\n|$)", re.M)


@dataclass(frozen=True)
class ParsedQuery:
    """Hold what a query names, as :func:`parse_query` reads it."""

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


def wants_rating(text: str) -> bool:
    """Tell whether ``text`` asks for a rating of the image, in any of the languages known here."""
    lowered = text.lower()
    return any(_contains(lowered, term) for term in RATING_TERMS) or any(
        term in text for term in RATING_TERMS_UNSPACED
    )


def planned_subtasks(*, explicit: bool, region: bool, tool: bool) -> dict[str, bool]:
    """Return the paper's four flags for a technical question, from what it names: detection exactly
    when it names no distortion, analysis always, and tools: a tool (with or without a region) is
    run without selection, a region alone runs none, neither selects and runs one.  Here because
    two readers of a query alone use it: the builtin planner, and the planner's defaults for the
    flags a model's plan leaves out."""
    return {
        "distortion_detection": not explicit,
        "distortion_analysis": True,
        "tool_selection": not (region or tool),
        "tool_execution": tool or not region,
    }


def options_in(text: str) -> dict[str, str]:
    """Return the lettered options of a multiple-choice query (letter -> text), or {}."""
    options: dict[str, str] = {}
    for letter, body in _OPTION.findall(text):
        options.setdefault(letter, body.strip().rstrip(".;,"))
    letters = sorted(options)
    # Real option lists start at A and have no gaps; anything else is a false positive.
    if letters != [chr(ord("A") + i) for i in range(len(letters))]:
        return {}
    return options


def with_options(question: str, options: Sequence[str]) -> str:
    """Return ``question`` with its candidate answers lettered beneath it, one per line ("A. Yes"):
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
    """Return what ``text`` names; with ``tool_names``, the words of a tool's name are no object."""
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
