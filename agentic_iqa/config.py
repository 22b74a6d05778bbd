"""Where the product's YAML configuration lives, and the settings read from it.

Configuration files are looked up in ``$AGENTIC_IQA_CONFIG_DIR`` if set, else in the ``configs``
folder shipped with the package (``agentic_iqa/configs`` in a wheel, ``configs/`` in a checkout).
Environment variables override any value in them.
"""

from __future__ import annotations

import os
from pathlib import Path

from iqa_tools.settings import ToolSettings


def config_dir() -> Path:
    if os.environ.get("AGENTIC_IQA_CONFIG_DIR"):
        return Path(os.environ["AGENTIC_IQA_CONFIG_DIR"]).expanduser()
    packaged = Path(__file__).parent / "configs"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "configs"


def config_file(name: str) -> Path:
    return config_dir() / name


def load_tool_settings(**overrides: object) -> ToolSettings:
    return ToolSettings.from_yaml(config_file("tools.yaml"), **overrides)
