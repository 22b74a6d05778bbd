"""`agentic-iqa flower` starts Flower against the app, behind basic auth, on loopback, and shows
a worker of the pipeline without any of its secrets."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.conftest import REPO
from tests.workers.cluster import Cluster, RedisServer, free_port
from tests.workers.leaks import leaks, secret

pytestmark = [pytest.mark.slow]


def get(url: str, auth: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def listening_addresses(port: int) -> set[str]:
    """The IPv4 addresses a socket listens on at ``port`` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(".".join(str(b) for b in reversed(bytes.fromhex(address))))
    return found


@contextmanager
def running_flower(
    args: list[str], env: dict[str, str], log: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`agentic-iqa flower ARGS` on a free port; yields its base URL once /healthcheck answers
    (without credentials: it must)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "agentic_iqa", "flower", "--port", str(port), *args],
        cwd=REPO,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            try:
                if get(f"{base}/healthcheck")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail(f"flower did not start; see {log}")
        yield base, process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)


def worker_seen(base: str, hostname: str, auth: str) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, seen = get(f"{base}/api/workers?refresh=1", auth)
        assert status == 200
        workers = json.loads(seen)
        if "conf" in workers.get(hostname, {}):
            return workers
        time.sleep(1)
    pytest.fail(f"flower never showed {hostname}'s configuration")


def test_flower_monitors_the_pipeline_behind_basic_auth(make_cluster, sqlite_url, tmp_path):
    """Credentials from FLOWER_BASIC_AUTH: the API refuses without them and shows the worker,
    its tasks and queues, with them."""
    cluster = make_cluster(sqlite_url)
    hostname = cluster.start("default", "default")
    env = {**cluster.env, "FLOWER_BASIC_AUTH": "admin:s3cret-flower"}
    with running_flower([], env, tmp_path / "flower.log") as (base, _):
        assert get(f"{base}/api/workers")[0] == 401
        worker = worker_seen(base, hostname, "admin:s3cret-flower")[hostname]
        assert "agentic_iqa.step.tool_execution" in worker["registered"]
        assert "agentic_iqa.coordinate" in worker["registered"]
        assert [queue["name"] for queue in worker["active_queues"]] == ["default"]


def test_flower_checks_credentials_binds_loopback_and_shows_no_secret(
    protected_redis: RedisServer, tmp_path: Path
) -> None:
    """Credentials from --auth-file: none or wrong ones get 401, the right ones 200; it listens
    on 127.0.0.1 only; the worker's page and /api/workers hold none of the worker's secrets,
    and neither Flower's command line nor its log holds its own credentials."""
    flower_password = secret("flower")
    auth = f"admin:{flower_password}"
    auth_file = tmp_path / "flower-auth"
    auth_file.write_text(auth + "\n")
    secrets = {
        "database": secret("database"),
        "broker": protected_redis.password or "",
        "backend": secret("backend"),
        "api_key": "sk-" + uuid.uuid4().hex,
        "flower": flower_password,
    }
    protected_redis.add_user("results", secrets["backend"])
    cluster = Cluster(
        protected_redis.secure_url(0),
        f"postgresql+psycopg://agentic:{quote(secrets['database'], safe='')}@127.0.0.1/test",
        tmp_path,
        {
            "AGENTIC_IQA_RESULT_BACKEND": protected_redis.secure_url(
                1, user="results", password=secrets["backend"]
            ),
            "OPENAI_API_KEY": secrets["api_key"],
            "AGENTIC_IQA_SUPERVISOR": "false",
        },
    )
    log = tmp_path / "flower-auth.log"
    try:
        hostname = cluster.start("watched", "default")
        with running_flower(["--auth-file", str(auth_file)], cluster.env, log) as (base, process):
            assert listening_addresses(int(base.rsplit(":", 1)[1])) == {"127.0.0.1"}
            command_line = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode()
            for path in ("/api/workers", f"/worker/{hostname}"):
                assert get(f"{base}{path}")[0] == 401
                assert get(f"{base}{path}", "admin:wrong-password")[0] == 401
                assert get(f"{base}{path}", f"other:{flower_password}")[0] == 401
            workers = worker_seen(base, hostname, auth)
            status, page = get(f"{base}/worker/{hostname}", auth)
    finally:
        cluster.stop()
    assert status == 200 and hostname.encode() in page
    assert workers[hostname]["conf"]["task_default_queue"] == "default"
    assert leaks(json.dumps(workers), secrets) == []
    assert leaks(page.decode(), secrets) == []
    assert leaks(command_line, secrets) == []
    assert "Visit me at" in log.read_text()
    assert leaks(log.read_text(), secrets) == []
