"""The byte budget per tool call (iqa_tools.memory): estimated from the header, checked before
any work, refused with the figures; the decode ceiling; the worker's arithmetic."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from iqa_tools import ToolRegistry, ToolSettings
from iqa_tools.errors import ImageLoadError, ImageTooLargeError, InputError, ToolMemoryError
from iqa_tools.images import header_size, load_image, probe_image, read_image
from iqa_tools.memory import (
    DECODE_CEILING,
    GB,
    PROCESS_BASE,
    estimate,
    largest_pixels,
    parse_bytes,
    worker_fit,
)


def _truncated_jpeg(path: Path, size: tuple[int, int]) -> Path:
    """A JPEG whose header says ``size`` but whose data stops a few bytes into a 64x64
    image's scan: decoding it fails as truncated, reading its header does not (and writing it
    takes no time)."""
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (120, 130, 140)).save(buffer, format="JPEG", quality=50)
    data = bytearray(buffer.getvalue())
    frame = data.index(b"\xff\xc0")  # baseline frame header: length, precision, height, width
    width, height = size
    data[frame + 5 : frame + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    path.write_bytes(bytes(data[: data.index(b"\xff\xda") + 40]))  # a few bytes of the scan
    return path


@pytest.fixture(scope="module")
def big_truncated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("big")
    return _truncated_jpeg(folder / "big.jpg", (12000, 12000))


def test_parse_bytes_reads_the_usual_spellings():
    assert parse_bytes("1.5GB") == 1_500_000_000
    assert parse_bytes("2 GiB") == 2 * 2**30
    assert parse_bytes("800mb") == 800_000_000
    assert parse_bytes(1234) == 1234
    for bad in ("lots", "-1GB", "0", "3 parsecs"):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_the_setting_reads_sizes_from_the_environment(monkeypatch):
    assert ToolSettings().tool_memory == int(1.5 * GB)
    monkeypatch.setenv("AGENTIC_IQA_TOOL_MEMORY", "4GB")
    assert ToolSettings().tool_memory == 4 * GB


def test_the_defaults_take_24_and_100_mp_photos_for_the_classical_tools():
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="none"))
    budget = registry.settings.tool_memory
    for tool in ("BRISQUE", "NIQE", "PIQE"):
        for pixels in (24_000_000, 100_000_000):
            assert registry.memory_estimate(tool, pixels) <= budget, (tool, pixels)
        assert 100_000_000 < registry.largest_image(tool) <= DECODE_CEILING
    # A 100-MP BRISQUE call: the uint8 image, Pillow's copy while decoding, a constant.
    assert 0.7 * GB < registry.memory_estimate("BRISQUE", 100_000_000) < 1.0 * GB
    # A learned tool's figure is conservative: refused at 100 MP, with a few MP allowed.
    assert registry.memory_estimate("DBCNN", 100_000_000) > budget
    assert 1_000_000 < registry.largest_image("DBCNN") < 3_000_000


def test_estimates_grow_with_pixels_and_pairs_cost_twice_the_image():
    single = estimate("brisque", 50_000_000, tiled=True)
    assert estimate("brisque", 100_000_000, tiled=True) > single
    assert (
        estimate("ssim", 50_000_000, full_reference=True, tiled=True)
        - estimate("ssim", 50_000_000, full_reference=False, tiled=True)
        == 3 * 50_000_000
    )
    # A tile twice as wide holds four times the working set.
    assert estimate("niqe", 2_000_000, tiled=True, tile_size=2048) > estimate(
        "niqe", 2_000_000, tiled=True
    )
    assert largest_pixels("piqe", 1, tiles_above=1_000_000) == 0


def test_a_refused_call_names_tool_size_estimate_budget_and_setting(tmp_path):
    path = tmp_path / "photo.jpg"
    Image.new("RGB", (3000, 2000), (90, 100, 110)).save(path)
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="none", tool_memory="30MB"))
    with pytest.raises(ToolMemoryError) as refused:
        registry.execute_tool("PIQE", path, use_cache=False)
    error = refused.value
    assert isinstance(error, ImageTooLargeError) and isinstance(error, InputError)
    needed = registry.memory_estimate("PIQE", 6_000_000)
    assert (error.tool, error.size, error.estimate, error.budget) == (
        "PIQE",
        (3000, 2000),
        needed,
        30_000_000,
    )
    text = str(error)
    for part in (
        "PIQE",
        "photo.jpg",
        "3000x2000 pixels, 6.0 MP",
        f"{needed / 1e6:.0f} MB",
        "budget of 30 MB per tool call",
        "AGENTIC_IQA_TOOL_MEMORY",
    ):
        assert part in text, part


def test_the_budget_is_checked_from_the_header_before_any_decode(big_truncated):
    """The file says 12000x12000 but holds 4 kB of data: decoding it fails as truncated, so a
    refusal by the budget shows that nothing was decoded (and the pixels were never cached)."""
    with pytest.raises(ImageLoadError, match="truncated"):
        probe_image(big_truncated)
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="none", tool_memory="500MB"))
    target = read_image(big_truncated)
    with pytest.raises(ToolMemoryError, match=r"12000x12000 pixels, 144.0 MP"):
        registry.execute_tool("PIQE", target, use_cache=False)
    assert "stored" not in target.__dict__
    assert target.header_size == (12000, 12000)


def test_header_size_applies_the_exif_orientation_without_decoding(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # a quarter turn: width and height swap on display
    path = tmp_path / "turned.jpg"
    Image.new("RGB", (64, 32), (10, 20, 30)).save(path, exif=exif)
    assert header_size(path.read_bytes()) == (32, 64) == load_image(path).size
    png = tmp_path / "turned.png"
    Image.new("RGB", (64, 32)).save(png, exif=exif)
    assert header_size(png.read_bytes()) == (32, 64)


@pytest.mark.parametrize("side", [15000, 20000])
def test_pillows_bomb_ceiling_refuses_above_179_mp_in_one_line(tmp_path, side):
    """225 MP and 400 MP are above the ceiling: refused from the header in one line, with no
    warning escaping; the ceiling holds even if someone switched Pillow's own limit off."""
    path = _truncated_jpeg(tmp_path / "bomb.jpg", (side, side))
    assert header_size(_png((1000, 1000))) == (1000, 1000)  # sets Pillow's limit, once
    assert Image.MAX_IMAGE_PIXELS == DECODE_CEILING == 178_956_970
    saved = Image.MAX_IMAGE_PIXELS
    try:
        for limit in (saved, None):
            Image.MAX_IMAGE_PIXELS = limit
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                with pytest.raises(ImageLoadError) as refused:
                    header_size(path.read_bytes(), str(path))
            message = str(refused.value)
            assert "\n" not in message and "too large to decode safely" in message
            assert f"{side}x{side} pixels" in message or f"{side * side} pixels" in message
    finally:
        Image.MAX_IMAGE_PIXELS = saved
    # Just below the ceiling the header is read without a word.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        near = _truncated_jpeg(tmp_path / "near.jpg", (13000, 13000))
        assert header_size(near.read_bytes()) == (13000, 13000)


def _png(size: tuple[int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((size[1], size[0], 3), np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_the_explicit_pixel_cap_still_refuses_when_set(tmp_path, monkeypatch):
    path = tmp_path / "photo.png"
    Image.new("RGB", (400, 300)).save(path)
    assert probe_image(path) == (400, 300)
    monkeypatch.setenv("AGENTIC_IQA_MAX_PIXELS", "100000")
    with pytest.raises(
        ImageTooLargeError,
        match=r"400x300 pixels \(0.1 MP\), above the budget "
        r"of 0.1 MP.*AGENTIC_IQA_MAX_PIXELS",
    ):
        probe_image(path)
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="none"))
    assert registry.largest_image("PIQE") == 100_000


def test_a_step_of_several_tools_keeps_no_float_copy_of_the_image(photo):
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="none"))
    image = read_image(photo)
    scores = [
        registry.execute_tool(tool, image, use_cache=False).raw_score for tool in ("PIQE", "PIQE")
    ]
    assert scores[0] == scores[1] and np.isfinite(scores[0])
    assert "stored" in image.__dict__ and "pixels" not in image.__dict__


def test_worker_arithmetic_lowers_the_budget_to_what_fits():
    budget = int(1.5 * GB)
    roomy = worker_fit(8 * GB, 2, "prefork", budget)
    assert (roomy.budget, roomy.lowered) == (budget, False)
    tight = worker_fit(2 * GB, 1, "prefork", budget)
    assert (tight.budget, tight.lowered) == (2 * GB - PROCESS_BASE, True)
    assert "lowered from 1.50 GB to" in tight.line and "AGENTIC_IQA_TOOL_MEMORY" in tight.line
    two = worker_fit(4 * GB, 2, "prefork", budget)
    assert two.budget == (4 * GB - 2 * PROCESS_BASE) // 2
    threads = worker_fit(4 * GB, 4, "threads", budget)
    assert threads.budget == (4 * GB - PROCESS_BASE) // 4
    none = worker_fit(1 * GB, 2, "prefork", budget)
    assert none.budget == 0 and "leaves nothing" in none.line
