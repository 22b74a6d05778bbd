"""Batched scoring: several images of one tool in one forward pass, results per image."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from iqa_tools import ToolRegistry, ToolSettings
from iqa_tools.images import read_image
from tests.conftest import natural_image

BATCHER = {
    "Batcher": {
        "display_name": "batch recorder",
        "factory": "tests.iqa_tools.factories:batch_recorder",
        "type": "NR",
        "lower_is_better": False,
        "score_range": [0, 1],
        "description": "mean",
        "default": False,
        "from_paper": False,
        "normalization": {"form": "linear", "params": {"x_at_1": 0, "x_at_5": 1}, "source": "test"},
    }
}


@pytest.fixture
def mixed_size_photos(tmp_path: Path) -> list[Path]:
    """Five generated photos of 80x64 and one of 72x72."""
    paths = []
    for seed, size in enumerate([(80, 64)] * 5 + [(72, 72)]):
        path = tmp_path / f"p{seed}.png"
        Image.fromarray(natural_image(seed, size)).save(path)
        paths.append(path)
    return paths


def registry(tmp_path: Path, cache: str = "memory") -> ToolRegistry:
    overrides = tmp_path / "batcher.json"
    overrides.write_text(json.dumps({"tools": BATCHER}))
    return ToolRegistry(
        ToolSettings(device="cpu", tool_cache=cache, metadata_overrides=[overrides])
    )


def test_piqe_in_one_batch_equals_piqe_one_by_one(mixed_size_photos, tmp_path):
    batched, single = registry(tmp_path), registry(tmp_path, cache="none")
    images = [read_image(p) for p in mixed_size_photos]
    assert batched.score_batches([("PIQE", image, None) for image in images], max_batch=8) == 6
    for image in images:
        ahead = batched.execute_tool("PIQE", image)
        alone = single.execute_tool("PIQE", image)
        assert ahead.raw_score == pytest.approx(alone.raw_score, rel=1e-9, abs=1e-9)
        assert ahead.cached is False  # computed in the batch, not found in a cache
    # Taken once: the same call again is a plain cache hit.
    assert batched.execute_tool("PIQE", images[0]).cached is True


def test_groups_by_size_and_caps_the_batch(mixed_size_photos, tmp_path, monkeypatch):
    log = tmp_path / "batches.txt"
    monkeypatch.setenv("AGENTIC_IQA_TEST_BATCH_LOG", str(log))
    tools = registry(tmp_path)
    images = [read_image(p) for p in mixed_size_photos]
    calls = [("Batcher", image, None) for image in images]
    assert tools.score_batches(calls + calls[:2], max_batch=3) == 6  # repeats scored once
    # Five 80x64 images in batches of at most 3, the 72x72 one alone.
    assert sorted(int(n) for n in log.read_text().split()) == [1, 2, 3]
    for image in images:
        expected = float(image.pixels.mean())
        assert tools.execute_tool("Batcher", image).raw_score == pytest.approx(expected, 1e-5)


def test_a_cached_or_unreadable_call_is_left_to_the_per_call_path(mixed_size_photos, tmp_path):
    tools = registry(tmp_path)
    images = [read_image(p) for p in mixed_size_photos[:3]]
    tools.execute_tool("Batcher", images[0])  # now cached
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(b"\x89PNG not really")
    calls = [("Batcher", image, None) for image in images] + [
        ("Batcher", read_image(corrupt), None),
        ("SSIM", images[1], None),
    ]  # FR without ref
    assert tools.score_batches(calls) == 2
    tools.clear_batch()
    # Forgotten from the memo, the scores are still in the cache.
    assert all(tools.execute_tool("Batcher", image).cached for image in images)
