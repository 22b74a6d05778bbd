"""Answer as a VLM would, offline and deterministically: a real (small) agent, no network, no key.

It answers the same requests as a remote VLM, in the same JSON, from the structured context of
each request: the planner parses the query (:mod:`.query`), the executor measures the image
(:mod:`.measure`, :mod:`.severity`) and picks tools from the registry's metadata and
availability (:mod:`.selection`), and the summarizer reasons over the evidence (:mod:`.answer`).
Because it returns what a VLM would, every downstream path is the one a VLM run takes.
"""

from __future__ import annotations

import json
from typing import Any

from ...options import parse_option
from ..base import VLMRequest, VLMResponse
from ..settings import BUILTIN_MODEL
from . import answer, selection
from .opinion import OpinionModel, OpinionModels
from .planner import plan
from .vision import analyse, detect

MODEL_NAME = BUILTIN_MODEL


class BuiltinClient:
    """Implements :class:`~agentic_iqa.vlm.base.VLMClient` without any model."""

    backend = "builtin"

    def __init__(
        self, config: Any = None, opinion: OpinionModel | OpinionModels | None = None
    ) -> None:
        self.model = MODEL_NAME
        self.config = config
        #: The overall-quality opinion model; None means the shipped one.
        self.opinion = opinion

    def complete(self, request: VLMRequest) -> VLMResponse:
        context = request.context
        # A second image is the reference (full-reference mode): severities are then measured
        # as the change from it.
        reference = str(request.images[1]) if len(request.images) > 1 else None
        if request.task == "plan":
            result: dict[str, Any] = plan(
                context["query"],
                bool(context.get("has_reference")),
                context.get("tool_names", ()),
                context.get("replan_reason"),
            )
        elif request.task == "distortion_detection":
            result = {
                "distortion_set": detect(
                    context["image_path"],
                    context.get("query_scope", "Global"),
                    context.get("query", ""),
                    reference,
                )
            }
        elif request.task == "distortion_analysis":
            result = {
                "distortion_analysis": analyse(
                    context["image_path"],
                    context["distortion_set"],
                    context.get("query", ""),
                    reference,
                )
            }
        elif request.task == "tool_selection":
            result = {
                "selected_tools": selection.select(
                    context["distortion_set"],
                    context["tools"],
                    context.get("reference_mode"),
                )
            }
        elif request.task == "answer":
            result = answer.explain(context, self.opinion, reference)
        elif request.task == "quality_levels":
            probabilities = answer.level_probabilities(context, self.opinion)
            letter = max(probabilities, key=probabilities.__getitem__)
            return VLMResponse(
                text=letter,
                model=self.model,
                option_logprobs=answer.as_logprobs(probabilities),
                probability_source="builtin-measurements",
            )
        elif request.task == "answer_follow_up":
            # Which option its own reply chose: read as any reply is, else NONE (its replies
            # name their letter, so this is asked only when a caller turns the follow-up on).
            chosen = parse_option(context.get("reply"), context.get("options") or {})
            return VLMResponse(text=chosen or "NONE", model=self.model)
        else:
            raise ValueError(f"builtin backend cannot answer task {request.task!r}")
        return VLMResponse(text=json.dumps(result), model=self.model)


__all__ = ["BuiltinClient", "MODEL_NAME"]
