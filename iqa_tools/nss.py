"""BRISQUE's, NIQE's and PIQE's shared statistics, computed once per image and in fewer passes.

Profiled on LIVE-C photos, the three tools spend most of their time in three of pyiqa's steps,
which this module replaces by equivalents that give the same values (to float64's rounding,
about 1e-15 relative; the scores to 1e-6, ``tests/iqa_tools/test_nss.py``):

* ``estimate_aggd_param`` and ``estimate_ggd_param`` (8 calls per photo in BRISQUE, 10 per
  block set in NIQE) build their table of 9,801 gamma ratios with ``lgamma`` on every call and
  walk the image a dozen times; here the table is built once per dtype and device, and the
  sums are taken in fewer passes (:func:`estimate_aggd_param`).
* ``to_y_channel``: all three convert the same RGB tensor to YIQ.  Inside
  :func:`sharing_luma` the luma of the image being scored is computed once and kept with the
  image (:attr:`iqa_tools.images.LoadedImage.derived`) for the next tool.
* ``resize_1d`` (``imresize``, BRISQUE's and NIQE's second scale): pyiqa copies the padded
  luma once per tap of the kernel and gathers rows of the copies; :func:`resize_1d` reads the
  same rows in place and sums the same products, to the bit.  And pyiqa's ``brisque`` resizes
  the luma after its last scale too, never reading it: :func:`brisque` is the same without it.
* the normalisation itself is :mod:`iqa_tools.numerics`'s.

Like :mod:`iqa_tools.numerics`, these take effect only inside
:func:`iqa_tools.numerics.separable_normalisation` (the registry's float64 path); pyiqa behaves
as shipped for any other caller in the process.
"""

from __future__ import annotations

import contextvars
import functools
import math
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

#: (module, attribute, replacement name in this module) put in place by ``numerics.install``.
REPLACEMENTS = (
    ("pyiqa.archs.brisque_arch", "estimate_aggd_param", "estimate_aggd_param"),
    ("pyiqa.archs.brisque_arch", "estimate_ggd_param", "estimate_ggd_param"),
    ("pyiqa.archs.brisque_arch", "brisque", "brisque"),
    ("pyiqa.archs.niqe_arch", "estimate_aggd_param", "estimate_aggd_param"),
    ("pyiqa.archs.brisque_arch", "to_y_channel", "to_y_channel"),
    ("pyiqa.archs.niqe_arch", "to_y_channel", "to_y_channel"),
    ("pyiqa.archs.piqe_arch", "to_y_channel", "to_y_channel"),
    ("pyiqa.matlab_utils.resize", "resize_1d", "resize_1d"),
)

#: The tensor being scored and the memo of the image it was made from (:func:`sharing_luma`).
_LUMA: contextvars.ContextVar[tuple[Any, MutableMapping[Any, Any]] | None] = contextvars.ContextVar(
    "iqa_tools_luma", default=None
)


@functools.lru_cache(maxsize=16)
def _gamma_tables(dtype: Any, device: Any) -> tuple[Any, Any, Any]:
    """pyiqa's grid of shape parameters and its two tables of gamma-function ratios, built as
    pyiqa builds them (a float32 ``arange`` cast to the input's dtype), once."""
    import torch

    with torch.inference_mode(False):  # plain tensors: usable in and out of inference mode
        gamma = torch.arange(0.2, 10 + 0.001, 0.001).to(dtype=dtype, device=device)
        generalised = (
            torch.lgamma(1.0 / gamma) + torch.lgamma(3.0 / gamma) - 2 * torch.lgamma(2.0 / gamma)
        ).exp()
        asymmetric = (
            2 * torch.lgamma(2.0 / gamma) - (torch.lgamma(1.0 / gamma) + torch.lgamma(3.0 / gamma))
        ).exp()
    return gamma, generalised, asymmetric


def estimate_ggd_param(x: Any) -> tuple[Any, Any]:
    """pyiqa's ``estimate_ggd_param`` (shape and deviation of a generalised Gaussian fitted to
    ``x`` of shape b x 1 x h x w) with its table built once."""
    import torch

    gamma, r_table, _ = _gamma_tables(x.dtype, x.device)
    flat = x.reshape(*x.shape[:-2], -1)
    sigma_sq = torch.linalg.vecdot(flat, flat) / flat.shape[-1]
    sigma = sigma_sq.sqrt().squeeze(dim=-1)
    if torch.isclose(sigma, torch.zeros_like(sigma)).all():
        raise AssertionError("Expected image with non zero variance of pixel values")
    mean_abs = flat.abs().mean(dim=-1)
    rho = sigma_sq / mean_abs**2
    return gamma[(rho - r_table).abs().argmin(dim=-1)], sigma


def estimate_aggd_param(block: Any, return_sigma: bool = False) -> tuple[Any, Any, Any]:
    """pyiqa's ``estimate_aggd_param`` (an asymmetric generalised Gaussian fitted to ``block``,
    b x 1 x h x w) with its table built once and fewer passes over the block.

    A zero pixel adds to neither side's sum of squares nor count, so the right side's sum of
    squares is the total's remainder, and the counts and the sum of absolute values come from
    the signs."""
    import torch

    gamma, _, r_gam = _gamma_tables(block.dtype, block.device)
    flat = block.reshape(*block.shape[:-2], -1)
    negative = flat.clamp(max=0)
    sign = flat.sign()  # -1, 0 or 1: its sum and its dot with itself give both counts exactly
    left_sq = torch.linalg.vecdot(negative, negative)
    total_sq = torch.linalg.vecdot(flat, flat)
    nonzero, balance = torch.linalg.vecdot(sign, sign), sign.sum(dim=-1)
    count_left = ((nonzero - balance) / 2).to(torch.float32)
    count_right = ((nonzero + balance) / 2).to(torch.float32)
    left_std = torch.sqrt(left_sq / count_left)
    right_std = torch.sqrt((total_sq - left_sq) / count_right)
    gammahat = left_std / right_std
    mean_abs = torch.linalg.vecdot(flat, sign) / flat.shape[-1]
    rhat = mean_abs.pow(2) / (total_sq / flat.shape[-1])
    rhatnorm = (rhat * (gammahat.pow(3) + 1) * (gammahat + 1)) / (gammahat.pow(2) + 1).pow(2)
    alpha = gamma[(r_gam - rhatnorm).abs().argmin(dim=-1)]
    if return_sigma:
        return alpha, left_std.squeeze(-1), right_std.squeeze(-1)
    scale = (torch.lgamma(1 / alpha) - torch.lgamma(3 / alpha)).exp().sqrt()
    return alpha, left_std.squeeze(-1) * scale, right_std.squeeze(-1) * scale


@contextmanager
def sharing_luma(tensor: Any, memo: MutableMapping[Any, Any]) -> Iterator[None]:
    """Within the block, the luma of ``tensor`` (the image a tool is scoring) is read from
    ``memo`` (kept with the image) or computed once into it."""
    token = _LUMA.set((tensor, memo))
    try:
        yield
    finally:
        _LUMA.reset(token)


def to_y_channel(img: Any, out_data_range: float = 1.0, color_space: str = "yiq") -> Any:
    """pyiqa's ``to_y_channel``, with the luma of the image being scored computed once."""
    from pyiqa.utils import color_util

    shared = _LUMA.get()
    if shared is None or not _same_tensor(img, shared[0]):
        return color_util.to_y_channel(img, out_data_range, color_space)
    memo = shared[1]
    key = ("luma", color_space.lower(), img.dtype, str(img.device))
    luma = memo.get(key)
    if luma is None:
        luma = memo[key] = color_util.to_y_channel(img, 1.0, color_space)
    out = luma * out_data_range
    if out_data_range >= 255:  # pyiqa's rounding, as it writes it
        out = out - out.detach() + out.round()
    return out


def _same_tensor(a: Any, b: Any) -> bool:
    return a is b or (
        a.data_ptr() == b.data_ptr()
        and a.shape == b.shape
        and a.dtype == b.dtype
        and a.stride() == b.stride()
        and a.device == b.device
    )


def brisque(x: Any, *args: Any, **kwargs: Any) -> Any:
    """pyiqa's ``brisque`` without the resize after its last scale, which it never reads."""
    from pyiqa.archs import brisque_arch

    options = dict(
        zip(
            ("kernel_size", "kernel_sigma", "test_y_channel", "sv_coef", "sv", "gamma", "rho"),
            args,
            strict=False,
        ),
        **kwargs,
    )
    if options.get("version", "original") != "original" or len(args) > 7:
        return _original_brisque(x, *args, **kwargs)
    import torch

    kernel_size = options.get("kernel_size", 7)
    sigma = options.get("kernel_sigma", 7 / 6)
    if options.get("test_y_channel", True) and x.size(1) == 3:
        x = brisque_arch.to_y_channel(x, 255.0)
    else:
        x = x * 255
    features = [brisque_arch.natural_scene_statistics(x, kernel_size, sigma)]
    x = brisque_arch.imresize(x, scale=0.5, antialiasing=True)
    features.append(brisque_arch.natural_scene_statistics(x, kernel_size, sigma))
    scaled = brisque_arch.scale_features(torch.cat(features, dim=-1))
    sv = options["sv"].to(x).t()
    kernel_features = brisque_arch.rbf_kernel(
        features=scaled, sv=sv, gamma=options.get("gamma", 0.05)
    )
    return kernel_features @ options["sv_coef"].to(x) - options.get("rho", -153.591)


def _original_brisque(x: Any, *args: Any, **kwargs: Any) -> Any:
    from pyiqa.archs import brisque_arch

    original = getattr(brisque_arch.brisque, "__wrapped__", brisque_arch.brisque)
    return original(x, *args, **kwargs)


def resize_1d(
    x: Any,
    dim: int,
    size: int,
    scale: float,
    kernel: str = "cubic",
    sigma: float = 2.0,
    padding_type: str = "reflect",
    antialiasing: bool = True,
) -> Any:
    """pyiqa's ``resize_1d`` (MATLAB's ``imresize`` along one axis, with which BRISQUE and NIQE
    halve the luma) without its two copies of the input per tap.

    pyiqa unfolds the padded input into one shifted copy per tap, gathers the sampled rows of
    those, multiplies by the weights and sums over the taps.  When the samples are evenly
    spaced (a scale of one half) the gathered rows are a strided view of the padded input, so
    here the product is computed from that view into a buffer of pyiqa's layout and summed as
    pyiqa sums it: the same bits (``tests/iqa_tools/test_nss.py``).  Other cases are pyiqa's."""
    import torch
    from pyiqa.matlab_utils import resize as pyiqa_resize

    if scale == 1:
        return x
    axis = -2 if dim in (2, -2) else -1
    plan = None
    if kernel == "cubic" and not x.requires_grad and x.dim() == 4 and dim in (-2, -1, 2, 3):
        plan = _resize_plan(size, float(scale), x.size(axis), bool(antialiasing), x.dtype, x.device)
    if plan is None:
        original = getattr(pyiqa_resize.resize_1d, "__wrapped__", pyiqa_resize.resize_1d)
        return original(x, dim, size, scale, kernel, sigma, padding_type, antialiasing)
    weight, pad_pre, pad_post, first, step = plan
    padded = pyiqa_resize.padding(x, axis, pad_pre, pad_post, padding_type=padding_type)
    taps = weight.shape[0]
    batch, rows, cols = padded.shape[0], padded.shape[-2], padded.shape[-1]
    along, across = padded.stride(-2), padded.stride(-1)
    if axis == -1:
        along, across = across, along
    shape = (batch, taps, size, cols) if axis == -2 else (batch, taps, rows, size)
    strides = (
        (padded.stride(0), along, step * along, across)
        if axis == -2
        else (padded.stride(0), along, across, step * along)
    )
    sample = padded.as_strided(shape, strides, padded.storage_offset() + first * along)
    view = weight.view(1, taps, size, 1) if axis == -2 else weight.view(1, taps, 1, size)
    product = torch.empty(shape, dtype=padded.dtype, device=padded.device)
    torch.mul(sample, view, out=product)
    return product.sum(dim=1, keepdim=True)


@functools.lru_cache(maxsize=64)
def _resize_plan(
    size: int, scale: float, length: int, antialiasing: bool, dtype: Any, device: Any
) -> tuple[Any, int, int, int, int] | None:
    """pyiqa's weights, padding and first sample for a bicubic ``resize_1d`` of ``length``
    samples to ``size``, computed as pyiqa computes them, and the samples' spacing; None when
    they are not evenly spaced."""
    import torch
    from pyiqa.matlab_utils import resize as pyiqa_resize

    kernel_size = 4
    factor = 1.0
    if antialiasing and scale < 1:
        factor = scale
        kernel_size = math.ceil(kernel_size / factor)
    kernel_size += 2
    with torch.inference_mode(False), torch.no_grad():
        pos = torch.linspace(0, size - 1, steps=size, dtype=dtype, device=device)
        pos = (pos + 0.5) / scale - 0.5
        first = pos.floor() - (kernel_size // 2) + 1
        weight = pyiqa_resize.get_weight(
            pos - first, kernel_size, kernel="cubic", antialiasing_factor=factor
        )
        pad_pre, pad_post, base = pyiqa_resize.get_padding(first, kernel_size, length)
    steps = (base[1:] - base[:-1]).unique() if size > 1 else base.new_ones(1)
    if steps.numel() != 1 or int(steps[0]) < 1:
        return None
    return weight, int(pad_pre), int(pad_post), int(base[0]), int(steps[0])
