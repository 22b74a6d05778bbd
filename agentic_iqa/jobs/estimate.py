"""What a whole job will cost, from a sample of its items run for real (``eval estimate``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def extrapolate(sample: Mapping[str, Any], *, sample_items: int, sample_seconds: float,
                total_items: int, concurrency: int) -> dict[str, Any]:
    """The whole manifest's calls, tokens, cost and wall time, from a sample run.

    The model is linear: each per-item mean of the sample (calls, tokens, cost) times
    ``total_items``; wall time = seconds per item in the sample (run one at a time) x
    ``total_items`` / ``concurrency`` (items in flight at once), so it assumes throughput grows
    with concurrency and ignores rate limits and the warm-up the sample paid. A cost that is
    unknown for the sample is unknown for the whole.
    """
    if sample_items < 1:
        raise ValueError("the sample ran no item: nothing to extrapolate from")
    scale = total_items / sample_items
    cost = sample.get("cost_usd")
    return {
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
