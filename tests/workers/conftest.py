from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import redis_database, xdist_index
from tests.workers.cluster import Cluster, RedisServer
from tests.workers.leaks import secret


def broker_database(redis_url: str) -> str:
    """The worker's broker database: AGENTIC_IQA_TEST_BROKER_DB (default 7) less its xdist index,
    apart from the data databases counting down from 15."""
    number = int(os.environ.get("AGENTIC_IQA_TEST_BROKER_DB", "7")) - xdist_index()
    return redis_database(redis_url, number)


PIPELINE_TOOLS = {
    # Toy tools registered by import string: never offered to automatic selection.
    "Broken": {
        "display_name": "always NaN",
        "factory": "tests.iqa_tools.factories:always_nan",
        "type": "NR",
        "lower_is_better": False,
        "score_range": [0, 1],
        "description": "returns NaN",
        "default": False,
        "from_paper": False,
        "normalization": {"form": "linear", "params": {"x_at_1": 0, "x_at_5": 1}, "source": "test"},
    },
    "Slow": {
        "display_name": "slow brightness",
        "factory": "tests.iqa_tools.factories:slow_mean",
        "type": "NR",
        "lower_is_better": False,
        "score_range": [0, 1],
        "description": "sleeps, then mean brightness",
        "default": False,
        "from_paper": False,
        "normalization": {"form": "linear", "params": {"x_at_1": 0, "x_at_5": 1}, "source": "test"},
    },
}
#: No automatic fallback to PIQE, so a broken tool really leaves the evidence missing.
NO_PIQE_FALLBACK = {"PIQE": {"default": False}}


@pytest.fixture(scope="session")
def tool_overrides(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("meta") / "pipeline-tools.json"
    path.write_text(json.dumps({"tools": PIPELINE_TOOLS}))
    return path


@pytest.fixture(scope="session")
def no_piqe_fallback(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("meta") / "no-piqe-fallback.json"
    path.write_text(json.dumps({"tools": NO_PIQE_FALLBACK}))
    return path


@pytest.fixture
def broker_url(redis_url: str) -> Iterator[str]:
    """A Redis database of its own for each test's broker, emptied before and after."""
    url = broker_database(redis_url)
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / f'runs-{uuid.uuid4().hex[:6]}.sqlite3'}"


@pytest.fixture
def make_cluster(broker_url: str, tmp_path: Path, tool_overrides: Path):
    clusters: list[Cluster] = []

    def make(database_url: str, extra_overrides: tuple[Path, ...] = (), **env: str) -> Cluster:
        overrides = [str(tool_overrides), *map(str, extra_overrides)]
        cluster = Cluster(
            broker_url,
            database_url,
            tmp_path,
            {
                "AGENTIC_IQA_METADATA_OVERRIDES": json.dumps(overrides),
                **env,
            },
        )
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop()


@pytest.fixture
def protected_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of the test's own whose default user has a password (``.password``)."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    server = RedisServer(tmp_path, password=secret("broker"))
    server.start()
    yield server
    server.stop()
