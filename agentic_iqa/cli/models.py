"""``agentic-iqa models``: the backends, the model each role is configured with here, and the
price table, so a sweep's ``--model`` values and its cost can be chosen before it runs."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape

from .common import fail, out

#: What each backend is, in one line (configs/model_backends.yaml says more).
BACKENDS = {
    "builtin": "offline: the agent's own measurements, no model, no network, no key",
    "openai": "OpenAI chat completions, or any OpenAI-compatible server via --base-url "
    "(vLLM, Ollama)",
    "anthropic": "the Anthropic Messages API",
}


def _price(price: Any) -> dict[str, float] | None:
    return (
        None
        if price is None
        else {"input": price.input, "output": price.output, "cached_input": price.cached_input}
    )


def _usd(value: float) -> str:
    """Return ``$2.50``, or every digit a price has below the cent (``$0.075``)."""
    return f"${value:.2f}" if round(value, 2) == value else f"${value:g}"


def _dollars(price: dict[str, float] | None) -> str:
    if price is None:
        return "price unknown"
    return (
        f"{_usd(price['input'])} in / {_usd(price['output'])} out / "
        f"{_usd(price['cached_input'])} cached, per million tokens"
    )


def models(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The backends, the backend and model each role runs with here (configs/
    model_backends.yaml and AGENTIC_IQA_*), whether its key is set (never the key), and the
    price of every model in the price table (configs/prices.yaml or prices_file), with the
    providers' batch discounts."""
    from urllib.parse import urlsplit

    from iqa_tools.secret_env import is_set

    from ..redact import redact
    from ..vlm.base import VLMError
    from ..vlm.settings import load_backend_configs
    from ..vlm.usage import PriceTable

    try:
        configs = load_backend_configs()
        prices = PriceTable.load()
    except VLMError as exc:
        fail(str(exc), code=2)
    roles: list[dict[str, Any]] = []
    for role, config in configs.items():
        endpoint = urlsplit(config.base_url).netloc or None if config.base_url else None
        model = config.answering_model
        variable = config.key_variable
        roles.append(
            {
                "role": role,
                "backend": config.backend,
                "model": model,
                "base_url": redact(config.base_url) if config.base_url else None,
                "key_variable": variable,
                "key_set": is_set(variable) if variable else None,
                "price": None
                if config.backend == "builtin"
                else _price(prices.price_for(model, endpoint)),
                "batch_discount": None
                if config.backend == "builtin"
                else prices.batch_factor(config.backend, endpoint),
            }
        )
    document: dict[str, Any] = {
        "backends": [{"name": name, "about": about} for name, about in BACKENDS.items()],
        "roles": roles,
        "prices": [
            {"model": name, **(_price(price) or {})}
            for name, price in sorted(prices.prices.items())
        ],
        "endpoints": {
            host: {name: _price(price) for name, price in table.items()}
            for host, table in prices.endpoints.items()
        },
        "batch_discount": dict(prices.batch_discount),
    }
    if as_json:
        print(redact(json.dumps(document, indent=2)))
        return
    lines = ["backends:"]
    lines += [f"  {name:<10} {about}" for name, about in BACKENDS.items()]
    lines.append("configured here (eval submit without --model):")
    for entry in roles:
        where = f" at {entry['base_url']}" if entry["base_url"] else ""
        key = (
            ""
            if entry["key_set"] is None
            else f", key {'set' if entry['key_set'] else 'NOT set'} in {entry['key_variable']}"
        )
        price = "" if entry["backend"] == "builtin" else f"; {_dollars(entry['price'])}"
        lines.append(
            f"  {entry['role']:<10} {entry['backend']}/{entry['model']}{where}{key}{price}"
        )
    lines.append("prices (USD per million tokens: input / output / cached input):")
    lines += [
        f"  {row['model']:<20} {_usd(row['input'])} / {_usd(row['output'])} / "
        f"{_usd(row['cached_input'])}"
        for row in document["prices"]
    ]
    for host, table in document["endpoints"].items():
        lines += [f"  {name} at {host}: {_dollars(price)}" for name, price in table.items()]
    if document["batch_discount"]:
        lines.append(
            "batch discount (eval submit --batch): "
            + ", ".join(f"{key} x{factor:g}" for key, factor in document["batch_discount"].items())
        )
    for line in lines:
        out.print(escape(redact(line) or ""), highlight=False, soft_wrap=True)
