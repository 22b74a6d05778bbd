"""Pair two jobs' items and bootstrap their difference: the paired half of a comparison.

Two jobs on one manifest are scored on the same images, so their SRCCs are not independent:
separate bootstrap intervals overlap even when one job is better on almost every resample.  The
difference is therefore bootstrapped paired: each draw resamples shared items and scores both
jobs on that draw (the percentile interval of ``job - baseline``), by image where an image has
several items.  Items are matched by ``item_id`` (a 64-bit digest per item in the columns, so two
jobs of a million items match in arrays).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .cells import finite_or_none
from .in_sample import FITTED_IMAGES as FITTED_IMAGES
from .in_sample import job_mode
from .own_scores import ToolFacts, sign, tool_facts
from .report import CONFIDENCE

if TYPE_CHECKING:
    import numpy as np

    from .columns import JobColumns

METRICS = ("srcc", "plcc", "krcc")
#: Resampled by image with at most this many images, a drawn row's value is kept for the rows
#: that draw the same (beyond, two rows of a thousand almost never do).
_REPEATED_DRAWS = 16
#: Shared items whose MOS are compared at a time.
CHUNK = 1 << 16


@dataclass
class PairedJob:
    """A job's columns, and the positions of its items with an id (the last row of an id).

    A job's items usually all have an id of their own: then ``keyed`` is None and no array of
    positions is kept, nor any column copied to them (a million items: 8 MB each)."""

    about: Mapping[str, Any]
    columns: JobColumns
    #: Positions of its items with an id, the last row of each; None: every item, in order.
    keyed: np.ndarray | None
    #: Its match with the baseline's items (:func:`match_items`), once found.
    matched: np.ndarray | None = None

    @property
    def items(self) -> np.ndarray:
        """Positions of its items with an id (the last row of an id)."""
        import numpy as np

        return np.arange(self.columns.size) if self.keyed is None else self.keyed

    def at(self, values: np.ndarray) -> np.ndarray:
        """``values[self.items]`` (``values`` themselves where every item counts)."""
        return values if self.keyed is None else values[self.keyed]

    def where(self, mask: np.ndarray) -> np.ndarray:
        """``self.items[mask]``: positions of its items where ``mask`` (one per item) holds."""
        import numpy as np

        return np.flatnonzero(mask) if self.keyed is None else self.keyed[mask]

    def take(self, index: np.ndarray) -> np.ndarray:
        """``self.items[index]``."""
        return index if self.keyed is None else self.keyed[index]


@dataclass
class Line:
    """One line of the table: the agent's, or a tool's of a metric job, as per-item arrays."""

    label: str
    job: str
    source: str
    tool: str | None = None
    #: The score a line is judged on, per item of its job (NaN: none); with ``flip``, the
    #: tool's raw score, judged on its negation (:meth:`judged`: no negated copy is kept).
    pred: np.ndarray | None = None
    flip: bool = False
    #: The MCQ outcome per item (:data:`.columns.RIGHT` ...; counted: done and failed items
    #: whose correct answer is a letter); None for a tool.
    answers: np.ndarray | None = None
    #: A tool's [1, 5] score and its raw one per item; its catalogue facts.
    normalized: np.ndarray | None = None
    raw: np.ndarray | None = None
    facts: ToolFacts | None = None

    def judged(self, index: np.ndarray) -> np.ndarray:
        """The score the line is judged on at the positions ``index``."""
        import numpy as np

        assert self.pred is not None
        values = self.pred[index]
        return np.negative(values) if self.flip else values


def _keyed(columns: JobColumns) -> np.ndarray | None:
    """Positions of the items with an id, the last row of each (ids are unique in a job);
    None when that is every item."""
    import numpy as np

    assert columns.key is not None and columns.has_key is not None
    at = np.flatnonzero(columns.has_key)
    if not at.size:
        return at
    keys = columns.key if at.size == columns.size else columns.key[at]
    ordered = np.sort(keys)
    unique = not np.count_nonzero(ordered[1:] == ordered[:-1])
    del ordered
    if unique:  # every id once (a job's usual case): all of them
        return None if at.size == columns.size else at
    _, last = np.unique(keys[::-1], return_index=True)
    return np.sort(at[at.size - 1 - last])


def read_lines(
    about: Mapping[str, Any], data: Iterable[Mapping[str, Any]] | JobColumns
) -> tuple[PairedJob, list[Line]]:
    """Read a job's columns (or rows) and its lines: one per tool of a metric job, else one."""
    import numpy as np

    from .columns import JobColumns

    columns = data if isinstance(data, JobColumns) else JobColumns.from_rows(data)
    if columns.key is None:
        raise ValueError("a comparison needs each item's id: columns read with identities")
    job = PairedJob(about, columns, _keyed(columns))
    mode, short = job_mode(about), str(about.get("id") or "?")[:8]
    if mode == "tools":
        names = list(about.get("tools") or sorted(columns.tool_columns))
        facts = tool_facts(names)
        lines = []
        for name in names:
            raw = columns.raw.get(name, np.full(columns.size, np.nan))
            normalized = columns.normalized.get(name, np.full(columns.size, np.nan))
            # Its own score, sign-corrected; the [1, 5] one only where the rows have no raw.
            has_raw = bool(np.count_nonzero(job.at(~np.isnan(raw))))
            lines.append(
                Line(
                    f"{short} tools/{name}",
                    str(about.get("id")),
                    f"tools/{name}",
                    name,
                    pred=raw if has_raw else normalized,
                    flip=has_raw and sign(facts[name]) < 0,
                    normalized=normalized,
                    raw=raw,
                    facts=facts[name],
                )
            )
    else:
        lines = [
            Line(
                f"{short} {mode}",
                str(about.get("id")),
                mode,
                pred=columns.score,
                answers=columns.mcq,
            )
        ]
    return job, lines


def _paired_ci(
    draws: Callable[[Any], Any], n: int, resamples: int, seed: int, estimate: float | None = None
) -> list[float] | None:
    """Percentile interval of ``draws(index)``, which scores both lines on each row of item
    positions: the same items, resampled with replacement, for both (the pairing).  Undefined
    draws are left out, as in :func:`agentic_iqa.reports.metrics.bootstrap_ci`; above
    :data:`~agentic_iqa.reports.metrics.BOOTSTRAP_PAIRS` positions, the m-out-of-n bootstrap
    around ``estimate``."""
    import numpy as np

    from .metrics import draw_resamples

    if resamples < 1 or n == 0:
        return None
    values = draw_resamples(draws, n, resamples, seed, estimate)
    if values.size == 0:
        return None
    tail = (1.0 - CONFIDENCE) / 2.0
    return [float(value) for value in np.quantile(values, [tail, 1.0 - tail])]


def _groups(shared: np.ndarray, image: np.ndarray) -> list[Any] | None:
    """Positions in ``shared`` by image (``image``: each shared item's image digest), when
    some image has several items (several questions about one photo are not independent
    draws: resampling them one by one would make the intervals too narrow); None when every
    item is its own image."""
    import numpy as np

    _, first, inverse = np.unique(image, return_index=True, return_inverse=True)
    if first.size == shared.size:
        return None
    order = np.argsort(first, kind="stable")  # images in the order they first come
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    group = rank[inverse.reshape(-1)]
    by_group = np.argsort(group, kind="stable")
    bounds = np.flatnonzero(np.diff(group[by_group])) + 1
    return np.split(by_group, bounds)


def _metric_draws(
    metric: Callable[..., float], a: Any, b: Any, y: Any, groups: list[Any] | None = None
) -> Callable[[Any], Any]:
    """``metric(b, y) - metric(a, y)`` per row of positions (SRCC and PLCC all rows at once),
    or with ``groups`` per row of drawn images (their items together)."""
    import numpy as np

    from .metrics import resampler

    if groups is None:
        scored, baseline = resampler(metric, b, y), resampler(metric, a, y)
        return lambda index: scored(index) - baseline(index)

    # A row that draws the same images in the same order as an earlier one has its value: with
    # few images most rows repeat one (with one image, every row draws it), and a row's metric
    # is over all the items of its images (50,000 items: a KRCC takes tens of milliseconds).
    remembered: dict[bytes, float] | None = {} if len(groups) <= _REPEATED_DRAWS else None

    def by_image(index: Any) -> Any:
        values = np.empty(len(index))
        for row, drawn in enumerate(index):
            key = drawn.tobytes() if remembered is not None else b""
            known = remembered.get(key) if remembered is not None else None
            if known is None:
                at = np.concatenate([groups[group] for group in drawn])
                known = metric(b[at], y[at]) - metric(a[at], y[at])
                if remembered is not None:
                    remembered[key] = known
            values[row] = known
        return values

    return by_image


def match_items(job: PairedJob, base: PairedJob) -> np.ndarray:
    """For each of the baseline's items (``base.items``), the position of the same item in
    ``job`` (by id), or -1."""
    import numpy as np

    if job.matched is not None:  # a job is matched with the one baseline of its comparison
        return job.matched
    if job is base:  # (read only, as every match is; made again when asked)
        return base.items
    assert job.columns.key is not None and base.columns.key is not None
    keys = job.at(job.columns.key)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    del keys
    wanted = base.at(base.columns.key)
    matched = np.full(wanted.size, -1, dtype=np.int64)
    for start in range(0, wanted.size if ordered.size else 0, CHUNK):  # a few MB at a time
        part = wanted[start : start + CHUNK]
        at = np.minimum(np.searchsorted(ordered, part), ordered.size - 1)
        same = ordered[at] == part
        matched[start : start + part.size][same] = job.take(order[at[same]])
    job.matched = matched
    return matched


def _shared(
    base_job: PairedJob, mask: np.ndarray, matched: np.ndarray, line_mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The baseline's items where ``mask`` holds and whose match in the line's job (``matched``)
    holds ``line_mask``, in the order of their ids (as the ids sort): positions in the
    baseline's job and in the line's."""
    import numpy as np

    ok = (matched >= 0) & base_job.at(mask)
    ok[ok] = line_mask[matched[ok]]
    base_at, line_at = base_job.where(ok), matched[ok]
    assert base_job.columns.key_rank is not None
    order = np.argsort(base_job.columns.key_rank[base_at], kind="stable")
    return base_at[order], line_at[order]


def paired_difference(
    base: Line, line: Line, base_job: PairedJob, job: PairedJob, resamples: int, seed: int
) -> dict[str, Any]:
    """``line - baseline`` on the items both scored that have a MOS (the baseline job's)."""
    import numpy as np

    from .metrics import krcc, plcc, srcc

    assert base.pred is not None and line.pred is not None
    truth = base_job.columns.mos
    base_at, line_at = _shared(
        base_job,
        ~np.isnan(base.pred) & ~np.isnan(truth),
        match_items(job, base_job),
        ~np.isnan(line.pred),
    )
    shared = base_at.size
    entry: dict[str, Any] = {
        "n": int(shared),
        "reason": None,
        **{key: None for name in METRICS for key in (name, f"{name}_ci")},
    }
    if shared < 3:
        entry["reason"] = (
            f"{shared} item(s) scored by both with a MOS: at least 3 are needed"
            if shared
            else "no item is scored by both with a MOS: nothing to compare"
        )
        return entry
    a, b, y = base.judged(base_at), line.judged(line_at), truth[base_at]
    assert base_job.columns.image is not None
    groups = _groups(base_at, base_job.columns.image[base_at])
    for name, metric in zip(METRICS, (srcc, plcc, krcc), strict=True):
        entry[name] = finite_or_none(metric(b, y) - metric(a, y))
        if entry[name] is not None:
            entry[f"{name}_ci"] = _paired_ci(
                _metric_draws(metric, a, b, y, groups),
                shared if groups is None else len(groups),
                resamples,
                seed,
                entry[name],
            )
    if entry["srcc"] is None:
        entry["reason"] = "scores or MOS are constant on the shared items: no correlation"
    return entry


def paired_mcq_difference(
    base: Line, line: Line, base_job: PairedJob, job: PairedJob, resamples: int, seed: int
) -> dict[str, Any]:
    """Return ``line - baseline`` MCQ accuracy on the questions both counted, with its paired
    interval."""
    import numpy as np

    from .columns import NOT_COUNTED, RIGHT
    from .metrics import BOOTSTRAP_PAIRS

    assert base.answers is not None and line.answers is not None
    base_at, line_at = _shared(
        base_job,
        base.answers != NOT_COUNTED,
        match_items(job, base_job),
        line.answers != NOT_COUNTED,
    )
    if not base_at.size:
        return {
            "n": 0,
            "accuracy": None,
            "accuracy_ci": None,
            "reason": "no question is answered by both",
        }
    a = (base.answers[base_at] == RIGHT).astype(float)
    b = (line.answers[line_at] == RIGHT).astype(float)
    assert base_job.columns.image is not None
    groups = _groups(base_at, base_job.columns.image[base_at])
    shared = base_at.size
    estimate = float(b.mean() - a.mean())
    ci: list[float] | None
    if groups is None and shared > BOOTSTRAP_PAIRS and resamples > 0:
        # A resample's gains and losses are multinomial: drawn so, exactly.
        change = b - a
        shares = [float(np.mean(change == value)) for value in (-1.0, 1.0)]
        counts = np.random.default_rng(seed).multinomial(
            shared, [shares[0], shares[1], max(0.0, 1.0 - shares[0] - shares[1])], size=resamples
        )
        draws = (counts[:, 1] - counts[:, 0]) / shared
        tail = (1.0 - CONFIDENCE) / 2.0
        ci = [float(value) for value in np.quantile(draws, [tail, 1.0 - tail])]
    elif groups is None:
        ci = _paired_ci(
            lambda index: b[index].mean(axis=1) - a[index].mean(axis=1),
            shared,
            resamples,
            seed,
            estimate,
        )
    else:  # drawn images: their questions' summed differences over their count
        gained = np.array([(b[group] - a[group]).sum() for group in groups])
        asked = np.array([len(group) for group in groups], dtype=float)
        ci = _paired_ci(
            lambda index: gained[index].sum(axis=1) / asked[index].sum(axis=1),
            len(groups),
            resamples,
            seed,
            estimate,
        )
    return {
        "n": int(shared),
        "accuracy": estimate,
        "reason": None,
        "images": int(shared if groups is None else len(groups)),
        "accuracy_ci": ci,
    }
