"""What a whole job will cost, from a sample of its items run for real (``eval estimate``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..vlm.usage import ModelUsage, PriceTable, batch_key, summarize
from .subset import RawRow, Subset

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
        "batch_discount": {
            batch_key(usage.backend, usage.endpoint): prices.batch_factor(
                usage.backend, usage.endpoint
            )
            for usage in usages
        },
    }


@dataclass(frozen=True)
class SamplePace:
    """What the measured items took, run as the job will run them (``concurrency`` at once):
    ``warmup``, what the job pays once (imports, model loads, the first calls of each tool),
    and ``seconds``, the wall time each further item adds (items in flight overlapping)."""

    warmup: float
    seconds: float

    @classmethod
    def of(cls, ends: Sequence[float], concurrency: int) -> SamplePace:
        """From when each measured item ended, in seconds since they started: the first
        ``concurrency`` items (the first wave) carry the warm-up, the later ones give the
        pace.  Measured on one wave alone, every item is pace and none warm-up (an estimate
        on the high side)."""
        if not ends:
            raise ValueError("the sample ran no item: nothing to extrapolate from")
        ends = sorted(ends)
        wave = max(1, min(concurrency, len(ends)))
        if len(ends) <= wave:
            return cls(0.0, ends[-1] / len(ends))
        seconds = (ends[-1] - ends[wave - 1]) / (len(ends) - wave)
        return cls(max(0.0, ends[wave - 1] - wave * seconds), seconds)

    def wall_seconds(self, items: int) -> float:
        """The job's wall time: the warm-up once, then ``items`` at the measured pace."""
        return self.warmup + items * self.seconds


def extrapolate(
    sample: Mapping[str, Any],
    *,
    sample_items: int,
    sample_seconds: float,
    total_items: int,
    concurrency: int,
    batch: Mapping[str, Any] | None = None,
    pace: SamplePace | None = None,
) -> dict[str, Any]:
    """The whole manifest's calls, tokens, cost and wall time, from a sample run.

    Calls, tokens and cost are linear: each per-item mean of the sample times
    ``total_items``.  Wall time, given the sample's ``pace`` (:class:`SamplePace`, measured
    with ``concurrency`` items in flight as the job will have), is its warm-up once plus the
    items at that pace; without one, seconds per sampled item x ``total_items`` /
    ``concurrency``.  Both ignore rate limits.  A cost unknown for the sample is unknown for
    the whole.

    ``batch`` (from :func:`batch_pricing`) adds the batch cost, extrapolated the same way, and
    the batch wall time: an item's calls go in sequence, one per round of batches, so the job
    takes about calls-per-item rounds, each up to :data:`BATCH_WINDOW_S` (usually minutes);
    the sample's pace says nothing of it.
    """
    if sample_items < 1:
        raise ValueError("the sample ran no item: nothing to extrapolate from")
    scale = total_items / sample_items
    cost = sample.get("cost_usd")
    wall = (
        pace.wall_seconds(total_items)
        if pace is not None
        else sample_seconds / sample_items * total_items / max(concurrency, 1)
    )
    result = {
        "sample_items": sample_items,
        "total_items": total_items,
        "concurrency": concurrency,
        "sample_seconds": sample_seconds,
        "calls": sample["calls"] * scale,
        "input_tokens": sample["input_tokens"] * scale,
        "cached_tokens": sample["cached_tokens"] * scale,
        "output_tokens": sample["output_tokens"] * scale,
        "cost_usd": None if cost is None else cost * scale,
        "cost_per_item_usd": None if cost is None else cost / sample_items,
        "unpriced_models": list(sample.get("unpriced_models", [])),
        "wall_seconds": wall,
    }
    if pace is not None:
        result.update(warmup_seconds=pace.warmup, seconds_per_item=pace.seconds)
    if batch is not None:
        batch_cost = batch.get("cost_usd")
        rounds = math.ceil(sample["calls"] / sample_items)
        result.update(
            {
                "cost_usd_batch": None if batch_cost is None else batch_cost * scale,
                "cost_per_item_usd_batch": None
                if batch_cost is None
                else batch_cost / sample_items,
                "batch_discount": dict(batch.get("batch_discount", {})),
                "batch_unpriced_models": list(batch.get("unpriced_models", [])),
                "batch_rounds": rounds,
                "batch_wall_seconds_max": rounds * BATCH_WINDOW_S,
            }
        )
    return result


def describe_batch(result: Mapping[str, Any]) -> list[str]:
    """The --batch lines of ``eval estimate``: the batch cost beside the online one, and why
    the sample's pace does not give a batch job's wall time."""
    from ..vlm.usage import format_cost

    online, cost = result["cost_usd"], result["cost_usd_batch"]
    discounts = (
        ", ".join(
            f"{key} {'none' if factor is None else f'{factor:g}'}"
            for key, factor in result["batch_discount"].items()
        )
        or "no call"
    )
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
        f"the sample ran online ({result['sample_items']} items, {result['concurrency']} at "
        "once); the batch figures are its calls priced at each provider's batch discount",
    ]


def sample_items(spec: JobSpec, count: int) -> tuple[list[ManifestItem], int]:
    """``count`` good items of the job ``spec`` describes (a manifest or a dataset, its subset
    applied), drawn at random by a fixed hash of their ids so that they are the same on every
    call and not only the file's first rows (LIVE-C's first rows are its .bmp images), and how
    many rows the whole job would have.  The draw is made on the rows before they are checked:
    only the drawn rows' images are looked at (a manifest of URLs is not asked about whole)."""
    from pathlib import Path

    from .manifest import ManifestFormatError, ManifestItem, read_manifest
    from .sources import dataset_entries

    measured = _Measured(spec.subset, MEASURE_SPARE * count)
    if spec.dataset is not None:
        if spec.root is None:
            raise ManifestFormatError(
                f"--dataset {spec.dataset} needs --root: the folder the dataset was unpacked into"
            )
        _described, entries = dataset_entries(
            spec.dataset,
            spec.root,
            spec.split,
            check_images=False,
            score=spec.score,
            subset=measured,
        )
    elif spec.manifest is None:
        raise ManifestFormatError("give a manifest, or a dataset: --dataset NAME --root DIR")
    else:
        entries = read_manifest(
            Path(spec.manifest),
            root=spec.root,
            image_dir=spec.image_dir,
            mos_range=spec.mos_range,
            subset=measured,
            check_images=False,
            access=spec.access_policy(),
        )
    good = [entry for entry in entries if isinstance(entry, ManifestItem)]
    return good[:count], measured.rows


#: Rows drawn for each item to measure: room for drawn rows that turn out bad.
MEASURE_SPARE = 2


class _Measured:
    """The job's rows as its subset chooses them, counted (``rows``, once they are read), then
    ``count`` of them drawn by a fixed seed: the rows an estimate runs, chosen before any is
    checked (:class:`~.subset.RowChoice`)."""

    def __init__(self, job: Subset, count: int) -> None:
        self.job, self.count, self.rows = job, count, 0

    def apply(self, rows: Iterable[RawRow]) -> Iterator[RawRow]:
        def counted() -> Iterator[RawRow]:
            for row in self.job.apply(rows):
                self.rows += 1
                yield row

        return Subset(sample=self.count, seed=0).apply(counted())
