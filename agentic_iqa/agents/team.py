"""Build the agents of a run: one VLM client per role and the tool registry.

A run in this process takes the configured backends (:func:`default_agents`); a job's item
takes the backends, models and tools the job was submitted with (:func:`agents_for`, built once
per configuration by :class:`AgentsCache`); a metric job asks no VLM (:func:`metric_agents`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iqa_tools import ToolRegistry

    from ..runconfig import RunConfig
    from ..vlm.base import VLMClient


@dataclass
class Agents:
    """What the steps need: one VLM client per role and the tool registry."""

    planner: VLMClient
    executor: VLMClient
    summarizer: VLMClient
    registry: ToolRegistry
    #: The model calls are answered by provider batches (:mod:`agentic_iqa.vlm.batching`).
    batch: bool = False


def default_agents(registry: ToolRegistry | None = None) -> Agents:
    """Build clients from ``configs/model_backends.yaml`` (builtin by default) and the tools."""
    from iqa_tools import get_registry

    from ..config import load_tool_settings
    from ..vlm import create_client

    return Agents(
        planner=create_client("planner"),
        executor=create_client("executor"),
        summarizer=create_client("summarizer"),
        registry=registry or get_registry(load_tool_settings()),
    )


def metric_agents(registry: ToolRegistry | None = None) -> Agents:
    """Build the agents of a metric job, which never asks a VLM.

    Builtin clients fill the roles, so no backend (key, server) needs configuring just to run
    tools."""
    from iqa_tools import get_registry

    from ..config import load_tool_settings
    from ..vlm.builtin import BuiltinClient

    client = BuiltinClient()
    return Agents(
        planner=client,
        executor=client,
        summarizer=client,
        registry=registry or get_registry(load_tool_settings()),
    )


def agents_for(config: RunConfig | None) -> Agents:
    """Build the agents for a job's items as the job was submitted.

    Its backends, models and base URLs per role, its tools' device, fallbacks and catalogue
    (:mod:`agentic_iqa.runconfig`); the environment's defaults for a run with no stored
    configuration.  Raises :class:`~agentic_iqa.runconfig.CannotHonour` where this process
    cannot (no key for the job's backend, other prompts or another tool catalogue): nothing is
    ever answered on something else."""
    from iqa_tools import ToolRegistry, get_registry

    from ..config import load_tool_settings
    from ..runconfig import backend_configs, check_prompts, check_tools
    from ..vlm import create_client

    if config is None:
        return default_agents()
    check_prompts(config)
    local = load_tool_settings()
    settings = check_tools(config, local)
    # The process-wide registry when it has the job's tool settings (it keeps those of its
    # first call: an in-process caller may have changed the environment since); else one of
    # its own (models are shared by every registry of the process anyway).
    shared = get_registry(local)
    registry = shared if shared.settings == settings else ToolRegistry(settings)
    if config.metric_tools:
        return metric_agents(registry)
    roles = backend_configs(config)
    batch = config.batch
    return Agents(
        planner=create_client("planner", roles, batch=batch),
        executor=create_client("executor", roles, batch=batch),
        summarizer=create_client("summarizer", roles, batch=batch),
        registry=registry,
        batch=batch,
    )


class AgentsCache:
    """:func:`agents_for`, built once per configuration in this process (clients hold
    connection pools; the registry its models) and shared by its threads."""

    def __init__(self, size: int = 8) -> None:
        self._size = size
        self._built: dict[str | None, Agents] = {}
        self._lock = threading.Lock()

    def __call__(self, config: RunConfig | None) -> Agents:
        key = config.to_json() if config is not None else None
        with self._lock:
            found = self._built.get(key)
            if found is None:
                found = agents_for(config)
                if len(self._built) >= self._size:
                    self._built.pop(next(iter(self._built)))
                self._built[key] = found
            return found

    def built(self) -> list[Agents]:
        """Return the agents built so far (a tool batch clears what each registry scored ahead)."""
        with self._lock:
            return list(self._built.values())
