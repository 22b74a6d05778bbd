"""A finished job to trace: the planner and the summarizer on a local server speaking OpenAI's
protocol (the real SDK; tokens reported on every call, priced by a table of the test's own),
the executor builtin with real tools.  Its items: three rated photos with MOS (one with a
hostile id), an explanation that asks for a replan first, a multiple-choice question with its
truth, and a corrupt image that fails."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer, Recorded, Reply, openai_completion

RATE = "Rate the quality of this image using PIQE."
EXPLAIN = "Is this image blurry? Use PIQE."
MCQ = "Which distortion is most visible? A. Noise B. Blur C. Compression"
HOSTILE = "[bold]x[/bold]"
LEVELS = [("A", -3.0), ("B", -0.4), ("C", -1.5), ("D", -3.5), ("E", -5.0)]
USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 50,
    "total_tokens": 1050,
    "prompt_tokens_details": {"cached_tokens": 400},
}
#: USD per million tokens at the server (input, output, cached input).
CALL_COST = (600 * 2.50 + 400 * 1.25 + 50 * 10.00) / 1_000_000
WANTS_MORE = {
    "final_answer": "Unable to determine",
    "quality_reasoning": "need a closer look",
    "need_replan": True,
    "replan_reason": "look closer at the [red]edges[/red]",
}
ANSWER = {"final_answer": "Yes", "quality_reasoning": "the edges are soft", "need_replan": False}
CHOICE = {"final_answer": "B", "quality_reasoning": "blur [i]dominates[/i]", "need_replan": False}


def plan(*, scoring: bool) -> dict[str, object]:
    return {
        "query_type": "IQA",
        "query_scope": "Global",
        "distortion_source": "Inferred",
        "distortions": None,
        "reference_mode": "No-Reference",
        "required_tool": "PIQE",
        "answer_mode": "scoring" if scoring else "explanation",
        "plan": {
            "distortion_detection": False,
            "distortion_analysis": True,
            "tool_selection": False,
            "tool_execution": True,
        },
    }


class Responder:
    """The planner, the summarizer and the five-level question, by system prompt; the
    explanation's first summary asks for a replan."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.explained = 0

    def __call__(self, request: Recorded) -> Reply:
        messages = request.body["messages"]
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        user = json.dumps([m["content"] for m in messages if m["role"] == "user"])
        model = request.body["model"]

        def reply(text: str, **extra: object) -> Reply:
            return Reply(200, openai_completion(text, model=model, usage=USAGE, **extra))

        if system.startswith("You are the planner"):
            return reply(json.dumps(plan(scoring=RATE in user)))
        if system.startswith("You are the summarizer"):
            if MCQ.split("?")[0] in user:
                return reply(json.dumps(CHOICE))
            with self.lock:
                self.explained += 1
                first = self.explained == 1
            return reply(json.dumps(WANTS_MORE if first else ANSWER))
        if "rate the\noverall quality" in system:
            return reply("B\nScore: 3.2", top_logprobs=LEVELS)
        return Reply(404, {"error": {"message": f"not scripted: {system[:60]}"}})


@dataclass
class TracedJob:
    url: str
    job_id: str
    folder: Path
    server_host: str


def make_traced_job(
    folder: Path, images: dict[str, Path], url: str | None = None
) -> Iterator[TracedJob]:
    """Run the job in ``folder`` (its manifest and price table there) on the database at
    ``url`` (default: a SQLite file there); the environment points every command at that
    database while the job is used."""
    from agentic_iqa.agents.team import default_agents
    from agentic_iqa.db import dispose_engines, make_engine, upgrade
    from agentic_iqa.jobs.spec import JobSpec
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit

    corrupt = folder / "corrupt.png"
    corrupt.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not an image at all" * 10)
    rows = [
        {"id": "rate-a", "image": str(images["original"]), "query": RATE, "mos": 3.0},
        {"id": "rate-b", "image": str(images["blur4"]), "query": RATE, "mos": 4.5},
        {"id": HOSTILE, "image": str(images["noise3"]), "query": RATE, "mos": 2.0},
        {"id": "blurry", "image": str(images["blur3"]), "query": EXPLAIN},
        {"id": "mcq", "image": str(images["jpeg4"]), "query": MCQ, "answer": "B"},
        {"id": "broken", "image": str(corrupt), "query": RATE, "mos": 1.0},
    ]
    manifest = folder / "items.jsonl"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    with FakeAPIServer(Responder()) as server, pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("AGENTIC_IQA_")]:
            if name != "AGENTIC_IQA_DATA_DIR" and not name.startswith("AGENTIC_IQA_TEST_"):
                patch.delenv(name)
        host = server.url.removeprefix("http://")
        empty = folder / "no-weights"
        empty.mkdir()
        prices = folder / "prices.yaml"
        prices.write_text(
            f'endpoints:\n  "{host}":\n    gpt-4o: {{input: 2.50, output: 10.00,'
            " cached_input: 1.25}\n",
            encoding="utf-8",
        )
        for role in ("PLANNER", "SUMMARIZER"):
            patch.setenv(f"AGENTIC_IQA_{role}_BACKEND", "openai")
            patch.setenv(f"AGENTIC_IQA_{role}_BASE_URL", f"{server.url}/v1")
            patch.setenv(f"AGENTIC_IQA_{role}_MODEL", "gpt-4o")
            patch.setenv(f"AGENTIC_IQA_{role}_MAX_RETRIES", "0")
        patch.setenv("OPENAI_API_KEY", "sk-test-traces-key")
        for name, value in {
            "TOOL_CACHE": "memory",
            "DEVICE": "cpu",
            "VLM_CACHE": "false",
            "PRICES_FILE": str(prices),
            # no weights: BRISQUE, asked for by the builtin, always falls back to PIQE
            "WEIGHTS_DIR": str(empty),
        }.items():
            patch.setenv(f"AGENTIC_IQA_{name}", value)
        own = url is None
        if url is None:
            url = f"sqlite:///{folder / 'results.sqlite3'}"
            upgrade(url)
        patch.setenv("AGENTIC_IQA_DATABASE_URL", url)
        patch.delenv("AGENTIC_IQA_BROKER_URL", raising=False)
        engine = make_engine(url)
        job_id = submit(engine, JobSpec.build(manifest=manifest, query=RATE, name="traced"))
        run_local(engine, job_id, default_agents(), workers=1)
        yield TracedJob(url, job_id, folder, host)
        if own:
            dispose_engines(url)
