"""Time of the bootstrap intervals a job report computes, against a plain scipy loop.

``bootstrap_ci`` with 1,000 resamples of ``--items`` pairs (default 250), for SRCC (vectorised
over all resamples), KRCC (one call per resample) and the whole ``correlation_report`` (SRCC,
PLCC, logistic PLCC and KRCC with their intervals).  The baseline is the textbook loop over the
same resamples, ``scipy.stats.spearmanr`` / ``kendalltau`` once per resample, measured in the
same process; the ratio is this project's time over the baseline's (below 1: faster).

    .venv/bin/python benchmarks/metrics.py [--items 250] [--resamples 1000] [--runs 3]

(``tests/agentic_iqa/reports/test_metrics.py`` checks the values; this script gives the times.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentic_iqa.reports.metrics import bootstrap_ci, correlation_report, krcc, srcc  # noqa: E402


def noisy_monotone(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Predictions on a 1-5 scale and a MOS that follows them through a sigmoid, plus noise."""
    rng = np.random.default_rng(seed)
    pred = rng.uniform(1.0, 5.0, n)
    mos = 100.0 / (1.0 + np.exp(-2.5 * (pred - 3.0))) + rng.normal(0.0, 6.0, n)
    return pred, mos


def scipy_loop(
    statistic: Callable[..., Any], pred: np.ndarray, mos: np.ndarray, n: int, seed: int = 0
) -> tuple[float, float]:
    """The baseline: one scipy call per resample, then the percentile interval."""
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n):
        index = rng.integers(0, pred.size, size=pred.size)
        values.append(statistic(pred[index], mos[index])[0])
    finite = np.asarray(values)[np.isfinite(values)]
    low, high = np.quantile(finite, [0.025, 0.975])
    return float(low), float(high)


def median_seconds(work: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=250)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    pred, mos = noisy_monotone(args.items)
    n = args.resamples

    cases = {
        "SRCC interval": (
            lambda: bootstrap_ci(srcc, pred, mos, n=n),
            lambda: scipy_loop(stats.spearmanr, pred, mos, n),
        ),
        "KRCC interval": (
            lambda: bootstrap_ci(krcc, pred, mos, n=n),
            lambda: scipy_loop(stats.kendalltau, pred, mos, n),
        ),
        "SRCC + KRCC intervals": (
            lambda: (bootstrap_ci(srcc, pred, mos, n=n), bootstrap_ci(krcc, pred, mos, n=n)),
            lambda: (
                scipy_loop(stats.spearmanr, pred, mos, n),
                scipy_loop(stats.kendalltau, pred, mos, n),
            ),
        ),
        "correlation_report": (
            lambda: correlation_report(list(pred), list(mos), bootstrap=n),
            lambda: (
                scipy_loop(stats.spearmanr, pred, mos, n),
                scipy_loop(stats.pearsonr, pred, mos, n),
                scipy_loop(stats.kendalltau, pred, mos, n),
            ),
        ),
    }
    for ours, baseline in cases.values():  # warm up (imports, caches); not timed
        ours()
        baseline()
    print(
        f"{args.items} items, {n} resamples, median of {args.runs} runs "
        f"(Python {sys.version.split()[0]}, numpy {np.__version__})"
    )
    print(f"{'case':<24} {'seconds':>8} {'scipy loop':>11} {'ratio':>7}")
    for label, (ours, baseline) in cases.items():
        mine = median_seconds(ours, args.runs)
        theirs = median_seconds(baseline, args.runs)
        print(f"{label:<24} {mine:8.3f} {theirs:11.3f} {mine / theirs:7.2f}")


if __name__ == "__main__":
    main()
