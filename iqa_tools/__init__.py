"""Score images with IQA tools from pyiqa behind one small API: names in, [1, 5] scores out.

>>> from iqa_tools import execute_tool
>>> execute_tool("PIQE", "examples/parrots.png").normalized_score   # doctest: +SKIP

Where each thing happens:

* :mod:`.catalog` and ``metadata/tools.json``: what each tool is (type, range, direction);
  :mod:`.settings`: how tools run here (device, cache, limits).
* :mod:`.registry`: running a tool on one image or a batch, with its checks (weights, memory),
  the score cache (:mod:`.cache`) and fallbacks; :mod:`.models`: each tool's model, built once
  per process, and the tensors it computes on; :mod:`.normalize`: raw scores to [1, 5];
  :mod:`.numerics`, :mod:`.tiling`, :mod:`.memory`: how a large image is scored within memory.
* :mod:`.weights`, :mod:`.download`, :mod:`.filecheck`: the models' weight files, found,
  fetched and checked.
* :mod:`.images`: reading and checking an image;
  :mod:`.storage`: where its bytes come from (a path, object storage, HTTPS), behind the gate
  of what a job may read.
* :mod:`.errors`: the typed failures of all of the above.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The re-exports load on first use (PEP 562), so ``from iqa_tools import ToolError`` does not
# import the registry, the score cache, Pillow and numpy with it: the command line's start-up
# (``agentic-iqa --help``) pays only for what it touches.
_EXPORTS = {
    "ScoreCache": "cache",
    "cache_key": "cache",
    "open_store": "cache",
    "DISTORTION_CATEGORIES": "catalog",
    "Catalog": "catalog",
    "ToolSpec": "catalog",
    "load_catalog": "catalog",
    "ImageLoadError": "errors",
    "InputError": "errors",
    "MetadataError": "errors",
    "NonFiniteScoreError": "errors",
    "ToolError": "errors",
    "ToolFailure": "errors",
    "ToolMemoryError": "errors",
    "ToolRuntimeError": "errors",
    "ToolUnavailableError": "errors",
    "UnknownToolError": "errors",
    "LoadedImage": "images",
    "load_image": "images",
    "read_image": "images",
    "ToolRegistry": "registry",
    "ToolResult": "registry",
    "execute_tool": "registry",
    "get_registry": "registry",
    "metric_creations": "models",
    "ToolSettings": "settings",
}

if TYPE_CHECKING:
    from .cache import ScoreCache, cache_key, open_store
    from .catalog import DISTORTION_CATEGORIES, Catalog, ToolSpec, load_catalog
    from .errors import (
        ImageLoadError,
        InputError,
        MetadataError,
        NonFiniteScoreError,
        ToolError,
        ToolFailure,
        ToolMemoryError,
        ToolRuntimeError,
        ToolUnavailableError,
        UnknownToolError,
    )
    from .images import LoadedImage, load_image, read_image
    from .models import metric_creations
    from .registry import ToolRegistry, ToolResult, execute_tool, get_registry
    from .settings import ToolSettings


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


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
    "ToolMemoryError",
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
