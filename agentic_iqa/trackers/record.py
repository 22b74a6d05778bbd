"""Read what a tracker logs from an ``eval report --json`` document: metrics, params, tags.

Metrics are the report's own floats, unchanged (no rounding): the headline's ``srcc``,
``srcc_ci_low``, ``srcc_ci_high``, ``plcc``, ``plcc_logistic``, ``krcc`` (each with its
interval) and ``n``; MCQ ``accuracy`` with its interval; each tool's the same under
``tool/NAME/``; item counts, VLM calls and cost.  The headline is the agent's; a metric job of
one tool has that tool's (its job's "model"), one of several tools none.  A figure the
report has not (``None``: too few items, no MOS) is not logged.  Params say what the job is
(spec, backends and models per role, tools, prompts, the version that ran it); tags what is
looked up or changes (the job id, its status, how the report was resampled).  Every text is
redacted (:func:`agentic_iqa.redact.redact`): no key, password or signed query leaves.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ..redact import redact
from .base import JOB_TAG

#: The correlation figures of a report's entry (agent or tool) logged as metrics.
CORRELATIONS = ("srcc", "plcc", "plcc_logistic", "krcc")
#: Those with a bootstrap interval (``NAME_ci``: [low, high]).
WITH_CI = ("srcc", "plcc", "krcc")
#: The longest param or tag value logged (MLflow keeps 6,000 characters of a param).
LONGEST = 5000
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. /:]")


def key(name: str) -> str:
    """Return ``name`` as a metric or param key both trackers accept (other characters: ``_``)."""
    return _UNSAFE.sub("_", name)


def _number(value: Any) -> float | None:
    """Return ``value`` as a finite float, or None (None, a bool, text, NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _correlations(entry: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """An agent's or a tool's correlations, intervals and pair count as ``{prefix}srcc``..."""
    found: dict[str, float | None] = {f"{prefix}n": _number(entry.get("n"))}
    for name in CORRELATIONS:
        found[f"{prefix}{name}"] = _number(entry.get(name))
    for name in WITH_CI:
        interval = entry.get(f"{name}_ci") or [None, None]
        found[f"{prefix}{name}_ci_low"] = _number(interval[0])
        found[f"{prefix}{name}_ci_high"] = _number(interval[1])
    return {name: value for name, value in found.items() if value is not None}


def headline(document: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Return the entry whose figures are the job's ``srcc``...: the agent's; a metric job's
    only tool's; None (a metric job of several tools, or nothing to report)."""
    if document.get("agent") is not None:
        return document["agent"]
    tools = document.get("tools") or []
    return tools[0] if document.get("kind") == "metric" and len(tools) == 1 else None


def metrics(document: Mapping[str, Any]) -> dict[str, float]:
    """Return the report's figures as flat metric names and their exact float values."""
    found: dict[str, float | None] = {}
    top = headline(document)
    if top is not None:
        found.update(_correlations(top))
    mcq = document.get("mcq") or {}
    found["accuracy"] = _number(mcq.get("accuracy"))
    interval = mcq.get("accuracy_ci") or [None, None]
    found["accuracy_ci_low"], found["accuracy_ci_high"] = map(_number, interval)
    found["answered_accuracy"] = _number(mcq.get("answered_accuracy"))
    found["questions"] = _number(mcq.get("n")) if mcq.get("accuracy") is not None else None
    for kind in mcq.get("by_type") or []:
        found[f"accuracy/{key(str(kind['type']))}"] = _number(kind.get("accuracy"))
    for tool in document.get("tools") or []:
        prefix = f"tool/{key(str(tool['tool']))}/"
        found.update(_correlations(tool, prefix))
        for name in ("srcc_raw", "plcc_raw", "mean_score"):
            found[prefix + name] = _number(tool.get(name))
    counts = document.get("counts") or {}
    for name in ("total", "done", "failed"):
        found[f"items/{name}"] = _number(counts.get(name))
    found["items/with_mos"] = _number(document.get("items_with_mos"))
    found["quality_score_mean"] = _number(document.get("quality_score_mean"))
    found["fallbacks"] = _number((document.get("fallbacks") or {}).get("total"))
    vlm = document.get("vlm") or {}
    for name in ("calls", "cache_hits", "input_tokens", "output_tokens", "cost_usd"):
        found[f"vlm/{name}"] = _number(vlm.get(name))
    found["busy_seconds"] = _number((document.get("job") or {}).get("busy_seconds"))
    return {name: value for name, value in found.items() if value is not None}


def _text(value: Any) -> str:
    """Return ``value`` as a param's text, redacted and cut to :data:`LONGEST` characters."""
    if isinstance(value, list | tuple):
        text = ", ".join(str(item) for item in value)
    elif isinstance(value, bool):
        text = str(value).lower()
    else:
        text = str(value)
    text = redact(text)
    return text if len(text) <= LONGEST else text[: LONGEST - 1] + "…"


def params(document: Mapping[str, Any]) -> dict[str, str]:
    """Return what the job is, as params: its id, name, source, mode, tools, spec, each role's
    backend, model, base URL (redacted) and follow-up, its prompts and the version that ran it."""
    job = document.get("job") or {}
    spec = job.get("spec") or {}
    config = job.get("configuration") or {}
    dataset = job.get("dataset") or {}
    found: dict[str, Any] = {
        "job_id": job.get("id"),
        "name": job.get("name"),
        "group": job.get("group"),
        "kind": document.get("kind"),
        "mode": job.get("mode"),
        "dataset": dataset.get("name") if isinstance(dataset, Mapping) else dataset,
        "split": spec.get("split"),
        "manifest": job.get("manifest"),
        "root": spec.get("root"),
        "query": job.get("query"),
        "scored_against": job.get("scored_against"),
        "subset": spec.get("subset"),
        "limit": spec.get("limit"),
        "offset": spec.get("offset") or None,
        "sample": spec.get("sample"),
        "seed": spec.get("seed"),
        "mos_range": spec.get("mos_range"),
        "tools": job.get("tools"),
        "backend": job.get("backend"),
        "model": job.get("model"),
        "batch": spec.get("batch", config.get("batch")),
        "vlm_cache": spec.get("vlm_cache"),
        "max_replans": config.get("max_replan_iterations", spec.get("max_replan_iterations")),
        "prompts": config.get("prompts"),
        "agentic_iqa_version": config.get("version"),
    }
    tools = config.get("tools") or {}
    found["tool_device"] = tools.get("device")
    found["fallback_chain"] = tools.get("fallback_chain")
    for role, settings in sorted((config.get("roles") or {}).items()):
        for name in ("backend", "model", "base_url", "temperature", "follow_up"):
            found[f"{role}/{name}"] = settings.get(name)
    return {key(name): _text(value) for name, value in found.items() if value not in (None, "")}


def tags(document: Mapping[str, Any]) -> dict[str, str]:
    """Return what finds the job's run and what may change between two logs of it: the job's
    id, status, kind and group, the report's resampling and warnings."""
    job = document.get("job") or {}
    resampled = document.get("bootstrap") or {}
    found = {
        JOB_TAG: job.get("id"),
        "agentic_iqa.status": job.get("status"),
        "agentic_iqa.kind": document.get("kind"),
        "agentic_iqa.group": job.get("group"),
        "agentic_iqa.bootstrap": (
            f"{resampled.get('resamples')} resamples, seed {resampled.get('seed')}, "
            f"{resampled.get('confidence')} confidence"
            if resampled
            else None
        ),
        "agentic_iqa.warnings": " | ".join(job.get("warnings") or []) or None,
    }
    return {name: _text(value) for name, value in found.items() if value is not None}
