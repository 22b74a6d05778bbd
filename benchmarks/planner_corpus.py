"""Does the agent read a planner reply as the plan a human derives from the query?

Each reply of the graded corpus (``tests/agentic_iqa/agents/planner_corpus.py``: GPT-4o, Claude and
Qwen2.5-VL styles, fences, prose, comments and the shape variants of issue 29; tool aliases,
family names, ambiguous words, content questions and replies missing fields of issue 39) is
read twice: as the model wrote it (``extract_json_object`` + ``PlannerOutput.model_validate``,
no reconciliation) and as the agent plans (``make_plan``, reconciliation with the input
included).  Also printed: the builtin planner's plan of each query (no reply: the query alone).
Printed: the share of plans equal to the human's on every graded field, the agreement per field,
per style and per tag, the plans reconciliation made better and worse than the model's own, and
each plan that differs.  No model, network or image is needed.

    python benchmarks/planner_corpus.py

Goal (issue 29): at least 90 % of plans as a human derives them; (issue 39) none wrong among
the entries tagged "issue39".
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agentic_iqa.agents.jsonreply import InvalidReply, extract_json_object  # noqa: E402
from agentic_iqa.agents.planner import make_plan  # noqa: E402
from agentic_iqa.state import PlannerOutput  # noqa: E402
from agentic_iqa.vlm.builtin import BuiltinClient  # noqa: E402
from iqa_tools import load_catalog  # noqa: E402
from tests.agentic_iqa.agents.planner_corpus import (  # noqa: E402
    CORPUS,
    FIELDS,
    PlannerReply,
    differences,
    read,
)


def as_written(item: PlannerReply) -> PlannerOutput | None:
    """The model's own plan: read and validated, not reconciled with the input."""
    try:
        return PlannerOutput.model_validate(extract_json_object(item.reply))
    except (InvalidReply, ValueError):
        return None


def builtin(item: PlannerReply, tools: list[str]) -> PlannerOutput:
    """The builtin planner's plan of the item's query: the query alone, no reply read."""
    return make_plan(
        BuiltinClient(), item.query, "image.png", "reference.png" if item.reference else None, tools
    )


def share(right: int, total: int) -> str:
    return f"{right}/{total} ({right / total:.1%})" if total else "-"


def main() -> None:
    logging.disable(logging.WARNING)
    tools = [spec.name for spec in load_catalog()]
    agent = {item.name: differences(item, read(item, tools)) for item in CORPUS}
    own = {item.name: differences(item, as_written(item)) for item in CORPUS}
    total = len(CORPUS)
    print(f"planner corpus: {total} graded replies")
    print(
        f"  plans as the human's, the agent's reading:  "
        f"{share(sum(not d for d in agent.values()), total)}"
    )
    print(
        f"  plans as the human's, the model's own plan: "
        f"{share(sum(not d for d in own.values()), total)}"
    )
    alone = {item.name: differences(item, builtin(item, tools)) for item in CORPUS}
    print(
        f"  plans as the human's, the builtin planner (the query alone): "
        f"{share(sum(not d for d in alone.values()), total)}"
    )
    better = [name for name in agent if own[name] and not agent[name]]
    worse = [name for name in agent if agent[name] and not own[name]]
    print(
        f"  reconciliation made {len(better)} better and {len(worse)} worse"
        + (f" ({', '.join(worse)})" if worse else "")
    )

    print("\nagreement per field (agent / model's own):")
    for field in FIELDS:
        mine = sum(field not in d and "plan" not in d for d in agent.values())
        theirs = sum(field not in d and "plan" not in d for d in own.values())
        print(f"  {field:<16} {share(mine, total):<16} {share(theirs, total)}")

    print("\nper style and tag (agent):")
    groups: Counter[str] = Counter()
    right: Counter[str] = Counter()
    for item in CORPUS:
        for group in (f"style {item.style}", *(f"tag {tag}" for tag in item.tags)):
            groups[group] += 1
            right[group] += not agent[item.name]
    for group in sorted(groups):
        print(f"  {group:<24} {share(right[group], groups[group])}")

    print("\nplans that differ from the human's (field: agent's, human's):")
    for name, found in agent.items():
        if found:
            print(f"  {name}: " + "; ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in found.items()))


if __name__ == "__main__":
    main()
