"""Run IQA tools: look each up, check it can run, score images, cache and fall back.

:class:`ToolRegistry` answers "can this tool run here, on this image" (weights, memory), runs
it on one image or on a batch, serves a cached score, and falls back to a similar tool when
one fails.  The models themselves are built and kept by :mod:`.models`.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import memory, nss, numerics
from . import weights as weight_files
from .cache import ScoreCache, cache_key, open_store
from .catalog import Catalog, ToolSpec, load_catalog
from .errors import (
    InputError,
    NonFiniteScoreError,
    ToolError,
    ToolFailure,
    ToolMemoryError,
    ToolRuntimeError,
    ToolUnavailableError,
)
from .images import LoadedImage, pixel_cap, read_image
from .models import (
    auto_device,
    cast_model,
    count_load,
    load_seconds,
    metric_pool,
    numerics_for,
    to_tensor,
)
from .settings import ToolSettings

log = logging.getLogger(__name__)

ImageInput = str | Path | LoadedImage


@dataclass(frozen=True)
class ToolResult:
    """One tool's verdict on one image."""

    tool: str
    requested_tool: str
    raw_score: float
    normalized_score: float
    execution_time: float
    cached: bool
    fallback: bool = False
    error: str | None = None
    lower_is_better: bool = False
    #: Seconds of one-time model creation included in ``execution_time`` (0: the model was
    #: already built in this process).
    load_time: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ToolRegistry:
    """Runs IQA tools by name and maps their scores onto [1, 5]."""

    def __init__(
        self,
        settings: ToolSettings | None = None,
        catalog: Catalog | None = None,
        cache: ScoreCache | None = None,
    ) -> None:
        self.settings = settings or ToolSettings()
        self.catalog = catalog or load_catalog(
            self.settings.metadata_path, self.settings.metadata_overrides
        )
        self.cache = cache or ScoreCache(
            open_store(self.settings.tool_cache), self.settings.memory_cache_entries
        )
        for name in self.settings.fallback_chain:
            self.catalog.get(name)  # an unknown fallback name is a configuration error: fail now
        #: Scores computed ahead by :meth:`score_batches`, per thread: cache key -> (raw, s).
        self._batched = threading.local()

    # -- what is here ---------------------------------------------------------------------------

    def get(self, name: str) -> ToolSpec:
        return self.catalog.get(name)

    def availability(self, name: str) -> weight_files.Availability:
        spec = self.get(name)
        return weight_files.check(spec, self.settings.weights_dir, self.settings.allow_downloads)

    def device(self) -> str:
        if self.settings.device != "auto":
            return self.settings.device
        return auto_device()

    # -- memory ---------------------------------------------------------------------------------

    def memory_estimate(self, name: str, pixels: int) -> int:
        """Bytes one call of ``name`` needs on an image of ``pixels`` (:mod:`.memory`): tiled
        or whole-image as the registry would score it."""
        spec = self.get(name)
        tiled = spec.pyiqa_name in memory.TILED_METRICS and pixels > self.settings.tile_above_pixels
        return memory.estimate(
            spec.pyiqa_name,
            pixels,
            full_reference=spec.is_full_reference,
            tiled=tiled,
            tile_size=self.settings.tile_size,
        )

    def largest_image(self, name: str) -> int:
        """The most pixels one call of ``name`` takes within the memory budget (and the
        decode ceiling, and ``AGENTIC_IQA_MAX_PIXELS`` if set): what ``tools list`` shows."""
        spec = self.get(name)
        tiles_above = (
            self.settings.tile_above_pixels if spec.pyiqa_name in memory.TILED_METRICS else None
        )
        return memory.largest_pixels(
            spec.pyiqa_name,
            self.settings.tool_memory,
            full_reference=spec.is_full_reference,
            tiles_above=tiles_above,
            tile_size=self.settings.tile_size,
            cap=pixel_cap(),
        )

    def check_memory(self, name: str, image: LoadedImage) -> None:
        """Raise :class:`ToolMemoryError` when one call of ``name`` on ``image`` (and a
        reference of its size) would exceed the budget per call; from the file's header, so
        nothing is decoded or built first."""
        spec = self.get(name)
        width, height = image.header_size
        needed = self.memory_estimate(spec.name, width * height)
        if needed > self.settings.tool_memory:
            raise ToolMemoryError(
                image.path, (width, height), spec.name, needed, self.settings.tool_memory
            )

    # -- models ---------------------------------------------------------------------------------

    def metric(self, name: str) -> Any:
        """The model for ``name``, built on first use in this process."""
        spec = self.get(name)
        availability = self.availability(spec.name)
        if not availability.ok:
            raise ToolUnavailableError(f"{spec.name} cannot run here: {availability.detail}")
        device = self.device()
        found = tuple(sorted((k, str(v)) for k, v in availability.found.items()))
        key = (spec.name, spec.pyiqa_name, spec.factory, device, spec.precision, found)
        return metric_pool.get_or_create(
            key, spec.name, lambda: self._build(spec, availability, device)
        )

    def _build(self, spec: ToolSpec, availability: weight_files.Availability, device: str) -> Any:
        started = time.perf_counter()
        if self.settings.torch_threads is not None:
            import torch

            torch.set_num_threads(self.settings.torch_threads)
        try:
            if spec.factory is not None:
                module_name, _, attribute = spec.factory.partition(":")
                factory: Any = importlib.import_module(module_name)
                for part in attribute.split("."):
                    factory = getattr(factory, part)
                metric = factory(device=device)
            else:
                metric = self._build_pyiqa(spec, availability, device)
            metric = cast_model(metric, spec.precision)
        except ToolError:
            raise
        except Exception as exc:  # model code raises anything; report it as this tool's failure
            if _is_time_limit(exc):
                raise
            raise ToolRuntimeError(
                f"{spec.name}: creating pyiqa metric {spec.pyiqa_name!r} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        log.info(
            "created %s on %s (%s) in %.2fs",
            spec.name,
            device,
            spec.precision,
            time.perf_counter() - started,
        )
        count_load(time.perf_counter() - started)
        return metric

    def _build_pyiqa(
        self, spec: ToolSpec, availability: weight_files.Availability, device: str
    ) -> Any:
        if not self.settings.allow_downloads:
            # Without this, Hugging Face look-ups retry for minutes before failing.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import pyiqa
        import torch

        numerics.install()
        # Some models write derived files there (LIQE's text features) and fail if it is absent.
        weight_files.location_dir("pyiqa").mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {}
        if spec.weight_kwarg is not None and availability.found:
            (path,) = (availability.found[w.file] for w in spec.pyiqa_weight_files)
            kwargs[spec.weight_kwarg] = str(path)
        else:
            weight_files.stage(availability, spec)
        return pyiqa.create_metric(spec.pyiqa_name, device=torch.device(device), **kwargs)

    # -- running --------------------------------------------------------------------------------

    def execute_tool(
        self,
        tool: str,
        image: ImageInput,
        reference: ImageInput | None = None,
        *,
        use_cache: bool = True,
        allow_fallback: bool = True,
    ) -> ToolResult:
        """Score ``image`` with ``tool``; on a tool failure, fall back to another NR tool.

        Input problems (unreadable image, FR tool without a reference, sizes that differ) raise
        at once: no other tool could do better with the same inputs.
        """
        spec = self.get(tool)
        target = image if isinstance(image, LoadedImage) else read_image(image)
        ref: LoadedImage | None = None
        if spec.is_full_reference:
            if reference is None:
                raise InputError(
                    f"{spec.name} is a full-reference tool and needs a reference image"
                )
            ref = reference if isinstance(reference, LoadedImage) else read_image(reference)
        try:
            return self._run(spec, target, ref, use_cache)
        except ToolFailure as failure:
            if not allow_fallback:
                raise
            log.warning("%s failed, trying fallbacks: %s", spec.name, failure)
            return self._fall_back(spec, target, failure, use_cache)

    def cached_score(
        self, tool: str, image: LoadedImage, reference: LoadedImage | None = None
    ) -> float | None:
        """The tool's cached raw score for these files (None: not cached); never loads it."""
        spec = self.get(tool)
        hit = self.cache.get(
            cache_key(
                spec.name,
                image.digest,
                reference.digest if reference is not None else None,
                numerics=spec.numerics,
            )
        )
        return None if hit is None else hit[0]

    def fallback_candidates(self, failed: ToolSpec) -> list[ToolSpec]:
        """The configured chain first, then every other available default NR tool."""
        chain = [self.get(name) for name in self.settings.fallback_chain]
        rest = [spec for spec in self.catalog if spec.type == "NR" and spec.default]
        ordered: list[ToolSpec] = []
        for spec in chain + rest:
            if spec.type == "NR" and spec.name != failed.name and spec not in ordered:
                ordered.append(spec)
        return [spec for spec in ordered if self.availability(spec.name).ok]

    def _fall_back(
        self, failed: ToolSpec, target: LoadedImage, failure: ToolFailure, use_cache: bool
    ) -> ToolResult:
        original = str(failure)
        attempts: list[str] = []
        for spec in self.fallback_candidates(failed):
            try:
                result = self._run(spec, target, None, use_cache)
            except ToolFailure as exc:
                attempts.append(f"{spec.name}: {exc}")
                continue
            return ToolResult(
                **{
                    **result.to_dict(),
                    "requested_tool": failed.name,
                    "fallback": True,
                    "error": original,
                },
            )
        tried = "; ".join(attempts) if attempts else "no fallback tool can run here"
        raise ToolFailure(f"{original} (fallbacks: {tried})") from failure

    def _run(
        self, spec: ToolSpec, target: LoadedImage, ref: LoadedImage | None, use_cache: bool
    ) -> ToolResult:
        started = time.perf_counter()
        loads_before = load_seconds()
        key = cache_key(
            spec.name,
            target.digest,
            ref.digest if ref is not None else None,
            numerics=spec.numerics,
        )
        ahead = self._batch_memo().pop(key, None)
        hit = self.cache.get(key) if use_cache and ahead is None else None
        if ahead is not None:  # this call's share of a batched forward pass: computed, not cached
            raw, share = ahead
            return ToolResult(
                tool=spec.name,
                requested_tool=spec.name,
                raw_score=raw,
                normalized_score=spec.normalize(raw),
                execution_time=share + time.perf_counter() - started,
                cached=False,
                lower_is_better=spec.lower_is_better,
            )
        if hit is not None:
            raw, cached = hit[0], True
        else:
            # The budget from the header first: a photo too large for this tool is refused
            # before a pixel is decoded.  Then decode (and compare sizes) outside the tool's own
            # error handling: a bad input image is the caller's problem, not a tool failure
            # that a fallback could fix.
            self.check_memory(spec.name, target)
            _ = target.stored
            if ref is not None:
                check_same_size(spec.name, target, ref)
            if spec.requires_texture and is_one_colour(target):
                raise ToolRuntimeError(
                    f"{spec.name} is undefined on {target.path}: every pixel has the same colour, "
                    "so its natural-scene statistics would be rounding noise"
                )
            raw, cached = self._score(spec, target, ref), False
            self.cache.set(key, raw)
        return ToolResult(
            tool=spec.name,
            requested_tool=spec.name,
            raw_score=raw,
            normalized_score=spec.normalize(raw),
            execution_time=time.perf_counter() - started,
            cached=cached,
            lower_is_better=spec.lower_is_better,
            load_time=load_seconds() - loads_before,
        )

    def _score(self, spec: ToolSpec, target: LoadedImage, ref: LoadedImage | None) -> float:
        metric = self.metric(spec.name)
        import torch

        device = self.device()
        key = (spec.name, spec.precision, "run")
        try:
            with metric_pool.lock_for(key), torch.inference_mode(), numerics_for(spec):
                output = self._tiled(spec, metric, target, ref, device)
                if output is None:
                    x = to_tensor(target, device, spec.precision)
                    with nss.sharing_luma(x, target.derived):
                        output = (
                            metric(x, to_tensor(ref, device, spec.precision))
                            if ref is not None
                            else metric(x)
                        )
            raw = (
                float(output.detach().reshape(-1)[0].cpu())
                if torch.is_tensor(output)
                else float(output)
            )
        except Exception as exc:  # a metric can raise anything on odd input; keep the reason
            if _is_time_limit(exc):
                raise
            raise ToolRuntimeError(
                f"{spec.name} failed on {target.path}: {type(exc).__name__}: {exc}"
            ) from exc
        if not math.isfinite(raw):
            raise NonFiniteScoreError(f"{spec.name} returned {raw} for {target.path}")
        return raw

    def _tiles(self, spec: ToolSpec, image: LoadedImage) -> bool:
        """Whether this tool scores this (decoded) image tile by tile."""
        from . import tiling  # torch: loaded by now for the tool's model anyway

        height, width = image.stored.shape[:2]
        return tiling.applies(spec.pyiqa_name, height * width, self.settings.tile_above_pixels)

    def _tiled(
        self, spec: ToolSpec, metric: Any, target: LoadedImage, ref: LoadedImage | None, device: str
    ) -> float | None:
        """The score computed tile by tile (:mod:`iqa_tools.tiling`: the whole-image score, in
        a tile's memory, from the pixels without a full-size float copy); None below the size
        setting, or for a metric that module does not reproduce."""
        if not self._tiles(spec, target):
            return None
        from . import tiling

        tile = self.settings.tile_size or tiling.DEFAULT_TILE.get(device, 1024)
        return tiling.score(metric, target, ref, device=device, dtype=spec.precision, tile=tile)

    # -- batches ---------------------------------------------------------------------------------

    def _batch_memo(self) -> dict[str, tuple[float, float]]:
        memo = getattr(self._batched, "scores", None)
        if memo is None:
            memo = self._batched.scores = {}
        return memo

    def score_batches(
        self, calls: Sequence[tuple[str, LoadedImage, LoadedImage | None]], *, max_batch: int = 16
    ) -> int:
        """Score many (tool, image, reference) calls ahead, same-sized inputs of one tool in one
        forward pass of at most ``max_batch`` images; returns how many were computed.

        The scores go to the cache and to a memo of this thread that the next
        :meth:`execute_tool` of the same call takes (logged as computed, with its share of the
        batch's time): results stay per call.  Anything this cannot batch (a cache hit, an input
        that does not decode or has no texture, a batch whose forward pass fails, a non-finite
        score) is left to the per-call path, which reports it as it always does.
        """
        groups: dict[tuple[Any, ...], list[tuple[str, LoadedImage, LoadedImage | None]]] = {}
        seen: set[str] = set()
        for tool, target, ref in calls:
            spec = self.get(tool)
            if (ref is None) == spec.is_full_reference or not self.availability(spec.name).ok:
                continue
            key = cache_key(
                spec.name,
                target.digest,
                ref.digest if ref is not None else None,
                numerics=spec.numerics,
            )
            if key in seen or self.cache.get(key) is not None:
                continue
            try:
                self.check_memory(spec.name, target)
                shape = target.stored.shape
                if ref is not None and ref.stored.shape != shape:
                    continue
                if spec.requires_texture and is_one_colour(target):
                    continue
                if self._tiles(spec, target):  # scored in tiles, one call at a time
                    continue
            except ToolError:
                continue
            seen.add(key)
            groups.setdefault((spec.name, shape), []).append((key, target, ref))
        computed = 0
        for (name, _shape), members in groups.items():
            for start in range(0, len(members), max_batch):
                computed += self._score_group(self.get(name), members[start : start + max_batch])
        return computed

    def _score_group(
        self, spec: ToolSpec, members: Sequence[tuple[str, LoadedImage, LoadedImage | None]]
    ) -> int:
        import torch

        started = time.perf_counter()
        try:
            metric = self.metric(spec.name)
            device = self.device()
            with (
                metric_pool.lock_for((spec.name, spec.precision, "run")),
                torch.inference_mode(),
                numerics_for(spec),
            ):
                x = torch.cat(
                    [to_tensor(target, device, spec.precision) for _, target, _ in members]
                )
                if spec.is_full_reference:
                    output = metric(
                        x,
                        torch.cat(
                            [to_tensor(ref, device, spec.precision) for _, _, ref in members]
                        ),
                    )
                else:
                    output = metric(x)
            raws = (
                output.detach().reshape(-1).cpu().tolist()
                if torch.is_tensor(output)
                else [float(output)]
            )
        except Exception as exc:  # the per-call path runs these again and keeps each reason
            log.warning(
                "batch of %d %s calls failed, running them one by one: %s",
                len(members),
                spec.name,
                exc,
            )
            return 0
        if len(raws) != len(members):
            log.warning(
                "%s returned %d scores for a batch of %d: running them one by one",
                spec.name,
                len(raws),
                len(members),
            )
            return 0
        share = (time.perf_counter() - started) / len(members)
        memo = self._batch_memo()
        stored = 0
        for (key, _, _), raw in zip(members, raws, strict=True):
            if math.isfinite(raw):
                memo[key] = (float(raw), share)
                self.cache.set(key, float(raw))
                stored += 1
        return stored

    def clear_batch(self) -> None:
        """Forget scores computed ahead that no call took (they stay in the cache)."""
        self._batch_memo().clear()


def _is_time_limit(exc: BaseException) -> bool:
    """A Celery worker's soft time limit, raised inside whatever the task was running: the
    step's deadline, not this tool's failure.  It must reach the step, which then fails with it,
    instead of becoming a tool failure that a fallback tool works on past the deadline."""
    exceptions = sys.modules.get("billiard.exceptions")  # loaded wherever a worker runs
    return exceptions is not None and isinstance(exc, exceptions.SoftTimeLimitExceeded)


def check_same_size(tool: str, target: LoadedImage, ref: LoadedImage) -> None:
    if target.stored.shape != ref.stored.shape:
        (tw, th), (rw, rh) = target.size, ref.size
        raise InputError(
            f"{tool} compares pixel by pixel, but {target.path} is {tw}x{th} and the reference "
            f"{ref.path} is {rw}x{rh}; images are never resized silently, resize one first"
        )


def is_one_colour(image: LoadedImage) -> bool:
    """Every pixel equal: no texture for natural-scene statistics to describe.

    A spread-out sample of a thousand pixels settles it for any photo; only a sample all of
    one colour is followed by the full comparison."""
    flat = image.stored.reshape(-1, image.stored.shape[-1])
    first = flat[:1]
    if not (flat[:: max(1, len(flat) // 1000)] == first).all():
        return False
    return bool((flat == first).all())


_DEFAULT: ToolRegistry | None = None
_DEFAULT_LOCK = threading.Lock()


def get_registry(settings: ToolSettings | None = None) -> ToolRegistry:
    """The process-wide registry (created on first call; ``settings`` only count then)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = ToolRegistry(settings)
        return _DEFAULT


def execute_tool(
    tool: str, image: ImageInput, reference: ImageInput | None = None, **options: Any
) -> ToolResult:
    """Run one tool with the process-wide registry."""
    return get_registry().execute_tool(tool, image, reference, **options)
