"""The separable float64 normalisation of BRISQUE, NIQE and PIQE (iqa_tools.numerics): pyiqa's
float64 result to rounding, and pyiqa untouched outside the registry's forward passes."""

from __future__ import annotations

import threading

import pytest
import torch

from iqa_tools import numerics
from tests.conftest import natural_image


@pytest.fixture(scope="module")
def luminance() -> torch.Tensor:
    """A photo-like luminance on 0-255 with a flat, burnt-out band (variance near zero)."""
    pixels = torch.from_numpy(natural_image(3, (160, 120))).to(torch.float64)
    luma = pixels.mean(dim=-1)[None, None]
    luma[..., :30, :] = 255.0
    return luma


@pytest.mark.parametrize("padding", ["same", "replicate", "symmetric"])
def test_separable_normalisation_is_pyiqas_float64_to_rounding(luminance, padding):
    from pyiqa.archs.func_util import normalize_img_with_gauss

    expected = normalize_img_with_gauss(luminance, padding=padding)
    found = numerics.normalize_in_float64(luminance, padding=padding)
    assert found.dtype == torch.float64 and found.shape == expected.shape
    assert (found - expected).abs().max().item() < 1e-6
    # The separable kernel sums to pyiqa's float32-rounded one (1 + 1.1e-8), not to 1.
    from pyiqa.matlab_utils.functions import fspecial

    taps = numerics._gaussian_1d(7, 7 / 6, luminance)
    pyiqas = float(fspecial(7, 7 / 6, 1).to(torch.float64).sum())
    assert float(torch.outer(taps, taps).sum()) == pytest.approx(pyiqas, abs=1e-15)
    assert pyiqas != 1.0


def test_a_float32_input_is_computed_in_float64_and_returned_in_float32(luminance):
    from pyiqa.archs.func_util import normalize_img_with_gauss

    found = numerics.normalize_in_float64(luminance.float())
    assert found.dtype == torch.float32
    in_float64 = normalize_img_with_gauss(luminance)
    in_float32 = normalize_img_with_gauss(luminance.float())
    assert (found.double() - in_float64).abs().max() < (
        in_float32.double() - in_float64
    ).abs().max() / 100


def test_pyiqa_is_unchanged_outside_the_context_and_in_other_threads(luminance):
    from pyiqa.archs import brisque_arch, func_util

    numerics.install()
    numerics.install()  # idempotent: wrapped once
    wrapped = brisque_arch.normalize_img_with_gauss
    assert wrapped is not func_util.normalize_img_with_gauss
    assert getattr(wrapped.__wrapped__, "__iqa_tools_separable__", False) is False
    original = func_util.normalize_img_with_gauss(luminance)
    assert torch.equal(wrapped(luminance), original)
    seen: dict[str, torch.Tensor] = {}
    with numerics.separable_normalisation():
        inside = wrapped(luminance)
        thread = threading.Thread(target=lambda: seen.setdefault("other", wrapped(luminance)))
        thread.start()
        thread.join()
    assert not torch.equal(inside, original)
    assert torch.equal(inside, numerics.normalize_in_float64(luminance))
    assert torch.equal(seen["other"], original)  # another thread is not in the context
    assert torch.equal(wrapped(luminance), original)


def test_the_registry_scores_float64_tools_with_the_separable_normalisation(tmp_path, photo):
    from iqa_tools import ToolRegistry, ToolSettings
    from iqa_tools.models import to_tensor

    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="memory"))
    result = registry.execute_tool("PIQE", photo, use_cache=False, allow_fallback=False)
    metric = registry.metric("PIQE")
    from iqa_tools import load_image

    pixels = to_tensor(load_image(photo), "cpu", "float64")
    with torch.inference_mode():
        with numerics.separable_normalisation():
            separable = float(metric(pixels).reshape(-1)[0])
        plain = float(metric(pixels).reshape(-1)[0])
    assert result.raw_score == separable
    assert result.raw_score == pytest.approx(plain, rel=1e-6)
