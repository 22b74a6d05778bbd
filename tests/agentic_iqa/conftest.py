"""Fixtures and helpers shared by the agentic_iqa tests: the tool registry, the builtin agent in
every role, the shipped example photo and degraded copies of it, and small files to run on."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from agentic_iqa.agents.team import Agents
from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine
from agentic_iqa.fitting.degradations import degrade
from agentic_iqa.vlm.builtin import BuiltinClient
from iqa_tools import ToolRegistry, ToolSettings
from iqa_tools.catalog import Catalog, load_catalog
from tests.conftest import REPO, natural_image

EXAMPLE = REPO / "examples" / "i03_reference.png"
#: The size of :func:`graded_photos`' photos.
GRADED_SIZE = (96, 72)


@pytest.fixture(scope="session")
def registry() -> ToolRegistry:
    return ToolRegistry(ToolSettings(device="cpu", tool_cache="memory"))


@pytest.fixture(scope="session")
def builtin_agents(registry: ToolRegistry) -> Agents:
    client = BuiltinClient()
    return Agents(planner=client, executor=client, summarizer=client, registry=registry)


@pytest.fixture(scope="module")
def agents() -> Agents:
    """The builtin backend in every role over a registry of the test module's own (tools on the
    CPU, scores cached in memory), so no module reads scores another module cached."""
    client = BuiltinClient()
    registry = ToolRegistry(ToolSettings(device="cpu", tool_cache="memory"))
    return Agents(planner=client, executor=client, summarizer=client, registry=registry)


@pytest.fixture(scope="session")
def example_images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The shipped reference photo and degraded copies of it (same size, PNG)."""
    folder = tmp_path_factory.mktemp("degraded")
    original = Image.open(EXAMPLE).convert("RGB")
    paths = {"original": EXAMPLE}
    for kind, level in (("blur", 3), ("noise", 3), ("jpeg", 4), ("blur", 4)):
        path = folder / f"{kind}{level}.png"
        degrade(original, kind, level).save(path)
        paths[f"{kind}{level}"] = path
    return paths


def graded_photos(folder: Path, count: int = 4) -> list[str]:
    """Write ``count`` photos ``p0.png``... into ``folder`` that get worse with the index (more
    blur), so MOS can fall with it; return their names."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for index in range(count):
        clean = Image.fromarray(natural_image(index, GRADED_SIZE))
        picture = degrade(clean, "blur", index % 5) if index % 5 else clean
        picture.save(folder / f"p{index}.png")
        names.append(f"p{index}.png")
    return names


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    """Write a CSV file (UTF-8) of ``header`` and ``rows`` to ``path``; return the path."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def always_nan_catalog() -> Catalog:
    """Return a catalogue of SSIM and "Broken", a no-reference tool whose every score is NaN."""
    catalog = load_catalog()
    broken = catalog.get("PIQE").model_copy(
        update={
            "name": "Broken",
            "pyiqa_name": None,
            "factory": "tests.iqa_tools.factories:always_nan",
        }
    )
    return Catalog([catalog.get("SSIM"), broken])


@pytest.fixture
def engine(tmp_path: Path):
    """Return an engine on a migrated SQLite results database of the test's own."""
    url = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    upgrade(url)
    return make_engine(url)


@pytest.fixture(scope="module")
def cli_env(data_dir: Path) -> Iterator[None]:
    """The CLI's settings for a module's jobs: a local run, the tools on the CPU, no VLM cache,
    and none of the caller's other ``AGENTIC_IQA_*`` settings."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("AGENTIC_IQA_")]:
            if name != "AGENTIC_IQA_DATA_DIR" and not name.startswith("AGENTIC_IQA_TEST_"):
                patch.delenv(name)
        patch.setenv("AGENTIC_IQA_WEIGHTS_DIR", str(data_dir / "pyiqa-weights"))
        patch.setenv("AGENTIC_IQA_TOOL_CACHE", "memory")
        patch.setenv("AGENTIC_IQA_DEVICE", "cpu")
        patch.setenv("AGENTIC_IQA_VLM_CACHE", "false")
        yield
