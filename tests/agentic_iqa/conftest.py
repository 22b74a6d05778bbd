from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from agentic_iqa.fitting.degradations import degrade
from agentic_iqa.pipeline import Agents
from agentic_iqa.vlm.builtin import BuiltinClient
from iqa_tools import ToolRegistry, ToolSettings
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "i03_reference.png"


@pytest.fixture(scope="session")
def registry() -> ToolRegistry:
    return ToolRegistry(ToolSettings(device="cpu", tool_cache="memory"))


@pytest.fixture(scope="session")
def builtin_agents(registry: ToolRegistry) -> Agents:
    client = BuiltinClient()
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
