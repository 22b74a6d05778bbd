"""IQA tools from pyiqa behind one small API: names in, [1, 5] scores out.

>>> from iqa_tools import execute_tool
>>> execute_tool("PIQE", "examples/parrots.png").normalized_score   # doctest: +SKIP
"""

from .cache import ScoreCache, cache_key, open_store
from .catalog import DISTORTION_CATEGORIES, Catalog, ToolSpec, load_catalog
from .errors import (
    ImageLoadError,
    InputError,
    MetadataError,
    NonFiniteScoreError,
    ToolError,
    ToolFailure,
    ToolRuntimeError,
    ToolUnavailableError,
    UnknownToolError,
)
from .images import LoadedImage, load_image, read_image
from .registry import ToolRegistry, ToolResult, execute_tool, get_registry, metric_creations
from .settings import ToolSettings

__all__ = [
    "DISTORTION_CATEGORIES",
    "Catalog",
    "ImageLoadError",
    "InputError",
    "LoadedImage",
    "MetadataError",
    "NonFiniteScoreError",
    "ScoreCache",
    "ToolError",
    "ToolFailure",
    "ToolRegistry",
    "ToolResult",
    "ToolRuntimeError",
    "ToolSettings",
    "ToolSpec",
    "ToolUnavailableError",
    "UnknownToolError",
    "cache_key",
    "execute_tool",
    "get_registry",
    "load_catalog",
    "load_image",
    "metric_creations",
    "open_store",
    "read_image",
]
