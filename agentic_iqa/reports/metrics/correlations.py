"""Compute SRCC, PLCC and KRCC: scipy's below :data:`LARGE` pairs, lean forms above it.

The lean forms follow scipy's definitions in a few arrays of the input's size, so a report of a
million items stays in bounded memory.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# scipy (about half a second to import) is imported in the functions that use it: the package
# is imported by commands that never correlate anything (``eval status`` reads answer letters).

#: Above this many pairs the point estimates are computed by :func:`_lean_srcc`,
#: :func:`_lean_plcc` and :func:`_lean_krcc`: the same definitions as scipy's, in a few arrays
#: of the input's size (scipy's take 90 to 150 MB at a million pairs; a report of a million
#: items must stay within 300 MB).  Below it scipy's own, so every smaller job reports what it
#: always did.
LARGE = 50_000


def paired_arrays(
    pred: Sequence[float] | np.ndarray, mos: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``pred`` and ``mos`` as float arrays, refused unless 1-D and of equal length."""
    x = np.asarray(pred, dtype=float)
    y = np.asarray(mos, dtype=float)
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape:
        raise ValueError(
            f"pred and mos must be 1-D and of equal length, got shapes {x.shape} and {y.shape}"
        )
    return x, y


def _quiet(fn: Callable[[], Any]) -> Any:
    """scipy warns (and returns NaN) on constant input; callers here check for NaN instead."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def srcc(pred: Sequence[float] | np.ndarray, mos: Sequence[float] | np.ndarray) -> float:
    """Spearman rank correlation (NaN when either side is constant)."""
    from scipy import stats

    x, y = paired_arrays(pred, mos)
    if x.size > LARGE:
        return _lean_srcc(x, y)
    return float(_quiet(lambda: stats.spearmanr(x, y).statistic))


def plcc(pred: Sequence[float] | np.ndarray, mos: Sequence[float] | np.ndarray) -> float:
    """Pearson linear correlation of the raw predictions (NaN when either side is constant)."""
    from scipy import stats

    x, y = paired_arrays(pred, mos)
    if x.size > LARGE:
        return _lean_plcc(x, y)
    return float(_quiet(lambda: stats.pearsonr(x, y).statistic))


def krcc(pred: Sequence[float] | np.ndarray, mos: Sequence[float] | np.ndarray) -> float:
    """Kendall rank correlation, tau-b (NaN when either side is constant)."""
    from scipy import stats

    x, y = paired_arrays(pred, mos)
    if x.size > LARGE:
        return _lean_krcc(x, y)
    return float(_quiet(lambda: stats.kendalltau(x, y).statistic))


# -- the same statistics for many pairs, in bounded memory ----------------------------------------


def _lean_plcc(x: np.ndarray, y: np.ndarray, *, own: bool = False) -> float:
    """Pearson's r as scipy computes it (centred, then divided by a norm taken over the largest
    deviation), in two arrays of the input's size; ``own``: x and y may be overwritten."""
    if (
        x.size < 2
        or np.all(x == x[0])
        or np.all(y == y[0])
        or not (np.isfinite(x).all() and np.isfinite(y).all())
    ):
        return math.nan
    xm = _unit(x, own=own)
    ym = _unit(y, own=own)
    return float(min(1.0, max(-1.0, float(np.dot(xm, ym)))))


def _unit(values: np.ndarray, *, own: bool = False) -> np.ndarray:
    """``values`` centred and divided by their norm, the norm taken of the centred values over
    their largest magnitude (no overflow), as scipy's pearsonr does; in place when ``own``."""
    mean = values.mean()
    centred = values if own else values.copy()
    centred -= mean
    largest = float(max(centred.max(), -centred.min()))
    scaled = centred / largest
    norm = largest * math.sqrt(float(np.dot(scaled, scaled)))
    del scaled
    centred /= norm
    return centred


def _sorted_runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A stable argsort of ``values``, where each run of equal values starts in that order,
    and each run's length."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    change = np.empty(values.size, dtype=bool)
    change[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=change[1:])
    del ordered
    starts = np.flatnonzero(change)
    del change
    sizes = np.diff(starts, append=values.size)
    return order, starts, sizes


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks with ties averaged, equal to ``scipy.stats.rankdata`` (half-integers, so
    exactly), in a few arrays of the input's size."""
    order, starts, sizes = _sorted_runs(values)
    mean_rank = 0.5 * (starts + sizes + starts + 1)
    del starts
    ranks = np.empty(values.size, dtype=float)
    ranks[order] = np.repeat(mean_rank, sizes)
    return ranks


def _lean_srcc(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho: Pearson's r of the average ranks, as scipy defines it."""
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return math.nan
    return _lean_plcc(average_ranks(x), average_ranks(y), own=True)


def dense_ranks(values: np.ndarray) -> np.ndarray:
    """Each value's index among the distinct values, in order (int32: ids below 2**31)."""
    order, starts, sizes = _sorted_runs(values)
    del starts
    dense = np.empty(values.size, dtype=np.int32)
    dense[order] = np.repeat(np.arange(sizes.size, dtype=np.int32), sizes)
    return dense


def _tie_pairs(ordered: np.ndarray) -> int:
    """Pairs of equal values in a sorted array: the sum of t(t-1)/2 over its runs."""
    change = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    sizes = np.diff(np.concatenate(([0], change, [ordered.size])))
    return int((sizes * (sizes - 1) // 2).sum())


def inversions(values: np.ndarray) -> int:
    """Pairs i < j with ``values[i] > values[j]`` (non-negative integers below 2**31).

    Bit by bit from the highest, as a wavelet matrix is built: among values that agree on the
    bits above, every 1 before a 0 at this bit is an inversion; then each such group is
    partitioned stably, its 0s first, for the next bit.  Linear work per bit in int32 arrays,
    no sort: about 45 MB and a few seconds for a million values.
    """
    seq = np.asarray(values).astype(np.int32)
    n = seq.size
    if n < 2:
        return 0
    index = np.arange(n, dtype=np.int32)
    bit = np.empty(n, dtype=np.int32)
    change = np.empty(n, dtype=bool)
    total = 0
    for b in range(int(seq.max()).bit_length() - 1, -1, -1):
        np.right_shift(seq, b, out=bit)
        np.bitwise_and(bit, 1, out=bit)
        high = seq >> (b + 1)
        change[0] = True
        np.not_equal(high[1:], high[:-1], out=change[1:])
        del high
        starts = np.flatnonzero(change).astype(np.int32)
        group = np.cumsum(change, dtype=np.int32)
        group -= 1
        ones = np.cumsum(bit, dtype=np.int32)
        ones -= bit  # ones before each element
        ones -= ones[starts][group]  # ... within its group
        zero = bit == 0
        total += int(ones[zero].sum(dtype=np.int64))
        last = np.empty_like(starts)
        last[:-1] = starts[1:] - 1
        last[-1] = n - 1
        zeros_in = (last - starts + 1) - (ones[last] + bit[last])
        del last
        start = starts[group]
        dest = index - start
        dest -= ones  # a 0 goes after the 0s before it in its group
        dest += start
        np.copyto(dest, start + zeros_in[group] + ones, where=~zero)  # a 1 after all its 0s
        del start, group, zero, ones, starts, zeros_in
        moved = np.empty_like(seq)
        moved[dest] = seq
        seq = moved
        del dest
    return total


def _lean_krcc(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b as scipy computes it (the same integer counts of tied and discordant
    pairs, the same formula), discordant pairs counted by :func:`inversions`."""
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return math.nan
    size = x.size
    order = np.lexsort((y, x))  # by x, then y: within tied x no pair is discordant
    xs = x[order]
    xtie = _tie_pairs(xs)
    joint = xs[1:] != xs[:-1]
    del xs
    ys = y[order]
    del order
    joint |= ys[1:] != ys[:-1]
    joint = np.flatnonzero(joint) + 1
    sizes = np.diff(np.concatenate(([0], joint, [size])))
    ntie = int((sizes * (sizes - 1) // 2).sum())
    del joint, sizes
    dense = dense_ranks(ys)
    del ys
    counts = np.bincount(dense)
    ytie = int((counts * (counts - 1) // 2).sum())
    del counts
    tot = (size * (size - 1)) // 2
    if xtie == tot or ytie == tot:
        return math.nan
    dis = inversions(dense)
    con_minus_dis = np.int64(tot - xtie - ytie + ntie - 2 * dis)
    tau = con_minus_dis / np.sqrt(np.int64(tot - xtie)) / np.sqrt(np.int64(tot - ytie))
    return float(min(1.0, max(-1.0, float(tau))))
