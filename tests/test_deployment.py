"""The Docker deployment files: docker-compose.yml, Dockerfile, .env.example, .dockerignore.

CI has no Docker engine, so the stack is never started here. The compose file is checked as data
(PyYAML) against what docs/deployment.md promises, and with ``docker compose config`` where a
Docker client with the Compose plugin is installed (that command needs no engine).
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
    assert (
        environment(gpu)["AGENTIC_IQA_BROKER_URL"]
        == environment(services["worker"])["AGENTIC_IQA_BROKER_URL"]
    )


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
    for required in (
        "pyproject.toml",
        "README.md",
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
    for pattern in (".env", ".git", ".venv", "models", "data", "tests"):
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
def test_docker_compose_config_accepts_the_file(profile: list[str]) -> None:
    result = run_compose(
        [*profile, "config", "--format", "json"],
        POSTGRES_PASSWORD="test-only",
        FLOWER_PASSWORD="test-only",
    )
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
        "postgresql+psycopg://agentic:test-only@postgres:5432/agentic_iqa"
    )


def test_docker_compose_config_refuses_a_missing_password() -> None:
    result = run_compose(["config", "--quiet"], FLOWER_PASSWORD="test-only")
    assert result.returncode != 0
    assert "POSTGRES_PASSWORD" in result.stderr
