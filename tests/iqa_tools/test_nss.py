"""BRISQUE's, NIQE's and PIQE's statistics computed once and in fewer passes (iqa_tools.nss):
pyiqa's values to float64's rounding, the luma converted once per image for all three tools,
and pyiqa untouched outside the registry's forward passes."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from iqa_tools import ToolRegistry, ToolSettings, load_image, nss, numerics
from iqa_tools.models import to_tensor
from tests.conftest import natural_image


def _blocks() -> dict[str, torch.Tensor]:
    """Inputs that break a careless rewrite: exact zeros, one-sided blocks, float32, a batch of
    blocks of different spreads (NIQE's), odd sizes."""
    generator = torch.Generator().manual_seed(7)
    mscn = torch.randn(1, 1, 121, 87, generator=generator, dtype=torch.float64)
    zeros = mscn.clone()
    zeros[..., :40, :] = 0.0  # a flat, burnt-out band gives exact zeros
    zeros[..., 50:52, :] = -0.0
    skewed = torch.where(mscn > 0, mscn * 3.0, mscn * 0.2)
    batch = torch.randn(25, 1, 48, 48, generator=generator, dtype=torch.float64)
    batch = batch * torch.linspace(0.01, 5.0, 25, dtype=torch.float64).view(25, 1, 1, 1)
    return {
        "mscn": mscn,
        "zeros": zeros,
        "skewed": skewed,
        "float32": skewed.float(),
        "batch": batch,
        "products": mscn * torch.roll(mscn, (1, 1), dims=(-2, -1)),
    }


BLOCKS = _blocks()


def _close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    rel = 1e-5 if ours.dtype == torch.float32 else 1e-12
    assert torch.allclose(ours, theirs, rtol=rel, atol=0.0), (ours, theirs)


@pytest.mark.parametrize("return_sigma", [False, True])
@pytest.mark.parametrize("name", list(BLOCKS))
def test_the_aggd_fit_is_pyiqas_to_rounding(name, return_sigma):
    from pyiqa.archs import func_util

    block = BLOCKS[name]
    with torch.inference_mode():
        theirs = func_util.estimate_aggd_param(block, return_sigma=return_sigma)
        ours = nss.estimate_aggd_param(block, return_sigma=return_sigma)
    assert torch.equal(ours[0], theirs[0])  # the shape parameter: the same grid point
    for mine, pyiqas in zip(ours[1:], theirs[1:], strict=True):
        _close(mine, pyiqas)


def test_a_one_sided_block_gives_pyiqas_nans():
    from pyiqa.archs import func_util

    block = BLOCKS["mscn"].abs()  # no negative value: the left side is 0 / 0
    theirs = func_util.estimate_aggd_param(block)
    ours = nss.estimate_aggd_param(block)
    for mine, pyiqas in zip(ours, theirs, strict=True):
        assert torch.equal(mine.isnan(), pyiqas.isnan())


@pytest.mark.parametrize("name", ["mscn", "zeros", "skewed", "float32", "batch"])
def test_the_ggd_fit_is_pyiqas_to_rounding(name):
    from pyiqa.archs import func_util

    theirs = func_util.estimate_ggd_param(BLOCKS[name])
    ours = nss.estimate_ggd_param(BLOCKS[name])
    assert torch.equal(ours[0], theirs[0])
    _close(ours[1], theirs[1])


def test_a_flat_image_is_refused_as_pyiqa_refuses_it():
    with pytest.raises(AssertionError, match="non zero variance"):
        nss.estimate_ggd_param(torch.zeros(1, 1, 16, 16, dtype=torch.float64))


def test_the_tables_are_built_once_and_serve_inside_and_outside_inference_mode():
    nss._gamma_tables.cache_clear()
    with torch.inference_mode():
        nss.estimate_aggd_param(BLOCKS["mscn"])
        nss.estimate_ggd_param(BLOCKS["mscn"])
    table = nss._gamma_tables(torch.float64, BLOCKS["mscn"].device)[2]
    assert not table.is_inference()
    weight = torch.ones(1, dtype=torch.float64, requires_grad=True)
    (table * weight).sum().backward()  # an inference tensor could not be saved for backward
    assert weight.grad is not None and float(weight.grad) == pytest.approx(float(table.sum()))
    assert nss._gamma_tables.cache_info().misses == 1


def test_brisque_without_its_unread_resize_is_pyiqas_brisque():
    from pyiqa.archs import brisque_arch

    original = getattr(brisque_arch.brisque, "__wrapped__", brisque_arch.brisque)
    generator = torch.Generator().manual_seed(3)
    sv = torch.rand(36, 40, generator=generator, dtype=torch.float64)
    coef = torch.randn(40, generator=generator, dtype=torch.float64)
    image = torch.from_numpy(natural_image(5, (97, 83))).permute(2, 0, 1)[None] / 255.0
    image = image.to(torch.float64)
    with torch.inference_mode():
        theirs = original(image, sv_coef=coef, sv=sv.t())
        ours = nss.brisque(image, sv_coef=coef, sv=sv.t())
        gray = original(image[:, :1], 7, 7 / 6, False, coef, sv.t())
        gray_ours = nss.brisque(image[:, :1], 7, 7 / 6, False, coef, sv.t())
    _close(ours, theirs)
    _close(gray_ours, gray)


def test_the_matlab_version_is_left_to_pyiqa(monkeypatch):
    called: list[str | None] = []
    monkeypatch.setattr(
        nss, "_original_brisque", lambda x, *a, **k: called.append(k.get("version"))
    )
    nss.brisque(torch.zeros(1, 3, 8, 8), version="matlab")
    nss.brisque(torch.zeros(1, 3, 8, 8), 7, 7 / 6, True, None, None, 0.05, -153.6, 1, "matlab")
    assert called == ["matlab", None]


@pytest.fixture
def counted_yiq(monkeypatch) -> list[tuple[int, ...]]:
    """The shapes of every RGB-to-YIQ conversion pyiqa computes."""
    from pyiqa.utils import color_util

    seen: list[tuple[int, ...]] = []
    convert = color_util.rgb2yiq

    def counting(x: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(x.shape))
        return convert(x)

    monkeypatch.setattr(color_util, "rgb2yiq", counting)
    return seen


def test_the_luma_is_converted_once_for_all_three_tools(tmp_path, weights_dir, counted_yiq):
    path = tmp_path / "photo.png"
    Image.fromarray(natural_image(11, (200, 150))).save(path)
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="none", weights_dir=weights_dir))
    image = load_image(path)
    shared = {
        tool: registry.execute_tool(tool, image, use_cache=False, allow_fallback=False).raw_score
        for tool in ("BRISQUE", "NIQE", "PIQE")
    }
    assert counted_yiq == [(1, 3, 150, 200)]
    # The same tools, each on an image of its own (nothing to share), give the same scores.
    alone = {
        tool: registry.execute_tool(
            tool, load_image(path), use_cache=False, allow_fallback=False
        ).raw_score
        for tool in shared
    }
    assert len(counted_yiq) == 4
    assert alone == shared
    # And pyiqa as shipped, in float64 on the same pixels, outside any of our replacements.
    for tool, score in shared.items():
        metric = registry.metric(tool)
        with torch.inference_mode():
            plain = float(metric(to_tensor(load_image(path), "cpu", "float64")).reshape(-1)[0])
        assert score == pytest.approx(plain, rel=1e-6), tool


def test_another_tensor_is_not_given_the_images_luma(counted_yiq):
    image = torch.rand(1, 3, 16, 16, dtype=torch.float64)
    other = torch.rand(1, 3, 16, 16, dtype=torch.float64)
    memo: dict = {}
    with nss.sharing_luma(image, memo):
        first = nss.to_y_channel(image, 255.0)
        again = nss.to_y_channel(image, 255.0)
        unit = nss.to_y_channel(image, 1.0)
        elsewhere = nss.to_y_channel(other, 255.0)
    assert len(counted_yiq) == 2  # the image once, the other tensor once
    from pyiqa.utils.color_util import to_y_channel

    assert torch.equal(first, to_y_channel(image, 255.0))
    assert torch.equal(again, first)
    assert torch.equal(unit, to_y_channel(image, 1.0))
    assert torch.equal(elsewhere, to_y_channel(other, 255.0))
    assert not torch.equal(elsewhere, first)


def test_pyiqa_computes_as_shipped_outside_the_registrys_forward_pass(counted_yiq):
    from pyiqa.archs import brisque_arch, func_util, niqe_arch

    numerics.install()
    block = BLOCKS["zeros"]
    for module in (brisque_arch, niqe_arch):
        wrapped = module.estimate_aggd_param
        assert wrapped.__wrapped__ is func_util.estimate_aggd_param
        assert all(
            torch.equal(a, b)
            for a, b in zip(wrapped(block), func_util.estimate_aggd_param(block), strict=True)
        )
    image = torch.rand(1, 3, 16, 16, dtype=torch.float64)
    with nss.sharing_luma(image, {}):  # the luma memo alone does nothing outside the block
        brisque_arch.to_y_channel(image, 255.0)
        brisque_arch.to_y_channel(image, 255.0)
    assert len(counted_yiq) == 2
    with numerics.separable_normalisation(), nss.sharing_luma(image, {}):
        brisque_arch.to_y_channel(image, 255.0)
        niqe_arch.to_y_channel(image, 255.0)
    assert len(counted_yiq) == 3


@pytest.mark.parametrize(
    "shape", [(1, 1, 500, 500), (1, 1, 37, 91), (2, 1, 20, 21), (1, 3, 64, 71)]
)
@pytest.mark.parametrize(
    "how", [{"scale": 0.5}, {"scale": 0.25}, {"scale": 1 / 3}, {"scale": 2.0}, {"sizes": (13, 30)}]
)
def test_the_resize_is_pyiqas_to_the_bit(shape, how):
    from pyiqa.matlab_utils import imresize

    numerics.install()
    generator = torch.Generator().manual_seed(sum(shape))
    luma = (torch.rand(*shape, generator=generator, dtype=torch.float64) * 255).round()
    with torch.inference_mode():
        theirs = imresize(luma, **how)
        with numerics.separable_normalisation():
            ours = imresize(luma, **how)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert torch.equal(ours, theirs)


def test_the_halving_reads_strided_rows_and_an_uneven_resize_is_left_to_pyiqa():
    assert nss._resize_plan(250, 0.5, 500, True, torch.float32, torch.device("cpu")) is not None
    assert nss._resize_plan(166, 166 / 500, 500, True, torch.float32, torch.device("cpu")) is None
