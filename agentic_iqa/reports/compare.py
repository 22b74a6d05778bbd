"""Compare jobs side by side on the same items: agreement with MOS or MCQ truth, and the
difference from a baseline with an interval that knows the items are the same.

Two jobs on one manifest are scored on the same images, so their SRCCs are not independent:
separate bootstrap intervals overlap even when one job is better on almost every resample.  The
difference is therefore bootstrapped paired: each draw resamples shared items and scores both
jobs on that draw (the percentile interval of ``job - baseline``).  Items are matched by
``item_id``; each job is one line (its ``quality_score``), a metric job one line per tool (its
own ``raw:`` score, sign-corrected so that higher is better: :data:`.own_scores.CONVENTION`;
its [1, 5] ``tool:`` score's correlations beside it).  MCQ accuracy counts a failed item as a
wrong answer.  The baseline is the first job's first line (its first tool, for a metric job).

Works on exported rows (:mod:`agentic_iqa.reports.export`) or a job's columns read with
identities (:class:`.columns.JobColumns`: an id's and an image's 64-bit digest per item, so
two jobs of a million items match in arrays), and job descriptions
(:func:`agentic_iqa.db.about.job_summary` with ``vlm`` beside it), like :mod:`.report`.
The items are paired and the differences bootstrapped in :mod:`.pairing`; the comparison is
shown by :mod:`.compare_text` and :mod:`.compare_html`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .in_sample import fitted_images, job_mode, uses_builtin
from .own_scores import direction, mapping_check
from .pairing import (
    CHUNK,
    Line,
    PairedJob,
    match_items,
    paired_difference,
    paired_mcq_difference,
    read_lines,
)
from .report import CONFIDENCE, NOT_APPLICABLE, WITHHELD

if TYPE_CHECKING:
    from .columns import JobColumns


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
    job: PairedJob, base: PairedJob, fitted: Mapping[str, str] | None, hashes: dict[str, str | None]
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
    matched = match_items(job, base)
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
    for start in range(0, matched.size, CHUNK):  # a million shared items: a few MB at a time
        part = matched[start : start + CHUNK]
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
    line: Line, job: PairedJob, base: Line | None, base_job: PairedJob, bootstrap: int, seed: int
) -> dict[str, Any]:
    """A line against MOS and MCQ truth, and its differences from the baseline line."""
    import numpy as np

    from .columns import NOT_COUNTED, RIGHT
    from .metrics import correlation_report, proportion_ci
    from .report import tally_answers

    assert line.pred is not None
    columns = job.columns
    items = job.where(job.at(~np.isnan(line.pred) & ~np.isnan(columns.mos)))
    truths = int(np.count_nonzero(job.at(columns.truth_letter)))
    questions = int(np.count_nonzero(job.at(columns.question)))
    mcq: dict[str, Any] | None = None
    if line.answers is not None and truths:
        counted = job.at(line.answers)
        counted = counted[counted != NOT_COUNTED]
        tally = tally_answers(counted)
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
        diff = paired_difference(base, line, base_job, job, bootstrap, seed)
        if mcq is not None and not mcq["reason"] and base.answers is not None:
            mcq_diff = paired_mcq_difference(base, line, base_job, job, bootstrap, seed)
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


def _tool_fields(line: Line, job: PairedJob) -> dict[str, Any]:
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
    read = [read_lines(about, rows) for about, rows in jobs]
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
