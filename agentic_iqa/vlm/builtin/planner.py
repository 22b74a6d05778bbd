"""The builtin planner: the paper's planning rules applied to a parsed query."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ...query import parse_query


def plan(query: str, has_reference: bool, tool_names: Iterable[str] = (),
         replan_reason: str | None = None) -> dict[str, Any]:
    names = list(tool_names)
    parsed = parse_query(query, names)
    tool_words = {n.lower() for n in names} | {n.lower().replace("_", "-") for n in names}
    objects = [o for o in parsed.objects if o not in tool_words]
    reference_mode = "Full-Reference" if has_reference else "No-Reference"

    if parsed.aesthetic and not parsed.distortions and parsed.tool is None:
        return {
            "answer_mode": "explanation",
            "query_type": "Other", "query_scope": objects or "Global",
            "distortion_source": "Inferred", "distortions": None,
            "reference_mode": reference_mode, "required_tool": None,
            "plan": {"distortion_detection": False, "distortion_analysis": False,
                     "tool_selection": False, "tool_execution": False},
        }

    explicit = bool(parsed.distortions)
    scope_keys = objects or ["Global"]
    region, tool = bool(objects), parsed.tool
    if region and tool:
        selection, execution = False, True
    elif region:
        selection, execution = False, False
    elif tool:
        selection, execution = False, True
    else:
        selection, execution = True, True
    if replan_reason and re.search(r"tool|score", replan_reason, re.I):
        # The summarizer lacked measurements: measure this time.
        execution = True
        selection = tool is None
    return {
        "answer_mode": ("scoring" if parsed.wants_rating and not parsed.is_multiple_choice
                        else "explanation"),
        "query_type": "IQA",
        "query_scope": objects or "Global",
        "distortion_source": "Explicit" if explicit else "Inferred",
        "distortions": {key: list(parsed.distortions) for key in scope_keys} if explicit else None,
        "reference_mode": reference_mode,
        "required_tool": tool,
        "plan": {"distortion_detection": not explicit, "distortion_analysis": True,
                 "tool_selection": selection, "tool_execution": execution},
    }
