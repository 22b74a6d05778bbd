"""Per-tool time per image: cold (model creation + first image), warm, and cache hit.

Baseline, measured in the same process: a bare pyiqa loop (``create_metric`` once, then the
metric called on each image path, pyiqa loading the file itself).  The ratio "warm / bare" is
the overhead of our layer (loading, hashing, cache look-up and write, normalization); "hit /
warm" is what the cache saves.

    python benchmarks/tools.py ../shared/data/livec-dev/images \
        --weights-dir ../shared/data/pyiqa-weights --limit 25
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from iqa_tools import ToolRegistry, ToolSettings


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("images", type=Path, help="folder of images (NR tools score each)")
    parser.add_argument("--weights-dir", type=Path, default=None)
    parser.add_argument("--limit", type=int, default=25, help="images per tool")
    parser.add_argument(
        "--tools",
        nargs="*",
        default=None,
        help="default: every NR tool that "
        "can run here, plus weight-free FR tools (image vs. a JPEG copy)",
    )
    args = parser.parse_args()

    import pyiqa
    import torch
    from PIL import Image

    images = sorted(
        p for p in args.images.iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png", ".bmp"}
    )[: args.limit]
    workdir = Path(tempfile.mkdtemp(prefix="iqa-bench-"))
    # FR tools compare each image with a JPEG (quality 30) copy of itself.
    degraded = []
    for path in images:
        copy = workdir / f"{path.stem}_q30.jpg"
        Image.open(path).convert("RGB").save(copy, quality=30)
        degraded.append(copy)

    settings = ToolSettings(
        device="cpu", weights_dir=args.weights_dir, tool_cache=f"sqlite:///{workdir}/scores.sqlite3"
    )
    registry = ToolRegistry(settings)
    names = args.tools or [s.name for s in registry.catalog if registry.availability(s.name).ok]

    print(
        f"{len(images)} images from {args.images}, device cpu, torch threads "
        f"{torch.get_num_threads()}"
    )
    header = (
        f"{'tool':<9} {'type':<4} {'cold s':>7} {'warm ms':>8} {'bare ms':>8} "
        f"{'warm/bare':>9} {'hit ms':>7} {'hit/warm':>9}"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        spec = registry.get(name)
        fr = spec.is_full_reference
        pairs = list(zip(degraded, images, strict=True)) if fr else [(p, None) for p in images]

        started = time.perf_counter()
        registry.execute_tool(name, *pairs[0], allow_fallback=False)
        cold = time.perf_counter() - started

        kwargs = {}
        if spec.weight_kwarg and args.weights_dir:
            kwargs[spec.weight_kwarg] = str(args.weights_dir / spec.pyiqa_weight_files[0].file)
        bare_metric = pyiqa.create_metric(spec.pyiqa_name, device=torch.device("cpu"), **kwargs)

        # Interleave ours and bare image by image, so both see the same machine load.
        warm, bare = [], []
        for target, ref in pairs[1:]:
            t = time.perf_counter()
            registry.execute_tool(name, target, ref, allow_fallback=False)
            warm.append(time.perf_counter() - t)
            t = time.perf_counter()
            with torch.inference_mode():
                float(bare_metric(str(target), str(ref)) if fr else bare_metric(str(target)))
            bare.append(time.perf_counter() - t)

        hits = []
        for target, ref in pairs:
            t = time.perf_counter()
            result = registry.execute_tool(name, target, ref)
            hits.append(time.perf_counter() - t)
            assert result.cached
        w, b, h = (statistics.median(x) * 1000 for x in (warm, bare, hits))
        print(
            f"{name:<9} {spec.type:<4} {cold:>7.2f} {w:>8.1f} {b:>8.1f} {w / b:>9.2f} "
            f"{h:>7.2f} {h / w:>9.4f}"
        )


if __name__ == "__main__":
    main()
