"""Render a comparison of jobs as plain text for a terminal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..redact import redact
from .in_sample import FITTED_IMAGES as FITTED_IMAGES
from .own_scores import CONVENTION_SHORT
from .pairing import METRICS
from .report_text import format_ci, format_value

if TYPE_CHECKING:
    pass


def format_seconds(value: float | None) -> str:
    """Return a duration as "1.23 s", "-" without one."""
    return "-" if value is None else f"{value:.2f} s"


def format_money(value: float | None) -> str:
    """Return a cost in dollars as the usage tables write it."""
    from ..vlm.usage import format_cost

    return format_cost(value)


def _value_ci(entry: Mapping[str, Any] | None, name: str) -> str:
    if not entry:
        return "-"
    return f"{format_value(entry.get(name))} {format_ci(entry.get(f'{name}_ci'))}"


def describe_secondary(line: Mapping[str, Any]) -> tuple[str, str]:
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
    return format_value((line.get("normalized") or {}).get("srcc")) + flag, better


def _tool_text(line: Mapping[str, Any]) -> str:
    if not line.get("tool"):
        return ""
    value, better = describe_secondary(line)
    return f" {value:>10}  {better}"


def describe_method(doc: Mapping[str, Any]) -> str:
    """Return the sentence saying how the comparison's intervals were computed."""
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
            f"{format_seconds(job['wall_time_per_item_s']):>14} "
            f"{format_money(job['cost_per_item_usd']):>10}"
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
                f"  {line['label']:<{width}} {mcq['n']:>5} {format_value(mcq['accuracy']):>8} "
                f"{mcq['failed']:>6} {mcq['no_answer']:>5} "
                f"{format_value(mcq['answered_accuracy']):>8}  "
                f"{diff['n'] if diff else '':>6}  {versus}"
            )
    lines.append(describe_method(doc))
    lines += [f"warning: {text}" for text in doc["warnings"]]
    return "\n".join((redact(line) or "").rstrip() for line in lines) + "\n"
