"""Does a tool give the same score on CPU and CUDA?  float32 (before) against float64 (after).

Every tool runs through our ToolRegistry (``use_cache=False``) twice per device: once with its
precision forced to float32 (what every tool ran in before ``precision`` existed: the baseline)
and once forced to float64 (what ``tools.json`` now asks of BRISQUE, NIQE and PIQE), the two
interleaved image by image so both see the same machine load.  Printed per tool:

* consistency, in raw points: max, median and count above ``--threshold`` of |cuda - cpu| at
  each precision, of |cpu float32 - cpu float64| (float32's own error on the CPU), and the
  largest change in the normalized [1, 5] score;
* speed: median ms per image per device and precision, and the ratio float64 / float32.

Without a GPU (or with ``--devices cpu``) only the CPU rows are printed, with a note.  On CUDA,
pyiqa runs every forward with cuDNN's TF32 allowed, so float32 convolutions there keep only 10
mantissa bits; float64 is never TF32.  ``--clipped K`` adds K copies of the first photos with
their top 40 % burnt out to white, a flat region where the metrics divide rounding noise by
rounding noise: the hardest case for device independence.

    python benchmarks/device_consistency.py ../shared/data/livec-dev/images \\
        --weights-dir ../shared/data/pyiqa-weights --tid-dir ../shared/data/tid2013-calibration \\
        --limit 20 --devices cpu,cuda
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from iqa_tools import (
    LoadedImage,
    ToolFailure,
    ToolRegistry,
    ToolSettings,
    load_catalog,
    load_image,
)

PRECISIONS = ("float32", "float64")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp"}


@dataclass
class Runs:
    """Raw and normalized scores and seconds per image, for one (device, precision, tool, set)."""

    raw: list[float] = field(default_factory=list)
    normalized: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    failures: int = 0


def forced_precision_override(folder: Path, tools: list[str], precision: str) -> Path:
    """A metadata override that sets ``precision`` for every benchmarked tool."""
    path = folder / f"precision-{precision}.json"
    path.write_text(json.dumps({"tools": {name: {"precision": precision} for name in tools}}))
    return path


def clipped_copies(photos: list[Path], count: int, folder: Path) -> list[Path]:
    """Copies of the first ``count`` photos with their top 40 % set to white (burnt-out sky)."""
    copies = []
    for path in photos[:count]:
        pixels = np.asarray(Image.open(path).convert("RGB")).copy()
        pixels[: int(pixels.shape[0] * 0.4)] = 255
        copy = folder / f"{path.stem}_clipped.png"
        Image.fromarray(pixels).save(copy)
        copies.append(copy)
    return copies


def run_set(
    registries: dict[str, ToolRegistry],
    tool: str,
    pairs: list[tuple[LoadedImage, LoadedImage | None]],
) -> dict[str, Runs]:
    """Score every pair at each precision, alternating precisions image by image."""
    runs = {precision: Runs() for precision in registries}
    for registry in registries.values():  # build the models before timing
        registry.metric(tool)
    for target, ref in pairs:
        for precision, registry in registries.items():
            started = time.perf_counter()
            try:
                result = registry.execute_tool(
                    tool, target, ref, use_cache=False, allow_fallback=False
                )
            except ToolFailure:
                runs[precision].failures += 1
                runs[precision].raw.append(math.nan)
                runs[precision].normalized.append(math.nan)
                continue
            runs[precision].seconds.append(time.perf_counter() - started)
            runs[precision].raw.append(result.raw_score)
            runs[precision].normalized.append(result.normalized_score)
    return runs


def gaps(a: list[float], b: list[float]) -> list[float]:
    return [abs(x - y) for x, y in zip(a, b, strict=True) if math.isfinite(x - y)]


def describe(a: Runs, b: Runs, threshold: float) -> str:
    raw, normalized = gaps(a.raw, b.raw), gaps(a.normalized, b.normalized)
    if not raw:
        return f"{'-':>10} {'-':>10} {'-':>7} {'-':>9}"
    over = sum(g > threshold for g in raw)
    return (
        f"{max(raw):>10.3g} {statistics.median(raw):>10.3g} {f'{over}/{len(raw)}':>7} "
        f"{max(normalized):>9.3g}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("images", type=Path, help="folder of photos (NR tools score each)")
    parser.add_argument("--weights-dir", type=Path, default=None)
    parser.add_argument("--limit", type=int, default=40, help="photos per tool")
    parser.add_argument("--devices", default="cpu,cuda", help="comma-separated: cpu, cuda")
    parser.add_argument("--tools", default="BRISQUE,NIQE,PIQE", help="comma-separated NR tools")
    parser.add_argument(
        "--tid-dir",
        type=Path,
        default=None,
        help="tid2013-calibration folder: adds SSIM and PSNR on its distorted/reference pairs",
    )
    parser.add_argument(
        "--clipped",
        type=int,
        default=0,
        help="also score this many photos with a burnt-out top 40 %%",
    )
    parser.add_argument(
        "--threshold", type=float, default=0.01, help="raw-score gap counted in the n> column"
    )
    args = parser.parse_args()

    import torch

    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    notes = []
    if "cuda" in devices and not torch.cuda.is_available():
        devices.remove("cuda")
        notes.append("cuda skipped: torch.cuda.is_available() is False on this machine")

    photos = sorted(p for p in args.images.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[
        : args.limit
    ]
    workdir = Path(tempfile.mkdtemp(prefix="iqa-device-"))
    nr_tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    sets: list[tuple[str, str, list[tuple[LoadedImage, LoadedImage | None]]]] = []
    loaded = [(load_image(p), None) for p in photos]
    sets += [(tool, "photos", loaded) for tool in nr_tools]
    if args.clipped:
        clipped = [(load_image(p), None) for p in clipped_copies(photos, args.clipped, workdir)]
        sets += [(tool, "clipped", clipped) for tool in nr_tools]
    fr_tools: list[str] = []
    if args.tid_dir is not None:
        fr_tools = ["SSIM", "PSNR"]
        tid_pairs = [
            (load_image(p), load_image(args.tid_dir / "ref" / p.name))
            for p in sorted((args.tid_dir / "dist").glob("*.png"))
        ]
        sets += [(tool, "tid2013", tid_pairs) for tool in fr_tools]

    overrides = {
        precision: forced_precision_override(workdir, nr_tools + fr_tools, precision)
        for precision in PRECISIONS
    }
    catalog_precision = {spec.name: spec.precision for spec in load_catalog()}

    print(
        f"{len(photos)} photos from {args.images}"
        + (f", {args.clipped} clipped copies" if args.clipped else "")
        + (f", {len(tid_pairs)} TID2013 pairs" if fr_tools else "")
    )
    print(
        f"torch {torch.__version__}, CPU threads {torch.get_num_threads()}"
        + (f", GPU {torch.cuda.get_device_name(0)}" if "cuda" in devices else "")
    )
    for note in notes:
        print(f"note: {note}")

    results: dict[tuple[str, str, str, str], Runs] = {}
    for device in devices:
        registries = {
            precision: ToolRegistry(
                ToolSettings(
                    device=device,
                    weights_dir=args.weights_dir,
                    tool_cache="none",
                    metadata_overrides=[overrides[precision]],
                )
            )
            for precision in PRECISIONS
        }
        for tool, name, pairs in sets:
            started = time.perf_counter()
            for precision, runs in run_set(registries, tool, pairs).items():
                results[device, precision, tool, name] = runs
            print(
                f"  {device}: {tool} on {name} done in {time.perf_counter() - started:.1f}s",
                flush=True,
            )

    print(
        f"\nconsistency, raw points (n>: gaps above {args.threshold:g}; "
        "norm: largest change of the [1, 5] score)"
    )
    header = (
        f"{'tool':<8} {'set':<8} {'tools.json':<10} {'comparison':<26} {'max':>10} "
        f"{'median':>10} {'n>':>7} {'norm':>9}"
    )
    print(header)
    print("-" * len(header))
    comparisons = [("cpu float32 vs cpu float64", ("cpu", "float32"), ("cpu", "float64"))]
    if "cuda" in devices:
        comparisons += [
            ("cuda vs cpu, float32", ("cuda", "float32"), ("cpu", "float32")),
            ("cuda vs cpu, float64", ("cuda", "float64"), ("cpu", "float64")),
            ("cuda float32 vs cpu float64", ("cuda", "float32"), ("cpu", "float64")),
        ]
    for tool, name, _ in sets:
        for label, (da, pa), (db, pb) in comparisons:
            if (da, pa, tool, name) in results and (db, pb, tool, name) in results:
                line = describe(
                    results[da, pa, tool, name], results[db, pb, tool, name], args.threshold
                )
                print(f"{tool:<8} {name:<8} {catalog_precision[tool]:<10} {label:<26} {line}")

    print("\nspeed, median ms per image (ratio: float64 / float32)")
    header = (
        f"{'tool':<8} {'set':<8} {'device':<6} {'float32':>9} {'float64':>9} {'ratio':>7} "
        f"{'failed':>7}"
    )
    print(header)
    print("-" * len(header))
    for tool, name, _ in sets:
        for device in devices:
            single, double = (results[device, p, tool, name] for p in PRECISIONS)
            if not single.seconds or not double.seconds:
                continue
            ms32, ms64 = (statistics.median(r.seconds) * 1000 for r in (single, double))
            print(
                f"{tool:<8} {name:<8} {device:<6} {ms32:>9.1f} {ms64:>9.1f} "
                f"{ms64 / ms32:>7.2f} {single.failures + double.failures:>7}"
            )


if __name__ == "__main__":
    main()
