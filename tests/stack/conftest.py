"""The stack test's driver: the project's own docker-compose.yml, run by Docker Compose.

:class:`Stack` runs ``docker compose`` with the project's file and an override of the test's
own (host network for the image build, a shorter liveness interval for the tool worker), a
project name of its own, and the test's secrets, images and weight files in temporary folders;
everything else is the file as a user runs it. Nothing is mocked: the image is built from the
Dockerfile, the services talk over compose's network, the test reaches Flower and the
containers over loopback and ``docker compose exec``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
T = TypeVar("T")


def services_required() -> bool:
    return os.environ.get("AGENTIC_IQA_TEST_REQUIRE_SERVICES", "") not in {"", "0", "false"}


def docker_or_skip() -> str:
    """Return the docker client when it and its Compose plugin answer an engine; else skip
    (fail in CI, where .ci/run has started them)."""
    docker = shutil.which("docker")
    problem = None
    if docker is None:
        problem = "no docker client"
    else:
        for args in (["info"], ["compose", "version"]):
            probe = subprocess.run(
                [docker, *args], capture_output=True, text=True, timeout=60, check=False
            )
            if probe.returncode != 0:
                problem = f"`docker {' '.join(args)}` failed: {probe.stderr.strip()[:200]}"
                break
    if problem:
        message = f"{problem}: run scripts/stack/engine.sh (as .ci/run does)"
        if services_required():
            pytest.fail(message)
        pytest.skip(message)
    assert docker is not None
    return docker


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 1) -> T:
    """Return ``probe()``'s first truthy value; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    pytest.fail(f"{what}: not within {timeout:.0f} s (last: {last!r})")


@dataclass
class Stack:
    """One compose project of the project's docker-compose.yml and the test's override."""

    docker: str
    project: str
    override: Path
    env: dict[str, str]
    secrets: dict[str, str] = field(default_factory=dict)
    leftovers: set[str] = field(default_factory=set)
    timings: dict[str, float] = field(default_factory=dict)

    def compose(
        self, *args: str, check: bool = True, timeout: float = 600, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        command = [
            self.docker,
            "compose",
            "--project-directory",
            str(REPO),
            "-p",
            self.project,
            "-f",
            str(COMPOSE),
            "-f",
            str(self.override),
            *args,
        ]
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            cwd=REPO,
            input=input,
            check=False,
        )
        if check and result.returncode != 0:
            pytest.fail(
                f"docker compose {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        return result

    def timed(self, name: str, *args: str, timeout: float = 600) -> None:
        started = time.monotonic()
        self.compose(*args, timeout=timeout)
        self.timings[name] = time.monotonic() - started

    def run(self, service: str, *command: str, check: bool = True) -> str:
        """Run ``command`` in ``service``'s running container; its stdout."""
        result = self.compose("exec", "-T", service, *command, check=check, timeout=300)
        return result.stdout

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``agentic-iqa ARGS`` in the default worker's container."""
        return self.compose("exec", "-T", "worker", "agentic-iqa", *args, check=check)

    def sql(self, query: str) -> list[list[str]]:
        """Rows of ``query`` in the stack's PostgreSQL (over its local socket)."""
        out = self.run(
            "postgres", "psql", "-U", "agentic", "-d", "agentic_iqa", "-At", "-F", "\t", "-c", query
        )
        return [line.split("\t") for line in out.splitlines() if line]

    def container(self, service: str) -> str:
        ids = self.compose("ps", "-q", service).stdout.split()
        assert len(ids) == 1, f"{service}: {ids}"
        return ids[0]

    def containers(self) -> list[str]:
        """Every container of the project, running or exited."""
        result = subprocess.run(
            [
                self.docker,
                "ps",
                "-aq",
                "--filter",
                f"label=com.docker.compose.project={self.project}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return result.stdout.split()

    def anonymous_volumes(self) -> set[str]:
        """The unnamed volumes (the images' VOLUMEs) of the project's containers: a ``down``
        without ``-v`` leaves them, so the test collects them to remove at its end."""
        found = set()
        for container in self.containers():
            for mount in self.inspect(container).get("Mounts") or []:
                name = str(mount.get("Name") or "")
                if mount.get("Type") == "volume" and not name.startswith(self.project):
                    found.add(name)
        return found

    def inspect(self, container: str) -> dict[str, Any]:
        result = subprocess.run(
            [self.docker, "inspect", container],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        (info,) = json.loads(result.stdout)
        return info

    def inspect_text(self, container: str) -> str:
        return json.dumps(self.inspect(container))
