import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from iqa_tools import (
    ImageLoadError,
    InputError,
    ToolFailure,
    ToolRegistry,
    ToolSettings,
    ToolUnavailableError,
    UnknownToolError,
    load_image,
    metric_creations,
)
from iqa_tools.cache import cache_key
from tests.conftest import natural_image
from tests.iqa_tools import factories


def make_registry(tmp_path: Path, weights: Path | None = None, **settings) -> ToolRegistry:
    return ToolRegistry(ToolSettings(
        device="cpu", weights_dir=weights, tool_cache=f"sqlite:///{tmp_path}/scores.sqlite3",
        **settings,
    ))


# -- calibration against IQA-PyTorch's own values -----------------------------------------------

CALIBRATED = ["PSNR", "SSIM", "MS-SSIM", "FSIM", "VIF", "GMSD", "VSI", "PIQE", "NIQE", "BRISQUE"]


def pyiqa_reference_values(tid_dir: Path) -> dict[str, dict[str, float]]:
    with (tid_dir / "calibration_summary.csv").open() as handle:
        rows = list(csv.reader(handle))
    header = [name.removesuffix(".bmp") for name in rows[0][1:]]
    return {
        row[0].removesuffix("(ours)"): dict(zip(header, map(float, row[1:]), strict=True))
        for row in rows[1:] if row[0].endswith("(ours)")
    }


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("tool", CALIBRATED)
def test_reproduces_iqa_pytorch_calibration_values(tool, tid_dir, weights_dir, tmp_path):
    registry = make_registry(tmp_path, weights_dir)
    spec = registry.get(tool)
    expected = pyiqa_reference_values(tid_dir)[spec.pyiqa_name]
    for stem, value in expected.items():
        reference = tid_dir / "ref" / f"{stem}.png" if spec.is_full_reference else None
        result = registry.execute_tool(tool, tid_dir / "dist" / f"{stem}.png", reference,
                                       allow_fallback=False)
        assert not result.fallback
        # the CSV rounds to 4 decimals, hence the small absolute tolerance
        assert result.raw_score == pytest.approx(value, rel=1e-2, abs=1e-4), (tool, stem)
        assert 1.0 <= result.normalized_score <= 5.0


# -- models built once, scores cached ----------------------------------------------------------

def test_metric_is_created_once_per_process_and_shared_by_registries(tmp_path, photo):
    first = make_registry(tmp_path)
    before = metric_creations()["PIQE"]
    first.execute_tool("PIQE", photo, use_cache=False)
    after_first = metric_creations()["PIQE"]
    assert after_first - before <= 1  # 0 if an earlier test built it already
    second = make_registry(tmp_path / "other")
    second.execute_tool("piqe", photo, use_cache=False)
    first.execute_tool("PIQE", photo, use_cache=False)
    assert metric_creations()["PIQE"] == after_first
    assert metric_creations()["PIQE"] >= 1


def test_second_call_is_served_from_cache_without_running_the_tool(tmp_path, photo):
    registry = make_registry(tmp_path)
    first = registry.execute_tool("PIQE", photo)
    assert not first.cached
    # Plant a different value under the same key: if the tool ran again we would not see it.
    key = cache_key("PIQE", load_image(photo).digest)
    registry.cache.memory.set(key, 42.0)
    second = registry.execute_tool("PIQE", photo)
    assert second.cached
    assert second.raw_score == 42.0
    assert second.normalized_score == pytest.approx(registry.get("PIQE").normalize(42.0))


def test_new_process_reuses_the_persistent_cache(tmp_path, photo):
    import os
    import subprocess
    import sys

    env = {**os.environ, "AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{tmp_path}/shared.sqlite3",
           "AGENTIC_IQA_DEVICE": "cpu"}
    command = [sys.executable, "-m", "agentic_iqa", "tools", "run", "PIQE", str(photo), "--json"]
    runs = [json.loads(subprocess.run(command, env=env, capture_output=True, text=True,
                                      check=True).stdout) for _ in range(2)]
    assert runs[0]["cached"] is False
    assert runs[1]["cached"] is True
    assert runs[1]["raw_score"] == runs[0]["raw_score"]


def test_fr_cache_key_depends_on_the_reference(tmp_path):
    ref_a, ref_b, dist = tmp_path / "a.png", tmp_path / "b.png", tmp_path / "d.png"
    Image.fromarray(natural_image(1)).save(ref_a)
    Image.fromarray(natural_image(2)).save(ref_b)
    Image.fromarray(natural_image(3)).save(dist)
    registry = make_registry(tmp_path)
    score_a = registry.execute_tool("PSNR", dist, ref_a)
    score_b = registry.execute_tool("PSNR", dist, ref_b)
    assert not score_b.cached
    assert score_a.raw_score != score_b.raw_score


# -- bad input and failing tools ---------------------------------------------------------------

def test_missing_and_corrupt_images_are_tool_errors_naming_the_path(tmp_path, photo):
    registry = make_registry(tmp_path)
    with pytest.raises(ImageLoadError, match="missing.png"):
        registry.execute_tool("PIQE", tmp_path / "missing.png")
    fake = tmp_path / "fake.png"
    fake.write_text("hello")
    with pytest.raises(ImageLoadError, match="fake.png"):
        registry.execute_tool("PIQE", fake)
    truncated = tmp_path / "cut.jpg"
    Image.fromarray(natural_image()).save(truncated, quality=90)
    truncated.write_bytes(truncated.read_bytes()[:2000])
    with pytest.raises(ImageLoadError, match="cut.jpg"):
        registry.execute_tool("SSIM", truncated, photo)


def test_full_reference_inputs_are_checked(tmp_path, photo):
    registry = make_registry(tmp_path)
    other = tmp_path / "small.png"
    Image.fromarray(natural_image(size=(128, 96))).save(other)
    with pytest.raises(InputError, match=r"256x192.*128x96.*never resized"):
        registry.execute_tool("SSIM", photo, other)
    with pytest.raises(InputError, match="needs a reference"):
        registry.execute_tool("SSIM", photo)


def test_unknown_tool(tmp_path, photo):
    with pytest.raises(UnknownToolError, match="known tools: TOPIQ_FR"):
        make_registry(tmp_path).execute_tool("NOPE", photo)


def test_tool_without_weights_is_reported_with_the_file_it_needs(tmp_path, photo):
    registry = make_registry(tmp_path)
    availability = registry.availability("LPIPS")
    assert not availability.ok
    with pytest.raises(ToolUnavailableError, match=r"LPIPS cannot run here: missing .*\.pth"):
        registry.execute_tool("LPIPS", photo, photo, allow_fallback=False)


def test_unavailable_tool_falls_back_to_a_no_reference_tool(tmp_path, photo):
    registry = make_registry(tmp_path)  # no weights: BRISQUE and NIQE cannot run either
    result = registry.execute_tool("LPIPS", photo, photo)
    assert result.fallback
    assert result.requested_tool == "LPIPS"
    assert result.tool == "PIQE"  # the next available NR tool after the configured chain
    assert "LPIPS cannot run here" in result.error
    assert 1.0 <= result.normalized_score <= 5.0


@pytest.mark.data
def test_nan_from_a_real_metric_falls_back_along_the_configured_chain(tmp_path, weights_dir):
    grey = tmp_path / "grey.png"  # BRISQUE returns NaN on a constant image; NIQE raises
    Image.fromarray(np.full((128, 128, 3), 128, dtype=np.uint8)).save(grey)
    registry = make_registry(tmp_path, weights_dir)
    result = registry.execute_tool("BRISQUE", grey)
    assert result.fallback
    assert result.tool == "PIQE"
    assert "BRISQUE returned nan" in result.error
    assert result.raw_score == pytest.approx(100.0)


@pytest.mark.data
def test_when_every_fallback_fails_the_error_lists_each_attempt(tmp_path, weights_dir):
    black = tmp_path / "black.png"  # PIQE returns NaN on black; BRISQUE and NIQE raise
    Image.fromarray(np.zeros((128, 128, 3), dtype=np.uint8)).save(black)
    registry = make_registry(tmp_path, weights_dir)
    with pytest.raises(ToolFailure) as failure:
        registry.execute_tool("PIQE", black)
    message = str(failure.value)
    assert "PIQE returned nan" in message
    assert "BRISQUE:" in message and "NIQE:" in message
    # nothing non-finite was cached
    assert registry.cache.get(cache_key("PIQE", load_image(black).digest)) is None


def test_fallback_chain_is_configurable(tmp_path):
    with pytest.raises(UnknownToolError):
        make_registry(tmp_path, fallback_chain=["NOT_A_TOOL"])
    registry = make_registry(tmp_path, fallback_chain=["PIQE"])
    assert [spec.name for spec in registry.fallback_candidates(registry.get("SSIM"))][0] == "PIQE"


# -- tools registered by import string ---------------------------------------------------------

def test_factory_tool_from_a_metadata_override(tmp_path, photo):
    override = tmp_path / "extra.json"
    override.write_text(json.dumps({"tools": {"Brightness": {
        "display_name": "Mean brightness", "factory": "tests.iqa_tools.factories:mean_brightness",
        "type": "NR", "lower_is_better": False, "score_range": [0, 1],
        "description": "toy tool", "from_paper": False, "default": False,
        "normalization": {"form": "linear", "params": {"x_at_1": 0, "x_at_5": 1},
                          "source": "test"},
    }}}))
    registry = make_registry(tmp_path, metadata_overrides=[override])
    result = registry.execute_tool("brightness", photo)
    expected = float(load_image(photo).pixels.mean())
    assert result.raw_score == pytest.approx(expected, rel=1e-5)
    assert result.normalized_score == pytest.approx(1 + 4 * expected, rel=1e-5)
    registry.execute_tool("Brightness", photo, use_cache=False)
    assert factories.BUILT.count("cpu") == 1


def test_nan_from_a_registered_tool_is_never_a_score(tmp_path, photo):
    override = tmp_path / "nan.json"
    override.write_text(json.dumps({"tools": {"NaNTool": {
        "display_name": "NaN", "factory": "tests.iqa_tools.factories:always_nan",
        "type": "NR", "lower_is_better": False, "score_range": [0, 1], "description": "toy",
        "default": False,
        "normalization": {"form": "linear", "params": {"x_at_1": 0, "x_at_5": 1},
                          "source": "test"},
    }}}))
    registry = make_registry(tmp_path, metadata_overrides=[override])
    result = registry.execute_tool("NaNTool", photo)
    assert result.fallback and result.tool == "PIQE"
    assert math.isfinite(result.raw_score)
    assert "NaNTool returned nan" in result.error
