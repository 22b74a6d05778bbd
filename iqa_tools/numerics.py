"""BRISQUE, NIQE and PIQE in float64 at float32's speed: their local normalisation, separable.

The three normalise the image by its local Gaussian mean and deviation (pyiqa's
``normalize_img_with_gauss``): on a 0-255 scale the local variance E[x²] - μ² cancels most of
float32's digits, and CUDA runs float32 convolutions in TF32, so in float32 their scores differ
between CPU and GPU by points (BRISQUE 7.8, PIQE 2.4 on LIVE-C photos).  That normalisation is
where they must compute in float64, and it is also all that float64 costs them: a float64 7x7
convolution has no fast kernel on a CPU (ten times a float32 one), while the rest of each metric
runs in float64 about as fast as in float32 (measured in ``benchmarks/tool_precision.py``).

So the tools keep ``"precision": "float64"`` and the Gaussian, which is separable, is applied
as two 1-D passes of 7 taps in float64 (scipy's 1-D filters on a CPU, two grouped convolutions
on CUDA): float32's speed, float64's agreement between devices.  The kernel is MATLAB's
``fspecial('gaussian', 7, 7/6)`` in float64; pyiqa rounds it to float32 first, which moves
its own float64 BRISQUE by up to about 2 raw points (never past IQA-PyTorch's published values'
tolerance: ``tests/iqa_tools/test_registry.py``).  Scores computed so are cached under
:data:`NUMERICS_TAG`, apart from any computed before.

The steps are replaced once in pyiqa's modules by :func:`install`; a replacement computes so
only inside :func:`separable_normalisation`, which the registry enters around such a tool's
forward pass, so pyiqa behaves as shipped for any other caller in the process.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: The pyiqa modules whose metrics normalise by local mean and deviation.
NORMALISING_MODULES = ("pyiqa.archs.brisque_arch", "pyiqa.archs.niqe_arch", "pyiqa.archs.piqe_arch")
#: Part of the cache key of scores computed with the separable normalisation.
NUMERICS_TAG = "sepnorm1"

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("iqa_tools_separable", default=False)
_INSTALL_LOCK = threading.Lock()
_MARK = "__iqa_tools_separable__"


def _gaussian_1d(size: int, sigma: float, like: Any) -> Any:
    """The 1-D factor of pyiqa's Gaussian (MATLAB's ``fspecial('gaussian', size, sigma)``,
    separable), scaled so that the 2-D kernel sums to what pyiqa's sums to: pyiqa rounds its
    kernel to float32, and the sum's rounding (1e-8 for 7 taps) biases every local variance
    by about that times μ², which BRISQUE's scores feel; the rest of the rounding does not."""
    return _taps(size, sigma).to(like)


@functools.lru_cache(maxsize=16)
def _taps(size: int, sigma: float) -> Any:
    import torch
    from pyiqa.matlab_utils.functions import fspecial

    half = (size - 1) / 2.0
    taps = torch.exp(-(torch.arange(-half, half + 1, dtype=torch.float64) ** 2) / (2 * sigma**2))
    total = float(fspecial(size, sigma, 1).to(torch.float64).sum())
    return taps / taps.sum() * total**0.5


def normalize_in_float64(
    img: Any, kernel_size: int = 7, sigma: float = 7.0 / 6, C: int = 1, padding: str = "same"
) -> Any:
    """pyiqa's ``normalize_img_with_gauss`` computed in float64 with the Gaussian applied as
    two 1-D passes; returned in the input's dtype."""
    import torch
    from pyiqa.matlab_utils.padding import ExactPadding2d

    padded = ExactPadding2d(kernel_size, mode=padding)(img.to(torch.float64))
    return normalize_padded(padded, kernel_size, sigma, C).to(img.dtype)


def normalize_padded(padded: Any, kernel_size: int = 7, sigma: float = 7.0 / 6, C: int = 1) -> Any:
    """The normalisation of the centre of a float64 block whose outer ``kernel_size // 2`` rows
    and columns are its padding: one function for the whole image and for a tile with its halo
    (:mod:`iqa_tools.tiling`), so that both compute every pixel with the same operations."""
    import torch
    import torch.nn.functional as F

    if kernel_size % 2 != 1:
        raise ValueError(f"an odd kernel size is needed, got {kernel_size}")
    half = kernel_size // 2
    taps = _gaussian_1d(kernel_size, sigma, padded)
    if padded.device.type == "cpu":  # scipy's 1-D filters and numpy in place: no torch copies
        return torch.from_numpy(_normalize_padded_numpy(padded.numpy(), taps.numpy(), half, C))
    vertical = taps.view(1, 1, kernel_size, 1).repeat(padded.shape[1], 1, 1, 1)
    horizontal = taps.view(1, 1, 1, kernel_size).repeat(padded.shape[1], 1, 1, 1)

    def blur(values: Any) -> Any:
        passed = F.conv2d(values, vertical, groups=values.shape[1])
        return F.conv2d(passed, horizontal, groups=values.shape[1])

    x = padded[..., half:-half, half:-half]
    mu = blur(padded)
    variance = (blur(padded * padded) - mu * mu).abs()
    deviation = torch.sqrt(variance + torch.finfo(torch.float64).eps)
    return (x - mu) / (deviation + C)


def _normalize_padded_numpy(padded: Any, weights: Any, half: int, C: float) -> Any:
    """Compute :func:`normalize_padded` on a CPU: the same operations in the same order (so the
    same bits), each filter pass computing only the rows or columns kept, the arithmetic in
    place."""
    import numpy as np
    import torch
    from scipy.ndimage import correlate1d

    def blur(values: Any) -> Any:
        rows = correlate1d(values, weights, axis=-2)[..., half:-half, :]
        return correlate1d(rows, weights, axis=-1)[..., half:-half]

    mu = blur(padded)
    variance = blur(padded * padded)
    variance -= mu * mu
    np.abs(variance, out=variance)
    variance += np.finfo(np.float64).eps
    torch.from_numpy(variance).sqrt_()  # torch's square root, which numpy's differs from by an ulp
    variance += C
    normalised = np.subtract(padded[..., half:-half, half:-half], mu)
    normalised /= variance
    return normalised


def _when_active(step: Callable[..., Any], replacement: Callable[..., Any]) -> Callable[..., Any]:
    """Return ``step`` computing as ``replacement`` inside :func:`separable_normalisation`."""

    @functools.wraps(step)
    def when_active(*args: Any, **kwargs: Any) -> Any:
        if not _ACTIVE.get():
            return step(*args, **kwargs)
        return replacement(*args, **kwargs)

    setattr(when_active, _MARK, True)
    return when_active


def install() -> None:
    """Put the replacements in pyiqa's modules (once per process; idempotent): this module's
    normalisation and :mod:`iqa_tools.nss`'s statistics."""
    from . import nss

    replacements = [
        (name, "normalize_img_with_gauss", normalize_in_float64) for name in NORMALISING_MODULES
    ]
    replacements += [
        (name, attribute, getattr(nss, own)) for name, attribute, own in nss.REPLACEMENTS
    ]
    with _INSTALL_LOCK:
        for name, attribute, replacement in replacements:
            module: Any = importlib.import_module(name)  # pyiqa's, untyped
            step = getattr(module, attribute)
            if not getattr(step, _MARK, False):
                setattr(module, attribute, _when_active(step, replacement))


@contextmanager
def separable_normalisation() -> Iterator[None]:
    """Within the block (this thread, this context) the three metrics normalise separably."""
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
