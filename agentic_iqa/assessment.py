"""Assess one image from Python, and read the result as typed attributes.

:func:`assess` is the library's front door: it does what ``agentic-iqa assess --no-store``
does (the backends of ``configs/model_backends.yaml`` and the environment, the tools of
``configs/tools.yaml``), and the run's state, a dict of models, comes back as a frozen
:class:`Assessment`: the answer, the score, the reasoning, the plan, the tools that ran, the
distortions analysed, the replanning rounds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .evidence import stand_ins
from .state import AgenticIQAState, DistortionAnalysis, PlannerOutput, ReplanEntry

if TYPE_CHECKING:
    from .agents.team import Agents


@dataclass(frozen=True)
class ToolScore:
    """One tool call of a run: which tool scored what, and how it went."""

    #: The tool that produced the score.
    tool: str
    #: The object or region it was run for, or "Global" (the whole image).
    object: str
    #: The distortion the tool was chosen for.
    distortion: str
    #: The score mapped onto [1, 5] (NaN when the tool failed).
    score: float
    #: The tool's own output, on its own scale.
    raw_score: float
    #: Seconds the call took.
    seconds: float
    #: Why the tool failed, or why the tool wanted did not run; None when all went well.
    error: str | None = None
    #: The tool this one stood in for (not installed here, no reference, failed), if any.
    in_place_of: str | None = None
    #: The region whose crop was scored; None: the whole image.
    region: str | None = None
    #: The raw score came from the score cache.
    cached: bool = False


@dataclass(frozen=True, kw_only=True)
class Assessment:
    """What the agent concluded about one image, and the evidence behind it."""

    #: The question asked.
    query: str
    #: The answer: an option letter ("B") or a quality level ("Good"); None when the run failed.
    answer: str | None
    #: The fused quality score in [1, 5] (scoring mode), else None.
    score: float | None
    #: Why the answer is what it is, in words.
    reasoning: str | None
    #: The Planner's plan (``plan.query_type``, ``plan.query_scope``, ...); None without one.
    plan: PlannerOutput | None
    #: The tool calls of the run, in the order they ran.
    tools: tuple[ToolScore, ...] = ()
    #: The distortions analysed, per object or "Global": type, severity and explanation.
    distortions: Mapping[str, tuple[DistortionAnalysis, ...]] = field(default_factory=dict)
    #: The probability of each quality level (scoring mode), else empty.
    levels: Mapping[str, float] = field(default_factory=dict)
    #: The replanning rounds, each with its reason.
    replans: tuple[ReplanEntry, ...] = ()
    #: Sentences saying which tool stood in for which, and why ("PIQE stood in for BRISQUE ...").
    stand_ins: tuple[str, ...] = ()
    #: Why the run ended without an answer, else None.
    error: str | None = None
    #: The run's raw state, as :func:`agentic_iqa.pipeline.run_inprocess` returns it.
    state: AgenticIQAState

    @classmethod
    def from_state(cls, state: AgenticIQAState) -> Assessment:
        """Read a run's final state (in process, or ``state_from_json`` of a stored one)."""
        result = state.get("summarizer_result")
        evidence = state.get("executor_evidence")
        logs = evidence.tool_logs if evidence is not None else []
        analysis = (evidence.distortion_analysis if evidence is not None else None) or {}
        return cls(
            query=state["query"],
            answer=result.final_answer if result is not None else None,
            score=result.quality_score if result is not None else None,
            reasoning=result.quality_reasoning if result is not None else None,
            plan=state.get("plan"),
            tools=tuple(
                ToolScore(
                    tool=entry.tool_name,
                    object=entry.object_name,
                    distortion=entry.distortion,
                    score=entry.normalized_score,
                    raw_score=entry.raw_score,
                    seconds=entry.execution_time,
                    error=entry.error,
                    in_place_of=(
                        entry.requested_tool
                        if entry.fallback and entry.requested_tool not in (None, entry.tool_name)
                        else None
                    ),
                    region=entry.region,
                    cached=entry.cached,
                )
                for entry in logs
            ),
            distortions={key: tuple(items) for key, items in analysis.items()},
            levels=dict(result.level_distribution or {}) if result is not None else {},
            replans=tuple(state.get("replan_history", ())),
            stand_ins=tuple(
                entry["sentence"] for entry in stand_ins(entry.model_dump() for entry in logs)
            ),
            error=state.get("error"),
            state=state,
        )


def assess(
    query: str,
    image: str | os.PathLike[str],
    reference: str | os.PathLike[str] | None = None,
    *,
    backend: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    device: str | None = None,
    max_replans: int | None = None,
    agents: Agents | None = None,
    on_step: Callable[[str, float], None] | None = None,
) -> Assessment:
    """Ask the agent ``query`` about ``image`` in this process and return its assessment.

    ``reference``: a pristine image of the same size, for full-reference tools.  ``backend``,
    ``model`` and ``base_url`` apply to every role, above the configuration and the
    environment, as the CLI's flags do; ``device`` is the tools' ("cpu", "cuda").
    ``max_replans`` defaults to the pipeline's setting.  ``agents`` replaces all of that with
    clients and a registry of the caller's.  ``on_step`` is told each step and its seconds.

    Nothing is stored.  A query longer than :data:`agentic_iqa.query.MAX_QUERY_CHARS` raises
    :class:`agentic_iqa.query.QueryTooLong` (a ``ValueError``); inputs the tools could not
    measure (a missing or truncated file, a reference of another size) raise
    :class:`iqa_tools.errors.ToolError`; a backend that cannot be configured raises
    :class:`agentic_iqa.vlm.base.VLMConfigurationError`; a run that fails later returns an
    assessment with ``error`` set and no answer.
    """
    from .config import PipelineSettings
    from .pipeline import run_inprocess, validate_inputs
    from .query import check_query_length

    check_query_length(query)
    image_path = os.fspath(image)
    reference_path = os.fspath(reference) if reference is not None else None
    validate_inputs(image_path, reference_path)
    if agents is None:
        agents = _agents(backend, model, base_url, device)
    if max_replans is None:
        max_replans = PipelineSettings.load().max_replan_iterations
    state = run_inprocess(
        query,
        image_path,
        reference_path,
        agents=agents,
        max_replan_iterations=max_replans,
        on_step=on_step,
    )
    return Assessment.from_state(state)


def _agents(
    backend: str | None, model: str | None, base_url: str | None, device: str | None
) -> Agents:
    """Build the clients of each role and the tool registry, as ``agentic-iqa assess`` does."""
    from iqa_tools import ToolRegistry

    from .agents.team import Agents
    from .config import load_tool_settings
    from .vlm import create_client
    from .vlm.settings import load_backend_configs

    flags = {
        name: value
        for name, value in (("backend", backend), ("model", model), ("base_url", base_url))
        if value is not None
    }
    roles = load_backend_configs(overrides=flags)
    return Agents(
        planner=create_client("planner", roles),
        executor=create_client("executor", roles),
        summarizer=create_client("summarizer", roles),
        registry=ToolRegistry(load_tool_settings(**({"device": device} if device else {}))),
    )


__all__ = ["Assessment", "ToolScore", "assess"]
