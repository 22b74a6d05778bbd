"""Hold what every model of the state shares: field types, spellings, the base model.

A VLM's JSON is untrusted input, spelled many ways: here are the annotated types that check and
canonicalise a field (a distortion category, a tool of the configured catalogue, a score in
[1, 5], a UTC time), the helpers that read a key or a list however a model wrote it, and the
base model that writes a failed tool's NaN score to JSON without loss.
"""

import functools
import logging
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
)

from iqa_tools import UnknownToolError

from ..config import configured_catalog
from ..vocabulary import (
    DISTORTION_CATEGORIES,
    canonical_distortion,
)

log = logging.getLogger(__name__)

#: Replanning rounds a run may take after the first plan, unless the state says otherwise.
DEFAULT_MAX_REPLAN_ITERATIONS = 2
#: Replan entries kept in the state; older ones are dropped first (with a warning).
MAX_REPLAN_HISTORY = 10
#: How far a level distribution may sum from 1 (log-probabilities rounded by the backend).
PROBABILITY_SUM_TOLERANCE = 1e-3

Severity = Literal["none", "slight", "moderate", "severe", "extreme"]


@functools.lru_cache(maxsize=4096)
def _canonical_if_category(name: str) -> str:
    """Return ``name`` spelled canonically when it is a distortion category, else unchanged.

    Cached, refusals too: a metric job's keys ("metric: BRISQUE") are no category, and finding
    that out costs a few hundred regular-expression searches, a dozen times per item."""
    try:
        return canonical_distortion(name)
    except ValueError:
        return name


def one_of(value: Any, spellings: Mapping[str, str]) -> Any:
    """Return ``value`` as the literal it spells, or unchanged for the validator to refuse.

    Case, spaces, hyphens and underscores are ignored; ``spellings`` maps the letters and digits
    of each spelling to its literal."""
    if not isinstance(value, str):
        return value
    key = "".join(ch for ch in value.casefold() if ch.isalnum())
    return spellings.get(key, value)


def snake_case(key: str) -> str:
    """Return ``key`` in snake case ("Query Type", "queryType", "query-type": "query_type")."""
    key = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key.strip())
    return re.sub(r"[^0-9a-z]+", "_", key.casefold()).strip("_")


def field_keys(data: Any, names: Iterable[str]) -> Any:
    """Rename the keys of ``data`` spelled another way to the field of ``names`` they spell.

    "Query Type", "queryType" and "query-type" all become ``query_type``; keys that are no
    field are left for the model to ignore, and anything but a mapping is returned as is."""
    if not isinstance(data, Mapping):
        return data
    wanted = {snake_case(name): name for name in names}
    renamed: dict[Any, Any] = {}
    for key, value in data.items():
        name = wanted.get(snake_case(key), key) if isinstance(key, str) else key
        if name not in renamed or name == key:
            renamed[name] = value
    return renamed


def is_global(name: Any) -> bool:
    """Tell whether ``name`` means the whole image ("Global", "whole image", "image", ...)."""
    return isinstance(name, str) and name.strip().casefold() in {
        "global",
        "whole image",
        "entire image",
        "image",
    }


def _known_distortions(values: Any, where: str) -> Any:
    """Return the distortion names spelled canonically, the ones that name no category dropped.

    Each one dropped is logged: one odd label ("lens flare") must not void the others.  A single
    string counts as a list of one."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list | tuple):
        return values
    kept: list[Any] = []
    for value in values:
        try:
            name = canonical_distortion(value) if isinstance(value, str) else value
        except ValueError:
            log.warning("%s: %r is no distortion category; ignored", where, value)
            continue
        if name not in kept:
            kept.append(name)
    return kept


def distortion_lists(value: Any, where: str) -> Any:
    """Read ``{object: [distortion, ...]}`` as a model wrote it into canonical spellings.

    "global" keys become "Global", each list goes through :func:`_known_distortions`, and objects
    left with no distortion are dropped; ``where`` names the field in log lines."""
    if not isinstance(value, Mapping):
        return value
    result: dict[Any, Any] = {}
    for key, values in value.items():
        name = "Global" if is_global(key) else key
        kept = _known_distortions(values, where)
        if isinstance(kept, list) and not kept and values:
            continue
        if isinstance(kept, list) and isinstance(result.get(name), list):
            kept = [*result[name], *(v for v in kept if v not in result[name])]
        result[name] = kept
    return result


#: Validation context of data this package wrote itself (see :func:`.run.state_from_json`).
STORED = {"stored": True}


def _canonical_tool(name: str, info: ValidationInfo) -> str:
    """Return the catalogue's name of the tool ``name`` spells, or raise ``ValueError``."""
    if isinstance(info.context, dict) and info.context.get("stored"):
        # Checked when it was written; a tool since removed from the catalogue must not make
        # a stored run unreadable.
        return name
    try:
        return configured_catalog().resolve(name)
    except UnknownToolError as exc:
        raise ValueError(str(exc)) from None


def _to_utc(value: datetime) -> datetime:
    """Return ``value`` in UTC."""
    return value.astimezone(UTC)


def utc_now() -> datetime:
    """Return the time now, in UTC (the default of every timestamp of the state)."""
    return datetime.now(UTC)


Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
ObjectName = Text  # an object or region the query names, or "Global"
Distortion = Annotated[
    Text,
    AfterValidator(canonical_distortion),
    Field(json_schema_extra={"enum": list(DISTORTION_CATEGORIES)}),
]
DistortionKey = Annotated[Text, AfterValidator(_canonical_if_category)]
ToolName = Annotated[Text, AfterValidator(_canonical_tool)]
Score = Annotated[float, Field(ge=1, le=5)]
Probability = Annotated[float, Field(ge=0, le=1)]
UtcDatetime = Annotated[AwareDatetime, AfterValidator(_to_utc)]


class StateModel(BaseModel):
    """Serve as the base of every model of the state: NaN is written to JSON as "NaN"."""

    # "strings" writes NaN as "NaN", which is still JSON (PostgreSQL jsonb, JavaScript accept
    # it) and reads back as NaN; the default ("null") would lose failed tools' NaN scores.
    model_config = ConfigDict(ser_json_inf_nan="strings")
