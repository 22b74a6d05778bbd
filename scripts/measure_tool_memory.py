"""Measure the memory of one tool call, the figures behind :mod:`iqa_tools.memory`.

For each tool and size, a fresh process builds the tool's model, scores a 64x64 image (so that
one-time allocations are not counted), reads the photo's bytes, resets its peak RSS
(``/proc/self/clear_refs``, Linux), scores the photo once and reports ``VmHWM`` (the peak
since the reset) minus the RSS just before the call: the call's own peak.  Photos are
generated (smooth random fields plus noise, JPEG quality 90), so no data set is needed.

    python scripts/measure_tool_memory.py                          # every measurable tool
    python scripts/measure_tool_memory.py --tools BRISQUE --sizes 4,24 --tiled
    python scripts/measure_tool_memory.py --decode --sizes 4,24     # Pillow's decode alone

Output: one line per call, with bytes per pixel beyond the uint8 image; the constants in
iqa_tools/memory.py are these, rounded up.  ``--weights-dir`` (default: the shared data
folder's pyiqa-weights) is where BRISQUE's and NIQE's parameter files are.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("AGENTIC_IQA_DATA_DIR", REPO.parent / "shared" / "data"))
TILED = ("BRISQUE", "NIQE", "PIQE", "SSIM", "PSNR")
WHOLE = ("BRISQUE", "NIQE", "PIQE", "SSIM", "PSNR", "MS-SSIM", "GMSD", "VIF", "FSIM", "VSI")


def _status(field: str) -> int:
    """A /proc/self/status figure in bytes (VmRSS, VmHWM)."""
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+)", text).group(1)) * 1024


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def photo(megapixels: float, path: Path, seed: int) -> tuple[int, int]:
    """A 4:3 JPEG of about ``megapixels``: a smooth random field with noise on it."""
    import numpy as np
    from PIL import Image

    width = round((megapixels * 1e6 * 4 / 3) ** 0.5)
    height = round(megapixels * 1e6 / width)
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(
        rng.integers(0, 256, (height // 64 + 2, width // 64 + 2, 3), dtype=np.uint8)
    )
    image = coarse.resize((width, height), Image.Resampling.BICUBIC)
    array = np.asarray(image, dtype=np.int16)
    array = array + rng.integers(-12, 13, array.shape, dtype=np.int16)
    Image.fromarray(np.clip(array, 0, 255).astype(np.uint8)).save(path, quality=90)
    return width, height


def child(
    tool: str,
    image: str,
    reference: str | None,
    tiled: bool,
    weights: str | None,
    decode_only: bool,
) -> None:
    """One measurement, printed as JSON (run in a fresh process)."""
    from iqa_tools import ToolRegistry, ToolSettings
    from iqa_tools.images import read_image

    if decode_only:
        target = read_image(image)
        before = _status("VmRSS")
        _reset_peak()
        _ = target.stored
        print(json.dumps({"call": _status("VmHWM") - before, "process": before}))
        return
    settings = ToolSettings(
        device="cpu",
        tool_cache="none",
        tool_memory=10**15,
        weights_dir=Path(weights) if weights else None,
        **({} if tiled else {"tile_above_pixels": 10**12}),
    )
    registry = ToolRegistry(settings)
    spec = registry.get(tool)
    import numpy as np
    from PIL import Image

    small = Path(tempfile.mkdtemp()) / "small.png"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (192, 192, 3), dtype=np.uint8)).save(small)
    registry.execute_tool(
        spec.name,
        small,
        small if spec.is_full_reference else None,
        use_cache=False,
        allow_fallback=False,
    )
    target = read_image(image)
    ref = read_image(reference) if reference else None
    process = _status("VmRSS")
    _reset_peak()
    registry.execute_tool(spec.name, target, ref, use_cache=False, allow_fallback=False)
    print(json.dumps({"call": _status("VmHWM") - process, "process": process}))


def measure(
    tool: str,
    image: Path,
    reference: Path | None,
    tiled: bool,
    weights: Path | None,
    decode_only: bool = False,
) -> dict[str, int]:
    command = [
        sys.executable,
        __file__,
        "--child",
        tool,
        str(image),
        str(reference) if reference else "-",
        "--tiled" if tiled else "--whole",
    ]
    if weights is not None:
        command += ["--weights-dir", str(weights)]
    if decode_only:
        command.append("--decode")
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{tool} failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tools", default=None, help="comma-separated (default: all measured)")
    parser.add_argument("--sizes", default=None, help="megapixels, e.g. 0.5,1 or 4,24")
    parser.add_argument("--tiled", action="store_true", help="tiled scoring (default: whole)")
    parser.add_argument("--whole", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--decode", action="store_true", help="measure decoding alone")
    parser.add_argument("--weights-dir", type=Path, default=DATA / "pyiqa-weights")
    parser.add_argument(
        "--child", nargs=3, metavar=("TOOL", "IMAGE", "REF"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    weights = args.weights_dir if args.weights_dir and args.weights_dir.is_dir() else None
    if args.child:
        tool, image, reference = args.child
        child(
            tool,
            image,
            None if reference == "-" else reference,
            args.tiled,
            str(weights) if weights else None,
            args.decode,
        )
        return
    default_tools = TILED if args.tiled else WHOLE
    tools = args.tools.split(",") if args.tools else list(default_tools)
    sizes = [
        float(s)
        for s in (args.sizes or ("4,24" if args.tiled or args.decode else "0.5,1")).split(",")
    ]
    workdir = Path(tempfile.mkdtemp(prefix="tool-memory-"))
    mode = "decode" if args.decode else "tiled" if args.tiled else "whole"
    print(
        f"{'tool':<8} {'mode':<6} {'MP':>5} {'call MB':>8} {'B/px':>7} {'B/px-3n':>8} "
        f"{'process MB':>10}"
    )
    for megapixels in sizes:
        image, reference = workdir / "a.jpg", workdir / "b.jpg"
        width, height = photo(megapixels, image, seed=1)
        photo(megapixels, reference, seed=2)
        pixels = width * height
        for tool in ["decode"] if args.decode else tools:
            pair = tool in {"SSIM", "PSNR", "MS-SSIM", "GMSD", "VIF", "FSIM", "VSI"}
            found = measure(
                tool,
                image,
                reference if pair else None,
                args.tiled,
                weights,
                decode_only=args.decode,
            )
            stored = 3 * pixels * (2 if pair else 1)
            print(
                f"{tool:<8} {mode:<6} {pixels / 1e6:>5.1f} {found['call'] / 1e6:>8.0f} "
                f"{found['call'] / pixels:>7.1f} {(found['call'] - stored) / pixels:>8.1f} "
                f"{found['process'] / 1e6:>10.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
