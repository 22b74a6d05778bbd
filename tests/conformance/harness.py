"""Running a dataset job against the simulated model and scoring what came back.

One function for the tests and ``benchmarks/vlm_fidelity.py``: a job over the items, every role on
the ``openai`` backend (or ``anthropic``) at the simulated server, and per item whether it failed
and whether its answer was right; for rating items the fused score beside the model's own level.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from agentic_iqa.jobs.spec import JobSpec
from tests.agentic_iqa.vlm.fake_servers import FakeAPIServer
from tests.conformance.items import Item, teach, write_manifest
from tests.conformance.simulated_model import Behaviour, SimulatedModel

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Outcome:
    item_id: str
    status: str
    error: str | None
    final_answer: str | None
    quality_score: float | None
    truth_letter: str | None
    truth_level: int | None

    @property
    def right(self) -> bool | None:
        """Multiple choice: the letter matches; None for a rating item."""
        if self.truth_letter is None:
            return None
        return self.status == "done" and self.final_answer == self.truth_letter


@dataclass(frozen=True)
class JobResult:
    behaviour: Behaviour
    job_id: str
    outcomes: list[Outcome]
    job_error: str | None
    exit_code: int | None
    calls: dict[str, int]
    #: Questions the model was asked more than once (a rejected reply, a replan).
    asked_again: list[str] = field(default_factory=list)

    def mcq(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.truth_letter is not None]

    def rated(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.truth_level is not None]

    def share_right(self) -> float:
        mcq = self.mcq()
        return sum(1 for o in mcq if o.right) / len(mcq) if mcq else float("nan")

    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != "done"]

    def scoring_srcc(self) -> float:
        from scipy.stats import spearmanr

        pairs = [
            (o.quality_score, o.truth_level)
            for o in self.rated()
            if o.status == "done" and o.quality_score is not None
        ]
        if len(pairs) < 3:
            return float("nan")
        return float(spearmanr([p[0] for p in pairs], [p[1] for p in pairs]).statistic)


def environment(behaviour: Behaviour, server: FakeAPIServer, folder: Path) -> dict[str, str]:
    """Every role on the simulated server; a fresh results database and score cache; no VLM
    response cache (each class must reach its own server)."""
    anthropic = behaviour == Behaviour.ANTHROPIC
    return {
        "AGENTIC_IQA_VLM_BACKEND": "anthropic" if anthropic else "openai",
        "AGENTIC_IQA_VLM_MODEL": "sim-claude" if anthropic else "sim-qwen2.5-vl",
        "AGENTIC_IQA_VLM_BASE_URL": server.url if anthropic else f"{server.url}/v1",
        "OPENAI_API_KEY": "sk-sim-openai",
        "ANTHROPIC_API_KEY": "sk-sim-anthropic",
        "AGENTIC_IQA_DATABASE_URL": f"sqlite:///{folder / 'results.sqlite3'}",
        "AGENTIC_IQA_TOOL_CACHE": f"sqlite:///{folder / 'scores.sqlite3'}",
        "AGENTIC_IQA_VLM_CACHE": "false",
        "AGENTIC_IQA_DEVICE": "cpu",
        "AGENTIC_IQA_BROKER_URL": "",
    }


@contextmanager
def simulated(
    behaviour: Behaviour, items: list[Item], *, seed: int = 0
) -> Iterator[tuple[FakeAPIServer, SimulatedModel]]:
    model = SimulatedModel(behaviour, seed=seed)
    teach(model, items)
    with FakeAPIServer(model) as server:
        yield server, model


def run_cli_job(
    behaviour: Behaviour,
    items: list[Item],
    folder: Path,
    *,
    seed: int = 0,
    workers: int = 4,
    extra_env: Mapping[str, str] | None = None,
) -> JobResult:
    """``agentic-iqa eval submit`` in a subprocess (the CLI a user runs) against the simulated
    model; the results read back from the job's database."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = write_manifest(items, folder / "manifest.csv")
    with simulated(behaviour, items, seed=seed) as (server, model):
        env = {
            **os.environ,
            **environment(behaviour, server, folder),
            **(extra_env or {}),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        command = [
            sys.executable,
            "-m",
            "agentic_iqa",
            "eval",
            "submit",
            str(manifest),
            "--backend",
            env["AGENTIC_IQA_VLM_BACKEND"],
            "--no-vlm-cache",
            "--workers",
            str(workers),
            "--name",
            behaviour.value,
        ]
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=1800, check=False
        )
        job_id = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        calls = dict(model.calls)
        again = model.asked_again()
    if not job_id:
        raise RuntimeError(f"eval submit printed no job id:\n{done.stderr[-3000:]}")
    return replace(
        read_job(behaviour, env["AGENTIC_IQA_DATABASE_URL"], job_id, items, done.returncode, calls),
        asked_again=again,
    )


def run_local_job(
    behaviour: Behaviour, items: list[Item], folder: Path, *, seed: int = 0, workers: int = 2
) -> JobResult:
    """The same job in this process (``submission.submit`` + ``local.run_local``): for the tests,
    which set the environment with ``monkeypatch`` first (see :func:`environment`)."""
    from agentic_iqa.agents.team import default_agents
    from agentic_iqa.db import make_engine, upgrade
    from agentic_iqa.runtime.local import run_local
    from agentic_iqa.runtime.submission import submit

    url = os.environ["AGENTIC_IQA_DATABASE_URL"]
    upgrade(url)
    engine = make_engine(url)
    manifest = write_manifest(items, folder / "manifest.csv")
    job_id = submit(engine, JobSpec.build(manifest=manifest))
    run_local(engine, job_id, default_agents(), workers=workers)
    return read_job(behaviour, url, job_id, items, None, {})


def read_job(
    behaviour: Behaviour,
    url: str,
    job_id: str,
    items: list[Item],
    exit_code: int | None,
    calls: dict[str, int],
) -> JobResult:
    from agentic_iqa.db import make_engine
    from agentic_iqa.db.engine import read_scope
    from agentic_iqa.db.exports import export_rows
    from agentic_iqa.db.jobs import get_job

    truths = {item.id: item.truth for item in items}
    outcomes = []
    with read_scope(make_engine(url)) as session:
        job_error = getattr(get_job(session, job_id), "error", None)
        for row in export_rows(session, job_id):
            truth = truths[row["item_id"]]
            outcomes.append(
                Outcome(
                    row["item_id"],
                    row["status"],
                    row["error"],
                    row["final_answer"],
                    row["quality_score"],
                    truth.answer,
                    truth.level,
                )
            )
    return JobResult(behaviour, job_id, outcomes, job_error, exit_code, calls)


__all__ = [
    "JobResult",
    "Outcome",
    "environment",
    "read_job",
    "run_cli_job",
    "run_local_job",
    "simulated",
]
