"""Running the same job online and with ``--batch`` against the simulated model behind the
simulated batch interfaces, for the tests and ``benchmarks/batch_jobs.py``."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_iqa.jobs.spec import JobSpec
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer
from tests.conformance.batch_server import BatchServer, serve_batches
from tests.conformance.items import Item, images, multiple_choice, scoring, teach, write_manifest
from tests.conformance.simulated_model import Behaviour, SimulatedModel

#: USD per million tokens at the simulated endpoint (gpt-4o's list price), batch at half.
PRICE = {"input": 2.5, "output": 10.0}


def make_items(folder: Path, count: int, *, seed: int = 0) -> list[Item]:
    """``count`` items: two thirds multiple choice, a third rating requests."""
    paths = images(folder / "images", count)
    rated = max(1, count // 3)
    return multiple_choice(paths[rated:], count - rated, seed) + scoring(paths[:rated], rated, seed)


def prices_file(folder: Path, host: str) -> Path:
    path = folder / "prices.yaml"
    path.write_text(
        f"models: {{}}\nendpoints:\n  '{host}':\n    '*': {{input: {PRICE['input']}, "
        f"output: {PRICE['output']}}}\nbatch_discount:\n  '{host}': 0.5\n"
    )
    return path


def environment(
    behaviour: Behaviour, server: FakeAPIServer, folder: Path, *, cache: bool = False
) -> dict[str, str]:
    """The conformance environment (every role on the simulated server), with one score
    cache for the jobs side by side, fast polls and prices for the server's host."""
    from tests.conformance.harness import environment as conformance

    host = server.url.removeprefix("http://")
    return {
        **conformance(behaviour, server, folder),
        "AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{folder.parent / 'scores.sqlite3'}",
        "AGENTIC_IQA_VLM_CACHE": "true" if cache else "false",
        "AGENTIC_IQA_BATCH_POLL_INITIAL": "0.05",
        "AGENTIC_IQA_BATCH_POLL_MAX": "0.2",
        "AGENTIC_IQA_PRICES_FILE": str(prices_file(folder, host)),
    }


@contextmanager
def simulated_batches(
    behaviour: Behaviour, items: list[Item], *, delay: float = 0.0, seed: int = 0, **options: Any
) -> Iterator[tuple[FakeAPIServer, BatchServer, SimulatedModel]]:
    model = SimulatedModel(behaviour, seed=seed)
    teach(model, items)
    # Results come back in another order than sent, as the providers' do.
    options.setdefault("shuffle", seed + 1)
    server, batches = serve_batches(model, delay=delay, **options)
    with server:
        yield server, batches, model


@contextmanager
def patched_env(values: Mapping[str, str | None]) -> Iterator[None]:
    """``os.environ`` with ``values`` (None: unset) for the block."""
    saved = {key: os.environ.get(key) for key in values}
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass(frozen=True)
class Ran:
    job_id: str
    answers: dict[str, tuple[str, str | None, float | None]]
    summary: dict[str, Any]
    rounds: int
    seconds: float


def run_job(folder: Path, items: list[Item], *, batch: bool, workers: int = 2) -> Ran:
    """A local job in this process (the environment set by :func:`patched_env`)."""
    from agentic_iqa.agents.team import AgentsCache
    from agentic_iqa.db import make_engine, upgrade
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit

    url = os.environ["AGENTIC_IQA_DATABASE_URL"]
    upgrade(url)
    engine = make_engine(url)
    manifest = write_manifest(items, folder / "manifest.csv")
    started = time.perf_counter()
    job_id = submit(engine, JobSpec.build(manifest=manifest, batch=batch))
    run_local(engine, job_id, AgentsCache(), workers=workers)
    seconds = time.perf_counter() - started
    return read_ran(engine, job_id, seconds)


def read_ran(engine: Any, job_id: str, seconds: float = 0.0) -> Ran:
    from agentic_iqa.db import batches as batch_store
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.db.exports import export_rows, vlm_summary

    with read_scope(engine) as session:
        answers = {
            row["item_id"]: (row["status"], row["final_answer"], row["quality_score"])
            for row in export_rows(session, job_id)
        }
        summary = vlm_summary(session, job_id)
        rounds = batch_store.next_round(session, job_id) - 1
    return Ran(job_id, answers, summary, rounds, seconds)
