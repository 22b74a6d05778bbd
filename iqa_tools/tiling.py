"""Exact tiled scoring of the classical tools: a 100-MP photo in the memory of one tile.

BRISQUE, NIQE and PIQE (and SSIM and PSNR for a pair) are statistics of local windows, so
pyiqa's whole-image computation can be replayed one tile at a time and give the same score:

- every per-pixel map (luminance, its half-size copy, the Gaussian-normalised MSCN map) is
  computed on the tile plus a *halo* wide enough that the tile's own pixels see exactly the
  neighbours, and at the image's edges exactly the padding, that the whole image gives them,
  with the same operations (pyiqa's own colour conversion and ``imresize``, and
  :func:`iqa_tools.numerics.normalize_padded`, which the whole-image path uses too);
- only what the score needs is kept across tiles: sums, sums of squares and counts (BRISQUE,
  PIQE, SSIM, PSNR) or one small feature row per 96x96 patch (NIQE), and the score is computed
  from them with pyiqa's own formulas.

So peak memory depends on the tile (``ToolSettings.tile_size``), not on the photo, and the image
is converted to float one tile at a time from :attr:`LoadedImage.stored` (uint8 for an
8-bit photo): no full-size float copy of it is made.

Each pixel's value is the whole image's to the last bit, except where a kernel's vectorised
tail falls elsewhere in a tile's array than in the whole image's: pyiqa's float32 resize sums
(an ulp on a few half-size pixels, which moves NIQE by 1e-11 to 1e-9) and, on some CPUs, the
BLAS product of the colour conversion, which decides how a luminance that is exactly a half
rounds (a few pixels per tile).  With the order of the sums' additions (1e-16 to 1e-13), that
is all that separates a tiled score from a whole-image one: at most 2e-9 relative on 12- to
50-MP photos, on a CPU and on CUDA (``benchmarks/large_photos.py``), less than CPU and CUDA
scores differ by, which the cache already treats as one.  So tiled scores share the
whole-image scores' cache key (:attr:`ToolSpec.numerics`): which one the registry computes
depends only on a size setting, and both are the same number to 1e-6.  Should a change ever
move them further apart (a look-up table that tips over on the last bit, say), the tests that
compare the two on awkward sizes and a real photo fail first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from . import numerics
from .images import to_float
from .memory import TILED_METRICS

if TYPE_CHECKING:
    from .images import LoadedImage

#: Tile side per device unless ``ToolSettings.tile_size`` says otherwise.  On a CPU, 1024 px
#: keeps a tile's float64 maps within a few tens of MB, and tiled scoring is no slower than
#: whole-image scoring from about 1 MP.  A GPU pays per kernel launch, so it takes larger
#: tiles, in its own memory: on an H100, 12-MP photos took 0.45/0.48/0.27 s (BRISQUE/NIQE/PIQE)
#: in 1024-px tiles and 0.28/0.25/0.31 s in 4096-px ones, at a peak of 1.1-1.3 GB of GPU
#: memory (pyiqa's whole-image float32: 1.2-1.3 GB, 0.25-0.28 s).
DEFAULT_TILE = {"cpu": 1024, "cuda": 4096}
#: Rows and columns of luminance kept around a BRISQUE or NIQE tile: the half-size copy needs
#: 4 more MSCN rows (3 for the 7x7 Gaussian, 1 for the neighbour products), each of which needs
#: 4 full-size rows on either side for the bicubic kernel with antialiasing (8 taps, 2 zero
#: ones): 2 x 4 + 4 = 12, an even number so that the half-size grid of a tile starts on the
#: whole image's.
HALO = 12
#: Gaussian window of the MSCN normalisation (pyiqa's default for all three tools).
GAUSS = 7
_GAUSS_HALF = GAUSS // 2
#: NIQE's patch, PIQE's block and SSIM's window.
NIQE_PATCH = 96
PIQE_BLOCK = 16
SSIM_WINDOW = 11

Tensor = torch.Tensor
Span = tuple[int, int]


def applies(pyiqa_name: str | None, pixels: int, above: int) -> bool:
    """Whether an image of ``pixels`` is scored in tiles by this tool (``above``: the
    threshold, :attr:`ToolSettings.tile_above_pixels`; :data:`TILED_METRICS` lives in
    :mod:`iqa_tools.memory`, which needs it without torch)."""
    return pyiqa_name in TILED_METRICS and pixels > above


def score(
    metric: Any,
    target: LoadedImage,
    reference: LoadedImage | None,
    *,
    device: str,
    dtype: str,
    tile: int,
) -> float | None:
    """The metric's raw score of ``target`` (against ``reference`` for SSIM and PSNR), computed
    tile by tile; None when ``metric`` is not set up as this module reproduces it (another
    version of the metric, a crop border), so that the caller runs it whole."""
    net = getattr(metric, "net", None)
    scorer = _scorer(net)
    if scorer is None:
        return None
    source = _Pixels(target.stored, device, getattr(torch, dtype))
    other = None if reference is None else _Pixels(reference.stored, device, getattr(torch, dtype))
    # The cuDNN settings of pyiqa's own forward pass (InferenceModel.forward).
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):
        return float(scorer(net, source, other, max(1, tile)))


def _scorer(net: Any) -> Callable[[Any, _Pixels, _Pixels | None, int], Tensor] | None:
    from pyiqa.archs.brisque_arch import BRISQUE
    from pyiqa.archs.niqe_arch import NIQE
    from pyiqa.archs.piqe_arch import PIQE
    from pyiqa.archs.psnr_arch import PSNR
    from pyiqa.archs.ssim_arch import SSIM

    if (
        type(net) is BRISQUE
        and net.version == "original"
        and net.kernel_size == GAUSS
        and net.test_y_channel
    ):
        return _brisque
    if type(net) is NIQE and net.crop_border == 0 and net.test_y_channel:
        return _niqe
    if type(net) is PIQE:
        return _piqe
    if type(net) is SSIM and not net.downsample and net.crop_border == 0:
        return _ssim
    if type(net) is PSNR and net.crop_border == 0:
        return _psnr
    return None


# -- planes: per-pixel maps of the image, computed a rectangle at a time -------------------------


class _Pixels:
    """The RGB pixels (H x W x 3, :attr:`LoadedImage.stored`: uint8, or float32 in [0, 1]) as
    1 x 3 x h x w tensors on the device, in the float values the registry gives the whole image
    (:attr:`LoadedImage.pixels`, float32 / 255), converted there a tile at a time."""

    def __init__(self, stored: np.ndarray, device: str, dtype: torch.dtype) -> None:
        self.stored, self.device, self.dtype = stored, device, dtype
        self.height, self.width = stored.shape[:2]
        # Every uint8's float32 value, computed as LoadedImage.pixels computes them.
        self._levels = torch.from_numpy(to_float(np.arange(256, dtype=np.uint8))).to(device)

    def rect(self, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        block = torch.from_numpy(np.array(self.stored[r0:r1, c0:c1])).to(self.device)
        if block.dtype == torch.uint8:
            block = self._levels[block.long()]
        return block.permute(2, 0, 1).unsqueeze(0).contiguous().to(dtype=self.dtype)


class _Plane:
    """A map of ``height`` x ``width`` values, given for any rectangle inside it exactly as the
    whole map has them; one rectangle can be kept while a tile asks for parts of it."""

    def __init__(self, height: int, width: int) -> None:
        self.height, self.width = height, width
        self._kept: tuple[tuple[int, int, int, int], Tensor] | None = None

    def rect(self, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        if self._kept is not None:
            (k0, k1, l0, l1), values = self._kept
            if k0 <= r0 and r1 <= k1 and l0 <= c0 and c1 <= l1:
                return values[..., r0 - k0 : r1 - k0, c0 - l0 : c1 - l0]
        return self._compute(r0, r1, c0, c1)

    def keep(self, r0: int, r1: int, c0: int, c1: int) -> None:
        """Compute the rectangle (clipped to the map) once for the requests that follow."""
        self._kept = None
        box = (max(0, r0), min(self.height, r1), max(0, c0), min(self.width, c1))
        self._kept = (box, self._compute(*box))

    def _compute(self, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        raise NotImplementedError


class _Luma(_Plane):
    """A per-pixel function of the RGB pixels (the metric's own luminance conversion), on the
    top-left ``height`` x ``width`` of the image (NIQE crops to whole patches)."""

    def __init__(
        self,
        pixels: _Pixels,
        convert: Callable[[Tensor], Tensor],
        height: int | None = None,
        width: int | None = None,
    ) -> None:
        super().__init__(height or pixels.height, width or pixels.width)
        self.pixels, self.convert = pixels, convert

    def _compute(self, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        return self.convert(self.pixels.rect(r0, r1, c0, c1))


class _Mapped(_Plane):
    """A per-pixel function of another map."""

    def __init__(self, source: _Plane, function: Callable[[Tensor], Tensor]) -> None:
        super().__init__(source.height, source.width)
        self.source, self.function = source, function

    def _compute(self, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        return self.function(self.source.rect(r0, r1, c0, c1))


class _Halved(_Plane):
    """pyiqa's ``imresize(scale=0.5, antialiasing=True)`` of a map (MATLAB's bicubic, reflected
    at the edges), between two per-pixel functions.  Output pixel j is a fixed 10-tap weighted
    sum of input pixels 2j-4 .. 2j+5, so a block of outputs is the resize of an input block
    starting at an even row and column with 4 more on each side: the block's first outputs sit
    on the whole map's grid, and only outputs outside the block see the block's reflection."""

    def __init__(
        self,
        source: _Plane,
        before: Callable[[Tensor], Tensor] | None = None,
        after: Callable[[Tensor], Tensor] | None = None,
    ) -> None:
        super().__init__(math.ceil(source.height / 2), math.ceil(source.width / 2))
        self.source, self.before, self.after = source, before, after

    def _compute(self, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        from pyiqa.matlab_utils import imresize

        e0, e1 = max(0, 2 * r0 - 4), min(self.source.height, 2 * r1 + 4)
        f0, f1 = max(0, 2 * c0 - 4), min(self.source.width, 2 * c1 + 4)
        block = self.source.rect(e0, e1, f0, f1)
        if self.before is not None:
            block = self.before(block)
        block = imresize(block, scale=0.5, antialiasing=True)
        if self.after is not None:
            block = self.after(block)
        return block[..., r0 - e0 // 2 : r1 - e0 // 2, c0 - f0 // 2 : c1 - f0 // 2]


class _SymmetricExtension(_Plane):
    """A map extended at the bottom and right by mirroring its last rows and columns (pyiqa's
    ``symm_pad``: the edge pixel repeated, then the ones before it)."""

    def __init__(self, source: _Plane, height: int, width: int) -> None:
        super().__init__(height, width)
        self.source = source

    def _compute(self, r0: int, r1: int, c0: int, c1: int) -> Tensor:
        rows = _mirror(np.arange(r0, r1), self.source.height)
        cols = _mirror(np.arange(c0, c1), self.source.width)
        return _gather(self.source, rows, cols)


def _mirror(index: np.ndarray, size: int) -> np.ndarray:
    return np.where(index >= size, 2 * size - 1 - index, index)


def _gather(plane: _Plane, rows: np.ndarray, cols: np.ndarray) -> Tensor:
    """The plane's values at every (row, col) of the two index lists (all inside the plane)."""
    r0, r1, c0, c1 = int(rows.min()), int(rows.max()) + 1, int(cols.min()), int(cols.max()) + 1
    block = plane.rect(r0, r1, c0, c1)
    if not np.array_equal(rows, np.arange(r0, r1)):
        block = block.index_select(-2, torch.from_numpy(rows - r0).to(block.device))
    if not np.array_equal(cols, np.arange(c0, c1)):
        block = block.index_select(-1, torch.from_numpy(cols - c0).to(block.device))
    return block


def _normalised(plane: _Plane, rows: Span, cols: Span, padding: str) -> Tensor:
    """The MSCN map (:func:`numerics.normalize_padded`) of the plane on ``rows`` x ``cols``,
    with the plane's edges padded as pyiqa pads the whole plane: ``same`` with zeros,
    ``replicate`` with the edge value."""
    row_index = np.arange(rows[0] - _GAUSS_HALF, rows[1] + _GAUSS_HALF)
    col_index = np.arange(cols[0] - _GAUSS_HALF, cols[1] + _GAUSS_HALF)
    block = _gather(
        plane, np.clip(row_index, 0, plane.height - 1), np.clip(col_index, 0, plane.width - 1)
    )
    if padding == "same":
        inside_rows = torch.from_numpy((row_index >= 0) & (row_index < plane.height))
        inside_cols = torch.from_numpy((col_index >= 0) & (col_index < plane.width))
        inside = (inside_rows[:, None] & inside_cols[None, :]).to(block.device)
        block = torch.where(inside, block, torch.zeros((), dtype=block.dtype, device=block.device))
    elif padding != "replicate":
        raise ValueError(f"padding {padding!r} is not tiled")
    return numerics.normalize_padded(block.to(torch.float64), GAUSS, GAUSS / 6)


def _normalised_at(plane: _Plane, rows: Sequence[int], cols: Sequence[int], padding: str) -> Tensor:
    """The MSCN map at every (row, col) of two index lists, each a few contiguous runs (a tile
    with the row or column that ``torch.roll`` wraps round from the other edge)."""
    return torch.cat(
        [
            torch.cat(
                [_normalised(plane, row_run, col_run, padding) for col_run in _runs(cols)], dim=-1
            )
            for row_run in _runs(rows)
        ],
        dim=-2,
    )


def _runs(index: Sequence[int]) -> list[Span]:
    runs: list[Span] = []
    for value in index:
        if runs and runs[-1][1] == value:
            runs[-1] = (runs[-1][0], value + 1)
        else:
            runs.append((value, value + 1))
    return runs


def _spans(length: int, step: int) -> list[Span]:
    return [(start, min(start + step, length)) for start in range(0, length, step)]


def _tiles(height: int, width: int, step: int) -> Iterator[tuple[Span, Span]]:
    for rows in _spans(height, step):
        for cols in _spans(width, step):
            yield rows, cols


def _aligned(tile: int, unit: int) -> int:
    return max(unit, tile - tile % unit)


# -- BRISQUE -------------------------------------------------------------------------------------

#: The pixel pairs of BRISQUE's products, as (row, column) offsets of the partner: pyiqa's
#: ``torch.roll`` shifts (0, 1), (1, 0), (1, 1), (-1, 1), wrapping round at the edges.
_PAIRS = ((0, -1), (-1, 0), (-1, -1), (1, -1))


def _brisque(net: Any, pixels: _Pixels, _: _Pixels | None, tile: int) -> Tensor:
    from pyiqa.archs.brisque_arch import rbf_kernel, scale_features
    from pyiqa.utils.color_util import to_y_channel

    luma = _Luma(pixels, lambda x: to_y_channel(x, 255.0))
    scales = (luma, _Halved(luma))
    sums = [
        torch.zeros(3 + 6 * len(_PAIRS), dtype=torch.float64, device=pixels.device) for _ in scales
    ]
    for (r0, r1), (c0, c1) in _tiles(luma.height, luma.width, _aligned(tile, 2)):
        luma.keep(r0 - HALO, r1 + HALO, c0 - HALO, c1 + HALO)
        for factor, (plane, total) in enumerate(zip(scales, sums, strict=True)):
            rows = (r0 >> factor, -(-r1 // (1 << factor)))
            cols = (c0 >> factor, -(-c1 // (1 << factor)))
            total += _mscn_sums(plane, rows, cols)
    features = torch.cat(
        [
            _nss_features(total, plane.height * plane.width)
            for plane, total in zip(scales, sums, strict=True)
        ],
        dim=-1,
    )
    sv = net.sv.to(features).t()
    kernel = rbf_kernel(features=scale_features(features), sv=sv, gamma=net.gamma)
    return kernel @ net.sv_coef.to(features) - net.rho


def _mscn_sums(plane: _Plane, rows: Span, cols: Span) -> Tensor:
    """Σx², Σ|x| and a count of the tile's MSCN coefficients x, and for each pair of BRISQUE's
    products p: how many are negative and positive, Σp² of each, Σ|p| and Σp²."""
    height, width = plane.height, plane.width
    row_index = [(rows[0] - 1) % height, *range(*rows), rows[1] % height]
    col_index = [(cols[0] - 1) % width, *range(*cols)]
    around = _normalised_at(plane, row_index, col_index, "same")
    x = around[..., 1:-1, 1:]
    values = [
        torch.tensor(float(x.numel()), dtype=x.dtype, device=x.device),
        x.pow(2).sum(),
        x.abs().sum(),
    ]
    for dy, dx in _PAIRS:
        partner = around[..., 1 + dy : around.shape[-2] - 1 + dy, 1 + dx : around.shape[-1] + dx]
        product = x * partner
        left, right = product < 0, product > 0
        values += [
            left.sum().to(x.dtype),
            right.sum().to(x.dtype),
            (product * left).pow(2).sum(),
            (product * right).pow(2).sum(),
            product.abs().sum(),
            product.pow(2).sum(),
        ]
    return torch.stack(values)


def _nss_features(sums: Tensor, count: int) -> Tensor:
    """pyiqa's ``natural_scene_statistics`` of one scale (1 x 18), from its sums: the same
    formulas as ``estimate_ggd_param`` and ``estimate_aggd_param`` with each mean a sum over
    the tiles divided by the pixel count."""
    sums = sums.view(1, -1, 1)
    n = torch.tensor([[float(count)]], dtype=sums.dtype, device=sums.device)
    gamma = torch.arange(0.2, 10 + 0.001, 0.001).to(sums)
    r_table = (
        (torch.lgamma(1.0 / gamma) + torch.lgamma(3.0 / gamma) - 2 * torch.lgamma(2.0 / gamma))
        .exp()
        .repeat(1, 1)
    )
    sigma_sq = sums[:, 1] / n
    sigma = sigma_sq.sqrt().squeeze(dim=-1)
    rho = sigma_sq / (sums[:, 2] / n) ** 2
    features = [gamma[(rho - r_table).abs().argmin(dim=-1)], sigma.pow(2)]
    r_gam = (
        (2 * torch.lgamma(2.0 / gamma) - (torch.lgamma(1.0 / gamma) + torch.lgamma(3.0 / gamma)))
        .exp()
        .repeat(1, 1)
    )
    for pair in range(len(_PAIRS)):
        count_left, count_right, left_sq, right_sq, absolute, square = (
            sums[:, 3 + 6 * pair + k] for k in range(6)
        )
        left_std = torch.sqrt(left_sq / count_left)
        right_std = torch.sqrt(right_sq / count_right)
        gammahat = left_std / right_std
        rhat = (absolute / n).pow(2) / (square / n)
        rhatnorm = (rhat * (gammahat.pow(3) + 1) * (gammahat + 1)) / (gammahat.pow(2) + 1).pow(2)
        alpha = gamma[(r_gam - rhatnorm).abs().argmin(dim=-1)]
        sigma_l, sigma_r = left_std.squeeze(-1), right_std.squeeze(-1)
        eta = (sigma_r - sigma_l) * torch.exp(
            torch.lgamma(2.0 / alpha) - (torch.lgamma(1.0 / alpha) + torch.lgamma(3.0 / alpha)) / 2
        )
        features.extend((alpha, eta, sigma_l.pow(2), sigma_r.pow(2)))
    return torch.stack(features, dim=-1)


# -- NIQE ----------------------------------------------------------------------------------------


def _niqe(net: Any, pixels: _Pixels, _: _Pixels | None, tile: int) -> Tensor:
    from pyiqa.archs.func_util import diff_round
    from pyiqa.archs.niqe_arch import compute_feature
    from pyiqa.matlab_utils import blockproc, nancov, nanmean
    from pyiqa.utils.color_util import to_y_channel

    patches_down, patches_across = pixels.height // NIQE_PATCH, pixels.width // NIQE_PATCH
    if patches_down == 0 or patches_across == 0:
        raise ValueError(
            f"NIQE needs at least {NIQE_PATCH}x{NIQE_PATCH} pixels, got "
            f"{pixels.width}x{pixels.height}"
        )
    luma = _Luma(
        pixels,
        lambda x: diff_round(to_y_channel(x, 255, net.color_space)).to(torch.float64),
        patches_down * NIQE_PATCH,
        patches_across * NIQE_PATCH,
    )
    half = _Halved(luma, before=lambda x: x / 255.0, after=lambda x: x * 255.0)
    features = torch.empty(
        1, patches_down * patches_across, 36, dtype=torch.float64, device=pixels.device
    )
    step = _aligned(tile, NIQE_PATCH) // NIQE_PATCH
    for (p0, p1), (q0, q1) in _tiles(patches_down, patches_across, step):
        luma.keep(
            p0 * NIQE_PATCH - HALO,
            p1 * NIQE_PATCH + HALO,
            q0 * NIQE_PATCH - HALO,
            q1 * NIQE_PATCH + HALO,
        )
        # blockproc orders patches column by column: patch (p, q) is row q * down + p.
        order = torch.tensor(
            [q * patches_down + p for q in range(q0, q1) for p in range(p0, p1)],
            device=pixels.device,
        )
        for scale, plane in enumerate((luma, half)):
            size = NIQE_PATCH >> scale
            mscn = _normalised(plane, (p0 * size, p1 * size), (q0 * size, q1 * size), "replicate")
            features[0, order, 18 * scale : 18 * (scale + 1)] = blockproc(
                mscn, [size, size], fun=compute_feature
            )[0]
    mu_pris = net.mu_pris_param.to(features).repeat(1, 1)
    cov_pris = net.cov_pris_param.to(features).repeat(1, 1, 1)
    invcov = torch.linalg.pinv((cov_pris + nancov(features)) / 2)
    diff = (mu_pris - nanmean(features, dim=1)).unsqueeze(1)
    return torch.sqrt(torch.bmm(torch.bmm(diff, invcov), diff.transpose(1, 2)).squeeze())


# -- PIQE ----------------------------------------------------------------------------------------


def _piqe(net: Any, pixels: _Pixels, _: _Pixels | None, tile: int) -> Tensor:
    from pyiqa.archs.piqe_arch import noise_criterion, notice_dist_criterion
    from pyiqa.utils.color_util import to_y_channel

    luma = _Luma(pixels, lambda x: to_y_channel(x, out_data_range=1, color_space="yiq"))
    # One running maximum: a hundred small tensors kept between the tiles' big ones would pin
    # the heap (glibc), and the process would keep hundreds of MB of freed tiles.
    (rows, cols), *others = _tiles(luma.height, luma.width, tile)
    brightest = luma.rect(*rows, *cols).max()
    for rows, cols in others:
        brightest = torch.maximum(brightest, luma.rect(*rows, *cols).max())
    grey = _Mapped(luma, lambda y: torch.round(255 * (y / brightest.reshape(1, 1, 1, 1))))
    # pyiqa pads by height % 16 and width % 16 (not up to a multiple of 16), then keeps the
    # whole 16x16 blocks of that.
    padded = _SymmetricExtension(
        grey, luma.height + luma.height % PIQE_BLOCK, luma.width + luma.width % PIQE_BLOCK
    )
    blocks_down, blocks_across = padded.height // PIQE_BLOCK, padded.width // PIQE_BLOCK
    if blocks_down == 0 or blocks_across == 0:
        raise ValueError(
            f"PIQE needs at least {PIQE_BLOCK // 2} pixels a side, got "
            f"{pixels.width}x{pixels.height}"
        )
    step = _aligned(tile, PIQE_BLOCK) // PIQE_BLOCK
    impaired_sum = torch.zeros(1, dtype=torch.float64, device=pixels.device)
    active_count = torch.zeros(1, dtype=torch.int64, device=pixels.device)
    for (p0, p1), (q0, q1) in _tiles(blocks_down, blocks_across, step):
        mscn = _normalised(
            padded,
            (p0 * PIQE_BLOCK, p1 * PIQE_BLOCK),
            (q0 * PIQE_BLOCK, q1 * PIQE_BLOCK),
            "replicate",
        )
        blocks = mscn.unfold(2, PIQE_BLOCK, PIQE_BLOCK).unfold(3, PIQE_BLOCK, PIQE_BLOCK)
        blocks = blocks.contiguous().view(1, -1, PIQE_BLOCK, PIQE_BLOCK)
        block_var = torch.var(blocks, dim=[2, 3], unbiased=True)
        active = block_var > 0.1
        block_sigma, block_beta = noise_criterion(blocks, PIQE_BLOCK - 1, block_var)
        noisy = block_sigma > 2 * block_beta
        impaired = notice_dist_criterion(blocks, 6, 0.1, PIQE_BLOCK)
        weight = active.float()
        scores = weight * impaired.float() * (1 - block_var) + weight * noisy.float() * block_var
        impaired_sum += scores.sum(dim=1)
        active_count += active.sum(dim=1)
    return ((impaired_sum + 1) / (1 + active_count)) * 100


# -- SSIM and PSNR -------------------------------------------------------------------------------


def _ssim(net: Any, pixels: _Pixels, reference: _Pixels | None, tile: int) -> Tensor:
    from pyiqa.archs.func_util import preprocess_rgb
    from pyiqa.archs.ssim_arch import ssim

    if reference is None:
        raise ValueError("SSIM needs a reference image")

    def luminance(source: _Pixels) -> _Luma:
        return _Luma(
            source,
            lambda x: preprocess_rgb(x, net.test_y_channel, net.data_range, net.color_space).to(
                torch.float64
            ),
        )

    target, ref = luminance(pixels), luminance(reference)
    rows, cols = target.height - SSIM_WINDOW + 1, target.width - SSIM_WINDOW + 1
    if rows < 1 or cols < 1:
        raise ValueError(f"SSIM needs at least {SSIM_WINDOW}x{SSIM_WINDOW} pixels")
    total = torch.zeros((), dtype=torch.float64, device=pixels.device)
    channels = 0
    for (r0, r1), (c0, c1) in _tiles(rows, cols, tile):
        box = (r0, r1 + SSIM_WINDOW - 1, c0, c1 + SSIM_WINDOW - 1)
        ssim_map = ssim(
            target.rect(*box), ref.rect(*box), data_range=net.data_range, get_ssim_map=True
        )
        total += ssim_map.sum()
        channels = ssim_map.shape[1]
    return total / (channels * rows * cols)


def _psnr(net: Any, pixels: _Pixels, reference: _Pixels | None, tile: int) -> Tensor:
    from pyiqa.utils.color_util import to_y_channel

    if reference is None:
        raise ValueError("PSNR needs a reference image")
    data_range = net.kwargs.get("data_range", 1.0)
    eps = net.kwargs.get("eps", 1e-8)
    color_space = net.kwargs.get("color_space", "yiq")
    total = torch.zeros((), dtype=torch.float64, device=pixels.device)
    count = 0
    for (r0, r1), (c0, c1) in _tiles(pixels.height, pixels.width, tile):
        x, y = pixels.rect(r0, r1, c0, c1), reference.rect(r0, r1, c0, c1)
        if net.test_y_channel and x.shape[1] == 3:
            x, y = (
                to_y_channel(x, data_range, color_space),
                to_y_channel(y, data_range, color_space),
            )
        total += ((x - y) ** 2).sum(dtype=torch.float64)
        count += x.numel()
    mse = (total / count).to(pixels.dtype)
    return 10 * torch.log10(data_range**2 / (mse + eps))
