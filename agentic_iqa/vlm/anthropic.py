"""Anthropic Messages API backend.

Anthropic returns no token log-probabilities. When a request has ``answer_options``, the
documented substitute is used instead, in the same call: the system prompt asks the model to
reply with a JSON object holding its ``answer`` and an ``option_probabilities`` mapping (one
probability per option). These are clipped at 0, normalised to sum 1 and turned into
log-probabilities (a zero gives ``-inf``), with ``probability_source="self-reported"``. If that
JSON cannot be parsed, probability 1 goes to the letter the model answered
(``probability_source="argmax"``); if no letter can be found either, ``option_logprobs`` is None.
Self-reported probabilities are a model's statement, not a measured distribution: they are
coarser (often round numbers) than real log-probabilities.

When the caller did not ask for JSON, the returned text is the answered letter (as the other
backends return it); otherwise it is the model's JSON as is.

Sampling parameters are not sent: SDK 2.x talks API version 2026-10-21, which rejects
``temperature``/``top_p``/``top_k``, so ``temperature`` in the settings does not apply here.
SDK errors (after its own retries; behind the rate limiter a 429 comes at once) become
:class:`VLMError` without a chained cause, because the SDK exception holds the request, whose
headers carry the key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any, cast

import anthropic
from anthropic._constants import DEFAULT_CONNECTION_LIMITS
from anthropic.types import TextBlock, UserMessageParam

from .base import (
    Usage,
    VLMRequest,
    VLMResponse,
)
from .deadline import ResponseTooLarge
from .images import encode_image, image_labels
from .sdk import SDKClient, bound_cause

_JSON_INSTRUCTION = "Reply with a single JSON object and nothing else."
#: Anthropic's stop reasons in OpenAI's words (:attr:`VLMResponse.finish_reason`).
_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "refusal": "refusal",
    "pause_turn": "length",
}
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


class AnthropicClient(SDKClient):
    """A :class:`VLMClient` over the official ``anthropic`` SDK; thread-safe, one per role."""

    backend = "anthropic"
    provider = "Anthropic"
    creation_errors = (anthropic.AnthropicError, ValueError, TypeError)
    connection_error = anthropic.APIConnectionError
    status_error = anthropic.APIStatusError

    def _open_sdk(self) -> anthropic.Anthropic:
        # An explicit api_key also stops the SDK from looking for profiles or other env keys.
        base_url, default_query = self.config.sdk_endpoint
        return anthropic.Anthropic(
            api_key=self._api_key,
            base_url=base_url,
            default_query=default_query or None,
            timeout=self.config.timeout,
            max_retries=self.config.max_retries,
            http_client=anthropic.DefaultHttpxClient(
                transport=self.transport(DEFAULT_CONNECTION_LIMITS),
                event_hooks={"response": [self.handover_429]},
            ),
        )

    def complete(self, request: VLMRequest) -> VLMResponse:
        parameters = self._parameters(request)
        try:
            with self.bounded(parameters["max_tokens"]):
                message = self._client.messages.create(**parameters)
        except (anthropic.AnthropicError, ValueError, ResponseTooLarge) as exc:
            raise self.sdk_error(exc) from None
        return self.response_from(message, request)

    def _parameters(self, request: VLMRequest) -> dict[str, Any]:
        """The Messages API body of ``request``: shared by the online call and the Message
        Batches API (:mod:`.batch_api`), so both send the same request."""
        user = cast(UserMessageParam, {"role": "user", "content": self._user_content(request)})
        parameters: dict[str, Any] = {"model": self.model, "max_tokens": self.config.max_tokens}
        system = self._system(request)
        if system:
            parameters["system"] = system
        parameters["messages"] = [user]
        return parameters

    def response_from(self, message: Any, request: VLMRequest) -> VLMResponse:
        """The answer in a ``Message`` to ``request``: shared by the online call and the
        Message Batches API, so both read a reply the same way."""
        text = "".join(block.text for block in message.content if isinstance(block, TextBlock))
        model = message.model or self.model
        usage = usage_of(message)
        finish = _FINISH_REASONS.get(message.stop_reason or "", message.stop_reason)
        refusal = (text or "refused") if message.stop_reason == "refusal" else None
        if not request.answer_options or finish != "stop":
            return VLMResponse(
                text=text, model=model, usage=usage, finish_reason=finish, refusal=refusal
            )
        option_logprobs, source, answer = options_from_reply(text, request.answer_options)
        if not request.json_output and answer is not None:
            text = answer
        return VLMResponse(
            text=text,
            model=model,
            option_logprobs=option_logprobs,
            probability_source=source,
            usage=usage,
            finish_reason=finish,
        )

    def _system(self, request: VLMRequest) -> str:
        parts = [request.system.strip()]
        if request.answer_options:
            listed = ", ".join(request.answer_options)
            parts.append(
                "Also state how likely you consider each option. Reply with a single JSON object"
                f' containing "answer" (the option letter you choose, one of {listed}) and'
                ' "option_probabilities" (an object mapping every option letter to a'
                " probability between 0 and 1; together they sum to 1)."
            )
            if request.json_output:
                parts[-1] += " Put these keys in the JSON object you were asked for."
        elif request.json_output:
            parts.append(_JSON_INSTRUCTION)
        return "\n\n".join(part for part in parts if part)

    def _user_content(self, request: VLMRequest) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        for path, label in zip(request.images, image_labels(len(request.images)), strict=True):
            if label:
                content.append({"type": "text", "text": label})
            media_type, data = encode_image(path, self.config.max_image_side)
            source = {"type": "base64", "media_type": media_type, "data": data}
            content.append({"type": "image", "source": source})
        content.append({"type": "text", "text": request.user})
        return content

    def _describe(self, exc: Exception) -> str:
        where = self.config.base_url or "api.anthropic.com"
        prefix = f"Anthropic request to model {self.model!r} at {where} failed"
        bound = bound_cause(exc)
        if bound is not None:
            return f"{prefix}: {bound}"
        if isinstance(exc, anthropic.APIStatusError):
            request_id = f", request id {exc.request_id}" if exc.request_id else ""
            detail = exc.api_message or exc.message
            return f"{prefix}: HTTP {exc.status_code}{request_id}: {detail}"
        if isinstance(exc, anthropic.APITimeoutError):
            return f"{prefix}: timed out after {self.config.timeout} s"
        return f"{prefix}: {type(exc).__name__}: {exc}"


def usage_of(message: Any) -> Usage | None:
    """Tokens as the server reported them. ``input_tokens`` here counts every prompt token:
    Anthropic's ``input_tokens`` plus ``cache_read_input_tokens`` (also ``cached_tokens``) and
    ``cache_creation_input_tokens``, so both backends count input the same way."""
    usage = getattr(message, "usage", None)
    if usage is None:
        return None
    read = getattr(usage, "cache_read_input_tokens", None)
    written = getattr(usage, "cache_creation_input_tokens", None)
    uncached = getattr(usage, "input_tokens", None)
    total = None if uncached is None else uncached + (read or 0) + (written or 0)
    return Usage(
        input_tokens=total, output_tokens=getattr(usage, "output_tokens", None), cached_tokens=read
    )


def options_from_reply(
    text: str, options: Sequence[str]
) -> tuple[dict[str, float] | None, str | None, str | None]:
    """``(option_logprobs, probability_source, answered letter)`` from the model's reply."""
    document = _json_object(text)
    answer = _answer_letter(document, text, options)
    probabilities = _probabilities(document, options)
    if probabilities is not None:
        logprobs = {o: math.log(p) if p > 0 else -math.inf for o, p in probabilities.items()}
        if answer is None:
            answer = max(probabilities, key=probabilities.__getitem__)
        return logprobs, "self-reported", answer
    if answer is None:
        return None, None, None
    return {o: 0.0 if o == answer else -math.inf for o in options}, "argmax", answer


def _json_object(text: str) -> dict[str, Any] | None:
    match = _OBJECT.search(text)
    if match is None:
        return None
    try:
        document = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    return document if isinstance(document, dict) else None


def _probabilities(
    document: dict[str, Any] | None, options: Sequence[str]
) -> dict[str, float] | None:
    reported = document.get("option_probabilities") if document else None
    if not isinstance(reported, dict):
        return None
    by_letter = {str(key).strip().casefold(): value for key, value in reported.items()}
    values: dict[str, float] = {}
    for option in options:
        value = by_letter.get(option.casefold(), 0.0)
        if not _is_number(value):
            return None
        values[option] = max(float(value), 0.0)
    total = sum(values.values())
    if total <= 0:
        return None
    return {option: value / total for option, value in values.items()}


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _answer_letter(
    document: dict[str, Any] | None, text: str, options: Sequence[str]
) -> str | None:
    """The letter the model chose: the JSON ``answer``, else the reply read by the agent's own
    parser (:func:`agentic_iqa.options.parse_option`), which takes a letter only where
    it stands as an option: the article in "A good image" is not option A.
    """
    from agentic_iqa.options import parse_option

    by_fold = {option.casefold(): option for option in options}
    if document is not None and isinstance(document.get("answer"), str):
        letter = by_fold.get(_bare(document["answer"]))
        if letter is not None:
            return letter
    found = parse_option(text, {option: "" for option in options})
    return None if found is None else by_fold.get(found.casefold())


def _bare(text: str) -> str:
    return text.strip().strip("().:\"'*").strip().casefold()
