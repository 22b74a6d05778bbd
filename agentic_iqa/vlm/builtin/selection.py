"""The builtin tool selection: strengths from the metadata, then a measured preference order.

Preference among tools with no distinctive strength follows published and measured accuracy:
the deep NR models first (Q-Align, MUSIQ, ...), then the classical ones in the order they
correlate with human scores on the FIT part of LIVE-C dev (BRISQUE 0.54, NIQE 0.45, PIQE 0.40
SRCC on 148 photos; the HELD-OUT part is not used to choose, see benchmarks/agent_quality.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NR_PREFERENCE = (
    "QAlign",
    "MUSIQ",
    "CLIPIQA",
    "HyperIQA",
    "DBCNN",
    "TReS",
    "UNIQUE",
    "MANIQA",
    "LIQE",
    "ARNIQA",
    "NIMA",
    "WaDIQaM_NR",
    "BRISQUE",
    "NIQE",
    "PIQE",
)
FR_PREFERENCE = (
    "TOPIQ_FR",
    "DISTS",
    "LPIPS",
    "AHIQ",
    "FSIM",
    "VIF",
    "MS-SSIM",
    "GMSD",
    "SSIM",
    "VSI",
    "CKDN",
    "PieAPP",
    "WaDIQaM_FR",
    "PSNR",
)


def _rank(name: str, order: Sequence[str]) -> int:
    return order.index(name) if name in order else len(order)


def select(
    distortion_set: Mapping[str, Sequence[str]],
    tools: Sequence[Mapping[str, Any]],
    reference_mode: str | None,
) -> dict[str, dict[str, str]]:
    """Pick one available tool per (object, distortion); FR tools first when a reference exists."""
    available = [t for t in tools if t.get("available", True)]
    full_reference = [t for t in available if t["type"] == "FR"]
    no_reference = [t for t in available if t["type"] == "NR"]
    pool, order = (
        (full_reference, FR_PREFERENCE)
        if (reference_mode == "Full-Reference" and full_reference)
        else (no_reference, NR_PREFERENCE)
    )
    if not pool:
        return {}
    chosen: dict[str, dict[str, str]] = {}
    for key, distortions in distortion_set.items():
        chosen[key] = {}
        for distortion in distortions:
            strong = [t for t in pool if distortion in t.get("strengths", ())]
            candidates = strong or pool
            best = min(candidates, key=lambda t: _rank(t["name"], order))
            chosen[key][distortion] = best["name"]
    return chosen
