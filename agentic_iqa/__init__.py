"""Assess image quality with an agent that plans, measures with real IQA tools, and explains.

The public API, for use from Python::

    from agentic_iqa import assess

    result = assess("Rate the quality of this image.", "photo.jpg")
    result.answer, result.score, result.reasoning, [tool.tool for tool in result.tools]

- :func:`assess` runs the agent on one image in this process and returns an :class:`Assessment`
  (its tool calls are :class:`ToolScore` entries);
- :class:`JobSpec` describes a dataset job as ``agentic-iqa eval submit`` stores it
  (:class:`JobSpecError`: flags that describe no job), and :func:`evaluate` submits one, runs
  it in this process and returns an :class:`Evaluation` (the job's id, state and report).

The names load on first use (PEP 562), so ``import agentic_iqa`` stays light: a command that
needs none of them loads none of the agent, the tools or pydantic's models.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Each public name and the module that defines it.
_HOMES = {
    "Assessment": "agentic_iqa.assessment",
    "ToolScore": "agentic_iqa.assessment",
    "assess": "agentic_iqa.assessment",
    "Evaluation": "agentic_iqa.evaluation",
    "evaluate": "agentic_iqa.evaluation",
    "JobSpec": "agentic_iqa.jobs.spec",
    "JobSpecError": "agentic_iqa.jobs.spec",
}

__all__ = [
    "Assessment",
    "Evaluation",
    "JobSpec",
    "JobSpecError",
    "ToolScore",
    "__version__",
    "assess",
    "evaluate",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use and return the name (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """List the module's names, the lazily loaded ones included."""
    return sorted({*globals(), *__all__})
