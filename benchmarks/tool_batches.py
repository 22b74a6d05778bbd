"""Batched tool scoring (``ToolRegistry.score_batches``) against a bare per-image pyiqa loop.

Four paths over the same photos, each tool in the catalog's precision (BRISQUE, NIQE and PIQE
compute in float64), on one device, all in this process:

* bare loop: the pyiqa metric called on one 1 x 3 x H x W tensor per photo (the baseline);
* per call: ``ToolRegistry.execute_tool`` per photo, no cache (our layer, unbatched);
* batched B: ``score_batches`` on the photos, B per forward pass, then ``execute_tool`` per
  photo taking its share (what a tool worker does with ``AGENTIC_IQA_TOOL_BATCH_SIZE=B``).

Images are decoded once, before any timing, so every path pays only for tensors and models.  A
check that every batched score equals the per-call one (relative 1e-6) guards the figures.

    python benchmarks/tool_batches.py ../shared/data/livec-dev/images \
        --weights-dir ../shared/data/pyiqa-weights --device cpu --limit 32 --batches 8,32
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("images", type=Path)
    parser.add_argument("--weights-dir", type=Path, default=None)
    parser.add_argument("--tools", default="BRISQUE,NIQE,PIQE")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument("--batches", default="8,32", help="batch sizes to try")
    args = parser.parse_args()

    import torch

    from iqa_tools import ToolRegistry, ToolSettings
    from iqa_tools.images import read_image
    from iqa_tools.models import to_tensor

    paths = sorted(p for p in args.images.iterdir() if p.is_file())[: args.limit]
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    settings = ToolSettings(
        device=args.device, tool_cache="none", weights_dir=args.weights_dir, memory_cache_entries=1
    )

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    images = [read_image(p) for p in paths]
    for image in images:
        _ = image.pixels
    registry = ToolRegistry(settings)
    rates: dict[str, dict[str, float]] = {}
    for tool in tools:
        spec = registry.get(tool)
        metric = registry.metric(tool)
        tensors = [to_tensor(image, args.device, spec.precision) for image in images[:2]]
        with torch.inference_mode():  # warm-up: kernels, allocator
            for x in tensors:
                metric(x)
        sync()
        rate = rates.setdefault(tool, {})
        started = time.perf_counter()
        with torch.inference_mode():
            bare = [
                float(metric(to_tensor(image, args.device, spec.precision)).reshape(-1)[0])
                for image in images
            ]
        sync()
        rate["bare loop"] = len(images) / (time.perf_counter() - started)

        started = time.perf_counter()
        single = [registry.execute_tool(tool, image, use_cache=False).raw_score for image in images]
        rate["per call"] = len(images) / (time.perf_counter() - started)
        assert all(abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in zip(bare, single, strict=True))
        for size in (int(b) for b in args.batches.split(",") if b.strip()):
            fresh = ToolRegistry(settings)
            started = time.perf_counter()
            fresh.score_batches([(tool, image, None) for image in images], max_batch=size)
            batched = [fresh.execute_tool(tool, image).raw_score for image in images]
            sync()
            rate[f"batched {size}"] = len(images) / (time.perf_counter() - started)
            worst = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(single, batched, strict=True))
            assert worst <= 1e-6, f"{tool}: batched scores differ by {worst:.2e}"

    print(
        f"{len(images)} photos, device {args.device}, {os.cpu_count()} CPU cores, torch "
        f"{torch.__version__}; images/s and ratio against the bare per-image loop"
    )
    labels = list(next(iter(rates.values())))
    print(f"{'tool':<10}" + "".join(f"{label:>18}" for label in labels))
    for tool, rate in rates.items():
        base = rate["bare loop"]
        print(
            f"{tool:<10}"
            + "".join(f"{rate[label]:>9.1f} ({rate[label] / base:4.2f}x)" for label in labels)
        )


if __name__ == "__main__":
    main()
