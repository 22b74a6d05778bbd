"""Define the Summarizer's models: the model's reply as read, and the pipeline's answer.

Only :class:`SummarizerReply` is read from a model; :class:`SummarizerOutput` is built by the
summarizer, so a number a model writes never becomes the score.
"""

import logging
import math
from collections.abc import Mapping
from typing import Any, Self

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..vocabulary import (
    QUALITY_LEVELS,
)
from .fields import (
    PROBABILITY_SUM_TOLERANCE,
    Probability,
    Score,
    StateModel,
    Text,
    field_keys,
)

log = logging.getLogger(__name__)

#: ``quality_reasoning`` of an answer the model gave without saying why.
NO_REASONING = "(the model gave no reasoning)"
#: Fields of :class:`SummarizerOutput` that are the pipeline's to write (a fused score, its
#: probabilities and their source, an unreadable answer): a model writing one is ignored.
PIPELINE_RESULT_FIELDS = (
    "quality_score",
    "level_distribution",
    "probability_source",
    "answer_unparseable",
    "unparseable_reason",
    "answered_in_follow_up",
    "notes",
)
_YES = frozenset({"true", "yes", "y", "1"})
_NO = frozenset({"false", "no", "n", "0"})
_ABSENT = object()


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _replan_flag(value: Any, notes: list[str]) -> bool:
    """Return ``need_replan`` as written: true or false, in JSON or in words.  Anything else
    ("maybe", null, 5) is no request: a replan costs a whole round, so only a plain yes asks for
    one."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().casefold() in _YES | _NO:
        flag = value.strip().casefold() in _YES
    elif isinstance(value, int) and value in (0, 1):
        flag = bool(value)
    else:
        notes.append(
            f"need_replan {_shown(value)} is neither true nor false: read as false "
            "(no replan asked for)"
        )
        return False
    notes.append(f"need_replan {_shown(value)} read as {str(flag).lower()}")
    return flag


def _replan_reason(value: Any, notes: list[str]) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        notes.append("replan_reason given as a list: its items joined")
        return "; ".join(v.strip() for v in value if v.strip()) or None
    notes.append(f"replan_reason {_shown(value)} is not text: ignored")
    return None


def _reasoning(data: Mapping[str, Any], notes: list[str]) -> str:
    """Return ``quality_reasoning``, else what the model wrote under another usual name, else
    :data:`NO_REASONING`: an answer without its why is still the answer."""
    written = data.get("quality_reasoning", _ABSENT)
    if isinstance(written, str) and written.strip():
        return written
    if isinstance(written, list) and written and all(isinstance(v, str) for v in written):
        notes.append("quality_reasoning given as a list: its items joined")
        return " ".join(written)
    for other in ("reasoning", "explanation", "reason"):
        if isinstance(data.get(other), str) and data[other].strip():
            if written is not _ABSENT:
                notes.append(
                    f"quality_reasoning {_shown(written)} is no text: {other!r} read instead"
                )
            return str(data[other])
    if written is not _ABSENT:
        notes.append(f"quality_reasoning {_shown(written)} is no text: ignored")
    return NO_REASONING


def _used_evidence(value: Any, notes: list[str]) -> dict[str, Any] | None:
    if value is None or isinstance(value, Mapping):
        return dict(value) if value is not None else None
    if (isinstance(value, str) and not value.strip()) or (
        isinstance(value, list | tuple) and not value
    ):
        notes.append(f"used_evidence {_shown(value)} is empty: ignored")
        return None
    notes.append(f"used_evidence is a {type(value).__name__}, not an object: kept as its items")
    return {"items": list(value) if isinstance(value, list | tuple) else [value]}


class SummarizerReply(StateModel):
    """What the summarizer's model is asked to write, read from its reply.

    Only ``final_answer`` decides whether a reply is usable.  The side fields are read
    leniently (null, another type, an empty string) and what was ignored or coerced goes to
    ``notes``; the pipeline's own results (:data:`PIPELINE_RESULT_FIELDS`: a score, level
    probabilities) are never taken from a model, which would otherwise become the run's score.
    """

    final_answer: Text = Field(description='an option letter ("A") or a short answer')
    quality_reasoning: Text = Field(description="the evidence behind the answer")
    need_replan: bool = Field(default=False, description="the evidence cannot answer the query")
    replan_reason: str | None = Field(default=None, description="what evidence is missing")
    used_evidence: dict[str, Any] | None = Field(
        default=None, description="the evidence items the answer relied on"
    )
    notes: list[str] = Field(
        default_factory=list, description="what reading the reply ignored or coerced"
    )

    @model_validator(mode="before")
    @classmethod
    def _lenient(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = field_keys(data, (*cls.model_fields, *PIPELINE_RESULT_FIELDS))
        notes: list[str] = []
        for name in PIPELINE_RESULT_FIELDS:
            value = data.get(name)
            if value is not None and value is not False and value != "" and value != []:
                notes.append(
                    f"{name} {_shown(value)} ignored: the pipeline's to give, not the model's"
                )
        read: dict[str, Any] = {
            "quality_reasoning": _reasoning(data, notes),
            "need_replan": (
                _replan_flag(data["need_replan"], notes) if "need_replan" in data else False
            ),
            "replan_reason": _replan_reason(data.get("replan_reason"), notes),
            "used_evidence": _used_evidence(data.get("used_evidence"), notes),
        }
        if "final_answer" in data:
            read["final_answer"] = data["final_answer"]
        elif "answer" in data:
            read["final_answer"] = data["answer"]
        return {**read, "notes": notes}


class SummarizerOutput(StateModel):
    """The pipeline's answer and why, or a request to plan again because evidence is missing.

    Built by the summarizer only: from the model's :class:`SummarizerReply` (explanation
    mode) or from its own fusion (scoring mode); never read from a model, so a number a model
    writes never becomes the score.  A score always says where it came from
    (``probability_source``); a stored run is read back as it was written.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "final_answer": "B",
                    "quality_reasoning": "The image shows moderate blur affecting sharpness, "
                    "consistent with tool score of 2.6.",
                    "need_replan": False,
                },
                {
                    "final_answer": "Unable to determine",
                    "quality_reasoning": "Insufficient evidence for vehicle region.",
                    "need_replan": True,
                    "replan_reason": "Missing tool scores for vehicle region",
                },
            ]
        }
    )

    final_answer: Text = Field(description='an option letter ("A") or a quality level')
    quality_reasoning: Text = Field(description="the evidence behind the answer")
    need_replan: bool = Field(default=False, description="the evidence cannot answer the query")
    replan_reason: str | None = Field(default=None, description="what evidence is missing")
    used_evidence: dict[str, Any] | None = Field(
        default=None, description="the evidence items the answer relied on"
    )
    quality_score: Score | None = Field(
        default=None, description="the fused quality score in [1, 5] (scoring mode)"
    )
    level_distribution: dict[str, Probability] | None = Field(
        default=None,
        description="the VLM's probability per quality level, Bad..Excellent (scoring mode)",
    )
    probability_source: Text | None = Field(
        default=None,
        description='where level_distribution comes from: "logprobs" (token log-probabilities),'
        ' "stated" (probabilities the model stated when asked), "argmax" (probability 1 on the'
        " level answered: the fused score is then that level and tool scores do not move it),"
        " or a backend's own substitute",
    )
    answer_unparseable: bool = Field(
        default=False,
        description="no option could be read from the model's answers, retries included; "
        "final_answer then says so instead of a guessed letter",
    )
    unparseable_reason: str | None = Field(
        default=None, description="what the model answered instead of an option"
    )
    answered_in_follow_up: bool = Field(
        default=False,
        description="the option was read from the follow-up request: the model's reply "
        "committed to none readably, and asked once more which it chose, it named one",
    )
    notes: list[str] = Field(
        default_factory=list,
        description="what reading the model's reply ignored or coerced, and what the run could "
        "not add (a replan whose plan could not be made)",
    )

    @field_validator("replan_reason", mode="before")
    @classmethod
    def _blank_reason_is_none(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("level_distribution", mode="before")
    @classmethod
    def _canonical_levels(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        spelled = {level.casefold(): level for level in QUALITY_LEVELS}
        return {
            spelled.get(key.strip().casefold(), key) if isinstance(key, str) else key: probability
            for key, probability in value.items()
        }

    @field_validator("level_distribution")
    @classmethod
    def _a_distribution(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return None
        if set(value) != set(QUALITY_LEVELS):
            missing = [level for level in QUALITY_LEVELS if level not in value]
            unknown = sorted(set(value) - set(QUALITY_LEVELS))
            raise ValueError(
                f"level_distribution needs exactly the levels {', '.join(QUALITY_LEVELS)}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unknown {unknown}" if unknown else "")
            )
        total = math.fsum(value.values())
        if abs(total - 1) > PROBABILITY_SUM_TOLERANCE:
            raise ValueError(f"level_distribution must sum to 1, sums to {total:.6g}")
        return {level: value[level] for level in QUALITY_LEVELS}

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Self:
        if self.level_distribution is not None and self.probability_source is None:
            raise ValueError(
                'level_distribution needs probability_source ("logprobs" or the substitute)'
            )
        stored = isinstance(info.context, dict) and info.context.get("stored")
        if self.quality_score is not None and self.probability_source is None and not stored:
            raise ValueError(
                "quality_score needs probability_source: a score says where it came from"
            )
        if self.answer_unparseable and not self.unparseable_reason:
            raise ValueError("answer_unparseable needs unparseable_reason (what was answered)")
        if self.need_replan and self.replan_reason is None:
            log.warning(
                "summarizer asked to replan without a reason; recording 'No reason provided'"
            )
            self.replan_reason = "No reason provided"
        return self
