"""The deployed stack, as a user runs it: the image built from the Dockerfile, the project's own
docker-compose.yml brought up, a 30-item job (builtin backend, weight-free and parameter-file
tools) through every disruption the issue probed, and what an operator can read off the
containers.

Run by ``.ci/run`` after ``scripts/stack/engine.sh`` and ``scripts/stack/base-images.sh``;
by hand: ``.venv/bin/python -m pytest -m stack tests/stack`` (docs/deployment.md, "The stack
test"). Left out of every other selection (tests/conftest.py deselects the ``stack`` marker
unless ``-m`` names it).

The phases, in order (each a test; they share one stack):

1. build and ``up --wait``: every long-running service healthy (workers by their liveness
   file), hardened (no capabilities, no-new-privileges, a memory limit, a restart policy);
2. Flower: 401 without credentials, 200 with them, and no secret in its pages;
3. the job: the tool worker SIGKILLed (its main process, from the host: not a manual stop)
   and restarted by compose, its queue named by ``eval status`` while it is gone; the default
   worker restarted; Redis restarted; ``down``/``up``; then every item exactly once in the
   stack's PostgreSQL, and the steps of each queue done by workers of distinct names;
4. ``docker inspect`` of every container shows none of the secrets.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, Stack, docker_or_skip, wait_for

pytestmark = [pytest.mark.stack, pytest.mark.timeout(3600)]

ITEMS = 30
TOOL_WORKER = "cpu-tool-worker"
TOOL_QUEUE = "gpu"
#: Services that run until stopped (migrate is one-shot).
LONG_RUNNING = ("redis", "cache", "postgres", "worker", "vlm-worker", TOOL_WORKER, "flower")
WORKERS = ("worker", "vlm-worker", TOOL_WORKER)
SECRET_NAMES = (
    "postgres_password",
    "redis_password",
    "flower_auth",
    "openai_api_key",
    "anthropic_api_key",
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def readable(path: Path) -> None:
    """Let the containers' unprivileged users read ``path`` (pytest's folders are 0700)."""
    for folder in [path, *[p for p in path.rglob("*") if p.is_dir()]]:
        folder.chmod(0o755)
    for file in [p for p in path.rglob("*") if p.is_file()]:
        file.chmod(0o644)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[Stack]:
    docker = docker_or_skip()
    root = tmp_path_factory.mktemp("stack")
    # Images (the first 30 LIVE-C photos) and the NIQE/BRISQUE parameter files.
    images = root / "data" / "images"
    images.mkdir(parents=True)
    for photo in sorted((data_dir / "livec-dev" / "images").glob("*.JPG"))[:ITEMS]:
        shutil.copy(photo, images / photo.name)
    weights = root / "models" / "pyiqa"
    weights.mkdir(parents=True)
    (root / "models" / "huggingface").mkdir()
    for name in ("niqe_modelparameters.mat", "brisque_svm_weights.pth"):
        shutil.copy(data_dir / "pyiqa-weights" / name, weights / name)
    readable(root / "data")
    readable(root / "models")

    override = root / "compose.test.yml"
    build = {"build": {"network": "host"}}
    services: dict[str, dict[str, object]] = {
        name: dict(build) for name in ("migrate", "worker", "vlm-worker", "flower")
    }
    # The tool worker: a shorter liveness beat (2 s: an announcement holds 6 s), and, when its
    # container is restarted (a marker left in its own /tmp by the first start), 25 s before the
    # replacement starts, as a slow start would take: the killed worker's queue is then
    # unconsumed long enough for `eval status` to be asked, however fast this machine is.
    services[TOOL_WORKER] = {
        **build,
        "environment": {"AGENTIC_IQA_WORKER_HEALTH_INTERVAL": "2"},
        "entrypoint": [
            "sh",
            "-c",
            "if [ -e /tmp/stack-test-started ]; then sleep 25; fi; "
            'touch /tmp/stack-test-started; exec agentic-iqa "$$@"',  # $$: compose's escape
            "agentic-iqa",
        ],
    }
    override.write_text(yaml.safe_dump({"services": services}), encoding="utf-8")

    secrets = root / "secrets"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTIC_IQA_", "POSTGRES_", "FLOWER_", "COMPOSE_", "OPENAI_"))
        and not key.startswith("ANTHROPIC_")
    }
    env.update(
        SECRETS_DIR=str(secrets),
        DATA_DIR=str(root / "data"),
        MODELS_DIR=str(root / "models"),
        FLOWER_BIND="127.0.0.1",
        FLOWER_PORT=str(free_port()),
        DOCKER_BUILDKIT="0",
        COMPOSE_DOCKER_CLI_BUILD="0",
    )
    made = subprocess.run(
        ["bash", str(REPO / "scripts" / "stack-secrets.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    values = {name: (secrets / f"{name}.txt").read_text().strip() for name in SECRET_NAMES}
    # Placeholder keys, so that a leak of a key file would show too (the builtin backend
    # reads none).
    # A placeholder OpenAI key, so that a leak of a key file would show too; the Anthropic one
    # stays empty, as the script leaves it without a key in the shell (the builtin backend reads
    # neither, and an empty file must not stop a worker).
    values["openai_api_key"] = f"sk-stack-test-{os.urandom(8).hex()}"
    (secrets / "openai_api_key.txt").write_text(values["openai_api_key"] + "\n")
    assert values["anthropic_api_key"] == ""

    project = f"agentic-iqa-stack-{os.getpid()}"
    running = Stack(docker, project, override, env, values)
    try:
        # One service: they share the image (a plain `build` builds it once per service).
        running.timed("build", "build", "migrate", timeout=3000)
        running.timed("up", "up", "-d", "--wait", timeout=900)
        yield running
    finally:
        logs = running.compose("logs", "--no-color", "--tail", "200", check=False)
        (root / "compose.log").write_text(logs.stdout + logs.stderr)
        running.leftovers |= running.anonymous_volumes()
        running.compose("down", "-v", "--remove-orphans", "--timeout", "20", check=False)
        for volume in sorted(running.leftovers):
            subprocess.run([docker, "volume", "rm", volume], capture_output=True, check=False)
        print(f"stack timings (s): {running.timings}; logs: {root / 'compose.log'}")


# --- 1. up, healthy, hardened ---------------------------------------------------------------------


def health(stack: Stack, service: str) -> str:
    info = stack.inspect(stack.container(service))
    state = info["State"]
    return str(state.get("Health", {}).get("Status") or state["Status"])


def test_every_long_running_service_is_healthy_and_hardened(stack: Stack) -> None:
    for service in LONG_RUNNING:
        info = stack.inspect(stack.container(service))
        assert info["State"].get("Health", {}).get("Status") == "healthy", (service, info["State"])
        host = info["HostConfig"]
        assert host["CapDrop"] in (["ALL"], ["all"]), (service, host["CapDrop"])
        assert not host.get("CapAdd"), (service, host["CapAdd"])
        assert "no-new-privileges:true" in (host.get("SecurityOpt") or []), service
        assert host["Memory"] > 0, f"{service} has no memory limit"
        policy = host["RestartPolicy"]["Name"]
        expected = ("always",) if service in WORKERS else ("always", "unless-stopped")
        assert policy in expected, (service, policy)
        assert info["Config"]["User"] not in ("", "root", "0"), f"{service} runs as root"
    migrate = stack.compose("ps", "-a", "--format", "{{.Service}} {{.State}} {{.ExitCode}}").stdout
    assert "migrate exited 0" in migrate, migrate


# --- 2. Flower ------------------------------------------------------------------------------------


def flower(stack: Stack, path: str, auth: str | None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{stack.env['FLOWER_PORT']}{path}")
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def test_flower_wants_credentials_and_shows_no_secret(stack: Stack) -> None:
    auth = stack.secrets["flower_auth"]
    user, _, password = auth.partition(":")
    assert flower(stack, "/", None)[0] == 401
    assert flower(stack, "/", f"{user}:wrong-{password}")[0] == 401
    status, _ = flower(stack, "/", auth)
    assert status == 200
    status, workers = flower(stack, "/api/workers?refresh=1", auth)
    assert status == 200
    for name, value in stack.secrets.items():
        if value and name != "flower_auth":
            assert value not in workers, f"Flower's /api/workers shows {name}"
    assert password not in workers


# --- 3. the job through every disruption ---------------------------------------------------------


def counts(stack: Stack, job: str) -> dict[str, int]:
    rows = stack.sql(f"SELECT status, count(*) FROM job_items WHERE job_id = '{job}' GROUP BY 1")
    return {status: int(n) for status, n in rows}


def tool_queue_named(stack: Stack, job: str) -> str | None:
    """``eval status``'s output when it names the tool queue as having no consumer."""
    out = stack.cli("eval", "status", job, check=False)
    text = " ".join((out.stdout + out.stderr).split())  # the console may wrap the line
    named = f"queue {TOOL_QUEUE!r}" in text
    return text if named and "no worker consuming" in text else None


def restarts(stack: Stack, service: str) -> int:
    return int(stack.inspect(stack.container(service))["RestartCount"])


def healthy(stack: Stack, service: str) -> bool:
    try:
        return health(stack, service) == "healthy"
    except (AssertionError, subprocess.CalledProcessError):
        return False


def test_a_job_survives_a_killed_tool_worker_restarts_and_down_up(stack: Stack) -> None:
    submitted = stack.cli("eval", "submit", "/data/images", "--name", "stack-test")
    job = submitted.stdout.strip().splitlines()[-1]
    assert len(job) == 36, submitted.stdout

    # Tool work waiting: the planner's steps have reached the tool queue.
    wait_for("an item in the tool queue", lambda: counts(stack, job).get("queued"), 300, 0.5)

    # SIGKILL the tool worker's main process from the host: Docker sees the container die (exit
    # 137), not a manual stop, so the restart policy applies. `docker kill` would be a manual
    # stop, which Docker never undoes by itself (docs/deployment.md).
    before = restarts(stack, TOOL_WORKER)
    pid = stack.inspect(stack.container(TOOL_WORKER))["State"]["Pid"]
    killed_at = time.monotonic()
    os.kill(int(pid), 9)
    named = wait_for("eval status naming the tool queue", lambda: tool_queue_named(stack, job), 120)
    stack.timings["queue named after kill"] = time.monotonic() - killed_at
    assert f"agentic-iqa worker --queues {TOOL_QUEUE}" in named, named
    wait_for("the tool worker restarted", lambda: restarts(stack, TOOL_WORKER) > before, 120)
    wait_for("the tool worker healthy again", lambda: healthy(stack, TOOL_WORKER), 300, 2)
    stack.timings["tool worker back after kill"] = time.monotonic() - killed_at

    # The default worker (coordination, the supervisor), then Redis, restarted mid-job.
    stack.timed("restart worker", "restart", "worker", timeout=300)
    stack.timed("restart redis", "restart", "redis", timeout=300)
    wait_for("redis healthy", lambda: healthy(stack, "redis"), 120, 1)

    # The whole stack down and up again (volumes kept): the job carries on.
    stack.leftovers |= stack.anonymous_volumes()
    stack.timed("down", "down", "--timeout", "60", timeout=600)
    stack.timed("up again", "up", "-d", "--wait", timeout=900)

    started = time.monotonic()
    wait_for(
        f"all {ITEMS} items done",
        lambda: counts(stack, job).get("done") == ITEMS or None,
        1200,
        3,
    )
    stack.timings["job done after up"] = time.monotonic() - started

    # Each item exactly once: one row, one run, that run succeeded, no other run of the job.
    ((items, keys, runs, done),) = stack.sql(
        "SELECT count(*), count(DISTINCT item_key), count(DISTINCT run_id), "
        f"count(*) FILTER (WHERE status = 'done') FROM job_items WHERE job_id = '{job}'"
    )
    assert (int(items), int(keys), int(runs), int(done)) == (ITEMS,) * 4
    ((job_runs, succeeded),) = stack.sql(
        "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded') FROM runs "
        f"WHERE job_id = '{job}'"
    )
    assert (int(job_runs), int(succeeded)) == (ITEMS, ITEMS)
    ((job_status,),) = stack.sql(f"SELECT status FROM jobs WHERE id = '{job}'")
    assert job_status == "done"

    # The steps of each queue were done by workers named apart (`<queue>@<host>` by default).
    rows = stack.sql(
        "SELECT DISTINCT s.queue, s.worker FROM step_records s JOIN runs r ON r.id = s.run_id "
        f"WHERE r.job_id = '{job}' AND s.worker IS NOT NULL AND s.queue IS NOT NULL"
    )
    by_queue: dict[str, set[str]] = {}
    for queue, worker in rows:
        by_queue.setdefault(queue, set()).add(worker)
    assert TOOL_QUEUE in by_queue and "vlm" in by_queue, by_queue
    assert not by_queue[TOOL_QUEUE] & by_queue["vlm"], by_queue


# --- 4. docker inspect ----------------------------------------------------------------------------


def test_no_container_shows_a_secret(stack: Stack) -> None:
    containers = stack.containers()
    assert len(containers) >= len(LONG_RUNNING) + 1  # migrate stays, exited
    leaks = []
    for container in containers:
        info = stack.inspect(container)
        text = stack.inspect_text(container)
        name = info["Name"]
        for secret, value in stack.secrets.items():
            if value and value in text:
                leaks.append(f"{name}: {secret}")
        for variable in info["Config"].get("Env") or []:
            key, _, value = variable.partition("=")
            if any(word in key for word in ("PASSWORD", "SECRET", "TOKEN", "API_KEY")):
                assert key.endswith("_FILE") and value.startswith("/run/secrets/"), (
                    f"{name}: {key} is not a secret file"
                )
    assert leaks == []
    flower_env = {
        variable.partition("=")[0]
        for variable in stack.inspect(stack.container("flower"))["Config"]["Env"]
    }
    assert not {name for name in flower_env if "DATABASE" in name and "URL" not in name}
    assert "AGENTIC_IQA_DATABASE_PASSWORD_FILE" not in flower_env
    assert "OPENAI_API_KEY_FILE" not in flower_env
