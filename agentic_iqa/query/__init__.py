"""Read a user's query without a language model: distortions, objects, tools, options, intent.

Deliberately simple and predictable: word lists mapped to the paper's seven distortion
categories (:mod:`.distortions`), determiner phrases for named objects ("the car", "the
person's face": :mod:`.objects`), the tool catalogue's names and aliases for explicitly
requested tools (:mod:`.tools`), and lettered options for multiple choice and the wish for a
rating (:mod:`.intent`).  What a word may mean either way is said so: a distortion word that
may describe the content ("the dark car", "what colour is the car?") is only *possibly* a
distortion (:func:`distortion_words`), and a family name ("WaDIQaM") is ambiguous until a
qualifier beside it ("no-reference") decides (:func:`tool_mentions`); a model's reading
decides the rest.  Named image regions that need no model to find (a half, a quarter, the
centre) are read by :func:`region_of` (:mod:`.regions`) so the offline backend can measure
them on a crop.
"""

from .distortions import (
    AMBIGUOUS_DISTORTION_TERMS,
    COLOUR_QUALIFIERS,
    DistortionWords,
    categories_in,
    content_questions,
    distortion_words,
)
from .intent import (
    MAX_OPTION_CHARS,
    MAX_QUERY_CHARS,
    RATING_TERMS,
    RATING_TERMS_UNSPACED,
    ParsedQuery,
    QueryTooLong,
    check_query_length,
    options_in,
    parse_query,
    planned_subtasks,
    wants_rating,
    with_options,
)
from .objects import AESTHETIC_TERMS, fold_object_name, objects_in
from .regions import Region, region_of
from .tools import (
    ORDINARY_WORD_TOOLS,
    VARIANT_WORDS,
    ToolMention,
    ToolSpellings,
    catalogue_tool,
    excluded_tools_in,
    masked_tools,
    required_tool_in,
    tool_in,
    tool_mentions,
    tool_spellings,
    uncatalogued_tools_in,
    variant_end,
    variant_start,
)

__all__ = [
    "AESTHETIC_TERMS",
    "MAX_OPTION_CHARS",
    "MAX_QUERY_CHARS",
    "AMBIGUOUS_DISTORTION_TERMS",
    "COLOUR_QUALIFIERS",
    "ORDINARY_WORD_TOOLS",
    "RATING_TERMS",
    "RATING_TERMS_UNSPACED",
    "DistortionWords",
    "ParsedQuery",
    "QueryTooLong",
    "Region",
    "ToolMention",
    "ToolSpellings",
    "VARIANT_WORDS",
    "catalogue_tool",
    "categories_in",
    "check_query_length",
    "content_questions",
    "distortion_words",
    "excluded_tools_in",
    "fold_object_name",
    "masked_tools",
    "objects_in",
    "options_in",
    "parse_query",
    "planned_subtasks",
    "region_of",
    "required_tool_in",
    "tool_in",
    "tool_mentions",
    "tool_spellings",
    "uncatalogued_tools_in",
    "variant_end",
    "variant_start",
    "wants_rating",
    "with_options",
]
