"""What a whole job will cost, from a sample of its items run for real (``eval estimate``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..vlm.usage import ModelUsage, PriceTable, batch_key, summarize

if TYPE_CHECKING:
    from .manifest import ManifestItem
    from .spec import JobSpec

#: A provider's batch returns its results within this long (both OpenAI's and Anthropic's
#: stated limit; usually minutes): the bound on one round of batches.
BATCH_WINDOW_S = 24 * 3600


def batch_pricing(usages: Iterable[ModelUsage], prices: PriceTable) -> dict[str, Any]:
    """The sample's calls priced as if answered through the providers' batch APIs.

    The sample runs online; its calls, each at its provider's ``batch_discount``, are what the
    same calls cost in a batch. ``batch_discount``: the factor per provider called (None: none
    in the price table, which makes the batch cost unknown).
    """
    usages = [usage for usage in usages if usage.calls]
    summary = summarize([replace(usage, batch=True) for usage in usages], prices)
    return {
        "cost_usd": summary["cost_usd"],
        "unpriced_models": summary["unpriced_models"],
        "batch_discount": {batch_key(usage.backend, usage.endpoint):
                           prices.batch_factor(usage.backend, usage.endpoint)
                           for usage in usages},
    }


def extrapolate(sample: Mapping[str, Any], *, sample_items: int, sample_seconds: float,
                total_items: int, concurrency: int, batch: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """The whole manifest's calls, tokens, cost and wall time, from a sample run.

    The model is linear: each per-item mean of the sample (calls, tokens, cost) times
    ``total_items``; wall time = seconds per item in the sample (run one at a time) x
    ``total_items`` / ``concurrency`` (items in flight at once), so it assumes throughput grows
    with concurrency and ignores rate limits and the warm-up the sample paid. A cost that is
    unknown for the sample is unknown for the whole.

    ``batch`` (from :func:`batch_pricing`) adds the batch cost, extrapolated the same way, and
    the batch wall time: an item's calls go in sequence, one per round of batches, so the job
    takes about calls-per-item rounds, each up to :data:`BATCH_WINDOW_S` (usually minutes);
    the sample's pace says nothing of it.
    """
    if sample_items < 1:
        raise ValueError("the sample ran no item: nothing to extrapolate from")
    scale = total_items / sample_items
    cost = sample.get("cost_usd")
    result = {
        "sample_items": sample_items, "total_items": total_items, "concurrency": concurrency,
        "sample_seconds": sample_seconds,
        "calls": sample["calls"] * scale,
        "input_tokens": sample["input_tokens"] * scale,
        "cached_tokens": sample["cached_tokens"] * scale,
        "output_tokens": sample["output_tokens"] * scale,
        "cost_usd": None if cost is None else cost * scale,
        "cost_per_item_usd": None if cost is None else cost / sample_items,
        "unpriced_models": list(sample.get("unpriced_models", [])),
        "wall_seconds": sample_seconds / sample_items * total_items / max(concurrency, 1),
    }
    if batch is not None:
        batch_cost = batch.get("cost_usd")
        rounds = math.ceil(sample["calls"] / sample_items)
        result.update({
            "cost_usd_batch": None if batch_cost is None else batch_cost * scale,
            "cost_per_item_usd_batch": None if batch_cost is None else batch_cost / sample_items,
            "batch_discount": dict(batch.get("batch_discount", {})),
            "batch_unpriced_models": list(batch.get("unpriced_models", [])),
            "batch_rounds": rounds,
            "batch_wall_seconds_max": rounds * BATCH_WINDOW_S,
        })
    return result


def describe_batch(result: Mapping[str, Any]) -> list[str]:
    """The --batch lines of ``eval estimate``: the batch cost beside the online one, and why
    the sample's pace does not give a batch job's wall time."""
    from ..vlm.usage import format_cost

    online, cost = result["cost_usd"], result["cost_usd_batch"]
    discounts = ", ".join(f"{key} {'none' if factor is None else f'{factor:g}'}"
                          for key, factor in result["batch_discount"].items()) or "no call"
    if cost is None:
        unpriced = result["batch_unpriced_models"]
        ratio = f"unknown (no price for {', '.join(unpriced)})" if unpriced else "unknown"
    elif online:
        ratio = f"{cost / online:.2f} x online"
    else:
        ratio = "no online cost to compare"
    rounds = result["batch_rounds"]
    return [
        f"batch (extrapolated from the sample): cost {format_cost(cost)} "
        f"({format_cost(result['cost_per_item_usd_batch'])} per item) against "
        f"{format_cost(online)} online: {ratio} (batch_discount: {discounts})",
        f"batch wall time: about {rounds} rounds of batches (the model calls per item, made in "
        "sequence); a batch's results come within 24 hours, usually minutes, so about "
        f"{rounds} x the batch latency (at most {rounds * 24} h), not the sample's pace",
        f"the sample ran online ({result['sample_items']} items, one at a time); the batch "
        "figures are its calls priced at each provider's batch discount",
    ]


def sample_items(spec: JobSpec, count: int) -> tuple[list[ManifestItem], int]:
    """The first ``count`` good items of the job ``spec`` describes (a manifest or a dataset,
    its limit applied), and how many rows the whole job would have."""
    from itertools import islice
    from pathlib import Path

    from .manifest import ManifestFormatError, ManifestItem, count_rows, read_manifest
    from .sources import dataset_entries

    if spec.dataset is not None:
        if spec.root is None:
            raise ManifestFormatError(f"--dataset {spec.dataset} needs --root: the folder the "
                                      "dataset was unpacked into")
        _described, entries = dataset_entries(spec.dataset, spec.root, spec.split,
                                              check_images=False, limit=spec.limit,
                                              score=spec.score)
        chosen: list[ManifestItem] = []
        total = 0
        for entry in entries:
            total += 1
            if len(chosen) < count and isinstance(entry, ManifestItem):
                chosen.append(entry)
        return chosen, total
    manifest = Path(spec.manifest) if spec.manifest is not None else None
    if manifest is None:
        raise ManifestFormatError("give a manifest, or a dataset: --dataset NAME --root DIR")
    total = count_rows(manifest)
    if spec.limit is not None:
        total = min(total, spec.limit)
    good = (entry for entry in read_manifest(manifest, root=spec.root, image_dir=spec.image_dir,
                                             mos_range=spec.mos_range, limit=spec.limit)
            if isinstance(entry, ManifestItem))
    return list(islice(good, count)), total
