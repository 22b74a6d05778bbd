"""Share what every subtask of the Executor needs: running one, its scope, its notes.

A subtask may fail on its own (:func:`run_subtask`); a reply is read per object in scope
(:func:`align_to_scope`), with what was dropped or replaced kept as notes.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from iqa_tools import DISTORTION_CATEGORIES

from ...prompts import (
    STRICT_JSON_SUFFIX,
)
from ...query import fold_object_name
from ...state import (
    PlannerOutput,
)
from ...vlm.base import FatalVLMError, TransientVLMError, VLMError
from ...vlm.deadline import StepOverrun
from ...vocabulary import canonical_distortion
from ..jsonreply import Outcome

log = logging.getLogger(__name__)


def scope_keys(plan: PlannerOutput) -> list[str]:
    """Return the objects the plan is about, or ``["Global"]`` for the whole image."""
    return list(plan.query_scope) if isinstance(plan.query_scope, list) else ["Global"]


def located_images(image_path: str, reference_path: str | None) -> tuple[str, ...]:
    """Return the images as located (a path, or an object's URL: ``Path`` mangles ``s3://``)."""
    return tuple(p for p in (image_path, reference_path) if p)


def run_subtask(name: str, call: Any) -> Any:
    """Run one subtask; an exception is logged and becomes ``None`` (the spec's rule).

    A transient error is raised for the step's retries (when they run out, the subtask becomes
    ``None`` all the same: :func:`agentic_iqa.pipeline.abandoned`), and a fatal one (a bad key,
    an unknown model) to stop the run and its job: going on would only fail the same way.
    The step's time limit (:class:`~agentic_iqa.vlm.deadline.StepOverrun`) ends the step.
    """
    try:
        return call()
    except (TransientVLMError, FatalVLMError, StepOverrun):
        raise
    except VLMError as exc:
        log.error("%s failed: VLM error: %s", name, exc)
    except Exception:  # a subtask must never fail the executor node
        log.exception("%s failed", name)
    return None


#: Object names that mean the whole image.
WHOLE_IMAGE = frozenset(
    {
        "global",
        "whole image",
        "entire image",
        "image",
        "full image",
        "overall",
        "whole",
        "entire frame",
        "frame",
    }
)


def _put(aligned: dict[str, Any], key: str, value: Any) -> None:
    """Put ``value`` under ``key``, merged with what is there (lists joined, mappings updated)."""
    old = aligned.get(key)
    if isinstance(old, list) and isinstance(value, list):
        aligned[key] = [*old, *value]
    elif isinstance(old, dict) and isinstance(value, dict):
        aligned[key] = {**old, **value}
    else:
        aligned[key] = value


def align_to_scope(
    raw: Mapping[str, Any], keys: list[str], what: str, notes: list[str] | None = None
) -> dict[str, Any]:
    """Return a reply's per-object mapping with its object names put on the plan's scope ``keys``.

    A name of the scope (any case, with or without "the") is that object; with the whole image
    in scope everything is the whole image; with one object in scope any other name (or
    "Global") is that object.  With several objects in scope, what the reply says of the whole
    image ("Global") is said of each of them (what it says of an object itself comes first),
    and a name that is none of them is dropped with a note, so one stray object does not void
    the others; when no name can be placed at all, the reply is read as being about the whole
    image (the spec's fallback to Global), with a note.
    """
    keys = keys or ["Global"]
    by_fold = {fold_object_name(key): key for key in keys}
    aligned: dict[str, Any] = {}
    whole: dict[str, Any] = {}
    unplaced: dict[str, Any] = {}
    for name, value in raw.items():
        key = by_fold.get(fold_object_name(name))
        if key is None and len(keys) == 1:
            key = keys[0]
        elif key is None and fold_object_name(name) in WHOLE_IMAGE:
            _put(whole, "Global", value)
            continue
        elif key is None:
            unplaced[str(name)] = value
            continue
        _put(aligned, key, value)
    if unplaced:
        names = ", ".join(repr(name) for name in unplaced)
        scope = ", ".join(keys)
        if aligned or whole:
            add_note(notes, f"{what}: {names} is none of the objects in scope ({scope}); dropped")
        else:
            add_note(
                notes,
                f"{what}: {names} is none of the objects in scope ({scope}); read as "
                "the whole image (Global)",
            )
            for value in unplaced.values():
                _put(whole, "Global", value)
    if "Global" in whole:
        said = whole["Global"]
        for key in keys:
            own = aligned.get(key)
            if isinstance(own, list) and isinstance(said, list):
                aligned[key] = [*own, *said]
            elif isinstance(own, dict) and isinstance(said, dict):
                aligned[key] = {**said, **own}
            elif own is None:
                aligned[key] = (
                    list(said)
                    if isinstance(said, list)
                    else (dict(said) if isinstance(said, dict) else said)
                )
    return aligned


def per_object(raw: Any, keys: list[str]) -> Any:
    """Return ``raw`` as ``{object: ...}``.

    A reply that gave no object names (a bare list of distortions or analysis items) is about
    the whole image, or the one object in scope."""
    if isinstance(raw, str | list | tuple):
        return {keys[0] if len(keys) == 1 else "Global": raw}
    if isinstance(raw, Mapping) and looks_like_item(raw):
        return {keys[0] if len(keys) == 1 else "Global": [raw]}
    return raw


def looks_like_item(value: Mapping[str, Any]) -> bool:
    """Tell whether ``value`` is one analysis item (it has a type or severity key)."""
    return any(
        fold_object_name(key) in {"type", "severity", "distortion", "distortion_type"}
        for key in value
    )


def add_note(notes: list[str] | None, text: str) -> None:
    """Append ``text`` to ``notes`` unless it is there already (or there are no notes)."""
    if notes is not None and text not in notes:
        notes.append(text)


def keep_notes(notes: list[str] | None, what: str, outcome: Outcome[Any], found: list[str]) -> None:
    """Log and keep the notes of the reply that was used, or why none was."""
    if outcome.value is None:
        found = [
            f"{what}: no usable reply after {outcome.attempts} attempts"
            + (f" ({outcome.errors[-1]})" if outcome.errors else "")
        ]
    for text in found:
        log.warning("%s", text)
        add_note(notes, text)


def categories_of(values: Any, what: str, notes: list[str]) -> list[str]:
    """Return distortion names as categories (synonyms mapped); names of none dropped, noted."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list | tuple):
        add_note(notes, f"{what}: {values!r} is not a list of distortions; dropped")
        return []
    kept: list[str] = []
    for value in values:
        try:
            category = canonical_distortion(value) if isinstance(value, str) else None
        except ValueError:
            category = None
        if category is None:
            add_note(
                notes,
                f"{what}: {value!r} is no distortion category "
                f"({', '.join(DISTORTION_CATEGORIES)}); dropped",
            )
        elif category not in kept:
            kept.append(category)
    return kept


def scope_suffix(keys: list[str]) -> str:
    """Return the prompt's ending that asks for strict JSON with exactly these object keys."""
    return (
        STRICT_JSON_SUFFIX
        + " Use exactly these object keys: "
        + ", ".join(json.dumps(key) for key in keys)
        + "."
    )


def reply_field(reply: Mapping[str, Any], name: str) -> Any:
    """Return ``reply[name]``, also under another spelling of the key ("distortionSet").

    ``KeyError`` when absent, and the question is asked again."""
    wanted = re.sub(r"[^a-z0-9]", "", name)
    for key, value in reply.items():
        if re.sub(r"[^a-z0-9]", "", str(key).casefold()) == wanted:
            return value
    raise KeyError(name)
