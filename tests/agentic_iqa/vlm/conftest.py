"""Fixtures shared by the VLM backend tests: the shipped example photo, and a generated photo
with blurred and noisy copies of it."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from agentic_iqa.fitting.degradations import degrade
from tests.agentic_iqa.conftest import EXAMPLE
from tests.conftest import natural_image


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    """The shipped example photo, RGB (in place of the generated photo file of tests/conftest)."""
    return Image.open(EXAMPLE).convert("RGB")


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A generated photo (``clean``) and copies at level 4 of blur (``blurred``) and of noise
    (``noisy``), as PNG files."""
    folder = tmp_path_factory.mktemp("photos")
    clean = Image.fromarray(natural_image(5, (320, 240)))
    paths = {
        "clean": folder / "clean.png",
        "blurred": folder / "blurred.png",
        "noisy": folder / "noisy.png",
    }
    clean.save(paths["clean"])
    degrade(clean, "blur", 4).save(paths["blurred"])
    degrade(clean, "noise", 4).save(paths["noisy"])
    return paths
