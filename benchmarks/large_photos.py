"""Camera-sized photos (12 to 100 MP): tiled scoring against the whole image, memory and time.

Each photo is a mosaic of the shared LIVE-C photos (random crops, resized to cells of random
sizes, saved as a JPEG of quality 95): photographic statistics at any size, unlike noise.  For
each size and tool, three ways to score the photo, each in a fresh subprocess so that its peak
RSS (``ru_maxrss``) is its own:

* ``pyiqa``: pyiqa's own loop (``create_metric`` once, then the metric called on the file:
  pyiqa decodes it and computes in its default float32): the baseline for time and memory;
* ``whole``: the registry scoring the whole image at once (catalog precision: float64 with the
  separable normalisation), the score tiling must equal;
* ``tiled``: the registry with its defaults, which score such a photo tile by tile.

Times are of one scoring call per photo (the fastest of ``--repeat``), file decoding included,
model creation not.  A way whose estimated peak does not fit in the memory available
(``--max-gb``) is skipped and shown as ``-``.  The ratios are tiled against pyiqa in the same
run, and the last column is the largest relative difference between the tiled and the
whole-image score.  On CUDA each row ends with the peak GPU memory of the three ways
(``max_memory_allocated``).

    python benchmarks/large_photos.py --sizes 12,24 --device cpu --repeat 2 \\
        --photos ../shared/data/livec-dev/images --weights-dir ../shared/data/pyiqa-weights
    python benchmarks/large_photos.py --sizes 50,100 --ways tiled      # where pyiqa cannot
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(
    os.environ.get("AGENTIC_IQA_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data")
)
#: Peak GB of each way beyond a process's own (torch and pyiqa loaded: about 0.75), per
#: megapixel: 12-MP measurements on a CPU, with room.  What decides whether a way is tried.
GB_PER_MP = {
    "pyiqa": {"BRISQUE": 0.15, "NIQE": 0.5, "PIQE": 0.15},
    "whole": {"BRISQUE": 0.2, "NIQE": 0.2, "PIQE": 0.15},
}
BASE_GB = 1.0
WAYS = ("pyiqa", "whole", "tiled")


def mosaic(megapixels: float, photos: list[Path], path: Path, seed: int) -> tuple[int, int]:
    """A 4:3 photo of about ``megapixels`` MP made of resized crops of ``photos``."""
    from PIL import Image

    rng = random.Random(seed)
    width = round(math.sqrt(megapixels * 1e6 * 4 / 3)) | 1  # odd sizes: the awkward case
    height = round(megapixels * 1e6 / width)
    canvas = Image.new("RGB", (width, height))
    top = 0
    while top < height:
        row_height = rng.randint(height // 8, height // 3)
        left = 0
        while left < width:
            cell_width = rng.randint(width // 10, width // 3)
            with Image.open(rng.choice(photos)) as source:
                source = source.convert("RGB")
                side = rng.randint(source.width // 2, source.width)
                x, y = rng.randint(0, source.width - side), rng.randint(0, source.height - side)
                crop = source.crop((x, y, x + side, y + min(side, source.height - y)))
                canvas.paste(
                    crop.resize((cell_width, row_height), Image.Resampling.LANCZOS), (left, top)
                )
            left += cell_width
        top += row_height
    canvas.save(path, quality=95)
    return width, height


def child(way: str, tool: str, path: Path, device: str, weights: Path | None, repeat: int) -> None:
    """Score one photo one way (``repeat`` times: the fastest counts) and print the result as
    JSON; run in a fresh process."""
    import torch

    if way == "pyiqa":
        import pyiqa

        name = tool.lower()
        files = {"brisque": "brisque_svm_weights.pth", "niqe": "niqe_modelparameters.mat"}
        kwargs = (
            {"pretrained_model_path": str(weights / files[name])}
            if weights is not None and name in files
            else {}
        )
        metric = pyiqa.create_metric(name, device=torch.device(device), **kwargs)

        def score() -> float:
            return float(metric(str(path)).reshape(-1)[0])
    else:
        from iqa_tools import ToolRegistry, ToolSettings

        overrides = {} if way == "tiled" else {"tile_above_pixels": 10**12}
        # No memory budget: the whole-image way is measured where the budget would refuse it.
        registry = ToolRegistry(
            ToolSettings(
                device=device,
                tool_cache="none",
                weights_dir=weights,
                tool_memory=10**15,
                **overrides,
            )
        )
        registry.metric(tool)

        def score() -> float:
            return registry.execute_tool(
                tool, path, use_cache=False, allow_fallback=False
            ).raw_score

    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        raw = score()  # a float: the device has finished
        times.append(time.perf_counter() - started)
    seconds = min(times)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    gpu_gb = torch.cuda.max_memory_allocated() / 1024**3 if device == "cuda" else None
    print(json.dumps({"raw": raw, "seconds": seconds, "rss_gb": peak_gb, "gpu_gb": gpu_gb}))


def run(way: str, tool: str, path: Path, args: argparse.Namespace) -> dict | None:
    command = [
        sys.executable,
        __file__,
        "--child",
        way,
        tool,
        str(path),
        "--device",
        args.device,
        "--repeat",
        str(args.repeat),
    ]
    if args.weights_dir is not None:
        command += ["--weights-dir", str(args.weights_dir)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(
            f"  {way} {tool} failed ({done.returncode}): {done.stderr.strip()[-300:]}",
            file=sys.stderr,
        )
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024**2
    return 8.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="12,24", help="megapixels, e.g. 12,24,50,100")
    parser.add_argument("--tools", default="BRISQUE,NIQE,PIQE")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--photos",
        type=Path,
        default=DATA / "livec-dev" / "images",
        help="folder of photos the mosaics are made of",
    )
    parser.add_argument("--weights-dir", type=Path, default=DATA / "pyiqa-weights")
    parser.add_argument(
        "--max-gb",
        type=float,
        default=None,
        help="skip a way whose estimated peak is above this (default: 80%% of "
        "the memory available at start)",
    )
    parser.add_argument(
        "--ways",
        default=",".join(WAYS),
        help="which of pyiqa, whole, tiled to run (default: all three)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="score each photo this many times per way; the fastest counts",
    )
    parser.add_argument("--child", nargs=3, metavar=("WAY", "TOOL", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    weights = args.weights_dir if args.weights_dir and args.weights_dir.is_dir() else None
    args.weights_dir = weights
    if args.child:
        way, tool, path = args.child
        child(way, tool, Path(path), args.device, weights, max(1, args.repeat))
        return

    photos = sorted(
        p for p in args.photos.iterdir() if p.suffix.lower() in {".jpg", ".jpeg", ".png", ".bmp"}
    )
    sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    ways = [way for way in WAYS if way in args.ways.split(",")]
    budget = args.max_gb if args.max_gb is not None else 0.8 * available_gb()
    workdir = Path(tempfile.mkdtemp(prefix="large-photos-"))
    print(f"device {args.device}, memory budget {budget:.1f} GB, photos from {args.photos}")
    header = (
        f"{'MP':>4} {'size':>11} {'tool':<8} {'pyiqa s':>8} {'GB':>5} {'whole s':>8} "
        f"{'GB':>5} {'tiled s':>8} {'GB':>5} {'s ratio':>7} {'GB ratio':>8} "
        f"{'max rel diff':>12}"
    )
    print(header)
    print("-" * len(header))
    for index, megapixels in enumerate(sizes):
        path = workdir / f"mosaic_{megapixels:g}mp.jpg"
        width, height = mosaic(megapixels, photos, path, seed=index)
        for tool in tools:
            results: dict[str, dict | None] = {}
            for way in ways:
                estimate = BASE_GB + GB_PER_MP.get(way, {}).get(tool, 0.0) * width * height / 1e6
                results[way] = run(way, tool, path, args) if estimate <= budget else None
            print(row(megapixels, width, height, tool, results, args.device), flush=True)
        path.unlink()


def row(
    megapixels: float,
    width: int,
    height: int,
    tool: str,
    results: dict[str, dict | None],
    device: str,
) -> str:
    def cells(way: str) -> str:
        found = results.get(way)
        return (
            f"{'-':>8} {'-':>5}"
            if found is None
            else f"{found['seconds']:>8.2f} {found['rss_gb']:>5.2f}"
        )

    base, whole, tiled = (results.get(way) for way in WAYS)
    time_ratio = f"{tiled['seconds'] / base['seconds']:>7.2f}" if base and tiled else f"{'-':>7}"
    memory_ratio = f"{tiled['rss_gb'] / base['rss_gb']:>8.2f}" if base and tiled else f"{'-':>8}"
    difference = (
        f"{abs(tiled['raw'] - whole['raw']) / abs(whole['raw']):>12.1e}"
        if tiled and whole
        else f"{'-':>12}"
    )
    line = (
        f"{megapixels:>4g} {f'{width}x{height}':>11} {tool:<8} {cells('pyiqa')} "
        f"{cells('whole')} {cells('tiled')} {time_ratio} {memory_ratio} {difference}"
    )
    if device == "cuda":
        line += "  GPU GB " + "/".join(
            "-" if results.get(way) is None else f"{results[way]['gpu_gb']:.2f}" for way in WAYS
        )
    return line


if __name__ == "__main__":
    main()
