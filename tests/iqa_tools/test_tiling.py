"""Tiled scoring (iqa_tools.tiling): the whole image's score, in the memory of one tile.

Each case scores one image twice through the registry, whole (``tile_above_pixels`` out of
reach) and in small tiles (48 px, so that even small images are cut into many, with remainders
of every shape), and holds the two to 1e-6 relative."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from iqa_tools import ToolRegistry, ToolSettings, tiling
from iqa_tools.images import LoadedImage, digest_bytes, read_image
from tests.conftest import missing_data, natural_image

TILE = 48
WHOLE = 10**12
REL = 1e-6


def image_of(array: np.ndarray, name: str = "image.png", **options) -> LoadedImage:
    buffer = io.BytesIO()
    Image.fromarray(array).save(
        buffer, format="PNG" if name.endswith(".png") else "JPEG", **options
    )
    data = buffer.getvalue()
    return LoadedImage(path=name, digest=digest_bytes(data), data=data)


def registry(weights: Path | None, above: int, device: str = "cpu") -> ToolRegistry:
    return ToolRegistry(
        ToolSettings(
            device=device,
            tool_cache="none",
            weights_dir=weights,
            tile_above_pixels=above,
            tile_size=TILE,
        )
    )


@pytest.fixture(scope="module")
def weights() -> Path | None:
    """BRISQUE's and NIQE's parameter files of the test data, or None (those tools skip)."""
    from tests.conftest import _data_dir

    data = _data_dir()
    folder = data / "pyiqa-weights" if data is not None else None
    return (
        folder if folder is not None and (folder / "niqe_modelparameters.mat").is_file() else None
    )


def both(
    tool: str,
    target: LoadedImage,
    ref: LoadedImage | None,
    weights: Path | None,
    device: str = "cpu",
) -> tuple[float, float]:
    if tool in {"BRISQUE", "NIQE"} and weights is None:
        missing_data("pyiqa-weights (BRISQUE's and NIQE's parameter files)")
    scores = [
        registry(weights, above, device)
        .execute_tool(tool, target, ref, use_cache=False, allow_fallback=False)
        .raw_score
        for above in (WHOLE, 0)
    ]
    return scores[0], scores[1]


def without_ties(array: np.ndarray) -> np.ndarray:
    """The image with no pixel whose luminance 0.299 R + 0.587 G + 0.114 B is an exact half
    (one in a thousand colours), by moving its blue by one level.

    Rounding such a luminance to a grey level is decided by the last bit of the colour
    conversion, a BLAS product whose kernel may differ between a tile's matrix and the whole
    image's: on a 16-core host (an H100 machine's), 4 of this image's float32 luminances
    differed between 48-px tiles and the whole image (none in float64), and float32 SSIM
    moved by 8e-6 on 131x97 pixels.  A few pixels per tile at most, so the effect shrinks with
    the pixels per tile.  These tests check the tiling itself; the real photo keeps its ties."""
    array = array.copy()
    r, g, b = (array[..., k].astype(np.int64) for k in range(3))
    tie = (299 * r + 587 * g + 114 * b) % 1000 == 500
    array[..., 2][tie] = np.where(b[tie] < 255, b[tie] + 1, b[tie] - 1)
    return array


def pair(width: int, height: int, seed: int = 0) -> tuple[LoadedImage, LoadedImage]:
    """A photo-like image and a JPEG-degraded copy of it (the full-reference tools' pair)."""
    array = without_ties(natural_image(seed, (width, height)))
    jpeg = image_of(array, "copy.jpg", quality=40)
    degraded = without_ties(np.asarray(Image.open(io.BytesIO(jpeg.data)).convert("RGB")))
    return image_of(array), image_of(degraded, "degraded.png")


#: (width, height) per tool: odd and prime sides, strips as thin as the metric takes, and sides
#: just below, at and just above one tile (48; NIQE's tile is one 96x96 patch).
AWKWARD: dict[str, list[tuple[int, int]]] = {
    "BRISQUE": [(131, 97), (7, 211), (211, 7), (47, 49), (48, 48), (97, 95)],
    "PIQE": [(131, 97), (8, 211), (211, 8), (47, 49), (48, 48), (97, 95)],
    "NIQE": [(131, 97), (96, 389), (389, 96), (191, 193), (192, 192), (193, 289)],
    "SSIM": [(131, 97), (11, 211), (211, 11), (47, 49), (58, 59), (97, 95)],
    "PSNR": [(131, 97), (1, 211), (211, 1), (47, 49), (48, 48), (97, 95)],
}
CASES = [(tool, size) for tool, sizes in AWKWARD.items() for size in sizes]


@pytest.mark.parametrize(("tool", "size"), CASES, ids=[f"{t}-{w}x{h}" for t, (w, h) in CASES])
def test_tiled_scores_equal_whole_image_scores_on_awkward_sizes(tool, size, weights):
    target, degraded = pair(*size, seed=size[0] % 5)
    full_reference = tool in {"SSIM", "PSNR"}
    whole, tiled = both(
        tool, degraded if full_reference else target, target if full_reference else None, weights
    )
    assert np.isfinite(whole)
    assert tiled == pytest.approx(whole, rel=REL, abs=1e-12)


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.parametrize("tool", ["BRISQUE", "NIQE", "PIQE", "SSIM", "PSNR"])
def test_tiled_scores_equal_whole_image_scores_on_a_real_photo(tool, livec_dir, weights):
    photo = sorted((livec_dir / "images").iterdir())[0]
    target = read_image(photo)
    degraded = None
    if tool in {"SSIM", "PSNR"}:
        array = np.asarray(Image.open(photo).convert("RGB"))
        degraded = image_of(
            np.asarray(
                Image.open(io.BytesIO(image_of(array, "q.jpg", quality=30).data)).convert("RGB")
            )
        )
    whole, tiled = both(tool, degraded or target, target if degraded else None, weights)
    assert tiled == pytest.approx(whole, rel=REL)


def test_a_tile_never_asks_for_more_than_itself_and_its_halo(monkeypatch, weights):
    """Peak memory follows the tile: no rectangle of pixels converted to float is larger than
    one tile with its halo on each side, whatever the image's size."""
    if weights is None:
        missing_data("pyiqa-weights (BRISQUE's and NIQE's parameter files)")
    areas: list[int] = []
    rect = tiling._Pixels.rect

    def recording(self, r0, r1, c0, c1):
        areas.append((r1 - r0) * (c1 - c0))
        return rect(self, r0, r1, c0, c1)

    monkeypatch.setattr(tiling._Pixels, "rect", recording)
    target = image_of(natural_image(1, (400, 300)))
    tools = registry(weights, 0)
    for tool, tile in (("BRISQUE", TILE), ("PIQE", TILE), ("NIQE", 96)):
        areas.clear()
        tools.execute_tool(tool, target, use_cache=False, allow_fallback=False)
        assert areas and max(areas) <= (tile + 2 * tiling.HALO) ** 2, tool


def test_tiles_are_converted_from_the_stored_pixels_as_the_whole_image_is():
    eight_bit = image_of(natural_image(2, (70, 50)))
    sixteen_bit = np.linspace(0, 65535, 50 * 70).reshape(50, 70).astype(np.uint16)
    deep = image_of(sixteen_bit)
    assert eight_bit.stored.dtype == np.uint8 and deep.stored.dtype == np.float32
    for image in (eight_bit, deep):
        source = tiling._Pixels(image.stored, "cpu", torch.float64)
        tile = source.rect(5, 37, 11, 70)
        whole = torch.from_numpy(image.pixels).permute(2, 0, 1).unsqueeze(0).double()
        assert torch.equal(tile, whole[..., 5:37, 11:70])


def test_the_registry_tiles_only_above_the_size_setting_and_never_in_a_batch(monkeypatch):
    calls: list[str] = []
    score = tiling.score

    def spying(metric, target, *args, **kwargs):
        calls.append(target.path)
        return score(metric, target, *args, **kwargs)

    monkeypatch.setattr(tiling, "score", spying)
    small, large = (
        image_of(natural_image(0, (40, 40)), "small.png"),
        image_of(natural_image(1, (90, 70)), "large.png"),
    )
    tools = registry(None, above=40 * 40)
    assert tools.score_batches([("PIQE", small, None), ("PIQE", large, None)]) == 1
    assert calls == []
    tools.execute_tool("PIQE", small)
    tools.execute_tool("PIQE", large)
    assert calls == ["large.png"]


def test_a_metric_set_up_otherwise_is_scored_whole():
    """tiling.score declines what it does not reproduce, and the registry runs it whole."""

    class Other:
        net = torch.nn.Identity()

    image = image_of(natural_image(0, (40, 40)))
    assert tiling.score(Other(), image, None, device="cpu", dtype="float64", tile=TILE) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("tool", ["BRISQUE", "NIQE", "PIQE", "SSIM", "PSNR"])
def test_tiled_scores_on_cuda_equal_whole_image_scores_on_cuda_and_on_the_cpu(tool, weights):
    target, degraded = pair(389, 293, seed=3)
    full_reference = tool in {"SSIM", "PSNR"}
    image, ref = (degraded, target) if full_reference else (target, None)
    whole, tiled = both(tool, image, ref, weights, device="cuda")
    assert tiled == pytest.approx(whole, rel=REL)
    _, on_cpu = both(tool, image, ref, weights, device="cpu")
    assert tiled == pytest.approx(on_cpu, rel=REL)
