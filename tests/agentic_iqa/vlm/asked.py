"""Read what a yes/no question asks to be absent, through the builtin's public question reader."""

from __future__ import annotations

from agentic_iqa.vlm.builtin.yes_no import distortions_asked


def positive_categories(query: str) -> list[str]:
    """Return the categories the query asks to be *absent* by a positive word ("sharp", "in focus",
    "vivid", "well exposed") that is not itself negated ("not sharp" asks for blur)."""
    found: list[str] = []
    for asked in distortions_asked(query):
        if asked.positive:
            found += [c for c in asked.categories if c not in found]
    return found


def absence_asked(query: str) -> list[str]:
    """Return the categories a yes/no question asks to be *absent*, so that Yes means "not
    visible", read by :mod:`agentic_iqa.vlm.builtin.yes_no`: "sharp", "free of noise", "clear of
    noise", "noise-free", "Is noise absent?", "no grain", "not blurry"; while "not sharp",
    "unsharp", "lacks contrast" and "not free of noise" ask whether the defect is there."""
    found: list[str] = []
    for asked in distortions_asked(query):
        if not asked.present:
            found += [c for c in asked.categories if c not in found]
    return found
