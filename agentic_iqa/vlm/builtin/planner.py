"""The builtin planner: the paper's planning rules applied to a parsed query.

It plans from the query alone, so it reads the query as :mod:`agentic_iqa.query` does: a tool by
any catalogue spelling, a family name ("TOPIQ") by a qualifier beside it or else by the
reference mode; distortions by their words, an ambiguous word ("dark", "colour") only where the
wording makes it one ("is it dark?", not "the dark car" nor "what colour is the car?").  A
question about what the picture shows names no distortion: it gets the plan of any question
that names none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ...query import distortion_words, parse_query, planned_subtasks, required_tool_in


def plan(
    query: str,
    has_reference: bool,
    tool_names: Iterable[str] = (),
    replan_reason: str | None = None,
) -> dict[str, Any]:
    names = tuple(tool_names)
    parsed = parse_query(query, names)
    distortions = distortion_words(query, names).read
    tool = required_tool_in(query, names, reference=has_reference)
    objects = list(parsed.objects)
    reference_mode = "Full-Reference" if has_reference else "No-Reference"

    if parsed.aesthetic and not distortions and tool is None:
        return {
            "answer_mode": "explanation",
            "query_type": "Other",
            "query_scope": objects or "Global",
            "distortion_source": "Inferred",
            "distortions": None,
            "reference_mode": reference_mode,
            "required_tool": None,
            "plan": {
                "distortion_detection": False,
                "distortion_analysis": False,
                "tool_selection": False,
                "tool_execution": False,
            },
        }

    explicit = bool(distortions)
    flags = planned_subtasks(explicit=explicit, region=bool(objects), tool=tool is not None)
    if replan_reason and re.search(r"tool|score", replan_reason, re.I):
        # The summarizer lacked measurements: measure this time.
        flags.update(tool_execution=True, tool_selection=tool is None)
    return {
        "answer_mode": (
            "scoring" if parsed.wants_rating and not parsed.is_multiple_choice else "explanation"
        ),
        "query_type": "IQA",
        "query_scope": objects or "Global",
        "distortion_source": "Explicit" if explicit else "Inferred",
        "distortions": (
            {key: list(distortions) for key in objects or ["Global"]} if explicit else None
        ),
        "reference_mode": reference_mode,
        "required_tool": tool,
        "plan": flags,
    }
