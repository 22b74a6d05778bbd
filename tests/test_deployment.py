"""The Docker deployment files: docker-compose.yml, Dockerfile, .env.example, .dockerignore.

CI has no Docker engine, so the stack is never started here. The compose file is checked as data
(PyYAML) against what docs/deployment.md promises, and with ``docker compose config`` where a
Docker client with the Compose plugin is installed (that command needs no engine).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import tomllib
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
    expected = {"redis", "postgres", "migrate", "worker", "vlm-worker", "cpu-tool-worker",
                "gpu-worker", "flower"}
    assert expected <= set(services)


def test_redis_is_7_alpine_with_a_ping_healthcheck(services: dict[str, Any]) -> None:
    redis = services["redis"]
    assert redis["image"] == "redis:7-alpine"
    test = redis["healthcheck"]["test"]
    assert "redis-cli ping" in (test if isinstance(test, str) else " ".join(test))
    assert "ports" not in redis, "the broker must not be published on the host"


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
    assert (env["POSTGRES_PASSWORD"] or "").startswith("${POSTGRES_PASSWORD:?")
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


def test_app_services_reach_broker_database_and_tool_cache(services: dict[str, Any]) -> None:
    for name in APP_SERVICES:
        env = environment(services[name])
        assert env["AGENTIC_IQA_BROKER_URL"].endswith("redis://redis:6379/0}"), name
        assert env["AGENTIC_IQA_RESULT_BACKEND"].endswith("redis://redis:6379/1}"), name
        assert env["AGENTIC_IQA_TOOL_CACHE"].endswith("redis://redis:6379/2}"), name
        database = env["AGENTIC_IQA_DATABASE_URL"]
        assert database.startswith("postgresql+psycopg://agentic:${POSTGRES_PASSWORD"), name
        assert database.endswith("@postgres:5432/agentic_iqa"), name
        assert env["AGENTIC_IQA_WEIGHTS_DIR"] == "/models/pyiqa", name


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
    for name in APP_SERVICES:  # every service routes VLM steps to the same queue
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
    assert environment(gpu)["AGENTIC_IQA_BROKER_URL"] == environment(
        services["worker"]
    )["AGENTIC_IQA_BROKER_URL"]


def test_only_gpu_worker_is_outside_the_default_stack(services: dict[str, Any]) -> None:
    assert {name for name, spec in services.items() if spec.get("profiles")} == {"gpu-worker"}


def test_flower_has_basic_auth_from_the_environment(services: dict[str, Any]) -> None:
    flower = services["flower"]
    cmd = [*flower.get("entrypoint", []), *command(flower)]
    assert cmd[:3] == ["celery", "-A", "workers.celery_app:app"]
    assert "flower" in cmd
    auth = environment(flower)["FLOWER_BASIC_AUTH"]
    assert re.fullmatch(r"\$\{FLOWER_USER(:-[^}]*)?\}:\$\{FLOWER_PASSWORD:\?[^}]+\}", auth), auth
    assert not any("basic-auth" in part or "basic_auth" in part for part in cmd), (
        "a password on the command line shows in `ps`"
    )
    assert any(str(port).endswith(":5555") for port in flower["ports"])
    assert depends_on(flower)["redis"] == "service_healthy"


def test_no_literal_secret_in_the_compose_file(compose: dict[str, Any]) -> None:
    for path, value in walk(compose):
        key = path.rsplit(".", 1)[-1]
        if value is None or not isinstance(value, str):
            if SENSITIVE.search(key):
                # null = passed through from the environment when set; a number is a literal
                assert value is None, f"{path} holds a literal {value!r}"
            continue
        if SENSITIVE.search(key):
            assert REFERENCES_ONLY.match(value), f"{path} must be a ${{...}} reference"
        for password in URL_CREDENTIALS.findall(value):
            assert REFERENCES_ONLY.match(password), f"{path}: credentials in a URL literal"


def test_required_secrets_fail_loudly_when_unset() -> None:
    text = COMPOSE.read_text(encoding="utf-8")
    for variable in ("POSTGRES_PASSWORD", "FLOWER_PASSWORD"):
        references = re.findall(r"\$\{" + variable + r"([^}]*)\}", text)
        assert references, variable
        assert all(ref.startswith(":?") for ref in references), (variable, references)


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


def test_env_example_holds_no_secret() -> None:
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        if SENSITIVE.search(name):
            assert value.strip() == "", f"{name} must be empty in .env.example"


def test_env_example_documents_the_app_settings_compose_fixes() -> None:
    names = env_example_names()
    for variable in ("AGENTIC_IQA_DATABASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        assert variable in names, variable
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    for variable in ("AGENTIC_IQA_WEIGHTS_DIR", "AGENTIC_IQA_DEVICE"):
        assert variable in text, variable


# --- Dockerfile and .dockerignore -----------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text(encoding="utf-8")
    logical = re.sub(r"\\\n", " ", "\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith("#")
    ))
    result = []
    for line in logical.splitlines():
        if line.strip():
            instruction, _, rest = line.strip().partition(" ")
            result.append((instruction.upper(), rest.strip()))
    return result


def test_dockerfile_basics() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    by_kind: dict[str, list[str]] = {}
    for kind, rest in instructions:
        by_kind.setdefault(kind, []).append(rest)
    assert by_kind["ENTRYPOINT"] == ['["agentic-iqa"]']
    assert by_kind["CMD"] == ['["--help"]']
    assert by_kind["USER"] and by_kind["USER"][-1] not in ("root", "0")
    assert any(re.search(r"\bHF_HUB_OFFLINE=1\b", env) for env in by_kind["ENV"])
    assert any(arg.startswith("TORCH_INDEX_URL") for arg in by_kind["ARG"])
    run = " ".join(by_kind["RUN"])
    for package in ("libgl1", "libglib2.0-0", "curl"):
        assert package in run, package


def copied_sources() -> list[str]:
    sources = []
    for kind, rest in dockerfile_instructions():
        if kind == "COPY" and not rest.startswith("--from"):
            sources += [part for part in rest.split()[:-1] if not part.startswith("--")]
    return sources


def test_every_path_the_dockerfile_copies_exists_and_is_not_dockerignored() -> None:
    sources = copied_sources()
    for required in ("pyproject.toml", "README.md", "agentic_iqa", "iqa_tools", "workers",
                     "configs", "migrations", "alembic.ini", "examples"):
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


def test_the_installed_wheel_carries_the_migrations() -> None:
    """The image installs a regular wheel: `agentic-iqa db upgrade` (the migrate service) finds
    the Alembic scripts only inside the installed package, not in a checkout beside it."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
    force_include = wheel.get("force-include") or {}
    in_package = (REPO / "agentic_iqa" / "migrations" / "env.py").is_file()
    assert in_package or force_include.get("migrations") == "agentic_iqa/migrations", (
        "pyproject.toml must ship migrations/ in the wheel as agentic_iqa/migrations "
        "([tool.hatch.build.targets.wheel.force-include])"
    )


def test_dockerignore_keeps_secrets_and_bulk_out_of_the_build_context() -> None:
    patterns = set(DOCKERIGNORE.read_text(encoding="utf-8").split())
    for pattern in (".env", ".git", ".venv", "models", "data", "tests"):
        assert pattern in patterns, pattern


# --- docker compose config (where a client is installed) ------------------------------------------


def compose_command() -> list[str]:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client on this machine")
    try:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True,
                               timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"docker compose version failed: {exc}")
    if probe.returncode != 0:
        pytest.skip("the docker client has no Compose plugin: "
                    + (probe.stderr.strip() or probe.stdout.strip()).splitlines()[0][:200])
    return [docker, "compose", "--project-directory", str(REPO), "-f", str(COMPOSE),
            "--env-file", str(ENV_EXAMPLE)]


def run_compose(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    base = compose_command()
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("AGENTIC_IQA_", "POSTGRES_", "FLOWER_", "COMPOSE_"))}
    return subprocess.run([*base, *args], capture_output=True, text=True, timeout=120,
                          env={**clean, **env}, cwd=REPO, check=False)


@pytest.mark.parametrize("profile", [[], ["--profile", "gpu"]], ids=["default", "gpu"])
def test_docker_compose_config_accepts_the_file(profile: list[str]) -> None:
    result = run_compose([*profile, "config", "--format", "json"],
                         POSTGRES_PASSWORD="test-only", FLOWER_PASSWORD="test-only")
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)  # JSON is YAML
    services = set(config["services"])
    assert {"redis", "postgres", "migrate", "worker", "vlm-worker", "cpu-tool-worker",
            "flower"} <= services
    assert ("gpu-worker" in services) == bool(profile)
    worker_env = config["services"]["worker"]["environment"]
    assert worker_env["AGENTIC_IQA_DATABASE_URL"] == (
        "postgresql+psycopg://agentic:test-only@postgres:5432/agentic_iqa"
    )


def test_docker_compose_config_refuses_a_missing_password() -> None:
    result = run_compose(["config", "--quiet"], FLOWER_PASSWORD="test-only")
    assert result.returncode != 0
    assert "POSTGRES_PASSWORD" in result.stderr
