"""The tool metadata: what each tool is, what it is good at, how its scores are normalized.

``metadata/tools.json`` is the single source of truth.  It is validated when loaded, and a bad
entry is a :class:`MetadataError` naming the entry and the field, so a typo in a hand-edited
override fails loudly at start-up instead of mid-job.  Override files (for instance the logistic
parameters ``agentic-iqa calibrate`` fits on a user's own data) are merged over it, tool by tool.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import MetadataError, UnknownToolError
from .normalize import FORMS, monotonicity_violations, normalize
from .numerics import NUMERICS_TAG

#: The seven distortion categories of the paper; tools' strengths use the same words.
DISTORTION_CATEGORIES: tuple[str, ...] = (
    "Blurs",
    "Color distortions",
    "Compression",
    "Noise",
    "Brightness change",
    "Sharpness",
    "Contrast",
)

Category = Literal[
    "Blurs",
    "Color distortions",
    "Compression",
    "Noise",
    "Brightness change",
    "Sharpness",
    "Contrast",
]
WeightLocation = Literal["pyiqa", "torch_hub", "clip", "hf_hub"]
#: The floating-point type a tool's input tensor (and model) is given.  Hand-crafted
#: natural-scene-statistics metrics need float64: in float32 their local variances
#: (E[x^2] - E[x]^2 on 0-255 values) lose most of their digits, and the thresholds and
#: look-up tables after them turn that noise into raw-score jumps that differ by device.
Precision = Literal["float32", "float64"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Normalization(_Strict):
    """How raw scores become [1, 5]; ``source`` says where the parameters come from."""

    form: Literal["logistic5", "logistic4", "linear"]
    params: dict[str, float]
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _params_match_form(self) -> Normalization:
        expected = set(FORMS[self.form])
        if set(self.params) != expected:
            missing = sorted(expected - set(self.params))
            extra = sorted(set(self.params) - expected)
            raise ValueError(
                f"{self.form} needs params {sorted(expected)}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unexpected {extra}" if extra else "")
            )
        return self


class WeightFile(_Strict):
    """One file (or Hugging Face repository) a tool needs, and where its loader looks for it."""

    file: str = Field(min_length=1, description="file name, or repo id for hf_hub")
    location: WeightLocation
    url: str | None = None
    sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="hex digest a download must match; null: unknown, the file is unverified",
    )
    licence: str | None = Field(
        default=None,
        min_length=1,
        description="the file's licence, or 'unknown, see URL' where it is not known",
    )
    size: int | None = Field(
        default=None,
        gt=0,
        description="the file's size in bytes; a download of another size is refused",
    )
    note: str | None = None


class ToolSpec(_Strict):
    """One IQA tool."""

    name: str
    display_name: str = Field(min_length=1)
    pyiqa_name: str | None = None
    factory: str | None = Field(
        default=None,
        description="import string 'module:callable' building a non-pyiqa tool",
    )
    type: Literal["FR", "NR"]
    lower_is_better: bool
    score_range: tuple[float, float]
    description: str = Field(min_length=1)
    strengths: list[Category] = Field(default_factory=list)
    normalization: Normalization
    weights: list[WeightFile] = Field(default_factory=list)
    weight_kwarg: str | None = Field(
        default=None,
        description="create_metric keyword taking the path of the single pyiqa weight file",
    )
    python_packages: list[str] = Field(
        default_factory=list, description="import names the tool needs beyond pyiqa's own"
    )
    precision: Precision = Field(
        default="float32",
        description="dtype of the input tensor and model; float64 where float32 is unstable",
    )
    requires_texture: bool = Field(
        default=False,
        description="undefined on a one-colour image (the metric would score rounding noise): "
        "such an image is a tool failure, so a fallback tool answers",
    )
    from_paper: bool = True
    default: bool = Field(default=True, description="offered to automatic tool selection")
    notes: str | None = None
    aliases: list[str] = Field(
        default_factory=list,
        description='other names people write for this tool ("Multi-Scale SSIM", "peak '
        'signal-to-noise ratio"): looked up as its name is',
    )
    family: str | None = Field(
        default=None,
        min_length=1,
        description='the name this tool shares with its other variants ("TOPIQ", '
        '"WaDIQaM"): written alone it names none of them for certain',
    )

    @model_validator(mode="after")
    def _check(self) -> ToolSpec:
        if (self.pyiqa_name is None) == (self.factory is None):
            raise ValueError("give exactly one of pyiqa_name or factory")
        if self.factory is not None and not re.fullmatch(r"[\w.]+:[\w.]+", self.factory):
            raise ValueError(f"factory must be 'module:callable', got {self.factory!r}")
        low, high = self.score_range
        if not low < high:
            raise ValueError(f"score_range must be increasing, got {self.score_range}")
        if self.weight_kwarg is not None and len(self.pyiqa_weight_files) != 1:
            raise ValueError("weight_kwarg needs exactly one weight file in the pyiqa cache")
        for spelling in (*self.aliases, self.family or "x"):
            if not lookup_key(spelling):
                raise ValueError(f"alias or family {spelling!r} has no letter or digit")
        return self

    @property
    def is_full_reference(self) -> bool:
        return self.type == "FR"

    @property
    def weight_free(self) -> bool:
        return not self.weights

    @property
    def numerics(self) -> str:
        """What, besides the inputs, fixes this tool's raw score; part of the cache key: the
        precision, and for float64 tools how their local normalisation is computed
        (:mod:`iqa_tools.numerics`)."""
        if self.precision == "float64":
            return f"{self.precision}+{NUMERICS_TAG}"
        return self.precision

    @property
    def pyiqa_weight_files(self) -> list[WeightFile]:
        return [w for w in self.weights if w.location == "pyiqa"]

    def normalize(self, raw: float) -> float:
        return normalize(raw, self.normalization.form, self.normalization.params)

    def normalization_warnings(self) -> list[str]:
        """Where the mapping is not monotone over the documented raw range."""
        low, high = self.score_range
        bad = monotonicity_violations(
            self.normalization.form,
            self.normalization.params,
            low,
            high,
            lower_is_better=self.lower_is_better,
        )
        if not bad:
            return []
        direction = "decreasing" if self.lower_is_better else "increasing"
        spans = ", ".join(f"{a:.4g}..{b:.4g}" for a, b in _merge_spans(bad))
        return [
            f"{self.name}: normalization is not {direction} over the documented raw range "
            f"[{low:g}, {high:g}]: wrong way on raw {spans} ({self.normalization.source})"
        ]


def _merge_spans(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def lookup_key(name: str) -> str:
    """A spelling reduced to its letters and digits, lower case: "MS-SSIM", "ms_ssim" and
    "MS SSIM" are one key, and so are "TOPIQ (full-reference)" and "topiq full reference"."""
    return re.sub(r"[\W_]", "", name).lower()


class Catalog:
    """All tools by name; look-ups ignore case, spaces and punctuation and accept pyiqa names,
    display names and aliases.  A family name ("WaDIQaM") is no look-up key: it is ambiguous."""

    def __init__(self, tools: Iterable[ToolSpec]) -> None:
        self.tools: dict[str, ToolSpec] = {tool.name: tool for tool in tools}
        self._index: dict[str, str] = {}
        for tool in self.tools.values():
            self._index.setdefault(lookup_key(tool.name), tool.name)
        for tool in self.tools.values():
            if tool.pyiqa_name:
                self._index.setdefault(lookup_key(tool.pyiqa_name), tool.name)
        for tool in self.tools.values():
            for alias in tool.aliases:
                owner = self._index.setdefault(lookup_key(alias), tool.name)
                if owner != tool.name:
                    raise MetadataError(
                        f"alias {alias!r} of {tool.name!r} is already a spelling of {owner!r}"
                    )
        for tool in self.tools.values():
            self._index.setdefault(lookup_key(tool.display_name), tool.name)
        self.families: dict[str, tuple[str, ...]] = {}
        for tool in self.tools.values():
            if tool.family is None:
                continue
            key = lookup_key(tool.family)
            if key in self._index:
                raise MetadataError(
                    f"family {tool.family!r} of {tool.name!r} is also a "
                    f"spelling of {self._index[key]!r}; a family name must "
                    "name no single tool"
                )
            self.families[key] = (*self.families.get(key, ()), tool.name)

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self.tools.values())

    def __len__(self) -> int:
        return len(self.tools)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and lookup_key(name) in self._index

    def get(self, name: str) -> ToolSpec:
        try:
            return self.tools[self._index[lookup_key(name)]]
        except KeyError:
            hint = self.did_you_mean(name)
            raise UnknownToolError(
                f"unknown tool {name!r}; {hint + ' Known' if hint else 'known'} tools: "
                f"{', '.join(self.tools)}"
            ) from None

    def suggest(self, name: str, limit: int = 3) -> list[str]:
        """The tools whose names or aliases are closest to ``name`` (case and punctuation
        ignored), closest first: the nearest and any about as near; none when nothing is."""
        from difflib import SequenceMatcher, get_close_matches

        key = lookup_key(name)
        close = get_close_matches(key, list(self._index), n=limit * 3, cutoff=0.6)
        if not close:
            return []
        best = SequenceMatcher(None, key, close[0]).ratio()
        names: list[str] = []
        for match in close:
            tool = self._index[match]
            near = SequenceMatcher(None, key, match).ratio() >= best - 0.05
            if near and tool not in names:
                names.append(tool)
        return names[:limit]

    def did_you_mean(self, name: str) -> str:
        """``"did you mean BRISQUE?"`` (or ``"... A or B?"``) for a near miss, else ``""``."""
        names = self.suggest(name)
        if not names:
            return ""
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        return f"did you mean {listed}?"

    def resolve(self, name: str) -> str:
        """The canonical name for ``name`` (e.g. 'ms_ssim' -> 'MS-SSIM')."""
        return self.get(name).name

    def spellings(self) -> dict[str, str]:
        """Every look-up key (see :func:`lookup_key`) and the tool it names."""
        return dict(self._index)


DEFAULT_METADATA = "metadata/tools.json"


def default_metadata_text() -> str:
    return resources.files("iqa_tools").joinpath(DEFAULT_METADATA).read_text(encoding="utf-8")


def load_catalog(path: str | Path | None = None, overrides: Iterable[str | Path] = ()) -> Catalog:
    """Load and validate the metadata, then merge each override file over it, in order."""
    if path is None:
        source, text = "iqa_tools/" + DEFAULT_METADATA, default_metadata_text()
    else:
        source, text = str(path), _read(path)
    entries = _tool_entries(_parse(text, source), source)
    for override in overrides:
        patch = _tool_entries(_parse(_read(override), str(override)), str(override))
        for name, fields in patch.items():
            entries[name] = _deep_merge(entries.get(name, {}), fields)
    return Catalog(_validate(name, fields, source) for name, fields in entries.items())


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise MetadataError(f"cannot read tool metadata {str(path)!r}: {exc}") from None


def _parse(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MetadataError(f"{source}: not valid JSON ({exc})") from None


def _tool_entries(document: Any, source: str) -> dict[str, dict[str, Any]]:
    if not isinstance(document, dict) or not isinstance(document.get("tools"), dict):
        raise MetadataError(f"{source}: expected an object with a 'tools' object")
    for name, fields in document["tools"].items():
        if not isinstance(fields, dict):
            raise MetadataError(f"{source}: entry {name!r} must be an object")
    return {name: dict(fields) for name, fields in document["tools"].items()}


def _validate(name: str, fields: dict[str, Any], source: str) -> ToolSpec:
    try:
        return ToolSpec.model_validate({**fields, "name": name})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(entry)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise MetadataError(f"{source}: entry {name!r} is invalid: {problems}") from None


def _deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key != "params":
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
