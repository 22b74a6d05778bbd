"""Read the IQA tools a query names, asks for or rules out, in the catalogue's spellings.

A family name ("WaDIQaM") is ambiguous until a qualifier beside it ("no-reference") decides
(:func:`tool_mentions`); a tool name that is also an ordinary word names the tool only where
written as one.  A catalogue name inside a longer name ("IL-NIQE", "LPIPS-VGG", "CLIP-IQA+",
"MUSIQ-AVA", "NIQE v2") names a tool the catalogue lacks, never the shorter one
(:func:`variant_end`, :func:`variant_start`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from iqa_tools.catalog import Catalog, UnknownToolError, load_catalog

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


#: Words that, beside a tool's name, name one of its variants: a backbone, a training set, an
#: implementation ("LPIPS-VGG", "LPIPS VGG", "MUSIQ (AVA)", "NIQE-matlab"); the one a catalogue
#: tool is (MUSIQ is trained on KonIQ) is an alias of it there.
VARIANT_WORDS = frozenset(
    {
        "alex",
        "alexnet",
        "vgg",
        "vgg16",
        "vgg19",
        "squeeze",
        "squeezenet",
        "resnet",
        "resnet50",
        "vit",
        "swin",
        "koniq",
        "koniq10k",
        "ava",
        "spaq",
        "kadid",
        "kadid10k",
        "pipal",
        "livec",
        "flive",
        "paq2piq",
        "tid",
        "tid2013",
        "csiq",
        "matlab",
    }
)


#: Ordinary words that name a variant only glued to the name ("LIQE-mix", "MUSIQ-live",
#: "CLIPIQA-lite"): a space apart they are English ("NIQE plus BRISQUE").
_GLUED_VARIANT_WORDS = frozenset({"live", "mix", "plus", "lite", "large", "small", "base"})


#: The separators that glue an affix to a name into one longer name ("IL-NIQE", "NIQE_M").
_GLUE = frozenset({"-", "_", "\u2010", "\u2011"})


#: A version after a name ("NIQE v2", "LPIPS v0.0", "NIQE version 2"); a bare number may be a
#: score ("NIQE 4.2"), so it is none.
_VERSION_AFTER = re.compile(r"\s+v(?:er(?:sion)?)?\.?\s?\d+(?:\.\d+)*(?!\w)", re.I)


#: Short words that may stand glued to a name and leave it the tool's ("NIQE-or-BRISQUE").
_GLUED_WORDS = frozenset({"or", "and", "to", "of", "in", "on", "as", "by", "vs", "is", "it"})

#: What may stand between the words of one tool's name ("MS SSIM", "Multi-Scale SSIM",
#: "TOPIQ (full-reference)", "blind/referenceless"), never a comma or a full stop.
_NAME_JOINER = re.compile(r"[ \t\-_/()]{0,3}")


#: The most words a catalogue spelling has ("unified no-reference image quality and ...").
_MAX_NAME_WORDS = 10


#: A word near a family name that says which variant is meant: "full-reference", "FR" ... or
#: "no-reference", "NR", "blind" ...
_QUALIFIER_NAMES = (
    r"full[\s-]?reference|reference[\s-]based|no[\s-]?reference|non[\s-]?reference|"
    r"reference[\s-]?free|referenceless|blind|fr|nr"
)
_QUALIFIER = r"(?<![\w-])(?P<q>" + _QUALIFIER_NAMES + r")(?![\w-])"


#: A qualifier just before the family name: "full-reference TOPIQ", "the no-reference version
#: of WaDIQaM", "blind WaDIQaM".
_QUALIFIER_BEFORE = re.compile(
    _QUALIFIER + r"(?:\s+(?:version|variant|form|model|flavou?r)\s+of)?\s+(?:the\s+)?$", re.I
)


#: A qualifier just after it: "TOPIQ (full-reference)", "TOPIQ, the full-reference one",
#: "WaDIQaM in its no-reference form", "TOPIQ's FR variant".
_QUALIFIER_AFTER = re.compile(
    r"^(?:'s)?[\s,:(\-\u2013\u2014]*(?:(?:the|its|in|a|an|as|i\.e\.)\s+){0,3}"
    r"(?<!\w)(?P<q>" + _QUALIFIER_NAMES + r")(?![\w-])",
    re.I,
)


#: English words of two letters: before a tool's name, a space apart, no acronym of a longer
#: name ("is NIQE", "an SSIM score"; "IL NIQE" is one).
_TWO_LETTER_WORDS = frozenset(
    {
        "ah", "am", "an", "as", "at", "be", "by", "do", "go", "he", "hi", "if", "in", "is",
        "it", "me", "my", "no", "of", "oh", "ok", "on", "or", "so", "to", "up", "us", "we",
        "ye", "vs", "eg", "ie", "fr", "nr", "ai", "hd", "tv", "pc", "id",
    }
)  # fmt: skip


#: A qualifier glued before a name ("NR-NIQE", "FR-TOPIQ"): no other tool's name.
_QUALIFIER_GLUED_BEFORE = re.compile(
    r"(?<![\w-])(?:" + _QUALIFIER_NAMES + r")[-_\u2010\u2011]$", re.I
)


def _spelling_key(text: str) -> str:
    """Return a spelling reduced the way the catalogue looks names up: letters and digits, lower
    case."""
    return re.sub(r"[\W_]", "", text).lower()


@dataclass(frozen=True)
class ToolSpellings:
    """What a query may call the tools: each spelling's key (:func:`_spelling_key`) and the tool
    it names, each family name's key and its members, and each tool's type ("FR", "NR")."""

    tools: dict[str, str]
    families: dict[str, tuple[str, ...]]
    kinds: dict[str, str]


def tool_spellings(tools: Iterable[str] | Catalog) -> ToolSpellings:
    """Return the spellings of ``tools``: a catalogue's own (names, pyiqa names, display names,
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
    whose qualifier leaves no member ("TOPIQ NR") names a tool the catalogue lacks: no tools,
    and so does a catalogue name inside a longer name ("IL-NIQE", "CLIP-IQA+"); ``unknown``
    is then the name as written.
    """

    tools: tuple[str, ...]
    start: int
    end: int
    excluded: bool
    ambiguous: bool = False
    unknown: str | None = None

    @property
    def tool(self) -> str | None:
        """Return the tool named for certain, else None."""
        return self.tools[0] if len(self.tools) == 1 and not self.ambiguous else None


def _named_as_tool(text: str, name: str, start: int, end: int) -> bool:
    """Tell whether the ordinary-word spelling ``text[start:end]`` names the tool ``name`` (see
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


def _joined(text: str, a: re.Match[str], b: re.Match[str]) -> bool:
    """Tell whether tokens ``a`` and ``b`` may be words of one name: :data:`_NAME_JOINER` between
    them, or the point of a version number ("LPIPS v0.1")."""
    gap = text[a.end() : b.start()]
    return _NAME_JOINER.fullmatch(gap) is not None or (
        gap == "." and a.group()[-1].isdigit() and b.group()[0].isdigit()
    )


def _affix_names_variant(word: str, text: str) -> bool:
    """Tell whether ``word``, glued to a tool's name ("IL-NIQE", "LPIPS-VGG", "NIQE-M",
    "NIMA-vgg16"), makes it the name of another tool: a variant word (:data:`VARIANT_WORDS`,
    :data:`_GLUED_VARIANT_WORDS`), one with a digit, one or two letters, or an acronym in
    capitals; not an ordinary word ("NIQE-based", "SSIM-like"), a qualifier ("CKDN-FR") nor a
    short word that joins ("NIQE-or-BRISQUE")."""
    lowered = word.lower()
    if lowered in _GLUED_WORDS or lowered in ("fr", "nr"):
        return False
    if lowered in VARIANT_WORDS or lowered in _GLUED_VARIANT_WORDS or len(word) <= 2:
        return True
    return any(ch.isdigit() for ch in word) or (word.isupper() and not text.isupper())


def variant_start(
    text: str, tokens: list[re.Match[str]], index: int, earlier: list[ToolMention]
) -> int | None:
    """Return where a longer name begins that the tool's name at ``tokens[index]`` ends: an affix
    glued before it ("IL-NIQE", "CW-SSIM", "il_niqe") or a two-letter acronym a space before it
    ("IL NIQE", "cw ssim"), not an English word ("an NIQE score"), a qualifier ("NR-NIQE",
    "FR TOPIQ") or a word of an earlier name; else None."""
    if index == 0 or (earlier and earlier[-1].end > tokens[index - 1].start()):
        return None
    before, start = tokens[index - 1], tokens[index].start()
    gap, word = text[before.end() : start], before.group()
    if _QUALIFIER_GLUED_BEFORE.search(text[:start]) or _spelling_key(word) in ("fr", "nr"):
        return None
    if gap in _GLUE and _affix_names_variant(word, text):
        return before.start()
    if gap == " " and len(word) == 2 and word.isalpha() and word.lower() not in _TWO_LETTER_WORDS:
        return before.start()
    return None


def variant_end(
    text: str, tokens: list[re.Match[str]], index: int, end: int, spellings: ToolSpellings
) -> int | None:
    """Return where a longer name ends that the tool's name ending at ``end`` begins (its next
    token is ``tokens[index]``): a plus ("CLIP-IQA+", "DBCNN++"), an affix glued after it
    ("LPIPS-VGG", "MUSIQ-ava", "NIQE-M", "NIQE-v2"), a version ("NIQE v2", "LPIPS v0.0") or a
    variant word a space or a bracket after it ("LPIPS VGG", "MUSIQ (AVA)"); not a qualifier
    ("TOPIQ-FR") nor another tool's name ("NIQE-BRISQUE"); else None."""
    plus = re.match(r"\++(?![A-Za-z0-9])", text[end:])
    if plus:
        return end + plus.end()
    if _QUALIFIER_AFTER.match(text[end:]):
        return None
    version = _VERSION_AFTER.match(text[end:])
    if version:
        return end + version.end()
    if index >= len(tokens):
        return None
    after = tokens[index]
    gap, word = text[end : after.start()], after.group()
    if _spelling_at(text, tokens, index, spellings) is not None:
        return None
    if gap in _GLUE and _affix_names_variant(word, text):
        longer = variant_end(text, tokens, index + 1, after.end(), spellings)
        return longer if longer is not None else after.end()
    if gap in (" ", " (", "(") and word.lower() in VARIANT_WORDS:
        close = re.match(r"\)", text[after.end() :]) if "(" in gap else None
        return after.end() + (1 if close else 0)
    return None


def _spelling_at(
    text: str, tokens: list[re.Match[str]], index: int, spellings: ToolSpellings
) -> tuple[str, int, int] | None:
    """Return the longest catalogue spelling starting at ``tokens[index]``: (key, words, end)."""
    for width in range(min(_MAX_NAME_WORDS, len(tokens) - index), 0, -1):
        group = tokens[index : index + width]
        if any(not _joined(text, a, b) for a, b in zip(group, group[1:], strict=False)):
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
    """Return a family name's members, whether it stays ambiguous, and its span with the qualifier
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
    "not" ... (or before "is not needed") is ``excluded``.  A catalogue name inside a longer
    name (:func:`variant_start`, :func:`variant_end`: "IL-NIQE", "LPIPS-VGG+", "NIQE v2") is
    the name of a tool the catalogue lacks, unless that longer name is itself a catalogue
    spelling ("MS-SSIM", "MUSIQ-KonIQ")."""
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
        longer_start = variant_start(text, tokens, index, mentions)
        longer_end = variant_end(text, tokens, index + width, end, spellings)
        if longer_start is not None or longer_end is not None:
            start = start if longer_start is None else longer_start
            end = end if longer_end is None else longer_end
            named, ambiguous, unknown = (), False, text[start:end]
        elif key in spellings.tools:
            named, ambiguous, unknown = (spellings.tools[key],), False, None
        else:
            family = text[start:end]
            named, ambiguous, start, end = _family_mention(
                text, start, end, spellings.families[key], spellings.kinds
            )
            held = {spellings.kinds.get(name) for name in spellings.families[key]}
            # "the NR version of TOPIQ": TOPIQ (no-reference)
            kind = " (full-reference)" if held == {"NR"} else " (no-reference)"
            unknown = None if named else family + kind
        mentions.append(
            ToolMention(
                named, start, end, _excluded(text, start, end, mentions), ambiguous, unknown
            )
        )
        index += width
        while index < len(tokens) and tokens[index].start() < end:
            index += 1  # past a qualifier read with the name
    return mentions


def _excluded(text: str, start: int, end: int, earlier: list[ToolMention]) -> bool:
    """Tell whether the name at ``text[start:end]`` is ruled out: a negation just before it, or
    before a list it ends ("not NIQE or BRISQUE"), or a refusal just after it."""
    if _EXCLUDE_AFTER.match(text[end:]):
        return True
    if earlier and earlier[-1].excluded and _LIST_JOINER.fullmatch(text[earlier[-1].end : start]):
        return True  # the list goes on from an excluded name
    return _EXCLUDE_BEFORE.search(text[:start]) is not None


def tool_in(text: str, tools: Iterable[str] | Catalog) -> str | None:
    """Return the tool the text names for certain as a tool: the first it names, unambiguously, and
    does not rule out."""
    return next(
        (m.tool for m in tool_mentions(text, tools) if not m.excluded and m.tool is not None), None
    )


def required_tool_in(
    text: str, tools: Iterable[str] | Catalog, *, reference: bool, chosen: str | None = None
) -> str | None:
    """Return the tool a query asks for: the first it names, does not rule out and that resolves.

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
    """Return the tools the query rules out ("don't use NIQE", "without BRISQUE", "not PSNR"); a
    family name ruled out ("not WaDIQaM") rules out every member its qualifier leaves."""
    return list(
        dict.fromkeys(name for m in tool_mentions(text, tools) if m.excluded for name in m.tools)
    )


def uncatalogued_tools_in(
    text: str, tools: Iterable[str] | Catalog, also: Iterable[str] = ()
) -> list[str]:
    """Return the tools the text names that the catalogue lacks, as written ("IL-NIQE",
    "LPIPS-VGG+", "TOPIQ NR"), once each (by :func:`_spelling_key`), in order; not those it rules
    out ("not IL-NIQE").  ``also``: names a model gave tools the catalogue lacks ("DeepIQA-X"),
    kept where the text names them too, as a whole word and not ruled out."""
    found = {
        _spelling_key(m.unknown): (m.start, m.unknown)
        for m in reversed(tool_mentions(text, tools))
        if m.unknown and not m.excluded
    }
    for name in also:
        key = _spelling_key(name)
        if not key or key in found:
            continue
        at = re.search(rf"(?<![\w-]){re.escape(name.strip())}(?![\w-]|\+)", text, re.I)
        if at and not (
            _EXCLUDE_BEFORE.search(text[: at.start()]) or _EXCLUDE_AFTER.match(text[at.end() :])
        ):
            found[key] = (at.start(), at.group())
    return [name for _, name in sorted(found.values())]


def catalogue_tool(value: str, catalog: Catalog) -> str | None:
    """Return the catalogue's tool that a model's field names ("ms_ssim", "the NIQE metric"), or
    None: none named, or first a tool the catalogue lacks ("IL-NIQE", "CLIP-IQA+"), which is
    never read as the catalogue tool inside its name."""
    mentions = [m for m in tool_mentions(value, catalog) if not m.excluded]
    if mentions and mentions[0].unknown is not None:
        return None
    try:
        return catalog.resolve(value.strip())
    except UnknownToolError:
        return tool_in(value, catalog)


def masked_tools(text: str, tools: Iterable[str] | Catalog) -> str:
    """Return ``text`` with each tool it names blanked out ("#"), so that the words of a tool's name
    ("peak signal to noise ratio", "the Multi-Scale SSIM index") name no distortion or object."""
    for mention in tool_mentions(text, tools):
        text = text[: mention.start] + "#" * (mention.end - mention.start) + text[mention.end :]
    return text
