"""OpenAI (and OpenAI-compatible: vLLM, Ollama, LM Studio) chat-completions backend.

Answer options are scored with real token log-probabilities: the request asks for
``logprobs=True, top_logprobs=20`` and each option's log-probability is read at the token where
the answer's letter stands, found in the generated text by the agent's own option reader
(:func:`agentic_iqa.options.locate_option`): in "This image deserves a C" that is the
"C", never the article "a"; in "I'd say B" the "B", never the "d" of "I'd".  Tokens there count
as a letter after stripping whitespace, punctuation and tokenizer space markers (``"C"``,
``" C"``, ``"(C"``), upper case only, taking the best of them. An option absent from the top
list gets ``-inf`` (probability 0); when no letter stands in the answer, or the server returns
no log-probabilities (several compatible servers do not), ``option_logprobs`` is None.

``finish_reason`` and the message's ``refusal`` travel on the response, so that the agent
recognises a reply cut off at the token limit, filtered or refused.

SDK errors (after the SDK's own retries on 408/409/429/5xx; behind the rate limiter of
:mod:`.ratelimit` a 429 comes at once) become :class:`VLMError` without a
chained cause: the SDK exception holds the request, whose headers carry the key.
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable, Sequence
from typing import Any

import openai
from openai._constants import DEFAULT_CONNECTION_LIMITS

from .base import (
    Usage,
    VLMError,
    VLMRequest,
    VLMResponse,
)
from .deadline import ResponseTooLarge
from .images import encode_image, image_labels
from .sdk import SDKClient, bound_cause

TOP_LOGPROBS = 20
#: Reply budget when only an option letter is wanted: enough for "(A)" or "Answer: A".
ANSWER_MAX_TOKENS = 16
#: OpenAI marks tokens outside the top list with this log-probability.
_OUTSIDE_TOP = -9999.0
_STRIP = string.whitespace + string.punctuation + "\u2581\u0120"
_JSON_HINT = "Answer with a single JSON object."


class OpenAIClient(SDKClient):
    """A :class:`VLMClient` over the official ``openai`` SDK; thread-safe, one per role."""

    backend = "openai"
    provider = "OpenAI"
    creation_errors = (openai.OpenAIError,)
    connection_error = openai.APIConnectionError
    status_error = openai.APIStatusError

    def _open_sdk(self) -> openai.OpenAI:
        kwargs: dict[str, Any] = {}
        base_url, default_query = self.config.sdk_endpoint
        if base_url:
            kwargs["base_url"] = base_url
        if default_query:
            kwargs["default_query"] = default_query
        return openai.OpenAI(
            api_key=self._api_key,
            timeout=self.config.timeout,
            max_retries=self.config.max_retries,
            http_client=openai.DefaultHttpxClient(
                transport=self.transport(DEFAULT_CONNECTION_LIMITS),
                event_hooks={"response": [self.handover_429]},
            ),
            **kwargs,
        )

    def complete(self, request: VLMRequest) -> VLMResponse:
        parameters = self._parameters(request)
        limit = parameters.get("max_tokens") or parameters["max_completion_tokens"]
        try:
            with self.bounded(limit):
                completion = self._client.chat.completions.create(**parameters)
        except (openai.OpenAIError, ResponseTooLarge) as exc:  # the SDK lets the cap through
            raise self.sdk_error(exc) from None
        return self.response_from(completion, request)

    def response_from(self, completion: Any, request: VLMRequest) -> VLMResponse:
        """The answer in a ``ChatCompletion`` to ``request``: shared by the online call and the
        Batch API (:mod:`.batch_api`), so both read a reply the same way."""
        if not completion.choices:
            raise VLMError(f"OpenAI model {self.model!r} returned no choices")
        choice = completion.choices[0]
        text = choice.message.content or ""
        refusal = getattr(choice.message, "refusal", None) or None
        option_logprobs = None
        if request.answer_options:
            content = choice.logprobs.content if choice.logprobs is not None else None
            option_logprobs = option_logprobs_from_tokens(content or [], request.answer_options)
        return VLMResponse(
            text=text,
            model=completion.model or self.model,
            option_logprobs=option_logprobs,
            probability_source="logprobs" if option_logprobs is not None else None,
            usage=usage_of(completion),
            finish_reason=choice.finish_reason,
            refusal=refusal,
        )

    def _parameters(self, request: VLMRequest) -> dict[str, Any]:
        system = request.system
        if request.json_output and "json" not in f"{system} {request.user}".lower():
            # JSON mode is refused unless the word "JSON" appears in the messages.
            system = f"{system}\n\n{_JSON_HINT}".strip()
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": self._user_content(request)})
        parameters: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.config.temperature is not None:
            parameters["temperature"] = self.config.temperature
        if request.json_output:
            parameters["response_format"] = {"type": "json_object"}
        if request.answer_options:
            parameters["logprobs"] = True
            parameters["top_logprobs"] = TOP_LOGPROBS
        limit = self.config.max_tokens
        if request.answer_options and not request.json_output:
            limit = min(limit, ANSWER_MAX_TOKENS)
        # OpenAI deprecated max_tokens (reasoning models refuse it); compatible servers may only
        # know max_tokens.
        parameters["max_tokens" if self.config.base_url else "max_completion_tokens"] = limit
        return parameters

    def _user_content(self, request: VLMRequest) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        for path, label in zip(request.images, image_labels(len(request.images)), strict=True):
            if label:
                content.append({"type": "text", "text": label})
            media_type, data = encode_image(path, self.config.max_image_side)
            url = f"data:{media_type};base64,{data}"
            content.append({"type": "image_url", "image_url": {"url": url}})
        content.append({"type": "text", "text": request.user})
        return content

    def _describe(self, exc: Exception) -> str:
        where = self.config.base_url or "api.openai.com"
        prefix = f"OpenAI request to model {self.model!r} at {where} failed"
        bound = bound_cause(exc)
        if bound is not None:
            return f"{prefix}: {bound}"
        if isinstance(exc, openai.APIStatusError):
            request_id = f", request id {exc.request_id}" if exc.request_id else ""
            return f"{prefix}: HTTP {exc.status_code}{request_id}: {exc.message}"
        if isinstance(exc, openai.APITimeoutError):
            return f"{prefix}: timed out after {self.config.timeout} s"
        return f"{prefix}: {type(exc).__name__}: {exc}"


def option_logprobs_from_tokens(
    tokens: Sequence[Any], options: Iterable[str]
) -> dict[str, float] | None:
    """Option log-probabilities from chat-completion ``logprobs.content`` entries, read at the
    token where the answer's option letter stands.

    Each entry has ``token``, ``logprob`` and ``top_logprobs`` (objects or dicts).
    """
    from agentic_iqa.options import locate_option

    options = tuple(options)
    if not tokens:
        return None
    pieces = [_field(entry, "token") or "" for entry in tokens]
    found = locate_option("".join(pieces), {option: "" for option in options})
    if found is None or found.start is None:
        return None
    offset = 0
    position = tokens[-1]
    for entry, piece in zip(tokens, pieces, strict=True):
        if offset + len(piece) > found.start:
            position = entry
            break
        offset += len(piece)
    wanted = {_normalise(option): option for option in options}
    # A whole answer in lower case ("b") is read in lower case at its position too.
    lower = _normalise(_field(position, "token")).islower()
    candidates = [position, *(_field(position, "top_logprobs") or [])]
    best: dict[str, float] = {}
    for candidate in candidates:
        token = _normalise(_field(candidate, "token"))
        option = wanted.get(token.upper() if lower else token)
        logprob = _field(candidate, "logprob")
        if option is None or logprob is None or logprob <= _OUTSIDE_TOP:
            continue
        best[option] = max(best.get(option, -math.inf), float(logprob))
    if not best:
        return None
    return {option: best.get(option, -math.inf) for option in options}


def usage_of(completion: Any) -> Usage | None:
    """Tokens as the server reported them: ``prompt_tokens`` (cached ones included),
    ``completion_tokens`` and ``prompt_tokens_details.cached_tokens``; None without ``usage``."""
    usage = getattr(completion, "usage", None)
    if usage is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    return Usage(
        input_tokens=getattr(usage, "prompt_tokens", None),
        output_tokens=getattr(usage, "completion_tokens", None),
        cached_tokens=getattr(details, "cached_tokens", None) if details else None,
    )


def _normalise(token: str | None) -> str:
    """A token as the letter it may be: no spaces, punctuation or space markers, full-width
    letters as ASCII; case kept (a lower-case "a" is the article, not option A)."""
    from agentic_iqa.options.normalise import fold_width

    return fold_width((token or "").strip(_STRIP))  # a full-width "Ｃ" is the letter C


def _field(entry: Any, name: str) -> Any:
    return entry.get(name) if isinstance(entry, dict) else getattr(entry, name, None)
