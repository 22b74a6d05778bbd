"""The Docker deployment files: docker-compose.yml, Dockerfile, .env.example, .dockerignore.

The compose file is checked here as data (PyYAML) against what docs/deployment.md promises, and
with ``docker compose config`` where a Docker client with the Compose plugin is installed (that
command needs no engine). The stack itself runs in tests/stack (marker ``stack``, CI's last step).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"

APP_SERVICES = ("migrate", "worker", "vlm-worker", "cpu-tool-worker", "gpu-worker", "flower")
WORKERS = ("worker", "vlm-worker", "cpu-tool-worker", "gpu-worker")
#: Every service but the one-shot migrate runs until stopped.
LONG_RUNNING = ("redis", "cache", "postgres", *WORKERS, "flower")
#: The Docker secrets, as scripts/stack-secrets.sh writes them.
SECRETS = (
    "postgres_password",
    "redis_password",
    "flower_auth",
    "openai_api_key",
    "anthropic_api_key",
)
STACK_SECRETS = REPO / "scripts" / "stack-secrets.sh"
SENSITIVE = re.compile(r"PASSWORD|SECRET|TOKEN|KEY", re.IGNORECASE)
#: A value made only of ${...} references (compose interpolation), e.g. ${A:?message}.
REFERENCES_ONLY = re.compile(r"^(\$\{[A-Za-z_][A-Za-z0-9_]*(?:(?::?[-?+])[^}]*)?\})+$")
#: ${VAR...} as compose interpolates it; $${...} is an escaped literal.
INTERPOLATED = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)")
#: The password of scheme://user:password@host, where the password may be a ${...} reference.
URL_CREDENTIALS = re.compile(
    r"[a-z][a-z0-9+.-]*://[^/\s:@]*:((?:\$\{[^}]*\}|[^@\s/$])+)@", re.IGNORECASE
)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def environment(service: dict[str, Any]) -> dict[str, str | None]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.partition("=") for item in env)
        return {name: (value if sep else None) for name, sep, value in pairs}
    return {name: None if value is None else str(value) for name, value in env.items()}


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def command(service: dict[str, Any]) -> list[str]:
    cmd = service.get("command") or []
    return cmd.split() if isinstance(cmd, str) else [str(part) for part in cmd]


def option(cmd: list[str], name: str) -> str | None:
    for index, part in enumerate(cmd):
        if part == name and index + 1 < len(cmd):
            return cmd[index + 1]
        if part.startswith(name + "="):
            return part.split("=", 1)[1]
    return None


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> mode ('ro' or 'rw'), for short and long volume syntax."""
    result: dict[str, str] = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            result[volume["target"]] = "ro" if volume.get("read_only") else "rw"
            continue
        # Host parts may hold ${VAR:-./x}: split on ':' outside ${...}.
        parts = re.findall(r"(?:\$\{[^}]*\}|[^:])+", volume)
        mode = parts[2] if len(parts) > 2 else "rw"
        result[parts[1] if len(parts) > 1 else parts[0]] = "ro" if "ro" in mode.split(",") else "rw"
    return result


def walk(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every (dotted path, scalar) in the document; lists as KEY=VALUE are split like env."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            found += walk(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            if isinstance(value, str) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", value):
                name, _, rest = value.partition("=")
                found.append((f"{path}.{name}", rest))
            else:
                found += walk(value, f"{path}[{index}]")
    else:
        found.append((path, node))
    return found


# --- structure ------------------------------------------------------------------------------------


def test_every_service_the_deployment_doc_names_is_there(services: dict[str, Any]) -> None:
    expected = {
        "redis",
        "postgres",
        "migrate",
        "worker",
        "vlm-worker",
        "cpu-tool-worker",
        "gpu-worker",
        "flower",
    }
    assert expected <= set(services)


@pytest.mark.parametrize("name", ["redis", "cache"])
def test_both_redis_servers_want_the_password_secret_and_ping_with_it(
    services: dict[str, Any], name: str
) -> None:
    """The password comes from the secret file into the server's configuration on stdin (not
    its command line, which `ps` shows), and the healthcheck authenticates the same way:
    an unauthenticated ``redis-cli ping`` answers NOAUTH with exit code 0, hence the grep."""
    redis = services[name]
    assert redis["image"] == "redis:7-alpine"
    assert redis["secrets"] == ["redis_password"]
    script = " ".join(command(redis))
    assert "redis-server -" in script
    assert "requirepass $$(cat /run/secrets/redis_password)" in script
    assert "--requirepass" not in script
    test = redis["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL"
    assert 'REDISCLI_AUTH="$$(cat /run/secrets/redis_password)" redis-cli ping' in test[1]
    assert "grep -q PONG" in test[1]
    assert "ports" not in redis, f"{name} must not be published on the host"
    assert redis["user"] == "redis"


def test_the_caches_live_in_a_bounded_evicting_redis_apart_from_the_broker(
    services: dict[str, Any],
) -> None:
    script = " ".join(command(services["cache"]))
    assert "--maxmemory ${CACHE_MAXMEMORY:-256mb}" in script
    assert "--maxmemory-policy allkeys-lru" in script
    assert "--appendonly no" in script
    broker = " ".join(command(services["redis"]))
    assert "maxmemory" not in broker, "the broker must never evict a message"
    for name in WORKERS:
        cache = environment(services[name])["AGENTIC_IQA_TOOL_CACHE"]
        assert cache == "${AGENTIC_IQA_TOOL_CACHE:-redis://cache:6379/0}", name


def test_redis_persists_queued_messages_in_an_append_only_file(services: dict[str, Any]) -> None:
    command = " ".join(services["redis"]["command"])
    assert "--appendonly yes" in command and "--appendfsync everysec" in command
    assert any(volume.endswith(":/data") for volume in services["redis"]["volumes"])


def test_postgres_is_16_alpine_with_named_volume_and_pg_isready(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    postgres = services["postgres"]
    assert postgres["image"] == "postgres:16-alpine"
    env = environment(postgres)
    assert env["POSTGRES_USER"] == "agentic"
    assert env["POSTGRES_DB"] == "agentic_iqa"
    assert "POSTGRES_PASSWORD" not in env
    assert env["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert postgres["secrets"] == ["postgres_password"]
    assert postgres["user"] == "postgres"
    test = postgres["healthcheck"]["test"]
    assert "pg_isready" in (test if isinstance(test, str) else " ".join(test))
    named = set(compose.get("volumes") or {})
    sources = [v.split(":", 1)[0] for v in postgres["volumes"] if isinstance(v, str)]
    assert any(source in named for source in sources), "database must live in a named volume"
    assert "ports" not in postgres


def test_app_services_share_one_image_built_from_the_dockerfile(services: dict[str, Any]) -> None:
    images = {services[name]["image"] for name in APP_SERVICES}
    assert len(images) == 1
    for name in APP_SERVICES:
        build = services[name]["build"]
        assert build["context"] == "."
        assert build.get("dockerfile", "Dockerfile") == "Dockerfile"
        assert "TORCH_INDEX_URL" in (build.get("args") or {})


def test_app_services_reach_broker_and_database_with_passwords_from_files(
    services: dict[str, Any],
) -> None:
    for name in WORKERS:
        env = environment(services[name])
        assert env["AGENTIC_IQA_BROKER_URL"] == "${AGENTIC_IQA_BROKER_URL:-redis://redis:6379/0}"
        assert env["AGENTIC_IQA_RESULT_BACKEND"].endswith("redis://redis:6379/1}"), name
        assert env["AGENTIC_IQA_DATABASE_URL"] == (
            "postgresql+psycopg://agentic@postgres:5432/agentic_iqa"
        ), name
        assert env["AGENTIC_IQA_DATABASE_PASSWORD_FILE"] == "/run/secrets/postgres_password"
        assert env["AGENTIC_IQA_REDIS_PASSWORD_FILE"] == "/run/secrets/redis_password", name
        assert env["OPENAI_API_KEY_FILE"] == "/run/secrets/openai_api_key", name
        assert env["ANTHROPIC_API_KEY_FILE"] == "/run/secrets/anthropic_api_key", name
        assert "postgres_password" in services[name]["secrets"], name
        assert env["AGENTIC_IQA_WEIGHTS_DIR"] == "/models/pyiqa", name
    for name in WORKERS:
        assert set(services[name]["secrets"]) == {
            "postgres_password",
            "redis_password",
            "openai_api_key",
            "anthropic_api_key",
        }, name
    # migrate: the database alone.
    assert services["migrate"]["secrets"] == ["postgres_password"]
    assert environment(services["migrate"]) == {
        "AGENTIC_IQA_DATABASE_URL": "postgresql+psycopg://agentic@postgres:5432/agentic_iqa",
        "AGENTIC_IQA_DATABASE_PASSWORD_FILE": "/run/secrets/postgres_password",
        "AGENTIC_IQA_CONFIG_DIR": "/etc/agentic-iqa",
    }


def test_migrate_is_a_one_shot_db_upgrade_after_postgres(services: dict[str, Any]) -> None:
    migrate = services["migrate"]
    assert command(migrate) == ["db", "upgrade"]
    assert str(migrate["restart"]) == "no"
    assert depends_on(migrate)["postgres"] == "service_healthy"


@pytest.mark.parametrize("name", WORKERS)
def test_workers_wait_for_migrations_and_redis(services: dict[str, Any], name: str) -> None:
    deps = depends_on(services[name])
    assert deps["migrate"] == "service_completed_successfully"
    assert deps["redis"] == "service_healthy"
    assert command(services[name])[0] == "worker"


@pytest.mark.parametrize("name", WORKERS)
def test_workers_are_healthy_while_their_liveness_file_is_fresh(
    services: dict[str, Any], name: str
) -> None:
    worker = services[name]
    health_file = environment(worker)["AGENTIC_IQA_WORKER_HEALTH_FILE"]
    assert health_file == "/run/agentic-iqa/worker.alive"
    # A tmpfs, emptied when the container stops: a restarted worker is not healthy on the file
    # its predecessor left.
    assert worker["tmpfs"] == ["/run/agentic-iqa:size=1m,mode=0700,uid=10001,gid=10001"]
    check = worker["healthcheck"]
    assert check["test"][0] == "CMD-SHELL"
    assert check["test"][1] == (
        'test $$(( $$(date +%s) - $$(stat -c %Y "$$AGENTIC_IQA_WORKER_HEALTH_FILE") )) -lt 30'
    )
    # The file is touched every ~10 s: a few beats may be missed before it counts as unhealthy.
    assert check["interval"] == "10s" and check["retries"] >= 3


@pytest.mark.parametrize("name", WORKERS)
def test_workers_come_back_however_they_stop(services: dict[str, Any], name: str) -> None:
    """``always``: an exit 0 (the issue's bad-message probe) or a kill inside the container
    restarts the worker; `docker stop`/`kill` are manual stops (docs/deployment.md)."""
    assert services[name]["restart"] == "always"
    assert services[name]["init"] is True  # the worker is not PID 1: a kill -9 of it exits


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_every_long_running_service_has_a_healthcheck_and_a_restart_policy(
    services: dict[str, Any], name: str
) -> None:
    spec = services[name]
    assert spec.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    assert spec.get("restart") in ("always", "unless-stopped"), name


@pytest.mark.parametrize("name", [*LONG_RUNNING, "migrate"])
def test_every_service_drops_capabilities_and_has_a_memory_limit(
    services: dict[str, Any], name: str
) -> None:
    spec = services[name]
    assert spec.get("cap_drop") == ["ALL"], name
    assert not spec.get("cap_add"), name
    assert "no-new-privileges:true" in (spec.get("security_opt") or []), name
    assert re.fullmatch(r"(\$\{[A-Z_]+:-)?\d+[mg]\}?", str(spec.get("mem_limit"))), name
    assert not spec.get("privileged"), name


@pytest.mark.parametrize("name", WORKERS)
def test_workers_mount_weights_read_only(services: dict[str, Any], name: str) -> None:
    assert mounts(services[name]).get("/models/pyiqa") == "ro"


def test_default_worker_consumes_the_default_queue_on_cpu(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert option(command(worker), "--queues") == "default"
    assert option(command(worker), "--concurrency") is not None
    assert environment(worker)["AGENTIC_IQA_DEVICE"] == "cpu"
    assert not worker.get("profiles")


def test_vlm_worker_holds_64_calls_in_flight_on_the_vlm_queue(services: dict[str, Any]) -> None:
    vlm = services["vlm-worker"]
    assert not vlm.get("profiles"), "the VLM queue needs a consumer in the default stack"
    cmd = command(vlm)
    assert option(cmd, "--queues") == "${AGENTIC_IQA_VLM_QUEUE:-vlm}"
    assert option(cmd, "--pool") == "threads"
    assert option(cmd, "--concurrency") == "${VLM_WORKER_CONCURRENCY:-64}"
    for name in APP_SERVICES:  # every service that submits routes VLM steps to one queue
        if name in ("flower", "migrate"):
            continue
        env = environment(services[name])
        assert env["AGENTIC_IQA_VLM_QUEUE"] == "${AGENTIC_IQA_VLM_QUEUE:-vlm}", name
        assert env["AGENTIC_IQA_RATE_LIMIT_URL"] == "${AGENTIC_IQA_RATE_LIMIT_URL:-}", name
    # The default worker still consumes the default queue: coordination and the supervisor.
    assert option(command(services["worker"]), "--queues") == "default"


def test_default_stack_has_a_cpu_consumer_of_the_tool_queue(services: dict[str, Any]) -> None:
    cpu = services["cpu-tool-worker"]
    assert not cpu.get("profiles"), "without a GPU the tool queue still needs a consumer"
    assert option(command(cpu), "--queues") == "${AGENTIC_IQA_TOOL_QUEUE:-gpu}"
    assert environment(cpu)["AGENTIC_IQA_DEVICE"] == "cpu"
    assert environment(cpu)["AGENTIC_IQA_TOOL_QUEUE"] == "${AGENTIC_IQA_TOOL_QUEUE:-gpu}"


def test_gpu_worker_is_in_the_gpu_profile_with_an_nvidia_reservation(
    services: dict[str, Any],
) -> None:
    gpu = services["gpu-worker"]
    assert gpu["profiles"] == ["gpu"]
    assert option(command(gpu), "--queues") == "${AGENTIC_IQA_TOOL_QUEUE:-gpu}"
    assert environment(gpu)["AGENTIC_IQA_DEVICE"] == "cuda"
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    # the merge of the shared environment kept everything else
    assert (
        environment(gpu)["AGENTIC_IQA_BROKER_URL"]
        == environment(services["worker"])["AGENTIC_IQA_BROKER_URL"]
    )


def test_only_gpu_worker_is_outside_the_default_stack(services: dict[str, Any]) -> None:
    assert {name for name, spec in services.items() if spec.get("profiles")} == {"gpu-worker"}


def test_flower_gets_its_credentials_from_a_secret_and_nothing_else(
    services: dict[str, Any],
) -> None:
    """`agentic-iqa flower` (the image's entry point) refuses to start without credentials;
    its container holds the broker's URL and password and its own login, and no database,
    API key or image folder."""
    flower = services["flower"]
    assert "entrypoint" not in flower
    cmd = command(flower)
    assert cmd[0] == "flower"
    assert option(cmd, "--port") == "5555"
    assert not any("auth" in part for part in cmd), "a password on the command line shows in `ps`"
    assert environment(flower) == {
        "AGENTIC_IQA_BROKER_URL": "${AGENTIC_IQA_BROKER_URL:-redis://redis:6379/0}",
        "AGENTIC_IQA_REDIS_PASSWORD_FILE": "/run/secrets/redis_password",
        "AGENTIC_IQA_FLOWER_AUTH_FILE": "/run/secrets/flower_auth",
    }
    assert sorted(flower["secrets"]) == ["flower_auth", "redis_password"]
    assert flower["volumes"] == []
    assert flower["ports"] == ["${FLOWER_BIND:-127.0.0.1}:${FLOWER_PORT:-5555}:5555"]
    assert depends_on(flower)["redis"] == "service_healthy"


def test_no_secret_in_any_environment_or_url(compose: dict[str, Any]) -> None:
    """What `docker inspect` would show: every sensitive variable of every service names a
    file under /run/secrets (a secret the service mounts), never a value or a ${...} that
    compose would fill in; no URL anywhere carries a password."""
    declared = set(compose["secrets"])
    for name, spec in compose["services"].items():
        mounted = set(spec.get("secrets") or [])
        assert mounted <= declared, (name, mounted - declared)
        for key, value in environment(spec).items():
            if not SENSITIVE.search(key):
                continue
            assert key.endswith("_FILE"), f"{name}: {key} would put a secret in the environment"
            secret = (value or "").removeprefix("/run/secrets/")
            assert secret in mounted, f"{name}: {key}={value} is not a secret it mounts"
    for path, value in walk(compose):
        if isinstance(value, str):
            assert not URL_CREDENTIALS.findall(value), f"{path}: credentials in a URL"


def test_every_secret_is_a_file_the_secrets_script_makes(compose: dict[str, Any]) -> None:
    assert set(compose["secrets"]) == set(SECRETS)
    script = STACK_SECRETS.read_text(encoding="utf-8")
    for name, spec in compose["secrets"].items():
        assert spec == {"file": f"${{SECRETS_DIR:-./secrets}}/{name}.txt"}, name
        assert re.search(rf"^write {name} ", script, re.MULTILINE), name


def test_the_secrets_script_makes_private_random_files_and_keeps_them(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    env = {**os.environ, "SECRETS_DIR": str(folder), "OPENAI_API_KEY": "sk-from-the-shell"}
    env.pop("ANTHROPIC_API_KEY", None)
    first = subprocess.run(
        ["bash", str(STACK_SECRETS)], env=env, capture_output=True, text=True, timeout=60
    )
    assert first.returncode == 0, first.stderr
    values = {name: (folder / f"{name}.txt").read_text() for name in SECRETS}
    assert len(values["postgres_password"].strip()) == 48
    assert values["postgres_password"] != values["redis_password"]
    assert re.fullmatch(r"admin:[0-9a-f]{48}\n", values["flower_auth"])
    assert values["openai_api_key"] == "sk-from-the-shell\n"
    assert values["anthropic_api_key"] == "\n"
    assert folder.stat().st_mode & 0o777 == 0o700
    for value in values.values():  # no secret on the script's output
        assert not value.strip() or value.strip() not in first.stdout + first.stderr
    again = subprocess.run(
        ["bash", str(STACK_SECRETS)], env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0
    assert {name: (folder / f"{name}.txt").read_text() for name in SECRETS} == values


# --- .env.example ---------------------------------------------------------------------------------


def env_example_names() -> set[str]:
    names = set()
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\s*#?\s*([A-Za-z_][A-Za-z0-9_]*)=", line)
        if match:
            names.add(match.group(1))
    return names


def test_env_example_documents_every_variable_the_compose_file_reads(
    compose: dict[str, Any],
) -> None:
    used = set(INTERPOLATED.findall(COMPOSE.read_text(encoding="utf-8")))
    # environment entries without a value are passed through from .env / the shell
    for spec in compose["services"].values():
        used |= {name for name, value in environment(spec).items() if value is None}
    missing = sorted(used - env_example_names())
    assert not missing, f".env.example does not document {missing}"


def test_env_example_sets_no_secret() -> None:
    """Secrets are files (SECRETS_DIR), never .env lines: not even an empty one to fill in."""
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("#") or "=" not in line:
            continue
        name, _, _ = line.partition("=")
        assert not SENSITIVE.search(name) or name == "SECRETS_DIR", name


def test_env_example_documents_the_app_settings_compose_fixes() -> None:
    names = env_example_names()
    for variable in ("AGENTIC_IQA_DATABASE_URL", "SECRETS_DIR"):
        assert variable in names, variable
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    for variable in ("AGENTIC_IQA_WEIGHTS_DIR", "AGENTIC_IQA_DEVICE"):
        assert variable in text, variable


# --- Dockerfile and .dockerignore -----------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text(encoding="utf-8")
    logical = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    result = []
    for line in logical.splitlines():
        if line.strip():
            instruction, _, rest = line.strip().partition(" ")
            result.append((instruction.upper(), rest.strip()))
    return result


def stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's instructions, one list per build stage (FROM first)."""
    result: list[list[tuple[str, str]]] = []
    for kind, rest in dockerfile_instructions():
        if kind == "FROM":
            result.append([])
        result[-1].append((kind, rest))
    return result


def test_dockerfile_basics() -> None:
    *builders, final = stages()
    assert final[0] == ("FROM", "python:3.11-slim")
    assert [stage[0] for stage in builders] == [
        ("FROM", "python:3.11-slim AS requirements"),
        ("FROM", "python:3.11-slim AS deps"),
        ("FROM", "deps AS wheel"),
    ]
    by_kind: dict[str, list[str]] = {}
    for kind, rest in final:
        by_kind.setdefault(kind, []).append(rest)
    assert by_kind["ENTRYPOINT"] == ['["agentic-iqa"]']
    assert by_kind["CMD"] == ['["--help"]']
    assert by_kind["USER"] and by_kind["USER"][-1] not in ("root", "0")
    assert any(re.search(r"\bHF_HUB_OFFLINE=1\b", env) for env in by_kind["ENV"])
    args = [rest for kind, rest in builders[1] if kind == "ARG"]
    assert any(arg.startswith("TORCH_INDEX_URL") for arg in args)
    assert any(arg.startswith('TORCH_REQUIREMENTS="torch==') for arg in args)


def test_the_dependency_layer_is_built_from_pyproject_alone() -> None:
    """The deps stage installs the list the requirements stage reads from pyproject.toml (and
    copies nothing else but the build-time inputs): a README or source edit, or one of
    pyproject.toml outside [project].dependencies, must not reinstall torch."""
    requirements, deps = stages()[:2]
    assert [rest for kind, rest in requirements if kind == "COPY"] == [
        "pyproject.toml /tmp/project/"
    ]
    assert "['project']['dependencies']" in " ".join(r for k, r in requirements if k == "RUN")
    install = next(
        index for index, (kind, rest) in enumerate(deps) if kind == "RUN" and "-r " in rest
    )
    assert [rest for kind, rest in deps[:install] if kind == "COPY"] == [
        "docker/local/ /tmp/local/",
        "docker/torchvision_without_ops.py /tmp/",
        "--from=requirements /tmp/requirements.txt /tmp/",
    ]


def test_the_image_keeps_one_opencv_and_no_test_tools() -> None:
    deps = " ".join(rest for kind, rest in stages()[1] if kind == "RUN")
    assert "pip uninstall -y -q opencv-python opencv-python-headless" in deps
    assert 'pip install --no-deps "opencv-python-headless==$version"' in deps
    uninstall = re.search(r"pip uninstall -y -q (pytest[^&]*)&&", deps)
    assert uninstall, "the test tools pyiqa pulls in are not removed"
    for tool in ("pytest", "ruff", "yapf", "pre-commit", "virtualenv"):
        assert tool in uninstall.group(1).split(), tool
    final = " ".join(rest for kind, rest in stages()[-1] if kind == "RUN")
    assert "libgl1" not in final, "libGL is for the GUI OpenCV, which the image does not keep"
    assert "requirements" not in final and "--no-deps" in final


def test_the_image_user_has_a_writable_default_database() -> None:
    """`docker run --rm agentic-iqa:latest assess ...` (the README's first command) stores its
    run in a folder the image's user owns, declared a volume; compose overrides the URL."""
    final = stages()[-1]
    text = " ".join(rest for _, rest in final)
    assert "install -d -o app -g app -m 0750 /var/lib/agentic-iqa" in text
    assert ("VOLUME", '["/var/lib/agentic-iqa"]') in final
    assert (
        "ENV",
        "AGENTIC_IQA_DATABASE_URL=sqlite:////var/lib/agentic-iqa/agentic-iqa.sqlite3",
    ) in final
    kinds = [kind for kind, _ in final]
    assert kinds.index("VOLUME") < kinds.index("USER")


def copied_sources() -> list[str]:
    sources = []
    for kind, rest in dockerfile_instructions():
        if kind == "COPY" and not rest.startswith("--from"):
            sources += [part for part in rest.split()[:-1] if not part.startswith("--")]
    return sources


def test_every_path_the_dockerfile_copies_exists_and_is_not_dockerignored() -> None:
    sources = copied_sources()
    for required in (
        "pyproject.toml",
        "README.md",
        "docker/local/",
        "agentic_iqa",
        "iqa_tools",
        "workers",
        "configs",
        "migrations",
        "alembic.ini",
        "examples",
    ):
        assert required in sources, required
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "!"))
    ]
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: not in the repository, the build fails"
        ignored = [p for p in patterns if fnmatch.fnmatch(source, p.lstrip("/"))]
        assert not ignored, f"COPY {source} is excluded by .dockerignore {ignored}"


# --- the wheel the image installs -----------------------------------------------------------------

#: Package folders and where the wheel must hold the data files the code reads at run time.
PACKAGES = ("agentic_iqa", "iqa_tools", "workers")
#: Folders of the checkout that the wheel carries inside the package (force-include).
FORCE_INCLUDED = {"migrations": "agentic_iqa/migrations", "configs": "agentic_iqa/configs"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from the checkout as the Dockerfile's ``pip install .`` builds it.

    The build backend (hatchling) comes from the package index through pip's build isolation,
    as in CI's ``pip install -e``; where hatchling is already installed it is used offline.
    """
    import importlib.util

    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out)]
    if importlib.util.find_spec("hatchling") is not None:
        command.append("--no-build-isolation")
    result = subprocess.run(
        [*command, str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        check=False,
    )
    assert result.returncode == 0, f"building the wheel failed:\n{result.stderr[-3000:]}"
    (built,) = out.glob("agentic_iqa-*.whl")
    return built


def package_files(folder: Path) -> set[str]:
    """Every file of a source folder (caches left out), relative to the folder."""
    return {
        str(path.relative_to(folder))
        for path in folder.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix not in {".pyc", ".pyo"}
    }


@pytest.mark.slow
def test_the_wheel_holds_every_module_data_file_migration_and_config(wheel: Path) -> None:
    """Everything the code reads from beside itself ships: Alembic's env.py, script template and
    every version script under agentic_iqa/migrations, the YAML configs under
    agentic_iqa/configs, the tool catalogue (tools.json) and the builtin backend's opinion.json,
    and the console script's entry point."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(
            archive.read(name).decode()
            for name in names
            if name.endswith(".dist-info/entry_points.txt")
        )
    for package in PACKAGES:
        missing = {f"{package}/{name}" for name in package_files(REPO / package)} - names
        assert not missing, f"the wheel lacks {sorted(missing)}"
    for source, target in FORCE_INCLUDED.items():
        expected = {f"{target}/{name}" for name in package_files(REPO / source)}
        assert expected, source
        assert not expected - names, f"the wheel lacks {sorted(expected - names)}"
    versions = {
        name for name in names if re.fullmatch(r"agentic_iqa/migrations/versions/[^/]+\.py", name)
    }
    assert len(versions) == len(list((REPO / "migrations" / "versions").glob("*.py"))) > 0
    for required in (
        "agentic_iqa/migrations/env.py",
        "agentic_iqa/migrations/script.py.mako",
        "agentic_iqa/configs/pipeline.yaml",
        "agentic_iqa/configs/tools.yaml",
        "agentic_iqa/configs/model_backends.yaml",
        "iqa_tools/metadata/tools.json",
        "agentic_iqa/vlm/builtin/opinion.json",
        "workers/celery_app.py",
        "workers/tasks.py",
    ):
        assert required in names, required
    assert not [name for name in names if name.startswith(("tests/", "migrations/", "configs/"))], (
        "test code or top-level copies of the data folders in the wheel"
    )
    assert re.search(r"^agentic-iqa\s*=\s*agentic_iqa\.cli:app\s*$", entry_points, re.MULTILINE)


#: Run by the installed copy: where everything it uses was found, as JSON.
_WHERE = """
import json, sys
import agentic_iqa, iqa_tools, workers.celery_app
from agentic_iqa.config import config_dir
from agentic_iqa.db.engine import migrations_dir
from agentic_iqa.vlm.builtin.opinion import WEIGHTS_FILE, default_model
default_model()
print(json.dumps({"modules": [agentic_iqa.__file__, iqa_tools.__file__,
                              workers.celery_app.__file__],
                  "migrations": str(migrations_dir()), "configs": str(config_dir()),
                  "opinion": str(WEIGHTS_FILE), "path": sys.path}))
"""


@pytest.mark.slow
def test_the_installed_wheel_carries_the_migrations(wheel: Path, tmp_path: Path) -> None:
    """The image installs a regular wheel: `agentic-iqa db upgrade` (the migrate service) must
    find the Alembic scripts inside the installed package, with no checkout to fall back on.

    The wheel goes into a folder of its own (``pip install --target``), run by a fresh
    interpreter (a venv without pip) whose path is that folder, then this environment's
    site-packages for the dependencies: that folder's .pth files, among them the editable
    install's pointer to the checkout, are not read, and the commands run from a folder
    outside the checkout.
    """
    import sysconfig

    import sqlalchemy

    from agentic_iqa.db.engine import script_heads

    target = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    script = target / "bin" / "agentic-iqa"
    assert script.is_file(), "the wheel installs no agentic-iqa console script"
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = str(venv / "bin" / "python")
    dependencies = dict.fromkeys(
        [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    )
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AGENTIC_IQA_", "PYTHON"))
    }
    env["PYTHONPATH"] = os.pathsep.join([str(target), *dependencies])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, *args],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    where = run("-c", _WHERE)
    assert where.returncode == 0, where.stderr[-3000:]
    found = json.loads(where.stdout)
    for path in [*found["modules"], found["migrations"], found["configs"], found["opinion"]]:
        assert Path(path).resolve().is_relative_to(target.resolve()), path
        assert Path(path).exists(), path
    assert (Path(found["configs"]) / "pipeline.yaml").is_file(), found["configs"]
    checkout = [entry for entry in found["path"] if (elsewhere / entry).resolve() == REPO]
    assert not checkout, f"the checkout is on the installed copy's import path: {checkout}"

    database = elsewhere / "fresh.sqlite3"
    upgrade = run(str(script), "db", "upgrade", "--url", f"sqlite:///{database}")
    assert upgrade.returncode == 0, upgrade.stderr[-3000:]
    engine = sqlalchemy.create_engine(f"sqlite:///{database}")
    try:
        tables = set(sqlalchemy.inspect(engine).get_table_names())
        with engine.connect() as connection:
            revisions = set(
                connection.execute(
                    sqlalchemy.text("SELECT version_num FROM alembic_version")
                ).scalars()
            )
    finally:
        engine.dispose()
    assert {
        "runs",
        "step_records",
        "tool_logs",
        "replan_history",
        "jobs",
        "job_items",
        "alembic_version",
    } <= tables
    assert revisions == script_heads(REPO / "migrations")
    # The tool catalogue and configs load from the installed copy too.
    tools = run(str(script), "tools", "list", "--json")
    assert tools.returncode == 0, tools.stderr[-3000:]
    assert {row["name"] for row in json.loads(tools.stdout)} >= {"PIQE", "NIQE", "SSIM"}


def test_dockerignore_keeps_secrets_and_bulk_out_of_the_build_context() -> None:
    patterns = set(DOCKERIGNORE.read_text(encoding="utf-8").split())
    for pattern in (".env", ".git", ".venv", "models", "data", "tests", "secrets"):
        assert pattern in patterns, pattern


# --- docker compose config (where a client is installed) ------------------------------------------


def compose_command() -> list[str]:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client on this machine")
    try:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"docker compose version failed: {exc}")
    if probe.returncode != 0:
        pytest.skip(
            "the docker client has no Compose plugin: "
            + (probe.stderr.strip() or probe.stdout.strip()).splitlines()[0][:200]
        )
    return [
        docker,
        "compose",
        "--project-directory",
        str(REPO),
        "-f",
        str(COMPOSE),
        "--env-file",
        str(ENV_EXAMPLE),
    ]


def run_compose(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    base = compose_command()
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTIC_IQA_", "POSTGRES_", "FLOWER_", "COMPOSE_"))
    }
    clean.pop("SECRETS_DIR", None)
    return subprocess.run(
        [*base, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **env},
        cwd=REPO,
        check=False,
    )


@pytest.mark.parametrize("profile", [[], ["--profile", "gpu"]], ids=["default", "gpu"])
def test_docker_compose_config_accepts_the_file(profile: list[str], tmp_path: Path) -> None:
    made = subprocess.run(
        ["bash", str(STACK_SECRETS)],
        env={**os.environ, "SECRETS_DIR": str(tmp_path)},
        capture_output=True,
        timeout=60,
    )
    assert made.returncode == 0
    result = run_compose([*profile, "config", "--format", "json"], SECRETS_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)  # JSON is YAML
    services = set(config["services"])
    assert {
        "redis",
        "postgres",
        "migrate",
        "worker",
        "vlm-worker",
        "cpu-tool-worker",
        "flower",
    } <= services
    assert ("gpu-worker" in services) == bool(profile)
    worker_env = config["services"]["worker"]["environment"]
    assert worker_env["AGENTIC_IQA_DATABASE_URL"] == (
        "postgresql+psycopg://agentic@postgres:5432/agentic_iqa"
    )
    for name in SECRETS:  # the resolved configuration names the files, never their content
        assert config["secrets"][name]["file"] == str(tmp_path / f"{name}.txt")
        value = (tmp_path / f"{name}.txt").read_text().strip()
        assert not value or value not in result.stdout, name
