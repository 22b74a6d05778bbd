"""A tool's own score as its headline: its direction, the sign that makes higher better, and
where the paper's [1, 5] mapping of it runs the wrong way over a job's photos.

Papers and pyiqa quote a metric's correlation with MOS on the metric's own score; the [1, 5]
score is the paper's Table 5 logistic of it, which for some tools (BRISQUE below raw 5.6) is not
monotone, so its ranks are not the metric's.  The convention used everywhere (reports, lists,
comparisons, paper tables) is :data:`CONVENTION`: correlations of a tool are computed on its raw
score multiplied by :func:`sign` (-1 for a lower-is-better tool), so BRISQUE's SRCC of -0.27 is
reported as 0.27 and its bootstrap intervals and paired differences keep their meaning (higher
is better for every line, the agent's included).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: The one convention, said in reports, tables and docs.
CONVENTION = (
    "a tool's SRCC, PLCC and KRCC are computed on its own (raw) score, sign-corrected "
    "so that higher is better: the score is negated for a lower-is-better tool "
    "(BRISQUE, NIQE), so its correlations are pyiqa's with the sign flipped; "
    "[1,5]: the same on the score mapped by the paper's logistic"
)
#: Short form for a table's caption or a list's footnote.
CONVENTION_SHORT = (
    "a tool is scored on its own (raw) score, sign-corrected so that higher is "
    "better (a lower-is-better tool's score negated)"
)


@dataclass(frozen=True)
class ToolFacts:
    """What a report needs of a tool's catalogue entry: its direction and its [1, 5] mapping
    (None where the tool is not in the catalogue: a CSV from elsewhere)."""

    lower_is_better: bool | None
    form: str | None = None
    params: tuple[tuple[str, float], ...] = ()
    source: str | None = None


def sign(facts: ToolFacts) -> float:
    """-1 for a lower-is-better tool, else +1 (an unknown tool's score is taken as given)."""
    return -1.0 if facts.lower_is_better else 1.0


def direction(facts: ToolFacts) -> str:
    """ "lower is better", "higher is better", or "direction unknown"."""
    if facts.lower_is_better is None:
        return "direction unknown"
    return "lower is better" if facts.lower_is_better else "higher is better"


@cache
def _catalog(path: Any, overrides: tuple[Any, ...]) -> Any:
    """The catalogue under these settings, read once per process for each."""
    from iqa_tools.catalog import load_catalog

    return load_catalog(path, list(overrides))


def tool_facts(names: Iterable[str]) -> dict[str, ToolFacts]:
    """Each name's facts from the configured catalogue (any spelling it accepts);
    ``ToolFacts(None)`` for a name it does not know."""
    from iqa_tools.errors import UnknownToolError

    from ..config import load_tool_settings

    settings = load_tool_settings()
    catalog = _catalog(settings.metadata_path, tuple(settings.metadata_overrides))
    found: dict[str, ToolFacts] = {}
    for name in names:
        try:
            spec = catalog.get(name)
        except UnknownToolError:
            found[name] = ToolFacts(None)
            continue
        found[name] = ToolFacts(
            spec.lower_is_better,
            spec.normalization.form,
            tuple(sorted(spec.normalization.params.items())),
            spec.normalization.source,
        )
    return found


def mapping_check(name: str, facts: ToolFacts, raw: Sequence[float] | np.ndarray) -> dict[str, Any]:
    """Whether the tool's [1, 5] mapping is monotone (in its direction) over the range of
    ``raw``, the job's own raw scores: ``monotone`` (None when it cannot be told), the range,
    ``items`` in the wrong-way spans and a ``warning`` naming them."""
    import numpy as np

    from iqa_tools.normalize import monotonicity_violations

    entry: dict[str, Any] = {
        "monotone": None,
        "raw_range": None,
        "wrong_way": [],
        "items": 0,
        "warning": None,
    }
    values = np.asarray(raw, dtype=float)
    if not values.size or facts.form is None or facts.lower_is_better is None:
        return entry
    low, high = float(values.min()), float(values.max())
    entry["raw_range"] = [low, high]
    if high <= low:
        entry["monotone"] = True
        return entry
    spans = _merged(
        monotonicity_violations(
            facts.form, dict(facts.params), low, high, lower_is_better=facts.lower_is_better
        )
    )
    wrong = np.zeros(values.size, dtype=bool)
    for a, b in spans:
        wrong |= (a <= values) & (values <= b)
    inside = int(np.count_nonzero(wrong))
    entry.update(monotone=not spans, wrong_way=[[a, b] for a, b in spans], items=inside)
    if spans:
        where = ", ".join(f"{a:.4g}..{b:.4g}" for a, b in spans)
        entry["warning"] = (
            f"{name}'s [1,5] mapping ({facts.source or 'the catalogue'}) is not "
            f"{'decreasing' if facts.lower_is_better else 'increasing'} on raw {where}, "
            f"within this job's raw range [{low:.4g}, {high:.4g}] ({inside} item(s) there): "
            "its [1,5] correlations rank those items the wrong way; the headline is on the "
            "raw score"
        )
    return entry


def _merged(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged
