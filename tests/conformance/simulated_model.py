"""A *right* vision-language model that writes the way hosted and served models do.

It answers every role of the agent (planner, distortion detection and analysis, tool selection,
summarizer, five-level rating, stated probabilities) from what it knows about each item (a
:class:`Truth`): the right plan, the right letter, its own quality level.  What varies is only
*how* it writes, one :class:`Behaviour` class per server: code fences, a sentence around the
JSON, synonyms and other spellings, letters as "(B)" or "I'd say B", a 503 or 429 now and then, a
reply cut off at the token limit, an empty reply, a refusal, no log-probabilities; the content
classes, where what a step *says* varies as real models' steps do (one analysed type more or
fewer than asked, categories off the valid list, tools by other names, unknown or not offered,
other object keys, hedges and mentions of other options around the answer, and all of these
mixed); and the unrecoverable ones (always refusing, always cut off, a rejected key).  So an
agent that reads models faithfully gets every item right, and one that does not shows where.

It speaks both protocols on one local HTTP server (:class:`FakeAPIServer`), so the real
``openai`` and ``anthropic`` SDKs are exercised: ``/v1/chat/completions`` and ``/v1/messages``.
Misbehaviour is seeded per (seed, item, role, attempt) and happens at most once per item and role
for the recoverable classes, as a hosted model misbehaves now and then, not in a storm.

Used by ``tests/conformance/`` and ``benchmarks/vlm_fidelity.py``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from agentic_iqa.prompts import (
    DISTORTION_ANALYSIS_SYSTEM,
    DISTORTION_DETECTION_SYSTEM,
    FOLLOW_UP_SYSTEM,
    PLANNER_SYSTEM,
    QUALITY_LEVELS_SYSTEM,
    QUALITY_PROBABILITIES_SYSTEM,
    STRICT_JSON_SUFFIX,
    SUMMARIZER_SYSTEM,
    TOOL_SELECTION_SYSTEM,
)
from agentic_iqa.vlm.images import encode_image
from agentic_iqa.vocabulary import DISTORTION_CATEGORIES
from tests.agentic_iqa.vlm.fake_servers import (
    FakeAPIServer,
    Recorded,
    Reply,
    anthropic_error,
    openai_error,
)


class Behaviour(StrEnum):
    """How the simulated model writes.  The first ones are recoverable: a faithful agent gets
    every item right; the last three are not, and must fail their items with a reason."""

    CLEAN = "clean"  # plain JSON, bare letters
    FENCED = "fenced"  # ```json ... ```
    PROSE = "prose"  # a sentence before and after the JSON
    SYNONYMS = "synonyms"  # "blur", "Moderate", "global", camelCase keys, "brisque"
    LETTERS = "letters"  # "(B)", "**B**", "B. Slight", "I'd say B", "deserves a C"
    TRANSIENT = "transient"  # a 503 or a 429 now and then
    TRUNCATED = "truncated"  # now and then cut off at the token limit
    EMPTY = "empty"  # now and then an empty reply
    REFUSAL = "refusal"  # now and then a refusal
    NO_LOGPROBS = "no-logprobs"  # a server that returns no log-probabilities
    ANTHROPIC = "anthropic"  # the Anthropic protocol, prose and fences
    # content: the same right model, its steps varying in what they say
    SUPERSET = "superset"  # the analysis covers one type more than asked
    SUBSET = "subset"  # the analysis covers one type fewer than asked (of 2+)
    OFF_LIST = "off-list"  # detection and analysis name categories off the valid list
    TOOL_NAMES = "tool-names"  # tools in lower case, by alias, unknown, or not offered
    SCOPE_KEYS = "scope-keys"  # object keys other than the scope's ("the car", "Global")
    HEDGES = "hedges"  # reasoning that negates and hedges ("Not A", "could be C")
    MENTIONS_AFTER = "mentions-after"  # the letter first, then other options while reasoning
    VARIED = "varied"  # all of the content variations, mixed per item and step
    # answers naming no option in a form a grader reads ("the option that fits what I see");
    # asked once more which option its reply chose, it names the letter it meant
    VAGUE = "vague"
    # unrecoverable
    ALWAYS_REFUSES = "always-refuses"
    ALWAYS_TRUNCATED = "always-truncated"
    BAD_KEY = "bad-key"  # HTTP 401 on every call

    @property
    def recoverable(self) -> bool:
        return self not in UNRECOVERABLE


UNRECOVERABLE = frozenset({Behaviour.ALWAYS_REFUSES, Behaviour.ALWAYS_TRUNCATED, Behaviour.BAD_KEY})
#: The content classes: what the steps say varies, never how right the model is.
CONTENT = (
    Behaviour.SUPERSET,
    Behaviour.SUBSET,
    Behaviour.OFF_LIST,
    Behaviour.TOOL_NAMES,
    Behaviour.SCOPE_KEYS,
    Behaviour.HEDGES,
    Behaviour.MENTIONS_AFTER,
)
#: Labels a right model may add that are no category of the valid list.
OFF_LIST_LABELS = ("lens flare", "chromatic aberration", "vignetting")
#: Tool names no catalogue has.
UNKNOWN_TOOLS = ("SuperIQA-v2", "DeepQualityNet")
#: Catalogue tools the model may name although they are not offered (no weights here).
CATALOGUE_NOT_OFFERED = ("MUSIQ", "HyperIQA", "BRISQUE", "NIQE")
LEVEL_NAMES = {5: "Excellent", 4: "Good", 3: "Fair", 2: "Poor", 1: "Bad"}
#: How often a now-and-then misbehaviour happens on a first attempt.
RATE = 0.35

LEVEL_LETTERS = {5: "A", 4: "B", 3: "C", 2: "D", 1: "E"}
SYNONYM = {
    "Blurs": "blur",
    "Noise": "noise",
    "Compression": "JPEG artifacts",
    "Brightness change": "overexposure",
    "Contrast": "low contrast",
    "Color distortions": "colour cast",
    "Sharpness": "oversharpening",
}
SEVERITY_WORDS = {
    "none": "None",
    "slight": "Mild",
    "moderate": "Moderate",
    "severe": "High",
    "extreme": "Very severe",
}


@dataclass(frozen=True)
class Truth:
    """What the right model knows about one item (one image and one query)."""

    query: str
    #: The objects the query names ("Global": none).
    scope: tuple[str, ...] | str = "Global"
    #: Distortion categories the query names (an explicit plan), else ().
    named: tuple[str, ...] = ()
    #: Multiple choice: option letter -> text, and the right letter.
    options: dict[str, str] = field(default_factory=dict)
    answer: str | None = None
    #: Scoring: the model's own quality level, 1 (Bad) .. 5 (Excellent).
    level: int | None = None
    #: Severity of the distortions it sees.
    severity: str = "moderate"


def image_digest(data: str) -> str:
    return hashlib.sha256(data.encode()).hexdigest()


class SimulatedModel:
    """The responder of a :class:`FakeAPIServer`: one behaviour, a table of truths."""

    def __init__(self, behaviour: Behaviour, *, seed: int = 0, max_image_side: int = 1024) -> None:
        self.behaviour = Behaviour(behaviour)
        self.seed = seed
        self.max_image_side = max_image_side
        self.truths: dict[tuple[str, str], Truth] = {}
        self.by_query: dict[str, Truth] = {}
        self.calls: dict[str, int] = {}
        self._attempts: dict[str, int] = {}
        self._again: list[str] = []
        #: What each vague reply meant (VAGUE): its text -> the letter the model had in mind.
        self._meant: dict[str, str] = {}
        self._lock = threading.Lock()

    def learn(self, image: Path, truth: Truth) -> None:
        """The model knows ``truth`` for ``image`` (as the client will send it)."""
        _, data = encode_image(image, self.max_image_side)
        self.truths[(truth.query, image_digest(data))] = truth
        self.by_query.setdefault(truth.query, truth)

    def asked_again(self) -> list[str]:
        """The requests that asked again ("role: query"): a retry after a reply the agent
        rejected (its stricter prompt), or a replan (its reason in the planner's prompt)."""
        with self._lock:
            return list(self._again)

    # -- the protocol ------------------------------------------------------------------------

    def __call__(self, request: Recorded) -> Reply:
        anthropic = request.path.endswith("/messages")
        body = request.body if isinstance(request.body, dict) else {}
        system, user, images = _anthropic_parts(body) if anthropic else _openai_parts(body)
        role = _role(system)
        if role == "probe":  # `agentic-iqa check`: any other short request
            fault = "bad-key" if self.behaviour == Behaviour.BAD_KEY else None
            if fault is None:
                logprobs = (
                    _token_logprobs("A", {"A": -0.01, "B": -5.0}) if body.get("logprobs") else None
                )
                return Reply(
                    200,
                    _anthropic_message("A", "stop", None, body.get("model"))
                    if anthropic
                    else _openai_completion("A", "stop", None, logprobs, body.get("model")),
                )
            message = "Incorrect API key provided: sk-sim****."
            return Reply(
                401,
                anthropic_error(message, "authentication_error")
                if anthropic
                else openai_error(message, "invalid_request_error"),
            )
        if role == "follow_up":  # which option its own reply (quoted) chose
            with self._lock:
                self.calls[role] = self.calls.get(role, 0) + 1
                meant = next((c for text, c in self._meant.items() if text in user), "NONE")
            if anthropic:
                return Reply(200, _anthropic_message(meant, "stop", None, body.get("model")))
            return Reply(200, _openai_completion(meant, "stop", None, None, body.get("model")))
        query = _query(user)
        truth = self._truth(query, images)
        key = f"{role}|{query}|{image_digest(images[0]) if images else ''}"
        with self._lock:  # a retry (stricter prompt or not) is a later attempt of the same ask
            attempt = self._attempts.get(key, 0) + 1
            self._attempts[key] = attempt
            self.calls[role] = self.calls.get(role, 0) + 1
            if any(mark in system for mark in _RETRY_MARKS) or _REPLAN_MARK in user:
                self._again.append(f"{role}: {query[:60]}")
        rng = random.Random(f"{self.seed}|{key}")
        fault = self._fault(rng, attempt)
        if fault == "bad-key":
            message = "Incorrect API key provided: sk-sim****. You can find your API key at ..."
            return Reply(
                401,
                anthropic_error(message, "authentication_error")
                if anthropic
                else openai_error(message, "invalid_request_error"),
            )
        if fault in ("503", "429"):
            status = int(fault)
            error = (
                anthropic_error("Overloaded", "overloaded_error")
                if anthropic
                else openai_error("The server is overloaded", "server_error")
            )
            return Reply(status, error, {"retry-after-ms": "20", "retry-after": "0"})
        if self.behaviour in CONTENT or self.behaviour == Behaviour.VARIED:
            # What a step says is the model's own, the same every time it is asked: a retry
            # or a replan gets the same content again.
            rng = random.Random(f"{self.seed}|{key}|content")
        text, letter_logprobs = self._answer(role, truth, rng, system)
        finish = "stop"
        refusal = None
        if fault == "truncated":
            text, finish = text[: max(1, len(text) // 3)], "length"
        elif fault == "empty":
            text = ""
        elif fault == "refusal":
            text, refusal = "", "I'm sorry, but I can't help with that request."
        if anthropic:
            return Reply(200, _anthropic_message(text, finish, refusal, body.get("model")))
        logprobs = None
        if body.get("logprobs") and self.behaviour != Behaviour.NO_LOGPROBS and refusal is None:
            logprobs = _token_logprobs(text, letter_logprobs)
        return Reply(200, _openai_completion(text, finish, refusal, logprobs, body.get("model")))

    def _truth(self, query: str, images: list[str]) -> Truth:
        if images:
            found = self.truths.get((query, image_digest(images[0])))
            if found is not None:
                return found
        if query in self.by_query:
            return self.by_query[query]
        raise KeyError(f"the simulated model knows no item for query {query!r}")

    def _fault(self, rng: random.Random, attempt: int) -> str | None:
        behaviour = self.behaviour
        if behaviour == Behaviour.BAD_KEY:
            return "bad-key"
        if behaviour == Behaviour.ALWAYS_REFUSES:
            return "refusal"
        if behaviour == Behaviour.ALWAYS_TRUNCATED:
            return "truncated"
        if attempt > 1 or rng.random() >= RATE:
            return None
        return {
            Behaviour.TRANSIENT: rng.choice(["503", "429"]),
            Behaviour.TRUNCATED: "truncated",
            Behaviour.EMPTY: "empty",
            Behaviour.REFUSAL: "refusal",
        }.get(behaviour)

    # -- what a right model answers ----------------------------------------------------------

    def _answer(
        self, role: str, truth: Truth, rng: random.Random, system: str
    ) -> tuple[str, dict[str, float] | None]:
        if role == "plan":
            plan = self._plan(truth)
            if (
                self._variation(rng, Behaviour.SCOPE_KEYS)
                and truth.scope != "Global"
                and plan["distortions"]
            ):
                # the query's distortions keyed "Global" while the scope is the object
                plan["distortions"] = {"Global": [self._kind(d) for d in truth.named]}
            return self._json(plan, rng), None
        if role == "detect":
            variation = self._variation(rng, Behaviour.OFF_LIST, Behaviour.SCOPE_KEYS)
            labels = [self._kind(d) for d in list(truth.named) or ["Blurs", "Noise"]]
            if variation == Behaviour.OFF_LIST:
                labels.insert(rng.randrange(len(labels) + 1), rng.choice(OFF_LIST_LABELS))
            return self._json(
                {
                    "distortion_set": {
                        self._object(k, variation, rng): list(labels) for k in self._scope(truth)
                    }
                },
                rng,
            ), None
        if role == "analyse":
            listed = _distortion_info(system) or {
                k: list(truth.named) or ["Blurs"] for k in self._scope(truth)
            }
            variation = self._variation(
                rng, Behaviour.SUPERSET, Behaviour.SUBSET, Behaviour.OFF_LIST, Behaviour.SCOPE_KEYS
            )
            analysis = {}
            for key, asked in listed.items():
                kinds = list(asked)
                more = [c for c in DISTORTION_CATEGORIES if c not in kinds]
                if variation == Behaviour.SUPERSET and more:
                    kinds.append(rng.choice(more))
                elif variation == Behaviour.SUBSET and len(kinds) >= 2:
                    kinds.pop(rng.randrange(len(kinds)))
                elif variation == Behaviour.OFF_LIST:
                    kinds.insert(rng.randrange(len(kinds) + 1), rng.choice(OFF_LIST_LABELS))
                analysis[self._object(key, variation, rng)] = [
                    {
                        "type": self._kind(kind),
                        "severity": self._severity(truth.severity),
                        "explanation": f"{kind} is {truth.severity} across the frame.",
                    }
                    for kind in kinds
                ]
            return self._json({"distortion_analysis": analysis}, rng), None
        if role == "select":
            listed = _distortion_info(system) or {"Global": ["Blurs"]}
            offered = _offered_tools(system)
            variation = self._variation(rng, Behaviour.TOOL_NAMES, Behaviour.SCOPE_KEYS)
            selected = {
                self._object(key, variation, rng): {
                    self._kind(kind): self._tool(offered, variation, rng) for kind in kinds
                }
                for key, kinds in listed.items()
            }
            if variation == Behaviour.SCOPE_KEYS and len(selected) == 1 and rng.random() < 0.5:
                selected = next(iter(selected.values()))  # no object level at all
            return self._json({"selected_tools": selected}, rng), None
        if role == "answer":
            letter = truth.answer
            if letter and self.behaviour == Behaviour.VAGUE:
                final = self._vague("The option that fits what I see in this photo", letter, rng)
                return self._json(
                    {
                        "final_answer": final,
                        "quality_reasoning": "as described",
                        "need_replan": False,
                    },
                    rng,
                ), None
            final = self._letter(letter, truth.options, rng) if letter else _free(truth)
            reasoning = f"The evidence shows {truth.severity} distortion; {final}."
            variation = self._variation(rng, Behaviour.HEDGES, Behaviour.MENTIONS_AFTER)
            others = [other for other in truth.options if other != letter]
            if letter and others and variation == Behaviour.HEDGES:
                first, second = rng.choice(others), rng.choice(others)
                reasoning = rng.choice(
                    [
                        f"Not {first}: the {truth.severity} distortion rules it out. It could "
                        f"look like {second} at first glance, but {letter} fits the evidence.",
                        f"I wouldn't say {first}. One might hesitate between {first} and "
                        f"{second}; the evidence settles it.",
                        f"{first} is wrong and so is {second}: the distortion is {truth.severity}.",
                    ]
                )
                final = rng.choice(
                    [
                        final,
                        f"Not {first}; {letter}.",
                        f"{letter} is correct.",
                        f"I wouldn't say {first}. {letter}.",
                    ]
                )
            elif letter and others and variation == Behaviour.MENTIONS_AFTER:
                other = rng.choice(others)
                final = rng.choice(
                    [
                        f"{letter}\n\nReasoning: Option {other} ({truth.options[other]}) would "
                        f"understate or overstate the {truth.severity} distortion.",
                        f"{letter}. Option {other} does not fit: the distortion is "
                        f"{truth.severity}.",
                        f"{letter} ({truth.options[letter]}), not {other}.",
                    ]
                )
            return self._json(
                {
                    "final_answer": final,
                    "quality_reasoning": reasoning,
                    "need_replan": False,
                    "replan_reason": None,
                },
                rng,
            ), None
        if role == "levels":
            level = truth.level or 3
            letter = LEVEL_LETTERS[level]
            logprobs = {
                other: -0.05 if other == letter else (-3.5 if abs(level - lvl) == 1 else -7.0)
                for lvl, other in LEVEL_LETTERS.items()
            }
            if "option_probabilities" in system:  # asked to state them (the Anthropic way)
                return self._json(
                    {"answer": letter, "option_probabilities": _stated(level)}, rng
                ), None
            if self.behaviour == Behaviour.VAGUE:
                return self._vague(
                    "Hard to put in one word; about what one would expect", letter, rng
                ), None
            variation = self._variation(rng, Behaviour.HEDGES, Behaviour.MENTIONS_AFTER)
            other_level = 1 if level >= 3 else 5
            other, name = LEVEL_LETTERS[other_level], LEVEL_NAMES[other_level]
            if variation == Behaviour.HEDGES:
                return f"{letter}. Not {other}: it is clearly not {name}.", logprobs
            if variation == Behaviour.MENTIONS_AFTER:
                return (
                    f"{letter}\nExplanation: the image is not {name} ({other}); its "
                    f"distortion is {truth.severity}."
                ), logprobs
            return self._letter(letter, {}, rng), logprobs
        if role == "stated":
            return self._json({"option_probabilities": _stated(truth.level or 3)}, rng), None
        raise ValueError(f"unknown role {role!r}")

    def _vague(self, words: str, letter: str, rng: random.Random) -> str:
        """Return a reply naming no option (its own number keeps replies apart), and keep the
        letter it meant for the follow-up."""
        text = f"{words}, #{rng.randrange(10**6)}."
        with self._lock:
            self._meant[text] = letter
        return text

    def _variation(self, rng: random.Random, *kinds: Behaviour) -> Behaviour | None:
        """The content variation of this reply among those of its step: the class's own; for
        the varied model one of them, or none, at random."""
        if self.behaviour == Behaviour.VARIED:
            return rng.choice([*kinds, None])
        return self.behaviour if self.behaviour in kinds else None

    def _object(self, key: str, variation: Behaviour | None, rng: random.Random) -> str:
        """How the model names an object: the agent's key, or (scope-keys) another name for
        the same thing: "the car", "vehicle", "whole image"."""
        if variation != Behaviour.SCOPE_KEYS:
            return self._key(key)
        if key == "Global":
            return rng.choice(["whole image", "Image", "entire image", "overall"])
        return rng.choice([f"the {key}", key.capitalize(), "Global", "main subject"])

    def _tool(self, offered: list[str], variation: Behaviour | None, rng: random.Random) -> str:
        tool = offered[0]
        if self.behaviour == Behaviour.SYNONYMS:
            return tool.lower()
        if variation != Behaviour.TOOL_NAMES:
            return tool
        elsewhere = next(name for name in CATALOGUE_NOT_OFFERED if name not in offered)
        return rng.choice(
            [
                tool.lower(),
                f"the {tool} metric",
                f"{tool.lower()} score",
                rng.choice(UNKNOWN_TOOLS),
                elsewhere,
                elsewhere.lower(),
            ]
        )

    def _plan(self, truth: Truth) -> dict[str, Any]:
        objects = truth.scope != "Global"
        explicit = bool(truth.named)
        selection, execution = (False, False) if objects else (True, True)
        plan = {
            "query_type": "IQA",
            "query_scope": list(truth.scope) if objects else "Global",
            "distortion_source": "Explicit" if explicit else "Inferred",
            "distortions": (
                {self._key(k): [self._kind(d) for d in truth.named] for k in self._scope(truth)}
                if explicit
                else None
            ),
            "reference_mode": "No-Reference",
            "required_tool": None,
            "plan": {
                "distortion_detection": not explicit,
                "distortion_analysis": True,
                "tool_selection": selection,
                "tool_execution": execution,
            },
            "answer_mode": "scoring" if truth.level is not None else "explanation",
        }
        if self.behaviour == Behaviour.SYNONYMS:
            plan = {
                "queryType": "iqa",
                "QueryScope": (["global"] if not objects else list(truth.scope)),
                "distortion source": plan["distortion_source"].lower(),
                "distortions": plan["distortions"],
                "referenceMode": "no reference",
                "requiredTool": "none",
                "plan": plan["plan"],
                "answerMode": "Score" if truth.level is not None else "Explanation",
            }
        return plan

    def _scope(self, truth: Truth) -> list[str]:
        return list(truth.scope) if truth.scope != "Global" else ["Global"]

    def _key(self, key: str) -> str:
        return key.lower() if self.behaviour == Behaviour.SYNONYMS else key

    def _kind(self, category: str) -> str:
        return SYNONYM.get(category, category) if self.behaviour == Behaviour.SYNONYMS else category

    def _severity(self, severity: str) -> str:
        return SEVERITY_WORDS[severity] if self.behaviour == Behaviour.SYNONYMS else severity

    def _letter(self, letter: str, options: dict[str, str], rng: random.Random) -> str:
        if self.behaviour not in (Behaviour.LETTERS, Behaviour.ANTHROPIC):
            return letter
        text = options.get(letter, "")
        forms = [
            f"({letter})",
            f"**{letter}**",
            f"I'd say {letter}",
            f"This image deserves a {letter}",
            f"The answer is {letter}.",
        ]
        if text:
            forms.append(f"{letter}. {text}")
        return rng.choice(forms)

    def _json(self, document: dict[str, Any], rng: random.Random) -> str:
        text = json.dumps(document)
        if self.behaviour == Behaviour.FENCED:
            return f"```json\n{json.dumps(document, indent=2)}\n```"
        if self.behaviour in (Behaviour.PROSE, Behaviour.ANTHROPIC):
            before = rng.choice(
                [
                    "Sure! Here is my assessment:",
                    "Here is the JSON you asked for:",
                    "Looking at the image carefully, I'd answer:",
                ]
            )
            if self.behaviour == Behaviour.ANTHROPIC and rng.random() < 0.5:
                return f"{before}\n\n```json\n{text}\n```"
            return f"{before}\n{text}\nLet me know if you need anything else."
        return text


def _stated(level: int) -> dict[str, float]:
    """What a right model states: most on its level, a little on the neighbours."""
    near = [lvl for lvl in LEVEL_LETTERS if abs(lvl - level) == 1]
    return {
        letter: 0.9 if lvl == level else (round(0.1 / len(near), 3) if lvl in near else 0.0)
        for lvl, letter in LEVEL_LETTERS.items()
    }


def _free(truth: Truth) -> str:
    return f"The image shows {truth.severity} distortion."


# -- reading requests ------------------------------------------------------------------------

#: What the agent adds to a request it asks again: a stricter prompt after a rejected reply,
#: and the reason in the planner's prompt of a replan.
_RETRY_MARKS = (STRICT_JSON_SUFFIX.strip()[:30], "exactly one option letter")
_REPLAN_MARK = "needs replanning"

_ROLES = (
    (PLANNER_SYSTEM, "plan"),
    (DISTORTION_DETECTION_SYSTEM, "detect"),
    (DISTORTION_ANALYSIS_SYSTEM, "analyse"),
    (TOOL_SELECTION_SYSTEM, "select"),
    (SUMMARIZER_SYSTEM, "answer"),
    (QUALITY_LEVELS_SYSTEM, "levels"),
    (QUALITY_PROBABILITIES_SYSTEM, "stated"),
    (FOLLOW_UP_SYSTEM, "follow_up"),
)


def _role(system: str) -> str:
    for prompt, role in _ROLES:
        if system.strip().startswith(prompt[:60]):
            return role
    return "probe"


def _query(user: str) -> str:
    found = re.search(
        r"User's query: (.*?)(?:\n(?:Reference image given|The image|Plan|"
        r"Distortion analysis):|\Z)",
        user,
        re.S,
    )
    if found is None:
        raise ValueError(f"no query in {user[:80]!r}")
    return found.group(1).strip()


def _openai_parts(body: dict[str, Any]) -> tuple[str, str, list[str]]:
    system, user, images = "", "", []
    for message in body.get("messages", []):
        content = message.get("content")
        if message.get("role") == "system":
            system = content if isinstance(content, str) else ""
            continue
        for part in content if isinstance(content, list) else [{"type": "text", "text": content}]:
            if part.get("type") == "text":
                user += part["text"]
            elif part.get("type") == "image_url":
                images.append(part["image_url"]["url"].split(",", 1)[1])
    return system, user, images


def _anthropic_parts(body: dict[str, Any]) -> tuple[str, str, list[str]]:
    system = body.get("system") or ""
    if isinstance(system, list):
        system = "".join(block.get("text", "") for block in system)
    user, images = "", []
    for message in body.get("messages", []):
        for part in message.get("content", []):
            if part.get("type") == "text":
                user += part["text"]
            elif part.get("type") == "image":
                images.append(part["source"]["data"])
    return system, user, images


def _distortion_info(system: str) -> dict[str, list[str]] | None:
    found = re.search(r"The distortion information: (\{.*?\})\.?\n", system)
    return json.loads(found.group(1)) if found else None


def _offered_tools(system: str) -> list[str]:
    found = re.search(r"The available tools: (.*?)\.\n", system, re.S)
    names = re.findall(r"(?:^|; )([\w\-]+) \((?:NR|FR)\)", found.group(1)) if found else []
    return names or ["BRISQUE"]


# -- writing replies -------------------------------------------------------------------------


def _token_logprobs(text: str, letters: dict[str, float] | None) -> dict[str, Any]:
    """``logprobs.content`` for ``text``: a token per word or sign; at the answer's letter the
    top alternatives are the other letters with ``letters``' log-probabilities."""
    pieces = re.findall(r"\s?\w+|\s?[^\w\s]", text) or [text]
    content = []
    # The model knows where it wrote its letter: the first time the letter it answered stands
    # alone (it may mention others after it), else the last capital standing alone.
    stands = list(re.finditer(r"(?<![A-Za-z])([A-E])(?![a-z])", text)) if letters else []
    answered = max(letters, key=letters.__getitem__) if letters else None
    where = next((m for m in stands if m.group(1) == answered), stands[-1] if stands else None)
    offset = 0
    for piece in pieces:
        top = [{"token": piece, "logprob": -0.01, "bytes": list(piece.encode())}]
        entry = {
            "token": piece,
            "logprob": -0.01,
            "bytes": list(piece.encode()),
            "top_logprobs": top,
        }
        if where is not None and offset <= where.start() < offset + len(piece):
            space = " " if piece.startswith(" ") else ""
            entry["logprob"] = letters[where.group(1)]
            entry["top_logprobs"] = [
                {
                    "token": space + letter,
                    "logprob": value,
                    "bytes": list((space + letter).encode()),
                }
                for letter, value in sorted(letters.items(), key=lambda kv: -kv[1])
            ]
        content.append(entry)
        offset += len(piece)
    return {"content": content, "refusal": None}


def _openai_completion(
    text: str, finish: str, refusal: str | None, logprobs: dict[str, Any] | None, model: str | None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-sim",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model or "sim-model",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish,
                "logprobs": logprobs,
                "message": {
                    "role": "assistant",
                    "content": None if refusal else text,
                    "refusal": refusal,
                },
            }
        ],
        "usage": {
            "prompt_tokens": 500,
            "completion_tokens": max(1, len(text) // 4),
            "total_tokens": 500 + max(1, len(text) // 4),
        },
    }


def _anthropic_message(
    text: str, finish: str, refusal: str | None, model: str | None
) -> dict[str, Any]:
    stop = {"stop": "end_turn", "length": "max_tokens"}[finish]
    if refusal:
        stop, text = "refusal", refusal
    return {
        "id": "msg_sim",
        "type": "message",
        "role": "assistant",
        "model": model or "sim",
        "content": [{"type": "text", "text": text}] if text else [],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 500, "output_tokens": max(1, len(text) // 4)},
    }


def serve(behaviour: Behaviour, *, seed: int = 0) -> tuple[FakeAPIServer, SimulatedModel]:
    """A server playing a right model with ``behaviour`` (enter it with ``with``)."""
    model = SimulatedModel(behaviour, seed=seed)
    return FakeAPIServer(model), model


__all__ = ["Behaviour", "SimulatedModel", "Truth", "UNRECOVERABLE", "serve"]
