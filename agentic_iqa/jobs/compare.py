"""Jobs side by side on the same items: agreement with MOS or MCQ truth, and the difference from
a baseline with an interval that knows the items are the same.

Two jobs on one manifest are scored on the same images, so their SRCCs are not independent:
separate bootstrap intervals overlap even when one job is better on almost every resample.  The
difference is therefore bootstrapped paired: each draw resamples shared items and scores both
jobs on that draw (the percentile interval of ``job - baseline``).  Items are matched by
``item_id``; each job is one line (its ``quality_score``), a metric job one line per tool (its
own ``raw:`` score, sign-corrected so that higher is better: :data:`.own_scores.CONVENTION`;
its [1, 5] ``tool:`` score's correlations beside it).  MCQ accuracy counts a failed item as a
wrong answer.  The baseline is the first job's first line (its first tool, for a metric job).

Works on exported rows (:mod:`agentic_iqa.jobs.export`) or a job's columns read with
identities (:class:`.columns.JobColumns`: an id's and an image's 64-bit digest per item, so
two jobs of a million items match in arrays), and job descriptions
(:func:`agentic_iqa.db.reads.job_summary` with ``vlm`` beside it), like :mod:`.report`.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..redact import redact
from .in_sample import FITTED_IMAGES as FITTED_IMAGES
from .in_sample import fitted_images, job_mode, uses_builtin
from .own_scores import (
    CONVENTION,
    CONVENTION_SHORT,
    ToolFacts,
    direction,
    mapping_check,
    sign,
    tool_facts,
)
from .report import (
    _STYLE,
    CONFIDENCE,
    NOT_APPLICABLE,
    WITHHELD,
    _cell,
    _ci,
    _ci_cell,
    _fmt,
    _header,
    _label_cell,
)

if TYPE_CHECKING:
    import numpy as np

    from .columns import JobColumns
    from .figures import NamedFigure

METRICS = ("srcc", "plcc", "krcc")
#: Resampled by image with at most this many images, a drawn row's value is kept for the rows
#: that draw the same (beyond, two rows of a thousand almost never do).
_REPEATED_DRAWS = 16
#: Shared items whose MOS are compared at a time.
_CHUNK = 1 << 16


@dataclass
class _Job:
    """A job's columns, and the positions of its items with an id (the last row of an id).

    A job's items usually all have an id of their own: then ``keyed`` is None and no array of
    positions is kept, nor any column copied to them (a million items: 8 MB each)."""

    about: Mapping[str, Any]
    columns: JobColumns
    #: Positions of its items with an id, the last row of each; None: every item, in order.
    keyed: np.ndarray | None
    #: Its match with the baseline's items (:func:`_match`), once found.
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
class _Line:
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


def _read(
    about: Mapping[str, Any], data: Iterable[Mapping[str, Any]] | JobColumns
) -> tuple[_Job, list[_Line]]:
    import numpy as np

    from .columns import JobColumns

    columns = data if isinstance(data, JobColumns) else JobColumns.from_rows(data)
    if columns.key is None:
        raise ValueError("a comparison needs each item's id: columns read with identities")
    job = _Job(about, columns, _keyed(columns))
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
                _Line(
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
            _Line(
                f"{short} {mode}",
                str(about.get("id")),
                mode,
                pred=columns.score,
                answers=columns.mcq,
            )
        ]
    return job, lines


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _paired_ci(
    draws: Callable[[Any], Any], n: int, resamples: int, seed: int, estimate: float | None = None
) -> list[float] | None:
    """Percentile interval of ``draws(index)``, which scores both lines on each row of item
    positions: the same items, resampled with replacement, for both (the pairing).  Undefined
    draws are left out, as in :func:`agentic_iqa.jobs.metrics.bootstrap_ci`; above
    :data:`~agentic_iqa.jobs.metrics.BOOTSTRAP_PAIRS` positions, the m-out-of-n bootstrap
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


def _match(job: _Job, base: _Job) -> np.ndarray:
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
    for start in range(0, wanted.size if ordered.size else 0, _CHUNK):  # a few MB at a time
        part = wanted[start : start + _CHUNK]
        at = np.minimum(np.searchsorted(ordered, part), ordered.size - 1)
        same = ordered[at] == part
        matched[start : start + part.size][same] = job.take(order[at[same]])
    job.matched = matched
    return matched


def _shared(
    base_job: _Job, mask: np.ndarray, matched: np.ndarray, line_mask: np.ndarray
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


def _difference(
    base: _Line, line: _Line, base_job: _Job, job: _Job, resamples: int, seed: int
) -> dict[str, Any]:
    """``line - baseline`` on the items both scored that have a MOS (the baseline job's)."""
    import numpy as np

    from .metrics import krcc, plcc, srcc

    assert base.pred is not None and line.pred is not None
    truth = base_job.columns.mos
    base_at, line_at = _shared(
        base_job,
        ~np.isnan(base.pred) & ~np.isnan(truth),
        _match(job, base_job),
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
        entry[name] = _finite(metric(b, y) - metric(a, y))
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


def _mcq_difference(
    base: _Line, line: _Line, base_job: _Job, job: _Job, resamples: int, seed: int
) -> dict[str, Any]:
    import numpy as np

    from .columns import NOT_COUNTED, RIGHT
    from .metrics import BOOTSTRAP_PAIRS

    assert base.answers is not None and line.answers is not None
    base_at, line_at = _shared(
        base_job, base.answers != NOT_COUNTED, _match(job, base_job), line.answers != NOT_COUNTED
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


def _per_item_seconds(about: Mapping[str, Any], done: int) -> float | None:
    """Wall time per item done: the time its steps were at work (``busy_seconds``: idle gaps,
    such as an interruption before a resume, left out), else submitted to finished."""
    if about.get("busy_seconds") is not None and done:
        return float(about["busy_seconds"]) / done
    start, end = about.get("created_at"), about.get("finished_at")
    if not start or not end or not done:
        return None
    first, last = datetime.fromisoformat(str(start)), datetime.fromisoformat(str(end))
    if (first.tzinfo is None) != (last.tzinfo is None):
        first, last = first.replace(tzinfo=None), last.replace(tzinfo=None)
    return (last - first).total_seconds() / done


def _job_entry(
    job: _Job, base: _Job, fitted: Mapping[str, str] | None, hashes: dict[str, str | None]
) -> tuple[dict[str, Any], list[str]]:
    """A job's counts, time and cost per item, and what a reader must be warned of."""
    import numpy as np

    from .in_sample import overlap_of, overlap_warnings

    about, short, columns = job.about, str(job.about.get("id") or "?")[:8], job.columns
    assert columns.has_key is not None
    vlm = about.get("vlm") or {}
    keyed = columns.has_key
    done = int(np.count_nonzero(columns.done & keyed))
    entry: dict[str, Any] = {
        key: about.get(key)
        for key in (
            "id",
            "name",
            "status",
            "backend",
            "model",
            "tools",
            "dataset",
            "created_at",
            "finished_at",
        )
    }
    matched = _match(job, base)
    entry.update(
        mode=job_mode(about),
        items=int(np.count_nonzero(keyed)),
        done=done,
        with_mos=int(np.count_nonzero(job.at(~np.isnan(columns.mos)))),
        with_truth=int(np.count_nonzero(job.at(columns.truth_letter))),
        shared_with_baseline=int(np.count_nonzero(matched >= 0)),
        wall_time_per_item_s=_per_item_seconds(about, done),
        cost_usd=vlm.get("cost_usd"),
        cost_per_item_usd=vlm.get("cost_per_item_usd"),
        vlm_calls=vlm.get("calls"),
        fitted_overlap=None,
    )
    warnings = []
    if about.get("status") not in (None, "done"):
        warnings.append(
            f"job {short} is {about.get('status')}: its figures cover the "
            f"{done} item(s) done so far"
        )
    if uses_builtin(about):
        overlap = overlap_of(columns, fitted if fitted is not None else fitted_images(), hashes)
        entry["fitted_overlap"] = {**overlap, "of": entry["items"]}
        warnings += overlap_warnings(about, entry["fitted_overlap"])
    mismatched = 0
    for start in range(0, matched.size, _CHUNK):  # a million shared items: a few MB at a time
        part = matched[start : start + _CHUNK]
        found = part >= 0
        theirs = columns.mos[part[found]]
        ours = base.columns.mos[base.take(np.arange(start, start + part.size))[found]]
        mismatched += int(
            np.count_nonzero(~np.isnan(theirs) & ~np.isnan(ours) & (np.abs(theirs - ours) > 1e-9))
        )
    if mismatched:
        warnings.append(
            f"{mismatched} shared item(s) of job {short} have another MOS than in "
            "the baseline's job: differences use the baseline's"
        )
    return entry, warnings


def _line_entry(
    line: _Line, job: _Job, base: _Line | None, base_job: _Job, bootstrap: int, seed: int
) -> dict[str, Any]:
    """A line against MOS and MCQ truth, and its differences from the baseline line."""
    import numpy as np

    from .columns import NOT_COUNTED, RIGHT
    from .metrics import correlation_report, proportion_ci
    from .report import _tally

    assert line.pred is not None
    columns = job.columns
    items = job.where(job.at(~np.isnan(line.pred) & ~np.isnan(columns.mos)))
    truths = int(np.count_nonzero(job.at(columns.truth_letter)))
    questions = int(np.count_nonzero(job.at(columns.question)))
    mcq: dict[str, Any] | None = None
    if line.answers is not None and truths:
        counted = job.at(line.answers)
        counted = counted[counted != NOT_COUNTED]
        tally = _tally(counted)
        interval = proportion_ci(counted == RIGHT, n=bootstrap, confidence=CONFIDENCE, seed=seed)
        mcq = {
            "accuracy": tally.accuracy,
            "accuracy_ci": list(interval) if interval else None,
            "n": tally.questions,
            "correct": tally.correct,
            "answered": tally.answered,
            "answered_accuracy": tally.answered_accuracy,
            "failed": tally.failed,
            "no_answer": tally.no_answer,
            "not_answered": tally.failed + tally.no_answer,
            "not_run": truths - tally.questions,
            "reason": None,
        }
    elif questions and (line.answers is None or not truths):
        # Questions no accuracy can be measured on: say why rather than leave the line out.
        mcq = {
            "accuracy": None,
            "n": 0,
            "correct": 0,
            "not_answered": 0,
            "reason": NOT_APPLICABLE if line.answers is None else WITHHELD,
        }
    diff = mcq_diff = None
    if base is not None and line is not base:
        diff = _difference(base, line, base_job, job, bootstrap, seed)
        if mcq is not None and not mcq["reason"] and base.answers is not None:
            mcq_diff = _mcq_difference(base, line, base_job, job, bootstrap, seed)
    return {
        "label": line.label,
        "job": line.job,
        "source": line.source,
        "tool": line.tool,
        "scored": int(np.count_nonzero(job.at(~np.isnan(line.pred)))),
        "baseline": line is base,
        **_tool_fields(line, job),
        "mos": correlation_report(
            line.judged(items), columns.mos[items], bootstrap=bootstrap, seed=seed
        ),
        "mcq": mcq,
        "difference": diff,
        "mcq_difference": mcq_diff,
    }


def _tool_fields(line: _Line, job: _Job) -> dict[str, Any]:
    """A tool line's basis ("raw" or, without raw scores, "normalized"), direction, its [1, 5]
    score's correlations (secondary) and whether that mapping is monotone over the job's raw
    scores; None for the agent's line."""
    import numpy as np

    from .metrics import correlation_report

    if line.tool is None or line.facts is None or line.normalized is None or line.raw is None:
        return {
            "basis": None,
            "lower_is_better": None,
            "direction": None,
            "normalized": None,
            "mapping": None,
        }
    mos = job.columns.mos
    items = job.where(job.at(~np.isnan(line.normalized) & ~np.isnan(mos)))
    normalized = correlation_report(line.normalized[items], mos[items], bootstrap=0, logistic=False)
    raw = job.at(line.raw)
    raw = raw[~np.isnan(raw)]
    return {
        "basis": "raw" if raw.size else "normalized",
        "lower_is_better": line.facts.lower_is_better,
        "direction": direction(line.facts),
        "normalized": {key: normalized[key] for key in ("n", "srcc", "plcc", "krcc")},
        "mapping": mapping_check(line.tool, line.facts, raw),
    }


def build_comparison(
    jobs: Sequence[tuple[Mapping[str, Any], Iterable[Mapping[str, Any]] | JobColumns]],
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    fitted: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The comparison of ``jobs`` (description, rows or columns read with identities), the
    first job's first line the baseline.

    ``fitted``: sha256 -> name of the images the builtin backend was fitted on (default: the
    shipped list, read only when a job uses the builtin backend).
    """
    if len(jobs) < 2:
        raise ValueError("a comparison needs at least two jobs")
    read = [_read(about, rows) for about, rows in jobs]
    base_job, base = read[0][0], read[0][1][0] if read[0][1] else None
    hashes: dict[str, str | None] = {}
    job_entries, line_entries, warnings = [], [], []
    for job, lines in read:
        entry, notes = _job_entry(job, base_job, fitted, hashes)
        job_entries.append(entry)
        warnings += notes
        line_entries += [_line_entry(line, job, base, base_job, bootstrap, seed) for line in lines]
    return {
        "baseline": base.label if base else None,
        "jobs": job_entries,
        "lines": line_entries,
        "warnings": warnings,
        "bootstrap": {"resamples": bootstrap, "seed": seed, "confidence": CONFIDENCE},
    }


# -- text -----------------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _cost(value: float | None) -> str:
    from ..vlm.usage import format_cost

    return format_cost(value)


def _value_ci(entry: Mapping[str, Any] | None, name: str) -> str:
    if not entry:
        return "-"
    return f"{_fmt(entry.get(name))} {_ci(entry.get(f'{name}_ci'))}"


def _secondary(line: Mapping[str, Any]) -> tuple[str, str]:
    """A tool line's [1,5] SRCC (flagged "!" where its mapping is not monotone over the job's
    raw scores) and its direction; dashes for the agent's line."""
    if not line.get("tool"):
        return "-", "-"
    flag = "!" if (line.get("mapping") or {}).get("monotone") is False else ""
    directions: dict[object, str] = {True: "lower", False: "higher"}
    better = (
        "[1,5] only"
        if line.get("basis") == "normalized"
        else directions.get(line.get("lower_is_better"), "?")
    )
    return _fmt((line.get("normalized") or {}).get("srcc")) + flag, better


def _tool_text(line: Mapping[str, Any]) -> str:
    if not line.get("tool"):
        return ""
    value, better = _secondary(line)
    return f" {value:>10}  {better}"


def _method(doc: Mapping[str, Any]) -> str:
    settings = doc["bootstrap"]
    return (
        f"{settings['confidence']:.0%} intervals: percentile bootstrap, "
        f"{settings['resamples']} resamples (seed {settings['seed']}); differences are "
        "line - baseline on the items both scored, resampled together (paired), by "
        "image where an image has several items."
    )


def render_text(doc: Mapping[str, Any]) -> str:
    """The comparison as plain text for a terminal."""
    lines = [
        f"Baseline: {doc['baseline'] or '-'} (the first job given)",
        "Jobs:",
        f"  {'job':<8}  {'mode':<6} {'items':>5} {'done':>5} {'MOS':>5} {'truth':>5} "
        f"{'shared':>6} {'wall time/item':>14} {'cost/item':>10}  name; backend, model",
    ]
    for job in doc["jobs"]:
        lines.append(
            f"  {str(job['id'])[:8]:<8}  {job['mode']:<6} {job['items']:>5} {job['done']:>5} "
            f"{job['with_mos']:>5} {job['with_truth']:>5} {job['shared_with_baseline']:>6} "
            f"{_seconds(job['wall_time_per_item_s']):>14} {_cost(job['cost_per_item_usd']):>10}"
            f"  {job['name'] or '-'}; {job['backend'] or '-'}, {job['model'] or '-'}"
        )
    width = max(len(line["label"]) for line in doc["lines"]) if doc["lines"] else 4
    if any(line["mos"]["n"] or line["difference"] for line in doc["lines"]):
        tools = any(line.get("tool") for line in doc["lines"])
        lines += [
            (
                "Against MOS (each line on its own items; "
                + CONVENTION_SHORT
                + "; [1,5]: a tool's score mapped onto [1,5]):"
            )
            if tools
            else "Against MOS (each line on its own items):",
            f"  {'line':<{width}} {'n':>5}  {'SRCC [95% CI]':<22} {'PLCC [95% CI]':<22} "
            f"{'KRCC [95% CI]':<22}" + (f" {'SRCC [1,5]':>10}  better" if tools else ""),
        ]
        for line in doc["lines"]:
            entry = line["mos"]
            lines.append(
                f"  {line['label']:<{width}} {entry['n']:>5}  "
                + " ".join(f"{_value_ci(entry, m):<22}" for m in METRICS)
                + (_tool_text(line) if tools else "").rstrip()
                + (f"  ({entry['reason']})" if entry["reason"] else "")
            )
        lines += [
            f"  ! {line['label']}: {line['mapping']['warning']}"
            for line in doc["lines"]
            if (line.get("mapping") or {}).get("warning")
        ]
        lines += [
            "Difference from the baseline, paired on shared items with MOS:",
            f"  {'line':<{width}} {'n':>5}  {'ΔSRCC [95% CI]':<23} {'ΔPLCC [95% CI]':<23} "
            f"{'ΔKRCC [95% CI]':<23}",
        ]
        for line in doc["lines"]:
            diff = line["difference"]
            if diff is None:
                lines.append(f"  {line['label']:<{width}} {'':>5}  (baseline)")
                continue
            lines.append(
                f"  {line['label']:<{width}} {diff['n']:>5}  "
                + (
                    " ".join(f"{_value_ci(diff, m):<23}" for m in METRICS).rstrip()
                    if diff["reason"] is None
                    else diff["reason"]
                )
            )
    if any(line["mcq"] for line in doc["lines"]):
        lines += [
            "MCQ accuracy (over every question run: failed or without an answer counts "
            "wrong; answered: over those answered with a letter):",
            f"  {'line':<{width}} {'n':>5} {'accuracy':>8} {'failed':>6} {'none':>5} "
            f"{'answered':>8}  {'shared':>6}  Δaccuracy [95% CI]",
        ]
        for line in doc["lines"]:
            mcq, diff = line["mcq"], line["mcq_difference"]
            if mcq is None:
                continue
            versus = (
                "(baseline)"
                if line["baseline"]
                else "-"
                if diff is None
                else diff["reason"] or _value_ci(diff, "accuracy")
            )
            if mcq.get("reason"):
                lines.append(
                    f"  {line['label']:<{width}} {'':>5} {'-':>8}  {'':>6}  {mcq['reason']}"
                )
                continue
            lines.append(
                f"  {line['label']:<{width}} {mcq['n']:>5} {_fmt(mcq['accuracy']):>8} "
                f"{mcq['failed']:>6} {mcq['no_answer']:>5} "
                f"{_fmt(mcq['answered_accuracy']):>8}  "
                f"{diff['n'] if diff else '':>6}  {versus}"
            )
    lines.append(_method(doc))
    lines += [f"warning: {text}" for text in doc["warnings"]]
    return "\n".join((redact(line) or "").rstrip() for line in lines) + "\n"


# -- HTML -----------------------------------------------------------------------------------------


def render_html(
    doc: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    figures: Sequence[NamedFigure] | None = None,
) -> Path:
    """Write the comparison as one self-contained page (inline CSS, the paired differences as
    an inline SVG figure: ``figures``, or :func:`.figures.comparison_figures`), every text
    escaped, each line by its name (:func:`.names.line_names`; its id on hover).  It is read in a
    1280-pixel window: agreement and differences are two tables narrow enough to fit, numbers
    and intervals never wrap, a row label keeps a few words' width; a wider table (many
    jobs' names) scrolls in its own box, and figures shrink to the page."""
    from .figures import comparison_figures, html_figure
    from .names import with_line_names

    doc = with_line_names(doc)
    title = "Comparison of evaluation jobs"
    tools = any(line.get("tool") for line in doc["lines"])
    parts = [
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{_STYLE}</style></head><body><h1>{title}</h1>",
        f"<p>Baseline: {html.escape(redact(doc['baseline_name']) or '-')} "
        "(the first job given).</p>",
        '<h2>Jobs</h2><div class="scroll"><table id="jobs">'
        + _header(
            "job",
            "name",
            "mode",
            "backend",
            "model",
            "items",
            "done",
            "with MOS",
            "with truth",
            "shared with baseline",
            "wall time per item",
            "cost per item",
        ),
    ]
    for job in doc["jobs"]:
        job_id, name = str(job["id"] or "-"), job["name"] or "-"
        shown = (
            name if job["shown_as"] in (name, job_id[:8]) else f"{job['shown_as']} (named {name})"
        )
        parts.append(
            f'<tr><td title="{html.escape(redact(job_id) or "")}">'
            f"{html.escape(redact(job_id[:8]) or '')}</td>"
            + _label_cell(shown)
            + "".join(
                _cell(redact(str(job[key] or "-")), text=True)
                for key in ("mode", "backend", "model")
            )
            + "".join(
                _cell(job[key])
                for key in ("items", "done", "with_mos", "with_truth", "shared_with_baseline")
            )
            + _cell(_seconds(job["wall_time_per_item_s"]))
            + _cell(_cost(job["cost_per_item_usd"]))
            + "</tr>"
        )
    parts.append(
        '</table></div><h2>Agreement with MOS</h2><div class="scroll">'
        '<table id="lines">'
        + _header(
            "line",
            "n",
            "SRCC",
            "95% CI",
            "PLCC",
            "95% CI",
            "KRCC",
            "95% CI",
            *(("SRCC [1,5]", "better") if tools else ()),
        )
    )
    for line in doc["lines"]:
        entry = line["mos"]
        css = ' class="agent"' if line["baseline"] else ""
        value, better = _secondary(line)
        parts.append(
            f"<tr{css}>{_label_cell(line['name'], line['label'])}{_cell(entry['n'])}"
            + "".join(_cell(entry[m]) + _ci_cell(entry[f"{m}_ci"]) for m in METRICS)
            + (_cell(value) + _cell(better, text=True) if tools else "")
            + "</tr>"
        )
    parts.append(
        '</table></div><h2>Difference from the baseline</h2><div class="scroll">'
        '<table id="differences">'
        + _header("line", "shared", "ΔSRCC", "95% CI", "ΔPLCC", "95% CI", "ΔKRCC", "95% CI")
    )
    for line in doc["lines"]:
        diff = line["difference"] or {}
        css = ' class="agent"' if line["baseline"] else ""
        parts.append(
            f"<tr{css}>{_label_cell(line['name'], line['label'])}"
            + _cell("baseline" if line["baseline"] else diff.get("n"))
            + "".join(_cell(diff.get(m)) + _ci_cell(diff.get(f"{m}_ci")) for m in METRICS)
            + "</tr>"
        )
    parts.append("</table></div>")
    parts += [
        html_figure(named)
        for named in (figures if figures is not None else comparison_figures(doc))
    ]
    notes = [
        f"{line['name']}: "
        + "; ".join(
            reason
            for reason in (line["mos"]["reason"], (line["difference"] or {}).get("reason"))
            if reason
        )
        for line in doc["lines"]
        if line["mos"]["reason"] or (line["difference"] or {}).get("reason")
    ]
    notes += [
        f"{line['name']}: {line['mapping']['warning']}"
        for line in doc["lines"]
        if (line.get("mapping") or {}).get("warning")
    ]
    if tools:
        notes.append(f"Tools: {CONVENTION}.")
    if any(line["mcq"] for line in doc["lines"]):
        parts.append(
            '<h2>Multiple choice</h2><div class="scroll"><table id="mcq">'
            + _header(
                "line",
                "questions",
                "accuracy",
                "failed",
                "no answer",
                "answered-only accuracy",
                "shared",
                "Δaccuracy",
                "95% CI",
            )
        )
        for line in doc["lines"]:
            if line["mcq"] is None:
                continue
            diff = line["mcq_difference"] or {}
            if line["mcq"].get("reason"):
                parts.append(
                    f"<tr>{_label_cell(line['name'], line['label'])}"
                    f'<td class="text" colspan="8">'
                    f"{html.escape(line['mcq']['reason'])}</td></tr>"
                )
                continue
            mcq = line["mcq"]
            parts.append(
                f"<tr>{_label_cell(line['name'], line['label'])}"
                f"{_cell(mcq['n'])}{_cell(mcq['accuracy'])}{_cell(mcq.get('failed'))}"
                f"{_cell(mcq.get('no_answer'))}{_cell(mcq.get('answered_accuracy'))}"
                f"{_cell(diff.get('n'))}{_cell(diff.get('accuracy'))}"
                f"{_ci_cell(diff.get('accuracy_ci'))}</tr>"
            )
        parts.append("</table></div>")
    parts += [
        f'<p class="note">{html.escape(redact(note) or "")}</p>' for note in [*notes, _method(doc)]
    ]
    if doc["warnings"]:
        parts.append(
            '<h2>Warnings</h2><ul id="warnings">'
            + "".join(f"<li>{html.escape(redact(text) or '')}</li>" for text in doc["warnings"])
            + "</ul>"
        )
    parts.append("</body></html>\n")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(parts), encoding="utf-8")
    return target
