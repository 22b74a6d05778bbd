"""Fit the normalization of FR tools the paper gives no parameters for (PSNR, MS-SSIM, VSI).

The paper's Table 5 maps SSIM, FSIM, VIF and GMSD onto [1, 5] (fitted on KADID-10k). We have no
KADID here, so we transfer that calibration: degrade real photos ourselves (blur, noise, JPEG,
contrast, brightness, at four levels each), take the mean normalized score of those four tools on
each pair as the target, and fit each uncalibrated tool's five-parameter logistic to it.  The
fitted parameters go into ``iqa_tools/metadata/tools.json`` with ``source`` saying so.

    python scripts/fit_fr_mappings.py ../shared/data/livec-dev/images --limit 12
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter
from scipy.stats import spearmanr

from iqa_tools import ToolRegistry, ToolSettings, load_image
from iqa_tools.images import LoadedImage, digest_bytes
from iqa_tools.normalize import fit_logistic5, logistic5

ANCHORS = ["SSIM", "FSIM", "VIF", "GMSD"]
FITTED = ["PSNR", "MS-SSIM", "VSI"]


def degradations(image: Image.Image) -> list[tuple[str, Image.Image]]:
    out: list[tuple[str, Image.Image]] = []
    rng = np.random.default_rng(0)
    for radius in (0.8, 1.6, 3.2, 6.4):
        out.append((f"blur{radius}", image.filter(ImageFilter.GaussianBlur(radius))))
    array = np.asarray(image, dtype=np.float32) / 255
    for sigma in (0.02, 0.05, 0.1, 0.2):
        noisy = np.clip(array + rng.normal(0, sigma, array.shape), 0, 1)
        out.append((f"noise{sigma}", Image.fromarray((noisy * 255).round().astype(np.uint8))))
    for quality in (50, 20, 10, 4):
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=quality)
        out.append((f"jpeg{quality}", Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")))
    for factor in (0.8, 0.6, 0.4, 0.2):
        out.append((f"contrast{factor}", ImageEnhance.Contrast(image).enhance(factor)))
    for factor in (0.7, 0.5, 1.3, 1.7):
        out.append((f"bright{factor}", ImageEnhance.Brightness(image).enhance(factor)))
    return out


def as_loaded(image: Image.Image, name: str) -> LoadedImage:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    data = buffer.getvalue()
    return LoadedImage(path=name, digest=digest_bytes(data), data=data)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("images", type=Path)
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--out", type=Path, default=Path("fr_mappings.json"))
    args = parser.parse_args()

    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="memory"))
    paths = sorted(args.images.glob("*"))[: args.limit]
    rows: list[dict[str, float]] = []
    for path in paths:
        reference = Image.fromarray((load_image(path).pixels * 255).round().astype(np.uint8))
        ref = as_loaded(reference, str(path))
        for label, degraded in degradations(reference):
            target = as_loaded(degraded, f"{path.name}:{label}")
            row = {}
            for tool in ANCHORS + FITTED:
                row[tool] = registry.execute_tool(tool, target, ref, allow_fallback=False)
            rows.append(
                {
                    "target": float(np.mean([row[t].normalized_score for t in ANCHORS])),
                    **{t: row[t].raw_score for t in FITTED},
                }
            )
        print(f"{path.name}: {len(rows)} pairs", flush=True)

    target = np.array([r["target"] for r in rows])
    result = {}
    for tool in FITTED:
        raw = np.array([r[tool] for r in rows])
        params = fit_logistic5(raw, target)
        fitted = np.array([logistic5(float(x), **params) for x in raw])
        rmse = float(np.sqrt(np.mean((np.clip(fitted, 1, 5) - target) ** 2)))
        srcc = float(spearmanr(raw, target).statistic)
        result[tool] = {"params": params, "pairs": len(rows), "rmse": rmse, "srcc": srcc}
        print(f"{tool}: SRCC with target {srcc:.3f}, RMSE {rmse:.3f}, params {params}")
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
