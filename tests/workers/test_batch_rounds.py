"""A batch job (``eval submit --batch``) on real workers, against the simulated providers'
batch interfaces, with every worker SIGKILLed and the broker restarted empty while a round's
batch is open at the provider, twice.  Nobody runs ``eval resume``: the database holds every
request, batch id and answer, so the restarted worker's supervisor polls the batch, reads its
answers and sends the runs on.  The job must end as the same job online ends, item for item,
without a request paid for twice (by custom id; by body, no more often than the job online
asks it) and without a single online call.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from agentic_iqa.db import upgrade
from agentic_iqa.db.engine import make_engine
from agentic_iqa.jobs.spec import JobSpec
from agentic_iqa.runtime.progress import progress, wait
from agentic_iqa.runtime.submission import submit
from tests.conformance.batch_jobs import (
    environment,
    make_items,
    patched_env,
    read_ran,
    run_job,
    simulated_batches,
)
from tests.conformance.items import write_manifest
from tests.conformance.simulated_model import Behaviour
from tests.conftest import REPO, scratch_postgres
from tests.workers.cluster import Cluster, RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.faults]

ITEMS = 6
SEED = 11
#: Seconds a batch stays open at the provider: long enough to kill and restart inside a round.
DELAY = 2.0
#: The rounds whose open batch sees the faults.
FAULTY_ROUNDS = (1, 2)
#: The workers' own settings: the cluster gives the broker, database and tool cache.
_CLUSTER_OWNS = ("AGENTIC_IQA_BROKER_URL", "AGENTIC_IQA_DATABASE_URL", "AGENTIC_IQA_TOOL_CACHE")
_START_JOB = "import sys\nfrom workers.tasks import start_job\nstart_job(sys.argv[1])\n"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, sqlite_url: str):
    """Both results databases; PostgreSQL gets a scratch database of its own."""
    if request.param == "sqlite":
        yield sqlite_url
        return
    with scratch_postgres(request.getfixturevalue("postgres_admin_url")) as url:
        yield url


def _wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _start_job(cluster: Cluster, job_id: str) -> None:
    """The real ``workers.tasks.start_job``, as ``eval submit`` calls it, in a process
    configured like the workers."""
    result = subprocess.run(
        [sys.executable, "-c", _START_JOB, job_id],
        cwd=REPO,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def _batch_open(engine, job_id: str, round_number: int) -> bool:
    """The job's batch of ``round_number`` is with the provider (its id recorded), unread."""
    batch = progress(engine, job_id).batch
    return bool(
        batch and any(view.round == round_number and view.provider_id for view in batch.open)
    )


def test_a_batch_job_on_workers_killed_and_broker_emptied_between_rounds_pays_nothing_twice(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    items = make_items(tmp_path, ITEMS, seed=SEED)
    online_folder = tmp_path / "online"
    online_folder.mkdir()
    with (
        simulated_batches(Behaviour.CLEAN, items, seed=SEED) as (server, online_server, _model),
        patched_env(environment(Behaviour.CLEAN, server, online_folder)),
    ):
        online = run_job(online_folder, items, batch=False)
    asked_online = Counter(online_server.online_billed)

    folder = tmp_path / "batch"
    folder.mkdir()
    broker = RedisServer(tmp_path)
    broker.start()
    with (
        simulated_batches(Behaviour.CLEAN, items, delay=DELAY, seed=SEED) as (
            server,
            batches,
            _model,
        ),
        patched_env(
            {
                **environment(Behaviour.CLEAN, server, folder),
                "AGENTIC_IQA_DATABASE_URL": database_url,
                "AGENTIC_IQA_BROKER_URL": broker.url,
            }
        ),
    ):
        worker_env = {
            key: value
            for key, value in environment(Behaviour.CLEAN, server, folder).items()
            if key not in _CLUSTER_OWNS
        }
        cluster = Cluster(broker.url, database_url, tmp_path, worker_env)
        try:
            upgrade(database_url)
            engine = make_engine(database_url)
            manifest = write_manifest(items, folder / "manifest.csv")
            job_id = submit(engine, JobSpec.build(manifest=manifest, batch=True))
            cluster.start("worker", "default,gpu", concurrency=2)
            _start_job(cluster, job_id)
            for round_number in FAULTY_ROUNDS:
                _wait_until(
                    lambda n=round_number: _batch_open(engine, job_id, n),
                    120,
                    f"round {round_number}'s batch at the provider",
                )
                for hostname in list(cluster.processes):
                    cluster.kill(hostname)
                broker.kill()  # every queued and unacknowledged message is gone
                broker.start()
                cluster.start(f"worker{round_number}", "default,gpu", concurrency=2)
            final = wait(engine, job_id, poll=0.5, timeout=180)
            ran = read_ran(engine, job_id)
        finally:
            cluster.stop()
            broker.stop()
        billed = list(batches.billed)
        online_billed = list(batches.online_billed)

    assert final.status == "done" and final.counts == {"done": ITEMS}, final
    assert ran.answers == online.answers  # status, final answer, score: item for item
    assert ran.rounds >= max(FAULTY_ROUNDS) + 1
    assert online_billed == [] and billed
    # By request (a custom id is the batch's id, then the request's ``q<id>``).
    assert max(Counter(custom_id.rsplit("_", 1)[-1] for custom_id, _ in billed).values()) == 1
    # By body: each request paid as often as the job online asks it.  Two items may ask one
    # request (the same tool selection for the same distortions): online pays it twice too.
    assert Counter(digest for _, digest in billed) == asked_online
    assert (
        ran.summary["batch_calls"] == ran.summary["calls"] == online.summary["calls"] == len(billed)
    )
