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
    return ToolRegistry(
        ToolSettings(
            device="cpu",
            weights_dir=weights,
            tool_cache=f"sqlite:///{tmp_path}/scores.sqlite3",
            **settings,
        )
    )


# -- calibration against IQA-PyTorch's own values -----------------------------------------------

# Pass when |ours - IQA-PyTorch's| <= abs + rel * |IQA-PyTorch's|: (abs, rel) per tool.
# IQA-PyTorch computed its row in float32 (our float32 values match it to 1e-5 on this CPU) and
# the CSV rounds to 4 decimals (up to 5e-5).
# - Weight-free FR metrics run in float32 here too; their float32 rounding moves them by at most
#   7e-6 on these pairs (|float32 - float64|, measured), so rounding dominates: 1e-4 + 1e-4 rel.
# - VIF is the exception: its float32 value moves with the torch build.  On I19 it was 0.17508
#   (8.2e-5 from IQA-PyTorch's 0.1750) and is 0.17451 on torch 2.14.1+cu130 running on the CPU
#   (5.7e-4 away; the official MATLAB value is 0.1745): 1e-3 absolute.
# - BRISQUE, NIQE and PIQE run in float64 (tools.json "precision"), which gives the same value to
#   about 1e-6 on any CPU or GPU, so the gap is the reference's own float32 error: fixed, and
#   measured here. BRISQUE: 2.9 raw points on I19 (66.84 in float32, 63.93 in float64: 4.3 %),
#   0.099 on I08 (1.9 %), 5e-4 on I04, whose score is -0.107: near zero a relative tolerance means
#   nothing, hence the absolute part. NIQE: 0.016 on I03 (0.10 %). PIQE: 9e-5.
CALIBRATION_TOLERANCE: dict[str, tuple[float, float]] = {
    "PSNR": (1e-4, 1e-4),
    "SSIM": (1e-4, 1e-4),
    "MS-SSIM": (1e-4, 1e-4),
    "FSIM": (1e-4, 1e-4),
    "VIF": (1e-3, 1e-4),
    "GMSD": (1e-4, 1e-4),
    "VSI": (1e-4, 1e-4),
    "PIQE": (1e-3, 0.0),
    "NIQE": (1e-3, 2e-3),
    "BRISQUE": (0.05, 0.05),
}
CALIBRATED = list(CALIBRATION_TOLERANCE)


def pyiqa_reference_values(tid_dir: Path) -> dict[str, dict[str, float]]:
    with (tid_dir / "calibration_summary.csv").open() as handle:
        rows = list(csv.reader(handle))
    header = [name.removesuffix(".bmp") for name in rows[0][1:]]
    return {
        row[0].removesuffix("(ours)"): dict(zip(header, map(float, row[1:]), strict=True))
        for row in rows[1:]
        if row[0].endswith("(ours)")
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
        result = registry.execute_tool(
            tool, tid_dir / "dist" / f"{stem}.png", reference, allow_fallback=False
        )
        assert not result.fallback
        absolute, relative = CALIBRATION_TOLERANCE[tool]
        assert abs(result.raw_score - value) <= absolute + relative * abs(value), (
            tool,
            stem,
            result.raw_score,
            value,
        )
        assert 1.0 <= result.normalized_score <= 5.0


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("tool", ["BRISQUE", "NIQE", "PIQE"])
def test_nss_tools_compute_in_float64_on_pyiqas_own_pixels(tool, tid_dir, weights_dir, tmp_path):
    """Our loading and dtype give what pyiqa gives on its own loader's pixels cast to float64.

    In float32 BRISQUE is 2.9 raw points away on I19, so a lost dtype cannot pass unnoticed.
    The local normalisation is computed separably (iqa_tools.numerics): the same to 1e-7 here.
    """
    import torch
    from pyiqa.utils.img_util import imread2tensor

    registry = make_registry(tmp_path, weights_dir)
    assert registry.get(tool).precision == "float64"
    metric = registry.metric(tool)
    for path in sorted((tid_dir / "dist").glob("*.png")):
        with torch.inference_mode():
            pixels = imread2tensor(str(path), rgb=True).unsqueeze(0).to(torch.float64)
            expected = float(metric(pixels).reshape(-1)[0])
        result = registry.execute_tool(tool, path, use_cache=False, allow_fallback=False)
        assert result.raw_score == pytest.approx(expected, rel=1e-6, abs=1e-6), (tool, path.name)


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
    key = cache_key("PIQE", load_image(photo).digest, numerics="float64+sepnorm1")
    registry.cache.memory.set(key, 42.0)
    second = registry.execute_tool("PIQE", photo)
    assert second.cached
    assert second.raw_score == 42.0
    assert second.normalized_score == pytest.approx(registry.get("PIQE").normalize(42.0))


@pytest.mark.slow
def test_new_process_reuses_the_persistent_cache(tmp_path, photo):
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{tmp_path}/shared.sqlite3",
        "AGENTIC_IQA_DEVICE": "cpu",
    }
    command = [sys.executable, "-m", "agentic_iqa", "tools", "run", "PIQE", str(photo), "--json"]
    runs = [
        json.loads(
            subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        )
        for _ in range(2)
    ]
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
@pytest.mark.parametrize("level", [128, 200])
def test_one_colour_image_falls_back_along_the_configured_chain(tmp_path, weights_dir, level):
    # On a one-colour image BRISQUE scores rounding noise (108.38 at grey 200, NaN or 108.76 at
    # 128 depending on the precision) and NIQE raises; PIQE defines it: no active block, 100.
    grey = tmp_path / "grey.png"
    Image.fromarray(np.full((128, 128, 3), level, dtype=np.uint8)).save(grey)
    registry = make_registry(tmp_path, weights_dir)
    result = registry.execute_tool("BRISQUE", grey)
    assert result.fallback
    assert result.tool == "PIQE"
    assert "BRISQUE is undefined" in result.error and "same colour" in result.error
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
    assert (
        registry.cache.get(cache_key("PIQE", load_image(black).digest, numerics="float64")) is None
    )


def test_fallback_chain_is_configurable(tmp_path):
    with pytest.raises(UnknownToolError):
        make_registry(tmp_path, fallback_chain=["NOT_A_TOOL"])
    registry = make_registry(tmp_path, fallback_chain=["PIQE"])
    assert [spec.name for spec in registry.fallback_candidates(registry.get("SSIM"))][0] == "PIQE"


# -- tools registered by import string ---------------------------------------------------------


def test_factory_tool_from_a_metadata_override(tmp_path, photo):
    override = tmp_path / "extra.json"
    override.write_text(
        json.dumps(
            {
                "tools": {
                    "Brightness": {
                        "display_name": "Mean brightness",
                        "factory": "tests.iqa_tools.factories:mean_brightness",
                        "type": "NR",
                        "lower_is_better": False,
                        "score_range": [0, 1],
                        "description": "toy tool",
                        "from_paper": False,
                        "default": False,
                        "normalization": {
                            "form": "linear",
                            "params": {"x_at_1": 0, "x_at_5": 1},
                            "source": "test",
                        },
                    }
                }
            }
        )
    )
    registry = make_registry(tmp_path, metadata_overrides=[override])
    result = registry.execute_tool("brightness", photo)
    expected = float(load_image(photo).pixels.mean())
    assert result.raw_score == pytest.approx(expected, rel=1e-5)
    assert result.normalized_score == pytest.approx(1 + 4 * expected, rel=1e-5)
    registry.execute_tool("Brightness", photo, use_cache=False)
    assert factories.BUILT.count("cpu") == 1


def test_nan_from_a_registered_tool_is_never_a_score(tmp_path, photo):
    override = tmp_path / "nan.json"
    override.write_text(
        json.dumps(
            {
                "tools": {
                    "NaNTool": {
                        "display_name": "NaN",
                        "factory": "tests.iqa_tools.factories:always_nan",
                        "type": "NR",
                        "lower_is_better": False,
                        "score_range": [0, 1],
                        "description": "toy",
                        "default": False,
                        "normalization": {
                            "form": "linear",
                            "params": {"x_at_1": 0, "x_at_5": 1},
                            "source": "test",
                        },
                    }
                }
            }
        )
    )
    registry = make_registry(tmp_path, metadata_overrides=[override])
    result = registry.execute_tool("NaNTool", photo)
    assert result.fallback and result.tool == "PIQE"
    assert math.isfinite(result.raw_score)
    assert "NaNTool returned nan" in result.error


# -- numeric precision -------------------------------------------------------------------------


def dtype_tool_override(path: Path, precisions: dict[str, str | None]) -> Path:
    """A metadata override with one toy tool per name, each with the given precision."""
    tools = {}
    for name, precision in precisions.items():
        tools[name] = {
            "display_name": name,
            "factory": "tests.iqa_tools.factories:dtype_recorder",
            "type": "NR",
            "lower_is_better": False,
            "score_range": [0, 1],
            "description": "toy tool that records dtypes",
            "from_paper": False,
            "default": False,
            "normalization": {
                "form": "linear",
                "params": {"x_at_1": 0, "x_at_5": 1},
                "source": "test",
            },
            **({"precision": precision} if precision else {}),
        }
    path.write_text(json.dumps({"tools": tools}))
    return path


def test_a_float64_tool_gets_a_float64_tensor_and_model(tmp_path, photo):
    override = dtype_tool_override(tmp_path / "dtypes.json", {"Plain": None, "Exact": "float64"})
    registry = make_registry(tmp_path, metadata_overrides=[override])
    assert registry.get("Plain").precision == "float32"  # the default
    pixels = load_image(photo).pixels

    plain = registry.execute_tool("Plain", photo, use_cache=False, allow_fallback=False)
    assert factories.SEEN_DTYPES[-1] == ("torch.float32", "torch.float32")
    exact = registry.execute_tool("Exact", photo, use_cache=False, allow_fallback=False)
    assert factories.SEEN_DTYPES[-1] == ("torch.float64", "torch.float64")

    # The float64 mean of the (float32) pixels is reproduced to double precision.
    assert exact.raw_score == pytest.approx(float(np.mean(pixels, dtype=np.float64)), rel=1e-12)
    assert plain.raw_score == pytest.approx(exact.raw_score, rel=1e-5)


def test_cache_key_has_the_precision_and_old_keys_are_never_served(tmp_path, photo):
    digest = load_image(photo).digest
    assert cache_key("BRISQUE", digest, numerics="float64") != cache_key(
        "BRISQUE", digest, numerics="float32"
    )
    # Two registries on one store (make_registry's is per tmp_path), one tool, two precisions.
    single = make_registry(
        tmp_path,
        metadata_overrides=[dtype_tool_override(tmp_path / "f32.json", {"Toy": "float32"})],
    )
    double = make_registry(
        tmp_path,
        metadata_overrides=[dtype_tool_override(tmp_path / "f64.json", {"Toy": "float64"})],
    )
    # A score written under the key format from before precision was part of it.
    double.cache.store.set(f"Toy|{digest}|-", 42.0)

    first = single.execute_tool("Toy", photo, allow_fallback=False)
    assert not first.cached and factories.SEEN_DTYPES[-1][0] == "torch.float32"
    other = double.execute_tool("Toy", photo, allow_fallback=False)
    assert not other.cached and factories.SEEN_DTYPES[-1][0] == "torch.float64"
    assert other.raw_score != 42.0
    assert single.execute_tool("Toy", photo).cached
    assert double.execute_tool("Toy", photo).raw_score == other.raw_score


@pytest.mark.slow
def test_torch_threads_caps_the_threads_of_a_tool_process(tmp_path) -> None:
    """Several tool processes on one machine must not each spin a thread per core."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    script = (
        "import json, torch\n"
        "from iqa_tools import ToolRegistry, ToolSettings\n"
        "before = torch.get_num_threads()\n"
        "registry = ToolRegistry(ToolSettings(device='cpu', tool_cache='memory', "
        "torch_threads=1))\n"
        "registry.metric('PSNR')\n"
        "print(json.dumps([before, torch.get_num_threads()]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert (before, after) == (2, 1)


def test_one_colour_is_told_from_an_image_with_a_single_other_pixel(tmp_path):
    import numpy as np
    from PIL import Image

    from iqa_tools.registry import is_one_colour

    flat = np.full((64, 80, 3), 200, dtype=np.uint8)
    Image.fromarray(flat).save(tmp_path / "flat.png")
    assert is_one_colour(load_image(tmp_path / "flat.png"))
    flat[37, 51] = (200, 201, 200)  # off the sampled pixels: only the full comparison sees it
    Image.fromarray(flat).save(tmp_path / "dot.png")
    assert not is_one_colour(load_image(tmp_path / "dot.png"))
    assert not is_one_colour(load_image(tmp_path / "dot.png"))
